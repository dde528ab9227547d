"""What an op is: the single definition both designs (Eager ``Tensor`` and static ``Node``) run.

An op is three rules about one mathematical function:

``forward(xp, *args, **attrs)``
    computes the output array with the array module ``xp`` (NumPy or CuPy). ``args`` are arrays or
    plain Python numbers; ``attrs`` are the op's settings (``dim=1``, ``stride=(2, 2)``...).
``vjp(grad, inputs, output, **attrs)``
    the vector-Jacobian product: given the gradient of the loss with respect to the output, return
    the gradient with respect to each input (``None`` where there is none). It is written with
    *toynet tensor operations*, never with arrays, so the very same rule
    - computes gradients in Eager mode,
    - builds a differentiable graph when ``create_graph=True`` (higher-order gradients), and
    - emits the backward ``Node``\\ s when it runs on the lazy tensors of Graph mode.
``infer(*inputs, **attrs)``
    the shape rule: output ``(shape, dtype)`` from the inputs' shapes and dtypes alone. Graph mode
    uses it to trace without data; Eager mode uses it to explain a failure in toynet's own words.

A few cheap ops also carry an optional ``emit`` rule: the line of code Graph mode's compiler writes
for them instead of a call of ``forward`` (see :attr:`Op.emit`).

Every op is registered by name in :data:`OPS`, which is how a saved graph finds its ops again.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from .. import backend

Shape = tuple[int, ...]


class ShapeError(ValueError):
    """Inputs whose shapes (or dtypes) an op cannot accept; the message names the op and the fix."""


class Op:
    """Base class of all ops. Subclasses set :attr:`name` and override the three rules."""

    name: str = ""
    #: The output's element ``i`` depends only on element ``i`` of each (broadcast) input; such ops
    #: can be fused into one kernel, and their ``forward`` accepts ``out=`` to write in place.
    elementwise: bool = False
    #: The op draws random numbers: never constant-folded or merged with an identical-looking op.
    random: bool = False
    #: Positions of inputs that never receive a gradient (indices, masks, integer targets).
    nondifferentiable: tuple[int, ...] = ()
    #: The vjp reads the op's output (``exp``, ``tanh``...): the output is kept for backward.
    saves_output: bool = False
    #: ``forward`` accepts ``out=`` (an array of the output's shape and dtype) and writes the result
    #: there: the compiled plan then gives it a preallocated, reused buffer. Elementwise ops always do.
    supports_out: bool = False
    #: Without ``out=``, ``forward`` may return a *view* of its first input (reshape, transpose, slicing):
    #: the memory planner must keep the input's buffer alive as long as the view is read.
    may_alias_input: bool = False
    #: The NumPy/CuPy ufunc this op is (``"add"``), so generated code can call ``xp.add`` directly.
    ufunc: str = ""
    #: The output lives on another device than the inputs (``to_device``), named by ``attrs["device"]``.
    changes_device: bool = False

    def forward(self, xp: Any, *args: Any, **attrs: Any) -> Any:
        raise NotImplementedError(f"op {self.name!r} has no forward rule")

    def vjp(self, grad: Any, inputs: tuple, output: Any, **attrs: Any) -> tuple:
        raise NotImplementedError(f"op {self.name!r} is not differentiable")

    def infer(self, *inputs: Any, **attrs: Any) -> tuple[Shape, backend.DType]:
        raise NotImplementedError(f"op {self.name!r} has no shape rule")

    #: Optional fourth rule, ``decompose(*inputs, **attrs)``: the same function written with simpler
    #: toynet ops. Eager mode runs the op as one call (fewer Python calls); Graph mode traces the
    #: decomposition instead, so constant folding, CSE and fusion can work across its pieces.
    decompose: Any = None

    #: Optional fifth rule, ``emit(args, inputs, out=None, **attrs)``: the op as one Python expression
    #: in the code Graph mode compiles (``"v3.reshape((2000,))"``), for ops so cheap that calling
    #: ``forward`` (one more Python call, attributes bound by ``functools.partial``) would cost more than
    #: the work itself, which matters when arrays are small. ``args`` are the inputs' names in the
    #: generated code (or literals' source), ``inputs`` the inputs themselves as the compiler knows
    #: them (nodes with ``shape`` and ``dtype``; literal numbers as they are), ``out`` the name of the
    #: array to write into, or None (a string; ``out.reshaped(shape)`` names the same memory seen with
    #: another shape, or is None where that cannot be made in advance), and ``attrs`` the op's
    #: attributes. Attributes go into the code through ``repr`` (``f"{shape!r}"``), never as raw text.
    #: Return None where the expression does not apply: the plan then calls ``forward``, which gives
    #: the same result. In the expression, ``xp`` names the array module.
    emit: Any = None

    #: Optional sixth rule, ``kernels(args, inputs, out=None, **attrs)``: other ways to compute the same
    #: result, for Graph mode's compile-time kernel choice (``toynet.static.passes.kernels``). Same
    #: arguments as ``emit``; returns ``{kernel name: expression}``, in which the first entry is what
    #: ``emit`` writes and the others compute the same values another way (a BLAS product instead of a
    #: NumPy reduction, say). Only candidates that fit the inputs are listed; ``{}`` when none does. The
    #: compiler times each one on arrays of the real shapes and keeps the fastest, as cuDNN's benchmark
    #: mode does. Expressions may name vectors of ones (see :func:`ones_name`).
    kernels: Any = None

    #: Optional seventh rule, ``algorithms(*inputs, **attrs)``: the values of the op's ``algorithm``
    #: attribute that can compute these inputs, the usual one first (a channels-last depthwise convolution
    #: runs per kernel tap, over padded rows, or as a matrix per channel). Graph mode's compile-time kernel
    #: choice times each and sets the attribute on the node.
    algorithms: Any = None

    def describe(self, **attrs: Any) -> str:
        """A short label with the attributes that matter, for graph printouts and pictures."""
        shown = ", ".join(f"{k}={_short(v)}" for k, v in attrs.items())
        return f"{self.name}[{shown}]" if shown else self.name

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def call_source(function: str, args: list[str], out: str | None = None) -> str:
    """Source of a call in generated code: ``function(a, b)``, or ``function(a, b, out=buffer)``."""
    return f"{function}({', '.join(args)}" + (f", out={out})" if out else ")")


def _short(value: Any) -> str:
    if isinstance(value, slice):
        return f"{'' if value.start is None else value.start}:{'' if value.stop is None else value.stop}" + (
            "" if value.step is None else f":{value.step}")
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


# ------------------------------------------------------------------------------ when Eager mode fails


def explain_failure(op: Op, inputs: Sequence, attrs: dict, error: Exception) -> Exception:
    """Turn an array-module error into one that names the op and the shapes.

    Eager mode lets the array module find shape problems (running the shape rule on every op would
    cost time on every call); when it fails, the op's shape rule runs to say what was wrong.
    """
    if isinstance(error, ShapeError):
        return error
    try:
        op.infer(*inputs, **attrs)
    except ShapeError as explained:
        return explained
    except Exception:
        pass
    shapes = ", ".join(str(tuple(x.shape)) if _is_tensor(x) else repr(x) for x in inputs)
    return type(error)(f"{op.name} failed on inputs {shapes}: {error}") if isinstance(
        error, (ValueError, TypeError, IndexError)) else error


def device_mismatch(op: Op, inputs: Sequence) -> str:
    """The message of an op given tensors on different devices."""
    devices = [str(x.device) for x in inputs if _is_tensor(x)]
    return (f"{op.name}: expected all tensors to be on the same device, but found {' and '.join(devices)}; "
            f"move them with tensor.to(device) first")


def _is_tensor(x: Any) -> bool:  # (this module sits below Tensor: it never names the class)
    return hasattr(x, "grad_fn") and hasattr(x, "device")


#: Every op, by name.
OPS: dict[str, Op] = {}


def apply(op: Op, *inputs: Any, **attrs: Any) -> Any:
    """``toynet.dynamic.tensor.apply``, for vjp rules that need an op with no tensor method.

    tensor.py imports this op table, so the op modules cannot import tensor.py back; tensor.py hands
    its ``apply`` over (``_apply``) once it has loaded. (An import inside every vjp would cost a
    microsecond on every backward.)
    """
    return _apply(op, *inputs, **attrs)


_apply: Any = None


def register(cls: type[Op]) -> Op:
    """Class decorator: instantiate the op once and record it in :data:`OPS` under ``cls.name``."""
    op = cls()
    if not op.name:
        raise TypeError(f"{cls.__name__} must set a name")
    if op.name in OPS:
        raise KeyError(f"two ops are named {op.name!r}")
    OPS[op.name] = op
    return op


# ----------------------------------------------------------------------------------- shared shape rules


def shape_of(x: Any) -> Shape:
    """Shape of a tensor-like input; Python numbers are 0-d."""
    return tuple(x.shape) if hasattr(x, "shape") else ()


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    """NumPy's broadcasting rule, with an error that says which dimensions clash."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -axis:
                d = s[axis]
                if d != 1:
                    if size not in (1, d):
                        listed = " and ".join(str(tuple(s)) for s in shapes)
                        raise ShapeError(
                            f"{op}: shapes {listed} cannot be broadcast together: dimension {axis} "
                            f"is {size} in one and {d} in the other (sizes must match or be 1)")
                    size = d
        result.append(size)
    return tuple(result)


