"""Rounding to whole numbers: floor, ceil, round (half to even, as NumPy and PyTorch) and trunc.

Each is a staircase: flat between the integers, a jump at them. Its derivative is 0 wherever it exists,
so the vjp gives a zero gradient (not ``None``): ``x.floor().sum().backward()`` leaves ``x.grad`` a tensor
of zeros, as PyTorch and OneFlow do, instead of no gradient at all.
"""

from __future__ import annotations

from ._op import Elementwise, register


class Rounding(Elementwise):
    """The shared zero gradient: ``grad * 0`` keeps the gradient's shape, dtype and device."""

    def vjp(self, grad, inputs, output, **attrs):
        return (grad * 0,)


@register
class Floor(Rounding):
    """The largest integer <= a."""

    name = "floor"

    def forward(self, xp, a, out=None):
        return xp.floor(a, out=out)


@register
class Ceil(Rounding):
    """The smallest integer >= a."""

    name = "ceil"

    def forward(self, xp, a, out=None):
        return xp.ceil(a, out=out)


@register
class Round(Rounding):
    """The nearest integer; halves go to the even neighbour (0.5 -> 0, 1.5 -> 2), which does not drift
    upwards when many rounded values are summed."""

    name = "round"

    def forward(self, xp, a, out=None):
        return xp.rint(a, out=out)


@register
class Trunc(Rounding):
    """The integer part: rounds towards zero (-1.7 -> -1)."""

    name = "trunc"

    def forward(self, xp, a, out=None):
        return xp.trunc(a, out=out)
