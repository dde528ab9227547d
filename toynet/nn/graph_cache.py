"""The plans an ``nn.Graph`` keeps: a bounded cache of compilations, each with its guard.

A graph compiles once per *signature* of its calls (the nesting of the arguments and each tensor's
shape, dtype and device, see :mod:`toynet.static.arguments`) and again whenever a compiled plan's
guard fails (see :mod:`toynet.nn.graph_guard`). Every compilation is a :class:`CompiledGraph`; the
:class:`PlanCache` holds at most ``GraphConfig.cache_limit`` of them (8 unless set, like
``torch.compile``'s recompile limit) and evicts the least recently used one beyond that, so a graph
called with ever new shapes holds a bounded amount of memory.

What each entry keeps is what running needs (the plan with its buffers, the states it reads, the
guard) plus the traced and optimised graphs (``graph.traced_ir``, ``graph.ir`` and ``toynet.save``
show them). Only the most recently compiled entry also keeps the pass reports (each holds a graph
before and after its pass) and the outline record that ``graph.passes`` and ``print(graph)`` show.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any, Iterator

from ..static.arguments import leaf_kinds
from ..static.compile import Plan, commit
from ..static.ir import PASSES
from ..static.ir import Graph as StaticGraph
from ..dynamic.tensor import Tensor
from .graph_guard import Guard
from .module import CHANGES
from .graph_outline import OutlineRecorder


class GraphConfig:
    """Settings of one graph. ``training`` is True once an optimizer has been added.

    ``cache_limit``: how many compiled plans the graph keeps (8; the least recently used is evicted, with
    a warning the first time). ``static_arguments``: the arguments of ``build`` whose numbers are
    constants of the plan (see :meth:`set_static_arguments`).
    """

    def __init__(self) -> None:
        self.training = False
        self.disabled_passes: set[str] = set()
        self._cache_limit = 8
        self.static_arguments: frozenset[str] = frozenset()
        #: float16 matrix products with float32 master weights (see toynet.static.passes.amp).
        self.amp_enabled = False

    @property
    def cache_limit(self) -> int:
        return self._cache_limit

    @cache_limit.setter
    def cache_limit(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"cache_limit must be a whole number >= 1, got {value!r}")
        self._cache_limit = value

    def set_static_arguments(self, *names: str) -> None:
        """Make the numbers in these arguments of ``build`` constants of the plan, as Python values in
        ``build`` (``range(steps)``, a size, a dropout rate): each new value then compiles a plan of its
        own. Other Python numbers are inputs of the plan, 0-d tensors in ``build``."""
        if not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise TypeError(f"static arguments are named by build()'s parameter names, got {names!r}")
        self.static_arguments = frozenset(names)

    def enable_amp(self, mode: bool = True) -> None:
        """Run matrix products and convolutions in float16, the rest and the weights in float32 (the
        pass toynet.static.passes.amp); add a loss scaler with ``graph.set_grad_scaler``."""
        if not isinstance(mode, bool):
            raise TypeError(f"enable_amp() takes True or False, got {mode!r}")
        self.amp_enabled = mode
        CHANGES[0] += 1  # the compiled plans' guards recheck their settings

    def enable_pass(self, name: str, enabled: bool = True) -> None:
        """Turn one optimisation pass off (or back on) for graphs compiled from now on."""
        if name not in PASSES:
            raise ValueError(f"unknown pass {name!r}; the passes are {', '.join(PASSES)}")
        if enabled:
            self.disabled_passes.discard(name)
        else:
            self.disabled_passes.add(name)

    def __repr__(self) -> str:
        return f"GraphConfig(training={self.training}, )"


def build_parameters(graph_class: type, static: frozenset) -> tuple[str, ...]:
    """The names of ``graph_class.build``'s parameters, after checking that ``static`` names some of them."""
    build = getattr(graph_class.build, "__wrapped__", graph_class.build)
    params = list(inspect.signature(build).parameters.values())[1:]
    names = tuple(p.name for p in params)
    unknown = set(static) - set(names)
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
        raise ValueError(f"graph.config.set_static_arguments names {sorted(unknown)}, but "
                         f"{graph_class.__name__}.build() takes {list(names)}")
    return names


def describe_inputs(leaves: list) -> str:
    return ", ".join(f"{tuple(t.shape)} {t.dtype.name}" if isinstance(t, Tensor) else type(t).__name__
                     for t in leaves) or "none"


