"""Reductions along short rows (a transformer's softmax over 64 keys), and the ops that spend their time in them.

NumPy reduces along the last axis row by row: for a (16, 4, 64, 64) block of attention scores, ``max`` and
``sum`` over the 64 keys each cost about as much as the ``exp`` itself, because every row of 64 pays a call of
the inner loop. Two cheaper ways to the same numbers:

* **a row sum is a matrix-vector product**, ``rows @ ones``: one BLAS call over all rows (about six times
  faster here);
* **a row maximum by halving**: the elementwise maximum of a row's two halves, then of that's halves, and so on,
  ``log2(n)`` whole-array operations instead of one call per row (exact: a maximum is a maximum);
* **no maximum at all, when it cannot matter.** Softmax subtracts each row's maximum ``m`` only so that ``exp``
  neither overflows nor underflows. Without the shift, if no ``exp(x)`` overflowed and every row's sum is at
  least ``1e-20`` (so ``m >= -46 - log(n)``), every probability down to ``1e-16`` of its row's largest is computed
  to float32's precision, as with the shift (smaller ones, which float32 cannot even add to the largest, may
  come out as subnormal numbers with fewer digits). So the fast softmax tries ``exp(x)`` first, checks those two
  facts on the row sums (a few thousand numbers), and only when they fail (huge logits, or rows far below 0)
  does the shifted computation.

The fast path uses them for ``softmax``, ``log_softmax`` and ``softmax_grad`` when they reduce along the last,
contiguous axis of a floating-point array; anything else goes to the lesson's forward.
"""

from __future__ import annotations

from ...mode import fast_replacement
from .._op import OPS
from . import softmax  # noqa: F401  (registers softmax_grad)

_Softmax, _LogSoftmax, SoftmaxGrad = (type(OPS[name]) for name in ("softmax", "log_softmax", "softmax_grad"))
#: Row sums of ``exp(x)`` from here up (and finite) need no shift: see the module docstring.
SMALLEST_SAFE_SUM = 1e-20
_lesson = {cls: cls.forward for cls in (_Softmax, _LogSoftmax, SoftmaxGrad)}


def along_last_rows(a, dim) -> bool:
    """Can the row kernels serve a reduction of ``a`` along ``dim``?"""
    return a.ndim >= 1 and dim in (-1, a.ndim - 1) and a.dtype.kind == "f" and a.flags.c_contiguous \
        and a.shape[-1] > 1 and a.size > 0


def row_sum(xp, a):
    """``a.sum(-1, keepdims=True)`` as one matrix-vector product."""
    width = a.shape[-1]
    return (a.reshape(-1, width) @ xp.ones(width, dtype=a.dtype)).reshape(a.shape[:-1] + (1,))


def row_max(xp, a):
    """``a.max(-1, keepdims=True)`` by halving the rows (see the module docstring); a new array."""
    while a.shape[-1] > 1:
        half = a.shape[-1] // 2
        top = xp.maximum(a[..., :half], a[..., half:2 * half])
        if a.shape[-1] % 2:   # an odd width: the last column joins the first
            xp.maximum(top[..., :1], a[..., 2 * half:], out=top[..., :1])
        a = top
    return a


def exp_and_row_sums(xp, a):
    """``(e, sums)``: ``exp(a - m)`` and its row sums, with ``m`` 0 when that is safe (see the module docstring),
    else each row's maximum."""
    errstate = getattr(xp, "errstate", None)   # NumPy warns of an overflow, which the check below handles
    if errstate is not None:
        with errstate(over="ignore"):
            e = xp.exp(a)
    else:
        e = xp.exp(a)
    sums = row_sum(xp, e)
    if bool(xp.all(sums >= SMALLEST_SAFE_SUM)) and bool(xp.all(sums < float("inf"))):
        return e, sums
    xp.subtract(a, row_max(xp, a), out=e)
    xp.exp(e, out=e)
    return e, row_sum(xp, e)


@fast_replacement(_Softmax, "forward")
def softmax_forward(self, xp, a, dim=-1):
    if not along_last_rows(a, dim):
        return _lesson[_Softmax](self, xp, a, dim=dim)
    e, sums = exp_and_row_sums(xp, a)
    e *= 1.0 / sums
    return e


@fast_replacement(_LogSoftmax, "forward")
def log_softmax_forward(self, xp, a, dim=-1):
    if not along_last_rows(a, dim):
        return _lesson[_LogSoftmax](self, xp, a, dim=dim)
    shifted = xp.subtract(a, row_max(xp, a))   # (a log-probability keeps its precision only when shifted)
    shifted -= xp.log(row_sum(xp, xp.exp(shifted)))
    return shifted


@fast_replacement(SoftmaxGrad, "forward")
def softmax_grad_forward(self, xp, g, s, dim=-1, out=None):
    if not (along_last_rows(g, dim) and s.flags.c_contiguous and s.dtype == g.dtype):
        return _lesson[SoftmaxGrad](self, xp, g, s, dim=dim, out=out)
    result = xp.multiply(g, s, out=out)
    total = row_sum(xp, result)
    xp.subtract(g, total, out=result)
    result *= s
    return result
