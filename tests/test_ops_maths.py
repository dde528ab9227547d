"""The elementwise maths OneFlow offers beyond the basics (sin ... atanh, erf, expm1, log1p, log2, log10,
reciprocal, square, rounding): each gradient against central finite differences on every device, forward
and gradient against PyTorch, the ``out=`` form of Graph mode's plans, and the functions ``toynet.sin``.
Built on the case table machinery of ``test_ops_elementwise.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import array_shapes

import toynet as flow
from test_ops_elementwise import GRADCHECK, Case, compare_with_torch, gradcheck_case, normal, off_zero, positive
from toynet.ops import OPS


def inside_unit(rng, shape):
    """|a| < 0.8: away from the poles of asin, acos and atanh's derivatives at +-1."""
    return rng.uniform(-0.8, 0.8, shape)


def above_one(rng, shape):
    return rng.uniform(1.3, 3.0, shape)


def above_minus_one(rng, shape):
    return rng.uniform(-0.7, 2.0, shape)


def off_half_integers(rng, shape):
    """Between the jumps of every rounding function (integers for floor/ceil/trunc, halves for round)."""
    return rng.integers(-3, 3, shape) + rng.choice([0.2, 0.3, 0.7, 0.8], shape)


SMOOTH = [
    Case("sin", lambda L, a: L.sin(a), (normal,)),
    Case("cos", lambda L, a: L.cos(a), (normal,)),
    Case("tan", lambda L, a: L.tan(a), (inside_unit,)),
    Case("asin", lambda L, a: L.asin(a), (inside_unit,)),
    Case("acos", lambda L, a: L.acos(a), (inside_unit,)),
    Case("atan", lambda L, a: L.atan(a), (normal,)),
    Case("sinh", lambda L, a: L.sinh(a), (normal,)),
    Case("cosh", lambda L, a: L.cosh(a), (normal,)),
    Case("asinh", lambda L, a: L.asinh(a), (normal,)),
    Case("acosh", lambda L, a: L.acosh(a), (above_one,)),
    Case("atanh", lambda L, a: L.atanh(a), (inside_unit,)),
    Case("erf", lambda L, a: L.erf(a), (normal,)),
    Case("erfc", lambda L, a: L.erfc(a), (normal,)),
    Case("expm1", lambda L, a: L.expm1(a), (normal,)),
    Case("log1p", lambda L, a: L.log1p(a), (above_minus_one,)),
    Case("log2", lambda L, a: L.log2(a), (positive,)),
    Case("log10", lambda L, a: L.log10(a), (positive,)),
    Case("reciprocal", lambda L, a: L.reciprocal(a), (off_zero,)),
    Case("square", lambda L, a: L.square(a), (normal,)),
    # methods, and a chain whose gradient mixes several rules
    Case("method_chain", lambda L, a: a.sin().square() + a.cos().expm1() * a.atan(), (normal,)),
    Case("rounding_times_a", lambda L, a: a.floor() * a + a.ceil() + a.round() * a.trunc(), (off_half_integers,)),
]
ROUNDING = ["floor", "ceil", "round", "trunc"]


@pytest.mark.parametrize("case", SMOOTH, ids=repr)
@GRADCHECK
@given(shape=array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3), seed=st.integers(0, 2**16))
def test_vjp_matches_finite_differences(case, device, shape, seed):
    gradcheck_case(case, [shape], seed, device)


@pytest.mark.parametrize("case", SMOOTH, ids=repr)
def test_matches_torch(case):
    compare_with_torch(case, [(2, 3)])


@pytest.mark.parametrize("name", ROUNDING)
def test_rounding_matches_torch_and_gives_zero_gradient(name, device):
    """Halves round to even, as in PyTorch; the gradient is a tensor of zeros, not None, as in PyTorch."""
    torch = pytest.importorskip("torch")
    values = np.array([-2.5, -1.5, -0.7, -0.5, 0.0, 0.3, 0.5, 1.5, 2.5, 2.7])
    x = flow.tensor(values, device=device, requires_grad=True)
    y = getattr(flow, name)(x)
    y.sum().backward()
    t = torch.tensor(values, requires_grad=True)
    want = getattr(torch, name)(t)
    want.sum().backward()
    np.testing.assert_array_equal(y.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())
    assert not np.any(x.grad.numpy())


