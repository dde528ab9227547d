"""Embedding lookup: row ``i`` of a weight matrix for every integer index ``i``, and its gradient.

``embedding(weight, indices)`` is ``weight[indices]``: indices of any shape ``S`` give a ``S + (D,)`` tensor of
rows. Its vjp sends each output row's gradient back to the row it was read from; an index that occurs
several times (a common token) collects the sum of its rows' gradients. That is a *scatter-add* into a zero
matrix, ``embedding_grad``. NumPy's ``add.at`` does it one row at a time; sorting the indices and adding
each run of equal ones with ``add.reduceat`` is several times faster on the CPU (``add.at`` stays the
GPU's way). The row ``ignore_index`` (``nn.Embedding``'s ``padding_idx``) gets no gradient, as in PyTorch: a
padding token's vector stays as it was initialised (zeros, for ``nn.Embedding``), as targets equal to
``cross_entropy``'s ``ignore_index`` contribute nothing.
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
    into row ``ignore_index`` (the padding row) if the op has one.
    """

    name = "embedding"
    nondifferentiable = (1,)

    def forward(self, xp, weight, indices, ignore_index=None):
        _check_indices(self.name, backend.dtype_of(indices))
        _check_range(self.name, xp, indices, weight.shape[0])
        return xp.take(weight, indices, axis=0)

    def infer(self, weight, indices, ignore_index=None):
        _check_indices(self.name, indices.dtype)
        ws = shape_of(weight)
        if len(ws) != 2:
            raise ShapeError(f"embedding: the weight must be a matrix (num_embeddings, embedding_dim), got shape {ws}")
        if ignore_index is not None and not 0 <= ignore_index < ws[0]:
            raise ShapeError(f"embedding: the padding row {ignore_index} is outside [0, {ws[0]}) for a weight with "
                             f"{ws[0]} rows")
        return shape_of(indices) + (ws[1],), weight.dtype

    def vjp(self, grad, inputs, output, **attrs):
        weight, indices = inputs
        return apply(EmbeddingGrad, grad, indices, shape=tuple(weight.shape), **attrs), None


@register
class EmbeddingGrad(Op):
    """The vjp of ``embedding``: a zero matrix of ``shape`` ``(N, D)`` into which every row of ``grad`` ``S + (D,)``
    is added at its index (summed where an index repeats); row ``ignore_index`` stays zero."""

    name = "embedding_grad"
    nondifferentiable = (1,)

    def forward(self, xp, grad, indices, shape=(), ignore_index=None):
        width = grad.shape[-1]
        flat, values = indices.reshape(-1), grad.reshape(-1, width)
        result = xp.zeros(shape, dtype=grad.dtype)
        if flat.size == 0:
            return result
        if xp.__name__ == "numpy":
            order = xp.argsort(flat, kind="stable")
            ordered = flat[order]
            starts = xp.flatnonzero(xp.concatenate(([True], ordered[1:] != ordered[:-1])))
            result[ordered[starts]] = xp.add.reduceat(values[order], starts, axis=0)
        else:
            xp.add.at(result, flat, values)
        if ignore_index is not None:
            result[ignore_index] = 0
        return result

    def infer(self, grad, indices, shape=(), ignore_index=None):
        if shape_of(grad)[:-1] != shape_of(indices) or len(shape) != 2 or shape[1] != shape_of(grad)[-1]:
            raise ShapeError(f"embedding_grad: a gradient of shape {shape_of(grad)} does not fit indices of shape "
                             f"{shape_of(indices)} and a weight of shape {tuple(shape)} (it must be the indices' "
                             "shape plus the embedding dimension)")
        return tuple(shape), grad.dtype

    def vjp(self, grad, inputs, output, shape=(), ignore_index=None):
        # Linear in grad: its vjp reads the rows back (the padding row's gradient was dropped, so it reads zero).
        _, indices = inputs
        if ignore_index is not None:
            keep = (indices != ignore_index).to(grad.dtype).unsqueeze(-1)
            return apply(Embedding, grad, indices) * keep, None
        return apply(Embedding, grad, indices), None
