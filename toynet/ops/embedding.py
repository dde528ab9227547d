"""Embedding lookup: row ``i`` of a weight matrix for every integer index ``i``, and its gradient.

``embedding(weight, indices)`` is ``weight[indices]``: indices of any shape ``S`` give a ``S + (D,)`` tensor of
rows. Its vjp sends each output row's gradient back to the row it was read from; an index that occurs
several times (a common token) collects the sum of its rows' gradients. That is a *scatter-add* into a zero
matrix, ``embedding_grad``. NumPy's ``add.at`` does it one row at a time; sorting the indices and adding
each run of equal ones with ``add.reduceat`` is several times faster on the CPU (``add.at`` stays the
GPU's way). Rows equal to ``padding_idx`` get no gradient, as in PyTorch: a padding token's vector stays
as it was initialised (zeros, for ``nn.Embedding``).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, apply, register, shape_of


def _check_indices(op: str, dtype: Any) -> None:
    if dtype.is_floating_point or dtype is backend.bool_:
        raise ShapeError(f"{op}: indices must be an integer tensor (int64), got {dtype}; convert them with .long()")


def _check_range(op: str, xp: Any, indices: Any, rows: int) -> None:
    """Reading the data: out-of-range indices would wrap around (NumPy) or read garbage (a GPU)."""
    if indices.size and (bool(xp.min(indices) < 0) or bool(xp.max(indices) >= rows)):
        low, high = int(xp.min(indices)), int(xp.max(indices))
        raise IndexError(f"{op}: index out of range: the indices run from {low} to {high}, but the weight has "
                         f"{rows} rows (num_embeddings={rows}), so they must be in [0, {rows})")


@register
class Embedding(Op):
    """``weight[indices]``: the rows of ``weight`` ``(N, D)`` picked by integer ``indices`` of any shape.

    vjp: the output's gradient scatter-added into a zero ``(N, D)`` matrix (``embedding_grad``), except
    into row ``padding_idx``.
    """

    name = "embedding"
    nondifferentiable = (1,)

    def forward(self, xp, weight, indices, padding_idx=None):
        _check_indices(self.name, backend.dtype_of(indices))
        _check_range(self.name, xp, indices, weight.shape[0])
        return xp.take(weight, indices, axis=0)

    def infer(self, weight, indices, padding_idx=None):
        _check_indices(self.name, indices.dtype)
        ws = shape_of(weight)
        if len(ws) != 2:
            raise ShapeError(f"embedding: the weight must be a matrix (num_embeddings, embedding_dim), got shape {ws}")
        if padding_idx is not None and not 0 <= padding_idx < ws[0]:
            raise ShapeError(f"embedding: padding_idx {padding_idx} is outside [0, {ws[0]}) for a weight with "
                             f"{ws[0]} rows")
        return shape_of(indices) + (ws[1],), weight.dtype

    def vjp(self, grad, inputs, output, padding_idx=None):
        weight, indices = inputs
        return apply(EmbeddingGrad, grad, indices, rows=weight.shape[0], padding_idx=padding_idx), None


@register
class EmbeddingGrad(Op):
    """The vjp of ``embedding``: a zero ``(rows, D)`` matrix into which every row of ``grad`` ``S + (D,)`` is
    added at its index (summed where an index repeats); row ``padding_idx`` stays zero."""

    name = "embedding_grad"
    nondifferentiable = (1,)

    def forward(self, xp, grad, indices, rows=0, padding_idx=None):
        width = grad.shape[-1]
        flat, values = indices.reshape(-1), grad.reshape(-1, width)
        result = xp.zeros((rows, width), dtype=grad.dtype)
        if flat.size == 0:
            return result
        if xp.__name__ == "numpy":
            order = xp.argsort(flat, kind="stable")
            ordered = flat[order]
            starts = xp.flatnonzero(xp.concatenate(([True], ordered[1:] != ordered[:-1])))
            result[ordered[starts]] = xp.add.reduceat(values[order], starts, axis=0)
        else:
            xp.add.at(result, flat, values)
        if padding_idx is not None:
            result[padding_idx] = 0
        return result

    def infer(self, grad, indices, rows=0, padding_idx=None):
        if shape_of(grad)[:-1] != shape_of(indices):
            raise ShapeError(f"embedding_grad: a gradient of shape {shape_of(grad)} does not fit indices of shape "
                             f"{shape_of(indices)} (it must be the indices' shape plus the embedding dimension)")
        return (rows, shape_of(grad)[-1]), grad.dtype

    def vjp(self, grad, inputs, output, rows=0, padding_idx=None):
        # Linear in grad: its vjp reads the rows back (the padding row's gradient was dropped, so it reads zero).
        _, indices = inputs
        if padding_idx is not None:
            keep = (indices != padding_idx).to(grad.dtype).unsqueeze(-1)
            return apply(Embedding, grad, indices) * keep, None
        return apply(Embedding, grad, indices), None
