"""``sum_to``'s forward for Eager mode's usual case, a bias gradient: only leading axes to sum.

The lesson's forward (:class:`toynet.ops.reduce.SumTo`) sums with ``keepdims`` and reshapes, one formula for
every case; its result is a view of the sum. Summing the leading axes away gives the same numbers as a fresh
array of its own, which the fast backward adopts as the leaf's ``.grad`` instead of copying
(:mod:`toynet.dynamic.fast.backward`).
"""

from __future__ import annotations

from ...mode import fast_replacement
from .._op import OPS

_SumTo = type(OPS["sum_to"])
_lesson_forward = _SumTo.forward


@fast_replacement(_SumTo, "forward")
def forward(self, xp, a, shape=(), out=None):
    lead = a.ndim - len(shape)
    if out is None and lead > 0 and shape and a.shape[lead:] == tuple(shape):
        return a.sum(axis=tuple(range(lead)))
    return _lesson_forward(self, xp, a, shape=shape, out=out)
