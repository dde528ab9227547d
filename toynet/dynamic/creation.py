"""Making tensors: ``toynet.tensor``, ``zeros``, ``ones``, ``randn``, ``arange``, ``linspace``, ``*_like``...

Random tensors come from toynet's one generator (``toynet.manual_seed``), drawn on the host and copied to
the device, so the same seed gives the same numbers on every device.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..backend import CPU
from ..ops.shape import shape_arg as _shape_arg
from .tensor import Tensor

#: ``toynet.distributed`` hands over its maker of global tensors here when it loads (it sits above this module):
#: ``placement=``/``sbp=`` on a creation function make the logical tensor, then a global one from it.
_make_global: Any = None


def _placed(t: Tensor, placement: Any, sbp: Any) -> Tensor:
    return t if placement is None and sbp is None else _make_global(t, placement, sbp)


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, placement: Any = None,
           sbp: Any = None) -> Tensor:
    """Make a tensor from data (numbers, nested lists, NumPy arrays, tensors), copying it. With ``placement=``
    and ``sbp=``, a global tensor whose logical value is the data (toynet.distributed)."""
    if isinstance(data, Tensor):
        t = data.detach().to(device=device or data.device, dtype=dtype or data.dtype)
        if t is data or t.array is data.array:
            t = Tensor.wrap(data.device.xp.array(t.array, copy=True), t.device)
        t.requires_grad = requires_grad
        return _placed(t, placement, sbp)
    return _placed(Tensor.from_data(data, dtype=dtype, device=device, requires_grad=requires_grad), placement, sbp)


def from_numpy(array: Any) -> Tensor:
    """A CPU tensor that shares memory with a NumPy array."""
    if not backend.is_array(array):
        raise TypeError(f"from_numpy expects a NumPy array, got {type(array).__name__}")
    backend.dtype_of(array)
    return Tensor.wrap(array, CPU)


def _filled(shape: tuple, value: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    device = backend.to_device_obj(device)
    dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
    t = Tensor.wrap(device.xp.full(_shape_arg(shape), value, dtype=dtype.array_dtype), device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, placement: Any = None,
          sbp: Any = None) -> Tensor:
    return _placed(_filled(shape, 0, dtype, device, requires_grad), placement, sbp)


def ones(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, placement: Any = None,
         sbp: Any = None) -> Tensor:
    return _placed(_filled(shape, 1, dtype, device, requires_grad), placement, sbp)


def full(shape: Any, fill_value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
         placement: Any = None, sbp: Any = None) -> Tensor:
    return _placed(_filled((shape,) if isinstance(shape, int) else tuple(shape), fill_value, dtype, device,
                           requires_grad), placement, sbp)


def _like(t: Tensor, value: Any, dtype: Any) -> Tensor:
    return t.new_full(t.shape, value, dtype)


def zeros_like(t: Tensor, dtype: Any = None) -> Tensor:
    return _like(t, 0, dtype)


def ones_like(t: Tensor, dtype: Any = None) -> Tensor:
    return _like(t, 1, dtype)


def full_like(t: Tensor, value: Any, dtype: Any = None) -> Tensor:
    return _like(t, value, dtype)


def randn(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, placement: Any = None,
          sbp: Any = None) -> Tensor:
    """Standard normal samples; reproducible with :func:`manual_seed`."""
    device = backend.to_device_obj(device)
    dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
    t = Tensor.wrap(backend.random_normal(_shape_arg(shape), dtype, device), device)
    return _placed(t.requires_grad_(True) if requires_grad else t, placement, sbp)


def rand(*shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False, placement: Any = None,
         sbp: Any = None) -> Tensor:
    """Uniform samples in [0, 1); reproducible with :func:`manual_seed`."""
    device = backend.to_device_obj(device)
    dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
    t = Tensor.wrap(backend.random_uniform(_shape_arg(shape), 0.0, 1.0, dtype, device), device)
    return _placed(t.requires_grad_(True) if requires_grad else t, placement, sbp)


def randint(low: int, high: int, size: Any, dtype: Any = None, device: Any = None, placement: Any = None,
            sbp: Any = None) -> Tensor:
    device = backend.to_device_obj(device)
    dtype = backend.to_dtype(dtype) if dtype is not None else backend.int64
    shape = _shape_arg((size,) if isinstance(size, int) else size)
    return _placed(Tensor.wrap(backend.random_integers(low, high, shape, dtype, device), device), placement, sbp)


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: Any = None,
           requires_grad: bool = False, placement: Any = None, sbp: Any = None) -> Tensor:
    if end is None:
        start, end = 0, start
    device = backend.to_device_obj(device)
    if dtype is None:
        dtype = backend.DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, end, step)) else backend.int64
    dtype = backend.to_dtype(dtype)
    t = Tensor.wrap(device.xp.arange(start, end, step).astype(dtype.array_dtype), device)
    return _placed(t.requires_grad_(True) if requires_grad else t, placement, sbp)


def linspace(start: float, end: float, steps: int, dtype: Any = None, device: Any = None,
             requires_grad: bool = False, placement: Any = None, sbp: Any = None) -> Tensor:
    device = backend.to_device_obj(device)
    dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
    t = Tensor.wrap(device.xp.linspace(start, end, steps).astype(dtype.array_dtype), device)
    return _placed(t.requires_grad_(True) if requires_grad else t, placement, sbp)


def eye(n: int, m: Any = None, dtype: Any = None, device: Any = None, requires_grad: bool = False,
        placement: Any = None, sbp: Any = None) -> Tensor:
    """The ``n`` x ``m`` identity matrix (``m`` defaults to ``n``): ones on the diagonal, zeros elsewhere."""
    m = n if m is None else m
    for name, size in (("n", n), ("m", m)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"eye: {name} must be a non-negative int (the number of "
                             f"{'rows' if name == 'n' else 'columns'}), got {size!r}")
    device = backend.to_device_obj(device)
    dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
    t = Tensor.wrap(device.xp.eye(n, m, dtype=dtype.array_dtype), device)
    return _placed(t.requires_grad_(True) if requires_grad else t, placement, sbp)


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)

