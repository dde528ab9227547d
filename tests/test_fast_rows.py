"""The fast path's row kernels (ops/fast/rows.py) and masked fill (ops/fast/where.py) give the lesson's numbers.

Each case runs the same op on both paths, forward and gradient, including the inputs that make the fast
kernels fall back (logits that overflow ``exp``, rows far below zero, odd row widths, reductions along another
axis, a mask that must broadcast the other way) and that the fast kernels really run when they should.
"""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet.ops.fast import rows


def both_paths(fn):
    """``fn()`` on the lesson path and on the fast path, as NumPy arrays."""
    results = []
    for fast in (False, True):
        with flow.set_fast_path(fast):
            results.append([r.numpy() if hasattr(r, "numpy") else r for r in fn()])
    return results


def causal_scores(scale, shift, width=64, seed=0):
    rng = np.random.default_rng(seed)
    scores = (rng.standard_normal((2, 3, width, width)) * scale + shift).astype(np.float32)
    scores[..., np.triu(np.ones((width, width), bool), 1)] = -np.inf
    return scores


@pytest.mark.parametrize("scale, shift", [(1, 0), (40, 0), (1, -80), (1, 100), (3, 5)],
                         ids=["ordinary", "overflowing exp", "rows far below 0", "rows far above 0", "wide"])
@pytest.mark.parametrize("width", [64, 7, 1])
def test_softmax_and_its_gradient_match_the_lesson(scale, shift, width):
    scores, grad = causal_scores(scale, shift, width), np.random.default_rng(1).standard_normal((2, 3, width, width))

    def run():
        x = flow.tensor(scores, requires_grad=True)
        y = flow.softmax(x, dim=-1)
        (y * flow.tensor(grad.astype(np.float32))).sum().backward()
        return y, x.grad
    (lesson_y, lesson_g), (fast_y, fast_g) = both_paths(run)
    assert np.isfinite(fast_y).all() and np.isfinite(fast_g).all()
    np.testing.assert_allclose(fast_y, lesson_y, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(fast_g, lesson_g, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("shift", [0.0, 200.0, -200.0])
def test_log_softmax_and_cross_entropy_match_the_lesson(shift):
    rng = np.random.default_rng(2)
    logits = (rng.standard_normal((33, 103)) * 3 + shift).astype(np.float32)
    target = rng.integers(0, 103, 33)

    def run():
        x = flow.tensor(logits, requires_grad=True)
        loss = flow.nn.functional.cross_entropy(x, flow.tensor(target))
        loss.backward()
        return flow.log_softmax(x, dim=-1), loss, x.grad
    lesson, fast = both_paths(run)
    for a, b in zip(fast, lesson):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_the_row_helpers_are_exact_on_odd_widths_and_fall_back_along_other_axes():
    rng = np.random.default_rng(3)
    for width in (1, 2, 3, 5, 63, 64, 65, 103):
        a = rng.standard_normal((4, 6, width)).astype(np.float32)
        assert np.array_equal(rows.row_max(np, a), a.max(-1, keepdims=True))
        np.testing.assert_allclose(rows.row_sum(np, a), a.sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    assert rows.along_last_rows(a, -1) and rows.along_last_rows(a, 1)
    assert not rows.along_last_rows(a, 0) and not rows.along_last_rows(a.T, -1)
    assert not rows.along_last_rows(a.astype(np.int64), -1)
    (lesson,), (fast,) = both_paths(lambda: [flow.softmax(flow.tensor(a), dim=0)])
    np.testing.assert_allclose(fast, lesson, rtol=1e-6)


def test_the_fast_softmax_skips_the_maximum_only_when_it_is_safe(monkeypatch):
    calls = []
    monkeypatch.setattr(rows, "row_max", lambda xp, a: calls.append(a.shape) or a.max(-1, keepdims=True))
    with flow.set_fast_path(True):
        flow.softmax(flow.tensor(causal_scores(1, 0)), dim=-1)
        assert calls == []
        flow.softmax(flow.tensor(causal_scores(40, 0)), dim=-1)       # exp overflows: shift by the maximum
        flow.softmax(flow.tensor(causal_scores(1, -80)), dim=-1)      # every exp underflows: shift too
    assert len(calls) == 2


@pytest.mark.parametrize("value", [float("-inf"), 0.0, 3])
def test_a_masked_fill_and_its_gradient_match_the_lesson(value):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    mask = np.triu(np.ones((5, 5), bool), 1)

    def run():
        t = flow.tensor(x, requires_grad=True)
        filled = t.masked_fill(flow.tensor(mask), value)
        (flow.where(filled > -1e30, filled, 0.0) * 2).sum().backward()
        return filled, t.grad
    (lesson_y, lesson_g), (fast_y, fast_g) = both_paths(run)
    assert np.array_equal(fast_y, lesson_y) and fast_y.dtype == lesson_y.dtype == np.float32
    assert np.array_equal(fast_g, lesson_g)


def test_the_fast_where_leaves_other_forms_to_the_lesson():
    """A mask wider than the array, two arrays, or an integer array: NumPy's where, as on the lesson path."""
    rng = np.random.default_rng(5)
    wide_mask = rng.random((3, 4)) > 0.5
    row = rng.standard_normal(4).astype(np.float32)
    ints = np.arange(4)
    for args in [(wide_mask, 1.0, row), (wide_mask, row, row * 2), (wide_mask[0], 7, ints)]:
        (lesson,), (fast,) = both_paths(lambda: [flow.where(*(flow.tensor(a) if isinstance(a, np.ndarray) else a
                                                              for a in args))])
        assert np.array_equal(fast, lesson) and fast.dtype == lesson.dtype


def test_the_fast_kernels_serve_a_compiled_plan_too():
    rng = np.random.default_rng(6)
    x, mask = rng.standard_normal((2, 4, 8, 8)).astype(np.float32), np.triu(np.ones((8, 8), bool), 1)

    class Attention(flow.nn.Graph):
        def build(self, scores, mask):
            return flow.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)

    (lesson,), (fast,) = both_paths(lambda: [Attention()(flow.tensor(x), flow.tensor(mask))])
    np.testing.assert_allclose(fast, lesson, rtol=1e-6)
