"""Guards: what a compiled plan took for granted, checked before every run of it.

Tracing runs ``build`` once and bakes into the plan everything Python saw then:

* which tensor each parameter and buffer of the modules is (the plan reads those very tensors), and
  the shape, dtype and device of its array (the generated code is written for them);
* every module's ``training`` flag (dropout and batch norm traced one branch) and its other plain
  settings (``p`` of a dropout, ``eps`` of a batch norm, ``reduction`` of a loss);
* whether each parameter requires grad (only those get updates);
* each optimizer's parameter groups, their hyper-parameters (``momentum``, ``weight_decay``, ``betas``...:
  Python numbers in the traced update rule) and its state slots; only ``lr`` is fed in on every call;
* the graph's own settings: AMP, the grad scaler, the modules whose activations are checkpointed.

A plan is right only while all of that still holds. ``torch.compile`` calls these checks *guards*; so
does toynet. A :class:`Guard` is a list of :class:`Condition` s, each one fact written as data: reading a
*path* from a *root* object (``model.__dict__["training"]``, ``len(optimizer.param_groups)``...) must give
the value seen when compiling, equal to it or the very same object. Before every run the graph checks them
all; when one fails, :meth:`Guard.failures` says in words which, and ``nn.Graph`` compiles a new plan
(``graph.debug(1)`` prints why) instead of running stale code.

Not guarded: values the plan copied in as constants (eager tensors ``build`` captured that are not
parameters or buffers: register them as buffers) and Python state outside the modules and optimizers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple

from ..dynamic.tensor import Tensor
from .graph_amp import settings_of
from .module import Module

#: Types of settings compared by value (``==``); anything else is compared by identity.
_PLAIN = (bool, int, float, str, type(None))


class Condition(NamedTuple):
    """One fact a plan took for granted: reading ``path`` from ``root`` gives ``expected``.

    A path is a tuple of steps: ``("key", k)`` reads ``value[k]``, ``("attr", name)`` reads ``value.name``,
    ``("len",)`` reads ``len(value)``, ``("call", arg)`` reads ``value(arg)``. ``same`` is ``"=="`` for plain
    data and ``"is"`` for objects. ``about`` says what the fact concerns: ``"module"`` (a module's settings
    and registries), ``"container"`` (how many children a module has: ``del model[0]`` changes that without
    a method of Module), ``"state"`` (a state tensor's array), ``"parameter"``, ``"optimizer"``, ``"graph"``.
    """

    root: Any
    path: tuple
    expected: Any
    same: str
    about: str
    why: Callable[[], str]

    def read(self) -> Any:
        value = self.root
        for step in self.path:
            if step[0] == "key":
                value = value[step[1]]
            elif step[0] == "attr":
                value = getattr(value, step[1])
            elif step[0] == "len":
                value = len(value)
            else:
                value = value(step[1])
        return value

    def holds(self) -> bool:
        try:
            value = self.read()
        except (KeyError, AttributeError, IndexError, TypeError):  # deleted since: it no longer holds
            return False
        return value is self.expected or (self.same == "==" and value == self.expected)


class Guard:
    """The conditions of one plan; :meth:`check` tests them all."""

    def __init__(self, conditions: list[Condition]):
        self.conditions = conditions

    def __len__(self) -> int:
        return len(self.conditions)

    def check(self) -> bool:
        return all(c.holds() for c in self.conditions)

    def failures(self, limit: int = 3) -> list[str]:
        """What no longer holds, in words (at most ``limit`` of them)."""
        return [c.why() for c in self.conditions if not c.holds()][:limit]


def guard_graph(graph: Any, traced: Any, states: dict[str, Tensor], order: list[str]) -> Guard:
    """The guard of a plan ``graph`` (an nn.Graph) just compiled: the states the plan reads (``traced``: the
    traced graph, which says which are parameters; ``order``: the plan's state names), its modules, its
    optimizers and its settings."""
    parameters = {n.state_name for n in traced.states if n.state_kind == "parameter"}
    return Guard(conditions_of(graph, [(name, states[name]) for name in order], parameters))


def conditions_of(graph: Any, states: list[tuple[str, Tensor]], parameters: set[str]) -> list[Condition]:
    """Everything a plan of ``graph`` depends on, as conditions (see the module's docstring)."""
    found: list[Condition] = []

    def require(root: Any, path: tuple, about: str, why: Callable[[Any, Any], str], same: str = "") -> None:
        """Add: reading ``path`` from ``root`` still gives what it gives now (equal to it for plain data, else
        the very same object, unless ``same`` says); ``why(now, then)`` says what changed."""
        expected = Condition(root, path, None, "is", about, str).read()
        same = same or ("==" if _plain(expected) else "is")
        found.append(Condition(root, path, expected, same, about, lambda: why(_now(root, path), expected)))

    for name, t in states:
        require(t, (("attr", "array"), ("attr", "shape")), "state",
                lambda now, then, n=name: f"{n} has shape {now}, the plan was compiled for {then} "
                                          "(its .data was replaced)")
        require(t, (("attr", "array"), ("attr", "dtype")), "state",
                lambda now, then, n=name: f"{n} has dtype {now}, the plan was compiled for {then}", same="==")
        require(t, (("attr", "device"),), "state",
                lambda now, then, n=name: f"{n} is on {now}, the plan was compiled for {then}")
        if name in parameters:
            require(t, (("attr", "requires_grad"),), "parameter",
                    lambda now, then, n=name: f"{n}.requires_grad is {now}, the plan was compiled for {then}")

    for path, module in _modules(graph._modules):
        attributes = module.__dict__
        for key, value in attributes.items():
            if _plain(value):
                what = "model.train()/eval() changed it" if key == "training" else "it was changed"
                require(attributes, (("key", key),), "module", lambda now, then, p=path, k=key, w=what:
                        f"{p}.{k} is {now}, the plan was compiled for {then!r} ({w})")
        for kind, registry_name in (("parameter", "_parameters"), ("buffer", "_buffers"), ("submodule", "_modules")):
            registry = attributes[registry_name]
            require(registry, (("len",),), "container" if kind == "submodule" else "module",
                    lambda now, then, p=path, k=kind: f"{p} has {now} {k}s, the plan was compiled with {then}")
            for key in registry:
                require(registry, (("key", key),), "module", lambda now, then, p=path, k=key, c=kind:
                        f"{p}.{k} is {now}, not the {c} the plan was compiled with (it was replaced: the plan "
                        "would keep using the old one)")

    for i, binding in enumerate(graph._optimizers):
        opt = binding.optimizer
        label = f"optimizer {i} ({type(opt).__name__})"
        require(opt, (("attr", "param_groups"), ("len",)), "optimizer",
                lambda now, then, lb=label: f"{lb} has {now} parameter groups, the plan was compiled with {then}")
        for k, group in enumerate(opt.param_groups):
            require(opt, (("attr", "param_groups"), ("key", k)), "optimizer",
                    lambda now, then, lb=label, k=k: f"{lb}'s parameter group {k} was replaced")
            require(group, (("key", "params"), ("len",)), "optimizer",
                    lambda now, then, lb=label, k=k: f"{lb}'s parameter group {k} has other parameters now")
            for j in range(len(group["params"])):
                require(group, (("key", "params"), ("key", j)), "optimizer",
                        lambda now, then, lb=label, k=k: f"{lb}'s parameter group {k} has other parameters now")
            for key in group:
                if key not in ("params", "lr"):
                    require(group, (("key", key),), "optimizer", lambda now, then, lb=label, k=k, key=key:
                            f"{lb}'s {key} is {now} in parameter group {k}, the plan was compiled for {then!r} "
                            "(only lr is fed in on every call; another hyper-parameter is part of the compiled "
                            "update rule)")
        require(opt, (("attr", "state"),), "optimizer",
                lambda now, then, lb=label: f"{lb}'s state was replaced (load_state_dict)")
        for p, slots in opt.state.items():
            require(opt.state, (("key", p),), "optimizer",
                    lambda now, then, lb=label: f"{lb}'s state of a parameter was replaced")
            require(slots, (("len",),), "optimizer",
                    lambda now, then, lb=label: f"{lb}'s state of a parameter has {now} slots, the plan read {then}")
            for key in slots:
                require(slots, (("key", key),), "optimizer",
                        lambda now, then, lb=label, key=key: f"{lb}'s state slot {key!r} of a parameter was replaced")

    require(settings_of, (("call", graph),), "graph", lambda now, then:
            f"AMP or activation checkpointing changed: the plan was compiled with {then}; now {now}", same="==")
    return found


def _modules(modules: dict[str, Module]) -> Iterator[tuple[str, Module]]:
    """Every module under the graph's, once, with its path."""
    seen: set[int] = set()
    for name, top in modules.items():
        for path, module in top.named_modules(prefix=name):
            if id(module) not in seen:
                seen.add(id(module))
                yield path, module


def _plain(value: Any) -> bool:
    if type(value) in _PLAIN:
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


def _now(root: Any, path: tuple) -> str:
    """What ``path`` reads from ``root`` now, for a message (``<deleted>`` if nothing)."""
    try:
        value = Condition(root, path, None, "is", "", str).read()
    except (KeyError, AttributeError, IndexError, TypeError):
        return "<deleted>"
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, Module):
        return value._shallow_repr()
    return repr(value) if isinstance(value, str) else str(value)
