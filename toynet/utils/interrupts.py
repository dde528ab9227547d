"""Short sections that a Ctrl-C cannot split: a step commits all of its updates or none of them.

A training step first computes every new value into fresh tensors (an error there changes nothing), then
*commits* them, writing parameter after parameter. A ``KeyboardInterrupt`` raised between two of those
writes would leave a half-applied step. Inside ``with defer_interrupts():`` a SIGINT is only recorded;
when the block ends, the previous handler receives it (Python's default one raises ``KeyboardInterrupt``),
so the interrupt still stops the program, just after the commit::

    with defer_interrupts():
        for param, new in updates:        # nothing in here can fail, and now nothing can interrupt it
            param.array = new

Signal handlers belong to the main thread: elsewhere, and when SIGINT is not handled by Python at all
(``SIG_IGN``, ``SIG_DFL``), the block runs as a plain block. Sections nest (the outer one delivers).
Keep them short: a Ctrl-C waits for the section to end.

The cost is two ``sigaction`` calls per section, well under a microsecond: the private ``_signal`` module
is used directly, because ``signal.signal`` converts handlers to and from an enum and costs about five.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

try:  # the C module behind `signal`: same functions, without the enum conversions (10x faster)
    import _signal as _raw
except ImportError:  # pragma: no cover - other Pythons
    _raw = signal

_SIGINT = signal.SIGINT
_get_ident = threading.get_ident
_main_ident = threading.main_thread().ident  # read on every section: a Python call less than main_thread()


def _forked() -> None:
    """A child forked from another thread has that thread as its main thread (threading's own hook ran first)."""
    global _main_ident
    _main_ident = threading.main_thread().ident


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_forked)

# State of the main thread's sections (other threads never touch it).
_depth = 0                # sections open
_previous: Any = None     # the handler the outermost section replaced (None: it installed nothing)
_pending: tuple | None = None  # (signum, frame) of a SIGINT received inside the section


def _record(signum: int, frame: FrameType | None) -> None:
    global _pending
    _pending = (signum, frame)


class defer_interrupts:
    """Context manager: a SIGINT received inside the block is delivered when the block ends.

    Delivery calls the handler that was installed before the block (``KeyboardInterrupt`` for Python's
    default), also when the block raised: the interrupt then wins, with the block's error as context.
    The instances hold nothing (the state is the main thread's), so one can be reused.
    """

    __slots__ = ()

    def __enter__(self) -> "defer_interrupts":
        global _depth, _previous, _pending
        if _get_ident() != _main_ident:
            return self
        if _depth == 0:
            previous = _raw.getsignal(_SIGINT)
            if callable(previous):  # not SIG_IGN, SIG_DFL or a handler set outside Python (None)
                _pending = None
                _raw.signal(_SIGINT, _record)  # (may first run a SIGINT already waiting, with the old handler)
                _previous = previous
        _depth += 1
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        global _depth, _previous, _pending
        if _get_ident() != _main_ident:
            return
        _depth -= 1
        if _depth or _previous is None:
            return
        previous, _previous = _previous, None
        _raw.signal(_SIGINT, previous)
        pending, _pending = _pending, None
        if pending is not None:
            previous(*pending)


def interrupts_deferred() -> bool:
    """True inside a :class:`defer_interrupts` block of the main thread that holds SIGINTs back."""
    return _previous is not None and _get_ident() == _main_ident
