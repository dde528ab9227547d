"""``nn.Module``: a container that registers parameters, buffers and submodules by attribute name.

Assigning ``self.fc = nn.Linear(3, 1)`` inside ``__init__`` registers a submodule; assigning an
``nn.Parameter`` registers a parameter; ``register_buffer`` registers state that is saved but not
trained (BatchNorm's running statistics). Everything else (``parameters()``, ``state_dict()``,
``to(device)``, ``train()``/``eval()``, the printed tree) walks those three registries.

Calling a module runs ``forward``. While an ``nn.Graph`` is tracing, the call is reported to the tracer
first, which is how the graph learns each module's inputs and outputs for ``print(graph)``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Iterator

from .. import mode
from ..dynamic.tensor import Tensor
from .module_state import ModuleState
from .parameter import Parameter

#: How many times any module's attributes, registries, training mode or Graph-mode settings changed through
#: the methods below (and nn.Graph's settings through theirs): a count the fast path's guard compares on
#: every call instead of every module's settings (toynet.nn.fast.guard).
CHANGES = [0]


class Module(ModuleState):
    """Base class of every layer and model. Subclasses call ``super().__init__()`` and define ``forward``."""

    training: bool
    #: The view of a module's Graph-mode settings that OneFlow's ``module.config`` gives
    #: (``toynet.nn.graph_amp.GraphModule``, which registers itself here).
    graph_settings: Any = None

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if mode.tracer is not None:
            return mode.tracer.call_module(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # ---------------------------------------------------------------------------- registration

    def _registries(self) -> tuple[dict, dict, dict]:
        try:
            return self.__dict__["_parameters"], self.__dict__["_buffers"], self.__dict__["_modules"]
        except KeyError:
            raise AttributeError(f"cannot assign parameters or submodules before {type(self).__name__}"
                                 ".__init__() has called super().__init__()") from None

    def __setattr__(self, name: str, value: Any) -> None:
        # A name keeps its kind: once a parameter, only a Parameter (or None) may replace it; likewise
        # for submodules and buffers. Replacing in place keeps the name's position (and so the order of
        # parameters() and state_dict()).
        CHANGES[0] += 1
        name = name if type(name) is str else str.__str__(name)   # (a str subclass: see _check_name)
        d = self.__dict__
        params, buffers, modules = (d.get(r) for r in ("_parameters", "_buffers", "_modules"))
        if isinstance(value, Parameter):
            params, buffers, modules = self._registries()
            self._forget(name, keep=params)
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as parameter {name!r} "
                                "(an nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            params, buffers, modules = self._registries()
            self._forget(name, keep=modules)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module {name!r} "
                                "(an nn.Module or None expected)")
            modules[name] = None
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (a Tensor or None "
                                "expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: dict) -> None:
        """Remove ``name`` from every registry but ``keep`` and from the plain attributes."""
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        if name == "config" and Module.graph_settings is not None:  # module.config.activation_checkpointing
            return Module.graph_settings(self)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        CHANGES[0] += 1
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(registry, {}):
                del self.__dict__[registry][name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        CHANGES[0] += 1
        params = self._registries()[0]
        name = self._check_name(name, params)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}): expected an nn.Parameter, got {type(param).__name__}")
        params[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register state that belongs to the module but is not trained (saved unless not persistent)."""
        CHANGES[0] += 1
        buffers = self._registries()[1]
        name = self._check_name(name, buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer({name!r}): expected a Tensor, got {type(tensor).__name__}")
        buffers[name] = tensor
        if persistent:
            self.__dict__["_non_persistent"].discard(name)
        else:
            self.__dict__["_non_persistent"].add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        CHANGES[0] += 1
        modules = self._registries()[2]
        name = self._check_name(name, modules)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        modules[name] = module

    register_module = add_module

    def _check_name(self, name: str, registry: dict) -> str:
        """``name``, checked, as a plain ``str`` (a str subclass or ``numpy.str_`` would reach keys and the guard)."""
        if not isinstance(name, str) or not name:
            raise KeyError(f"module attribute name must be a non-empty string, got {name!r}")
        if "." in name:
            raise KeyError(f"module attribute name can't contain \".\", got: {name}")
        if name not in registry and (hasattr(self, name) or any(
                name in r for r in (self._parameters, self._buffers, self._modules))):
            raise KeyError(f"attribute {name!r} already exists on {type(self).__name__}; pick another name")
        return str.__str__(name)

    # ------------------------------------------------------------------------------- traversal

    def named_modules(self, prefix: str = "", memo: set | None = None) -> Iterator[tuple[str, "Module"]]:
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        for name, child in self._modules.items():
            if child is not None:
                yield name, child

    def children(self) -> Iterator["Module"]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, registry: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in module.__dict__[registry].items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Each parameter once (a shared parameter is listed under its first name)."""
        yield from self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ------------------------------------------------------------------------------- modes etc.

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``True``) or evaluation mode (``False``) here and in every submodule."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        CHANGES[0] += 1
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------------------------- printing

    def extra_repr(self) -> str:
        """The settings shown in parentheses after the class name; layers override it."""
        return ""

    def _shallow_repr(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, child in self._modules.items():
            child_repr = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {child_repr}")
        if not self._modules:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))


