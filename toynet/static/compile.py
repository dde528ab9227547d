"""Compilation: turn an optimised graph into a :class:`Plan`, a generated Python function.

The function is the graph flattened into straight-line code, **one line per op node**, each a call of the
op's own ``forward`` on arrays, writing into the buffer the memory plan chose::

    def run(inputs, states, commit=commit_all):
        v_in0 = inputs[0]
        s0 = states[0]  # model.0.weight
        ...
        # ---- forward: what build() computes from the inputs
        # model.0-matmul-1: matmul    (poly.py:41 in build: loss = self.loss_fn(self.model(x), y))
        v1 = matmul(xp, v_in0, v0, out=b1)
        ...
        # ---- commit: every state update at once
        commit((s0, s1), (v9, v11))
        return (v3,)

No Tensor objects, no autograd records, no shape checks, no dictionary lookups per op: everything Eager
mode decides at run time on every call was decided once, here. That is where Graph mode's speed comes
from. ``plan.source`` shows the generated code, and a training step of ``nn.Graph`` runs exactly it.

**A step is all or nothing.** No op writes into a state's array: a training step's new parameters,
optimizer slots and step counter are computed into buffers of their own (the memory plan keeps them to
the end), and the last statement copies them all into the state arrays. An error anywhere before it (an
overflow raised by ``numpy.errstate``, a shape error, a Ctrl-C) leaves every state as it was. The copy,
:func:`commit`, is one C-level call: CPython raises ``KeyboardInterrupt`` only between bytecodes of Python
code, so a Ctrl-C during the copy is raised after it, once every state is written. (A caller with Python
work to add to the commit, such as a learning-rate scheduler's step, passes ``commit``: it receives the
state arrays and their new values and must copy them itself.)
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import operator
from typing import Any

from .. import backend
from .ir import BACKWARD, CONSTANT, FORWARD, OP, OPTIMIZER, STATE, Graph, Node

PHASE_TITLES = {
    FORWARD: "forward: what build() computes from the inputs",
    BACKWARD: "backward: the gradients, each op's vjp rule",
    OPTIMIZER: "optimizer: the update of each parameter and its optimizer state",
}


class Plan:
    """A compiled graph: call ``plan.run(input_arrays, state_arrays)`` to get the output arrays.

    State arrays are read at the start of the call and written once, all together, just before it
    returns (see the module's docstring); ``plan.run(inputs, states, commit)`` hands that write to
    ``commit(state_arrays, new_values)``. An input the graph takes as a Python number (``number_inputs``)
    is passed as the number itself.
    """

    def __init__(self, graph: Graph):
        self.graph, self.device = graph, _graph_device(graph)
        self.state_names = [n.state_name for n in graph.states]
        #: Positions in ``inputs`` of the Python numbers of the call (a plain int or float each call).
        self.number_inputs = [k for k, n in enumerate(graph.inputs) if n.attrs.get("number")]
        self.namespace: dict[str, Any] = {"xp": self.device.xp, "commit_all": commit}
        self.names: dict[int, str] = {}           # id(node) -> its name in the generated code
        self.numbers = _number_nodes(graph)       # ids of the values that are Python numbers at run time
        self.buffers = self.allocate_buffers()    # node name -> the name of its buffer
        body = self.reads() + self.op_lines() + self.commits() + [f"    return {_tuple(self.outputs())}"]
        self.source = "\n".join([HEADER.replace("{name}", as_comment(graph.name))] + body) + "\n"
        exec(compile(self.source, f"<toynet plan {graph.name}>", "exec"), self.namespace)  # noqa: S102
        self.run = self.namespace["run"]

    def reads(self) -> list[str]:
        """Name the call's input arrays and the state arrays; constants live in the namespace."""
        constants = [n for n in self.graph.nodes if n.kind == CONSTANT]
        self.names.update({id(n): f"v_in{k}" for k, n in enumerate(self.graph.inputs)})
        self.names.update({id(n): f"s{k}" for k, n in enumerate(self.graph.states)})
        self.names.update({id(n): f"c{k}" for k, n in enumerate(constants)})
        self.namespace.update({f"c{k}": n.value for k, n in enumerate(constants)})
        return ([f"    v_in{k} = inputs[{k}]" for k in range(len(self.graph.inputs))]
                + [f"    s{k} = states[{k}]  # {as_comment(n.state_name)}" for k, n in enumerate(self.graph.states)])

    def op_lines(self) -> list[str]:
        """One line per op, under a comment saying what it is and where it came from; a value not kept in a
        buffer is dropped (``del``) as soon as its last reader has run."""
        last_use = self.graph.memory.last_use if self.graph.memory is not None else {}
        dies_at: dict[int, list[str]] = {}
        lines, phase = [], None
        for i, n in enumerate(n for n in self.graph.nodes if n.kind == OP):
            if n.phase != phase:
                phase = n.phase
                lines.append(f"    # ---- {PHASE_TITLES.get(phase, phase)}")
            name = self.names[id(n)] = f"v{i}"
            origin = f"    ({as_comment(origin_comment(n))})" if n.source else ""
            lines.append(f"    # {as_comment(n.name)}: {as_comment(n.op.describe(**n.attrs))}{origin}")
            args = ", ".join(["xp"] + [self.names[id(x)] if isinstance(x, Node) else self.literal(x) for x in n.inputs])
            out = self.buffers.get(n.name)
            lines.append(f"    {name} = {self.function(i, n)}({args}" + (f", out={out})" if out else ")"))
            if id(n) in self.numbers:
                # Computed from the call's Python numbers only: keep it a Python number, as Eager mode's
                # Python arithmetic would, so it stays 'weak' in NumPy's promotion (x32 * it is float32).
                lines.append(f"    {name} = {name}.item()")
            if out is None and i < last_use.get(n.name, -1) < _END:
                dies_at.setdefault(last_use[n.name], []).append(name)
            lines += [f"    del {dead}" for dead in dies_at.pop(i, [])]
        return lines

    def commits(self) -> list[str]:
        """The commit: every state's new value copied into the state's array, in one call. A new value that
        still reads a state's memory (``prev.copy_(cur)``: the old ``cur``) is copied first, so no order of
        the copies can mix old and new values."""
        updates = {state: n for state, n in self.graph.updates.items() if n.state_name != state}
        if not updates:
            return []
        lines = ["    # ---- commit: every state update at once, none written before (a failed step changes nothing)"]
        values = []
        for state, node in updates.items():
            values.append(self.names[id(node)])
            if _reads_state(node, self.graph.memory):
                lines.append(f"    {values[-1]}_old = {values[-1]}.copy()  # the old value of {as_comment(state)}")
                values[-1] += "_old"
        targets = [f"s{self.state_names.index(state)}" for state in updates]
        return lines + [f"    commit({_tuple(targets)}, {_tuple(values)})"]

    def outputs(self) -> list[str]:
        """The outputs, arrays the caller may keep (after the commit: an output that is a state shows it
        after the step, as the eager tensor would)."""
        memory, outs = self.graph.memory, []
        for n in self.graph.outputs:
            v = self.names[id(n)]
            if id(n) in self.numbers:
                self.namespace.setdefault("dtypes", {})[v] = n.dtype.array_dtype
                outs.append(f"xp.asarray({v}, dtype=dtypes[{v!r}])")  # a Python number: an array of its dtype
            elif memory is None or n.name in memory.copy_outputs or n.name in self.buffers:
                outs.append(f"xp.array({v})")  # a copy: its memory is reused by the next call, or owned elsewhere
            else:
                outs.append(f"xp.asarray({v})")  # NumPy gives scalars for 0-d results; outputs are arrays
        return outs

    def function(self, i: int, n: Node) -> str:
        """The name under which op node ``n`` (op ``i``) calls its op's forward, its attributes bound once."""
        name = n.op.name if n.op.name.isidentifier() else "op"
        name = f"{name}_{i}" if n.attrs else name
        self.namespace.setdefault(name, functools.partial(n.op.forward, **n.attrs) if n.attrs else n.op.forward)
        return name

    def literal(self, value: Any) -> str:
        """Source for a literal input: a plain number as written, anything else a named constant."""
        if type(value) in (int, float, bool) and value == value and abs(value) != float("inf"):
            return repr(value)
        name = f"lit{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def allocate_buffers(self) -> dict[str, str]:
        """The memory plan made real: one byte arena, and for each node placed in it a typed view of its slot,
        named ``b<slot>`` (``b<slot>_<k>`` when the slot is seen with several shapes)."""
        memory, names, views = self.graph.memory, {}, {}
        if memory is None:
            return {}
        arena = self.device.xp.empty(memory.arena_bytes, dtype=backend.uint8.array_dtype)
        for n in (n for n in self.graph.nodes if n.name in memory.buffer_of):
            slot = memory.buffer_of[n.name]
            key = (slot, tuple(n.shape), n.dtype.name)
            if key not in views:
                views[key] = f"b{slot}" if not any(k[0] == slot for k in views) else f"b{slot}_{len(views)}"
                view = arena[memory.offsets[slot]:][:n.dtype.itemsize * math.prod(n.shape)].view(n.dtype.array_dtype)
                self.namespace[views[key]] = view.reshape(n.shape)
            names[n.name] = views[key]
        return names


#: What the generated code's names mean, above ``def run``.
HEADER = """\
# The compiled plan of graph {name}: its optimised ops as straight-line array code, one line per
# op, in the order they run. xp is the array module (NumPy, or CuPy on a GPU); each op's function is its
# forward, with its attributes bound. Names:
#   v_in0...  the arrays passed to this call (inputs[k])
#   s0...     the state arrays (parameters, buffers, optimizer slots, train step); only the commit
#             at the end writes them
#   c0...     constants: values fixed when compiling (folded, or eager tensors build() read)
#   lit0...   numbers made once (what Python source cannot spell: inf, nan)
#   b0...     the buffers of the memory plan: allocated once, reused by every call
#   v0...     the value of op 0, 1...; `del` drops one not in a buffer after its last reader
def run(inputs, states, commit=commit_all):"""


def compile_graph(graph: Graph) -> Plan:
    """The plan of an optimised graph (``nn.Graph`` compiles with this; the fast path swaps in its own)."""
    return Plan(graph)


# --------------------------------------------------------------------------------------------- commit

#: deque(maxlen=0).extend drains the map of setitem calls without running any Python bytecode, so no
#: Python signal handler (KeyboardInterrupt) can run between two copies.
_COMMIT = collections.deque(maxlen=0).extend
_ALL = itertools.repeat(Ellipsis)


def commit(targets: tuple, values: tuple) -> None:
    """What a plan's commit does: ``target[...] = value`` for each pair, in one C call."""
    _COMMIT(map(operator.setitem, targets, _ALL, values))


# ---------------------------------------------------------------------------------------------- helpers

_END = 1 << 30  # the memory plan's "read after the last op"


def as_comment(text: str) -> str:
    """Names and source lines as comment text: one printable line, whatever they hold (a saved graph's
    names come from a file). Lines are joined with spaces, and any other character that is not printable
    (NUL, a form feed) is escaped as ``repr`` escapes it, so nothing can end the comment and become code."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.splitlines()))


def origin_comment(n: Node) -> str:
    """Where op ``n`` came from. In the optimizer phase that is the update rule of one parameter (the
    node's scope): the user's line would only be the call of the graph, the same for every update op."""
    if n.phase == OPTIMIZER and n.scope:
        return f"{n.source} of {n.scope}"
    return n.source


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _reads_state(node: Node, memory: Any) -> bool:
    """Is ``node`` a state, or a view of one (an op that returns its first input's memory)?"""
    while node.kind == OP and node.op.may_alias_input and node.input_nodes:
        if memory is not None and node.name in memory.buffer_of:
            return False  # it was given a buffer of its own
        node = node.inputs[0]
    return node.kind == STATE


def _number_nodes(graph: Graph) -> set[int]:
    """ids of the values that are Python numbers at run time: the call's number inputs, and the results of
    ops whose only node inputs are such numbers (``scale * 2`` in build)."""
    numbers = {id(n) for n in graph.inputs if n.attrs.get("number")}
    if numbers:
        for n in graph.nodes:
            if n.kind == OP and not n.shape and n.input_nodes and all(id(x) in numbers for x in n.input_nodes):
                numbers.add(id(n))
    return numbers


def _graph_device(graph: Graph) -> backend.Device:
    """The device the plan runs on: the one its values live on (a graph lives on one device)."""
    return graph.nodes[0].device if graph.nodes else backend.CPU
