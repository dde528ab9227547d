"""Circular and hyperbolic functions of one input, and their inverses: sin ... atanh.

Each derivative is itself a simple function of the input (d/da sin(a) = cos(a)), or of the output where
that is cheaper (d/da tan(a) = 1 + tan(a)^2). The inverse functions' derivatives have poles at the ends
of their domains (asin at +-1, acosh at 1, atanh at +-1); there the gradient is inf, as in PyTorch.
"""

from __future__ import annotations

from ._op import Elementwise, register


@register
class Sin(Elementwise):
    """``sin(a)``; d/da = cos(a)."""

    name = "sin"

    def forward(self, xp, a, out=None):
        return xp.sin(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * inputs[0].cos(),)


@register
class Cos(Elementwise):
    """``cos(a)``; d/da = -sin(a)."""

    name = "cos"

    def forward(self, xp, a, out=None):
        return xp.cos(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (-(grad * inputs[0].sin()),)


@register
class Tan(Elementwise):
    """``tan(a)``; d/da = 1 / cos(a)^2 = 1 + tan(a)^2, which reuses the output."""

    name = "tan"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.tan(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * (1 + output * output),)


@register
class Asin(Elementwise):
    """``arcsin(a)`` for -1 <= a <= 1; d/da = 1 / sqrt(1 - a^2)."""

    name = "asin"

    def forward(self, xp, a, out=None):
        return xp.arcsin(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad * (1 - a * a).rsqrt(),)


@register
class Acos(Elementwise):
    """``arccos(a)`` for -1 <= a <= 1; d/da = -1 / sqrt(1 - a^2) (acos = pi/2 - asin)."""

    name = "acos"

    def forward(self, xp, a, out=None):
        return xp.arccos(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (-(grad * (1 - a * a).rsqrt()),)


@register
class Atan(Elementwise):
    """``arctan(a)``; d/da = 1 / (1 + a^2), defined everywhere."""

    name = "atan"

    def forward(self, xp, a, out=None):
        return xp.arctan(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad / (1 + a * a),)


@register
class Sinh(Elementwise):
    """``sinh(a)``; d/da = cosh(a)."""

    name = "sinh"

    def forward(self, xp, a, out=None):
        return xp.sinh(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * inputs[0].cosh(),)


@register
class Cosh(Elementwise):
    """``cosh(a)``; d/da = sinh(a)."""

    name = "cosh"

    def forward(self, xp, a, out=None):
        return xp.cosh(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * inputs[0].sinh(),)


@register
class Asinh(Elementwise):
    """``arsinh(a)``; d/da = 1 / sqrt(a^2 + 1)."""

    name = "asinh"

    def forward(self, xp, a, out=None):
        return xp.arcsinh(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad * (a * a + 1).rsqrt(),)


@register
class Acosh(Elementwise):
    """``arcosh(a)`` for a >= 1; d/da = 1 / sqrt(a^2 - 1)."""

    name = "acosh"

    def forward(self, xp, a, out=None):
        return xp.arccosh(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad * (a * a - 1).rsqrt(),)


@register
class Atanh(Elementwise):
    """``artanh(a)`` for -1 < a < 1; d/da = 1 / (1 - a^2)."""

    name = "atanh"

    def forward(self, xp, a, out=None):
        return xp.arctanh(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad / (1 - a * a),)
