"""nn.Graph on global tensors: the compiler picks each op's SBP signature and inserts the boxing.

Tracing a graph whose inputs or parameters are global records the *logical* program: every node has the
logical shape, as if one process computed everything. :func:`lower` then walks that graph once, in order,
doing ahead of time what the eager interpreter (:mod:`.interpreter`) does op by op at run time:

1. each input and state gets the layout of its tensor (placement, SBP, logical shape); the system values a
   training step keeps (its step counter, learning rates) are the same on every process: broadcast;
2. each op asks :mod:`.sbp_rules` for a signature; an input whose SBP is not the one the signature needs gets
   a **boxing node** in front of the op (``model.0-boxing-3``: one collective, :mod:`.boxing`);
3. the op's node takes the *local* shape of its output, and the attributes (or the local forward) the rule
   gives for computing one part;
4. a state's new value is boxed to the state's own SBP before the commit: a broadcast weight whose update
   came out partial (the gradient of data parallelism) gets its all-reduce here.

The result is an ordinary graph of local values, so every later pass and the compiler work on it unchanged
and the plan's code calls ``boxing(xp, v3, ...)`` like any other op, on every process in the same order. A
:class:`GlobalGraph` also keeps ``layouts``: node name -> :class:`Layout`, which ``print(graph)`` and
``graph.debug(2)`` show as ``sbp=(S(0))`` and ``placement=(...)`` and pictures draw.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..dynamic.tensor import Tensor
from ..ops._op import Op
from ..static.ir import CONSTANT, INPUT, OP, OPTIMIZER, STATE, Graph, Node
from . import boxing, comm
from .global_tensor import GlobalTensor, make
from .sbp import broadcast as B
from .sbp_rules import signature


@dataclass(frozen=True)
class Layout:
    """How one value of a global graph is laid out: over which processes, split how, of what whole shape."""

    placement: Any
    sbp: Any
    shape: tuple     # the logical shape (the node's own shape is this process's part)


@dataclass(eq=False, repr=False)
class GlobalGraph(Graph):
    """A lowered graph: local shapes, boxing nodes, and the layout of every value it traced."""

    layouts: dict = field(default_factory=dict)

    def wrap_outputs(self, arrays: list) -> list[Tensor]:
        """The plan's output arrays (local parts) as the global tensors they are parts of."""
        out = []
        for node, array in zip(self.outputs, arrays):
            layout = self.layouts.get(node.name)
            out.append(make(array, node.device, layout.placement, layout.sbp, layout.shape) if layout else
                       Tensor.wrap(array, node.device))
        return out


class Boxing(Op):
    """Turn this process's part of a value from one SBP into another (one collective, or a local step)."""

    name = "boxing"

    def forward(self, xp: Any, a: Any, src: Any = None, dst: Any = None, shape: tuple = ()) -> Any:
        return boxing.convert(xp, a, src, dst, shape)

    def describe(self, src: Any = None, dst: Any = None, shape: tuple = ()) -> str:
        return f"boxing[{src.short}->{dst.short}: {boxing.PATHS[boxing.kind(src), boxing.kind(dst)]}]"


BOXING = Boxing()


class _Stand:
    """What an SBP rule reads of an input: its logical shape and its SBP (sbp_rules.sbp_of reads ``_sbp``)."""

    __slots__ = ("_sbp", "ndim", "shape")

    def __init__(self, layout: Layout):
        self.shape, self._sbp, self.ndim = layout.shape, layout.sbp, len(layout.shape)


def has_global(leaves: list, states: dict) -> bool:
    return any(isinstance(t, GlobalTensor) for t in (*leaves, *states.values()))


def lower(graph: Graph, leaves: list, states: dict[str, Tensor]) -> Graph:
    """``graph`` (traced on logical shapes) lowered to this process's part, if any of its inputs or states is
    global; else ``graph`` itself. ``leaves``: the call's flattened arguments; ``states``: state name -> tensor."""
    tensors = [t for t in leaves if isinstance(t, Tensor)]
    if not has_global(tensors, states):
        return graph
    placement = next(t.placement for t in (*tensors, *states.values()) if isinstance(t, GlobalTensor))
    copied = graph.copy()
    lowered = GlobalGraph(**{f: getattr(copied, f) for f in Graph.__dataclass_fields__})
    lowering = _Lowering(lowered, placement)
    for node, t in zip([n for n in lowered.inputs if not n.attrs.get("number")], tensors):
        lowering.source(node, t, "input")
    lowering.run(states)
    return lowered


