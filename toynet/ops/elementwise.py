"""Elementwise ops: the output's element ``i`` depends only on element ``i`` of each input.

Inputs broadcast as in NumPy; every vjp sums its gradient back to the input's own shape
(``grad.sum_to(x.shape)``), because an input that was broadcast contributed to many outputs.
Each ``forward`` takes ``out=``: Graph mode's compiled plan writes into preallocated buffers, and a
chain of these ops can be fused into one kernel that works in place.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, broadcast_shapes, register, result_dtype, shape_of


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
    elementwise = True

    def infer(self, *inputs: Any, **attrs: Any) -> tuple:
        shape = broadcast_shapes(self.name, *(shape_of(x) for x in inputs))
        return shape, result_dtype(*inputs)


class Comparison(Elementwise):
    """Comparisons and logic give bool tensors, through which no gradient flows."""

    ufunc = ""

    def forward(self, xp: Any, a: Any, b: Any, out: Any = None) -> Any:
        return getattr(xp, self.ufunc)(a, b, out=out)

    def infer(self, *inputs: Any, **attrs: Any) -> tuple:
        return broadcast_shapes(self.name, *(shape_of(x) for x in inputs)), backend.bool_

    def vjp(self, grad: Any, inputs: tuple, output: Any, **attrs: Any) -> tuple:
        return (None,) * len(inputs)


# ---------------------------------------------------------------------------------------- arithmetic


@register
class Add(Elementwise):
    """``a + b``; d/da = 1, d/db = 1."""

    name = "add"
    ufunc = "add"

    def forward(self, xp, a, b, out=None):
        return xp.add(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        return unbroadcast(grad, a), unbroadcast(grad, b)


@register
class Sub(Elementwise):
    """``a - b``; d/da = 1, d/db = -1."""

    name = "sub"
    ufunc = "subtract"

    def forward(self, xp, a, b, out=None):
        return xp.subtract(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        return unbroadcast(grad, a), (unbroadcast(-grad, b) if needs_grad(b) else None)


@register
class Mul(Elementwise):
    """``a * b``; d/da = b, d/db = a."""

    name = "mul"
    ufunc = "multiply"

    def forward(self, xp, a, b, out=None):
        return xp.multiply(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        return (unbroadcast(grad * b, a) if needs_grad(a) else None,
                unbroadcast(grad * a, b) if needs_grad(b) else None)


@register
class Div(Elementwise):
    """``a / b``; d/da = 1/b, d/db = -a/b^2."""

    name = "div"
    ufunc = "true_divide"

    def forward(self, xp, a, b, out=None):
        return xp.true_divide(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        return (unbroadcast(grad / b, a) if needs_grad(a) else None,
                unbroadcast(-grad * a / (b * b), b) if needs_grad(b) else None)


@register
class Neg(Elementwise):
    """``-a``; d/da = -1."""

    name = "neg"
    ufunc = "negative"

    def forward(self, xp, a, out=None):
        return xp.negative(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (-grad,)


@register
class Pow(Elementwise):
    """``a ** b``; d/da = b a^(b-1), d/db = a^b log(a)."""

    name = "pow"

    def forward(self, xp, a, b, out=None):
        if not hasattr(b, "shape") and b == 2:  # test for an array first: `array == 2` has no truth value
            return xp.square(a, out=out)  # the common case, and much faster than a general power
        return xp.power(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        grad_a = grad_b = None
        if needs_grad(a):
            if hasattr(b, "shape"):
                grad_a = unbroadcast(grad * b * a ** (b - 1), a)
            elif b == 2:
                grad_a = grad * (a * 2)
            else:
                grad_a = grad * (a ** (b - 1) * b)
        if needs_grad(b):
            # d/db a^b = a^b log a; recompute a^b rather than keeping the output for this rare case.
            grad_b = unbroadcast(grad * (a ** b) * (a.log() if hasattr(a, "shape") else _log_scalar(a)), b)
        return grad_a, grad_b


def _log_scalar(value: float) -> float:
    import math
    return math.log(value)


# ---------------------------------------------------------------------------------- transcendental


@register
class Exp(Elementwise):
    """``exp(a)``; d/da = exp(a), which is the output: reuse it."""

    name = "exp"
    ufunc = "exp"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.exp(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * output,)


@register
class Log(Elementwise):
    """``log(a)``; d/da = 1/a."""

    name = "log"
    ufunc = "log"

    def forward(self, xp, a, out=None):
        return xp.log(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad / inputs[0],)


@register
class Sqrt(Elementwise):
    """``sqrt(a)``; d/da = 1 / (2 sqrt(a))."""

    name = "sqrt"
    ufunc = "sqrt"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.sqrt(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * 0.5 / output,)


@register
class Rsqrt(Elementwise):
    """``1 / sqrt(a)``; d/da = -1/2 a^(-3/2) = -out^3 / 2."""

    name = "rsqrt"
    saves_output = True

    def forward(self, xp, a, out=None):
        out = as_array(xp, xp.sqrt(a, out=out))
        return xp.reciprocal(out, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * output * output * output * -0.5,)


@register
class Tanh(Elementwise):
    """``tanh(a)``; d/da = 1 - tanh(a)^2."""

    name = "tanh"
    ufunc = "tanh"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.tanh(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * (1 - output * output),)


@register
class Sigmoid(Elementwise):
    """``1 / (1 + exp(-a))``, computed as ``(tanh(a/2) + 1) / 2``, which never overflows;
    d/da = s (1 - s)."""

    name = "sigmoid"
    saves_output = True

    def forward(self, xp, a, out=None):
        out = as_array(xp, xp.multiply(a, 0.5, out=out))
        xp.tanh(out, out=out)
        xp.add(out, 1, out=out)
        return xp.multiply(out, 0.5, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * output * (1 - output),)


# ------------------------------------------------------------------------------- piecewise linear


@register
class Relu(Elementwise):
    """``max(a, 0)``; d/da = 1 where a > 0, else 0."""

    name = "relu"

    def forward(self, xp, a, out=None):
        return xp.maximum(a, 0, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * (inputs[0] > 0),)


@register
class Relu6(Elementwise):
    """``min(max(a, 0), 6)``; d/da = 1 where 0 < a < 6, else 0."""

    name = "relu6"

    def forward(self, xp, a, out=None):
        out = as_array(xp, xp.maximum(a, 0, out=out))
        return xp.minimum(out, 6, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad * ((a > 0) & (a < 6)),)


@register
class Clamp(Elementwise):
    """``min(max(a, min), max)``; d/da = 1 inside [min, max], else 0."""

    name = "clamp"

    def forward(self, xp, a, out=None, min=None, max=None):
        if min is not None:
            out = as_array(xp, xp.maximum(a, min, out=out))
            a = out
        if max is not None:
            out = xp.minimum(a, max, out=out)
        return out

    def vjp(self, grad, inputs, output, min=None, max=None):
        a = inputs[0]
        inside = None
        if min is not None:
            inside = a >= min
        if max is not None:
            inside = (a <= max) if inside is None else inside & (a <= max)
        return (grad * inside,)


@register
class Abs(Elementwise):
    """``|a|``; d/da = sign(a)."""

    name = "abs"
    ufunc = "absolute"

    def forward(self, xp, a, out=None):
        return xp.abs(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * inputs[0].sign(),)


@register
class Sign(Elementwise):
    """``sign(a)``: -1, 0 or 1; its derivative is 0 almost everywhere, so no gradient flows."""

    name = "sign"
    ufunc = "sign"

    def forward(self, xp, a, out=None):
        return xp.sign(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


@register
class Maximum(Elementwise):
    """Elementwise ``max(a, b)``; the gradient goes to ``a`` where a >= b, else to ``b``."""

    name = "maximum"
    ufunc = "maximum"

    def forward(self, xp, a, b, out=None):
        return xp.maximum(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        a_wins = a >= b
        return (unbroadcast(grad * a_wins, a) if needs_grad(a) else None,
                unbroadcast(grad * ~a_wins, b) if needs_grad(b) else None)


@register
class Minimum(Elementwise):
    """Elementwise ``min(a, b)``; the gradient goes to ``a`` where a <= b, else to ``b``."""

    name = "minimum"
    ufunc = "minimum"

    def forward(self, xp, a, b, out=None):
        return xp.minimum(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        a_wins = a <= b
        return (unbroadcast(grad * a_wins, a) if needs_grad(a) else None,
                unbroadcast(grad * ~a_wins, b) if needs_grad(b) else None)


@register
class Where(Elementwise):
    """``a`` where ``condition`` holds, else ``b``; each branch gets the gradient where it was chosen."""

    name = "where"
    nondifferentiable = (0,)

    def forward(self, xp, condition, a, b, out=None):
        # NumPy takes any truthy values as the condition; the shape rule (and so Graph mode) does not.
        if hasattr(condition, "dtype") and condition.dtype != backend.bool_.array_dtype:
            raise ShapeError(f"where: the condition must be a bool tensor, got {backend.dtype_of(condition)}; "
                             f"compare first (x > 0)")
        result = xp.where(condition, a, b)
        if not hasattr(a, "dtype") and not hasattr(b, "dtype"):  # two numbers: see _where_dtype
            result = result.astype(_where_dtype(a, b).array_dtype)
        if out is None:
            return result
        out[...] = result
        return out

    def infer(self, condition, a, b, **attrs):
        if hasattr(condition, "dtype") and condition.dtype is not backend.bool_:
            raise ShapeError(f"where: the condition must be a bool tensor, got {condition.dtype}; "
                             f"compare first (x > 0)")
        shape = broadcast_shapes(self.name, shape_of(condition), shape_of(a), shape_of(b))
        return shape, _where_dtype(a, b)

    def vjp(self, grad, inputs, output, **attrs):
        condition, a, b = inputs
        zero = grad * 0
        return (None,
                unbroadcast(grad.where(condition, zero), a) if needs_grad(a) else None,
                unbroadcast(zero.where(condition, grad), b) if needs_grad(b) else None)


def _where_dtype(a: Any, b: Any) -> backend.DType:
    """Two numbers as branches (``where(x > 0, 1.0, 0.0)``) give float32, as in PyTorch, not NumPy's
    float64, which would then widen every float32 tensor the mask meets; otherwise NumPy's promotion."""
    if not hasattr(a, "dtype") and not hasattr(b, "dtype") and (isinstance(a, float) or isinstance(b, float)):
        return backend.DEFAULT_FLOAT
    return result_dtype(a, b)


