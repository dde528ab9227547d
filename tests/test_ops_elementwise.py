"""Elementwise ops: every vjp against central finite differences (float64, random broadcasting shapes
drawn by hypothesis, on every device of the fixture), forward and gradients against PyTorch, and the
``out=`` form that Graph mode's compiled plans use.

A case is written once as ``fn(L, *tensors)`` where ``L`` is a library namespace: ``toynet`` for the
gradient checks, ``torch`` for the comparisons. ``tests/test_cupy.py`` reruns the same table on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import toynet as flow
from gradcheck import check_grad
from toynet.ops import OPS
from toynet.dynamic.tensor import apply

GRADCHECK = settings(max_examples=5, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------------------ where inputs are drawn
# Finite differences are only right where the function is smooth, so each input is drawn from a domain
# that keeps away from kinks (relu at 0, clamp at its bounds) and poles (log, sqrt, 1/x near 0).


def normal(rng, shape):
    return rng.standard_normal(shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def off_zero(rng, shape):
    return rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def away_from(*kinks, low=-3.0, high=3.0, gap=0.1):
    def draw(rng, shape):
        x = rng.uniform(low, high, shape)
        for k in kinks:
            near = np.abs(x - k) < gap
            x = np.where(near, k + np.where(x >= k, gap, -gap), x)
        return x
    return draw


def pattern(L, shape, like):
    """A fixed bool condition of ``shape`` on ``like``'s device (every third element true)."""
    mask = np.arange(int(np.prod(shape))).reshape(shape) % 3 == 0
    return L.tensor(mask, device=like.device)


def relu6(L, a):
    return L.nn.functional.relu6(a)


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable                 # fn(L, *tensors) -> tensor, for L = toynet or torch
    inputs: tuple                # one drawing function per input
    torch: bool = True           # False where PyTorch spells the call differently
    eps: float = 1e-6
    atol: float = 1e-5

    def __repr__(self) -> str:
        return self.name


UNARY = [
    Case("neg", lambda L, a: -a, (normal,)),
    Case("exp", lambda L, a: a.exp(), (normal,)),
    Case("log", lambda L, a: a.log(), (positive,)),
    Case("sqrt", lambda L, a: a.sqrt(), (positive,)),
    Case("rsqrt", lambda L, a: a.rsqrt(), (positive,)),
    Case("tanh", lambda L, a: a.tanh(), (normal,)),
    Case("sigmoid", lambda L, a: a.sigmoid(), (normal,)),
    Case("relu", lambda L, a: a.relu(), (away_from(0.0),)),
    Case("relu6", relu6, (away_from(0.0, 6.0, low=-3.0, high=9.0),)),
    Case("clamp", lambda L, a: a.clamp(-0.5, 0.5), (away_from(-0.5, 0.5, low=-2.0, high=2.0),)),
    Case("clamp_min", lambda L, a: a.clamp(min=0.2), (away_from(0.2),)),
    Case("clamp_max", lambda L, a: a.clamp(max=-0.2), (away_from(-0.2),)),
    Case("abs", lambda L, a: a.abs(), (off_zero,)),
    Case("square", lambda L, a: a ** 2, (normal,)),
    Case("pow_int", lambda L, a: a ** 3, (normal,)),
    Case("pow_half", lambda L, a: a ** 0.5, (positive,)),
    Case("pow_negative", lambda L, a: a ** -1.5, (positive,)),
    Case("pow_scalar_base", lambda L, a: 2.0 ** a, (normal,)),
    Case("rsub", lambda L, a: 1.5 - a, (normal,)),
    Case("rdiv", lambda L, a: 2.0 / a, (off_zero,)),
    Case("scalar_ops", lambda L, a: (a * 3.0 + 1.0) / 2.0 - 0.5, (normal,)),
    Case("maximum_scalar", lambda L, a: a.maximum(0.3), (away_from(0.3),), torch=False),
    Case("where_scalar", lambda L, a: L.where(pattern(L, a.shape, a), a, 0.5), (normal,)),
    # float64 -> float32 -> float64 rounds to float32, so difference with a larger step.
    Case("cast", lambda L, a: a.to(L.float32).to(L.float64) * 3.0, (normal,), eps=1e-2, atol=1e-3),
]

