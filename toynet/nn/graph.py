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

The first call with given input shapes *compiles*: ``build`` runs once on lazy tensors
(toynet.static.trace), ``loss.backward()`` appends the backward nodes, the optimizer appends its update
nodes, the passes optimise the graph (toynet.static.passes) and the compiler turns it into a plan
(toynet.static.compile). Every call runs the plan. A call with new input shapes compiles again (cached
per shape) instead of failing as OneFlow does.

``graph.model`` is the very module you assigned (toynet needs no proxy objects), so
``graph.model.state_dict()`` works and gives the module's own state dict.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from .. import autograd, backend, mode
from ..mode import set_tracer
from ..optim.optimizer import Optimizer
from ..static.arguments import flatten_output, rebuild_output, signature, tensors_in
from ..static.compile import Plan
from ..static.ir import Graph as StaticGraph
from ..static.passes import PASS_NAMES, optimize
from ..static.serialize import save_graph
from ..static.trace import StateInfo, Tracer
from ..tensor import Tensor
from .graph_debug import DebugPrinter
from .graph_outline import OutlineRecorder, build_outline, tensor_entry, value_entry
from .graph_state import GraphStateMixin
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


class OptimizerBinding:
    """An optimizer added to a graph, its learning-rate scheduler, and the 0-d tensors that feed the
    current learning rate of each parameter group into the compiled plan."""

    def __init__(self, optimizer: Any, lr_scheduler: Any = None):
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.lr_tensors: list[Tensor] = []
        self._fed: list = []   # the learning rates last copied into lr_tensors

    def feed_learning_rates(self) -> None:
        """Copy each group's current ``lr`` (a scheduler may have changed it) into the plan's input."""
        for i, (group, tensor) in enumerate(zip(self.optimizer.param_groups, self.lr_tensors)):
            if self._fed[i] != group["lr"]:
                tensor.array[...] = group["lr"]
                self._fed[i] = group["lr"]


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
        save_graph(self, path)

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
            key = signature(args, kwargs)
            compiled = self._compiled.get(key)
            if compiled is None:
                if self._compiled:
                    self._debug.log(1, f"{self._debug.tag} got a new input shape, is compiling a new graph.")
                compiled = self._compile(args, kwargs, key)
                self._compiled[key] = compiled
            inputs = [t.array for t in tensors_in((args, kwargs))]
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
        very same arrays (a training loop over fixed data): then nothing about the inputs can have changed."""
        last = self.__dict__.get("_last_call")
        if last is None or kwargs or len(args) != len(last[1]):
            return None
        compiled, last_args, arrays = last
        for a, b, array in zip(args, last_args, arrays):
            if a is not b or a.array is not array:
                return None
        return compiled, arrays

    def _run(self, compiled: CompiledGraph, inputs: list) -> Any:
        for binding in self._optimizers:
            binding.feed_learning_rates()
        outputs = compiled.plan.run(inputs, [t.array for t in compiled.state_tensors])
        device = compiled.plan.device
        structure = compiled.traced.output_structure
        if structure == ("T",):  # build() returned one tensor: the common case, without the tree walk
            result = Tensor.wrap(outputs[0], device)
        else:
            result = rebuild_output(structure, iter([Tensor.wrap(a, device) for a in outputs]))
        for binding in self._optimizers:
            if binding.lr_scheduler is not None:
                binding.lr_scheduler.step()
        return result

    def _states(self) -> dict[int, StateInfo]:
        states: dict[int, StateInfo] = {}
        for name, module in self._modules.items():
            for pname, p in module.named_parameters(prefix=name):
                states.setdefault(id(p), StateInfo(pname, "parameter", p))
            for bname, b in module.named_buffers(prefix=name):
                states.setdefault(id(b), StateInfo(bname, "buffer", b))
        return states

    def _compile(self, args: tuple, kwargs: dict, key: Any) -> CompiledGraph:
        start = time.perf_counter()
        debug = self._debug
        debug.log(0, f"{debug.tag} start building graph.")
        graph = StaticGraph(self._name)
        record = OutlineRecorder(self._name)
        module_paths = {}
        for name, module in self._modules.items():
            for path, m in module.named_modules(prefix=name):
                module_paths.setdefault(id(m), path)
        tracer = Tracer(graph, self._states(), module_paths, on_module_call=debug.module_call_logger(record),
                        log_op=debug.op_logger())
        tracer.allow_backward = bool(self._optimizers)
        previous = set_tracer(tracer)
        try:
            lazy_args, lazy_kwargs = _to_lazy((args, kwargs), tracer, f"_{self._name}-input", record.graph_inputs)
            for entry in record.graph_inputs:
                debug.log(1, entry.header())
            with autograd.enable_grad():
                result = self.build(*lazy_args, **lazy_kwargs)
            flat_out, structure = flatten_output(result)
            graph.output_structure = structure
            for i, out in enumerate(flat_out):
                lazy = tracer.lazy(out)
                graph.outputs.append(lazy.node)
                entry = record.io_entries("OUTPUT", f"_{self._name}", [lazy])[0]
                entry.name = f"_{self._name}-output_{i}"
                record.graph_outputs.append(entry)
                debug.log(1, entry.header())
            if self._optimizers:
                self._trace_optimizers(tracer)
        except Exception:
            print(f"[ERROR]{debug.tag} building graph got error.")
            raise
        finally:
            set_tracer(previous)
        debug.log(0, f"{debug.tag} end building graph.")
        debug.log(0, f"{debug.tag} building graph Done! Cost time: {round(time.perf_counter() - start, 2)}s.\n")
        compile_start = time.perf_counter()
        debug.log(0, f"{debug.tag} start compiling plan and init graph runtime.")
        try:
            optimized, reports = optimize(graph, self.config.disabled_passes, on_pass=debug.pass_logger())
            plan = Plan(optimized)
        except Exception:
            print(f"[ERROR]{debug.tag} building plan got error.")
            raise
        debug.log(0, f"{debug.tag} end compiling plan and init graph rumtime.")
        debug.log(0, f"{debug.tag} compiling plan Done! Cost time: "
                     f"{round(time.perf_counter() - compile_start, 2)}s.\n")
        return CompiledGraph(key, graph, optimized, reports, plan, dict(tracer.state_tensors), record,
                             time.perf_counter() - start)

    def _trace_optimizers(self, tracer: Tracer) -> None:
        """Append the optimizers' update nodes (and the train-step counter) to the traced graph."""
        device = tracer.device or backend.CPU
        grads = tracer.gradients()
        names = self._parameter_names()
        tracer.begin_optimizer()
        with autograd.no_grad():
            with tracer.scope("System-Train-TrainStep"):
                step = tracer.add_state("System-Train-TrainStep", "system", self._train_step_tensor(device))
                tracer.update("System-Train-TrainStep", step + 1)
            for i, binding in enumerate(self._optimizers):
                optimizer = binding.optimizer
                if len(binding.lr_tensors) != len(optimizer.param_groups) or (
                        binding.lr_tensors and binding.lr_tensors[0].device != device):
                    binding.lr_tensors = [Tensor(float(g["lr"]), dtype=backend.float32, device=device)
                                          for g in optimizer.param_groups]
                    binding._fed = [None] * len(optimizer.param_groups)
                for g_index, group in enumerate(optimizer.param_groups):
                    lr = tracer.add_state(f"System-Train-LearningRate-{i}-{g_index}", "system",
                                          binding.lr_tensors[g_index])
                    for p in group["params"]:
                        name = names.get(id(p))
                        if name is None:
                            raise ValueError(
                                f"Parameter of shape {tuple(p.shape)} is not in the corresponding nn.Graph/"
                                "nn.Module. Please make sure you call the module's to(..) method first, then "
                                "add the module's parameters into an optimizer.")
                        grad = grads.get(name)
                        if grad is None:
                            continue  # not used by the loss: no gradient, no update (as in Eager mode)
                        state = optimizer.state.get(p)
                        if state is None:
                            state = optimizer.state[p] = optimizer.init_state(p)
                        slots = optimizer.slot_names
                        lazy_state = {k: tracer.add_state(f"{name}-{slots.get(k, k)}", "optimizer", v)
                                      for k, v in state.items()}
                        with tracer.scope(name):  # update ops are named after their parameter
                            new_param, new_state = optimizer.update(tracer.lazy(p), grad, lazy_state, group, lr)
                            tracer.update(p, new_param)
                            for k, v in new_state.items():
                                tracer.update(state[k], v)

    def _train_step_tensor(self, device: backend.Device) -> Tensor:
        if self._train_step is None or self._train_step.device != device:
            self.__dict__["_train_step"] = Tensor([0], dtype=backend.int64, device=device)
        return self._train_step


# ---------------------------------------------------------------------------------------- helpers


def _to_lazy(value: Any, tracer: Tracer, prefix: str, entries: list) -> Any:
    """Replace each tensor of the call's arguments by a graph input (named ``_G_0-input_<i>``)."""
    if isinstance(value, Tensor):
        name = f"{prefix}_{len(entries)}"
        entries.append(tensor_entry("INPUT", name, value))
        if value.is_lazy:
            raise RuntimeError("a lazy tensor was passed into an nn.Graph call; graphs cannot be nested")
        return tracer.add_input(name, value)
    if isinstance(value, tuple):
        return tuple(_to_lazy(v, tracer, prefix, entries) for v in value)
    if isinstance(value, list):
        return [_to_lazy(v, tracer, prefix, entries) for v in value]
    if isinstance(value, dict):
        return {k: _to_lazy(v, tracer, prefix, entries) for k, v in value.items()}
    if value is not None and not isinstance(value, (int, float, str, bool)):
        entries.append(value_entry("INPUT", f"{prefix}_{len(entries)}", value))
    return value
