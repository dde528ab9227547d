"""An nn.Graph keeps a bounded number of plans (issue 10, finding 11): a graph called with ever new input
shapes stays within graph.config.cache_limit, says so, and Python numbers are inputs of the plan
instead of compiling one plan per value."""

from __future__ import annotations

import gc
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn


class Forward(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


class Scaled(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x, scale, shift=0):
        return self.model(x) * scale + shift


def mlp(width=256):
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def test_many_input_shapes_keep_at_most_cache_limit_plans_with_a_warning_and_a_line_each(capsys):
    graph = Forward(mlp(32))
    graph.debug(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in range(1, 21):
            graph(flow.randn(batch, 64))
    printed = capsys.readouterr().out
    assert len(graph._compiled) == graph.config.cache_limit == 8
    assert printed.count("got a new input shape, is compiling a new graph") == 19
    assert printed.count("dropped the least recently used one") == 12
    limit_warnings = [w for w in caught if "cache_limit" in str(w.message)]
    assert len(limit_warnings) == 1 and issubclass(limit_warnings[0].category, RuntimeWarning)
    assert "Inputs: (20, 64) float32" in printed


def test_the_least_recently_used_plan_is_the_one_evicted():
    graph = Forward(mlp(16))
    graph.config.cache_limit = 3
    graph(flow.randn(1, 64))
    first = graph.plan
    graph(flow.randn(2, 64))
    graph(flow.randn(3, 64))
    graph(flow.randn(1, 64))                  # used again: now the most recent
    assert graph.plan is first
    with pytest.warns(RuntimeWarning, match="cache_limit = 3"):
        graph(flow.randn(4, 64))              # evicts the plan for batch 2
    shapes = sorted(entry.key[0][1][0][0] for entry in graph._compiled)   # key: ((spec, tensor metas), fast?)
    assert shapes == [(1, 64), (3, 64), (4, 64)]
    graph(flow.randn(1, 64))
    assert graph.plan is first


def test_retained_memory_is_bounded():
    """200 shapes of a ~0.3 MB MLP: memory stays within the limit's worth of plans."""
    model = mlp(256)
    graph = Forward(model)
    graph(flow.randn(1, 64))
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    graph(flow.randn(200, 64))
    one_plan = tracemalloc.get_traced_memory()[0] - start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for batch in range(2, 201):
            graph(flow.randn(batch, 64))
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    assert len(graph._compiled) == 8
    assert retained < 10 * one_plan, (retained, one_plan)


def test_only_the_latest_compilation_keeps_its_pass_reports_and_the_views_still_work(tmp_path):
    graph = Forward(mlp(16))
    for batch in (1, 2, 3):
        graph(flow.randn(batch, 64))
    entries = list(graph._compiled)
    assert [e.reports is None for e in entries] == [True, True, False]
    graph(flow.randn(1, 64))   # an older plan runs: its IR and plan are there, the reports are the latest's
    assert graph.ir.inputs[0].shape == (1, 64) and graph.traced_ir.inputs[0].shape == (1, 64)
    assert graph.passes is entries[-1].reports and "(INPUT:" in repr(graph)
    flow.save(graph, tmp_path / "g")
    x = flow.randn(1, 64)
    np.testing.assert_allclose(flow.load(tmp_path / "g")(x).numpy(), graph(x).numpy(), rtol=1e-6)


def test_cache_limit_is_checked():
    graph = Forward(mlp(16))
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="cache_limit"):
            graph.config.cache_limit = bad


# ---------------------------------------------------------------------------------- numbers as inputs


def test_a_python_float_argument_is_an_input_not_a_plan_per_value():
    model = mlp(16)
    graph = Scaled(model)
    x = flow.randn(4, 64)
    for scale in np.linspace(-2, 2, 50):
        out = graph(x, float(scale))
        assert out.dtype == flow.float32      # promoted as the Python number is: float32 stays float32
        with flow.no_grad():
            np.testing.assert_allclose(out.numpy(), (model(x) * float(scale)).numpy(), rtol=1e-6, atol=1e-7)
    assert len(graph._compiled) == 1


def test_an_int_argument_is_an_input_too_and_promotes_as_a_python_int():
    model = mlp(16)
    graph = Scaled(model)
    x = flow.randn(4, 64)
    for shift in range(10):
        out = graph(x, 2, shift)
        assert out.dtype == flow.float32
        with flow.no_grad():
            np.testing.assert_allclose(out.numpy(), (model(x) * 2 + shift).numpy(), rtol=1e-6)
    assert len(graph._compiled) == 1


def test_number_arithmetic_inside_build_follows_the_value():
    class Arith(nn.Graph):
        def build(self, x, t):
            return x * (t * 2 + 1) - t

    graph = Arith()
    x = flow.randn(5)
    for t in (0.5, 1.5, -3.25):
        out = graph(x, t)
        assert out.dtype == flow.float32
        np.testing.assert_allclose(out.numpy(), (x * (t * 2 + 1) - t).numpy(), rtol=1e-6)
    assert len(graph._compiled) == 1


class Repeat(nn.Graph):
    def __init__(self, static=True):
        super().__init__()
        self.model = nn.Linear(4, 4)
        if static:
            self.config.set_static_arguments("steps")

    def build(self, x, steps):
        for _ in range(steps):
            x = self.model(x)
        return x


def test_a_number_build_needs_as_a_value_is_declared_static():
    graph = Repeat()
    x = flow.randn(2, 4)
    for steps in (1, 3, 1):
        expected = x
        with flow.no_grad():
            for _ in range(steps):
                expected = graph.model(expected)
        np.testing.assert_allclose(graph(x, steps).numpy(), expected.numpy(), rtol=1e-6)
    assert len(graph._compiled) == 2
    # Positional or by keyword, the same argument.
    np.testing.assert_allclose(graph(x, steps=3).numpy(), graph(x, 3).numpy(), rtol=1e-6)


def test_an_undeclared_number_used_as_a_value_says_how_to_declare_it():
    graph = Repeat(static=False)
    with pytest.raises(Exception) as error:
        graph(flow.randn(2, 4), 3)
    text = str(error.value) + "".join(getattr(error.value, "__notes__", []))
    assert "set_static_arguments" in text


def test_a_static_argument_that_build_does_not_take_is_refused():
    graph = Repeat(static=False)
    graph.config.set_static_arguments("step")
    with pytest.raises(ValueError, match=r"names \['step'\], but Repeat.build\(\) takes \['x', 'steps'\]"):
        graph(flow.randn(2, 4), 3)


def test_a_number_passed_where_an_op_needs_a_python_number_names_the_fix():
    class Clamped(nn.Graph):
        def build(self, x, low):
            return x.clamp(min=low)

    graph = Clamped()
    x = flow.randn(6)
    try:
        out = graph(x, 0.1)
    except TypeError as error:
        assert "set_static_arguments" in str(error)
    else:   # or the op takes the number as an input: then the value must follow each call
        np.testing.assert_allclose(out.numpy(), x.clamp(min=0.1).numpy())
        np.testing.assert_allclose(graph(x, 0.3).numpy(), x.clamp(min=0.3).numpy())


@settings(max_examples=20, deadline=None)
@given(calls=st.lists(st.tuples(st.integers(1, 12), st.floats(-4, 4, allow_nan=False, width=32)),
                      min_size=1, max_size=30),
       limit=st.integers(1, 5))
def test_random_call_sequences_stay_bounded_and_right(calls, limit):
    model = mlp(8)
    graph = Scaled(model)
    graph.config.cache_limit = limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for batch, scale in calls:
            x = flow.randn(batch, 64)
            out = graph(x, scale)
            with flow.no_grad():
                np.testing.assert_allclose(out.numpy(), (model(x) * scale).numpy(), rtol=1e-5, atol=1e-6)
            assert len(graph._compiled) <= limit
    assert len(graph._compiled) == min(limit, len({b for b, _ in calls}))


def test_switching_back_to_a_shape_reuses_its_plan_with_plain_sgd():
    """Plain SGD keeps an empty state per parameter: compiling for a new shape must not replace it, or every
    plan compiled before fails its guard and switching back and forth compiles on every switch."""
    model = nn.Linear(3, 1)
    graph = _PlainTrain(model, flow.optim.SGD(model.parameters(), lr=0.1))
    small, large = (flow.randn(4, 3), flow.randn(4, 1)), (flow.randn(8, 3), flow.randn(8, 1))
    compiled = []
    for x, y in (small, large, small, large):
        before = len(graph._compiled)
        graph(x, y)
        compiled.append(len(graph._compiled) > before)
    assert compiled == [True, True, False, False]


class _PlainTrain(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss
