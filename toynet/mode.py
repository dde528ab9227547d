"""The switches every layer reads: is grad recorded, is a graph being traced, who watches ops being made.

This is the ground floor of toynet's state. It imports nothing of toynet, so every module, from the
op table up to the visualiser, can import it at the top without making a circle:

* **grad mode**: ``no_grad()``, ``enable_grad()``, ``set_grad_enabled()``. :func:`toynet.dynamic.tensor.apply`
  records a ``GradFn`` only while ``grad_enabled`` is true.
* **the active tracer**: while ``nn.Graph.build`` runs, ``tracer`` is the :class:`toynet.static.trace.Tracer`
  that turns every op into a graph node instead of computing it. ``None`` means Eager mode.
* **observers**: callbacks told about every eager op (``op_observers``) and every traced node
  (``node_observers``) and every line ``graph.debug(level)`` prints (``log_observers``);
  ``toynet.viz.record`` animates graph construction, and its debug printout, through them.

The values are plain module attributes, read on every op, so they cost one attribute lookup.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

#: Does :func:`toynet.dynamic.tensor.apply` record how results were made (for ``backward``)?
grad_enabled: bool = True

#: The tracer that records ops while an ``nn.Graph`` is being built; ``None`` in Eager mode.
tracer: Any = None

#: ``observer(op, inputs, attrs, result)`` for every eager op.
op_observers: list[Callable[..., None]] = []

#: ``observer(node, graph)`` for every node a tracer adds.
node_observers: list[Callable[..., None]] = []

#: ``observer(message)`` for every message an ``nn.Graph``'s debug level prints (after printing it).
log_observers: list[Callable[[str], None]] = []


# ------------------------------------------------------------------------------------------ tracer


def set_tracer(new_tracer: Any) -> Any:
    """Install (or, with ``None``, remove) the tracer that records ops; returns the previous one."""
    global tracer
    previous, tracer = tracer, new_tracer
    return previous


def current_tracer() -> Any:
    """The active tracer; a lazy tensor used after its trace has ended gets a clear error instead."""
    if tracer is None:
        raise RuntimeError("this lazy tensor belongs to an nn.Graph trace that has ended; lazy tensors "
                           "exist only inside nn.Graph.build()")
    return tracer


# --------------------------------------------------------------------------------------- grad mode


class _GradMode:
    """Context manager and decorator that sets grad mode for a block and restores it after."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.previous: list[bool] = []

    def __enter__(self) -> None:
        global grad_enabled
        self.previous.append(grad_enabled)
        grad_enabled = self.enabled

    def __exit__(self, *exc: Any) -> None:
        global grad_enabled
        grad_enabled = self.previous.pop()

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return call_with_grad_mode(self.enabled, fn, *args, **kwargs)
        return wrapper


def call_with_grad_mode(enabled: bool, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with grad mode set to ``enabled``, restored however ``fn`` ends.

    What toynet's own code uses instead of ``with no_grad():``. A Ctrl-C is delivered between two bytecodes,
    and one of those points is the first instruction of a ``with`` block's ``__exit__``: an interrupt
    landing there skips the restore and leaves grad mode off for the rest of the session (measured: a
    third of the Ctrl-C's sent to a loop of ``with no_grad(): pass``). Here the restore is a plain store in
    a ``finally``, with no call before it, so no interrupt can come between the block and the restore."""
    global grad_enabled
    previous = grad_enabled
    grad_enabled = enabled
    try:
        return fn(*args, **kwargs)
    finally:
        grad_enabled = previous


class _Restore:
    """What ``set_grad_enabled`` returns: it has already switched; leaving a ``with`` switches back."""

    def __init__(self, previous: bool):
        self.previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        global grad_enabled
        grad_enabled = self.previous


def no_grad() -> _GradMode:
    """Ops inside ``with toynet.no_grad():`` record nothing (evaluation, optimizer updates)."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    return _GradMode(True)


def set_grad_enabled(mode: bool) -> _Restore:
    """Set grad mode now; usable as a context manager that restores the old mode on exit."""
    global grad_enabled
    previous, grad_enabled = grad_enabled, bool(mode)
    return _Restore(previous)


def is_grad_enabled() -> bool:
    return grad_enabled
