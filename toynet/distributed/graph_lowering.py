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
import re
from dataclasses import dataclass, field
from typing import Any

from ..dynamic.tensor import Tensor
from ..ops._op import Op
from ..static.ir import CONSTANT, INPUT, OP, OPTIMIZER, STATE, Graph, Node
from . import boxing, comm
from .global_tensor import TO_GLOBAL_BACK, TO_GLOBAL_LAZY, GlobalTensor, make, relayout_
from .sbp import broadcast as B
from .sbp import partial_sum as P
from .sbp import broadcast_on, short, split
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
    logical: Any = None          # the graph as traced, before lowering: what one process would run

    @property
    def deployable(self) -> Graph:
        """What ``toynet.save(graph, dir)`` exports: the logical graph (the whole values, one device), from a
        run of one process. With more, every process would write the same directory: refused, saying why."""
        if comm.world_size() > 1:
            raise RuntimeError(f"toynet.save(graph, dir) of nn.Graph {self.name}, a graph of global tensors, in a run "
                               f"of {comm.world_size()} processes: every process would write the same directory. Save "
                               "its state instead (toynet.save(toynet.utils.global_view.to_local(graph.state_dict()), "
                               "a directory per rank)), or export it from a run of one process")
        return self.logical

    def wrap_outputs(self, arrays: list) -> list[Tensor]:
        """The plan's output arrays (local parts) as the global tensors they are parts of."""
        out = []
        for node, array in zip(self.outputs, arrays):
            layout = self.layouts.get(node.name)
            out.append(make(array, node.device, layout.placement, layout.sbp, layout.shape)
                       if layout is not None and layout.placement is not None else Tensor.wrap(array, node.device))
        return out


class Boxing(Op):
    """Turn this process's part of a value from one SBP into another (one collective, or a local step), among
    the processes ``ranks`` of its placement."""

    name = "boxing"

    def forward(self, xp: Any, a: Any, src: Any = None, dst: Any = None, shape: tuple = (), ranks: tuple = ()) -> Any:
        return boxing.convert(xp, a, src, dst, shape, ranks=ranks)

    def describe(self, src: Any = None, dst: Any = None, shape: tuple = (), ranks: tuple = ()) -> str:
        if isinstance(dst, tuple):
            how = "2-D: rows, then columns"
        else:
            how = boxing.PATHS.get((boxing.kind(src), boxing.kind(dst)), "a copy") if src != dst else "a copy"
        return f"boxing[{short(src)}->{short(dst)}: {how}]"


class Move(Op):
    """Move a value from the processes of one placement to those of another (a pipeline stage's output to the
    next stage): :func:`toynet.distributed.boxing.move`."""

    name = "move"
    #: Never merged: a process of the target placement may see two moves of equal inputs (the gradients of
    #: two micro-batches, computed from the same values) where the sending processes see two different ones;
    #: merging them here alone would leave the senders waiting for a collective that never comes.
    random = True

    def forward(self, xp: Any, a: Any, src: tuple = (), src_sbp: Any = None, dst: tuple = (), dst_sbp: Any = None,
                shape: tuple = (), dtype: Any = None) -> Any:
        return boxing.move(xp, a, src, src_sbp, dst, dst_sbp, shape, dtype)

    def describe(self, src: tuple = (), src_sbp: Any = None, dst: tuple = (), dst_sbp: Any = None, **_: Any) -> str:
        return f"move[ranks {list(src)} {short(src_sbp)} -> ranks {list(dst)} {short(dst_sbp)}]"


class Elsewhere(Op):
    """An op of a placement this process is not one of: it holds no part of the value, an empty array."""

    name = "elsewhere"
    #: Never merged or folded: two of them stand for different values (computed elsewhere), and merging them
    #: here would merge the collectives that read them here but not on the processes that compute them.
    random = True

    def forward(self, xp: Any, *args: Any, op: str = "", dtype: Any = None) -> Any:
        return xp.empty((0,), dtype=dtype)

    def describe(self, op: str = "", dtype: Any = None) -> str:
        return f"elsewhere[{op}]"


BOXING, MOVE, ELSEWHERE = Boxing(), Move(), Elsewhere()


