"""Tracing: run the user's unchanged eager code on *lazy* tensors and write down every op as a Node.

While a :class:`Tracer` is installed (``toynet.mode.tracer``), :func:`toynet.dynamic.tensor.apply` hands
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

**The call's arguments** may be any nesting of tuples, lists and dicts around tensors; :func:`flatten` and
:func:`unflatten` turn it into a flat list and back (a plan works on flat lists of arrays), and
:func:`signature` is what a plan is compiled for. Python ``int`` and ``float`` arguments are inputs too: a
new value runs the same plan (``build`` sees a 0-d lazy tensor, *weak* as the number is in Eager mode).

:func:`trace_step` traces one whole step: the call's inputs, ``build`` (forward, and the backward ops
``loss.backward()`` appends), its outputs, then the optimizer's updates, which the caller records through
:meth:`Tracer.update` and :meth:`Tracer.scope`. ``nn.Graph`` calls it, then optimises the traced graph
(toynet.static.passes) and compiles it into a plan (toynet.static.compile).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Callable, Iterator, NamedTuple

from .. import backend, mode
from ..dynamic import autograd
from ..dynamic.autograd import GradFn
from ..dynamic.tensor import _SCALARS, Tensor  # (NumPy's scalar types: Eager mode makes them numbers)
from ..ops import OPS, ShapeError
from .ir import BACKWARD, CONSTANT, FORWARD, INPUT, OP, OPTIMIZER, STATE, Graph, Node

#: How to make a number argument a constant of the plan (said wherever build() needs its value).
STATIC_HINT = ("Declare that argument static, e.g. self.config.set_static_arguments('name') in the graph's "
               "__init__: each value then compiles a plan of its own.")


class StateInfo(NamedTuple):
    """An eager tensor the graph reads and may update: its name in ``graph.state_dict()`` and its kind."""

    name: str
    kind: str
    tensor: Tensor


@dataclass(eq=False)
class Tracer:
    """Builds a :class:`Graph` from the ops applied while it is installed.

    ``states``: ``id(eager tensor) -> StateInfo`` for every parameter and buffer of the graph's modules;
    ``module_paths``: ``id(module) -> "model.features.0"``, to name ops by the module they ran in;
    ``allow_backward``: may ``build`` call ``loss.backward()`` (only a graph with an optimizer trains)?
    ``events`` records the graph's inputs and outputs and every module call, ``(kind, name, value)`` with
    kind ``"input"``, ``"output"``, ``"enter"`` or ``"exit"`` (``print(graph)`` shows them), and ``watch``, if
    given, is told of each event as it happens, and of each op node, ``("op", node.name, node)``.
    """

    graph: Graph
    states: dict[int, StateInfo]
    module_paths: dict[int, str]
    allow_backward: bool = False
    watch: Callable[[str, str, Any], None] | None = None
    events: list = field(default_factory=list)
    phase: str = FORWARD
    scopes: list = field(default_factory=list)      # (scope name, what made its ops if not the user's line)
    device: backend.Device | None = None            # where the graph runs: one device for every value
    state_tensors: dict[str, Tensor] = field(default_factory=dict)  # state name -> the eager tensor holding it
    lazy_of: dict[int, Tensor] = field(default_factory=dict)        # id(eager tensor) -> its lazy stand-in
    keep_alive: list = field(default_factory=list)                  # the eager tensors whose ids we hold
    state_name: dict[int, str] = field(default_factory=dict)        # id(eager state tensor) -> its name
    node_of_fn: dict[GradFn, Node] = field(default_factory=dict)    # record -> the forward node it differentiates
    grad_of: Node | None = None                                     # in backward: the node whose vjp runs
    numbers: dict[int, Any] = field(default_factory=dict)  # id(node) -> a Python number of its kind (weak values)
    op_count: int = 0                               # ops recorded so far (an op node's name ends with its number)
    loss_scale: Tensor | None = None                # AMP's loss scale S: backward differentiates S * loss

    # ------------------------------------------------------------------------------------- nodes

    @contextlib.contextmanager
    def scope(self, name: str, source: str | None = None) -> Iterator[None]:
        """Name the ops recorded inside the block after ``name`` (a module path, a parameter's name).
        ``source`` says what made them when the user's line would not (an optimizer's update rule: the
        user's line is only the call of the graph, the same for every update op)."""
        self.scopes.append((name, source))
        try:
            yield
        finally:
            self.scopes.pop()

    def add(self, node: Node) -> Node:
        """Append ``node`` to the graph (the graph makes its name unique); every value is on the graph's device."""
        if node.kind != OP and self.device is not None and node.device != self.device:
            what = {INPUT: "input", STATE: node.state_kind}.get(node.kind, "a tensor created outside the modules:")
            raise RuntimeError(
                f"nn.Graph {self.graph.name}: {what} {node.name} is on {node.device} but the graph runs on "
                f"{self.device}; a graph runs on one device: move its modules and inputs with .to(device) before "
                "calling it")
        self.device = self.device or node.device
        self.graph.add(node)
        if self.watch is not None and node.kind == OP:
            self.watch("op", node.name, node)
        for observer in mode.node_observers:
            observer(node, self.graph)
        return node

    def add_input(self, name: str, value: Tensor) -> Tensor:
        node = self.add(Node(name, INPUT, value.shape, value.dtype, value.device))
        self.graph.inputs.append(node)
        return Tensor.lazy(node)

    def add_number(self, name: str, value: int | float) -> Tensor:
        """A graph input that is a Python number on every call (an ``int`` or ``float`` argument)."""
        kind = "float" if isinstance(value, float) else "int"
        dtype = backend.float64 if kind == "float" else backend.int64
        node = self.add(Node(name, INPUT, (), dtype, self.device or backend.CPU, attrs={"number": kind}))
        self.graph.inputs.append(node)
        self.numbers[id(node)] = 1.0 if kind == "float" else 1
        return Tensor.lazy(node)

    def add_state(self, name: str, kind: str, tensor: Tensor) -> Tensor:
        """Make (once) the lazy stand-in of an eager state tensor."""
        if id(tensor) not in self.lazy_of:
            node = self.add(Node(name, STATE, tensor.shape, tensor.dtype, tensor.device, state_name=name,
                                 state_kind=kind, requires_grad=tensor.requires_grad))
            self.lazy_of[id(tensor)] = Tensor.lazy(node, requires_grad=tensor.requires_grad)
            self.state_tensors[name] = tensor    # (which keeps it alive: its id stays its own)
            self.state_name[id(tensor)] = name
        return self.lazy_of[id(tensor)]

    def lazy(self, x: Tensor) -> Tensor:
        """The lazy version of any tensor met while tracing."""
        if x.node is not None or id(x) in self.lazy_of:
            return x if x.node is not None else self.lazy_of[id(x)]
        if id(x) in self.states:
            return self.add_state(self.states[id(x)].name, self.states[id(x)].kind, x)
        # A "free" eager tensor (made in build() or captured from outside): its value is baked in.
        self.lazy_of[id(x)] = self.constant(x.array, x.device, f"FreeEagerTensor-{len(self.keep_alive)}")
        self.keep_alive.append(x)
        return self.lazy_of[id(x)]

    def constant(self, array: Any, device: backend.Device, name: str = "constant", scoped: bool = True) -> Tensor:
        """A constant node holding ``array``, named after the current scope (``model.0-constant``)."""
        scope = self.scopes[-1][0] if self.scopes else ""
        name = f"{scope}-{name}".lstrip("-") if scoped else name
        return Tensor.lazy(self.add(Node(name, CONSTANT, array.shape, backend.dtype_of(array), device, value=array,
                                         phase=self.phase, scope=scope)))

    # --------------------------------------------------------------------------------------- ops

    def apply(self, op: Any, inputs: tuple, attrs: dict) -> Tensor:
        """Record ``op(*inputs, **attrs)`` as a node; return the lazy result (called by tensor.apply). An op with
        a ``decompose`` rule is traced as that decomposition: its simpler ops are recorded in its place."""
        if op.decompose is not None:
            return op.decompose(*inputs, **attrs)
        # A NumPy array is a constant, a NumPy scalar a Python number, as in Eager mode (`scores / np.sqrt(d)`):
        # the plan's code and a saved graph hold plain numbers (attributes: made plain by the methods taking them).
        args = [self.lazy(x) if isinstance(x, Tensor) else x if type(x) in _PLAIN else self.operand(x) for x in inputs]
        if self.phase == BACKWARD and self.grad_of is not None:  # a backward node joins its forward op's module
            scope, source = self.grad_of.scope, f"grad of {self.grad_of.name}"
        else:
            scope, source = self.scopes[-1] if self.scopes else ("", None)
            source = source or user_source()
        weak = self.numbers and self._weak(op, args, attrs, source)
        try:
            shape, dtype = op.infer(*[self.numbers.get(id(a.node), a) if weak and isinstance(a, Tensor) else a
                                      for a in args], **attrs)
        except ShapeError as error:
            raise ShapeError(f"{error}\n  while tracing nn.Graph {self.graph.name}, at {source}") from None
        name, self.op_count = f"{scope}-{op.name}-{self.op_count}".lstrip("-"), self.op_count + 1
        device = attrs["device"] if op.changes_device else self.device or backend.CPU
        node = self.add(Node(name, OP, shape, dtype, device, op=op, attrs=attrs, phase=self.phase, scope=scope,
                             source=source, inputs=[a.node if isinstance(a, Tensor) else a for a in args]))
        if weak == "all" and not shape:  # computed from number inputs alone: a number too
            self.numbers[id(node)] = True if dtype is backend.bool_ else (1.0 if dtype.is_floating_point else 1)
        result = Tensor.lazy(node)
        if mode.grad_enabled and any(getattr(a, "requires_grad", False) for a in args):
            result.requires_grad = True
            result.grad_fn = GradFn(op, tuple(args), attrs, weakref.ref(result) if op.saves_output else None)
            self.node_of_fn[result.grad_fn] = node
        return result

    def operand(self, x: Any) -> Any:
        """An op's argument that is not a tensor: a NumPy array becomes a constant, NumPy scalars Python numbers."""
        if isinstance(x, backend.host.ndarray):
            return self.constant((self.device or backend.CPU).xp.asarray(x), self.device or backend.CPU, "NumPyArray")
        return plain_numbers(x)

    def _weak(self, op: Any, args: list, attrs: dict, source: str) -> str:
        """Whether some (``"some"``) or all (``"all"``) of the op's tensor arguments are Python numbers of the call
        (``""``: none): their shape rule then sees numbers, which stay weak in NumPy's promotion."""
        for key, value in attrs.items():
            if isinstance(value, Tensor) and value.node is not None and id(value.node) in self.numbers:
                raise TypeError(f"nn.Graph {self.graph.name}: {op.name}() needs its {key}= as a Python number "
                                f"when the graph compiles, at {source}; it got a number argument of the call, "
                                f"an input of the graph (a 0-d tensor in build(), fed on every call). {STATIC_HINT}")
        tensors = [id(a.node) in self.numbers for a in args if isinstance(a, Tensor)]
        return "all" if tensors and all(tensors) else "some" if any(tensors) else ""

    def full_like(self, t: Tensor, value: Any, dtype: Any) -> Tensor:
        """A constant of ``t``'s shape filled with ``value`` (the seed of ``loss.backward()``)."""
        dtype = backend.to_dtype(dtype) if dtype else t.dtype
        return self.constant(t.device.xp.full(tuple(t.shape), value, dtype=dtype.array_dtype), t.device)

    def detach(self, t: Tensor) -> Tensor:
        return Tensor.lazy(t.node)

    # ------------------------------------------------------------------------------------ states

    def assign(self, target: Tensor, value: Any) -> Tensor:
        """``target.copy_(value)`` while tracing: a state's new value is recorded as its update; any other
        tensor simply stands for ``value`` from now on."""
        # Asked of the eager tensor, not of its stand-in's node: after a first update the stand-in holds
        # the new value, and a second copy_ (a module called twice) must still update the state.
        if id(target) in self.state_name:
            self.update(target, value)
        else:
            lazy_target = self.lazy(target)
            lazy_target.node = self._fit(value, lazy_target).node
        return target

    def update(self, state: Tensor | str, value: Any) -> None:
        """Record the value ``state`` (an eager state tensor, or its state name) holds after the step: the
        plan writes it back into the eager tensor after every run. Later reads in this trace see it."""
        tensor = self.state_tensors[state] if isinstance(state, str) else state
        value = self._fit(value, self.lazy(tensor))
        self.graph.updates[self.state_name[id(tensor)]] = value.node
        self.lazy_of[id(tensor)] = Tensor.lazy(value.node)

    def _fit(self, value: Any, like: Tensor) -> Tensor:
        """``value`` (a tensor or a number) as a lazy tensor of ``like``'s dtype and shape, as copy_ casts
        and broadcasts it."""
        if not isinstance(value, Tensor):
            value = like.device.xp.full(tuple(like.shape), value, dtype=like.dtype.array_dtype)
            return self.constant(value, like.device, scoped=False)
        value = self.lazy(value)
        if value.dtype is like.dtype and tuple(value.shape) == tuple(like.shape):
            return value
        previous, mode.grad_enabled = mode.grad_enabled, False
        try:
            value = value if value.dtype is like.dtype else value.to(like.dtype)
            return value if tuple(value.shape) == tuple(like.shape) else value.expand(*like.shape)
        finally:
            mode.grad_enabled = previous

    def gradients(self) -> dict[str, Tensor]:
        """State name -> lazy gradient, for every state that received one in backward."""
        return {self.states[id(t)].name: self.lazy_of[id(t)].grad for t in self.state_tensors.values()
                if id(t) in self.states and self.lazy_of[id(t)].grad is not None}

    # ----------------------------------------------------------------------- modules and backward

    def call_module(self, module: Any, args: tuple, kwargs: dict) -> Any:
        """``module(*args)`` inside build (``Module.__call__`` hands it over): its ops are named after it."""
        path = self.module_paths.get(id(module))
        if path is None:
            return module.forward(*args, **kwargs)
        self.event("enter", path, (module, args))
        with self.scope(path):
            result = module.forward(*args, **kwargs)
        self.event("exit", path, (module, result))
        return result

    def event(self, kind: str, name: str, value: Any) -> None:
        self.events.append((kind, name, value))
        if self.watch is not None:
            self.watch(kind, name, value)

    def _vjp_of(self, fn: GradFn) -> None:
        """Backward is about to run ``fn``'s vjp: its ops join the module of the forward op it differentiates."""
        self.grad_of = self.node_of_fn.get(fn)

    def backward(self, roots: list[Tensor], root_grads: list[Tensor], retain_graph: Any, create_graph: bool) -> None:
        """``loss.backward()`` inside build: run the autograd engine on lazy tensors (symbolic autodiff)."""
        if not self.allow_backward:
            raise RuntimeError(
                f"nn.Graph {self.graph.name}: backward() was called in build() but the graph has no optimizer "
                "(OneFlow: 'job has no TrainConf when adding loss logical blob name'). A graph trains only when "
                "you call self.add_optimizer(optimizer) in its __init__.")
        if retain_graph or create_graph:
            raise RuntimeError(f"nn.Graph donot accept '{'retain_graph' if retain_graph else 'create_graph'}' "
                               "argument in backward() at the moment.")
        if any(root.numel() != 1 for root in roots):
            raise RuntimeError(f"nn.Graph {self.graph.name}: backward() needs a scalar loss, got shape "
                               f"{tuple(roots[0].shape)}; reduce it with .sum() or .mean() first")
        previous, self.phase = self.phase, BACKWARD
        if self.loss_scale is not None:
            root_grads = [g * self.loss_scale for g in root_grads]
        try:
            autograd.run_backward(roots, root_grads, retain_graph=False, create_graph=False, on_vjp=self._vjp_of)
        finally:
            self.phase, self.grad_of = previous, None


# ---------------------------------------------------------------------------------------- one step


def trace_step(name: str, build: Callable, leaves: list, spec: Any, states: dict[int, StateInfo],
               module_paths: dict[int, str], *, updates: Callable[[Tracer], None] | None = None,
               watch: Callable[[str, str, Any], None] | None = None) -> tuple[Graph, Tracer]:
    """Trace one call of ``build`` into a new static graph named ``name``: its forward ops, the backward ops
    ``loss.backward()`` appends and, if ``updates`` is given, the optimizer's update ops.

    ``leaves`` and ``spec`` are the call's arguments, flattened by :func:`flatten_call`; ``states``,
    ``module_paths`` and ``watch`` are as for :class:`Tracer`. ``updates(tracer)`` records each state's new
    value after backward (with :meth:`Tracer.update`, under :meth:`Tracer.scope`); only a graph given one may
    call backward. Inputs are named ``_<name>-input_<i>``, outputs ``_<name>-output_<i>``.

    Returns the traced graph and the tracer (``tracer.state_tensors``: state name -> the eager tensor holding
    it between calls; ``tracer.events``: the inputs, outputs and module calls).
    """
    tracer = Tracer(Graph(name), states, module_paths, allow_backward=updates is not None, watch=watch)
    previous, mode.tracer = mode.tracer, tracer
    previous_grad, mode.grad_enabled = mode.grad_enabled, True
    try:
        args, kwargs = unflatten(spec, iter(graph_inputs(tracer, leaves, spec)))
        result = _run_build(build, args, kwargs, name)
        # Each tensor of build()'s result is a graph output; the spec rebuilds the result around them.
        outputs, tracer.graph.output_structure = flatten(result)
        for i, out in enumerate(o for o in outputs if isinstance(o, Tensor)):
            tracer.graph.outputs.append(tracer.lazy(out).node)
            tracer.event("output", f"_{name}-output_{i}", tracer.lazy(out))
        if updates is not None:
            tracer.phase, mode.grad_enabled = OPTIMIZER, False
            updates(tracer)
    finally:
        mode.tracer, mode.grad_enabled = previous, previous_grad
    return tracer.graph, tracer


def _run_build(build: Callable, args: Any, kwargs: Any, name: str) -> Any:
    """``build(*args, **kwargs)``; a shape error raised by Python code in it says where, as an op's own does."""
    try:
        return build(*args, **kwargs)
    except ShapeError as error:
        if "while tracing nn.Graph" in str(error):
            raise
        deepest = error.__traceback__
        while deepest.tb_next is not None:
            deepest = deepest.tb_next
        raise ShapeError(f"{error}\n  while tracing nn.Graph {name}, at {user_source(frame=deepest.tb_frame)}"
                         ) from None


# ------------------------------------------------------------------------------- the call's arguments

#: A tensor's place in a spec; :func:`unflatten` fills it with the next tensor it is given.
TENSOR = ("T",)
#: A Python number that is a graph input; :func:`unflatten` fills it like a tensor.
FLOAT, INT = ("N", "float"), ("N", "int")


def flatten(value: Any, numbers: bool = False) -> tuple[list, Any]:
    """Every leaf of a nesting of tuples, lists and dicts (tensors and other values, in order), and the
    spec that :func:`unflatten` rebuilds the nesting from. ``numbers``: Python ``int`` and ``float`` leaves
    are inputs (``FLOAT``/``INT``) and NumPy arrays and scalars become tensors, as in a graph's call."""
    return (leaves := []), _walk(value, leaves, numbers)   # (_walk fills the list made first)


def _walk(value: Any, leaves: list, numbers: bool) -> Any:
    if numbers and isinstance(value, (backend.host.ndarray, backend.host.number)):
        value = _host_tensor(value)
    if isinstance(value, Tensor) or (numbers and type(value) in (int, float)):
        leaves.append(value)
        return TENSOR if isinstance(value, Tensor) else FLOAT if type(value) is float else INT
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple([_walk(v, leaves, numbers) for v in value]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, _walk(v, leaves, numbers)) for k, v in value.items()]))
    leaves.append(value)
    return ("V", value)


