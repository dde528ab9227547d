"""Containers: ``Sequential`` (call children in order), ``ModuleList``, ``ModuleDict``."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator

from ..module import Module


class Sequential(Module):
    """Children called one after the other; ``model[0]`` is the first, ``model[1:]`` a new Sequential."""

    def __init__(self, *modules: Any):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, index: Any) -> Any:
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(items[index]))
        if not -len(items) <= index < len(items):
            raise IndexError(f"index {index} is out of range for a Sequential of {len(items)} modules")
        return items[index][1]

    def __setitem__(self, index: int, module: Module) -> None:
        name = list(self._modules)[index]
        self.add_module(name, module)

    def __delitem__(self, index: Any) -> None:
        _delete_and_renumber(self, index)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self


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


def _delete_and_renumber(container: Module, index: Any) -> None:
    """``del container[i]`` (or a slice); the remaining modules are renamed 0, 1, 2... as in PyTorch."""
    names = list(container._modules)
    for name in (names[index] if isinstance(index, slice) else [names[index]]):
        del container._modules[name]
    modules = list(container._modules.values())
    container._modules.clear()
    for i, m in enumerate(modules):
        container._modules[str(i)] = m