def test_functions_and_methods_agree_and_accept_lists():
    x = flow.tensor([0.25, -0.5, 0.75])
    for name in ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh", "erf", "erfc",
                 "expm1", "log1p", "reciprocal", "square", "floor", "ceil", "round", "trunc", "sign"):
        np.testing.assert_array_equal(getattr(flow, name)(x).numpy(), getattr(x, name)().numpy(), err_msg=name)
    np.testing.assert_allclose(flow.sin([0.0, math.pi / 2]).numpy(), [0.0, 1.0], atol=1e-7)
    assert flow.arcsin is flow.asin and x.arctanh is not None


def test_erfc_keeps_precision_where_one_minus_erf_loses_it():
    x = flow.tensor([6.0, 10.0], dtype=flow.float64)
    np.testing.assert_allclose(x.erfc().numpy(), [math.erfc(6.0), math.erfc(10.0)], rtol=1e-15)
    assert (1 - x.erf()).numpy().tolist() == [0.0, 0.0]


def test_expm1_and_log1p_are_exact_for_tiny_inputs():
    x = flow.tensor([1e-12], dtype=flow.float64)
    assert x.expm1().item() == pytest.approx(1e-12, rel=1e-12, abs=0)
    assert x.log1p().item() == pytest.approx(1e-12, rel=1e-12, abs=0)
    assert (x.exp() - 1).item() != pytest.approx(1e-12, rel=1e-6, abs=0)  # what expm1 avoids


NEW_OPS = [("sin", normal), ("cos", normal), ("tan", inside_unit), ("asin", inside_unit), ("acos", inside_unit),
           ("atan", normal), ("sinh", normal), ("cosh", normal), ("asinh", normal), ("acosh", above_one),
           ("atanh", inside_unit), ("erf", normal), ("erfc", normal), ("expm1", normal),
           ("log1p", above_minus_one), ("log2", positive), ("log10", positive), ("reciprocal", off_zero),
           ("square", normal), ("floor", normal), ("ceil", normal), ("round", normal), ("trunc", normal)]


@pytest.mark.parametrize("name,draw", NEW_OPS, ids=[n for n, _ in NEW_OPS])
def test_forward_writes_into_out(device, name, draw):
    """Graph mode's plans pass preallocated buffers: ``forward(..., out=buf)`` fills and returns buf."""
    op = OPS[name]
    assert op.elementwise
    a = flow.tensor(draw(np.random.default_rng(0), (2, 3)).astype(np.float32), device=device).array
    expected = op.forward(device.xp, a)
    buffer = device.xp.zeros((2, 3), dtype=expected.dtype)
    assert op.forward(device.xp, a, out=buffer) is buffer
    module = device.array_module
    np.testing.assert_array_equal(module.to_numpy(buffer), module.to_numpy(expected))
    assert module.to_numpy(buffer).dtype == np.float32


def test_new_ops_run_inside_a_graph():
    """Traced, fused and compiled as the older elementwise ops are (erf runs through its forward)."""

    class Model(flow.nn.Module):
        def forward(self, x):
            return (x.sin() * x.erf() + x.atan().square()).floor() + x.expm1()

    class Graph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = Model()

        def build(self, x):
            return self.model(x)

    x = flow.tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_allclose(Graph()(x).numpy(), Model()(x).numpy(), rtol=1e-6)


def test_eye():
    np.testing.assert_array_equal(flow.eye(3).numpy(), np.eye(3))
    e = flow.eye(2, 4, dtype=flow.float64, requires_grad=True)
    assert e.shape == (2, 4) and e.dtype is flow.float64 and e.requires_grad
    np.testing.assert_array_equal(e.numpy(), np.eye(2, 4))
    assert flow.eye(2).dtype is flow.float32
    with pytest.raises(ValueError, match="n must be a non-negative int"):
        flow.eye(-1)
    with pytest.raises(ValueError, match="m must be"):
        flow.eye(2, 2.5)
