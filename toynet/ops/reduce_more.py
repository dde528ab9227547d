"""The reductions beyond sums and means (var, max, argmax, any, all) and the normalisations built on them
(softmax, log-softmax). Their vjps spread the gradient back over the reduced dimensions as :mod:`.reduce`
explains; max sends it to the places that held the maximum.
"""

from __future__ import annotations

import math


from .. import backend
from ._op import Op, full_reduction, register, require_float, shape_of
from .reduce import Reduction, count, reduced_shape, spread


@register
class Var(Reduction):
    """Variance over ``dim`` (``unbiased`` divides by n-1); d/da = 2 (a - mean) / (n - ddof)."""

    name = "var"

    def forward(self, xp, a, dim=(), keepdim=False, unbiased=True):
        return full_reduction(xp, xp.var(a, axis=dim, keepdims=keepdim, ddof=1 if unbiased else 0))

    def infer(self, a, dim=(), keepdim=False, unbiased=True):
        require_float(self.name, a)
        return super().infer(a, dim=dim, keepdim=keepdim)

    def vjp(self, grad, inputs, output, dim=(), keepdim=False, unbiased=True):
        a = inputs[0]
        n = count(a.shape, dim) - (1 if unbiased else 0)
        centered = a - a.mean(dim, keepdim=True)
        return (spread(grad, a.shape, dim, keepdim) * centered * (2.0 / n if n else math.nan),)


@register
class Amax(Reduction):
    """Largest element over ``dim``; the gradient goes to the maximal elements (split evenly on ties)."""

    name = "amax"
    supports_out = True
    saves_output = True

    def forward(self, xp, a, dim=(), keepdim=False, out=None):
        return full_reduction(xp, xp.amax(a, axis=dim, keepdims=keepdim, out=out))

    def vjp(self, grad, inputs, output, dim=(), keepdim=False):
        a = inputs[0]
        is_max = a == spread(output, a.shape, dim, keepdim)
        ties = is_max.sum(dim, keepdim=True).to(grad.dtype)
        return (spread(grad, a.shape, dim, keepdim) * is_max / ties,)


@register
class Argmax(Op):
    """Index of the largest element along ``dim`` (int64, no gradient)."""

    name = "argmax"

    def forward(self, xp, a, dim=0, keepdim=False):
        result = full_reduction(xp, xp.argmax(a, axis=dim))
        return xp.expand_dims(result, dim) if keepdim else result

    def infer(self, a, dim=0, keepdim=False):
        return reduced_shape(shape_of(a), (dim,), keepdim), backend.int64

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


class _BoolReduction(Op):
    def infer(self, a, **attrs):
        return (), backend.bool_

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


@register
class Any_(_BoolReduction):
    """True if any element is nonzero."""

    name = "any"

    def forward(self, xp, a):
        return full_reduction(xp, xp.any(a))


@register
class All(_BoolReduction):
    """True if every element is nonzero."""

    name = "all"

    def forward(self, xp, a):
        return full_reduction(xp, xp.all(a))


@register
class Softmax(Op):
    """``exp(a) / sum(exp(a))`` along ``dim``, shifted by the max so exp never overflows;
    vjp: s * (g - sum(g * s))."""

    name = "softmax"
    saves_output = True

    def forward(self, xp, a, dim=-1):
        shifted = a - xp.max(a, axis=dim, keepdims=True)
        e = xp.exp(shifted, out=shifted)
        e /= xp.sum(e, axis=dim, keepdims=True)
        return e

    def infer(self, a, dim=-1):
        require_float(self.name, a)
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, dim=-1):
        return (output * (grad - (grad * output).sum(dim, keepdim=True)),)


@register
class LogSoftmax(Op):
    """``a - log(sum(exp(a)))`` along ``dim``, computed stably; vjp: g - softmax(a) * sum(g)."""

    name = "log_softmax"
    saves_output = True

    def forward(self, xp, a, dim=-1):
        shifted = a - xp.max(a, axis=dim, keepdims=True)
        log_total = xp.log(xp.sum(xp.exp(shifted), axis=dim, keepdims=True))
        shifted -= log_total
        return shifted

    def infer(self, a, dim=-1):
        require_float(self.name, a)
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, dim=-1):
        return (grad - output.exp() * grad.sum(dim, keepdim=True),)
