"""The op ONNX import added to toynet's table: ``cumsum`` (ONNX's CumSum), checked like every op:
gradients against finite differences (and gradients of gradients), values against NumPy and PyTorch,
the same result in Graph mode, and its ONNX form run by ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import toynet as flow
from toynet import nn
from toynet.ops import OPS, ShapeError
from toynet.ops._op import apply

CUMSUM = OPS["cumsum"]


def cumsum(t, dim):
    return apply(CUMSUM, t, dim=dim)


@pytest.mark.parametrize("shape, dim", [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1)])
def test_cumsum_vjp_matches_finite_differences(shape, dim, device):
    x = np.random.default_rng(0).standard_normal(shape)
    check_grad(lambda t: cumsum(t, dim), x, device=device)


def test_cumsum_second_derivative_matches_finite_differences(device):
    # d/dx of (cumsum(x) ** 2) needs the vjp to be differentiable itself (it is built of toynet ops).
    x = np.random.default_rng(1).standard_normal((3, 4))

    def first_grad(t):
        if not t.requires_grad:  # the finite differences call with constants: make a leaf to differentiate
            t = t.detach().requires_grad_()
        y = (cumsum(t, 1) ** 2).sum()
        (g,) = flow.autograd.grad(y, t, create_graph=True)
        return g

    check_grad(first_grad, x, device=device)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_cumsum_values_and_dtype_are_numpys(dtype):
    x = (np.random.default_rng(2).standard_normal((3, 5)) * 10).astype(dtype)
    got = cumsum(flow.tensor(x), 1).numpy()
    assert got.dtype == dtype  # NumPy's cumsum would widen int32 to the platform int; toynet keeps the dtype
    np.testing.assert_allclose(got, np.cumsum(x, axis=1).astype(dtype), rtol=1e-6)


def test_cumsum_matches_torch_values_and_gradients():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((4, 6))
    weights = np.random.default_rng(4).standard_normal((4, 6))
    ours = flow.tensor(x, requires_grad=True)
    (cumsum(ours, 0) * flow.tensor(weights)).sum().backward()
    theirs = torch.tensor(x, requires_grad=True)
    (torch.cumsum(theirs, 0) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(cumsum(ours, 0).detach().numpy(), torch.cumsum(theirs, 0).detach().numpy())
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)


def test_cumsum_bad_dim_says_what_is_allowed():
    with pytest.raises(ShapeError, match=r"cumsum: dim 2 is out of range for shape \(3, 4\); pass an int from -2 to 1"):
        cumsum(flow.randn(3, 4), 2)


class RunningTotal(nn.Graph):
    def build(self, x):
        return cumsum(x, 1) * 0.5


def test_cumsum_in_graph_mode_and_through_onnx_runtime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    graph = RunningTotal()
    x = flow.randn(2, 6)
    expected = cumsum(x, 1).numpy() * 0.5
    np.testing.assert_allclose(graph(x).numpy(), expected, rtol=1e-6)
    path = flow.onnx.export(graph, tmp_path / "cumsum.onnx")
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input_0": x.numpy()})
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(flow.onnx.load(path)(x).numpy(), expected, rtol=1e-6)
