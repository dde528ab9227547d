"""``nn.graph.GraphModule``: per-module settings of Graph mode (activation checkpointing).

OneFlow wraps every module assigned to an ``nn.Graph`` in a proxy and keeps Graph-mode settings on it;
``graph.model.block.to(nn.graph.GraphModule)`` returns that proxy, and older releases reach the same
settings as ``graph.model.block.config``. toynet has no proxies (``graph.model`` is the very module you
assigned), so a :class:`GraphModule` is a small view onto one module that keeps its settings in the
module's own ``__dict__``. Both spellings work::

    self.model.block.to(nn.graph.GraphModule).activation_checkpointing = True
    self.model.block.config.activation_checkpointing = True

A setting belongs to the module, so every graph that holds the module sees it, and changing it makes
each graph compile again on its next call (the guard of a plan checks the settings it was compiled
with; see :mod:`toynet.nn.graph_guard`). What ``activation_checkpointing`` does to the compiled step is
the pass :mod:`toynet.static.passes.checkpoint`.
"""

from __future__ import annotations

from typing import Any

from .module import CHANGES, Module

_SETTINGS = "_graph_module_settings"  # the key, in a module's __dict__, of its Graph-mode settings


class GraphModule:
    """Graph-mode settings of one module: ``activation_checkpointing`` (and ``config``, itself, for
    OneFlow's older ``module.config.activation_checkpointing`` spelling)."""

    #: ``module.to(GraphModule)`` asks for this view rather than a device or dtype.
    wraps_modules = True

    def __init__(self, module: Any):
        object.__setattr__(self, "origin", module)

    @classmethod
    def of(cls, module: Any) -> "GraphModule":
        return cls(module)

    def _settings(self) -> dict:
        return self.origin.__dict__.setdefault(_SETTINGS, {})

    @property
    def config(self) -> "GraphModule":
        return self

    @property
    def activation_checkpointing(self) -> bool:
        """Recompute this module's activations in backward instead of keeping them from forward."""
        return self._settings().get("activation_checkpointing", False)

    @activation_checkpointing.setter
    def activation_checkpointing(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"activation_checkpointing must be True or False, got {value!r}")
        self._settings()["activation_checkpointing"] = value
        CHANGES[0] += 1

    def to(self, cls: type) -> "GraphModule":
        if cls is GraphModule:
            return self
        raise TypeError(f"a GraphModule converts only to nn.graph.GraphModule, got {cls!r}; to move or cast the "
                        f"module itself, call .to() on graph_module.origin")

    def __setattr__(self, name: str, value: Any) -> None:
        if not hasattr(type(self), name):
            raise AttributeError(f"nn.graph.GraphModule has no setting {name!r}; the one toynet knows is "
                                 "activation_checkpointing")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"GraphModule({type(self.origin).__name__}, activation_checkpointing={self.activation_checkpointing})"


def checkpointed_paths(modules: dict[str, Any]) -> tuple[str, ...]:
    """The paths (``"model.block"``) of the modules under ``modules`` (a graph's name -> module) whose
    activations are recomputed; a path inside another one is left out (the outer block covers it)."""
    paths: list[str] = []
    for name, module in modules.items():
        for path, m in module.named_modules(prefix=name):
            if m.__dict__.get(_SETTINGS, {}).get("activation_checkpointing") and \
                    not any(path.startswith(p + ".") for p in paths):
                paths.append(path)
    return tuple(paths)


Module.graph_settings = GraphModule  # module.config is this view
