"""The plans an ``nn.Graph`` keeps, and what each one took for granted.

**The settings**: ``graph.config`` (:class:`~toynet.nn.graph_config.GraphConfig`) says how the graph compiles;
:func:`compile_options` and :func:`settings_of` are what of it (and of the modules' Graph-mode settings) a
plan depends on.

**The cache** (:class:`PlanCache`): a graph compiles once per *signature* of its calls (the nesting of the
arguments and each tensor's shape, dtype and device, see :func:`toynet.static.trace.signature`) and again
whenever a compiled plan's guard fails. Every compilation is a :class:`CompiledGraph`; the cache holds at most
``graph.config.cache_limit`` of them (8 unless set, like ``torch.compile``'s recompile limit) and evicts the
least recently used one beyond that, so a graph called with ever new shapes holds a bounded amount of memory.
Only the most recently compiled entry also keeps the pass reports (each holds a graph before and after its
pass) and the trace's record that ``graph.passes`` and ``print(graph)`` show.

**The guard** (:class:`Guard`):
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

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..dynamic.tensor import Tensor
from ..static.compile import Plan, commit
from ..static.ir import Graph as StaticGraph
from ..static.trace import leaf_kinds
from .graph_amp import SETTINGS
from .graph_print import Record
from .module import Module

# ----------------------------------------------------------------------------------------- settings


def compile_options(graph: Any) -> dict:
    """The keyword arguments of :func:`toynet.static.passes.optimize` this graph's settings ask for: float16
    matrix products (``graph.config.enable_amp(True)``), and the modules whose activations backward recomputes."""
    return {"amp": graph.config.amp_enabled, "checkpoint": checkpointed_paths(graph._modules)}


def settings_of(graph: Any) -> dict:
    """The graph's settings a compiled plan depends on: AMP, the checkpointed modules, the grad scaler's."""
    scaler = graph.__dict__.get("_grad_scaler")
    return {**compile_options(graph), "grad scaler": scaler and scaler.settings(), **graph.config.plan_settings}


def checkpointed_paths(modules: dict[str, Any]) -> tuple[str, ...]:
    """The paths (``"model.block"``) of the modules under ``modules`` (a graph's name -> module) whose
    activations are recomputed; a path inside another one is left out (the outer block covers it)."""
    paths: list[str] = []
    for name, module in modules.items():
        for path, m in module.named_modules(prefix=name):
            if m.__dict__.get(SETTINGS, {}).get("activation_checkpointing") and \
                    not any(path.startswith(p + ".") for p in paths):
                paths.append(path)
    return tuple(paths)


# --------------------------------------------------------------------------------------- the cache


@dataclass(eq=False)
class CompiledGraph:
    """Everything one compilation produced, for one input signature."""

    key: Any                             # (signature of the call, fast path?)
    traced: StaticGraph
    optimized: StaticGraph
    reports: list | None
    plan: Plan
    states: dict[str, Tensor]            # state name -> the eager tensor holding it (parameters, slots...)
    record: Record | None
    seconds: float
    guard: Guard                         # what the plan took for granted; ``guard.check()`` before every run
    #: The number inputs of the latest call (a saved graph keeps them as constants).
    numbers: list = field(default_factory=list)
    #: What commits a step (see toynet.static.compile.commit): the copy of every new state value, or a
    #: function of nn.Graph's that has Python work to add (a scheduler's step).
    commit: Any = commit

    def __post_init__(self) -> None:
        #: The state tensors in the order the plan takes them.
        self.state_tensors = [self.states[name] for name in self.plan.state_names]
        # Which leaves of a call are fed to the plan: "T" a tensor's array, "N" a Python number, "V" none.
        self.feed = [kind[0] for kind in leaf_kinds(self.key[0][0])]

    def inputs(self, leaves: list) -> list:
        """What the plan is given for a call's leaves: tensors' arrays and the numbers that are inputs."""
        self.numbers = [x for x, kind in zip(leaves, self.feed) if kind == "N"]
        return [x.array if kind == "T" else x for x, kind in zip(leaves, self.feed) if kind != "V"]

    def keep_only_what_runs(self) -> None:
        """Drop the pass reports and the outline record (kept for the latest compilation only)."""
        self.reports = self.record = None

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(s)} {d.name}" for s, d, *_ in self.key[0][1])
        return f"<CompiledGraph {self.plan.graph.name} for ({shapes})>"


class PlanCache:
    """Compiled graphs, at most ``limit`` of them, the least recently used evicted first."""

    def __init__(self, limit: int = 8):
        self.limit = limit
        self._recent: OrderedDict[int, CompiledGraph] = OrderedDict()   # id -> entry, least recent first
        #: The most recently compiled entry: the only one with pass reports and an outline record.
        self.latest: CompiledGraph | None = None
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._recent)

    def __iter__(self) -> Iterator[CompiledGraph]:
        return iter(list(self._recent.values()))

    def lookup(self, key: Any) -> tuple[CompiledGraph | None, list[str]]:
        """The most recently used entry compiled for ``key`` whose guard holds, made the most recent; else None
        and what failed in the guard of the most recent entry for ``key`` (nothing for a new signature)."""
        entries = [entry for entry in reversed(self._recent.values()) if entry.key == key]
        for entry in entries:
            if entry.guard.check():
                self._recent.move_to_end(id(entry))
                return entry, []
        return None, entries[0].guard.failures() if entries else []

    def add(self, entry: CompiledGraph, limit: int) -> list[CompiledGraph]:
        """Keep ``entry`` (the latest compilation); return the entries evicted to keep at most ``limit``."""
        if self.latest is not None:
            self.latest.keep_only_what_runs()
        self.latest, self.limit, self._recent[id(entry)] = entry, limit, entry
        evicted = [self._recent.popitem(last=False)[1] for _ in range(len(self._recent) - limit)]
        self.evictions += len(evicted)
        return evicted

    def clear(self) -> None:
        self._recent.clear()
        self.latest = None


# --------------------------------------------------------------------------------------- the guard


#: Why a hyper-parameter other than lr is guarded.
FED = "(only lr is fed in on every call; another hyper-parameter is part of the compiled update rule)"
#: What each kind of step of a path reads from a value.
_STEPS = {"key": lambda value, key: value[key], "attr": getattr, "len": len, "call": lambda value, arg: value(arg),
          "of": lambda value, function: function(value)}
#: Paths used often: a tensor's array, the length of a container.
ARRAY, LEN = ("attr", "array"), (("len",),)
#: Types of settings compared by value (``==``); anything else is compared by identity.
_PLAIN = (bool, int, float, str, type(None))


class ArrayFacts(NamedTuple):
    """What a plan takes for granted about a state tensor: its array's shape and dtype, its device, and whether
    it requires grad (a parameter that does not gets no update)."""

    shape: tuple
    dtype: Any
    device: Any
    requires_grad: bool

    @classmethod
    def of(cls, t: Tensor) -> ArrayFacts:
        return cls(tuple(t.array.shape), t.array.dtype, t.device, t.requires_grad)

    def __str__(self) -> str:
        return f"shape {self.shape}, dtype {self.dtype}, on {self.device}, requires_grad={self.requires_grad}"


class Condition(NamedTuple):
    """One fact a plan took for granted: reading ``path`` from ``root`` gives ``expected``.

    A path is a tuple of steps: ``("key", k)`` reads ``value[k]``, ``("attr", name)`` reads ``value.name``,
    ``("len",)`` reads ``len(value)``, ``("call", arg)`` reads ``value(arg)``, ``("of", function)`` reads
    ``function(value)``. ``same`` is ``"=="`` for plain
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
            value = _STEPS[step[0]](value, *step[1:])
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
    return Guard(conditions_of(graph, [(name, states[name]) for name in order]))


def conditions_of(graph: Any, states: list[tuple[str, Tensor]]) -> list[Condition]:
    """Everything a plan of ``graph`` depends on, as conditions (see the module's docstring)."""
    found: list[Condition] = []

    def require(root: Any, path: tuple, about: str, says: str, same: str = "") -> None:
        """Add: reading ``path`` from ``root`` still gives what it gives now (equal to it for plain data, else
        the very same object, unless ``same`` says); ``says`` tells what changed, with ``{now}`` and ``{then}``."""
        then = Condition(root, path, None, "is", about, str).read()

        def why() -> str:  # (replace, not format: a name in ``says`` may hold braces)
            then_text = repr(then) if isinstance(then, str) else str(then)
            return says.replace("{now}", _now(root, path)).replace("{then}", then_text)

        found.append(Condition(root, path, then, same or ("==" if _plain(then) else "is"), about, why))

    compiled_for, compiled_with = "the plan was compiled for {then}", "the plan was compiled with {then}"
    for name, t in states:   # (the generated code is written for these; only parameters with grad get updates)
        require(t, (("of", ArrayFacts.of),), "state", f"{name} has {{now}}; {compiled_for}", same="==")

    for path, module in _modules(graph._modules):
        attributes = module.__dict__
        for key in [key for key, value in attributes.items() if _plain(value)]:
            what = "model.train()/eval() changed it" if key == "training" else "it was changed"
            require(attributes, (("key", key),), "module", f"{path}.{key} is {{now}}, {compiled_for} ({what})")
        for kind, registry in (("parameter", "_parameters"), ("buffer", "_buffers"), ("submodule", "_modules")):
            about = "container" if kind == "submodule" else "module"
            require(attributes[registry], LEN, about, f"{path} has {{now}} {kind}s, {compiled_with}")
            for key in attributes[registry]:
                require(attributes[registry], (("key", key),), "module", f"{path}.{key} is {{now}}, not the {kind} "
                        "the plan was compiled with (it was replaced: the plan would keep using the old one)")

    for i, opt in enumerate(binding.optimizer for binding in graph._optimizers):
        label = f"optimizer {i} ({type(opt).__name__})"
        require(opt, (("attr", "param_groups"), *LEN), "optimizer", f"{label} has {{now}} groups, {compiled_with}")
        for k, group in enumerate(opt.param_groups):
            require(opt, (("attr", "param_groups"), ("key", k)), "optimizer", f"{label}'s group {k} was replaced")
            other_parameters = f"{label}'s parameter group {k} has other parameters now"
            require(group, (("key", "params"), *LEN), "optimizer", other_parameters)
            for j in range(len(group["params"])):
                require(group, (("key", "params"), ("key", j)), "optimizer", other_parameters)
            require(group, (("of", sorted),), "optimizer", f"{label}'s group {k} now has settings {{now}}", same="==")
            changed = f"{compiled_for} {FED}"
            for key in [key for key in group if key not in ("params", "lr")]:
                require(group, (("key", key),), "optimizer", f"{label}'s {key} is {{now}} in group {k}, {changed}")
        require(opt, (("attr", "state"),), "optimizer", f"{label}'s state was replaced (load_state_dict)")
        for p, slots in opt.state.items():
            require(opt.state, (("key", p),), "optimizer", f"{label}'s state of a parameter was replaced")
            require(slots, LEN, "optimizer", f"{label}'s state of a parameter has {{now}} slots, it had {{then}}")
            for key in slots:
                require(slots, (("key", key),), "optimizer", f"{label}'s slot {key!r} of a parameter was replaced")

    require(settings_of, (("call", graph),), "graph", "a setting changed (AMP, checkpointing, ZeRO, accumulation): "
            "the plan was compiled with {then}; now {now}", same="==")
    return found


def _modules(modules: dict[str, Module]) -> Iterator[tuple[str, Module]]:
    """Every module under the graph's, once, with its path."""
    seen: set[int] = set()
    for name, top in modules.items():
        yield from top.named_modules(prefix=name, memo=seen)


def _plain(value: Any) -> bool:
    return type(value) in _PLAIN or (type(value) is tuple and all(_plain(v) for v in value))


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
