"""The fast path's memory plan: the lesson's (:mod:`toynet.static.passes.memory`), with its buffers packed
into one arena by lifetime, so that buffers alive at different times share memory ("greedy by size", as
TensorFlow Lite's arena planner does it; on MobileNetV2's training step the lesson's one region a buffer
needs a third more memory). What follows is the plan as it was written before the lesson's simpler one.

Memory planning: decide, before anything runs, which buffer each value is written into.

Eager mode allocates a fresh array for every op result and frees it when Python drops the last
reference. A compiled graph knows every value's *lifetime* (from the op that makes it to the last op
that reads it), so it can do better:

* **reuse**: a value whose last reader has run gives its buffer back to a pool; a later value that
  fits (of any shape and dtype: a buffer is raw bytes) takes it. The buffers are allocated once, when
  the plan is built, and every call reuses them: no allocation, no page faults, in the steady state.
* **in place**: an elementwise op whose input dies at that op writes its result over that input.
* **state updates staged**: a training step's new weights, optimizer slots and step counter are written
  into buffers of their own, never into the state arrays, and copied in together at the very end of the
  call (``plan.commits``). A step that fails part way (an overflow error, a Ctrl-C) therefore leaves
  every state as it was: a step is applied whole or not at all.

Views (reshape, transpose, slicing) share their input's memory, so a buffer stays reserved while any
view of it is still to be read. Outputs get fresh arrays (the caller keeps them across calls).

The pass runs in four phases, each a function below: :func:`_lifetimes` (when each value is last
read), :func:`_extend_through_views` (views keep their base alive), :func:`_assign_buffers` (the pool,
in op order; a state's new value keeps its buffer to the end) and :func:`_copies` (what is copied at
the end). The result is a :class:`MemoryPlan` attached to the graph as
``graph.memory``; the compiler follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ir import OP, Graph, Node, PassReport, format_bytes, graph_pass
from ..fuse import FusedElementwise, reads_of_input
from ..memory import END, MemoryPlan, writes_out

#: Every buffer starts at a multiple of this many bytes in the arena (aligned for a SIMD load of any dtype).
ALIGNMENT = 64


def _nbytes(node: Node) -> int:
    n = node.dtype.itemsize
    for d in node.shape:
        n *= d
    return n


@dataclass
class _Lifetimes:
    """What the phases share: the ops in run order and when each value is last read."""

    ops: list[Node]                      # the op nodes, in the order the plan runs them
    pos: dict[int, int]                  # id(op) -> its position in ``ops``
    outputs: set[int]                    # ids of the graph's outputs
    update_targets: dict[int, list[str]]  # id(node) -> the states it becomes the new value of
    last_use: dict[int, int]             # id(value) -> position of its last reader (END: after every op)
    readers: dict[int, list[int]]        # id(value) -> positions of the ops that read it
    base_of: dict[int, Node] = field(default_factory=dict)  # id(view) -> the value whose memory it shows


def _lifetimes(graph: Graph) -> _Lifetimes:
    """Phase 1: each value's last reader. A buffer can be handed on only once its value's last reader
    has run; outputs and state updates are read after the last op (END)."""
    ops = [n for n in graph.nodes if n.kind == OP]
    update_targets: dict[int, list[str]] = {}
    for state_name, n in graph.updates.items():
        update_targets.setdefault(id(n), []).append(state_name)
    last_use: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(ops):
        for x in n.input_nodes:
            last_use[id(x)] = i
            readers.setdefault(id(x), []).append(i)
    for n in graph.roots():
        last_use[id(n)] = END
    return _Lifetimes(ops, {id(n): i for i, n in enumerate(ops)}, {id(n) for n in graph.outputs},
                      update_targets, last_use, readers)


def _aliases(n: Node, life: _Lifetimes) -> bool:
    """Does ``n`` return a view of its first input? Not when it is given a buffer of its own to write."""
    writes_own_buffer = writes_out(n) and id(n) not in life.outputs and id(n) not in life.update_targets
    return n.kind == OP and n.op.may_alias_input and not writes_own_buffer


def _extend_through_views(life: _Lifetimes) -> None:
    """Phase 2: a view (reshape, transpose, slice) reads its base's memory, so the base lives as long as
    its views are read. Walking backwards, each view's lifetime and readers are added to its base's."""
    for n in life.ops:
        if _aliases(n, life) and n.input_nodes:
            src = n.inputs[0]
            life.base_of[id(n)] = life.base_of.get(id(src), src) if isinstance(src, Node) else n
    for n in reversed(life.ops):
        base = life.base_of.get(id(n))
        if base is not None:
            life.last_use[id(base)] = max(life.last_use.get(id(base), -1), life.last_use.get(id(n), -1))
            for r in life.readers.get(id(n), []):
                life.readers.setdefault(id(base), []).append(r)




def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def _place(sizes: list[int], spans: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets in one arena for buffers of these ``sizes`` alive during these ``spans`` (first and last op,
    inclusive), such that two buffers alive at the same time never overlap; and the arena's size.

    "Greedy by size", as TensorFlow Lite's arena planner does it: the largest buffers are placed first,
    each at the lowest offset that is free during its whole lifetime. Handing freed buffers on in op
    order instead (first come, first served) leaves holes that fit nothing later: on MobileNetV2's
    training step it needed a third more memory than the largest set of values alive at once.
    """
    offsets = [0] * len(sizes)
    placed: list[int] = []
    for b in sorted(range(len(sizes)), key=lambda k: (-sizes[k], spans[k])):
        start, end = spans[b]
        busy = sorted((offsets[o], offsets[o] + sizes[o]) for o in placed
                      if spans[o][0] <= end and start <= spans[o][1])
        offset = 0
        for low, high in busy:
            if offset + sizes[b] <= low:
                break
            offset = max(offset, high)
        offsets[b] = offset
        placed.append(b)
    return offsets, max((o + n for o, n in zip(offsets, sizes)), default=0)