class _Stand:
    """What an SBP rule reads of an input: its logical shape, its SBP and placement (as a GlobalTensor has)."""

    __slots__ = ("_placement", "_sbp", "ndim", "shape")

    def __init__(self, layout: Layout, placement: Any):
        self.shape, self._sbp, self.ndim, self._placement = layout.shape, layout.sbp, len(layout.shape), placement


def has_global(leaves: list, states: dict) -> bool:
    return any(isinstance(t, GlobalTensor) for t in (*leaves, *states.values()))


def lower(graph: Graph, leaves: list, tracer: Any, owner: Any = None) -> Graph:
    """``graph`` (traced on logical shapes) lowered to this process's part, if any of its inputs or states is
    global; else ``graph`` itself. ``leaves``: the call's flattened arguments; ``tracer``: what traced it (its
    ``state_tensors``, state name -> tensor, and ``keep_alive``, the eager tensors build() captured, baked in
    as constants of this process's part); ``owner``: the nn.Graph, whose settings say more
    (``config.enable_zero``: :func:`shard_slots`; modules with ``config.set_stage``: :func:`stage_placements`)."""
    states = tracer.state_tensors
    tensors = [t for t in leaves if isinstance(t, Tensor)]
    if not has_global(tensors, states):
        return graph
    settings = owner.config.plan_settings if owner is not None else {}
    if settings.get("zero"):
        shard_slots(graph, states, settings["zero"])
    copied = graph.copy()
    lowered = GlobalGraph(**{f: getattr(copied, f) for f in Graph.__dataclass_fields__}, logical=graph)
    captured = {f"FreeEagerTensor-{k}": t for k, t in enumerate(tracer.keep_alive)}
    lowering = _Lowering(lowered, stage_placements(owner) if owner is not None else {}, captured)
    for node, t in zip([n for n in lowered.inputs if not n.attrs.get("number")], tensors):
        lowering.source(node, t, "input")
    lowering.run(states)
    return lowered


def shard_slots(graph: Graph, states: dict[str, Tensor], zero: dict) -> None:
    """ZeRO (``graph.config.enable_zero``): each optimizer slot of a broadcast parameter (momentum, Adam's
    moments) is split along dim 0 over its placement, so each process keeps and updates 1/n of it. The
    lowering then does the rest: the gradient (a partial sum) is reduce-scattered to the slot's split, the
    update runs on each process's piece, and the new parameter is all-gathered back to broadcast."""
    for node in graph.states:
        t = states.get(node.state_name)
        if node.state_kind == "optimizer" and isinstance(t, GlobalTensor) and t._sbp == B and t.ndim >= 1 and \
                t.numel() >= zero["shard_min_size"] and t.shape[0] >= len(t._members):
            relayout_(t, split(0))


def stage_placements(owner: Any) -> dict[str, Any]:
    """Module path -> placement of each module of the nn.Graph ``owner`` made a pipeline stage
    (``module.config.set_stage(stage_id, placement)``; read duck-typed: this floor does not import nn)."""
    stages = {}
    for name, module in owner._modules.items():
        for path, m in module.named_modules(prefix=name):
            placement = m.__dict__.get("_graph_module_settings", {}).get("stage_placement")
            if placement is not None:
                stages[path] = placement
    return stages


