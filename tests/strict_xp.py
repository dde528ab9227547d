"""A strict stand-in for a GPU: an array module that wraps NumPy but refuses to be NumPy.

CuPy arrays live in GPU memory, so CuPy refuses every *implicit* trip to the host: ``numpy.asarray``
of a CuPy array raises ``TypeError``, NumPy ufuncs and functions refuse them, ``numpy_array + cupy_array``
fails. Code that accidentally calls ``numpy.<fn>`` on device data therefore works on a laptop and breaks
on the first GPU. This module makes the same mistakes fail on any machine, in CI:

* :class:`StrictArray` holds a NumPy array but has ``__array_ufunc__ = None``, an ``__array__`` that
  raises, and an ``__array_function__`` that raises, so ``numpy.exp(a)``, ``numpy.sum(a)`` and
  ``numpy.asarray(a)`` all fail with a message that says to call ``xp.<fn>`` instead;
* :data:`xp` behaves like the ``cupy`` module for everything toynet's ops use: every NumPy function,
  ufunc (with ``out=`` and methods such as ``xp.add.at``) and submodule (``xp.linalg``,
  ``xp.lib.stride_tricks``) is wrapped generically: unwrap the arguments (also inside lists and
  tuples), call NumPy, wrap the array results;
* mixing in host arrays fails as on CuPy: a ``numpy.ndarray`` operand in arithmetic or in an ``xp``
  function raises (only ``xp.asarray``/``xp.array`` copy host data in, as ``cupy.asarray`` does), and
  ufuncs refuse Python lists;
* ``xp.random`` is missing on purpose: toynet draws random numbers on the host generator and copies
  them, so ``manual_seed`` gives the same numbers on every device.

The test suite registers it as device type ``"strict"`` (see ``tests/conftest.py``).
"""

from __future__ import annotations

import types
from typing import Any

import numpy

import toynet.backend as backend

_NOT_ON_HOST = ("Implicit conversion of a strict (stand-in GPU) array to a NumPy array is not allowed, as on "
                "CuPy: call xp.<function> from the array module the op received, or copy to the host "
                "explicitly with backend.to_numpy / tensor.numpy()")
# Functions allowed to copy host data in, as cupy.asarray / cupy.array do.
_HOST_IMPORTERS = {"asarray", "array", "asanyarray", "ascontiguousarray"}


class StrictArray:
    """A NumPy array in "device memory": usable only through :data:`xp` and its own methods."""

    __slots__ = ("_data",)
    # NumPy ufuncs (numpy.exp(a), numpy_array + a) must not accept us: defer, then refuse.
    __array_ufunc__ = None

    def __init__(self, data: numpy.ndarray):
        if not isinstance(data, numpy.ndarray):
            raise TypeError(f"StrictArray wraps a numpy.ndarray, got {type(data).__name__}")
        self._data = data

    # --------------------------------------------------------------------- refusing NumPy

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(_NOT_ON_HOST)

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        raise TypeError(f"numpy.{func.__name__} was called on a strict (stand-in GPU) array; call "
                        f"xp.{func.__name__} on the op's array module instead. {_NOT_ON_HOST}")

    def __getattr__(self, name: str) -> Any:
        # Dunder lookups (__array_interface__, __array_struct__, __cuda_array_interface__...) would let
        # NumPy read our memory directly; `data` and `ctypes` expose the raw buffer. Refuse them all.
        if name == "_data" or name.startswith("__") or name in ("data", "ctypes", "get"):
            raise AttributeError(f"strict array has no attribute {name!r}")
        return _wrap(getattr(self._data, name))

    # ------------------------------------------------------------------- Python protocols

    def __getitem__(self, index: Any) -> Any:
        return _wrap(self._data[_unwrap_index(index)])

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(value, numpy.ndarray) and value.ndim > 0:
            raise TypeError("assigning a host numpy.ndarray into a strict (stand-in GPU) array is not allowed, "
                            "as on CuPy; copy it to the device first (xp.asarray / backend.from_host)")
        self._data[_unwrap_index(index)] = _unwrap(value)

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self):
        for i in range(len(self._data)):
            yield self[i]

    def __bool__(self) -> bool:
        return bool(self._data)

    def __float__(self) -> float:
        return float(self._data)

    def __int__(self) -> int:
        return int(self._data)

    __hash__ = None  # type: ignore[assignment]  (arrays are mutable, as ndarray)

    def __repr__(self) -> str:
        return "strict_" + repr(self._data)

    def __copy__(self) -> "StrictArray":
        return StrictArray(self._data.copy())

    def __deepcopy__(self, memo: dict) -> "StrictArray":
        return StrictArray(self._data.copy())

    def __reduce__(self):
        return (StrictArray, (self._data,))


def _binary(name: str):
    def method(self: StrictArray, other: Any) -> Any:
        _refuse_host(other, f"the operator {name}")
        result = getattr(self._data, name)(_unwrap(other))
        if result is NotImplemented:
            return NotImplemented
        if name.startswith("__i"):  # in-place: keep the same wrapper, as NumPy and CuPy keep the array
            return self
        return _wrap(result)
    method.__name__ = name
    return method


def _unary(name: str):
    def method(self: StrictArray) -> Any:
        return _wrap(getattr(self._data, name)())
    method.__name__ = name
    return method


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
            "lshift", "rshift"):
    for _form in (f"__{_op}__", f"__r{_op}__", f"__i{_op}__"):
        setattr(StrictArray, _form, _binary(_form))
for _cmp in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
    setattr(StrictArray, _cmp, _binary(_cmp))
for _un in ("__neg__", "__pos__", "__abs__", "__invert__"):
    setattr(StrictArray, _un, _unary(_un))


