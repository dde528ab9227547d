"""Checking a loaded value before anything is written: the first half of an all-or-nothing load.

``Module.load_state_dict``, ``Optimizer.load_state_dict`` and ``nn.Graph.load_state_dict`` all work in two
passes. The first checks every entry and turns each into a tensor ready to be written (:func:`prepared`);
if any entry is wrong, the error lists them all and nothing has changed. The second pass only copies
(``target.copy_(ready)``), which cannot fail, inside :class:`~toynet.utils.interrupts.defer_interrupts`.

What a value may be, for a target tensor of some shape and dtype (``Tensor.copy_`` casts, as documented):

* a concrete toynet tensor, a NumPy array, a number or nested lists of numbers; booleans, integers or
  floats only (strings, objects and complex numbers are refused);
* of exactly the target's shape (no broadcasting when loading);
* with values the target's dtype can hold: any numbers go into a floating-point target, but a finite value
  too large for it (1e39 into float32) is refused; an integer target takes whole numbers in its range,
  a bool target takes 0 and 1 only.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..distributed.global_tensor import GlobalTensor, from_logical
from ..distributed.sbp import broadcast_on
from ..dynamic.tensor import Tensor

_np = backend.host  # NumPy, for the host-side checks

_NUMERIC_KINDS = "biuf"  # bool, signed and unsigned integers, floats
_KIND_NAMES = {"U": "strings", "S": "bytes", "O": "Python objects", "c": "complex numbers", "V": "raw records",
               "M": "dates", "m": "time spans"}


class ShapeMismatch(ValueError):
    """A loaded value of another shape than its target (``got`` and ``expected`` say which)."""

    def __init__(self, got: tuple, expected: tuple):
        super().__init__(f"has shape {got}, expected {expected}")
        self.got, self.expected = got, expected


def prepared(value: Any, shape: tuple, dtype: backend.DType, device: backend.Device, placement: Any = None) -> Tensor:
    """``value`` checked for a target of ``shape``/``dtype``/``device``, as a tensor of that dtype and
    device (a copy only when needed). Raises ``TypeError``/``ValueError`` saying what is wrong. For a global
    target (``placement``: its placement) the value comes back global on that placement: a global value is
    compared by its whole shape and moved there; a local one is the whole value, sent from the placement's
    first process (the target's ``copy_`` then keeps each process's part of it)."""
    if placement is not None:
        if isinstance(value, GlobalTensor):
            if tuple(value.shape) != tuple(shape):
                raise ShapeMismatch(tuple(value.shape), tuple(shape))
            value = value if value.dtype is dtype else value.to(dtype=dtype)
            return value if value.placement == placement else value.to_global(placement=placement)
        whole = prepared(value, shape, dtype, backend.CPU)
        return from_logical(whole, placement, broadcast_on(placement))
    if isinstance(value, GlobalTensor):
        value = value.numpy()    # a global value for a local target: its whole value (every process asks)
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        # A PyTorch state dict's tensor (the torch2flow page): its values, through NumPy as the page does.
        value = value.detach().cpu().numpy()
    if isinstance(value, Tensor):
        if value.node is not None:
            raise TypeError("holds a lazy tensor (made inside nn.Graph.build), which has no value to load")
        array, source = value.array, value.device
    elif isinstance(value, (_np.ndarray, _np.generic, int, float, list, tuple)):
        try:
            array = _np.asarray(value)
        except (ValueError, TypeError, OverflowError) as error:
            raise TypeError(f"holds a {type(value).__name__} that is not an array of numbers ({error})") from None
        source = backend.CPU
    else:
        raise TypeError(f"holds a {type(value).__name__}, not a tensor or an array of numbers")
    kind = getattr(getattr(array, "dtype", None), "kind", None)
    if kind is None or kind not in _NUMERIC_KINDS:
        found = _KIND_NAMES.get(kind, "data")
        raise TypeError(f"holds {found} ({getattr(array, 'dtype', type(array).__name__)}); only booleans, "
                        "integers and floats can be loaded")
    if tuple(array.shape) != tuple(shape):
        raise ShapeMismatch(tuple(array.shape), tuple(shape))
    problem = _cast_problem(backend.to_numpy(array, source), dtype)
    if problem:
        raise ValueError(problem)
    if array.dtype != dtype.array_dtype:
        if source == backend.CPU:
            array = array.astype(dtype.array_dtype)  # also NumPy dtypes toynet has no name for (int16...)
        else:
            return Tensor.wrap(array, source).to(device=device, dtype=dtype)
    ready = Tensor.wrap(array, source)
    return ready if source == device else ready.to(device)


def _cast_problem(host: Any, dtype: backend.DType) -> str | None:
    """Why ``host``'s values do not fit ``dtype`` (None when they do)."""
    if host.size == 0 or host.dtype == dtype.array_dtype:
        return None
    if dtype.is_floating_point:
        if host.dtype.kind != "f" or host.dtype.itemsize <= dtype.itemsize:
            return None  # integers and narrower floats always fit (rounded, as Tensor.copy_ documents)
        finite = host[_np.isfinite(host)]
        limit = _np.finfo(dtype.array_dtype).max
        if finite.size and _np.abs(finite).max() > limit:
            return f"holds values as large as {_np.abs(finite).max():g}, beyond {dtype}'s range (±{limit:g})"
        return None
    if host.dtype.kind == "f":
        if not _np.isfinite(host).all() or (host != _np.trunc(host)).any():
            return f"holds fractional or non-finite {host.dtype} values; a {dtype} entry takes whole numbers only"
    if dtype is backend.bool_:
        low, high = 0, 1
    else:
        info = _np.iinfo(dtype.array_dtype)
        low, high = info.min, info.max
    if host.min() < low or host.max() > high:
        return f"holds values from {host.min()} to {host.max()}, beyond {dtype}'s range [{low}, {high}]"
    return None


def unaliased(writes: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor]]:
    """``(target, ready)`` pairs where no ``ready`` shares memory with *another* target: loading a model's
    own weights under swapped names must not read a weight that the same load has already overwritten."""
    roots = {id(_root(target.array)) for target, _ in writes}
    out = []
    for target, ready in writes:
        root = _root(ready.array)
        if id(root) in roots and root is not _root(target.array):
            ready = Tensor.wrap(ready.array.copy(), ready.device)
        out.append((target, ready))
    return out


def _root(array: Any) -> Any:
    while getattr(array, "base", None) is not None:
        array = array.base
    return array
