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

    __call__     flatten the arguments; find the plan compiled for their signature  (static.arguments)
    _compile     trace_step: build on lazy tensors, loss.backward(), the updates   (static.trace, graph_train)
                 optimize: the passes rewrite the traced graph                      (static.passes)
                 Plan: the optimised graph becomes generated code                   (static.compile)
    _run         plan.run on the input and state arrays; rebuild build()'s result   (static.arguments)

So the first call with given input shapes compiles and every call runs the plan. A call with new input
shapes compiles again (cached per signature) instead of failing as OneFlow does.

``graph.model`` is the very module you assigned (toynet needs no proxy objects), so
``graph.model.state_dict()`` works and gives the module's own state dict.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from .. import backend, mode
from ..optim.optimizer import Optimizer
from ..static.arguments import TENSOR, flatten, signature, unflatten
from ..static.compile import Plan
from ..static.ir import Graph as StaticGraph
from ..static.passes import PASS_NAMES, optimize
from ..static.serialize import save_graph
from ..static.trace import StateInfo, trace_step
from ..tensor import Tensor
from .graph_debug import DebugPrinter
from .graph_outline import OutlineRecorder, build_outline
from .graph_state import GraphStateMixin
from .graph_train import OptimizerBinding, trace_updates
from .module import Module


class GraphConfig:
    """Settings of one graph. ``training`` is True once an optimizer has been added."""

    def __init__(self) -> None:
        self.training = False
        self.disabled_passes: set[str] = set()

    def enable_pass(self, name: str, enabled: bool = True) -> None:
        """Turn one optimisation pass off (or back on) for graphs compiled from now on."""
        if name not in PASS_NAMES:
            raise ValueError(f"unknown pass {name!r}; the passes are {', '.join(PASS_NAMES)}")
        if enabled:
            self.disabled_passes.discard(name)
        else:
            self.disabled_passes.add(name)

    def __repr__(self) -> str:
        return f"GraphConfig(training={self.training}, )"


class CompiledGraph:
    """Everything one compilation produced, for one input signature."""

    def __init__(self, key: Any, traced: StaticGraph, optimized: StaticGraph, reports: list, plan: Plan,
                 states: dict[str, Tensor], record: OutlineRecorder, seconds: float):
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


