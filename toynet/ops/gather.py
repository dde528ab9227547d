"""Picking along one dimension by index tensors: ``gather`` (PyTorch's ``torch.gather``), its gradient
``gather_grad`` (a scatter-add), and ``topk_indices``, the places of the ``k`` largest (or smallest) elements.

``gather(a, index, dim)`` reads ``out[i][j][k] = a[index[i][j][k]][j][k]`` (for ``dim=0``; likewise for the
others): ``index`` has ``a``'s number of dimensions, and may be smaller than ``a`` along the others. Its vjp
adds each gradient element back at the place it was read from. ``tensor.topk(k)`` is ``topk_indices`` then a
``gather`` of the values, so the values are differentiable through ``gather``'s vjp.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, apply, normalize_dim, register, shape_of


def _check_index(op: str, a_shape: tuple, index_shape: tuple, index_dtype: Any, dim: int) -> None:
    if index_dtype.is_floating_point or index_dtype is backend.bool_:
        raise ShapeError(f"{op}: index must be an integer tensor (int64), got {index_dtype}; convert it with .long()")
    if len(index_shape) != len(a_shape):
        raise ShapeError(f"{op}: index has {len(index_shape)} dimension(s) but the input has {len(a_shape)}; they "
                         f"must have the same number (index shape {index_shape}, input shape {a_shape})")
    for d, (i, s) in enumerate(zip(index_shape, a_shape)):
        if d != dim and i > s:
            raise ShapeError(f"{op}: index of shape {index_shape} is larger than the input {a_shape} in dimension "
                             f"{d}; outside dimension {dim} the index may not be larger than the input")


def _trimmed(a: Any, index_shape: tuple, dim: int) -> Any:
    """``a`` cut to the index's size in every dimension but ``dim`` (PyTorch reads only that corner)."""
    if all(d == dim or i == s for d, (i, s) in enumerate(zip(index_shape, a.shape))):
        return a
    return a[tuple(slice(None) if d == dim else slice(0, i) for d, i in enumerate(index_shape))]


@register
class Gather(Op):
    """``out[..., i, ...] = a[..., index[..., i, ...], ...]`` along ``dim`` (NumPy's ``take_along_axis``).
    vjp: the gradient scatter-added into zeros of ``a``'s shape (``gather_grad``)."""

    name = "gather"
    nondifferentiable = (1,)

    def forward(self, xp, a, indices, dim=0):
        _check_index(self.name, a.shape, indices.shape, backend.dtype_of(indices), dim)
        size = a.shape[dim]
        if indices.size and (bool(xp.min(indices) < 0) or bool(xp.max(indices) >= size)):
            raise IndexError(f"gather: index out of range: values from {int(xp.min(indices))} to "
                             f"{int(xp.max(indices))} along dimension {dim} of size {size} (they must be in [0, {size}))")
        return xp.take_along_axis(_trimmed(a, indices.shape, dim), indices, axis=dim)

    def infer(self, a, indices, dim=0):
        _check_index(self.name, shape_of(a), shape_of(indices), indices.dtype,
                     normalize_dim(self.name, dim, len(shape_of(a))))
        return shape_of(indices), a.dtype

    def vjp(self, grad, inputs, output, dim=0):
        a, index = inputs
        return apply(GatherGrad, grad, index, dim=dim, shape=tuple(a.shape)), None


@register
class GatherGrad(Op):
    """The vjp of ``gather``: zeros of ``shape`` with ``grad`` added where ``gather`` read (summed where an index
    repeats: PyTorch's ``scatter_add``). Linear in ``grad``, so its own vjp is a ``gather``."""

    name = "gather_grad"
    nondifferentiable = (1,)

    def forward(self, xp, grad, indices, dim=0, shape=()):
        result = xp.zeros(shape, dtype=grad.dtype)
        places = tuple(indices if d == dim else xp.arange(n).reshape((n,) + (1,) * (indices.ndim - d - 1))
                       for d, n in enumerate(indices.shape))
        xp.add.at(result, places, grad)
        return result

    def infer(self, grad, indices, dim=0, shape=()):
        if shape_of(grad) != shape_of(indices):
            raise ShapeError(f"gather_grad: the gradient's shape {shape_of(grad)} must be the indices' "
                             f"{shape_of(indices)}")
        return tuple(shape), grad.dtype

    def vjp(self, grad, inputs, output, dim=0, shape=()):
        return apply(Gather, grad, inputs[1], dim=dim), None


@register
class TopkIndices(Op):
    """The indices (int64) of the ``k`` largest elements along ``dim`` (smallest with ``largest=False``),
    ordered from the largest (smallest) down, equal elements in the order of their indices (as ONNX's TopK;
    a stable sort gives that, where a partial sort would not). No gradient: ``topk``'s values come from a
    ``gather`` with these indices. ``k`` and ``largest`` are inputs (Python numbers), ``dim`` an attribute."""

    name = "topk_indices"

    def forward(self, xp, a, k=1, largest=True, dim=-1):
        size = a.shape[dim]
        if not 0 <= k <= size:
            raise ShapeError(f"topk: k={k} is out of range for dimension {dim} of size {size} (0 <= k <= {size})")
        key = a.astype("int64") if a.dtype.kind in "bu" else a     # (negating them would wrap around)
        order = xp.argsort(-key if largest else key, axis=dim, kind="stable")
        return xp.take(order, xp.arange(k), axis=dim)

    def infer(self, a, k=1, largest=True, dim=-1):
        shape = list(shape_of(a))
        if not shape:
            raise ShapeError("topk: needs a tensor with at least one dimension, got a 0-d tensor")
        d = normalize_dim("topk", dim, len(shape))
        if not isinstance(k, int) or not 0 <= k <= shape[d]:
            raise ShapeError(f"topk: k={k} is out of range for dimension {dim} of size {shape[d]} (0 <= k <= {shape[d]})")
        shape[d] = k
        return tuple(shape), backend.int64

    def vjp(self, grad, inputs, output, **attrs):
        return (None,) * len(inputs)