def unflatten(spec: Any, tensors: Iterator[Tensor]) -> Any:
    """The nesting :func:`flatten` described, with the next of ``tensors`` in each tensor's (or number's)
    place. (A spec read back from a graph saved by an older toynet may hold lists where this one has tuples.)"""
    kind = spec[0]
    if kind in ("T", "N", "V"):   # a leaf: a tensor's (or number's) place, or a value kept in the spec
        return spec[1] if kind == "V" else next(tensors)
    if kind == "dict":
        return {k: unflatten(s, tensors) for k, s in spec[1]}
    items = [unflatten(s, tensors) for s in spec[1]]
    return tuple(items) if kind == "tuple" else items


def flatten_call(args: tuple, kwargs: dict, static: frozenset = frozenset(), names: tuple = ()) -> tuple[list, Any]:
    """:func:`flatten` for the arguments of a graph's call (see the module's docstring): numbers are inputs,
    except inside the arguments named in ``static`` (``names``: build's parameter names, to name positional
    arguments)."""
    if not static:
        return flatten((args, kwargs), numbers=True)
    leaves: list = []
    positional = tuple([_walk(a, leaves, i >= len(names) or names[i] not in static) for i, a in enumerate(args)])
    keywords = tuple([(k, _walk(v, leaves, k not in static)) for k, v in kwargs.items()])
    return leaves, ("tuple", (("tuple", positional), ("dict", keywords)))


