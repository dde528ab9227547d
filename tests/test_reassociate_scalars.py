"""ReassociateScalars: a scalar factor moves across ops linear in the value it scales, to meet a second one,
and the two become one 0-d multiplication; only where every reader on the way is such an op or that very
multiplication, and nothing on the way is an output or a state update."""

from __future__ import annotations

import pytest

import numpy as np
from graphs import TrainGraph, eager_losses
from test_graph_passes import Builder, assert_same_program, names

import toynet as flow
from toynet import nn
from toynet.static.passes.fast.scalars import reassociate_scalars

# What this file tests lives on the fast path (TOYNET_FAST=1): every test runs there.
pytestmark = pytest.mark.usefixtures("fast_path")


def _sgd_like(extra_output=False, other_reader=False, second_lr=False):
    """d * 2 -> reshape -> (matmul with x, sum) -> each times lr -> subtracted from two states."""
    b = Builder()
    x = b.input("x", (8, 3))
    d = b.input("d", (8, 1))
    w = b.state("w", np.ones((1, 3)))
    bias = b.state("bias", np.ones((1,)))
    lr = b.state("lr", np.array(0.1), kind="system")
    lr2 = b.state("lr2", np.array(0.2), kind="system") if second_lr else lr
    g = b.op("mul", d, 2.0, name="g")
    gw = b.op("linear_grad_weight", g, x, name="gw")
    gb = b.op("sum_to", g, shape=(1,), name="gb")
    uw = b.op("sub", w, b.op("mul", lr, gw, name="scaled_w"), name="uw")
    ub = b.op("sub", bias, b.op("mul", lr2, gb, name="scaled_b"), name="ub")
    outs = [b.op("sum", d, name="loss")]
    if extra_output:
        outs.append(gw)
    if other_reader:
        outs.append(b.op("exp", g, name="other"))
    b.returns(*outs).update(w, uw).update(bias, ub)
    inputs = [np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32),
              np.random.default_rng(1).standard_normal((8, 1)).astype(np.float32)]
    return b, inputs


def test_the_learning_rate_meets_the_factor_two_and_the_program_is_the_same():
    b, inputs = _sgd_like()
    before = b.graph.copy()
    after, report = reassociate_scalars(b.graph)
    assert sorted(report.removed) == ["scaled_b", "scaled_w"]
    assert "scaled_w" not in names(after) and "g-scale" in names(after)
    scale = next(n for n in after.nodes if n.name == "g-scale")
    assert scale.shape == () and [x.name if hasattr(x, "name") else x for x in scale.inputs] == [2.0, "lr"]
    g = next(n for n in after.nodes if n.name == "g")
    assert g.inputs[1] is scale
    order = names(after)
    assert order.index("lr") < order.index("g-scale") < order.index("g")   # defined before it is read
    assert_same_program(before, after, inputs, b.values)
    assert "g scales by 2.0 * lr: 2 multiplication(s) by lr removed" in report.notes


def test_values_that_leave_the_graph_or_are_read_otherwise_are_not_rescaled():
    for kwargs in ({"extra_output": True}, {"other_reader": True}, {"second_lr": True}):
        b, _ = _sgd_like(**kwargs)
        after, report = reassociate_scalars(b.graph)
        assert report.removed == [] and "scaled_w" in names(after), kwargs


def _poly():
    flow.manual_seed(0)
    x = np.linspace(-2, 2, 50, dtype=np.float32)
    xx, y = flow.tensor(np.stack([x, x ** 2, x ** 3], 1)), flow.tensor(np.sin(x))
    return nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1)), xx, y


def test_plain_sgd_on_a_sum_of_squares_trains_as_eager_with_one_multiplication_less_per_parameter():
    model, x, y = _poly()
    graph = TrainGraph(model, nn.MSELoss(reduction="sum"), flow.optim.SGD(model.parameters(), lr=1e-3))
    losses = [graph(x, y).item() for _ in range(20)]
    report = next(r for r in graph.passes if r.name == "ReassociateScalars")
    assert len(report.removed) == 2
    updates = [n for n in graph.ir.nodes if n.kind == "op" and n.phase == "optimizer" and "weight" in n.name]
    assert [n.op.name for n in updates] == ["sub"]      # p - g: the learning rate is in g already

    eager, xe, ye = _poly()
    expected = eager_losses(eager, nn.MSELoss(reduction="sum"), flow.optim.SGD(eager.parameters(), lr=1e-3), xe, ye, 20)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)


def test_momentum_keeps_its_update_rule():
    model, x, y = _poly()
    graph = TrainGraph(model, nn.MSELoss(reduction="sum"),
                       flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
    graph(x, y)
    assert next(r for r in graph.passes if r.name == "ReassociateScalars").removed == []


def test_a_product_of_the_scaled_value_with_itself_is_not_linear():
    b = Builder()
    d = b.input("d", (8, 1))
    lr = b.state("lr", np.array(0.1), kind="system")
    w = b.state("w", np.ones((8, 1)))
    g = b.op("mul", d, 2.0, name="g")
    square = b.op("mul", g, b.op("reshape", g, shape=(8, 1), name="again"), name="square")  # scales by 2 * 2
    update = b.op("sub", w, b.op("mul", lr, square, name="scaled"), name="update")
    b.returns(b.op("sum", d, name="loss")).update(w, update)
    after, report = reassociate_scalars(b.graph)
    assert report.removed == [] and "scaled" in names(after)


def test_a_loss_written_with_pow_gets_the_learning_rate_in_its_factor_too():
    class Step(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=1e-3))

        def build(self, x, y):
            loss = ((self.model(x) - y) ** 2).sum()   # pow's vjp: grad * (2 * diff), then times the seed
            loss.backward()
            return loss

    model, x, y = _poly()
    graph = Step(model)
    graph(x, y)
    report = next(r for r in graph.passes if r.name == "ReassociateScalars")
    assert len(report.removed) == 2 and "scales by 2 * System-Train-LearningRate-0-0" in report.notes[0]
