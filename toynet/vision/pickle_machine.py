"""A pickle machine for plain data: it reads a pickle's opcodes itself and never imports nor calls anything.

Python's unpickler is a small stack machine: each opcode pushes a value (an int, a string, an empty
list), combines values (MARK ... TUPLE, APPENDS, SETITEMS), remembers them (PUT/GET, a "memo"), or
reaches code: GLOBAL names an importable object, REDUCE calls it, BUILD sets an object's state. That
last group is how a pickle runs code, and even a restricted ``find_class`` hands the file a real
object to call with arguments of its choosing.

:class:`PickleMachine` runs the first groups itself, for the opcodes of pickle protocols 2 to 5 that
plain data needs (dict, list, tuple, str, bytes, int, float, bool, None), and passes GLOBAL, REDUCE and
BUILD to a ``recipes`` object, which decides what a name means (:mod:`toynet.vision.cifar_pickle`
knows NumPy's array recipe and nothing else). Everything else is refused with a
:class:`DatasetFormatError` naming the file, the byte offset and what was expected.

A file's memory cost is bounded by its size: a declared length is checked against the bytes really
there before anything is sliced, each opcode makes at most one new object, and the number of opcodes
is capped (``max_ops``). A Python 2 ``str`` (BINSTRING) stays ``bytes``, as ``encoding="bytes"`` reads it;
a byte string of :data:`VIEW_FROM` bytes or more (an array's pixels) is a read-only ``memoryview`` of the
file's bytes rather than a copy.
"""

from __future__ import annotations

import pickle
import pickletools
import struct
from collections.abc import Callable
from typing import Any, Protocol


class DatasetFormatError(ValueError, pickle.UnpicklingError):
    """A data-set file is not what it must be; the message names the file (and archive member), the part
    and what was expected. A ``ValueError``; also a ``pickle.UnpicklingError``, which the CIFAR-10
    loader raised for refused pickles before it read them itself, so code catching either keeps working."""


class Recipes(Protocol):
    """What GLOBAL, REDUCE and BUILD mean: return the value to push (or set), or raise ``machine.error``."""

    def global_(self, machine: PickleMachine, module: Any, name: Any) -> Any: ...

    def reduce(self, machine: PickleMachine, func: Any, args: tuple) -> Any: ...

    def build(self, machine: PickleMachine, target: Any, state: Any) -> None: ...


def describe(value: Any, depth: int = 0) -> str:
    """A short, safe description of a value read from a file (never the repr of anything long or deep)."""
    if type(value) in (int, float, bool) or value is None:
        return repr(value)
    if type(value) in (str, bytes, memoryview):
        short = len(value) <= 20 and type(value) is not memoryview
        return repr(value) if short else f"a {type(value).__name__} of length {len(value)}"
    if type(value) is tuple and depth < 2 and len(value) <= 8:
        return "(" + ", ".join(describe(v, depth + 1) for v in value) + ("," if len(value) == 1 else "") + ")"
    if type(value) in (list, dict, tuple):
        return f"a {type(value).__name__} of {len(value)} items"
    return repr(value)  # only the recipes' own tokens are left, with short reprs


VIEW_FROM = 4096  # byte strings this long are memoryviews of the file, not copies
_STOP = object()
_CODES = {op.name: ord(op.code) for op in pickletools.opcodes}
_HANDLERS: dict[int, Callable[[PickleMachine], Any]] = {}


def _op(*names: str) -> Callable:
    """Register a handler for the opcodes ``names`` (as pickletools names them)."""
    def register(handler: Callable) -> Callable:
        for name in names:
            _HANDLERS[_CODES[name]] = handler
        return handler
    return register