_PLAIN = (int, float, bool, type(None))


def plain_numbers(value: Any) -> Any:
    """NumPy scalars (``np.float32(0.5)``, also inside tuples and lists) made Python numbers."""
    if type(value) in (tuple, list):
        return type(value)(map(plain_numbers, value))
    return value.item() if isinstance(value, _SCALARS) else value


def _host_tensor(value: Any) -> Tensor:
    array = backend.host.asarray(value)
    try:
        backend.dtype_of(array)
    except TypeError as error:
        raise TypeError(f"a graph was called with a NumPy array of shape {array.shape} and dtype {array.dtype}, "
                        f"which cannot be a graph input: {error}") from None
    return Tensor.wrap(array, backend.CPU)


def leaf_kinds(spec: Any) -> list:
    """The spec's leaves in order: ``TENSOR``, ``FLOAT``/``INT`` or the ``("V", value)`` of each."""
    if spec[0] in ("T", "N", "V"):
        return [spec]
    return [kind for s in spec[1] for kind in leaf_kinds(s[1] if spec[0] == "dict" else s)]


def signature(leaves: list, spec: Any) -> Any:
    """What a compiled plan depends on: the nesting, every other value (not the numbers that are inputs), each
    tensor's shape, dtype, device (and a global one's layout). The same signature reuses the plan."""
    key = spec, tuple((t.shape, t.dtype, t.device, getattr(t, "_layout", 0)) for t in leaves if isinstance(t, Tensor))
    try:
        hash(key)
    except TypeError:  # an unhashable value among the arguments (a NumPy array, a set): compare its repr
        key = (repr(spec), key[1])
    return key


