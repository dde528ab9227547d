"""Tracing: run the user's unchanged eager code on *lazy* tensors and write down every op as a Node.

While a :class:`Tracer` is installed (``toynet.mode.set_tracer``), :func:`toynet.dynamic.tensor.apply` hands
every op to :meth:`Tracer.apply` instead of computing it. The tracer

* turns the op's inputs into lazy tensors: graph inputs are already lazy; an eager tensor that is
  registered state (a parameter, a buffer, an optimizer slot) becomes a *state* node, read fresh on
  every call; any other eager tensor becomes a *constant* node (OneFlow's "free eager tensor");
* asks the op's shape rule for the output's shape and dtype (no data is computed);
* appends a Node named ``<module path>-<op>-<k>`` and returns a lazy tensor that holds it;
* records a ``GradFn`` exactly as Eager mode does, so ``loss.backward()`` inside ``build`` runs the
  ordinary autograd engine, whose vjp rules, applied to lazy tensors, append the backward nodes.
  That is all symbolic differentiation is here.

Python control flow runs once, at trace time: ``if`` and ``for`` over *shapes* are fine, but code that
needs a tensor's *values* (``.item()``, ``if loss > 0:``) cannot be traced and says why.

A Python number the graph takes as an input (see :mod:`toynet.static.arguments`) is a 0-d lazy tensor
in ``build`` that stays *weak*, as the number is in Eager mode: its shape rules see a Python number
(``float32 * 0.5`` is float32, not float64), the plan is handed the number itself, and ops on such
numbers alone give numbers again.

:func:`trace_step` traces one whole step with a Tracer: the call's inputs, ``build`` (forward, and the
backward ops ``loss.backward()`` appends), its outputs, then the optimizer's updates, which the caller
records through :meth:`Tracer.update` and :meth:`Tracer.scope`. ``nn.Graph`` calls it, then optimises
the traced graph (toynet.static.passes) and compiles it into a plan (toynet.static.fast.compile).
"""

from __future__ import annotations

import contextlib
import weakref
import linecache
import os
import sys
from types import FrameType
from typing import Any, Callable, Iterator

from .. import backend, mode
from ..dynamic import autograd
from ..dynamic.autograd import GradFn
from ..dynamic.tensor import Tensor
from ..ops import OPS, ShapeError
from .arguments import flatten, graph_inputs, unflatten
from .ir import BACKWARD, CONSTANT, FORWARD, INPUT, OP, OPTIMIZER, STATE, Graph, Node

#: How to make a number argument a constant of the plan (said wherever build() needs its value).
STATIC_HINT = ("Declare that argument static, e.g. self.config.set_static_arguments('name') in the graph's "
               "__init__: each value then compiles a plan of its own.")

class StateInfo:
    """An eager tensor the graph reads and may update: its name in ``graph.state_dict()`` and its kind."""

    __slots__ = ("name", "kind", "tensor")

    def __init__(self, name: str, kind: str, tensor: Tensor):
        self.name, self.kind, self.tensor = name, kind, tensor


