"""ChooseKernels (issue 11): Graph mode times the candidate kernels of an op on the real shapes when it
compiles and keeps the fastest. The candidates must compute what the op's usual code computes; the choice
must follow the timings (with a margin against noise), be shown, be cached, and change only speed."""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.ops import OPS
from toynet.ops.fast.emit import KERNELS, bind_ones
from toynet.static.fast.compile import FastPlan as Plan
from toynet.static.passes.fast import kernels as choose
from toynet.static.passes import optimize

# What this file tests lives on the fast path (TOYNET_FAST=1): every test runs there.
pytestmark = pytest.mark.usefixtures("fast_path")

# ---------------------------------------------------------------------------- the candidates themselves


class _Meta:
    """An input as the compiler knows it: a shape and a dtype."""

    def __init__(self, array):
        self.shape, self.dtype = array.shape, flow.tensor(array).dtype


class _Out(str):
    def __new__(cls, name, namespace):
        self = super().__new__(cls, name)
        self.namespace = namespace
        return self

    def reshaped(self, shape):
        view = f"out_view{len(self.namespace)}"
        self.namespace[view] = self.namespace[str(self)].reshape(shape)
        return view


def run_candidates(op_name, arrays, with_out, **attrs):
    """Every candidate of the op on ``arrays``, evaluated; and what the op's forward gives."""
    op = OPS[op_name]
    expected = np.asarray(op.forward(np, *arrays, **attrs))
    namespace = {"xp": np, **{f"a{k}": a for k, a in enumerate(arrays)}}
    out = None
    if with_out:
        namespace["out"] = np.empty(expected.shape, expected.dtype)
        out = _Out("out", namespace)
    found = KERNELS[op_name]([f"a{k}" for k in range(len(arrays))], [_Meta(a) for a in arrays], out, **attrs)
    results = {}
    for name, code in found.items():
        bind_ones(code, namespace, np)
        results[name] = np.array(eval(code, namespace))
    return expected, results


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("with_out", [True, False])
@pytest.mark.parametrize("shape, target", [((2000, 1), (1,)), ((64, 5, 7), (7,)), ((64, 5, 7), (5, 7)),
                                           ((6, 4, 3), (1, 4, 1)), ((8, 3), (8, 1)), ((5, 3, 4), (5, 1, 1))])
def test_sum_to_candidates_all_give_the_sum(shape, target, with_out):
    for dtype in (np.float32, np.float64):
        expected, results = run_candidates("sum_to", [rand(*shape, dtype=dtype)], with_out, shape=target)
        for name, value in results.items():
            assert value.shape == expected.shape and value.dtype == expected.dtype, name
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_sum_to_offers_blas_only_where_it_computes_the_same():
    # leading or trailing summed axes: a matrix-vector product with ones
    assert "blas" in run_candidates("sum_to", [rand(16, 3)], True, shape=(3,))[1]
    assert "blas" in run_candidates("sum_to", [rand(3, 16)], True, shape=(3, 1))[1]
    # summed axes in the middle, integers, float16: no BLAS product computes it
    assert run_candidates("sum_to", [rand(3, 16, 2)], True, shape=(3, 1, 2))[1] == {}
    assert run_candidates("sum_to", [np.arange(12).reshape(4, 3)], True, shape=(3,))[1] == {}
    assert run_candidates("sum_to", [rand(16, 3, dtype=np.float16)], True, shape=(3,))[1] == {}


@pytest.mark.parametrize("with_out", [True, False])
def test_matrix_product_candidates_all_give_the_product(with_out):
    a, b, w, bias = rand(7, 5), rand(5, 3, seed=1), rand(3, 5, seed=2), rand(3, seed=3)
    cases = [("matmul", [a, b]), ("linear", [a, w]), ("linear", [a, w, bias]), ("linear", [a, w[:1], bias[:1]]),
             ("linear_grad_weight", [rand(7, 3), a])]
    for op_name, arrays in cases:
        expected, results = run_candidates(op_name, arrays, with_out)
        assert {"matmul", "dot"} <= set(results), op_name
        assert ("dot, scalar bias" in results) == (op_name == "linear" and len(arrays) == 3 and len(arrays[1]) == 1)
        for name, value in results.items():
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=f"{op_name} {name}")
    # dot is not matmul for stacks of matrices or mixed dtypes: no candidates then
    assert run_candidates("matmul", [rand(2, 7, 5), rand(2, 5, 3)], True)[1] == {}
    assert run_candidates("matmul", [a, b.astype(np.float64)], False)[1] == {}


# -------------------------------------------------------------------------------------- the pass


class PolyTrain(nn.Graph):
    def __init__(self, model, loss_fn, optimizer):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn
        self.add_optimizer(optimizer)
        self.config.enable_pass("ChooseKernels")   # kernel timing is opt-in

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def poly(n=200, seed=0):
    flow.manual_seed(seed)
    x = np.linspace(-3, 3, n, dtype=np.float32)
    xx = flow.tensor(np.stack([x, x ** 2, x ** 3], 1))
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-4)
    return model, nn.MSELoss(reduction="sum"), optimizer, xx, flow.tensor(np.sin(x))


def fake_timings(speedups):
    """A stand-in for the timer: each candidate named in ``speedups`` runs that many times faster than the
    others' microsecond."""
    calls = []

    def measure(candidates):
        calls.append(dict(candidates))
        return {name: 1e-6 / speedups.get(name, 1.0) for name in candidates}
    return measure, calls


@pytest.fixture
def fresh_timings(monkeypatch):
    monkeypatch.setattr(choose, "_TIMINGS", {})