def graph_inputs(tracer: Tracer, leaves: list, spec: Any) -> list[Tensor]:
    """While tracing a call, a graph input ``_<graph>-input_<i>`` for each tensor of the call and each number
    the spec makes an input, in order. Other values reach ``build`` as they are; those that are not plain
    numbers, strings or None are numbered too, and recorded as inputs (OneFlow warns of them)."""
    lazy, plain = [], (type(None), int, float, str, bool)
    named = [(v, kind) for v, kind in zip(leaves, leaf_kinds(spec)) if kind[0] != "V" or not isinstance(v, plain)]
    for index, (value, kind) in enumerate(named):
        name = f"_{tracer.graph.name}-input_{index}"
        if isinstance(value, Tensor) and value.is_lazy:
            raise RuntimeError("a lazy tensor was passed into an nn.Graph call; graphs cannot be nested")
        if kind[0] != "V":
            lazy.append(tracer.add_number(name, value) if kind[0] == "N" else tracer.add_input(name, value))
        tracer.event("input", name, lazy[-1] if kind[0] == "N" else value)
    return lazy


# --------------------------------------------------------------------------------- the user's line

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_source(frame: FrameType | None = None) -> str:
    """Where the user's code called into toynet (from ``frame``, by default the caller's): the innermost frame
    outside the toynet package, as ``file.py:12 in forward: y = self.fc(x)``."""
    frame = frame or sys._getframe(1)
    while frame is not None and _inside_toynet(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ""
    filename = frame.f_code.co_filename   # (a notebook cell's code lives in a temporary file named by a hash)
    where = "cell" if "ipykernel_" in filename else os.path.basename(filename)
    return f"{where}:{frame.f_lineno} in {frame.f_code.co_name}: {linecache.getline(filename, frame.f_lineno).strip()}"


def _inside_toynet(filename: str) -> bool:
    return filename.startswith("<frozen") or os.path.abspath(filename).startswith(PACKAGE_DIR + os.sep)


__all__ = ["OPS", "StateInfo", "Tracer", "flatten", "flatten_call", "signature", "trace_step", "unflatten",
           "user_source"]
