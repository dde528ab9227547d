"""CIFAR-10's pickles read without unpickling: plain data, and arrays rebuilt from raw bytes and a numeric dtype.

The CIFAR-10 "python version" files are pickles written in 2009 by Python 2's cPickle and NumPy 1.x.
Unpickling them with Python's unpickler, even one whose ``find_class`` allows only NumPy's array
helpers, lets the file call those helpers with arguments of its choosing: ``numpy.dtype`` accepts a
state that forges an object field, after which ``_frombuffer`` turns 8 bytes of the file into an
object pointer (a crash, or worse), and ``_reconstruct(ndarray, (25000000,), 'O')`` allocates 200 MB
from a 66-byte file. So :func:`read_pickle` reads them with :class:`~.pickle_machine.PickleMachine`,
which builds plain data itself, and this module's recipes, which accept NumPy's names only as
tokens, in the one form NumPy writes them:

* ``_reconstruct(ndarray, (0,), 'b')``, then BUILD with ``(1, shape, dtype, is_fortran, raw bytes)``
  (protocols 2-4: the official files, and files re-saved by Python 3);
* ``_frombuffer(raw bytes, dtype, shape, order)`` (protocol 5);
* the dtype of both, ``dtype(code, False, True)`` with a code from :data:`NUMERIC_DTYPES`, then BUILD
  with the plain state ``(3, '|', None, None, None, -1, -1, 0)`` (``'<'`` or ``'>'`` for wider numbers):
  no fields, names, sub-array, item size or flags.

Nothing named is imported or called, and no NumPy object is made from the file's values: an array
stays a :class:`PickledArray` (raw bytes, dtype code, shape, whose sizes agree and whose element count
is at most ``max_elements``) until the caller, having checked its shape, asks for the NumPy array,
which ``numpy.frombuffer`` makes from the bytes with a dtype toynet spells itself. Any other global,
argument or state is refused by name with a :class:`~.pickle_machine.DatasetFormatError`.
"""

from __future__ import annotations

from typing import Any

from ..backend import host
from .pickle_machine import DatasetFormatError, PickleMachine, describe

__all__ = ["DatasetFormatError", "NUMERIC_DTYPES", "GLOBALS", "PickledArray", "read_pickle"]

#: Plain numeric dtypes an array may have, by the code NumPy pickles (``dtype.str`` without byte order).
NUMERIC_DTYPES = ("u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f4", "f8")

#: The only globals a file may name (under NumPy 1.x's and 2.x's module paths), and the token each becomes.
GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): "_reconstruct",
    ("numpy._core.multiarray", "_reconstruct"): "_reconstruct",
    ("numpy.core.numeric", "_frombuffer"): "_frombuffer",
    ("numpy._core.numeric", "_frombuffer"): "_frombuffer",
    ("numpy", "ndarray"): "ndarray",
    ("numpy", "dtype"): "dtype",
    ("_codecs", "encode"): "encode",  # how Python 3 writes bytes at protocol 2: encode(str, 'latin1'),
    ("__builtin__", "bytes"): "bytes",  # and empty bytes: bytes()
}

#: Opcodes per file. A real batch has about 30,000 (a label, a file name and its memo entry per image).
MAX_OPS = 200_000


class PickledArray:
    """An array as a pickle describes it, checked but not yet a NumPy array: ``raw`` bytes, ``dtype``
    (byte order and a code from :data:`NUMERIC_DTYPES`, e.g. ``'|u1'``), ``shape`` and memory ``order``;
    the bytes are exactly what the shape needs. ``complete`` is False for a ``_reconstruct`` whose
    BUILD never came."""

    __slots__ = ("raw", "dtype", "shape", "order")

    def __init__(self) -> None:
        self.raw: bytes | memoryview | None = None
        self.dtype = ""
        self.shape: tuple[int, ...] = ()
        self.order = "C"

    @property
    def complete(self) -> bool:
        return self.raw is not None

    def to_numpy(self, copy: bool = True) -> Any:
        """The NumPy array (``numpy.frombuffer`` of the bytes, reshaped); without ``copy`` a read-only view."""
        array = host.frombuffer(self.raw, dtype=host.dtype(self.dtype)).reshape(self.shape, order=self.order)
        return array.copy(order="K") if copy else array

    def __repr__(self) -> str:
        return f"an array of dtype {self.dtype!r} and shape {self.shape}" if self.complete else "an unbuilt array"