def test_the_fastest_candidate_is_compiled_and_the_steps_agree_with_eager(monkeypatch, fresh_timings):
    measure, calls = fake_timings({"blas": 4.0, "dot": 2.0})
    monkeypatch.setattr(choose, "_measure_interleaved", measure)
    model, loss_fn, optimizer, x, y = poly()
    graph = PolyTrain(model, loss_fn, optimizer)
    graph_losses = [graph(x, y).item() for _ in range(5)]

    report = next(r for r in graph.passes if r.name == "ChooseKernels")
    chosen = {n.name: n.kernel for n in graph.ir.nodes if n.kernel}
    assert sorted(chosen.values()) == ["blas", "dot", "dot"], chosen   # sum_to, linear, linear_grad_weight
    assert "timed 3 ops, chose another kernel for 3" in report.summary()
    assert all(f"  kernel   %{name}: {kernel} " in report.details() for name, kernel in chosen.items())
    source = graph.plan.source
    assert "_ones_float32_200" in source and "xp.dot(" in source and "the fastest when compiling" in source
    assert "kernel=blas" in graph.ir.format()

    model, loss_fn, optimizer, x, y = poly()
    eager_losses = []
    for _ in range(5):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        eager_losses.append(loss.item())
    # (ReassociateScalars scales the gradients by 2 * lr at once: the last bits may differ from Eager mode's)
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    np.testing.assert_allclose(graph.model[0].weight.numpy(), model[0].weight.numpy(), rtol=1e-4, atol=1e-7)


def test_a_candidate_must_win_by_the_margin(monkeypatch, fresh_timings):
    measure, _ = fake_timings({"blas": choose.MARGIN * 0.95, "dot": choose.MARGIN * 1.05})
    monkeypatch.setattr(choose, "_measure_interleaved", measure)
    graph = PolyTrain(*poly()[:3])
    graph(*poly()[3:])
    assert sorted(n.kernel for n in graph.ir.nodes if n.kernel) == ["dot", "dot"]
    report = next(r for r in graph.passes if r.name == "ChooseKernels")
    assert "chose another kernel for 2" in report.summary() and ": reduce 1.0 us (blas " in report.details()


def test_timings_are_kept_for_the_session_and_the_pass_can_be_turned_off(monkeypatch, fresh_timings):
    measure, calls = fake_timings({"blas": 4.0})
    monkeypatch.setattr(choose, "_measure_interleaved", measure)
    model, loss_fn, optimizer, x, y = poly()
    PolyTrain(model, loss_fn, optimizer)(x, y)
    assert len(calls) == 3
    PolyTrain(model, loss_fn, optimizer)(x, y)   # the same shapes again: nothing timed
    assert len(calls) == 3
    PolyTrain(*poly(n=300)[:3])(*poly(n=300)[3:])     # new shapes: timed
    assert len(calls) == 6

    off = PolyTrain(model, loss_fn, optimizer)
    off.config.enable_pass("ChooseKernels", False)   # (as every graph starts: kernel timing is opt-in)
    off(x, y)
    assert "ChooseKernels" not in [r.name for r in off.passes]
    assert not any(n.kernel for n in off.ir.nodes) and "_ones_" not in off.plan.source


def test_a_candidate_that_computes_something_else_is_never_chosen(monkeypatch, fresh_timings):
    usual = KERNELS["sum_to"]

    def wrong(args, inputs, out=None, shape=()):
        found = usual(args, inputs, out, shape=shape)
        if found:
            found["blas"] = found["blas"].replace("xp.dot(", "(lambda a, b, out=None: xp.dot(a, b, out=out) + 1)(")
        return found
    monkeypatch.setitem(KERNELS, "sum_to", wrong)
    measure, calls = fake_timings({"blas": 100.0})
    monkeypatch.setattr(choose, "_measure_interleaved", measure)
    graph = PolyTrain(*poly()[:3])
    graph(*poly()[3:])
    assert all(n.kernel != "blas" for n in graph.ir.nodes)
    assert all("dot" in c and "blas" not in c and "reduce" not in c for c in calls), calls   # only the agreeing ones


def test_the_real_timer_times_and_keeps_the_usual_code_on_a_near_tie(fresh_timings):
    same = choose._measure_interleaved({"a": lambda: sum(range(50)), "b": lambda: sum(range(50))})
    assert set(same) == {"a", "b"} and all(0 < t < 1e-3 for t in same.values())
    slow_fast = choose._measure_interleaved({"slow": lambda: sum(range(2000)), "fast": lambda: sum(range(20))})
    assert slow_fast["slow"] > 5 * slow_fast["fast"]


def test_user_text_in_a_plan_never_names_a_constant_to_make():
    # Comments carry the user's source lines (or a loaded file's text); only the ops' own code may name
    # a vector of ones for the plan to allocate.
    model, loss_fn, optimizer, x, y = poly()
    graph = PolyTrain(model, loss_fn, optimizer)
    graph(x, y)
    traced = graph.traced_ir.copy()
    for n in traced.nodes:
        n.source = "x = _ones_float32_99999999999 + 1"
    optimized, _ = optimize(traced)
    plan = Plan(optimized)
    assert "_ones_float32_99999999999" in plan.source
    assert "_ones_float32_99999999999" not in plan.namespace


def test_kernel_timing_is_opt_in(fast_path):
    """A plan is the same on every machine unless its graph asks for kernel timing."""
    model, loss_fn, optimizer, x, y = poly()

    class Plain(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model, self.loss_fn = model, loss_fn
            self.add_optimizer(optimizer)

        build = PolyTrain.build

    plain = Plain()
    plain(x, y)
    assert "ChooseKernels" in plain.config.disabled_passes
    assert "ChooseKernels" not in [r.name for r in plain.passes] and not any(n.kernel for n in plain.ir.nodes)
