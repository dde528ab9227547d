"""Comparing values: maximum, minimum and where choose between values and send the gradient to the one
chosen; comparisons (``< <= > >= == !=``) and logic (``& | ~``) give bool tensors, with no gradient."""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import broadcast_shapes, Elementwise, needs_grad, register, result_dtype, shape_of, ShapeError, unbroadcast


@register
class Maximum(Elementwise):
    """Elementwise ``max(a, b)``; the gradient goes to ``a`` where a >= b, else to ``b``."""

    name = "maximum"

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


class Comparison(Elementwise):
    """Comparisons and logic give bool tensors, through which no gradient flows."""

    function = ""  # the NumPy/CuPy function it is: "less", "equal"...

    def forward(self, xp: Any, a: Any, b: Any, out: Any = None) -> Any:
        return getattr(xp, self.function)(a, b, out=out)

    def infer(self, *inputs: Any, **attrs: Any) -> tuple:
        return broadcast_shapes(self.name, *(shape_of(x) for x in inputs)), backend.bool_

    def vjp(self, grad: Any, inputs: tuple, output: Any, **attrs: Any) -> tuple:
        return (None,) * len(inputs)


def _comparison(op_name: str, function: str, doc: str) -> None:
    cls = type(op_name.capitalize(), (Comparison,), {"name": op_name, "function": function, "__doc__": doc})
    register(cls)


for _name, _function, _doc in [
    ("lt", "less", "``a < b``"), ("le", "less_equal", "``a <= b``"), ("gt", "greater", "``a > b``"),
    ("ge", "greater_equal", "``a >= b``"), ("eq", "equal", "``a == b``"), ("ne", "not_equal", "``a != b``"),
    ("logical_and", "logical_and", "``a & b`` on bools"), ("logical_or", "logical_or", "``a | b`` on bools"),
]:
    _comparison(_name, _function, _doc)


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

