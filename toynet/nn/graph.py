"""``nn.Graph``: OneFlow's Graph mode API on toynet's static design.

Subclass it, assign modules (and optionally ``add_optimizer``), describe one step in ``build``, then
call the object::

    class LinearTrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = LinearTrainGraph()
    loss = graph(xx, y)          # first call: trace, differentiate, optimise, compile; then run

This module is the facade: OneFlow's API, config and printouts over toynet's static engine. A call
reads as the engine's stages, each in its own module::

    __call__     flatten the arguments; find the plan compiled for their signature  (static.trace)
                 whose guard still holds                                            (graph_plans)                  
    _compile     trace_step: build on lazy tensors, loss.backward(), the updates   (static.trace, graph_train)
                 global tensors: each op's SBP signature, boxing inserted  (distributed.graph_lowering)
                 optimize: the passes rewrite the traced graph                      (static.passes)
                 compile_graph: the optimised graph becomes generated code          (static.compile)
    _run         plan.run on the input and state arrays: exactly ``plan.source``;
                 rebuild build()'s result around its output arrays                  (static.trace)

The first call with given input shapes compiles; new input shapes compile again (OneFlow fails), and
so does a call after something the plan took for granted changed (a parameter replaced, ``model.eval()``,
``weight_decay``: a *guard* failed, ``graph.debug(1)`` says which); ``graph.config.cache_limit`` plans
are kept. Python numbers passed to the graph are inputs of the plan (``graph(x, 0.5)`` then ``graph(x,
0.7)`` run one plan) unless static: ``self.config.set_static_arguments("steps")``. A training step is all
or nothing: an error or a Ctrl-C leaves every state as it was, or applies the step whole.

``graph.model`` is the very module you assigned (no proxy objects): ``graph.model.state_dict()`` is its own.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict
from typing import Any

from .. import backend, mode
from ..distributed.global_tensor import GlobalTensor
from ..distributed.graph_lowering import lower as lower_global
from ..dynamic.tensor import Tensor
from ..optim.optimizer import Optimizer
from ..static import compile as compiler
from ..static import passes
from ..static.serialize import bake_numbers, save_graph
from ..static.trace import STATIC_HINT, StateInfo, flatten_call, leaf_kinds, signature, trace_step, unflatten
from . import graph_plans
from .graph_amp import GradScalerMixin, GraphModule, scaled_build  # noqa: F401 (nn.graph.GraphModule)
from .graph_config import GraphConfig, build_parameters
from .graph_plans import CompiledGraph, PlanCache, compile_options
from .graph_print import DebugPrinter, GraphViews, Record, describe_inputs, eviction_warning
from .graph_state import GraphStateMixin
from .graph_trace import trace_function
from .graph_train import OptimizerBinding, scheduled_commit, trace_updates
from .module import Module


class Graph(GraphViews, GraphStateMixin, GradScalerMixin):
    """Base class of user graphs. Subclasses call ``super().__init__()`` and define ``build``.

    Unlike OneFlow, which wraps assigned modules in proxies, ``graph.model`` is the very module you
    assigned: ``graph.model.state_dict()`` works and is that module's own state dict (without the training
    state ``graph.state_dict()`` adds).
    """

    _child_init_cnt: dict[str, int] = {}

    def __init__(self) -> None:
        cls = type(self).__name__
        index = Graph._child_init_cnt.get(cls, 0)
        Graph._child_init_cnt[cls] = index + 1
        d = self.__dict__
        d["_name"] = f"{cls}_{index}"
        d["config"] = GraphConfig()
        d["_modules"] = OrderedDict()
        d["_optimizers"] = []
        d["_compiled"] = PlanCache()
        d["_last"] = None
        d["_debug"] = DebugPrinter(self)
        d["_train_step"] = None
        d["_grad_scaler"] = None
        d["_call_lock"] = threading.RLock()   # calls take turns: a plan computes in buffers it owns (docs/trust.md)
        d["_graph_initialized"] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        build = cls.__dict__.get("build")
        if build is not None:
            def guarded_build(self, *args, __build=build, **kw):
                if mode.tracer is None:
                    raise RuntimeError(
                        f"{type(self).__name__}.build() was called directly. build() describes the graph and "
                        "is traced by the graph itself: call the graph object instead, e.g. graph(x).")
                return __build(self, *args, **kw)
            guarded_build.__doc__ = build.__doc__
            guarded_build.__wrapped__ = build
            cls.build = guarded_build

    # ------------------------------------------------------------------------------ attributes

    def _check_initialized(self) -> None:
        if not self.__dict__.get("_graph_initialized"):
            raise AttributeError("Base class nn.Graph has not been initialized, please call super().__init__() "
                                 "in subclass of nn.Graph before assigning any attribute.")

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, (Module, Optimizer, Tensor)):
            self._check_initialized()
        if isinstance(value, Module):
            if not name:
                raise KeyError('module name can\'t be empty string ""')
            if "." in name:
                raise KeyError(f'module name can\'t contain ".", got: {name}')
            if name in self.__dict__:
                raise KeyError(f"attribute '{name}' already exists")
            self._modules[name] = value
        elif isinstance(value, Optimizer):
            raise AttributeError(f"'{type(self).__name__}' nn.Graph is not allowed to set Optimizer attribute named "
                                 f"'{name}'. Please use add_optimizer(...) instead.")
        elif isinstance(value, Tensor):
            raise AttributeError(f"'{type(self).__name__}' nn.Graph is not allowed to set Tensor attribute named "
                                 f"'{name}'. Please use nn.Module to hold the tensor, then add the nn.Module to "
                                 "nn.Graph.")
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            return modules[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    @property
    def name(self) -> str:
        return self._name

    @property
    def training(self) -> bool:
        return self.config.training

    @property
    def is_compiled(self) -> bool:
        return self._last is not None

    def build(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("nn.Graph.build() method must be overridden when subclassing the nn.Graph.")

    @staticmethod
    def trace(func: Any) -> "Graph":
        """Decorator: the graph object of a function (its arguments the inputs, its result the output)."""
        return trace_function(Graph, func)

    # ------------------------------------------------------------------------------ optimizers

    def add_optimizer(self, optim: Any, *, lr_sch: Any = None, is_sparse: bool = False) -> None:
        """Train with ``optim``: each call of the graph then runs one whole training step."""
        self._check_initialized()
        if optim is None:
            raise AssertionError("optimizer cannot be None")
        if not isinstance(optim, Optimizer):
            raise AssertionError("optimizer must be an instance of Optimizer")
        if lr_sch is not None and getattr(lr_sch, "optimizer", None) is not optim:
            raise AssertionError("lr_scheduler's optimizer must be the same optimizer in add_optimizer.")
        bound = {id(p) for b in self._optimizers for g in b.optimizer.param_groups for p in g["params"]}
        names = self._parameter_names()
        for group in optim.param_groups:
            for p in group["params"]:
                if id(p) in bound:
                    raise ValueError(f"<{names.get(id(p), 'parameter')}> is already bound to another optimizer.")
        self._optimizers.append(OptimizerBinding(optim, lr_sch))
        self.config.training = True
        self._forget_plans()  # they do not train with it

    def _forget_plans(self) -> None:
        """Drop every compiled plan (the next call compiles anew)."""
        self._compiled.clear()

    def _toynet_save_(self, path: Any) -> None:
        """``toynet.save(graph, dir)``: export the compiled forward graph (its numbers baked in: a deployed graph
        takes tensors only; a graph of global tensors: as one process would run it) and its state."""
        if self._last is None:
            raise RuntimeError("graph must be compiled first: call it once (e.g. on example inputs) before "
                               "toynet.save(graph, path)")
        traced = bake_numbers(getattr(self._last.traced, "deployable", self._last.traced), self._last.numbers)
        save_graph(path, traced, self._last.states, type(self).__name__)

    # ------------------------------------------------------------------------------ calling

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run one step: find (or compile) the plan for these arguments, then run it."""
        self._check_initialized()
        with self._call_lock:
            compiled, inputs = self._prepare(args, kwargs)
            self.__dict__["_last"] = compiled
            try:
                return self._run(compiled, inputs)
            except Exception as error:
                self._run_failed(error)
                raise

    def _run_failed(self, error: Exception) -> None:
        print(f"[ERROR](GRAPH:{self._name}:{type(self).__name__}) run got error: {type(error)} {error}")

    def _prepare(self, args: tuple, kwargs: dict) -> tuple[CompiledGraph, list]:
        """Flatten the call, find the plan compiled for its signature whose guard holds, or compile one."""
        static = self.config.static_arguments
        leaves, spec = flatten_call(args, kwargs, static, self._build_parameters() if static else ())
        key = (signature(leaves, spec), mode.fast)  # each path (lesson, fast) compiles plans of its own
        compiled, failures = (cache := self._compiled).lookup(key)
        if compiled is None:
            if failures:
                self._log(1, f"is compiling a new graph: the plan compiled for these inputs no longer fits, a guard "
                             f"failed: {'; '.join(failures)}.")
            elif cache:
                self._log(1, f"got a new input shape, is compiling a new graph. Inputs: {describe_inputs(leaves)}.")
            compiled = self._compile(leaves, spec, key, failures)
            for old in cache.add(compiled, self.config.cache_limit):
                self._log(1, f"keeps at most {cache.limit} compiled plans (graph.config.cache_limit): dropped the "
                             f"least recently used one, {old!r}.")
                if cache.evictions == 1:
                    warnings.warn(eviction_warning(self._name, cache.limit), RuntimeWarning, stacklevel=3)
        return compiled, compiled.inputs(leaves)

    def _log(self, level: int, *messages: str) -> None:
        """Debug messages of this graph (printed if ``graph.debug(level)`` or higher asked for them)."""
        for message in messages if self._debug.level >= level else ():
            self._debug.log(level, f"{self._debug.tag} {message}")

    def _build_parameters(self) -> tuple[str, ...]:
        """The names of build()'s parameters (to find the static arguments among positional ones)."""
        static = self.config.static_arguments
        known = self.__dict__.get("_build_names")
        if known is None or known[0] is not static:
            known = self.__dict__["_build_names"] = (static, build_parameters(type(self), static))
        return known[1]

    def _compile(self, leaves: list, spec: Any, key: Any, failures: list = ()) -> CompiledGraph:
        """Trace one step, optimise the traced graph, compile it into a plan (debug() prints each stage);
        ``failures``: why the plan compiled for ``key`` no longer fits (its guard's words), if it is why."""
        start, debug, record = time.perf_counter(), self._debug, Record([], {})
        self._log(0, "start building graph.")
        # A training graph's step ends with its optimizers' updates (toynet.nn.graph_train).
        updates = (lambda tracer: trace_updates(tracer, self)) if self._optimizers else None
        fed = [b.lr_tensors for b in self._optimizers]
        build = self.build if self._grad_scaler is None and not self.config.plan_settings else scaled_build(self)
        watch = debug.watcher(record.stacks) if debug.level >= 1 or debug.op_repr else None
        try:
            traced, tracer = trace_step(self._name, build, leaves, spec, *self._states_and_paths(), updates=updates,
                                        watch=watch)
        except Exception as error:
            print(f"[ERROR]{debug.tag} building graph got error.")
            if failures and hasattr(error, "add_note"):
                error.add_note(f"nn.Graph {self._name} was compiling again because {'; '.join(failures)}.")
            if any(kind[0] == "N" for kind in leaf_kinds(spec)) and hasattr(error, "add_note"):
                error.add_note(f"The call's Python numbers are inputs of the graph, 0-d tensors in build(): if "
                               f"build() needs one's value, that is why. {STATIC_HINT}")
            raise
        record.events.extend(tracer.events)
        if any(isinstance(t, GlobalTensor) for t in (*leaves, *tracer.state_tensors.values())):
            traced = lower_global(traced, leaves, tracer, self)  # SBP: each process's part
        if any(a is not b.lr_tensors for a, b in zip(fed, self._optimizers)):
            self._forget_plans()  # remade learning-rate inputs (another device): the other plans read the old
        compile_start = time.perf_counter()
        self._log(0, "end building graph.", f"building graph Done! Cost time: {round(compile_start - start, 2)}s.\n",
                  "start compiling plan and init graph runtime.")
        try:
            optimized, reports = passes.optimize(traced, self.config.disabled_passes, **compile_options(self),
                                                 on_pass=debug.pass_logger() if debug.level >= 1 else None)
            plan = compiler.compile_graph(optimized)
        except Exception:
            print(f"[ERROR]{debug.tag} building plan got error.")
            raise
        self._log(0, "end compiling plan and init graph rumtime.",
                  f"compiling plan Done! Cost time: {round(time.perf_counter() - compile_start, 2)}s.\n")
        guard = graph_plans.guard_graph(self, traced, tracer.state_tensors, plan.state_names)
        compiled = CompiledGraph(key, traced, optimized, reports, plan, tracer.state_tensors, record,
                                 time.perf_counter() - start, guard)
        # The plan's own commit is one C call with NumPy. With Python work in it (a scheduler's step, another
        # array module's setitem), the graph commits, with Ctrl-C held off (toynet.nn.graph_train).
        if plan.device is not backend.CPU or any(b.lr_scheduler is not None for b in self._optimizers):
            compiled.commit = scheduled_commit(self._optimizers)
        return compiled

    def _run(self, compiled: CompiledGraph, inputs: list) -> Any:
        """Feed the learning rates, run the plan on the call's and the states' arrays, rebuild build()'s result."""
        for binding in self._optimizers:
            binding.feed_learning_rates()
        outputs = compiled.plan.run(inputs, [t.array for t in compiled.state_tensors], compiled.commit)
        wrap = getattr(compiled.traced, "wrap_outputs", lambda xs: [Tensor.wrap(a, compiled.plan.device) for a in xs])
        return unflatten(compiled.traced.output_structure, iter(wrap(outputs)))  # (global tensors of a global graph)

    def _states_and_paths(self) -> tuple[dict[int, StateInfo], dict[int, str]]:
        """id -> StateInfo of every parameter and buffer of the graph's modules (what the plan reads), and
        id -> path (``model.features.0``) of every module, to name the ops traced inside it."""
        states, paths = {}, {}   # id -> StateInfo, id -> path
        for name, module in self._modules.items():
            for path, m in module.named_modules(prefix=name):
                paths.setdefault(id(m), path)
                for kind, registry in (("parameter", m._parameters), ("buffer", m._buffers)):
                    states.update({id(t): StateInfo(f"{path}.{key}", kind, t) for key, t in registry.items()
                                   if t is not None and id(t) not in states})
        return states, paths

    def _train_step_tensor(self, device: backend.Device) -> Tensor:
        """The step counter the plans increment (System-Train-TrainStep), on the graph's device."""
        old = self._train_step
        if old is None or old.device != device:
            if old is not None:
                self._forget_plans()  # they count on the old tensor
            count = device.xp.asarray([0] if old is None else old.numpy(), dtype=backend.int64.array_dtype)
            self.__dict__["_train_step"] = Tensor.wrap(count, device)
        return self._train_step
