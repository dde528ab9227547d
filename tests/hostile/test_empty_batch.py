"""An empty batch (issue 21): a loss over no samples is NaN and every gradient is zero, as in PyTorch, the same in
Eager and in Graph mode on both paths; nothing raises (a ZeroDivisionError in Mean's vjp did) and a Graph step
does not move the weights."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.nn import functional as F

LOSSES = {
    "mean": lambda out, target: out.mean(),
    "mse_loss": lambda out, target: F.mse_loss(out, target),
    "var": lambda out, target: out.var(),
    "cross_entropy": lambda out, target: F.cross_entropy(out, target.sum(1).long().clamp(0, 2)),
}


@pytest.fixture(params=[False, True], ids=["lesson", "fast"])
def path(request):
    with flow.set_fast_path(request.param):
        yield request.param


@pytest.mark.parametrize("loss_name", list(LOSSES))
def test_an_empty_batch_gives_a_nan_loss_and_zero_gradients_in_eager_mode(loss_name, path):
    flow.manual_seed(0)
    model = nn.Linear(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # NumPy's own "mean of empty slice"
        loss = LOSSES[loss_name](model(flow.randn(0, 4)), flow.randn(0, 3))
        loss.backward()
    assert np.isnan(loss.item())
    assert not model.weight.grad.numpy().any() and not model.bias.grad.numpy().any()


@pytest.mark.parametrize("loss_name", list(LOSSES))
def test_a_graph_step_on_an_empty_batch_agrees_with_eager_mode_and_keeps_the_weights(loss_name, path):
    flow.manual_seed(0)
    model = nn.Linear(4, 3)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x, y):
            loss = LOSSES[loss_name](self.model(x), y)
            loss.backward()
            return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        loss = Step()(flow.randn(0, 4), flow.randn(0, 3))
    assert np.isnan(loss.item())
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)


def test_pytorch_agrees_where_installed():
    torch = pytest.importorskip("torch")
    m = torch.nn.Linear(4, 3)
    loss = torch.nn.functional.mse_loss(m(torch.randn(0, 4)), torch.randn(0, 3))
    loss.backward()
    assert torch.isnan(loss) and not m.weight.grad.any()