class Graph(GraphStateMixin):
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
        d["_compiled"] = {}
        d["_last"] = None
        d["_debug"] = DebugPrinter(self)
        d["_train_step"] = None
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

    def _parameter_names(self) -> dict[int, str]:
        names = {}
        for name, module in self._modules.items():
            for pname, p in module.named_parameters(prefix=name):
                names.setdefault(id(p), pname)
        return names

    def _toynet_save_(self, path: Any) -> None:
        """``toynet.save(graph, dir)``: export the compiled forward graph and its state for deployment."""
        if self._last is None:
            raise RuntimeError("graph must be compiled first: call it once (e.g. on example inputs) before "
                               "toynet.save(graph, path)")
        save_graph(path, self._last.traced, self._last.states, type(self).__name__)

    # ------------------------------------------------------------------------------ debug

    def debug(self, v_level: int = 0, *, ranks: Any = None, max_py_stack_depth: int = 2,
              only_user_py_stack: bool = True, op_repr_with_py_stack: bool = False) -> None:
        """Print what happens while the graph compiles: 0 stages and timings, 1 each module's inputs,
        parameters and outputs, 2 each op (name, inputs, device, shapes) and each pass's changes,
        3 each op's source line and each pass's graph before and after. -1 turns it off."""
        if not -1 <= v_level <= 3:
            raise AssertionError(f"The min verbose debug info level is -1, the max is 3, got {v_level}.")
        self._debug.level = v_level

    def __repr__(self) -> str:
        return self.outline().render()

    def outline(self):
        """The tagged tree ``print(graph)`` shows (see toynet.nn.graph_outline)."""
        record = self._last.record if self._last is not None else None
        return build_outline(self._name, type(self).__name__, self.training, self._modules, record)

    # ------------------------------------------------------------------------------ compiled views

    @property
    def ir(self) -> StaticGraph:
        """The optimised static graph of the last compilation."""
        return self._require_compiled().optimized

    @property
    def traced_ir(self) -> StaticGraph:
        """The static graph as traced (forward, backward and optimizer nodes), before any pass."""
        return self._require_compiled().traced

    @property
    def passes(self) -> list:
        """What each optimisation pass did in the last compilation (``print(r.details())`` for each)."""
        return self._require_compiled().reports

    @property
    def plan(self) -> Plan:
        """The compiled plan; ``graph.plan.source`` is the generated code."""
        return self._require_compiled().plan

    def _require_compiled(self) -> CompiledGraph:
        if self._last is None:
            raise RuntimeError(f"[ERROR](GRAPH:{self._name}:{type(self).__name__}) has not been compiled yet; "
                               "call the graph once to trigger its compilation.")
        return self._last

    # ------------------------------------------------------------------------------ calling

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_initialized()
        same = self._same_call(args, kwargs)
        if same is not None:
            compiled, inputs = same
        else:
            leaves, spec = flatten((args, kwargs))  # the one walk over the call's nested arguments
            key = signature(leaves, spec)
            compiled = self._compiled.get(key)
            if compiled is None:
                if self._compiled:
                    self._debug.log(1, f"{self._debug.tag} got a new input shape, is compiling a new graph.")
                compiled = self._compiled[key] = self._compile(leaves, spec, key)
            inputs = [t.array for t in leaves if isinstance(t, Tensor)]
            flat = not kwargs and all(type(a) is Tensor for a in args)
            self.__dict__["_last_call"] = (compiled, args, inputs) if flat else None
        self.__dict__["_last"] = compiled
        try:
            return self._run(compiled, inputs)
        except Exception as error:
            print(f"[ERROR]{self._debug.tag} run got error: {type(error)} {error}")
            raise

    def _same_call(self, args: tuple, kwargs: dict) -> "tuple[CompiledGraph, list] | None":
        """The previous call's plan and input arrays if this call passes the very same tensors holding the
        very same arrays (a training loop over fixed data): then nothing about the inputs can have changed,
        and the call skips flattening and the signature."""
        last = self.__dict__.get("_last_call")
        if last is None or kwargs or len(args) != len(last[1]):
            return None
        compiled, last_args, arrays = last
        for a, b, array in zip(args, last_args, arrays):
            if a is not b or a.array is not array:
                return None
        return compiled, arrays

    def _compile(self, leaves: list, spec: Any, key: Any) -> CompiledGraph:
        """Trace one step, optimise the traced graph, compile it into a plan (debug() prints each stage)."""
        start = time.perf_counter()
        debug, record = self._debug, OutlineRecorder(self._name)
        debug.log(0, f"{debug.tag} start building graph.")
        # A training graph's step ends with its optimizers' updates (toynet.nn.graph_train).
        updates = ((lambda tracer: trace_updates(tracer, self._optimizers, self._train_step_tensor))
                   if self._optimizers else None)
        try:
            traced, states = trace_step(self._name, self.build, leaves, spec, self._states(), self._module_paths(),
                                        updates=updates, **debug.trace_hooks(record))
        except Exception:
            print(f"[ERROR]{debug.tag} building graph got error.")
            raise
        debug.log(0, f"{debug.tag} end building graph.")
        debug.log(0, f"{debug.tag} building graph Done! Cost time: {round(time.perf_counter() - start, 2)}s.\n")
        compile_start = time.perf_counter()
        debug.log(0, f"{debug.tag} start compiling plan and init graph runtime.")
        try:
            optimized, reports = optimize(traced, self.config.disabled_passes, on_pass=debug.pass_logger())
            plan = Plan(optimized)
        except Exception:
            print(f"[ERROR]{debug.tag} building plan got error.")
            raise
        debug.log(0, f"{debug.tag} end compiling plan and init graph rumtime.")
        debug.log(0, f"{debug.tag} compiling plan Done! Cost time: "
                     f"{round(time.perf_counter() - compile_start, 2)}s.\n")
        return CompiledGraph(key, traced, optimized, reports, plan, states, record, time.perf_counter() - start)

    def _run(self, compiled: CompiledGraph, inputs: list) -> Any:
        for binding in self._optimizers:
            binding.feed_learning_rates()
        outputs = compiled.plan.run(inputs, [t.array for t in compiled.state_tensors])
        device = compiled.plan.device
        spec = compiled.traced.output_structure
        if spec == TENSOR:  # build() returned one tensor: the common case, without the tree walk
            result = Tensor.wrap(outputs[0], device)
        else:
            result = unflatten(spec, iter([Tensor.wrap(a, device) for a in outputs]))
        for binding in self._optimizers:
            if binding.lr_scheduler is not None:
                binding.lr_scheduler.step()
        return result

    def _states(self) -> dict[int, StateInfo]:
        """id -> StateInfo of every parameter and buffer of the graph's modules (what the plan reads)."""
        states: dict[int, StateInfo] = {}
        for name, module in self._modules.items():
            for pname, p in module.named_parameters(prefix=name):
                states.setdefault(id(p), StateInfo(pname, "parameter", p))
            for bname, b in module.named_buffers(prefix=name):
                states.setdefault(id(b), StateInfo(bname, "buffer", b))
        return states

    def _module_paths(self) -> dict[int, str]:
        """id -> path (``model.features.0``) of every module, to name the ops traced inside it."""
        paths: dict[int, str] = {}
        for name, module in self._modules.items():
            for path, m in module.named_modules(prefix=name):
                paths.setdefault(id(m), path)
        return paths

    def _train_step_tensor(self, device: backend.Device) -> Tensor:
        """The step counter the plans increment (System-Train-TrainStep), on the graph's device."""
        if self._train_step is None or self._train_step.device != device:
            self.__dict__["_train_step"] = Tensor([0], dtype=backend.int64, device=device)
        return self._train_step
