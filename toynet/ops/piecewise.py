"""Piecewise-linear functions of one input: relu, relu6, clamp, abs and sign.

Their derivative is a step (1 inside, 0 outside), so each vjp multiplies the gradient by a mask."""

from __future__ import annotations

from ._op import as_array, Elementwise, register


@register
class Relu(Elementwise):
    """``max(a, 0)``; d/da = 1 where a > 0, else 0."""

    name = "relu"
    #: The mask comes from the output (out > 0 exactly where a > 0), so backward never needs the input:
    #: a compiled graph then frees the input once relu has run, and relu can overwrite it in place.
    saves_output = True

    def forward(self, xp, a, out=None):
        # clip with two bounds has a fast path in NumPy (~3x faster than maximum, which is slowed by NaN
        # handling); it propagates NaN the same way.
        return xp.clip(a, 0, float("inf"), out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * (output > 0),)


@register
class Relu6(Elementwise):
    """``min(max(a, 0), 6)``; d/da = 1 where 0 < a < 6, else 0."""

    name = "relu6"
    saves_output = True  # 0 < out < 6 exactly where 0 < a < 6 (see Relu)

    def forward(self, xp, a, out=None):
        return as_array(xp, xp.clip(a, 0, 6, out=out))  # one pass (see Relu)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * ((output > 0) & (output < 6)),)


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

    def forward(self, xp, a, out=None):
        return xp.abs(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * inputs[0].sign(),)


@register
class Sign(Elementwise):
    """``sign(a)``: -1, 0 or 1; its derivative is 0 almost everywhere, so no gradient flows."""

    name = "sign"

    def forward(self, xp, a, out=None):
        return xp.sign(a, out=out)

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)