class PickleMachine:
    """The pickle machine (a stack, a stack of MARKs and a memo) for the opcodes registered below."""

    def __init__(self, data: bytes, source: str, recipes: Recipes, max_ops: int) -> None:
        self.data, self.source, self.recipes, self.max_ops = bytes(data), source, recipes, max_ops
        self.view = memoryview(self.data)
        self.pos = self.at = 0
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.result: Any = None

    def error(self, what: str) -> DatasetFormatError:
        return DatasetFormatError(f"{self.source}: {what} (pickle opcode at byte {self.at})")

    def run(self) -> Any:
        """The object the pickle describes; :class:`DatasetFormatError` for anything else."""
        try:
            return self._run()
        except DatasetFormatError:
            raise
        except (IndexError, struct.error) as e:  # an empty stack, or an opcode cut off by the end of the file
            raise self.error("the pickle is damaged: it reads past its end or takes from an empty stack") from e
        except (UnicodeError, TypeError, ValueError, OverflowError) as e:  # e.g. a string that is not UTF-8
            raise self.error(f"the pickle is damaged ({type(e).__name__}: {e})") from e

    def _run(self) -> Any:
        data, handlers, end = self.data, _HANDLERS, len(self.data)
        for _ in range(self.max_ops):
            if self.pos >= end:
                raise self.error("the pickle ends before its STOP opcode: the file is truncated")
            self.at = self.pos
            code = data[self.pos]
            self.pos += 1
            handler = handlers.get(code)
            if handler is None:
                info = pickletools.code2op.get(chr(code))
                name = f"{info.name} ({chr(code)!r})" if info else f"byte {code:#04x}"
                raise self.error(f"opcode {name} is refused: only the opcodes of plain data and of NumPy's "
                                 "array recipe are read")
            if handler(self) is _STOP:
                return self.result
        raise self.error(f"more than {self.max_ops} pickle opcodes; more than such a file can hold")

    def take(self, n: int) -> bytes | memoryview:
        """The next ``n`` bytes, after checking they are there (a declared length allocates nothing); a
        memoryview of the file from :data:`VIEW_FROM` bytes on."""
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise self.error(f"a length of {n} bytes where only {len(self.data) - self.pos} remain: the file "
                             "is truncated or damaged")
        chunk = self.data[self.pos:end] if n < VIEW_FROM else self.view[self.pos:end]
        self.pos = end
        return chunk

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.error("an opcode takes the items up to a MARK, but there is no MARK")
        items, self.stack = self.stack, self.marks.pop()
        return items

    def target(self, kind: type) -> Any:
        if not self.stack or type(self.stack[-1]) is not kind:
            got = describe(self.stack[-1]) if self.stack else "nothing"
            raise self.error(f"an opcode adds items to a {kind.__name__}, but finds {got}")
        return self.stack[-1]

    def key(self, key: Any) -> Any:
        if type(key) not in (str, bytes, int):
            raise self.error(f"a dict key must be a string or an int, got {describe(key)}")
        return key


# ------------------------------------------------------------------------------------------- opcodes
# Each handler reads its argument, checks it, and pushes at most one new object.


@_op("PROTO")
def _proto(m: PickleMachine) -> None:
    if not 2 <= m.uint(1) <= 5:
        raise m.error("the pickle protocol must be 2 to 5")


@_op("FRAME")
def _frame(m: PickleMachine) -> None:  # a hint for buffered readers: nothing to do
    if m.uint(8) > len(m.data) - m.pos:
        raise m.error("a FRAME longer than the rest of the file")


@_op("STOP")
def _stop(m: PickleMachine) -> object:
    m.result = m.stack.pop()
    if m.stack or m.marks or m.pos != len(m.data):
        raise m.error("the pickle stops with items left on its stack, or with bytes after its end")
    return _STOP


_op("NONE")(lambda m: m.stack.append(None))
_op("NEWTRUE")(lambda m: m.stack.append(True))
_op("NEWFALSE")(lambda m: m.stack.append(False))
_op("EMPTY_DICT")(lambda m: m.stack.append({}))
_op("EMPTY_LIST")(lambda m: m.stack.append([]))
_op("EMPTY_TUPLE")(lambda m: m.stack.append(()))


@_op("TUPLE")
def _tuple(m: PickleMachine) -> None:
    items = tuple(m.pop_mark())  # first: pop_mark replaces m.stack
    m.stack.append(items)


@_op("MARK")
def _mark(m: PickleMachine) -> None:
    m.marks.append(m.stack)
    m.stack = []


@_op("TUPLE1", "TUPLE2", "TUPLE3")
def _tuple_n(m: PickleMachine) -> None:
    n = m.data[m.at] - _CODES["TUPLE1"] + 1
    if len(m.stack) < n:
        raise m.error(f"TUPLE{n} with {len(m.stack)} items on the stack")
    items = tuple(m.stack[-n:])
    del m.stack[-n:]
    m.stack.append(items)


