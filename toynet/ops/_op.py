"""What an op is: the single definition both designs (Eager ``Tensor`` and static ``Node``) run.

An op is three rules about one mathematical function, and optionally a fourth:

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
``decompose(*inputs, **attrs)`` (optional)
    the same function written with simpler toynet ops: Graph mode traces that instead of the op.

A few flags say what the passes and the memory planner may do with an op (``elementwise``, ``random``,
``supports_out``...). Every op is registered by name in :data:`OPS`, which is how a saved graph finds its
ops again.
"""

from __future__ import annotations

from typing import Any

from .. import backend

Shape = tuple[int, ...]


class ShapeError(ValueError, RuntimeError):
    """Inputs whose shapes (or dtypes) an op cannot accept; the message names the op and the fix.

    A ``ValueError`` (a bad argument) and a ``RuntimeError`` too: OneFlow and PyTorch raise their operators'
    shape errors as ``RuntimeError``, and code written for them catches that."""


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
    #: The output lives on another device than the inputs (``to_device``), named by ``attrs["device"]``.
    changes_device: bool = False

    def forward(self, xp: Any, *args: Any, **attrs: Any) -> Any:
        raise NotImplementedError(f"op {self.name!r} has no forward rule")

    def vjp(self, grad: Any, inputs: tuple, output: Any, **attrs: Any) -> tuple:
        raise NotImplementedError(f"op {self.name!r} is not differentiable")

    def infer(self, *inputs: Any, **attrs: Any) -> tuple[Shape, backend.DType]:
        raise NotImplementedError(f"op {self.name!r} has no shape rule")

    #: Optional fourth rule, ``decompose(*inputs, **attrs)``: the same function written with simpler toynet
    #: ops. Graph mode traces the decomposition instead of the op, so that its passes can work across the
    #: pieces (the fused ops of :mod:`toynet.ops.fast` have one).
    decompose: Any = None

    def describe(self, **attrs: Any) -> str:
        """A short label with the attributes that matter, for graph printouts and pictures."""
        shown = ", ".join(f"{k}={_short(v)}" for k, v in attrs.items())
        return f"{self.name}[{shown}]" if shown else self.name

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def _short(value: Any) -> str:
    if isinstance(value, slice):
        return f"{'' if value.start is None else value.start}:{'' if value.stop is None else value.stop}" + (
            "" if value.step is None else f":{value.step}")
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


#: Every op, by name.
OPS: dict[str, Op] = {}


def apply(op: Op, *inputs: Any, **attrs: Any) -> Any:
    """``toynet.dynamic.tensor.apply``, for vjp rules that need an op with no tensor method.

    tensor.py imports this op table, so the op modules cannot import tensor.py back; tensor.py hands
    its ``apply`` over (``_apply``) once it has loaded.
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
    """NumPy's broadcasting rule (sizes are compared from the last dimension back: they must match or be 1),
    with an error that says which dimensions clash."""
    try:
        return backend.host.broadcast_shapes(*shapes)
    except ValueError:
        for axis in range(-max(len(s) for s in shapes), 0):
            sizes = list(dict.fromkeys(s[axis] for s in shapes if len(s) >= -axis and s[axis] != 1))
            if len(sizes) > 1:
                raise ShapeError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast "
                                 f"together: dimension {axis} is {sizes[0]} in one and {sizes[1]} in the other "
                                 "(sizes must match or be 1)") from None
        raise


def result_dtype(*inputs: Any) -> backend.DType:
    """The dtype an elementwise op produces: NumPy's promotion, Python numbers being 'weak'.

    ``float32 tensor * 2.0`` stays float32, as in PyTorch.
    """
    return backend.promote(*(x.dtype if hasattr(x, "dtype") else x for x in inputs))


def normalize_dim(op: str, dim: int, ndim: int) -> int:
    """Turn a possibly negative dimension into 0..ndim-1, with a clear error when out of range."""
    if not -(ndim or 1) <= dim < (ndim or 1):  # a 0-d tensor takes dims 0 and -1, as in PyTorch
        raise ShapeError(f"{op}: dim {dim} is out of range for a tensor with {ndim} dimension(s) "
                         f"(valid: {-(ndim or 1)}..{(ndim or 1) - 1})")
    return dim % (ndim or 1)


def normalize_dims(op: str, dims: Any, ndim: int) -> tuple[int, ...]:
    """``None`` means all dimensions; an int or a sequence is normalised and sorted."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (int, backend.host.integer)):  # (NumPy integers too, as Python takes them)
        dims = (dims,)
    out = tuple(sorted({normalize_dim(op, d, ndim) for d in dims}))
    return out


def full_reduction(xp: Any, value: Any) -> Any:
    """NumPy returns a scalar, not an array, when reducing over every axis; make it a 0-d array so
    every op output supports the same operations (in-place writes, ``out=``) on every array module."""
    return xp.asarray(value)


def require_float(op: str, x: Any) -> None:
    if hasattr(x, "dtype") and not x.dtype.is_floating_point:
        raise ShapeError(f"{op}: needs a floating-point tensor, got {x.dtype}; convert it with "
                         f".to(toynet.float32)")


# ------------------------------------------------------------------------------------ elementwise ops
#
# An elementwise op's output element ``i`` depends only on element ``i`` of each input. Inputs broadcast as in
# NumPy, so every vjp sums its gradient back to the input's own shape (``grad.sum_to(x.shape)``): an input
# that was broadcast contributed to many outputs. Each ``forward`` takes ``out=``: Graph mode's compiled plan
# writes into preallocated buffers, and a chain of these ops can be fused into one kernel that works in place.


def needs_grad(x: Any) -> bool:
    """Only tensors that require grad get a gradient; skipping the rest saves work (and is exact)."""
    return getattr(x, "requires_grad", False)


def as_array(xp: Any, value: Any) -> Any:
    """NumPy ufuncs return a scalar, not a 0-d array, for 0-d inputs; the in-place steps that follow
    (and ``out=``) need an array."""
    return xp.asarray(value)


def unbroadcast(grad: Any, x: Any) -> Any:
    """The gradient for input ``x``: ``grad`` summed over the dimensions ``x`` was broadcast along."""
    return grad.sum_to(x.shape) if needs_grad(x) else None


class Elementwise(Op):
    """The base of elementwise ops: the output has the inputs' broadcast shape and promoted dtype."""

    elementwise = True

    def infer(self, *inputs: Any, **attrs: Any) -> tuple:
        shape = broadcast_shapes(self.name, *(shape_of(x) for x in inputs))
        return shape, result_dtype(*inputs)

