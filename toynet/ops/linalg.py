"""Matrix multiplication, batched and broadcasting like NumPy's ``matmul``."""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, broadcast_shapes, register, shape_of


@register
class Matmul(Op):
    """``a @ b``. For matrices, d/da = g @ b^T and d/db = a^T @ g; leading (batch) dimensions
    broadcast, so their gradients are summed back to each input's own shape. 1-d inputs are treated
    as a row (``a``) or a column (``b``) vector, as NumPy does."""

    name = "matmul"
    supports_out = True

    def forward(self, xp, a, b, out=None):
        return xp.matmul(a, b, out=out)

    def infer(self, a, b, **attrs):
        sa, sb = shape_of(a), shape_of(b)
        if not sa or not sb:
            raise ShapeError(f"matmul: both operands need at least one dimension, got shapes {sa} and {sb}")
        ka = sa[-1]
        kb = sb[-2] if len(sb) >= 2 else sb[0]
        if ka != kb:
            raise ShapeError(f"matmul: cannot multiply shapes {sa} and {sb}: the last dimension of the first "
                             f"({ka}) must equal the {'second-to-last' if len(sb) >= 2 else 'only'} dimension "
                             f"of the second ({kb})")
        batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
        rows = (sa[-2],) if len(sa) >= 2 else ()
        cols = (sb[-1],) if len(sb) >= 2 else ()
        return batch + rows + cols, backend.promote(a.dtype, b.dtype)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        # View vectors as matrices so one pair of formulas covers every case.
        a2 = a.unsqueeze(0) if a.ndim == 1 else a
        b2 = b.unsqueeze(-1) if b.ndim == 1 else b
        if a.ndim == 1 and b.ndim == 1:
            g2 = grad.reshape(1, 1)
        elif a.ndim == 1:
            g2 = grad.unsqueeze(-2)
        elif b.ndim == 1:
            g2 = grad.unsqueeze(-1)
        else:
            g2 = grad
        grad_a = grad_b = None
        if getattr(a, "requires_grad", False):
            grad_a = (g2 @ b2.transpose(-1, -2)).sum_to(a2.shape).reshape(a.shape)
        if getattr(b, "requires_grad", False):
            grad_b = (a2.transpose(-1, -2) @ g2).sum_to(b2.shape).reshape(b.shape)
        return grad_a, grad_b