@_op("APPEND")
def _append(m: PickleMachine) -> None:
    value = m.stack.pop()
    m.target(list).append(value)


@_op("APPENDS")
def _appends(m: PickleMachine) -> None:
    items = m.pop_mark()
    m.target(list).extend(items)


@_op("SETITEM")
def _setitem(m: PickleMachine) -> None:
    value, key = m.stack.pop(), m.stack.pop()
    m.target(dict)[m.key(key)] = value


@_op("SETITEMS")
def _setitems(m: PickleMachine) -> None:
    items = m.pop_mark()
    target = m.target(dict)
    if len(items) % 2:
        raise m.error("SETITEMS with a key that has no value")
    for i in range(0, len(items), 2):
        target[m.key(items[i])] = items[i + 1]


_op("BININT1")(lambda m: m.stack.append(m.uint(1)))
_op("BININT2")(lambda m: m.stack.append(m.uint(2)))
_op("BININT")(lambda m: m.stack.append(int.from_bytes(m.take(4), "little", signed=True)))
_op("BINFLOAT")(lambda m: m.stack.append(struct.unpack(">d", m.take(8))[0]))


@_op("LONG1")
def _long1(m: PickleMachine) -> None:
    n = m.uint(1)
    if n > 8:
        raise m.error(f"a {n}-byte integer; none wider than 8 bytes is read")
    m.stack.append(int.from_bytes(m.take(n), "little", signed=True))


_op("SHORT_BINSTRING", "SHORT_BINBYTES")(lambda m: m.stack.append(m.take(m.uint(1))))
_op("BINSTRING")(lambda m: m.stack.append(m.take(int.from_bytes(m.take(4), "little", signed=True))))
_op("BINBYTES")(lambda m: m.stack.append(m.take(m.uint(4))))
_op("BINBYTES8", "BYTEARRAY8")(lambda m: m.stack.append(m.take(m.uint(8))))
_op("SHORT_BINUNICODE")(lambda m: m.stack.append(str(m.take(m.uint(1)), "utf-8", "surrogatepass")))
_op("BINUNICODE")(lambda m: m.stack.append(str(m.take(m.uint(4)), "utf-8", "surrogatepass")))
_op("BINUNICODE8")(lambda m: m.stack.append(str(m.take(m.uint(8)), "utf-8", "surrogatepass")))
_op("BINPUT")(lambda m: m.memo.__setitem__(m.uint(1), m.stack[-1]))
_op("LONG_BINPUT")(lambda m: m.memo.__setitem__(m.uint(4), m.stack[-1]))  # a dict: a big index costs nothing
_op("MEMOIZE")(lambda m: m.memo.__setitem__(len(m.memo), m.stack[-1]))


@_op("BINGET", "LONG_BINGET")
def _get(m: PickleMachine) -> None:
    index = m.uint(1 if m.data[m.at] == _CODES["BINGET"] else 4)
    if index not in m.memo:
        raise m.error(f"a memo GET of entry {index}, which was never stored")
    m.stack.append(m.memo[index])


@_op("GLOBAL")
def _global(m: PickleMachine) -> None:
    names = []
    for _ in range(2):  # "module\nname\n"
        end = m.data.find(b"\n", m.pos, m.pos + 256)
        if end < 0:
            raise m.error("a GLOBAL whose name is longer than 255 bytes or has no end")
        names.append(m.data[m.pos:end].decode("latin1"))
        m.pos = end + 1
    m.stack.append(m.recipes.global_(m, *names))


@_op("STACK_GLOBAL")
def _stack_global(m: PickleMachine) -> None:
    name, module = m.stack.pop(), m.stack.pop()
    m.stack.append(m.recipes.global_(m, module, name))


@_op("REDUCE")
def _reduce(m: PickleMachine) -> None:
    args = m.stack.pop()
    if type(args) is not tuple:
        raise m.error(f"REDUCE with arguments {describe(args)}, not a tuple")
    m.stack[-1] = m.recipes.reduce(m, m.stack[-1], args)


@_op("BUILD")
def _build(m: PickleMachine) -> None:
    state = m.stack.pop()
    m.recipes.build(m, m.stack[-1], state)