BINARY = [
    Case("add", lambda L, a, b: a + b, (normal, normal)),
    Case("sub", lambda L, a, b: a - b, (normal, normal)),
    Case("mul", lambda L, a, b: a * b, (normal, normal)),
    Case("div", lambda L, a, b: a / b, (normal, off_zero)),
    Case("pow_tensor", lambda L, a, b: a ** b, (positive, normal)),
    Case("maximum", lambda L, a, b: L.maximum(a, b), (normal, normal)),
    Case("minimum", lambda L, a, b: L.minimum(a, b), (normal, normal)),
    Case("where", lambda L, a, b: L.where(pattern(L, np.broadcast_shapes(a.shape, b.shape), a), a, b),
         (normal, normal)),
]


def draw_arrays(case, shapes, seed):
    rng = np.random.default_rng(seed)
    return [make(rng, shape) for make, shape in zip(case.inputs, shapes)]


def gradcheck_case(case, shapes, seed, device):
    arrays = draw_arrays(case, shapes, seed)
    check_grad(lambda *ts: case.fn(flow, *ts), *arrays, device=device, eps=case.eps, atol=case.atol)


# ------------------------------------------------------------------------------------ finite differences


@pytest.mark.parametrize("case", UNARY, ids=repr)
@GRADCHECK
@given(shape=array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3), seed=st.integers(0, 2**16))
def test_unary_vjp_matches_finite_differences(case, device, shape, seed):
    gradcheck_case(case, [shape], seed, device)


@pytest.mark.parametrize("case", BINARY, ids=repr)
@GRADCHECK
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       seed=st.integers(0, 2**16))
@example(shapes=((3, 1), (1, 4)), seed=1)       # both inputs broadcast
@example(shapes=((4,), (2, 3, 4)), seed=2)      # leading dimensions added
@example(shapes=((2, 3, 4), ()), seed=3)        # a 0-d operand
def test_binary_vjp_matches_finite_differences(case, device, shapes, seed):
    shapes = getattr(shapes, "input_shapes", shapes)
    gradcheck_case(case, shapes, seed, device)


@GRADCHECK
@given(shapes=mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3),
       seed=st.integers(0, 2**16))
