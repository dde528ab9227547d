"""The array backend: the only module in toynet that imports NumPy or CuPy.

Everything above this layer receives an *array module* ``xp`` (``numpy`` on the CPU, ``cupy`` on an
NVIDIA GPU) and writes ``xp.exp(a)`` instead of ``numpy.exp(a)``; that is how one op definition runs on
both devices (DeZero's ``get_array_module`` idea). This module answers three questions:

* which dtypes exist (:class:`DType`: ``toynet.float32`` and friends) and how they map to array dtypes;
* which devices exist (:class:`Device`) and which array module each one uses;
* how arrays move between devices (:func:`to_device`, :func:`to_numpy`) and where random numbers come from.

CuPy is imported only when a ``cuda`` device is first asked for, so a CPU-only machine never needs it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy

#: The host array module. Files, images and data sets live in host memory, so code that reads or writes
#: them (datasets, transforms, serialization, printing) works on host arrays through this name; ops never do:
#: they receive the device's array module ``xp``.
host = numpy

# ----------------------------------------------------------------------------------------------- dtypes


class DType:
    """A toynet dtype such as ``toynet.float32``: a name plus the array dtype it stands for."""

    __slots__ = ("name", "array_dtype", "is_floating_point")

    def __init__(self, name: str, array_dtype: Any, is_floating_point: bool):
        self.name = name
        self.array_dtype = numpy.dtype(array_dtype)
        self.is_floating_point = is_floating_point

    @property
    def itemsize(self) -> int:
        return self.array_dtype.itemsize

    def __repr__(self) -> str:
        return f"toynet.{self.name}"

    def __reduce__(self):  # keep dtypes singletons under copy/deepcopy
        return (to_dtype, (self.name,))


float16 = DType("float16", numpy.float16, True)
float32 = DType("float32", numpy.float32, True)
float64 = DType("float64", numpy.float64, True)
uint8 = DType("uint8", numpy.uint8, False)
int8 = DType("int8", numpy.int8, False)
int32 = DType("int32", numpy.int32, False)
int64 = DType("int64", numpy.int64, False)
bool_ = DType("bool", numpy.bool_, False)

ALL_DTYPES = (float16, float32, float64, uint8, int8, int32, int64, bool_)
DEFAULT_FLOAT = float32

_DTYPE_BY_NAME = {d.name: d for d in ALL_DTYPES}
_DTYPE_BY_NAME.update({"half": float16, "float": float32, "double": float64, "long": int64, "int": int32})
# NumPy and CuPy share numpy.dtype objects, so one table serves both array modules.
_DTYPE_BY_ARRAY_DTYPE = {d.array_dtype: d for d in ALL_DTYPES}


def to_dtype(spec: Any) -> DType:
    """Turn ``toynet.float32``, ``"float32"``, ``numpy.float32`` or ``float`` into a :class:`DType`."""
    if isinstance(spec, DType):
        return spec
    if spec is float:
        return DEFAULT_FLOAT
    if spec is int:
        return int64
    if spec is bool:
        return bool_
    if isinstance(spec, str) and spec in _DTYPE_BY_NAME:
        return _DTYPE_BY_NAME[spec]
    try:
        found = _DTYPE_BY_ARRAY_DTYPE.get(numpy.dtype(spec))
    except TypeError:
        found = None
    if found is None:
        known = ", ".join(f"toynet.{d.name}" for d in ALL_DTYPES)
        raise TypeError(f"unknown dtype {spec!r}: toynet supports {known}")
    return found


def dtype_of(array: Any) -> DType:
    """The toynet dtype of a NumPy/CuPy array."""
    try:
        return _DTYPE_BY_ARRAY_DTYPE[array.dtype]
    except KeyError:
        pass
    return dtype_of_array_dtype(array.dtype)  # not a toynet dtype: this raises the error


def promote(*items: Any) -> DType:
    """The dtype NumPy gives when combining these dtypes and Python numbers (numbers are 'weak').

    ``promote(float32, 2.0)`` is float32: a Python number never widens a float32 tensor.
    """
    return dtype_of_array_dtype(numpy.result_type(*(i.array_dtype if isinstance(i, DType) else i for i in items)))


def dtype_of_array_dtype(array_dtype: Any) -> DType:
    """The toynet dtype of a NumPy dtype (or anything ``numpy.dtype`` accepts)."""
    found = _DTYPE_BY_ARRAY_DTYPE.get(numpy.dtype(array_dtype))
    if found is None:
        known = ", ".join(d.name for d in ALL_DTYPES)
        raise TypeError(f"arrays of dtype {array_dtype} are not supported; use one of {known}")
    return found


# ---------------------------------------------------------------------------------------- array modules


@dataclass(eq=False, slots=True)  # eq=False: each array module is one object, compared by identity
class ArrayModule:
    """What toynet needs to know about one array library: the module itself and two transfers.

    ``xp`` is the module ops call (``xp.matmul``), ``to_numpy`` copies an array to host memory and
    ``from_numpy`` copies a host array onto the device.
    """

    name: str
    xp: Any
    to_numpy: Callable
    from_numpy: Callable


_NUMPY = ArrayModule("numpy", numpy, lambda a: a, lambda a: a)
_MODULES: dict[str, ArrayModule] = {"cpu": _NUMPY}
# The one Device object of each (type, index): see Device.
_DEVICES: dict[tuple[str, int], "Device"] = {}
# Device types that load their array module on first use (CuPy is big and often absent).
_LOADERS: dict[str, Callable[[], ArrayModule]] = {}


def register_device_type(device_type: str, loader: Callable[[], ArrayModule]) -> None:
    """Teach toynet a new device type; ``loader`` builds its :class:`ArrayModule` on first use.

    The test suite uses this to add a strict stand-in for a GPU: an array module that wraps NumPy but
    refuses implicit conversion to NumPy, as CuPy does.
    """
    _LOADERS[device_type] = loader
    _MODULES.pop(device_type, None)
    for (type_, _), device in _DEVICES.items():
        if type_ == device_type:
            device._xp = None  # load the new array module on next use


def _load_cupy() -> ArrayModule:
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as e:
        raise RuntimeError(
            "device 'cuda' needs CuPy, which is not installed. Install it with "
            "`pip install 'toynet[cuda]'` (or the cupy-cudaXXx wheel matching your CUDA version), "
            "or use device='cpu'.") from e
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDA driver missing or broken
        raise RuntimeError(
            f"CuPy is installed but cannot reach an NVIDIA GPU ({type(e).__name__}: {e}). "
            "Check the NVIDIA driver with `nvidia-smi`, or use device='cpu'.") from e
    if count == 0:
        raise RuntimeError("CuPy is installed but this machine has no NVIDIA GPU; use device='cpu'.")
    return ArrayModule("cupy", cupy, cupy.asnumpy, cupy.asarray)


register_device_type("cuda", _load_cupy)


def array_module_for(device_type: str) -> ArrayModule:
    """The :class:`ArrayModule` of a device type, loading it on first use."""
    module = _MODULES.get(device_type)
    if module is None:
        loader = _LOADERS.get(device_type)
        if loader is None:
            known = ", ".join(sorted({"cpu", *_LOADERS}))
            raise ValueError(f"unknown device type {device_type!r}; known device types: {known}")
        module = _MODULES[device_type] = loader()
    return module


def cuda_is_available() -> bool:
    """True when CuPy imports and sees at least one GPU; never raises."""
    try:
        array_module_for("cuda")
    except RuntimeError:
        return False
    return True


# --------------------------------------------------------------------------------------------- devices


class Device:
    """Where a tensor lives: ``device("cpu")``, ``device("cuda")``, ``device("cuda:1")``.

    Constructing a device is cheap and checks only the spelling; the array module (and with it CuPy)
    is loaded the first time a tensor is actually put on the device. There is one Device object per
    device (``device("cpu") is device("cpu")``), so checking that two tensors share a device is an
    identity test, done on every op.
    """

    __slots__ = ("type", "index", "xp")

    def __new__(cls, spec: "str | Device" = "cpu", index: int | None = None) -> "Device":
        if isinstance(spec, Device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"device must be a string like 'cpu' or 'cuda:0', got {type(spec).__name__}")
        type_, _, idx = spec.partition(":")
        if idx:
            if not idx.isdigit():
                raise ValueError(f"invalid device {spec!r}: the index after ':' must be a number")
            if index is not None and int(idx) != index:
                raise ValueError(f"device {spec!r} given together with a different index={index}")
            index = int(idx)
        if type_ != "cpu" and type_ not in _LOADERS:
            known = ", ".join(sorted({"cpu", *_LOADERS}))
            raise ValueError(f"unknown device type {type_!r} in {spec!r}; known device types: {known}")
        key = (type_, 0 if index is None else index)
        device = _DEVICES.get(key)
        if device is None:
            device = _DEVICES[key] = object.__new__(cls)
            device.type, device.index = key
        return device

    def __reduce__(self):  # copies and pickles come back as the one Device object
        return (Device, (str(self),))

    @property
    def array_module(self) -> ArrayModule:
        return array_module_for(self.type)

    def __getattr__(self, name: str) -> Any:
        """``device.xp``, the array module (``numpy`` or ``cupy``) that holds this device's arrays: loaded (and
        with it CuPy) the first time it is asked for, then a plain attribute."""
        if name != "xp":
            raise AttributeError(f"'Device' object has no attribute {name!r}")
        self.xp = array_module_for(self.type).xp
        return self.xp

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Device(other)
        return isinstance(other, Device) and self.type == other.type and self.index == other.index

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __repr__(self) -> str:
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:  # as OneFlow prints it: print(x.device) shows cpu:0
        return f"{self.type}:{self.index}"


CPU = Device("cpu")


def to_device_obj(spec: Any) -> Device:
    """Accept a :class:`Device`, a string, or ``None`` (the CPU)."""
    if spec is None:
        return CPU
    return spec if isinstance(spec, Device) else Device(spec)


# ------------------------------------------------------------------------- transfers and array helpers


def to_numpy(array: Any, device: Device) -> numpy.ndarray:
    """Copy (if needed) a device array to host memory as a NumPy array."""
    return device.array_module.to_numpy(array)


def from_host(data: Any, device: Device, dtype: DType | None = None) -> Any:
    """Make a device array from host data (a NumPy array, a number, nested lists)."""
    host = numpy.asarray(data, dtype=None if dtype is None else dtype.array_dtype)
    return device.array_module.from_numpy(host)


def as_device_value(value: Any, device: Device, dtype: DType | None = None) -> Any:
    """``value`` ready to be written into an array of ``device``: numbers and device arrays pass
    through, host data (NumPy arrays, lists) is copied to the device (CuPy refuses host arrays there)."""
    if is_host_scalar(value) or (is_array(value) and not isinstance(value, numpy.ndarray)):
        return value
    return from_host(value, device, dtype)


def to_device(array: Any, src: Device, dst: Device) -> Any:
    """Move an array from device ``src`` to device ``dst`` through host memory."""
    if src == dst:
        return array
    # Two GPUs go through the host too: toynet has no multi-GPU tests, so it keeps this simple.
    return dst.array_module.from_numpy(src.array_module.to_numpy(array))


def array_module_of_xp(xp: Any) -> ArrayModule:
    """The :class:`ArrayModule` whose ``xp`` is ``xp`` (ops receive only ``xp``)."""
    for module in _MODULES.values():
        if module.xp is xp:
            return module
    raise ValueError(f"{getattr(xp, '__name__', xp)!r} is not a loaded array module")


def host_to_xp(xp: Any, host_array: numpy.ndarray) -> Any:
    """Copy a host array into the array module ``xp`` (random ops draw on the host, then copy)."""
    return array_module_of_xp(xp).from_numpy(host_array)


def owns_memory(array: Any) -> bool:
    """True when ``array`` is not a view of another array, so writing into it changes nothing else.
    (NumPy and CuPy both keep this flag; so does the test suite's strict stand-in.)"""
    return bool(array.flags.owndata)


def is_array(obj: Any) -> bool:
    """True for a NumPy array or an array of any loaded array module."""
    if isinstance(obj, numpy.ndarray):
        return True
    return any(type(obj).__module__.startswith(m.xp.__name__) and hasattr(obj, "shape")
               for m in _MODULES.values() if m is not _NUMPY)


def is_host_scalar(obj: Any) -> bool:
    """Python and NumPy scalars (not arrays)."""
    return isinstance(obj, (int, float, bool, numpy.number, numpy.bool_))


def host_scalar(value: Any) -> int | float | bool:
    """Turn a NumPy scalar into the Python number it holds (Python numbers pass through)."""
    return value.item() if isinstance(value, (numpy.number, numpy.bool_)) else value


def index_result_shape(shape: tuple, index: tuple, tensor_metas: list, marker: Any) -> tuple:
    """The shape ``array[index]`` would have, found by indexing a zero-strided dummy of 0-byte elements with
    zero-strided index arrays for the ``marker`` items (of the shapes in ``tensor_metas``): nothing of their
    size is allocated, whatever shapes a file declares. Raises ``IndexError`` for an index the shape cannot take."""
    dummy = numpy.broadcast_to(numpy.empty((), dtype=numpy.dtype([])), shape)
    arrays = iter([numpy.broadcast_to(numpy.zeros((), dtype=d.array_dtype), s) for s, d in tensor_metas])
    resolved = tuple(next(arrays) if item == marker else item for item in index)
    return dummy[resolved].shape


# ------------------------------------------------------------------------------------------------ random

# One host generator for all devices: random tensors are drawn on the host and copied to the device,
# so `manual_seed(0)` gives the same numbers on the CPU and on a GPU.
_generator = numpy.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Make every random draw in toynet (init, randn, dropout, shuffling) reproducible."""
    global _generator
    _generator = numpy.random.default_rng(seed)


def generator() -> numpy.random.Generator:
    return _generator


def random_normal(shape: tuple, dtype: DType, device: Device) -> Any:
    return from_host(_generator.standard_normal(shape, dtype=numpy.float64), device, dtype)


def random_uniform(shape: tuple, low: float, high: float, dtype: DType, device: Device) -> Any:
    return from_host(_generator.uniform(low, high, shape), device, dtype)


def random_integers(low: int, high: int, shape: tuple, dtype: DType, device: Device) -> Any:
    return from_host(_generator.integers(low, high, shape), device, dtype)


def random_permutation(n: int) -> numpy.ndarray:
    return _generator.permutation(n)


def bernoulli_mask(xp: Any, shape: tuple, keep: float, dtype: DType) -> Any:
    """A mask of 1/keep (kept, with probability ``keep``) and 0 (dropped) entries, as dropout uses,
    drawn from toynet's one generator and copied into the array module ``xp``."""
    mask = (_generator.random(shape) < keep).astype(dtype.array_dtype)
    mask *= dtype.array_dtype.type(1.0 / keep)
    return host_to_xp(xp, mask)


def get_rng_state() -> dict:
    return _generator.bit_generator.state


def set_rng_state(state: dict) -> None:
    _generator.bit_generator.state = state