class _Lowering:
    """One walk over a copy of the traced graph, in order: :meth:`source` for inputs, states and constants,
    :meth:`op` for each op (its signature, the boxing in front of it, its local shape), then the updates."""

    def __init__(self, graph: GlobalGraph, stages: dict[str, Any], captured: dict[str, Tensor]):
        self.graph, self.layouts, self.stages = graph, graph.layouts, stages
        self.captured = captured               # "FreeEagerTensor-k" -> the eager tensor build() captured
        self.nodes: list[Node] = []            # the lowered graph's nodes, boxing and moves in their places
        self.moves: dict[tuple, Node] = {}     # (value, placement) -> the move node that took it there

    def source(self, node: Node, t: Tensor | None, what: str) -> None:
        """The layout of an input, state or constant: its tensor's if global; the same value on every process
        (placement None, read as broadcast by any op) for constants and a training step's own values."""
        if isinstance(t, GlobalTensor):
            self.layouts[node.name] = Layout(t.placement, t._sbp, tuple(t.shape))
            node.shape = tuple(t.array.shape)
        elif node.kind == STATE and node.state_kind in ("parameter", "buffer"):
            raise RuntimeError(f"nn.Graph {self.graph.name}: the {node.state_kind} {node.state_name} is a local "
                               f"tensor but other values are global; make the module global too, e.g. "
                               f"model.to_global(placement=..., sbp=toynet.sbp.broadcast)")
        elif node.kind == INPUT:
            raise RuntimeError(f"nn.Graph {self.graph.name}: input {node.name} is a local tensor of shape "
                               f"{tuple(node.shape)} but other values are global; global and local tensors do not "
                               "mix: pass x.to_global(placement=..., sbp=...)")
        else:    # a constant, the step counter, a learning rate: the same value on every process
            self.layouts[node.name] = Layout(None, B, tuple(node.shape))

    def run(self, states: dict[str, Tensor]) -> None:
        for node in self.graph.nodes:
            if node.kind == STATE:
                self.source(node, states.get(node.state_name), node.state_kind)
            elif node.kind == CONSTANT:   # (a global tensor build() captured: its part, laid out as it is)
                captured = re.search(r"FreeEagerTensor-\d+$", node.name)
                self.source(node, self.captured.get(captured.group(0)) if captured else None, "constant")
            elif node.kind == OP:
                self.op(node)
            self.nodes.append(node)
        for name, value in list(self.graph.updates.items()):   # a new value is laid out as its state
            state = self.layouts[self.graph.state(name).name]
            if state.placement is not None and comm.rank() in state.placement.flat_ranks():
                self.graph.updates[name] = self.boxed(value, state.sbp, OPTIMIZER, state.placement)
        self.graph.nodes = self.nodes

    def placement_of(self, node: Node) -> Any:
        """Where an op runs: where its inputs live (they must agree); None if they are on every process. In a
        pipeline stage, inputs from another placement are first moved to the stage's (:meth:`moved`)."""
        found = [p for p in dict.fromkeys(self.layouts[x.name].placement for x in node.input_nodes) if p is not None]
        stage = self.stage_of(node.scope)
        if stage is not None and any(p != stage for p in found):   # a stage's op runs on the stage's placement
            node.inputs = tuple(self.moved(x, stage) if isinstance(x, Node) else x for x in node.inputs)
            found = [stage]
        if len(found) > 1:
            raise RuntimeError(f"nn.Graph {self.graph.name}: {node.name} ({node.source}) reads values on two "
                               f"placements, {found[0]} and {found[1]}; move one with x.to_global(placement=...)")
        return found[0] if found else None

    def op(self, node: Node) -> None:
        if node.op.changes_device:
            raise RuntimeError(f"nn.Graph {self.graph.name}: {node.name} moves a global value to another device; "
                               "a global tensor's device comes from its placement")
        if node.op is TO_GLOBAL_LAZY or node.op is TO_GLOBAL_BACK:
            return self.relayout(node)
        placement = self.placement_of(node)
        if placement is None:        # computed from values every process holds: every process computes it
            self.layouts[node.name] = Layout(None, B, tuple(node.shape))
            return
        args = [_Stand(self.layouts[x.name], placement) if isinstance(x, Node) else x for x in node.inputs]
        sig = signature(node.op, tuple(args), node.attrs)
        self.layouts[node.name] = Layout(placement, sig.output, tuple(node.shape))
        if comm.rank() not in placement.flat_ranks():
            self.elsewhere(node)
            return
        node.inputs = tuple(self.boxed(x, need, node.phase, placement) if isinstance(x, Node) else x
                            for x, need in zip(node.inputs, sig.inputs))
        if sig.attrs:
            node.attrs = {**node.attrs, **sig.attrs}
        if sig.forward is not None or (node.op.random and sig.output == B):
            node.op = _local_op(node.op, sig.forward, placement.flat_ranks())
        node.shape = boxing.local_shape(tuple(node.shape), sig.output, ranks=placement._ranks)

    def stage_of(self, scope: str) -> Any:
        while scope:
            if scope in self.stages:
                return self.stages[scope]
            scope = scope.rpartition(".")[0]
        return None

    def moved(self, x: Node, placement: Any) -> Node:
        """``x`` on ``placement`` (as broadcast): ``x`` itself, or a move node reading it, made once for every
        reader on that placement (backward reads a stage's input again: it must not be sent twice)."""
        have = self.layouts[x.name]
        if have.placement is None or have.placement == placement:
            return x
        if (x.name, placement) in self.moves:
            return self.moves[x.name, placement]
        name = f"{x.scope}-move-{len(self.nodes)}".lstrip("-")
        node = self.graph.add(Node(name, OP, have.shape, x.dtype, x.device, op=TO_GLOBAL_LAZY, inputs=(x,),
                                   attrs={"placement": placement, "sbp": B}, phase=x.phase, scope=x.scope,
                                   source=f"stage input {x.name}"))
        self.graph.nodes.pop()
        self.relayout(node)
        self.nodes.append(node)
        self.moves[x.name, placement] = node
        return node

    def elsewhere(self, node: Node) -> None:
        """``node`` is computed by other processes: here it is an empty array."""
        node.attrs, node.shape = {"op": node.op.name, "dtype": node.dtype.array_dtype}, (0,)
        node.op = ELSEWHERE

    def relayout(self, node: Node) -> None:
        """``x.to_global(placement=, sbp=)`` in build() (or its gradient, back to where x came from): a boxing
        node on the same placement, a move to another."""
        x = node.inputs[0]
        have = self.layouts[x.name]
        if node.op is TO_GLOBAL_LAZY:
            placement = node.attrs["placement"] or have.placement
            sbp = node.attrs["sbp"] or have.sbp
        else:                         # the gradient goes back to the forward input's placement
            like = self.layouts[node.inputs[1].name]
            placement, sbp = like.placement, (B if like.sbp == P else like.sbp)
        node.inputs = (x,)
        self.layouts[node.name] = Layout(placement, sbp, have.shape)
        src = have.placement._ranks if have.placement is not None else tuple(range(comm.world_size()))
        dst = placement._ranks      # (the rows of a 2-D grid, for 2-D SBP)
        if placement == have.placement or have.placement is None:
            if comm.rank() not in placement.flat_ranks():
                return self.elsewhere(node)
            node.op, node.attrs = BOXING, {"src": have.sbp if have.placement else broadcast_on(placement), "dst": sbp,
                                           "shape": have.shape, "ranks": dst}
        else:
            node.op = MOVE
            node.attrs = {"src": src, "src_sbp": have.sbp, "dst": dst, "dst_sbp": sbp, "shape": have.shape,
                          "dtype": node.dtype.array_dtype}
        node.shape = boxing.local_shape(have.shape, sbp, ranks=dst)

    def boxed(self, x: Node, need: Any, phase: str, placement: Any) -> Node:
        """``x`` laid out as ``need`` on ``placement``: ``x`` itself, or a new boxing node reading it (added to the
        graph). A value every process holds whole (placement None) counts as broadcast on any placement."""
        have = self.layouts[x.name]
        if need is None or have.sbp == need:
            return x
        have = have if have.placement is not None else Layout(placement, broadcast_on(placement), have.shape)
        if have.sbp == need:
            return x
        ranks = have.placement._ranks
        name = f"{x.scope}-boxing-{len(self.nodes)}".lstrip("-")
        box = self.graph.add(Node(name, OP, boxing.local_shape(have.shape, need, ranks=ranks), x.dtype, x.device,
                                  op=BOXING, inputs=(x,), phase=phase, scope=x.scope, source=f"boxing of {x.name}",
                                  attrs={"src": have.sbp, "dst": need, "shape": have.shape, "ranks": ranks}))
        self.graph.nodes.pop()      # (add() appended it; it runs just before its reader)
        self.nodes.append(box)
        self.layouts[box.name] = Layout(have.placement, need, have.shape)
        return box


def _local_op(op: Op, forward: Any, ranks: tuple) -> Op:
    """``op`` computing one process's part: with the rule's local forward, and a random op's numbers drawn by
    the first process and sent to all (as the eager interpreter does), so that every process agrees."""
    local = copy.copy(op)
    run = forward if forward is not None else op.forward

    def forward_here(xp: Any, *args: Any, **attrs: Any) -> Any:
        out = xp.asarray(run(xp, *args, **({} if forward is not None else attrs)))
        return xp.asarray(comm.broadcast(out, root=ranks[0], ranks=ranks)) if op.random else out
    local.forward, local.elementwise, local.supports_out = forward_here, False, False
    return local