@example(shapes=((2, 3), (2, 3), ()), seed=1)   # an SGD step with a 0-d learning rate
def test_sub_scaled_vjp_matches_finite_differences(device, shapes, seed):
    """SGD's step ``a - scale * b`` as one op (Eager mode's optimizers call it); every input may need a
    gradient (an optimizer step differentiated, as in meta-learning)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape) for shape in getattr(shapes, "input_shapes", shapes)]
    check_grad(lambda a, b, s: apply(OPS["sub_scaled"], a, b, s), *arrays, device=device)


def test_sub_scaled_computes_what_it_stands_for(device):
    """The same NumPy calls as the two ops it fuses (Graph mode traces those): equal to the last bit."""
    rng = np.random.default_rng(0)
    a, b = (flow.tensor(rng.standard_normal((4, 3)).astype(np.float32), device=device) for _ in range(2))
    lr = flow.tensor(np.float32(0.1), device=device)
    for scale in (1e-3, lr):
        fused = apply(OPS["sub_scaled"], a, b, scale)
        assert fused.dtype is flow.float32
        np.testing.assert_array_equal(fused.numpy(), (a - scale * b).numpy())


def test_gradient_flows_only_to_inputs_that_require_it(device):
    a = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    b = flow.tensor([3.0, 4.0], device=device)
    (a * b).sum().backward()
    assert b.grad is None
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 4.0])


def test_comparisons_give_bool_and_no_gradient(device):
    a = flow.tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    for result, expected in [(a < 2, [1, 0, 0]), (a <= 2, [1, 1, 0]), (a > 2, [0, 0, 1]),
                             (a >= 2, [0, 1, 1]), (a == 2, [0, 1, 0]), (a != 2, [1, 0, 1]),
                             ((a > 1) & (a < 3), [0, 1, 0]), ((a < 2) | (a > 2), [1, 0, 1]),
                             (~(a > 1), [1, 0, 0])]:
        assert result.dtype is flow.bool
        assert not result.requires_grad
        np.testing.assert_array_equal(result.numpy(), np.array(expected, dtype=bool))


def test_sign_has_no_gradient(device):
    a = flow.tensor([-2.0, 0.0, 3.0], device=device, requires_grad=True)
    s = a.sign()
    np.testing.assert_array_equal(s.numpy(), [-1.0, 0.0, 1.0])
    (a * s).sum().backward()  # d/da (a * sign(a)) = sign(a): sign itself contributes nothing
    np.testing.assert_array_equal(a.grad.numpy(), [-1.0, 0.0, 1.0])


def test_sigmoid_does_not_overflow(device):
    a = flow.tensor([-1000.0, 0.0, 1000.0], device=device, requires_grad=True)
    s = a.sigmoid()
    s.sum().backward()
    np.testing.assert_allclose(s.numpy(), [0.0, 0.5, 1.0])
    assert np.all(np.isfinite(a.grad.numpy()))


# ------------------------------------------------------------------------------------ against PyTorch


def _torch_run(torch, case, arrays, weights):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = case.fn(torch, *ts)
    (out * torch.tensor(weights)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _toynet_run(case, arrays, weights, device="cpu"):
    ts = [flow.tensor(a, device=device, requires_grad=True) for a in arrays]
    out = case.fn(flow, *ts)
    (out * flow.tensor(weights, device=device)).sum().backward()
    return out.numpy(), [t.grad.numpy() for t in ts]


def compare_with_torch(case, shapes, seed=0):
    torch = pytest.importorskip("torch")
    arrays = draw_arrays(case, shapes, seed)
    out_shape = case.fn(flow, *[flow.tensor(a) for a in arrays]).shape
    weights = np.random.default_rng(seed + 1).standard_normal(out_shape)
    want_out, want_grads = _torch_run(torch, case, arrays, weights)
    got_out, got_grads = _toynet_run(case, arrays, weights)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-10, atol=1e-12)
    for i, (got, want) in enumerate(zip(got_grads, want_grads)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"gradient of input {i}")


@pytest.mark.parametrize("case", [c for c in UNARY if c.torch], ids=repr)
def test_unary_matches_torch(case):
    compare_with_torch(case, [(2, 3)])


@pytest.mark.parametrize("case", [c for c in BINARY if c.torch], ids=repr)
def test_binary_matches_torch(case):
    compare_with_torch(case, [(2, 1, 3), (4, 1)])


# -------------------------------------------------------------------------------------------- out=

OUT_CASES = [  # op name, input drawers, attributes
    ("add", (normal, normal), {}), ("sub", (normal, normal), {}), ("mul", (normal, normal), {}),
    ("div", (normal, off_zero), {}), ("pow", (positive, normal), {}), ("neg", (normal,), {}),
    ("exp", (normal,), {}), ("log", (positive,), {}), ("sqrt", (positive,), {}), ("rsqrt", (positive,), {}),
    ("tanh", (normal,), {}), ("sigmoid", (normal,), {}), ("relu", (normal,), {}), ("relu6", (normal,), {}),
    ("clamp", (normal,), {"min": -0.5, "max": 0.5}), ("abs", (normal,), {}), ("sign", (normal,), {}),
    ("maximum", (normal, normal), {}), ("minimum", (normal, normal), {}), ("identity", (normal,), {}),
    ("sub_scaled", (normal, normal, normal), {}),
]


@pytest.mark.parametrize("name,inputs,attrs", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_elementwise_forward_writes_into_out(device, name, inputs, attrs):
    """Graph mode's plans pass preallocated buffers: ``forward(..., out=buf)`` must fill and return buf."""
    op = OPS[name]
    assert op.elementwise
    rng = np.random.default_rng(0)
    args = [flow.tensor(make(rng, (2, 3)), device=device).array for make in inputs]
    xp = device.xp
    expected = op.forward(xp, *args, **attrs)
    buffer = xp.zeros((2, 3), dtype=expected.dtype)
    result = op.forward(xp, *args, out=buffer, **attrs)
    assert result is buffer
    module = device.array_module
    np.testing.assert_allclose(module.to_numpy(buffer), module.to_numpy(expected))
