"""Smooth functions of one input: exp, log, square roots, tanh and sigmoid.

Several vjps reuse the op's output (``saves_output``): d/da exp(a) is exp(a) itself."""

from __future__ import annotations

from ._op import register
from .elementwise import Elementwise, as_array


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