# ------------------------------------------------------------------------------- wrapping and unwrapping


def _refuse_host(value: Any, where: str) -> None:
    if isinstance(value, numpy.ndarray):
        raise TypeError(f"a host numpy.ndarray of shape {value.shape} was passed to {where} together with "
                        "strict (stand-in GPU) arrays; CuPy refuses this: copy it to the device first "
                        "(xp.asarray), or better, keep the value a Python number")
    if isinstance(value, (list, tuple)):
        for v in value:
            _refuse_host(v, where)


def _unwrap(value: Any) -> Any:
    """Replace strict arrays by their NumPy arrays, also inside lists, tuples and dicts."""
    if isinstance(value, StrictArray):
        return value._data
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_unwrap(v) for v in value)
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


def _unwrap_index(index: Any) -> Any:
    # Index arrays may be strict arrays or host arrays (CuPy accepts both as indices).
    return _unwrap(index)


def _wrap(value: Any, inputs: tuple = ()) -> Any:
    """Wrap NumPy results as strict arrays. NumPy scalars become 0-d arrays, as CuPy returns them.

    A result that *is* one of the inputs' arrays (``out=``, ``asarray`` of an array) returns the
    input's own wrapper, so ``xp.add(a, b, out=c) is c`` as on CuPy.
    """
    if isinstance(value, numpy.ndarray):
        for x in inputs:
            if isinstance(x, StrictArray) and x._data is value:
                return x
        return StrictArray(value)
    if isinstance(value, numpy.generic):
        return StrictArray(numpy.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v, inputs) for v in value)
    if isinstance(value, list) and any(isinstance(v, numpy.ndarray) for v in value):
        return [_wrap(v, inputs) for v in value]
    if callable(value) and not isinstance(value, type):  # a bound method of the array
        return _wrap_function(value, getattr(value, "__name__", "method"), allow_host=False)
    return value


def _strict_arrays_in(args: Any) -> tuple:
    found = []

    def visit(v: Any) -> None:
        if isinstance(v, StrictArray):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
    visit(args)
    return tuple(found)


def _wrap_function(fn: Any, name: str, allow_host: bool) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        if not allow_host:
            _refuse_host(args, f"xp.{name}")
            _refuse_host(tuple(kwargs.values()), f"xp.{name}")
        result = fn(*_unwrap(args), **_unwrap(kwargs))
        return _wrap(result, _strict_arrays_in((args, kwargs)))
    call.__name__ = name
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


class StrictUfunc:
    """A NumPy ufunc that takes and returns strict arrays; ``.at``/``.reduce`` work the same way."""

    def __init__(self, ufunc: numpy.ufunc):
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for a in args:
            if isinstance(a, (list, tuple)):
                raise TypeError(f"xp.{self.__name__} got a Python {type(a).__name__}; CuPy ufuncs accept "
                                "only arrays and scalars: convert with xp.asarray first")
        return _wrap_function(self._ufunc, self.__name__, allow_host=False)(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ufunc, name)
        if callable(attr):
            return _wrap_function(attr, f"{self.__name__}.{name}", allow_host=False)
        return attr

    def __repr__(self) -> str:
        return f"<strict ufunc {self.__name__}>"


class StrictModule:
    """A NumPy module (``numpy`` itself, ``numpy.linalg``, ``numpy.lib.stride_tricks``) whose functions
    take and return strict arrays."""

    def __init__(self, module: types.ModuleType, name: str):
        self._module = module
        self.__name__ = name

    def __getattr__(self, name: str) -> Any:
        if name == "random":
            raise AttributeError(
                "xp.random is not available on the strict device: toynet draws random numbers on the host "
                "(backend.generator(), backend.random_normal...) and copies them to the device, so "
                "manual_seed gives the same numbers on every device")
        if name == "ndarray":
            return StrictArray
        attr = getattr(self._module, name)
        if isinstance(attr, types.ModuleType):
            wrapped: Any = StrictModule(attr, f"{self.__name__}.{name}")
        elif isinstance(attr, numpy.ufunc):
            wrapped = StrictUfunc(attr)
        elif callable(attr) and not isinstance(attr, type):
            wrapped = _wrap_function(attr, name, allow_host=name in _HOST_IMPORTERS)
        else:
            return attr  # dtypes, scalar types, constants (xp.float32, xp.pi, xp.newaxis)
        setattr(self, name, wrapped)  # cache: ops call xp.<fn> in hot loops
        return wrapped

    def __repr__(self) -> str:
        return f"<strict array module {self.__name__} wrapping {self._module.__name__}>"


#: The array module of the strict device: use it like ``cupy``.
xp = StrictModule(numpy, StrictArray.__module__)


def to_numpy(array: Any) -> numpy.ndarray:
    """Copy a strict array to the host (a copy, as ``cupy.asnumpy`` makes)."""
    if not isinstance(array, StrictArray):
        raise TypeError(f"expected a strict (stand-in GPU) array but got {type(array).__name__}: an op "
                        "returned a host array for a device tensor (did it call numpy directly?)")
    return array._data.copy()


def from_numpy(array: Any) -> StrictArray:
    """Copy a host array to the strict device (a copy, as ``cupy.asarray`` makes)."""
    if not isinstance(array, numpy.ndarray):
        raise TypeError(f"from_numpy expects a host numpy.ndarray, got {type(array).__name__}")
    return StrictArray(numpy.array(array, copy=True))


def array_module() -> backend.ArrayModule:
    """The loader ``backend.register_device_type("strict", array_module)`` calls on first use."""
    return backend.ArrayModule("strict", xp, to_numpy, from_numpy)
