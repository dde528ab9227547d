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

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

try:  # the C module behind `signal`: same functions, without the enum conversions (10x faster)
    import _signal as _raw
except ImportError:  # pragma: no cover - other Pythons
    _raw = signal

_SIGINT = signal.SIGINT
_main_thread = threading.main_thread
_current_thread = threading.current_thread

_depth = 0                # sections open in the main thread (only the outermost installs the recorder)
_previous: Any = None     # the handler the outermost section replaced
_pending: tuple | None = None  # (signum, frame) of a SIGINT received inside the section


def _record(signum: int, frame: FrameType | None) -> None:
    global _pending
    _pending = (signum, frame)


class defer_interrupts:
    """Context manager: a SIGINT received inside the block is delivered when the block ends.

    Delivery calls the handler that was installed before the block (``KeyboardInterrupt`` for Python's
    default), also when the block raised: the interrupt then wins, with the block's error as context.
    """

    __slots__ = ("_active",)

    def __enter__(self) -> "defer_interrupts":
        global _depth, _previous, _pending
        self._active = False
        if _current_thread() is not _main_thread():
            return self
        if _depth == 0:
            previous = _raw.getsignal(_SIGINT)
            if not callable(previous):  # SIG_IGN, SIG_DFL or a handler set outside Python: leave it alone
                return self
            _pending = None
            _raw.signal(_SIGINT, _record)  # (runs a SIGINT already waiting first, with the old handler)
            _previous = previous
        _depth += 1
        self._active = True
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        global _depth, _previous, _pending
        if not self._active:
            return
        self._active = False
        _depth -= 1
        if _depth:
            return
        previous, _previous = _previous, None
        _raw.signal(_SIGINT, previous)
        pending, _pending = _pending, None
        if pending is not None:
            previous(*pending)


def interrupts_deferred() -> bool:
    """True inside a :class:`defer_interrupts` block of the main thread (for tests and assertions)."""
    return _depth > 0