class Tracer:
    """Builds a :class:`Graph` from ops applied while it is installed.

    Args:
        graph: the graph to fill.
        states: ``id(eager tensor) -> StateInfo`` for every parameter and buffer of the graph's modules.
        module_paths: ``id(module) -> "model.features.0"``, to name ops by the module they ran in.
        on_module_call: told ``(phase, path, module, values)`` with phase "enter"/"exit" (for print(graph)).
        log_op: told about every op node added (``graph.debug(2)`` prints them).
        allow_backward: may ``build`` call ``loss.backward()`` (only a graph with an optimizer trains)?
    """

    def __init__(self, graph: Graph, states: dict[int, StateInfo], module_paths: dict[int, str],
                 on_module_call: Callable | None = None, log_op: Callable | None = None,
                 allow_backward: bool = False):
        self.graph = graph
        self.states = states
        self.module_paths = module_paths
        self.on_module_call = on_module_call
        self.log_op = log_op
        self.allow_backward = allow_backward
        self.phase = FORWARD
        self.scopes: list[str] = []
        self._sources: list[str] = []                 # what made the ops of a scope, when not the user's line
        self.op_count = 0
        self.device: backend.Device | None = None
        self._lazy_of: dict[int, Tensor] = {}        # id(eager tensor) -> its lazy stand-in
        self._keep_alive: list[Tensor] = []           # eager tensors we hold ids of
        #: State name -> the eager tensor that holds its value between calls.
        self.state_tensors: dict[str, Tensor] = {}
        self._state_name: dict[int, str] = {}        # id(eager state tensor) -> its state name
        self._node_of_fn: dict[int, Node] = {}   # id(GradFn) -> the forward node it differentiates
        self._grad_of: Node | None = None         # while backward runs: the node whose vjp is emitting
        #: id(node) -> a Python number of its kind, for the values that are Python numbers when the plan
        #: runs (the call's number inputs and what ops make of them alone): shape rules see that number.
        self._numbers: dict[int, Any] = {}
        self.loss_scale: Tensor | None = None   # AMP's loss scale S: backward differentiates S * loss

    # ------------------------------------------------------------------------------ nodes

    @property
    def current_scope(self) -> str:
        """The innermost scope: ops are named ``<scope>-<op>-<k>`` after it."""
        return self.scopes[-1] if self.scopes else ""

    @contextlib.contextmanager
    def scope(self, name: str, source: str | None = None) -> Iterator[None]:
        """Name the ops recorded inside the block after ``name`` (a module path, a parameter's name).

        ``source`` says what made them when the user's line would not (an optimizer's update rule: the
        user's line is only the call of the graph, the same for every update op)."""
        self.scopes.append(name)
        self._sources.append(source)
        try:
            yield
        finally:
            self.scopes.pop()
            self._sources.pop()

    def _check_device(self, device: backend.Device, what: str) -> None:
        if self.device is None:
            self.device = device
        elif device != self.device:
            raise RuntimeError(
                f"nn.Graph {self.graph.name}: {what} is on {device} but the graph runs on {self.device}; "
                "a graph runs on one device: move its modules and inputs with .to(device) before calling it")

    def add_input(self, name: str, value: Tensor) -> Tensor:
        self._check_device(value.device, f"input {name}")
        node = self.graph.add(Node(name, INPUT, value.shape, value.dtype, value.device))
        self.graph.inputs.append(node)
        self._notify(node)
        return Tensor.lazy(node)

    def add_number(self, name: str, value: int | float) -> Tensor:
        """A graph input that is a Python number on every call (an ``int`` or ``float`` argument)."""
        kind = "float" if isinstance(value, float) else "int"
        dtype = backend.float64 if kind == "float" else backend.int64
        node = self.graph.add(Node(name, INPUT, (), dtype, self.device or backend.CPU, attrs={"number": kind}))
        self.graph.inputs.append(node)
        self._numbers[id(node)] = 1.0 if kind == "float" else 1
        self._notify(node)
        return Tensor.lazy(node)

    def add_state(self, name: str, kind: str, tensor: Tensor) -> Tensor:
        """Make (once) the lazy stand-in of an eager state tensor."""
        lazy = self._lazy_of.get(id(tensor))
        if lazy is None:
            self._check_device(tensor.device, f"{kind} {name}")
            node = self.graph.add(Node(name, STATE, tensor.shape, tensor.dtype, tensor.device,
                                       state_name=name, state_kind=kind, requires_grad=tensor.requires_grad))
            lazy = Tensor.lazy(node, requires_grad=tensor.requires_grad)
            self._lazy_of[id(tensor)] = lazy
            self._keep_alive.append(tensor)
            self.state_tensors[name] = tensor
            self._state_name[id(tensor)] = name
            self._notify(node)
        return lazy

    def lazy(self, x: Tensor) -> Tensor:
        """The lazy version of any tensor met while tracing."""
        if x.node is not None:
            return x
        found = self._lazy_of.get(id(x))
        if found is not None:
            return found
        info = self.states.get(id(x))
        if info is not None:
            return self.add_state(info.name, info.kind, x)
        # A "free" eager tensor (made in build() or captured from outside): its value is baked in.
        self._check_device(x.device, "a tensor created outside the graph's modules")
        base = f"{self.current_scope}-FreeEagerTensor" if self.current_scope else "FreeEagerTensor"
        node = self.graph.add(Node(f"{base}-{len(self._keep_alive)}", CONSTANT, x.shape, x.dtype, x.device,
                                   value=x.array, phase=self.phase, scope=self.current_scope))
        lazy = Tensor.lazy(node)
        self._lazy_of[id(x)] = lazy
        self._keep_alive.append(x)
        self._notify(node)
        return lazy

    def constant(self, array: Any, device: backend.Device, name: str = "constant") -> Tensor:
        node = self.graph.add(Node(name, CONSTANT, array.shape, backend.dtype_of(array), device, value=array,
                                   phase=self.phase, scope=self.current_scope))
        self._notify(node)
        return Tensor.lazy(node)

    def _notify(self, node: Node) -> None:
        for observer in mode.node_observers:
            observer(node, self.graph)

    # ------------------------------------------------------------------------------ ops

    def apply(self, op: Any, inputs: tuple, attrs: dict) -> Tensor:
        """Record ``op(*inputs, **attrs)`` as a node; return the lazy result (called by tensor.apply).

        An op with a ``decompose`` rule is traced as that decomposition: its simpler ops are recorded,
        and differentiated, in its place.
        """
        if op.decompose is not None:
            return op.decompose(*inputs, **attrs)
        args = []
        requires_grad = False
        for x in inputs:
            if isinstance(x, Tensor):
                x = self.lazy(x)
                requires_grad = requires_grad or x.requires_grad
            args.append(x)
        if self.phase == BACKWARD and self._grad_of is not None:
            # A backward node belongs to the module of the forward op it differentiates.
            scope, source = self._grad_of.scope, f"grad of {self._grad_of.name}"
        else:
            scope, source = self.current_scope, (self._sources[-1] if self._sources else None) or user_source()
        infer_args, weak = (self._weak_args(op, args, attrs, source) if self._numbers else (args, False))
        try:
            shape, dtype = op.infer(*infer_args, **attrs)
        except ShapeError as error:
            raise ShapeError(f"{error}\n  while tracing nn.Graph {self.graph.name}, at {source}") from None
        device = attrs["device"] if op.changes_device else (self.device or backend.CPU)
        base = f"{scope}-{op.name}-{self.op_count}" if scope else f"{op.name}-{self.op_count}"
        self.op_count += 1
        node = self.graph.add(Node(base, OP, shape, dtype, device, op=op,
                                   inputs=tuple(a.node if isinstance(a, Tensor) else a for a in args),
                                   attrs=attrs, phase=self.phase, scope=scope, source=source))
        if weak and not shape:
            self._numbers[id(node)] = True if dtype is backend.bool_ else (1.0 if dtype.is_floating_point else 1)
        result = Tensor.lazy(node)
        if requires_grad and mode.grad_enabled:
            result.requires_grad = True
            result.grad_fn = GradFn(op, tuple(args), attrs, weakref.ref(result) if op.saves_output else None)
            self._node_of_fn[id(result.grad_fn)] = node
        if self.log_op is not None:
            self.log_op(node)
        self._notify(node)
        return result

    def _weak_args(self, op: Any, args: list, attrs: dict, source: str) -> tuple[list, bool]:
        """The arguments the shape rule sees (a Python number for each number value), and whether every
        tensor argument is such a number (then so is the result)."""
        for key, value in attrs.items():
            if isinstance(value, Tensor) and value.node is not None and id(value.node) in self._numbers:
                raise TypeError(f"nn.Graph {self.graph.name}: {op.name}() needs its {key}= as a Python number "
                                f"when the graph compiles, at {source}; it got a number argument of the call, "
                                f"an input of the graph (a 0-d tensor in build(), fed on every call). {STATIC_HINT}")
        tensors = [a for a in args if isinstance(a, Tensor)]
        if not any(id(a.node) in self._numbers for a in tensors):
            return args, False
        infer_args = [self._numbers.get(id(a.node), a) if isinstance(a, Tensor) else a for a in args]
        return infer_args, all(id(a.node) in self._numbers for a in tensors)

    def full_like(self, t: Tensor, value: Any, dtype: Any) -> Tensor:
        dtype = backend.to_dtype(dtype) if dtype is not None else t.dtype
        device = t.device
        array = device.xp.full(tuple(t.shape), value, dtype=dtype.array_dtype)
        return self.constant(array, device, name=f"{self.current_scope}-constant" if self.current_scope else "constant")

    def detach(self, t: Tensor) -> Tensor:
        return Tensor.lazy(t.node)

    def assign(self, target: Tensor, value: Any) -> Tensor:
        """``target.copy_(value)`` while tracing: a state's new value is recorded as its update; any other
        tensor simply stands for ``value`` from now on."""
        lazy_target = self.lazy(target)
        # Asked of the eager tensor, not of its stand-in's node: after a first update the stand-in holds
        # the new value, and a second copy_ (a module called twice) must still update the state.
        if id(target) in self._state_name:
            self.update(target, value)
        else:
            lazy_target.node = self._fit(value, lazy_target).node
        return target

    def update(self, state: Tensor | str, value: Any) -> None:
        """Record the value ``state`` (an eager state tensor, or its state name) holds after the step: the
        plan writes it back into the eager tensor after every run. Later reads in this trace see it."""
        tensor = self.state_tensors[state] if isinstance(state, str) else state
        value = self._fit(value, self.lazy(tensor))
        self.graph.updates[self._state_name[id(tensor)]] = value.node
        self._lazy_of[id(tensor)] = Tensor.lazy(value.node)

    def _fit(self, value: Any, like: Tensor) -> Tensor:
        """``value`` (a tensor or a number) as a lazy tensor of ``like``'s dtype and shape, as copy_ casts
        and broadcasts it."""
        if not isinstance(value, Tensor):
            value = self.constant(like.device.xp.full(tuple(like.shape), value, dtype=like.dtype.array_dtype),
                                  like.device)
        value = self.lazy(value)
        with autograd.no_grad():
            if value.dtype is not like.dtype:
                value = value.to(like.dtype)
            if tuple(value.shape) != tuple(like.shape):
                value = value.expand(*like.shape)
        return value

    # ------------------------------------------------------------------------------ modules

    def call_module(self, module: Any, args: tuple, kwargs: dict) -> Any:
        path = self.module_paths.get(id(module))
        if path is None:
            return module.forward(*args, **kwargs)
        if self.on_module_call is not None:
            self.on_module_call("enter", path, module, args)
        with self.scope(path):
            result = module.forward(*args, **kwargs)
        if self.on_module_call is not None:
            self.on_module_call("exit", path, module, result)
        return result

    # ------------------------------------------------------------------------------ backward

    def backward(self, roots: list[Tensor], root_grads: list[Tensor], retain_graph: Any, create_graph: bool) -> None:
        """``loss.backward()`` inside build: run the autograd engine on lazy tensors (symbolic autodiff)."""
        if not self.allow_backward:
            raise RuntimeError(
                f"nn.Graph {self.graph.name}: backward() was called in build() but the graph has no optimizer "
                "(OneFlow: 'job has no TrainConf when adding loss logical blob name'). A graph trains only when "
                "you call self.add_optimizer(optimizer) in its __init__.")
        if retain_graph:
            raise RuntimeError("nn.Graph donot accept 'retain_graph' argument in backward() at the moment.")
        if create_graph:
            raise RuntimeError("nn.Graph donot accept 'create_graph' argument in backward() at the moment.")
        for root in roots:
            if root.numel() != 1:
                raise RuntimeError(f"nn.Graph {self.graph.name}: backward() needs a scalar loss, got shape "
                                   f"{tuple(root.shape)}; reduce it with .sum() or .mean() first")
        previous, self.phase = self.phase, BACKWARD
        try:
            if self.loss_scale is not None:
                root_grads = [g * self.loss_scale for g in root_grads]
            autograd.run_backward(roots, root_grads, retain_graph=False, create_graph=False,
                                  on_vjp=self._on_vjp)
        finally:
            self.phase = previous
            self._grad_of = None

    def _on_vjp(self, fn: GradFn) -> None:
        self._grad_of = self._node_of_fn.get(id(fn))

    def gradients(self) -> dict[str, Tensor]:
        """State name -> lazy gradient, for every state that received one in backward."""
        grads = {}
        for eager in self._keep_alive:
            info = self.states.get(id(eager))
            lazy = self._lazy_of.get(id(eager))
            if info is not None and lazy is not None and lazy.grad is not None:
                grads[info.name] = lazy.grad
        return grads


