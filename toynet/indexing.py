"""``tensor[index]``: turn a Python index into the ``getitem`` op's attribute and tensor inputs.

Basic pieces (ints, slices, ``None``, ``...``) go into the op's ``index`` attribute, so a traced
graph records them; integer or bool index tensors (and lists) become extra inputs of the op.
"""

from __future__ import annotations

from typing import Any

from . import backend
from .ops import OPS
from .ops.shape import TENSOR_INDEX


def _split_index(t: Any, index: Any) -> tuple[tuple, list]:
    from .tensor import Tensor

    if not isinstance(index, tuple):
        index = (index,)
    spec, tensors = [], []
    for item in index:
        if isinstance(item, Tensor):
            if item.dtype.is_floating_point:
                raise IndexError(f"tensors used as indices must be integer or bool, got {item.dtype}")
            if item.ndim == 0 and item.node is None and item.dtype is not backend.bool_:
                spec.append(int(item.item()))
                continue
            spec.append(TENSOR_INDEX)
            tensors.append(item)
        elif isinstance(item, (list, tuple)) or backend.is_array(item):
            spec.append(TENSOR_INDEX)
            tensors.append(Tensor(item, device=t.device))
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


def getitem(t: Any, index: Any) -> Any:
    from .tensor import apply

    spec, tensors = _split_index(t, index)
    return apply(OPS["getitem"], t, *tensors, index=spec)


def setitem(t: Any, index: Any, value: Any) -> None:
    """In-place assignment ``t[index] = value``; not differentiated, and only in Eager mode."""
    from . import autograd
    from .tensor import Tensor

    if t.is_lazy:
        raise RuntimeError("item assignment (t[i] = v) is not supported inside nn.Graph.build(); build the "
                           "value with toynet.where or toynet.cat instead")
    if t.requires_grad and autograd.is_grad_enabled():
        raise RuntimeError("item assignment on a tensor that requires grad would break its gradient; do it "
                           "under toynet.no_grad() or on a detached tensor")
    spec, tensors = _split_index(t, index)
    it = iter(tensors)
    resolved = tuple(next(it).array if item == TENSOR_INDEX else item for item in spec)
    t.array[resolved] = value.to(t.device).array if isinstance(value, Tensor) else \
        backend.as_device_value(value, t.device, t.dtype)
