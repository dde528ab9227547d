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
* **the fast path**: ``fast`` is False on the *lesson path*, the plain engine the notebooks teach, and True
  on the *fast path*, where code kept in the ``fast/`` folders replaces some lesson functions (fused ops,
  kernel choice, a generated repeat call...). The environment variable ``TOYNET_FAST`` sets it when toynet
  is imported, :func:`set_fast_path` at any time; :func:`fast_replacements` lists what it swaps.

The values are plain module attributes, read on every op.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, NamedTuple

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


# ------------------------------------------------------------------------------------------ the fast path


def _fast_from_environment() -> bool:
    value = os.environ.get("TOYNET_FAST", "0").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"TOYNET_FAST must be 0 (the lesson path, the default) or 1 (the fast path), got {value!r}")
    return value == "1"


#: Is the fast path on? False (the default) is the lesson path: the plain engine the notebooks teach,
#: whose plans are the same on every machine. True swaps in what the ``fast/`` folders hold.
fast: bool = _fast_from_environment()


class Replacement(NamedTuple):
    """One lesson function the fast path replaces: ``owner.name`` is ``lesson`` or ``fast``."""

    owner: Any        # a module or a class
    name: str
    lesson: Any
    fast: Any

    def __str__(self) -> str:
        owner = getattr(self.owner, "__qualname__", None) or self.owner.__name__
        module = getattr(self.owner, "__module__", None)
        where = f"{module}.{owner}" if module and not owner.startswith(module) else owner
        return f"{where}.{self.name}  ->  {self.fast.__module__}.{self.fast.__qualname__}"


_replacements: list[Replacement] = []


def fast_replacement(owner: Any, name: str) -> Callable[[Any], Any]:
    """Decorator, used only in the ``fast/`` folders: while the fast path is on, ``owner.name`` (a function
    of a module, or a method of a class) is the decorated function instead of the lesson one."""
    def register(fast_version: Any) -> Any:
        lesson = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        _replacements.append(Replacement(owner, name, lesson, fast_version))
        if fast:
            setattr(owner, name, fast_version)
        return fast_version
    return register


def fast_replacements() -> list[Replacement]:
    """What the fast path swaps in: each lesson function and its fast version (``print(*...)``, one a line)."""
    return list(_replacements)


def set_fast_path(enabled: bool) -> _FastRestore:
    """Turn the fast path on (True) or off (False, the lesson path) now; usable as a context manager that
    switches back on exit (``with toynet.set_fast_path(True): ...``). Compiled ``nn.Graph`` plans are kept
    per path: a graph called on the other path compiles for it."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_fast_path() takes True or False, got {enabled!r}")
    previous = fast
    _switch(enabled)
    return _FastRestore(previous)


def is_fast_path() -> bool:
    return fast


def _switch(enabled: bool) -> None:
    global fast
    fast = enabled
    for r in _replacements:
        setattr(r.owner, r.name, r.fast if enabled else r.lesson)


class _FastRestore:
    def __init__(self, previous: bool):
        self.previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        _switch(self.previous)
