"""Memory planning: decide, before anything runs, which buffer each value is written into.

Eager mode allocates a fresh array for every op result and frees it when Python drops the last
reference. A compiled graph knows every value's *lifetime* (from the op that makes it to the last op
that reads it), so it can do better:

* **reuse**: a value whose last reader has run gives its buffer back to a pool; a later value of the
  same shape and dtype takes it. The buffers are allocated once, when the plan is built, and every
  call reuses them: no allocation, no page faults, in the steady state.
* **in place**: an elementwise op whose input dies at that op writes its result over that input.
* **state updates in place**: a training step's new weight is written straight into the weight's own
  array, once nothing else still needs the old value; otherwise it is copied in at the end of the call.

Views (reshape, transpose, slicing) share their input's memory, so a buffer stays reserved while any
view of it is still to be read. Outputs get fresh arrays (the caller keeps them across calls).

The result is a :class:`MemoryPlan` attached to the graph as ``graph.memory``; the compiler follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import OP, STATE, Graph, Node
from . import PassReport, timed
from .fuse import FusedElementwise, reads_of_input

END = 1 << 30  # "read after the last op": outputs and state updates


@dataclass
class MemoryPlan:
    """Where every op node writes. Keys are node names."""

    buffers: list[int] = field(default_factory=list)                    # slot -> size in bytes
    buffer_of: dict[str, int] = field(default_factory=dict)             # node -> pooled slot
    scratch_of: dict[str, int] = field(default_factory=dict)            # fused node -> scratch slot
    state_out: dict[str, str] = field(default_factory=dict)             # node -> state written in place
    commits: dict[str, str] = field(default_factory=dict)               # state -> node copied in at the end
    copy_outputs: set = field(default_factory=set)                      # outputs that alias reused memory
    last_use: dict[str, int] = field(default_factory=dict)              # node -> position of last reader
    inplace: dict[str, str] = field(default_factory=dict)               # node -> input whose buffer it reuses
    bytes_without_reuse: int = 0
    bytes_pooled: int = 0

    def describe(self) -> str:
        lines = [f"{len(self.buffers)} buffers, {self.bytes_pooled / 1e6:.3f} MB "
                 f"(instead of {self.bytes_without_reuse / 1e6:.3f} MB without reuse); "
                 f"{len(self.inplace)} ops in place, {len(self.state_out)} state updates in place, "
                 f"{len(self.commits)} copied in"]
        for name, slot in self.buffer_of.items():
            lines.append(f"  %{name} -> buffer {slot} ({self.buffers[slot]} bytes)")
        for name, state in self.state_out.items():
            lines.append(f"  %{name} -> state {state} (in place)")
        return "\n".join(lines)


def writes_out(node: Node) -> bool:
    return node.kind == OP and (node.op.elementwise or node.op.supports_out)


def _nbytes(node: Node) -> int:
    n = node.dtype.itemsize
    for d in node.shape:
        n *= d
    return n


def _run(graph: Graph, report: PassReport) -> Graph:
    plan = MemoryPlan()
    ops = [n for n in graph.nodes if n.kind == OP]
    pos = {id(n): i for i, n in enumerate(ops)}
    outputs = {id(n) for n in graph.outputs}
    update_targets: dict[int, list[str]] = {}
    for state_name, n in graph.updates.items():
        update_targets.setdefault(id(n), []).append(state_name)
    states = {n.state_name: n for n in graph.nodes if n.kind == STATE}

    # 1. Lifetimes: the position of each value's last reader (END for outputs and updates).
    last_use: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(ops):
        for x in n.input_nodes:
            last_use[id(x)] = i
            readers.setdefault(id(x), []).append(i)
    for n in graph.roots():
        last_use[id(n)] = END

    # 2. Views keep what they look at alive: walk backwards, extending each base by its views.
    def aliases(n: Node) -> bool:
        return n.kind == OP and n.op.may_alias_input and not (writes_out(n) and id(n) not in outputs
                                                                and id(n) not in update_targets)
    base_of: dict[int, Node] = {}
    for n in ops:
        if aliases(n) and n.input_nodes:
            src = n.inputs[0]
            base_of[id(n)] = base_of.get(id(src), src) if isinstance(src, Node) else n
    for n in reversed(ops):
        base = base_of.get(id(n))
        if base is not None:
            last_use[id(base)] = max(last_use.get(id(base), -1), last_use.get(id(n), -1))
            for r in readers.get(id(n), []):
                readers.setdefault(id(base), []).append(r)

    # 3. State updates written in place, where every reader of the old value runs first.
    # A state whose old value becomes another state's new value (``prev.copy_(cur)``, directly or
    # through a view) is read by that copy at the end of the call, after every op: never overwrite it early.
    read_at_end = set()
    for state_name, u in graph.updates.items():
        base = base_of.get(id(u), u)
        if base.kind == STATE and base.state_name != state_name:
            read_at_end.add(base.state_name)
    for state_name, u in graph.updates.items():
        s = states[state_name]
        if u is s or u.kind != OP or not writes_out(u) or id(u) in outputs or len(update_targets[id(u)]) > 1:
            continue
        if state_name in read_at_end:
            continue
        if u.shape != s.shape or u.dtype != s.dtype:
            continue
        if any(r > pos[id(u)] for r in readers.get(id(s), [])):
            continue
        if any(isinstance(x, Node) and x is not s and base_of.get(id(x)) is s for x in u.inputs):
            continue  # reads a view of the state while overwriting it
        if s in u.inputs:
            if u.op is FusedElementwise:
                program = u.attrs["program"]
                reads = reads_of_input(program, u.inputs.index(s))
                if reads == [0]:
                    pass                         # read before anything is written
                elif reads == [len(program) - 1]:
                    plan.scratch_of[u.name] = -1  # intermediates elsewhere; the last step writes
                else:
                    continue
            elif not u.op.elementwise:
                continue                          # e.g. matmul cannot write over its own input
        plan.state_out[u.name] = state_name

    # 4. Buffers from a pool, walking the ops in order. A buffer is raw memory: any value that fits can
    # use it (viewed with its own shape and dtype), so a dying activation's memory serves the next value
    # of any shape. Sizes are settled only when planning ends, so a buffer may grow to fit its largest user.
    free: list[int] = []
    slot_of: dict[int, int] = {}

    def take(nbytes: int) -> int:
        fitting = [b for b in free if plan.buffers[b] >= nbytes]
        if fitting:
            best = min(fitting, key=lambda b: plan.buffers[b])   # the tightest fit wastes least
        elif free:
            best = max(free, key=lambda b: plan.buffers[b])      # grow the largest: least extra memory
            plan.buffers[best] = nbytes
        else:
            plan.buffers.append(nbytes)
            return len(plan.buffers) - 1
        free.remove(best)
        return best

    for i, n in enumerate(ops):
        plan.bytes_without_reuse += _nbytes(n) if writes_out(n) and id(n) not in outputs else 0
        if n.name in plan.state_out:
            if plan.scratch_of.get(n.name) == -1:
                plan.scratch_of[n.name] = take(_nbytes(n))
                free.append(plan.scratch_of[n.name])
        elif writes_out(n) and id(n) not in outputs:
            slot = None
            if n.op.elementwise:
                # In place: over an input that dies here, is ours, and has exactly this shape and dtype,
                # and that no other input of this op looks at through a view (``h + h.t()``): the first
                # write would change what the view reads.
                for k, x in enumerate(n.inputs):
                    if (isinstance(x, Node) and id(x) in slot_of and last_use.get(id(x)) == i
                            and x.shape == n.shape and x.dtype == n.dtype
                            and not any(base_of.get(id(y)) is x for y in n.input_nodes)
                            and (n.op is not FusedElementwise or reads_of_input(n.attrs["program"], k) == [0])):
                        slot = slot_of.pop(id(x))
                        plan.inplace[n.name] = x.name
                        break
            if slot is None:
                slot = take(_nbytes(n))
            slot_of[id(n)] = slot
            plan.buffer_of[n.name] = slot
            if id(n) in update_targets:
                last_use[id(n)] = END  # copied into its state after the last op
        # Values read for the last time here hand their buffers back.
        for x in dict.fromkeys(n.input_nodes):
            if last_use.get(id(x)) == i and id(x) in slot_of:
                free.append(slot_of.pop(id(x)))

    for state_name, u in graph.updates.items():
        if u.name not in plan.state_out and u is not states[state_name]:
            plan.commits[state_name] = u.name

    # 5. Outputs that share memory with something reused or owned elsewhere are copied on return.
    for n in graph.outputs:
        is_view = id(n) in base_of
        if n.kind != OP or is_view or n.name in plan.state_out:
            plan.copy_outputs.add(n.name)

    plan.last_use = {n.name: last_use.get(id(n), -1) for n in ops}
    plan.bytes_pooled = sum(plan.buffers)
    graph.memory = plan
    report.notes.append(f"{len(plan.buffers)} buffers for {len(plan.buffer_of)} values, "
                        f"{len(plan.inplace)} in place, {len(plan.state_out)} state updates in place")
    return graph


def plan_memory(graph: Graph) -> tuple[Graph, PassReport]:
    return timed("PlanMemory", _run, graph)
