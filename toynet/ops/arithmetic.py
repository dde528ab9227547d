"""Arithmetic: ``a + b``, ``a - b``, ``a * b``, ``a / b``, ``-a``, ``a ** b`` and ``a * a``, elementwise and
broadcasting, and the matrix product ``a @ b``."""

from __future__ import annotations

import math

from .. import backend
from ._op import Elementwise, Op, ShapeError, broadcast_shapes, needs_grad, register, shape_of, unbroadcast


@register
class Add(Elementwise):
    """``a + b``; d/da = 1, d/db = 1."""

    name = "add"

    def forward(self, xp, a, b, out=None):
        return xp.add(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return unbroadcast(grad, inputs[0]), unbroadcast(grad, inputs[1])


@register
class Sub(Elementwise):
    """``a - b``; d/da = 1, d/db = -1."""

    name = "sub"

    def forward(self, xp, a, b, out=None):
        return xp.subtract(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return unbroadcast(grad, inputs[0]), (unbroadcast(-grad, inputs[1]) if needs_grad(inputs[1]) else None)


@register
class Mul(Elementwise):
    """``a * b``; d/da = b, d/db = a."""

    name = "mul"

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

    def infer(self, *inputs, **attrs):
        # True division of integers gives floats: float64, as NumPy's true_divide (toynet promotes as
        # NumPy does; OneFlow and PyTorch give their default float32 here).
        shape, dtype = super().infer(*inputs, **attrs)
        return shape, dtype if dtype.is_floating_point else backend.float64

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

    def forward(self, xp, a, out=None):
        return xp.negative(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (-grad,)


@register
class Pow(Elementwise):
    """``a ** b``; d/da = b a^(b-1), d/db = a^b log(a)."""

    name = "pow"

    def forward(self, xp, a, b, out=None):
        return xp.power(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        grad_a = grad_b = None
        if needs_grad(a):
            grad_a = unbroadcast(grad * (b * a ** (b - 1)), a)
        if needs_grad(b):
            # d/db a^b = a^b log a; recompute a^b rather than keeping the output for this rare case.
            grad_b = unbroadcast(grad * (a ** b) * (a.log() if hasattr(a, "shape") else math.log(a)), b)
        return grad_a, grad_b


@register
class Square(Elementwise):
    """``a * a``; d/da = 2a."""

    name = "square"

    def forward(self, xp, a, out=None):
        return xp.square(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * inputs[0] * 2,)


@register
class Matmul(Op):
    """``a @ b``, as NumPy's ``matmul``. For matrices, d/da = g @ b^T and d/db = a^T @ g; leading (batch)
    dimensions broadcast, so their gradients are summed back to each input's own shape. A 1-d ``a`` is a row
    and a 1-d ``b`` a column: their gradients come from the same rule on those matrices."""

    name = "matmul"
    supports_out = True

    def forward(self, xp, a, b, out=None):
        return xp.matmul(a, b, out=out)

    def infer(self, a, b, **attrs):
        sa, sb = shape_of(a), shape_of(b)
        if not sa or not sb:
            raise ShapeError(f"matmul: both operands need at least one dimension, got shapes {sa} and {sb}")
        ka = sa[-1]
        kb = sb[-2] if len(sb) >= 2 else sb[0]
        if ka != kb:
            raise ShapeError(f"matmul: cannot multiply shapes {sa} and {sb}: the last dimension of the first "
                             f"({ka}) must equal the {'second-to-last' if len(sb) >= 2 else 'only'} dimension "
                             f"of the second ({kb})")
        batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
        rows = (sa[-2],) if len(sa) >= 2 else ()
        cols = (sb[-1],) if len(sb) >= 2 else ()
        return batch + rows + cols, backend.promote(a.dtype, b.dtype)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        if a.ndim == 1 or b.ndim == 1:
            return self.vector_vjp(grad, a, b)
        return ((grad @ b.mT).sum_to(a.shape) if needs_grad(a) else None,
                (a.mT @ grad).sum_to(b.shape) if needs_grad(b) else None)

    def vector_vjp(self, grad, a, b):
        """The vjp when ``a`` or ``b`` is a vector: a row (``a``) or a column (``b``), whose matrix gradients,
        by the same rule, are reshaped back to vectors."""
        a2, b2 = (a.unsqueeze(0) if a.ndim == 1 else a), (b.unsqueeze(-1) if b.ndim == 1 else b)
        g2 = grad.reshape(1, 1) if a.ndim == b.ndim else grad.unsqueeze(-2 if a.ndim == 1 else -1)
        return ((g2 @ b2.mT).sum_to(a2.shape).reshape(a.shape) if needs_grad(a) else None,
                (a2.mT @ g2).sum_to(b2.shape).reshape(b.shape) if needs_grad(b) else None)
