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
            grad_b = unbroadcast(grad * (a ** b) * (a.log() if hasattr(a, "shape") else math.log(a)), b)
        return grad_a, grad_b


@register
class SubScaled(Elementwise):
    """``a - scale * b`` as one op: the step of gradient descent, ``param - lr * grad`` (PyTorch's SGD runs
    ``param.add_(grad, alpha=-lr)``, one kernel, for the same reason). d/da = 1, d/db = -scale, d/dscale = -b.

    Eager mode pays a Python call and a Tensor per op, which is most of an update's time on small
    parameters, so it runs this as one op; Graph mode traces its decomposition, the two ops it stands for,
    which its passes fuse with their neighbours as before."""

    name = "sub_scaled"

    def forward(self, xp, a, b, scale, out=None):
        return xp.subtract(a, xp.multiply(scale, b), out=out)

    def decompose(self, a, b, scale):
        return a - scale * b

    def vjp(self, grad, inputs, output, **attrs):
        a, b, scale = inputs
        return (unbroadcast(grad, a),
                unbroadcast(-(grad * scale), b) if needs_grad(b) else None,
                unbroadcast(-(grad * b), scale) if needs_grad(scale) else None)