def result_dtype(*inputs: Any) -> backend.DType:
    """The dtype an elementwise op produces: NumPy's promotion, Python numbers being 'weak'.

    ``float32 tensor * 2.0`` stays float32, as in PyTorch.
    """
    return backend.promote(*(x.dtype if hasattr(x, "dtype") else x for x in inputs))


def normalize_dim(op: str, dim: int, ndim: int) -> int:
    """Turn a possibly negative dimension into 0..ndim-1, with a clear error when out of range."""
    n = ndim or 1  # a 0-d tensor takes dims 0 and -1, as in PyTorch
    if not -n <= dim < n:
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor with {ndim} dimension(s) "
                         f"(valid: {-n}..{n - 1})")
    return dim % n


def normalize_dims(op: str, dims: Any, ndim: int) -> tuple[int, ...]:
    """``None`` means all dimensions; an int or a sequence is normalised and sorted."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({normalize_dim(op, d, ndim) for d in dims}))
    return out


def full_reduction(xp: Any, value: Any) -> Any:
    """NumPy returns a scalar, not an array, when reducing over every axis; make it a 0-d array so
    every op output supports the same operations (in-place writes, ``out=``) on every array module."""
    return xp.asarray(value)


def ones_name(n: int, dtype: str) -> str:
    """The name generated code gives a vector of ``n`` ones of ``dtype`` (``_ones_float32_2000``): a sum
    over axes is a matrix product with it, which BLAS runs several times faster than a NumPy reduction.
    :func:`bind_ones` puts the vectors a piece of code names into its namespace, once."""
    return f"_ones_{dtype}_{int(n)}"


_ONES_NAME = re.compile(r"\b_ones_(float32|float64)_(\d+)\b")


def bind_ones(code: str, namespace: dict, xp: Any) -> None:
    """Make every ``_ones_<dtype>_<n>`` that ``code`` (an op's generated expression, never a comment
    with a user's text in it) names, read-only on NumPy: nothing should write into a constant."""
    for match in _ONES_NAME.finditer(code):
        if match.group(0) not in namespace:
            ones = xp.ones(int(match.group(2)), dtype=match.group(1))
            if xp.__name__ == "numpy":  # (CuPy arrays have no read-only flag)
                ones.flags.writeable = False
            namespace[match.group(0)] = ones


def require_float(op: str, x: Any) -> None:
    if hasattr(x, "dtype") and not x.dtype.is_floating_point:
        raise ShapeError(f"{op}: needs a floating-point tensor, got {x.dtype}; convert it with "
                         f".to(toynet.float32)")