# ------------------------------------------------------------------------------------ one step


def trace_step(name: str, build: Callable, leaves: list, spec: Any, states: dict[int, StateInfo],
               module_paths: dict[int, str], *, updates: Callable[[Tracer], None] | None = None,
               on_input: Callable | None = None, on_output: Callable | None = None,
               on_module_call: Callable | None = None, log_op: Callable | None = None) -> tuple[Graph, dict]:
    """Trace one call of ``build`` into a new static graph named ``name``: its forward ops, the backward
    ops ``loss.backward()`` appends and, if ``updates`` is given, the optimizer's update ops.

    Args:
        name: the graph's name; inputs are named ``_<name>-input_<i>``, outputs ``_<name>-output_<i>``.
        build: the step, called with the call's arguments, tensors replaced by lazy graph inputs.
        leaves: the call's arguments, flattened by :func:`toynet.static.arguments.flatten`...
        spec: ...and their nesting.
        states: as for :class:`Tracer`.
        module_paths: as for :class:`Tracer`.
        updates: ``updates(tracer)`` records each state's new value after backward (with
            :meth:`Tracer.update`, under :meth:`Tracer.scope`); only a graph given one may call backward.
        on_input: told ``(name, value)`` for each graph input (and each odd value OneFlow warns of).
        on_output: told ``(name, lazy tensor)`` for each graph output.
        on_module_call: as for :class:`Tracer`.
        log_op: as for :class:`Tracer`.

    Returns:
        The traced graph and its state: state name -> the eager tensor holding it between calls.
    """
    graph = Graph(name)
    tracer = Tracer(graph, states, module_paths, on_module_call=on_module_call, log_op=log_op,
                    allow_backward=updates is not None)
    previous = mode.set_tracer(tracer)
    try:
        args, kwargs = unflatten(spec, iter(graph_inputs(tracer, leaves, spec, on_input)))
        with autograd.enable_grad():
            try:
                result = build(*args, **kwargs)
            except ShapeError as error:   # raised by Python code in build (an op's own are said where already)
                if "while tracing nn.Graph" in str(error):
                    raise
                deepest = error.__traceback__
                while deepest.tb_next is not None:
                    deepest = deepest.tb_next
                raise ShapeError(f"{error}\n  while tracing nn.Graph {name}, at {user_source(frame=deepest.tb_frame)}"
                                 ) from None
        # Each tensor of build()'s result is a graph output; the spec rebuilds the result around them.
        outputs, graph.output_structure = flatten(result)
        for i, out in enumerate(o for o in outputs if isinstance(o, Tensor)):
            lazy = tracer.lazy(out)
            graph.outputs.append(lazy.node)
            if on_output is not None:
                on_output(f"_{name}-output_{i}", lazy)
        if updates is not None:
            tracer.phase = OPTIMIZER
            with autograd.no_grad():
                updates(tracer)
    finally:
        mode.set_tracer(previous)
    return graph, dict(tracer.state_tensors)


# --------------------------------------------------------------------------------- the user's line

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_source(max_frames: int = 1, frame: FrameType | None = None) -> str:
    """Where the user's code called into toynet (from ``frame``, by default the caller's): the innermost
    ``max_frames`` frames outside the toynet package, as ``file.py:12 in forward: y = self.fc(x)``."""
    frame = frame or sys._getframe(1)
    found = []
    while frame is not None and len(found) < max_frames:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(PACKAGE_DIR + os.sep) and not filename.startswith("<frozen"):
            line = linecache.getline(filename, frame.f_lineno).strip()
            # A notebook cell's code lives in a temporary file named by a hash: call it what it is.
            where = "cell" if "ipykernel_" in filename else os.path.basename(filename)
            found.append(f"{where}:{frame.f_lineno} in {frame.f_code.co_name}: {line}")
        frame = frame.f_back
    return " <- ".join(found)


__all__ = ["Tracer", "StateInfo", "trace_step", "user_source", "OPS"]