def _in_place_input(n: Node, i: int, life: _Lifetimes, slot_of: dict[int, int]) -> Node | None:
    """An input elementwise op ``n`` (at position ``i``) can write its result over: one that dies here, is
    in a pooled buffer, has exactly ``n``'s shape and dtype, and that no other input of ``n`` looks at
    through a view (``h + h.t()``: the first write would change what the view reads). A fused kernel must
    read it in its first step only, before anything is written."""
    for k, x in enumerate(n.inputs):
        if (isinstance(x, Node) and id(x) in slot_of and life.last_use.get(id(x)) == i
                and x.shape == n.shape and x.dtype == n.dtype
                and not any(life.base_of.get(id(y)) is x for y in n.input_nodes)
                and (n.op is not FusedElementwise or reads_of_input(n.attrs["program"], k) == [0])):
            return x
    return None


def _assign_buffers(life: _Lifetimes, plan: MemoryPlan) -> None:
    """Phase 3: walking the ops in order, give each value that can be written into a buffer: the buffer of
    a dying input where the op is elementwise (in place), else a buffer of its own; then place all the
    buffers in one arena, where buffers alive at different times share memory (:func:`_place`)."""
    slot_of: dict[int, int] = {}   # id(value) -> its buffer, while it lives
    spans: list[list[int]] = []    # buffer -> [first op, last op] it is needed
    last = len(life.ops)           # (a value read after the last op, END, lives to here)
    for i, n in enumerate(life.ops):
        owns_buffer = writes_out(n) and id(n) not in life.outputs
        plan.bytes_without_reuse += _nbytes(n) if owns_buffer else 0
        if owns_buffer:
            over = _in_place_input(n, i, life, slot_of) if n.op.elementwise else None
            if over is not None:
                slot = slot_of.pop(id(over))
                plan.inplace[n.name] = over.name
            else:
                slot = len(plan.buffers)
                plan.buffers.append(_aligned(_nbytes(n)))
                spans.append([i, i])
            slot_of[id(n)] = slot
            plan.buffer_of[n.name] = slot
            if id(n) in life.update_targets:
                life.last_use[id(n)] = END  # staged: copied into its state after the last op
            spans[slot][1] = max(spans[slot][1], min(life.last_use.get(id(n), i), last))
        for x in dict.fromkeys(n.input_nodes):
            if life.last_use.get(id(x)) == i and id(x) in slot_of:
                slot_of.pop(id(x))
    plan.offsets, plan.arena_bytes = _place(plan.buffers, [tuple(span) for span in spans])


def _copies(graph: Graph, life: _Lifetimes, plan: MemoryPlan) -> None:
    """Phase 4: what the plan copies. Every state update is copied into the state's array at the end of the
    call (``plan.commits``), all in one go; an output that shares memory with something reused or owned
    elsewhere (a view, a state) is copied on return, since the caller keeps it across calls."""
    states = {n.state_name: n for n in graph.states}
    for state_name, u in graph.updates.items():
        if u is not states[state_name]:
            plan.commits[state_name] = u.name
    for n in graph.outputs:
        if n.kind != OP or id(n) in life.base_of:
            plan.copy_outputs.add(n.name)


@graph_pass("PlanMemory")
def plan_memory(graph: Graph, report: PassReport) -> Graph:
    """Pack the buffers tighter: each at the lowest offset free during its whole lifetime, largest first, as
    TensorFlow Lite plans.

    The plan is attached to the graph as ``graph.memory`` (a :class:`MemoryPlan`); the ops are unchanged."""
    plan = MemoryPlan()
    life = _lifetimes(graph)
    _extend_through_views(life)
    _assign_buffers(life, plan)
    _copies(graph, life, plan)
    plan.last_use = {n.name: life.last_use.get(id(n), -1) for n in life.ops}
    plan.bytes_pooled = plan.arena_bytes
    graph.memory = plan
    report.notes.append(f"{len(plan.buffers)} buffers for {len(plan.buffer_of)} values in "
                        f"{format_bytes(plan.arena_bytes)}, "
                        f"{len(plan.inplace)} in place, {len(plan.commits)} state updates staged")
    return graph
