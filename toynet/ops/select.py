"""Ops that pick elements or join tensors: indexing (``a[index]``) and its gradient, concatenation, and the
triangles of matrices (``tril``, ``triu``: a transformer's causal mask).

Their vjps move the gradient back: scatter it into zeros at the picked places, slice the concatenation apart,
keep the same triangle of the gradient.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, apply, register, shape_of

#: In an ``index`` attribute, marks the place of a tensor index, which is passed as an extra input.
TENSOR_INDEX = "<tensor>"


def _resolve_index(xp: Any, index: tuple, tensors: tuple) -> tuple:
    """Put the tensor-index arrays back into the places marked in ``index``."""
    it = iter(tensors)
    return tuple(next(it) if item == TENSOR_INDEX else item for item in index)


@register
class GetItem(Op):
    """``a[index]``: basic indexing (ints, slices, None, ...) in the ``index`` attribute; integer or
    bool tensor indices come in as extra inputs (marked by ``TENSOR_INDEX`` in ``index``)."""

    name = "getitem"
    may_alias_input = True

    @property
    def nondifferentiable(self):  # every input after the first is an index
        return tuple(range(1, 64))

    def forward(self, xp, a, *index_arrays, index=()):
        return a[_resolve_index(xp, index, index_arrays)]

    def infer(self, a, *index_tensors, index=()):
        try:  # first whether the index fits at all (also a bool mask's shape), which Eager mode asks too
            shape = backend.index_result_shape(shape_of(a), index, [(tuple(t.shape), t.dtype)
                                                                    for t in index_tensors], TENSOR_INDEX)
        except IndexError as e:
            raise ShapeError(f"getitem: index {index} does not fit shape {shape_of(a)}: {e}") from None
        if any(t.dtype is backend.bool_ for t in index_tensors):
            raise ShapeError("getitem: indexing with a bool mask gives a shape that depends on the data, "
                             "which a traced graph cannot know; use toynet.where(mask, x, 0) instead")
        return shape, a.dtype

    def vjp(self, grad, inputs, output, index=()):
        a, *index_tensors = inputs
        return (apply(GetItemGrad, grad, *index_tensors, index=index, shape=tuple(a.shape)),) + \
            (None,) * len(index_tensors)


@register
class GetItemGrad(Op):
    """The vjp of ``getitem``: zeros of the input's shape with the gradient added at ``index``
    (added, not assigned, so an element picked twice gets both contributions)."""

    name = "getitem_grad"

    @property
    def nondifferentiable(self):
        return tuple(range(1, 64))

    def forward(self, xp, grad, *index_arrays, index=(), shape=()):
        result = xp.zeros(shape, dtype=grad.dtype)
        if index_arrays:
            resolved = []
            for item in _resolve_index(xp, index, index_arrays):
                if hasattr(item, "dtype") and item.dtype == bool:
                    resolved.extend(xp.nonzero(item))  # ufunc.at wants integer indices
                else:
                    resolved.append(item)
            xp.add.at(result, tuple(resolved), grad)
        else:
            result[index] = grad  # basic indexing never picks an element twice
        return result

    def infer(self, grad, *index_tensors, index=(), shape=()):
        return tuple(shape), grad.dtype

    def vjp(self, grad, inputs, output, index=(), shape=()):
        _, *index_tensors = inputs
        return (apply(GetItem, grad, *index_tensors, index=index),) + (None,) * len(index_tensors)


@register
class Cat(Op):
    """Concatenate along ``dim``; the gradient is cut back into the pieces."""

    name = "cat"

    def forward(self, xp, *arrays, dim=0):
        return xp.concatenate(arrays, axis=dim)

    def infer(self, *inputs, dim=0):
        if not inputs:
            raise ShapeError("cat: needs at least one tensor")
        first = shape_of(inputs[0])
        if not 0 <= dim < len(first):
            raise ShapeError(f"cat: dim {dim} is out of range for shape {first}")
        total = 0
        for x in inputs:
            s = shape_of(x)
            if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != dim):
                shapes = ", ".join(str(shape_of(t)) for t in inputs)
                raise ShapeError(f"cat: shapes {shapes} differ outside dimension {dim}; all dimensions but "
                                 f"the one joined must match")
            total += s[dim]
        dtype = backend.promote(*(x.dtype for x in inputs))
        return first[:dim] + (total,) + first[dim + 1:], dtype

    def vjp(self, grad, inputs, output, dim=0):
        grads, start = [], 0
        for x in inputs:
            size = x.shape[dim]
            if getattr(x, "requires_grad", False):
                grads.append(grad[(slice(None),) * dim + (slice(start, start + size),)])
            else:
                grads.append(None)
            start += size
        return tuple(grads)


class _Triangle(Op):
    """The elements on and below (``tril``) or on and above (``triu``) diagonal ``diagonal`` of each matrix in the
    last two dimensions, zeros elsewhere. ``diagonal=0`` is the main diagonal, ``1`` the one above it, ``-1`` the
    one below (an input: a Python int). vjp: the same triangle of the gradient."""

    def forward(self, xp, a, diagonal=0):
        if a.ndim < 2:
            raise ShapeError(_TRIANGLE_NDIM.format(op=self.name, shape=tuple(a.shape)))
        return getattr(xp, self.name)(a, diagonal)

    def infer(self, a, diagonal=0):
        if len(shape_of(a)) < 2:
            raise ShapeError(_TRIANGLE_NDIM.format(op=self.name, shape=shape_of(a)))
        if not isinstance(diagonal, int):
            raise ShapeError(f"{self.name}: diagonal must be an int, got {diagonal!r}")
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, **attrs):
        return (apply(self, grad, *inputs[1:]),) + (None,) * (len(inputs) - 1)


_TRIANGLE_NDIM = ("{op}: needs a tensor with at least 2 dimensions (a matrix, or a batch of them in the last two "
                  "dimensions), got shape {shape}")


@register
class Tril(_Triangle):
    name = "tril"


@register
class Triu(_Triangle):
    name = "triu"


# ------------------------------------------------------------------ reading the index users write


def split_index(index: Any, tensor_type: type, device: Any) -> tuple[tuple, list]:
    """Split a Python index into ``getitem``'s ``index`` attribute and its tensor inputs.

    Basic pieces (ints, slices, ``None``, ``...``) go into the attribute, so a traced graph records them;
    integer or bool index tensors (and lists, which become tensors of ``tensor_type`` on ``device``) are
    extra inputs, marked by :data:`TENSOR_INDEX`. (This module is below the Tensor class, so the class
    is passed in.)
    """
    if not isinstance(index, tuple):
        index = (index,)
    spec, tensors = [], []
    for item in index:
        if isinstance(item, tensor_type):
            if item.dtype.is_floating_point:
                raise IndexError(f"tensors used as indices must be integer or bool, got {item.dtype}")
            if item.ndim == 0 and not item.is_lazy and item.dtype is not backend.bool_:
                spec.append(int(item.item()))
                continue
            spec.append(TENSOR_INDEX)
            tensors.append(item)
        elif isinstance(item, (list, tuple)) or backend.is_array(item):
            spec.append(TENSOR_INDEX)
            tensors.append(tensor_type.from_data(item, device=device))
        elif isinstance(item, slice):
            spec.append(slice(*(None if v is None else int(v) for v in (item.start, item.stop, item.step))))
        elif item is None or item is Ellipsis or isinstance(item, int):
            spec.append(item)
        elif backend.is_host_scalar(item) and isinstance(backend.host_scalar(item), int):  # numpy.int64(2)
            spec.append(int(item))
        else:
            raise IndexError(f"unsupported index {item!r} of type {type(item).__name__}; use ints, slices, "
                             "None, ..., or integer/bool tensors")
    return tuple(spec), tensors