# ---------------------------------------------------------------------------------- comparisons


def _comparison(op_name: str, ufunc: str, doc: str) -> None:
    cls = type(op_name.capitalize(), (Comparison,), {"name": op_name, "ufunc": ufunc, "__doc__": doc})
    register(cls)


for _name, _ufunc, _doc in [
    ("lt", "less", "``a < b``"), ("le", "less_equal", "``a <= b``"), ("gt", "greater", "``a > b``"),
    ("ge", "greater_equal", "``a >= b``"), ("eq", "equal", "``a == b``"), ("ne", "not_equal", "``a != b``"),
    ("logical_and", "logical_and", "``a & b`` on bools"), ("logical_or", "logical_or", "``a | b`` on bools"),
]:
    _comparison(_name, _ufunc, _doc)


@register
class LogicalNot(Elementwise):
    """``~a`` on bools."""

    name = "logical_not"

    def forward(self, xp, a, out=None):
        return xp.logical_not(a, out=out)

    def infer(self, a, **attrs):
        return shape_of(a), backend.bool_

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


# ------------------------------------------------------------------------------- dtype and device


@register
class Cast(Elementwise):
    """Convert to another dtype; the gradient is converted back."""

    name = "cast"

    def forward(self, xp, a, out=None, dtype=None):
        if out is None:
            return a.astype(dtype.array_dtype)
        out[...] = a
        return out

    def infer(self, a, dtype=None):
        return shape_of(a), dtype

    def vjp(self, grad, inputs, output, dtype=None):
        a = inputs[0]
        return (grad.to(a.dtype) if a.dtype.is_floating_point else None,)


@register
class Identity(Elementwise):
    """A copy of ``a`` (``tensor.clone()``)."""

    name = "identity"

    def forward(self, xp, a, out=None):
        if out is None:
            return a.copy()
        out[...] = a
        return out

    def infer(self, a, **attrs):
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, **attrs):
        return (grad,)


@register
class ToDevice(Op):
    """Copy to another device (``tensor.to("cuda")``); the gradient is copied back."""

    name = "to_device"
    changes_device = True

    def forward(self, xp, a, device=None, source=None):
        return backend.to_device(a, source, device)

    def infer(self, a, device=None, source=None):
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, device=None, source=None):
        return (grad.to(source),)
