"""Memory planning: decide, before anything runs, which buffer each value is written into.

Eager mode allocates a fresh array for every op result and frees it when Python drops the last
reference. A compiled graph knows every value's *lifetime* (from the op that makes it to the last op
that reads it), so it can do better:

* **reuse**: a value whose last reader has run gives its buffer back to a pool; a later value of the same
  size in bytes takes it (a buffer is raw bytes: any shape and dtype fit). The buffers are allocated once,
  when the plan is built, and every call reuses them: no allocation, no page faults, in the steady state.
* **in place**: an elementwise op whose input dies at that op writes its result over that input (it reads
  element ``i`` before it writes element ``i``).
* **state updates staged**: a training step's new weights, optimizer slots and step counter are written
  into buffers of their own, never into the state arrays, and copied in together at the very end of the
  call (``plan.commits``). A step that fails part way (an overflow error, a Ctrl-C) therefore leaves
  every state as it was: a step is applied whole or not at all.

Views (reshape, transpose, slicing) share their input's memory, so a value's buffer stays taken while any
view of it is still to be read. Outputs get fresh arrays (the caller keeps them across calls).

The result is a :class:`MemoryPlan` attached to the graph as ``graph.memory``; the compiler follows it. (The
fast path packs the buffers tighter, :mod:`.fast.memory`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir import OP, STATE, Graph, Node, PassReport, format_bytes, graph_pass
from .fuse import FusedElementwise, reads_of_input

END = 1 << 30  # "read after the last op": outputs and state updates
#: Every buffer starts at a multiple of this many bytes in the arena, so any dtype is aligned in it (as an
#: array of its own would be: NumPy's allocator rounds the same way).
ALIGNMENT = 16


@dataclass
class MemoryPlan:
    """Where every op node writes. Keys are node names."""

    buffers: list[int] = field(default_factory=list)                    # slot -> size in bytes
    buffer_of: dict[str, int] = field(default_factory=dict)             # node -> its slot
    commits: dict[str, str] = field(default_factory=dict)               # state -> node copied in at the end
    copy_outputs: set = field(default_factory=set)                      # outputs that alias reused memory
    last_use: dict[str, int] = field(default_factory=dict)              # node -> position of last reader
    inplace: dict[str, str] = field(default_factory=dict)               # node -> input whose buffer it reuses
    offsets: list[int] = field(default_factory=list)                    # slot -> where it starts in the arena
    arena_bytes: int = 0                                                # one allocation holds every slot
    bytes_without_reuse: int = 0
    bytes_pooled: int = 0

    def describe(self) -> str:
        lines = [f"{len(self.buffers)} buffers in one arena of {self.bytes_pooled / 1e6:.3f} MB "
                 f"(instead of {self.bytes_without_reuse / 1e6:.3f} MB without reuse); "
                 f"{len(self.inplace)} ops in place, {len(self.commits)} state updates staged and copied in "
                 "at the end"]
        for name, slot in self.buffer_of.items():
            lines.append(f"  %{name} -> buffer {slot} ({self.buffers[slot]} bytes at offset {self.offsets[slot]})")
        for state, name in self.commits.items():
            lines.append(f"  %{name} -> state {state} (at the end)")
        return "\n".join(lines)


def writes_out(node: Node) -> bool:
    """Can the op write its result into a given buffer (``forward(..., out=buffer)``)?"""
    return node.kind == OP and (node.op.elementwise or node.op.supports_out)


def nbytes(node: Node) -> int:
    return node.dtype.itemsize * math.prod(node.shape)


def aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


@graph_pass("PlanMemory")
def plan_memory(graph: Graph, report: PassReport) -> Graph:
    """Decide before anything runs which buffer each value is written into: buffers reused by exact size, in place
    where safe, state updates staged to the end.

    The plan is attached to the graph as ``graph.memory`` (a :class:`MemoryPlan`); the ops are unchanged."""
    plan, ops = MemoryPlan(), [n for n in graph.nodes if n.kind == OP]
    updated, outputs = {id(n) for n in graph.updates.values()}, {id(n) for n in graph.outputs}
    # When each value is last read. A view's reads are its base's: it shows the base's memory.
    last_use: dict[int, int] = {}
    base_of: dict[int, Node] = {}        # id(view) -> the value whose memory it shows
    for i, n in enumerate(ops):
        last_use.update({id(base_of.get(id(x), x)): i for x in n.input_nodes})
        if n.op.may_alias_input and n.input_nodes and not (writes_out(n) and id(n) not in outputs | updated):
            base_of[id(n)] = base_of.get(id(n.inputs[0]), n.inputs[0])
    for n in graph.roots():
        last_use[id(base_of.get(id(n), n))] = END
    # Walking the ops in order: each value that can be written into gets a buffer, the buffer of an input that
    # dies here if the op is elementwise (in place), else one of its size given back earlier, else a new one.
    slot_of: dict[int, int] = {}         # id(value) -> its buffer, while it lives
    free: dict[int, list[int]] = {}      # size in bytes -> buffers given back
    for i, n in enumerate(ops):
        dying = [x for x in dict.fromkeys(n.input_nodes) if last_use.get(id(x)) == i and id(x) in slot_of]
        if writes_out(n) and id(n) not in outputs:
            over = next((x for x in dying if _can_write_over(n, x, base_of)), None) if n.op.elementwise else None
            size = aligned(nbytes(n))
            if over is not None:   # in place: the result takes over the buffer of an input dying here
                plan.inplace[n.name], slot = over.name, slot_of.pop(id(over))
                dying.remove(over)
            elif free.get(size):   # a buffer of the same size, given back earlier
                slot = free[size].pop()
            else:                  # a new buffer
                slot, plan.buffers = len(plan.buffers), plan.buffers + [size]
            slot_of[id(n)] = plan.buffer_of[n.name] = slot
            plan.bytes_without_reuse += size
            last_use[id(n)] = END if id(n) in updated else last_use.get(id(n), i)  # staged: copied in at the end
        for x in dying:
            free.setdefault(plan.buffers[slot_of[id(x)]], []).append(slot_of.pop(id(x)))
    # One arena, each buffer its own region of it; every state update is copied in at the end of the call, and
    # an output that shares memory with something reused or owned elsewhere (a view, a state) is copied out.
    plan.offsets = [sum(plan.buffers[:k]) for k in range(len(plan.buffers))]
    plan.arena_bytes = plan.bytes_pooled = sum(plan.buffers)
    plan.commits = {state: u.name for state, u in graph.updates.items() if u.kind != STATE or u.state_name != state}
    plan.copy_outputs = {n.name for n in graph.outputs if n.kind != OP or id(n) in base_of}
    plan.last_use = {n.name: last_use.get(id(n), -1) for n in ops}
    graph.memory = plan
    values, arena = len(plan.buffer_of), format_bytes(plan.arena_bytes)
    report.notes.append(f"{len(plan.buffers)} buffers for {values} values in {arena}, {len(plan.inplace)} in place, "
                        f"{len(plan.commits)} state updates staged")
    return graph


def _can_write_over(n: Node, x: Node, base_of: dict[int, Node]) -> bool:
    """May elementwise op ``n`` write its result over its input ``x``, which dies at ``n``? When ``x`` has the
    result's shape and dtype, no other input of ``n`` looks at ``x`` through a view (``h + h.t()``: the first
    write would change what the view reads), and a fused kernel reads ``x`` in its first step only."""
    return (x.shape == n.shape and x.dtype == n.dtype and not any(base_of.get(id(y)) is x for y in n.input_nodes)
            and (n.op is not FusedElementwise or reads_of_input(n.attrs["program"], n.inputs.index(x)) == [0]))
