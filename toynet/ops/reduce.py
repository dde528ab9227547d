"""Sums and means, and ``sum_to``, the reduction that undoes broadcasting (the rest, with softmax, are in
:mod:`.reduce_more`).

A reduction's vjp spreads the output gradient back over the reduced dimensions: reshape it to the
"keepdim" shape, then broadcast it to the input's shape.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ._op import OPS, Op, ShapeError, apply, full_reduction, register, require_float, shape_of

# Integers and bools sum to int64, as Sum.out_dtype says (NumPy would sum uint8 to uint64).
_INTEGER_SUMS = dict.fromkeys("biu", backend.int64.array_dtype)


def reduced_shape(shape: tuple, dims: tuple, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def spread(grad: Any, shape: tuple, dims: tuple, keepdim: bool) -> Any:
    """Broadcast the gradient of a reduction back to the input's ``shape``."""
    kept = grad if keepdim else grad.reshape(tuple(1 if i in dims else d for i, d in enumerate(shape)))
    return apply(OPS["broadcast_to"], kept, shape=tuple(shape))


def count(shape: tuple, dims: tuple) -> int:
    n = 1
    for d in dims:
        n *= shape[d]
    return n


class Reduction(Op):
    def infer(self, a, dim=(), keepdim=False, **attrs):
        shape = shape_of(a)
        for d in dim:
            if not 0 <= d < max(len(shape), 1):
                raise ShapeError(f"{self.name}: dim {d} is out of range for shape {shape}")
        return reduced_shape(shape, dim, keepdim), self.out_dtype(a)

    def out_dtype(self, a):
        return a.dtype


@register
class Sum(Reduction):
    """Sum over ``dim``; every input element gets the output's gradient."""

    name = "sum"
    supports_out = True

    def forward(self, xp, a, dim=(), keepdim=False, out=None):
        return full_reduction(xp, xp.sum(a, axis=dim, keepdims=keepdim, out=out, dtype=_INTEGER_SUMS.get(a.dtype.kind)))

    def out_dtype(self, a):
        return a.dtype if a.dtype.is_floating_point else backend.int64

    def vjp(self, grad, inputs, output, dim=(), keepdim=False):
        return (spread(grad, inputs[0].shape, dim, keepdim),)


@register
class Mean(Reduction):
    """Mean over ``dim``; every input element gets 1/n of the output's gradient."""

    name = "mean"
    supports_out = True

    def forward(self, xp, a, dim=(), keepdim=False, out=None):
        return full_reduction(xp, xp.mean(a, axis=dim, keepdims=keepdim, out=out))

    def infer(self, a, dim=(), keepdim=False):
        require_float(self.name, a)
        return super().infer(a, dim=dim, keepdim=keepdim)

    def vjp(self, grad, inputs, output, dim=(), keepdim=False):
        shape = inputs[0].shape
        n = count(shape, dim)   # (0 for an empty batch: the mean is NaN and there is nothing to spread over)
        return (spread(grad * (1.0 / n if n else math.nan), shape, dim, keepdim),)


@register
class SumTo(Op):
    """Sum ``a`` down to ``shape``: the inverse of broadcasting, and so the vjp of every broadcast.

    Leading dimensions that broadcasting added are summed away; dimensions of size 1 in ``shape``
    are summed with keepdim.
    """

    name = "sum_to"
    supports_out = True

    def forward(self, xp, a, shape=(), out=None):
        total = a.sum(axis=summed_axes(a.shape, shape), keepdims=True).reshape(shape)
        if out is None:
            return total
        out[...] = total
        return out

    def infer(self, a, shape=()):
        src = shape_of(a)
        lead = len(src) - len(shape)
        if lead < 0 or any(d not in (1, s) for d, s in zip(shape, src[lead:])):
            raise ShapeError(f"sum_to: cannot sum shape {src} down to {shape}")
        return tuple(shape), a.dtype

    def vjp(self, grad, inputs, output, shape=()):
        return (grad.expand(*inputs[0].shape),)


def summed_axes(src: tuple, shape: tuple) -> tuple:
    """The axes of ``src`` that summing down to ``shape`` adds up: the leading ones broadcasting added,
    and those that are 1 in ``shape`` but not in ``src``."""
    lead = len(src) - len(shape)
    return tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and src[lead + i] != 1)