class _Global:
    """A global the file named: only its allowed name, never the object."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return {"encode": "_codecs.encode", "bytes": "bytes"}.get(self.name, f"numpy's {self.name}")


class _Dtype:
    """``numpy.dtype(code, False, True)``: the code, and its byte order once its BUILD came."""

    __slots__ = ("code", "order", "built")

    def __init__(self, code: str) -> None:
        self.code, self.order, self.built = code, "|" if code[1] == "1" else "<", False

    def __repr__(self) -> str:
        return f"dtype({self.code!r})"


def read_pickle(data: bytes, source: str, max_elements: int) -> Any:
    """Read ``data``, the bytes of one pickle file named ``source`` (for messages), into dicts, lists,
    tuples, str, bytes (a Python 2 ``str`` stays bytes), int, float, bool, None and
    :class:`PickledArray` of at most ``max_elements`` elements each. Raises
    :class:`~.pickle_machine.DatasetFormatError` for anything else, naming the file, the byte offset and
    what was expected."""
    return PickleMachine(data, source, _NumpyRecipes(max_elements), MAX_OPS).run()


def _text(value: Any) -> str | None:
    """A short str, or a short Python 2 str (bytes) as text; else None."""
    if type(value) is str:
        return value
    if type(value) is bytes and len(value) <= 64:
        return value.decode("latin1")
    return None


def _is_int(value: Any, *allowed: int) -> bool:
    return type(value) in (int, bool) and value in allowed


class _NumpyRecipes:
    """What GLOBAL, REDUCE and BUILD may mean in a CIFAR-10 file (see the module docstring)."""

    def __init__(self, max_elements: int) -> None:
        self.max_elements = max_elements

    def global_(self, m: PickleMachine, module: Any, name: Any) -> _Global:
        token = GLOBALS.get((module, name)) if type(module) is str and type(name) is str else None
        if token is None:
            allowed = ", ".join(sorted({f"{mod}.{n}" for mod, n in GLOBALS if not mod.startswith("numpy._")}))
            raise m.error(f"refusing the global '{module}.{name}': a CIFAR-10 file may name only {allowed}. This "
                          "file is not a genuine CIFAR-10 file, and unpickling it could run code")
        return _Global(token)

    def reduce(self, m: PickleMachine, func: Any, args: tuple) -> Any:
        """What ``func(*args)`` stands for, in the one argument form NumPy writes."""
        name = func.name if type(func) is _Global else None
        if name == "_reconstruct":
            if (len(args) == 3 and type(args[0]) is _Global and args[0].name == "ndarray"
                    and type(args[1]) is tuple and len(args[1]) == 1 and _is_int(args[1][0], 0)
                    and _text(args[2]) == "b"):
                return PickledArray()
            raise m.error(f"_reconstruct{describe(args)} refused: NumPy calls it only as "
                          "_reconstruct(ndarray, (0,), 'b'), then sets the array's bytes with BUILD")
        if name == "dtype":
            if not args or _text(args[0]) not in NUMERIC_DTYPES:
                raise m.error(f"dtype {describe(args[0]) if args else '()'} refused: an array may hold only the "
                              f"plain numbers {', '.join(NUMERIC_DTYPES)} (no objects, records, sub-arrays or "
                              "strings)")
            if len(args) != 3 or not _is_int(args[1], 0) or not _is_int(args[2], 1):
                raise m.error(f"dtype{describe(args)} refused: NumPy writes dtype(code, False, True)")
            return _Dtype(_text(args[0]))
        if name == "_frombuffer":
            if len(args) != 4:
                raise m.error(f"_frombuffer{describe(args)} refused: NumPy writes "
                              "_frombuffer(bytes, dtype, shape, order)")
            fortran = {"C": False, "F": True}.get(_text(args[3]) or "", None)
            return self._fill(m, PickledArray(), args[0], args[1], args[2], fortran, "_frombuffer")
        if name == "encode":
            if len(args) == 2 and type(args[0]) is str and _text(args[1]) in ("latin1", "latin-1"):
                return args[0].encode("latin1")
            raise m.error(f"_codecs.encode{describe(args)} refused: Python writes bytes as encode(str, 'latin1')")
        if name == "bytes" and not args:
            return b""
        raise m.error(f"REDUCE calls {describe(func)}; only NumPy's _reconstruct, _frombuffer and dtype may be "
                      "called")

    def build(self, m: PickleMachine, target: Any, state: Any) -> None:
        if type(target) is _Dtype:
            self._build_dtype(m, target, state)
        elif type(target) is PickledArray and not target.complete:
            if type(state) is tuple and len(state) == 5 and _is_int(state[0], 1):
                state = state[1:]  # (version 1, shape, dtype, is_fortran, bytes); NumPy 0.x wrote no version
            if type(state) is not tuple or len(state) != 4:
                raise m.error(f"the state of an array must be (1, shape, dtype, is_fortran, bytes), "
                              f"got {describe(state)}")
            shape, dtype, fortran, raw = state
            self._fill(m, target, raw, dtype, shape, fortran, "the array state")
        else:
            raise m.error(f"BUILD (setting an object's state) on {describe(target)}; only a dtype, or an array "
                          "made by _reconstruct, may be built, once")

    def _build_dtype(self, m: PickleMachine, dtype: _Dtype, state: Any) -> None:
        orders = ("|",) if dtype.code[1] == "1" else ("<", ">")
        if (dtype.built or type(state) is not tuple or len(state) != 8 or not _is_int(state[0], 3)
                or _text(state[1]) not in orders or any(v is not None for v in state[2:5])
                or not _is_int(state[5], -1) or not _is_int(state[6], -1) or not _is_int(state[7], 0)):
            raise m.error(f"the state {describe(state)} of dtype({dtype.code!r}) is refused: only the plain state "
                          f"(3, {' or '.join(map(repr, orders))}, None, None, None, -1, -1, 0) is accepted, once "
                          "(fields, names, a sub-array, an item size or flags could turn the file's bytes into "
                          "object pointers)")
        dtype.order, dtype.built = _text(state[1]), True

    def _fill(self, m: PickleMachine, array: PickledArray, raw: Any, dtype: Any, shape: Any, fortran: Any,
              how: str) -> PickledArray:
        """Fill ``array`` from the parts a pickle gave, after checking each part and that their sizes agree."""
        if type(dtype) is not _Dtype:
            raise m.error(f"{how}: the dtype must be a numpy.dtype of plain numbers, got {describe(dtype)}")
        if (type(shape) is not tuple or len(shape) > 8
                or not all(type(n) is int and 0 <= n <= self.max_elements for n in shape)):
            raise m.error(f"{how}: the shape must be a tuple of at most 8 sizes, got {describe(shape)}")
        count = 1
        for n in shape:
            count *= n
        if count > self.max_elements:
            raise m.error(f"{how}: an array of shape {shape} has {count} elements; at most {self.max_elements} "
                          "are expected here")
        if not _is_int(fortran, 0, 1):
            raise m.error(f"{how}: the memory order must be 'C' or 'F' (is_fortran False or True)")
        if type(raw) not in (bytes, memoryview):
            raise m.error(f"{how}: the array's data must be bytes, got {describe(raw)}")
        if len(raw) != count * int(dtype.code[1]):
            raise m.error(f"{how}: an array of shape {shape} and dtype {dtype.code!r} needs "
                          f"{count * int(dtype.code[1])} bytes, the file gives {len(raw)}")
        array.raw, array.dtype, array.shape = raw, dtype.order + dtype.code, shape
        array.order = "F" if fortran else "C"
        return array