def eviction_warning(name: str, limit: int) -> str:
    return (f"nn.Graph {name} has compiled more than graph.config.cache_limit = {limit} plans and evicts the "
            "least recently used ones from now on; a graph that recompiles on every call runs slowly. It "
            "compiles once per input signature (shapes, dtypes, non-number arguments) and whenever a guard "
            "fails (graph.debug(1) says why): pad inputs to a few shapes, keep modules and optimizer "
            "settings fixed, or raise graph.config.cache_limit.")


class CompiledGraph:
    """Everything one compilation produced, for one input signature."""

    def __init__(self, key: Any, traced: StaticGraph, optimized: StaticGraph, reports: list | None, plan: Plan,
                 states: dict[str, Tensor], record: OutlineRecorder | None, seconds: float, guard: Guard):
        self.key = key
        #: State name -> the eager tensor holding it (parameters, buffers, optimizer slots, train step).
        self.states = states
        #: The same tensors in the order the plan takes them.
        self.state_tensors = [states[name] for name in plan.state_names]
        self.traced = traced
        self.optimized = optimized
        self.reports = reports
        self.plan = plan
        self.record = record
        self.seconds = seconds
        #: What the plan took for granted; ``guard.check()`` before every run.
        self.guard = guard
        # Which leaves of a call are fed to the plan: "T" a tensor's array, "N" a Python number, "V" none.
        self._feed = [kind[0] for kind in leaf_kinds(key[0][0])]  # key: ((spec, tensor metas), fast path?)
        self._numbers = "N" in self._feed
        #: The number inputs of the latest call (a saved graph keeps them as constants).
        self.numbers: list = []
        #: What commits a step (see toynet.static.compile.commit): the copy of every new state value, or a
        #: function of nn.Graph's that has Python work to add (a scheduler's step).
        self.commit: Any = commit

    def inputs(self, leaves: list) -> list:
        """What the plan is given for a call's leaves: tensors' arrays and the numbers that are inputs."""
        if not self._numbers:
            return [t.array for t in leaves if isinstance(t, Tensor)]
        self.numbers = [x for x, kind in zip(leaves, self._feed) if kind == "N"]
        return [x.array if kind == "T" else x for x, kind in zip(leaves, self._feed) if kind != "V"]

    def keep_only_what_runs(self) -> None:
        """Drop the pass reports and the outline record (kept for the latest compilation only)."""
        self.reports = self.record = None

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(s)} {d.name}" for s, d, _ in self.key[0][1])
        return f"<CompiledGraph {self.plan.graph.name} for ({shapes})>"


class PlanCache:
    """Compiled graphs by signature, at most ``limit`` of them, the least recently used evicted first."""

    def __init__(self, limit: int = 8):
        self.limit = limit
        self._by_key: dict[Any, list[CompiledGraph]] = {}
        self._recent: OrderedDict[int, CompiledGraph] = OrderedDict()   # id -> entry, least recent first
        #: The most recently compiled entry: the only one with pass reports and an outline record.
        self.latest: CompiledGraph | None = None
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._recent)

    def __iter__(self) -> Iterator[CompiledGraph]:
        return iter(list(self._recent.values()))

    def __bool__(self) -> bool:
        return bool(self._recent)

    def lookup(self, key: Any) -> tuple[CompiledGraph | None, list[str]]:
        """The entry compiled for ``key`` whose guard holds, made the most recent; else None and what failed
        (in the guard of the most recently used entry for ``key``; empty for a new signature)."""
        entries = self._by_key.get(key)
        if not entries:
            return None, []
        for entry in entries:
            if entry.guard.check():
                self.touch(entry)
                return entry, []
        return None, entries[0].guard.failures()

    def touch(self, entry: CompiledGraph) -> None:
        """Make ``entry`` the most recently used."""
        self._recent.move_to_end(id(entry))
        entries = self._by_key[entry.key]
        if entries[0] is not entry:
            entries.remove(entry)
            entries.insert(0, entry)

    def add(self, entry: CompiledGraph) -> list[CompiledGraph]:
        """Keep ``entry`` (the latest compilation); return the entries evicted to stay within the limit."""
        if self.latest is not None:
            self.latest.keep_only_what_runs()
        self.latest = entry
        self._by_key.setdefault(entry.key, []).insert(0, entry)
        self._recent[id(entry)] = entry
        evicted = []
        while len(self._recent) > self.limit:
            _, old = self._recent.popitem(last=False)
            entries = self._by_key[old.key]
            entries.remove(old)
            if not entries:
                del self._by_key[old.key]
            evicted.append(old)
        self.evictions += len(evicted)
        return evicted

    def clear(self) -> None:
        self._by_key.clear()
        self._recent.clear()
        self.latest = None
