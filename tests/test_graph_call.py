"""The repeat call (toynet.nn.fast.repeat_call): calling a graph again with the very same tensors runs one generated
function, which must behave exactly as the general path does: same results, learning rates fed, and every
change it cannot vouch for sent back to the general path (new arrays, new tensors, a failed guard)."""

from __future__ import annotations

import pytest

import numpy as np
from graphs import TrainGraph, eager_losses

import toynet as flow
from toynet import nn
from toynet.nn.fast.repeat_call import MISS

# What this file tests lives on the fast path (TOYNET_FAST=1): every test runs there.
pytestmark = pytest.mark.usefixtures("fast_path")


def _poly():
    flow.manual_seed(0)
    x = flow.tensor(np.linspace(-1, 1, 40, dtype=np.float32).reshape(20, 2))
    y = flow.tensor(np.linspace(0, 1, 20, dtype=np.float32))
    model = nn.Sequential(nn.Linear(2, 1), nn.Flatten(0, 1))
    return model, x, y


def _eager_losses(steps, lrs=None):
    model, x, y = _poly()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)

    def set_lr(i):
        if lrs is not None:
            opt.param_groups[0]["lr"] = lrs[i]
    losses = eager_losses(model, nn.MSELoss(), opt, x, y, steps, set_lr)
    return losses, [p.numpy().copy() for p in model.parameters()]


def _graph(lr=0.1):
    model, x, y = _poly()
    opt = flow.optim.SGD(model.parameters(), lr=lr)
    return TrainGraph(model, nn.MSELoss(), opt), opt, model, x, y


def test_a_repeat_call_runs_the_generated_function_and_matches_eager():
    graph, _, model, x, y = _graph()
    losses = [graph(x, y).item()]
    repeat = graph._repeat
    assert repeat is not None
    assert "args[0] is _arg0" in repeat.source and graph.plan.body[-1] in repeat.source  # the plan, inlined
    losses += [graph(x, y).item() for _ in range(4)]
    assert graph._repeat is repeat            # no call took the general path again
    expected, params = _eager_losses(5)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)
    for p, q in zip(model.parameters(), params):
        np.testing.assert_allclose(p.numpy(), q, rtol=1e-6)


def test_a_new_learning_rate_reaches_the_plan_on_the_repeat_path():
    graph, opt, _, x, y = _graph()
    lrs = [0.1, 0.05, 0.05, 0.2, 0.01]
    losses = []
    for lr in lrs:
        opt.param_groups[0]["lr"] = lr
        losses.append(graph(x, y).item())
    expected, _ = _eager_losses(5, lrs)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)


def test_other_tensors_or_replaced_arrays_take_the_general_path():
    graph, _, _, x, y = _graph()
    graph(x, y)
    repeat = graph._repeat
    assert repeat((x.detach(), y)) is MISS          # another tensor object
    assert repeat((x,)) is MISS                     # another number of arguments
    x.data = flow.tensor(x.numpy() * 2)             # the same tensor holding a new array
    assert repeat((x, y)) is MISS
    graph(x, y)                                     # general path: runs, and makes a new repeat function
    assert graph._repeat is not repeat
    assert graph._repeat((x, y)) is not MISS


def test_a_failed_guard_on_the_repeat_path_recompiles():
    graph, opt, model, x, y = _graph()
    graph(x, y)
    repeat = graph._repeat
    opt.param_groups[0]["momentum"] = 0.9           # baked into the compiled update rule
    assert repeat((x, y)) is MISS
    graph(x, y)
    assert len(graph._compiled) == 2                # compiled again for the new momentum
    model.eval()
    assert graph._repeat((x, y)) is MISS


def test_an_error_on_the_repeat_path_is_reported_and_changes_nothing(capsys):
    graph, _, model, x, y = _graph()
    graph(x, y)
    before = [p.numpy().copy() for p in model.parameters()]
    constant = next(name for name in graph._last.plan.namespace if name[0] == "c" and name[1:].isdigit())
    # break the compiled plan on purpose: in the plan itself and in the repeat function, which inlines it
    graph._last.plan.namespace[constant] = graph._repeat.__globals__[constant] = np.ones(3, np.float32)
    try:
        graph(x, y)
    except ValueError:
        pass
    else:  # pragma: no cover - the broken plan must fail
        raise AssertionError("the broken plan ran")
    assert "run got error" in capsys.readouterr().out
    for p, q in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), q)


def test_builds_returning_nothing_or_a_nesting_repeat_too():
    model, x, _ = _poly()

    class NoResult(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            self.model(x).sum().backward()

    class Nested(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            y = self.model(x)
            return {"y": y, "more": [y * 2, "text"]}

    step = NoResult()
    assert step(x) is None and step(x) is None and step._repeat is not None
    nested = Nested()
    first, again = nested(x), nested(x)
    assert again["more"][1] == "text" and nested._repeat is not None
    np.testing.assert_allclose(again["more"][0].numpy(), 2 * again["y"].numpy())
    np.testing.assert_allclose(again["y"].numpy(), model(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("fast", [False, True], ids=["lesson", "fast"])
def test_permute_beyond_two_dimensions_trains_in_graph_mode_as_in_eager_mode(fast):
    """Issue 21's audit: a permute shape rule wrong for 3-D and larger tensors survived every test."""
    x = flow.randn(2, 3, 4, requires_grad=True)

    class Permuted(nn.Graph):
        def __init__(self, weight):
            super().__init__()
            self.holder = nn.Module()
            self.holder.weight = weight

        def build(self, x):
            y = ((x * self.holder.weight).permute(2, 0, 1) * 2)
            return y, (y * flow.arange(4.0).reshape(4, 1, 1)).sum()

    weight = nn.Parameter(flow.randn(2, 3, 4))
    eager_y = (x * weight).permute(2, 0, 1) * 2
    with flow.set_fast_path(fast):
        y, total = Permuted(weight)(x)
    assert tuple(y.shape) == (4, 2, 3)
    np.testing.assert_allclose(y.numpy(), eager_y.numpy(), rtol=1e-6)
    np.testing.assert_allclose(total.numpy(), (eager_y * flow.arange(4.0).reshape(4, 1, 1)).sum().numpy(), rtol=1e-5)
