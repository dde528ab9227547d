"""Naming tensors after the user's variables (``x``, ``w``, ``b``, ``z``, ``l``).

A tensor does not know the variable it is bound to; Python only knows it the other way round. So we
look through the namespaces of the code that asked for the drawing (its locals, then its globals) for
names bound to each tensor *by identity*. Parameters of an ``nn.Module`` bound to a variable get that
module's path (``model.weight``).

Precedence, strongest first: the ``names={"x": x}`` option, ``tensor.name``, then what the search found.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from ..nn.module import Module
from ..dynamic.tensor import Tensor

# Names a notebook or the interpreter binds by itself; never the user's idea of a tensor's name.
_SKIPPED = {"In", "Out", "exit", "quit", "get_ipython"}


def user_namespaces() -> list[Mapping[str, Any]]:
    """Locals and globals of the nearest calling frame outside the toynet package."""
    frame = sys._getframe(1)
    while frame is not None and _is_toynet(frame.f_globals.get("__name__", "")):
        frame = frame.f_back
    return frame_namespaces(frame) if frame is not None else []


def frame_namespaces(frame: Any) -> list[Mapping[str, Any]]:
    """A frame's locals then globals (just globals at module level, where they are the same dict)."""
    if frame.f_locals is frame.f_globals:
        return [frame.f_globals]
    return [frame.f_locals, frame.f_globals]


def _is_toynet(module_name: str) -> bool:
    return module_name == "toynet" or module_name.startswith("toynet.")


def notebook_namespaces() -> list[Mapping[str, Any]]:
    """The interactive namespace (a notebook's or the REPL's): ``__main__``'s globals."""
    main = sys.modules.get("__main__")
    return [vars(main)] if main is not None else []


def find_names(namespaces: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """``id(tensor) -> variable name`` for every tensor bound to a public name in ``namespaces``.

    The first namespace wins (locals before globals), and within one the first binding wins.
    """
    found: dict[int, str] = {}
    modules = []
    for namespace in namespaces:
        for name, value in list(namespace.items()):
            if name.startswith("_") or name in _SKIPPED:
                continue
            if isinstance(value, Tensor):
                found.setdefault(id(value), name)
            elif _is_module(value):
                modules.append((name, value))
    for name, module in modules:  # variables come first: `w = model.weight` names it `w`
        for path, tensor in _module_tensors(module):
            found.setdefault(id(tensor), f"{name}.{path}")
    return found


def _is_module(value: Any) -> bool:
    return isinstance(value, Module)


def _module_tensors(module: Any) -> list[tuple[str, Any]]:
    return list(module.named_parameters()) + list(module.named_buffers())


def explicit_names(names: Mapping[str, Any] | None) -> dict[int, str]:
    """Turn the ``names={"x": x}`` option into ``id(tensor) -> name``."""
    if not names:
        return {}
    result = {}
    for name, tensor in names.items():
        if not isinstance(name, str) or not isinstance(tensor, Tensor):
            raise TypeError("names= maps a name to a tensor, e.g. names={'x': x, 'w': w}; got "
                            f"{type(name).__name__} -> {type(tensor).__name__}")
        result[id(tensor)] = name
    return result


class Namer:
    """Answers "what is this tensor called?" with the precedence described in the module docstring."""

    def __init__(self, explicit: Mapping[str, Any] | None, namespaces: Iterable[Mapping[str, Any]]):
        self.explicit = explicit_names(explicit)
        self.found = find_names(namespaces)

    def __call__(self, tensor: Any) -> str:
        key = id(tensor)
        if key in self.explicit:
            return self.explicit[key]
        if getattr(tensor, "name", None):
            return str(tensor.name)
        return self.found.get(key, "")
