"""Clear errors: a wrong shape, dtype, device or argument raises an error that names the op, the shapes
and the fix, in Eager mode as in Graph mode; and the errors that only make sense while tracing a graph
(reading data of a lazy tensor, data-dependent shapes) do not get in the way in Eager mode."""

from __future__ import annotations

import re

import numpy as np
import pytest

import toynet as flow
import toynet.nn.functional as F
from toynet.ops import ShapeError


def raises(error, *fragments):
    """``pytest.raises`` that checks each fragment appears in the message (fragments are plain text)."""
    return pytest.raises(error, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def test_matmul_shape_mismatch_names_the_op_and_shapes(device):
    a, b = flow.randn(2, 3, device=device), flow.randn(4, 5, device=device)
    with raises(ShapeError, "matmul", "(2, 3)", "(4, 5)", "(3)", "(4)"):
        a @ b
    with raises(ShapeError, "matmul", "(3,)", "(4,)"):
        flow.randn(3, device=device) @ flow.randn(4, device=device)
    with raises(ShapeError, "matmul", "()"):
        a @ flow.tensor(2.0, device=device)


def test_broadcasting_mismatch_names_the_dimension(device):
    with raises(ShapeError, "add", "(2, 3)", "(4,)", "dimension -1", "must match or be 1"):
        flow.randn(2, 3, device=device) + flow.randn(4, device=device)
    with raises(ShapeError, "mul", "(2, 3)", "(3, 3)"):
        flow.randn(2, 3, device=device) * flow.randn(3, 3, device=device)


def test_mixing_devices_says_which_and_how_to_fix():
    cpu, strict = flow.randn(2, 3), flow.randn(2, 3, device="strict")
    with raises(RuntimeError, "add", "cpu", "strict:0", "tensor.to(device)"):
        cpu + strict
    with raises(RuntimeError, "matmul", "cpu", "strict:0"):
        strict @ cpu.t()
    with raises(RuntimeError, "cat", "same device"):
        flow.cat([cpu, strict])


def test_backward_on_a_non_scalar_needs_a_gradient(device):
    y = flow.randn(2, 3, device=device, requires_grad=True) * 2
    with raises(RuntimeError, "(2, 3)", "one-element", "t.sum()", "gradient="):
        y.backward()
    with raises(RuntimeError, "gradient of shape (3,)", "(2, 3)"):
        y.backward(flow.ones(3, device=device))


def test_backward_of_something_that_does_not_require_grad():
    with raises(RuntimeError, "does not require grad", "requires_grad=True"):
        (flow.randn(3) * 2).sum().backward()
    x = flow.randn(3, requires_grad=True)
    with flow.no_grad():
        loss = (x * 2).sum()
    with raises(RuntimeError, "no_grad"):
        loss.backward()


def test_unknown_dtypes_list_the_supported_ones():
    with raises(TypeError, "unknown dtype", "complex64", "toynet.float32", "toynet.int64"):
        flow.tensor([1.0], dtype="complex64")
    with raises(TypeError, "float128"):
        flow.zeros(2, dtype="float128")
    with raises(TypeError, "complex128", "not supported", "float32"):
        flow.tensor(np.array([1 + 2j]))
    with raises(TypeError, "<U3", "not supported"):
        flow.tensor("abc")


def test_impossible_reshapes(device):
    t = flow.randn(2, 3, device=device)
    with raises(ShapeError, "reshape", "(2, 3)", "6 elements", "(4, 2)", "8 elements"):
        t.reshape(4, 2)
    with raises(ShapeError, "reshape", "(2, 3)", "(-1, 4)"):
        t.view(-1, 4)
    with raises(ShapeError, "only one dimension can be -1"):
        t.reshape(-1, -1)
    with raises(ShapeError, "expand", "(2, 3)", "(4, 3)"):
        t.expand(4, 3)
    with raises(ShapeError, "permute", "(0, 0)"):
        t.permute(0, 0)
    with raises(ShapeError, "transpose", "dim 3", "out of range"):
        t.transpose(0, 3)
    with raises(ShapeError, "sum", "dim 2", "valid: -2..1"):
        t.sum(2)
    with raises(ShapeError, "flatten", "start_dim"):
        t.flatten(1, 0)
    with raises(ShapeError, "repeat"):
        t.repeat(2)


def test_joining_mismatched_shapes(device):
    a = flow.randn(2, 3, device=device)
    with raises(ShapeError, "cat", "(2, 3)", "(2, 4)", "dimension 0"):
        flow.cat([a, flow.randn(2, 4, device=device)])
    with raises(ShapeError, "cat", "(2, 3)", "(3,)"):
        flow.cat([a, flow.randn(3, device=device)])
    with raises(ShapeError, "cat", "dim 2", "out of range"):
        flow.cat([a, a], dim=2)
    with raises(ValueError, "stack", "(2, 3)", "(2, 4)"):
        flow.stack([a, flow.randn(2, 4, device=device)])
    with raises(ValueError, "cat", "at least one"):
        flow.cat([])


def test_splitting_errors():
    t = flow.randn(4, 3)
    with raises(ValueError, "split", "at least 1"):
        t.split(0)
    with raises(ValueError, "split", "add up to 3", "size 4"):
        t.split([1, 2])
    with raises(ValueError, "chunk", "at least 1"):
        t.chunk(0)


def test_indexing_errors(device):
    t = flow.randn(3, device=device)
    with raises(ShapeError, "getitem", "(3,)", "out of bounds"):
        t[5]
    with raises(IndexError, "getitem", "out of bounds"):
        t[[0, 7]]
    with raises(ShapeError, "getitem", "too many indices"):
        t[0, 0]
    with raises(IndexError, "unsupported index 1.5"):
        t[1.5]
    with raises(IndexError, "integer or bool"):
        t[flow.tensor([0.0])]
    with raises(ShapeError, "getitem", "does not fit shape (3,)", "boolean"):
        t[flow.tensor([True, False], device=device)]    # the mask's shape, not a Graph-mode complaint


def test_layer_and_loss_errors(device):
    with raises(ShapeError, "linear", "(2, 3)", "(4, 5)", "in_features = 5"):
        F.linear(flow.randn(2, 3, device=device), flow.randn(4, 5, device=device))
    with raises(ShapeError, "mse_loss", "(2, 3)", "(3, 2)"):
        F.mse_loss(flow.randn(2, 3, device=device), flow.randn(3, 2, device=device))
    with raises(ShapeError, "mse_loss", "(3, 1)", "(3,)"):   # NumPy would broadcast this to (3, 3)
        F.mse_loss(flow.randn(3, 1, device=device), flow.randn(3, device=device))
    with raises(ShapeError, "mse_loss", "reduction", "'avg'"):
        F.mse_loss(flow.randn(2, device=device), flow.randn(2, device=device), reduction="avg")


def test_float_only_ops_refuse_integers_in_eager_mode_too():
    ints = flow.tensor([1, 2, 3])
    for call, name in [(ints.mean, "mean"), (ints.var, "var"), (ints.softmax, "softmax")]:
        with raises(ShapeError, name, "floating-point", "toynet.int64", ".to(toynet.float32)"):
            call()
    with raises(ShapeError, "where", "bool", "x > 0"):
        flow.where(flow.tensor([1.0, 0.0]), flow.ones(2), flow.zeros(2))
    with raises(RuntimeError, "floating-point"):
        ints.requires_grad_()


def test_other_argument_errors():
    with raises(ValueError, "clamp", "min", "max"):
        flow.randn(2).clamp()
    with raises(ValueError, "one-element", "(2,)"):
        flow.randn(2).item()
    with raises(RuntimeError, "ambiguous", ".any()"):
        bool(flow.randn(2))
    with raises(TypeError, "Tensor() needs data"):
        flow.Tensor()
    with raises(TypeError, "device must be a string"):
        flow.device(3)


def test_errors_keep_the_array_modules_message(device):
    """When the shape rule has nothing to add, the op's name and the shapes are put in front."""
    t = flow.randn(3, device=device)
    with raises(IndexError, "getitem failed on inputs (3,)", "index 7"):
        t[[7]]


def test_graph_only_errors_do_not_apply_in_eager_mode(device):
    """Inside nn.Graph.build, tensors are lazy: no values to print, branch on or index by a mask. In
    Eager mode all of that works."""
    x = flow.tensor([-1.0, 2.0, 3.0], device=device)
    assert not x.is_lazy
    if (x > 0).any():                                   # Python control flow on data
        picked = x[x > 0]                               # a data-dependent shape
    np.testing.assert_array_equal(picked.numpy(), [2.0, 3.0])
    assert x.sum().item() == 4.0 and float(x.max()) == 3.0
    assert "tensor([-1.,  2.,  3.]" in repr(x)
    assert x.tolist() == [-1.0, 2.0, 3.0] and x.numpy().shape == (3,)
    x[0] = 5.0                                          # item assignment
    assert x.tolist() == [5.0, 2.0, 3.0]
