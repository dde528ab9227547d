"""``ModuleList`` and ``ModuleDict``: containers that register the modules they hold (so their parameters
are found), without calling them. ``Sequential``, which calls its children in order, is in :mod:`.layers`."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..module import Module
from .layers import _delete_and_renumber


class ModuleList(Module):
    """A list of modules that registers them (so their parameters are found)."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, index: Any) -> Any:
        values = list(self._modules.values())
        return ModuleList(values[index]) if isinstance(index, slice) else values[index]

    def __setitem__(self, index: int, module: Module) -> None:
        self.add_module(list(self._modules)[index], module)

    def __delitem__(self, index: Any) -> None:
        _delete_and_renumber(self, index)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict of modules that registers them."""

    def __init__(self, modules: Any = None):
        """``modules``: a dict, or an iterable of ``(name, module)`` pairs."""
        super().__init__()
        pairs = modules.items() if isinstance(modules, dict) else (modules or ())
        for name, m in pairs:
            self.add_module(name, m)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()
