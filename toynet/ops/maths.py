"""Smooth functions of one input: exp, logs, powers (square, square roots, 1/a), tanh, sigmoid and the
error function. (The trigonometric ones are in :mod:`.trigonometry`, rounding in :mod:`.rounding`.)

Several vjps reuse the op's output (``saves_output``): d/da exp(a) is exp(a) itself."""

from __future__ import annotations

import math

from .. import backend
from ._op import as_array, Elementwise, register


@register
class Exp(Elementwise):
    """``exp(a)``; d/da = exp(a), which is the output: reuse it."""

    name = "exp"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.exp(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * output,)


@register
class Log(Elementwise):
    """``log(a)``; d/da = 1/a."""

    name = "log"

    def forward(self, xp, a, out=None):
        return xp.log(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad / inputs[0],)


@register
class Sqrt(Elementwise):
    """``sqrt(a)``; d/da = 1 / (2 sqrt(a))."""

    name = "sqrt"
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


@register
class Expm1(Elementwise):
    """``exp(a) - 1``, exact for tiny ``a`` where ``exp(a)`` rounds to 1; d/da = exp(a) = output + 1."""

    name = "expm1"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.expm1(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * (output + 1),)


@register
class Log1p(Elementwise):
    """``log(1 + a)``, exact for tiny ``a`` where ``1 + a`` rounds to 1; d/da = 1 / (1 + a)."""

    name = "log1p"

    def forward(self, xp, a, out=None):
        return xp.log1p(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad / (inputs[0] + 1),)


@register
class Log2(Elementwise):
    """``log2(a)``; d/da = 1 / (a ln 2)."""

    name = "log2"

    def forward(self, xp, a, out=None):
        return xp.log2(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad / (inputs[0] * math.log(2.0)),)


@register
class Log10(Elementwise):
    """``log10(a)``; d/da = 1 / (a ln 10)."""

    name = "log10"

    def forward(self, xp, a, out=None):
        return xp.log10(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad / (inputs[0] * math.log(10.0)),)


@register
class Reciprocal(Elementwise):
    """``1 / a``; d/da = -1/a^2 = -output^2."""

    name = "reciprocal"
    saves_output = True

    def forward(self, xp, a, out=None):
        return xp.reciprocal(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (-(grad * output * output),)


def _on_host(xp, a, out, function):
    """Apply a Python ``math`` function to every element, on the host.

    NumPy has no erf (SciPy has, but toynet does not depend on it), while ``math.erf`` is the C library's
    accurate one. Calling it per element is slow but exact, which is what a teaching framework needs; a
    GPU array makes the round trip through host memory.
    """
    module = backend.array_module_of_xp(xp)
    on_host = module.to_numpy(a)
    # frompyfunc gives an array of Python floats (a bare float for a 0-d input): back to the input's dtype.
    values = backend.host.asarray(backend.host.frompyfunc(function, 1, 1)(on_host), dtype=on_host.dtype)
    result = module.from_numpy(values)
    if out is None:
        return result
    out[...] = result
    return out


@register
class Erf(Elementwise):
    """The error function ``2/sqrt(pi) * integral of exp(-t^2) from 0 to a``; d/da = 2/sqrt(pi) exp(-a^2)."""

    name = "erf"

    def forward(self, xp, a, out=None):
        return _on_host(xp, a, out, math.erf)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad * (-(a * a)).exp() * (2 / math.sqrt(math.pi)),)


@register
class Erfc(Elementwise):
    """``1 - erf(a)``, computed directly so that it keeps its precision where erf(a) is close to 1
    (erfc(6) is 2e-17; ``1 - erf(6)`` is 0); d/da = -2/sqrt(pi) exp(-a^2)."""

    name = "erfc"

    def forward(self, xp, a, out=None):
        return _on_host(xp, a, out, math.erfc)

    def vjp(self, grad, inputs, output, **attrs):
        a = inputs[0]
        return (grad * (-(a * a)).exp() * (-2 / math.sqrt(math.pi)),)