class _Lowering:
    def __init__(self, graph: GlobalGraph, placement: Any):
        self.graph, self.placement, self.layouts = graph, placement, graph.layouts
        self.nodes: list[Node] = []

    def source(self, node: Node, t: Tensor | None, what: str) -> None:
        """The layout of an input, state or constant: its tensor's if global, else broadcast."""
        if isinstance(t, GlobalTensor):
            if t.placement != self.placement:
                raise RuntimeError(f"nn.Graph {self.graph.name}: {what} {node.name} is on {t.placement}, other "
                                   f"values on {self.placement}; put them on one placement with to_global")
            self.layouts[node.name] = Layout(t.placement, t._sbp, tuple(t.shape))
            node.shape = tuple(t.to_local().shape)
        elif node.kind == STATE and node.state_kind in ("parameter", "buffer"):
            raise RuntimeError(f"nn.Graph {self.graph.name}: the {node.state_kind} {node.state_name} is a local "
                               f"tensor but other values are global (on {self.placement}); make the module global "
                               f"too, e.g. model.to_global(placement=..., sbp=toynet.sbp.broadcast)")
        elif node.kind == INPUT:
            raise RuntimeError(f"nn.Graph {self.graph.name}: input {node.name} is a local tensor of shape "
                               f"{tuple(node.shape)} but other values are global (on {self.placement}); global and "
                               "local tensors do not mix: pass x.to_global(placement=..., sbp=...)")
        else:    # a constant, the step counter, a learning rate: the same value on every process
            self.layouts[node.name] = Layout(self.placement, B, tuple(node.shape))

    def run(self, states: dict[str, Tensor]) -> None:
        for node in self.graph.nodes:
            if node.kind == STATE:
                self.source(node, states.get(node.state_name), node.state_kind)
            elif node.kind == CONSTANT:
                self.source(node, None, "constant")
            elif node.kind == OP:
                self.op(node)
            self.nodes.append(node)
        for name, value in list(self.graph.updates.items()):   # a new value is laid out as its state
            state = self.layouts[self.graph.state(name).name]
            self.graph.updates[name] = self.boxed(value, state.sbp, OPTIMIZER)
        self.graph.nodes = self.nodes

    def op(self, node: Node) -> None:
        if node.op.changes_device:
            raise RuntimeError(f"nn.Graph {self.graph.name}: {node.name} moves a global value to another device; "
                               f"a global tensor's device comes from its placement ({self.placement})")
        args = [_Stand(self.layouts[x.name]) if isinstance(x, Node) else x for x in node.inputs]
        sig = signature(node.op, tuple(args), node.attrs)
        node.inputs = tuple(self.boxed(x, need, node.phase) if isinstance(x, Node) else x
                            for x, need in zip(node.inputs, sig.inputs))
        if sig.attrs:
            node.attrs = {**node.attrs, **sig.attrs}
        if sig.forward is not None or (node.op.random and sig.output == B):
            node.op = _local_op(node.op, sig.forward)
        self.layouts[node.name] = Layout(self.placement, sig.output, tuple(node.shape))
        node.shape = boxing.local_shape(tuple(node.shape), sig.output)

    def boxed(self, x: Node, need: Any, phase: str) -> Node:
        """``x`` laid out as ``need``: ``x`` itself, or a new boxing node reading it (added to the graph)."""
        have = self.layouts[x.name]
        if need is None or have.sbp == need:
            return x
        name = f"{x.scope}-boxing-{len(self.nodes)}".lstrip("-")
        box = self.graph.add(Node(name, OP, boxing.local_shape(have.shape, need), x.dtype, x.device, op=BOXING,
                                  inputs=(x,), attrs={"src": have.sbp, "dst": need, "shape": have.shape},
                                  phase=phase, scope=x.scope, source=f"boxing of {x.name}"))
        self.graph.nodes.pop()      # (add() appended it; it runs just before its reader)
        self.nodes.append(box)
        self.layouts[box.name] = Layout(have.placement, need, have.shape)
        return box


def _local_op(op: Op, forward: Any) -> Op:
    """``op`` computing one process's part: with the rule's local forward, and a random op's numbers drawn by
    the first process and sent to all (as the eager interpreter does), so that every process agrees."""
    local = copy.copy(op)
    run = forward if forward is not None else op.forward

    def forward_here(xp: Any, *args: Any, **attrs: Any) -> Any:
        out = xp.asarray(run(xp, *args, **({} if forward is not None else attrs)))
        return xp.asarray(comm.broadcast(out, root=0)) if op.random else out
    local.forward, local.elementwise, local.supports_out = forward_here, False, False
    return local
