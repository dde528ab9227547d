"""``matmul``'s forward when a stack of rows meets one matrix (``x @ w`` with x of shape (B, T, C)).

NumPy's ``matmul`` runs a stacked product as one BLAS call per matrix of the stack (B calls of T rows). When the
right operand is a single matrix, the stack is just B*T rows: one call on the folded rows computes the same
numbers, and BLAS is faster on one tall product than on many short ones (a transformer's linear layers).
"""

from __future__ import annotations

from ...mode import fast_replacement
from .._op import OPS

_Matmul = type(OPS["matmul"])
_lesson_forward = _Matmul.forward


def folded_matmul(xp, a, b, out=None):
    """``a @ b`` for ``a`` of 3 or more dimensions and a matrix ``b``, as one product of a's rows."""
    rows = a.reshape(-1, a.shape[-1])
    if out is None:
        return xp.matmul(rows, b).reshape(a.shape[:-1] + (b.shape[-1],))
    xp.matmul(rows, b, out=out.reshape(-1, out.shape[-1]))   # (a planned buffer is contiguous: a view)
    return out


@fast_replacement(_Matmul, "forward")
def forward(self, xp, a, b, out=None):
    if a.ndim > 2 and b.ndim == 2 and (out is None or out.flags.c_contiguous):
        return folded_matmul(xp, a, b, out)
    return _lesson_forward(self, xp, a, b, out=out)
