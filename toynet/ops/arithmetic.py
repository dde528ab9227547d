"""Arithmetic: ``a + b``, ``a - b``, ``a * b``, ``a / b``, ``-a`` and ``a ** b``, elementwise and broadcasting."""

from __future__ import annotations

import math

from .. import backend
from ._op import register
from .elementwise import Elementwise, needs_grad, unbroadcast


@register
class Add(Elementwise):
    """``a + b``; d/da = 1, d/db = 1."""

    name = "add"

    def forward(self, xp, a, b, out=None):
        return xp.add(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        return unbroadcast(grad, a), unbroadcast(grad, b)


@register
class Sub(Elementwise):
    """``a - b``; d/da = 1, d/db = -1."""

    name = "sub"

    def forward(self, xp, a, b, out=None):
        return xp.subtract(a, b, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        return unbroadcast(grad, a), (unbroadcast(-grad, b) if needs_grad(b) else None)


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
