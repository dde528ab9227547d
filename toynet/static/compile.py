"""Compilation: turn an optimised graph into a :class:`Plan`, a generated Python function.

The function is the graph flattened into straight-line code: one line per op, each a direct call of
the op's kernel on arrays, writing into the buffers the memory plan chose::

    def run(inputs, states):
        v0 = inputs[0]
        s0 = states[0]
        v3 = k3(xp, v0, s0, s1, out=b0)        # model.0-linear-0
        ...
        return (v9,)

No Tensor objects, no autograd records, no shape checks, no dictionary lookups per op: everything
Eager mode decides at run time on every call was decided once, here. That is where Graph mode's speed
comes from. ``plan.source`` shows the generated code.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import backend
from ..ops import OPS
from ..ops._op import call_source
from .ir import CONSTANT, INPUT, OP, STATE, Graph, Node
from .passes.fuse import FusedElementwise, step_args
from .passes.memory import END


class Plan:
    """A compiled graph: call ``plan.run(input_arrays, state_arrays)`` to get the output arrays.

    State arrays are read at the start of the call and updated (in place) before it returns.
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        self.device = _graph_device(graph)
        self.state_names = [n.state_name for n in graph.nodes if n.kind == STATE]
        self.input_names = [n.name for n in graph.inputs]
        self.namespace: dict[str, Any] = {"xp": self.device.xp}
        self.source = self._generate()
        code = compile(self.source, f"<toynet plan {graph.name}>", "exec")
        exec(code, self.namespace)  # noqa: S102  (our own generated code)
        self.run = self.namespace["run"]

    # ----------------------------------------------------------------------------- codegen

    def _generate(self) -> str:
        graph = self.graph
        memory = graph.memory
        xp = self.device.xp
        if memory is not None:
            # One raw byte buffer per slot; each value placed in a slot gets a typed view (made once, here).
            self._raw = [xp.empty(nbytes, dtype=backend.uint8.array_dtype) for nbytes in memory.buffers]
            self._views: dict[tuple, str] = {}
        var: dict[int, str] = {}
        lines = ["def run(inputs, states):"]
        state_index = {name: i for i, name in enumerate(self.state_names)}
        for k, n in enumerate(graph.inputs):
            var[id(n)] = f"v_in{k}"
            lines.append(f"    v_in{k} = inputs[{k}]")
        for n in graph.nodes:
            if n.kind == STATE:
                name = f"s{state_index[n.state_name]}"
                var[id(n)] = name
                lines.append(f"    {name} = states[{state_index[n.state_name]}]  # {n.state_name}")
        ops = [n for n in graph.nodes if n.kind == OP]
        last_use = memory.last_use if memory is not None else {}
        dies_at: dict[int, list[str]] = {}
        for n in graph.nodes:
            if n.kind == CONSTANT:
                name = f"c{len(var)}"
                var[id(n)] = name
                self.namespace[name] = n.value
        for i, n in enumerate(ops):
            name = f"v{i}"
            var[id(n)] = name
            lines.append(f"    # {n.name}" + (f"    ({n.source})" if n.source else ""))
            out = None
            if memory is not None:
                if n.name in memory.buffer_of:
                    out = self._view(memory.buffer_of[n.name], n)
                elif n.name in memory.state_out:
                    out = f"s{state_index[memory.state_out[n.name]]}"
            args = [var[id(x)] if isinstance(x, Node) else self._literal(x) for x in n.inputs]
            if n.op is FusedElementwise:
                scratch = memory.scratch_of.get(n.name) if memory is not None else None
                lines += self._fused_lines(name, n, args, out, None if scratch is None else self._view(scratch, n))
            else:
                lines.append(f"    {name} = {self._call(i, n, args, out)}")
            # A fresh (unpooled) value is dropped as soon as its last reader has run, freeing memory early.
            if memory is not None and out is None and i < last_use.get(n.name, -1) < END:
                dies_at.setdefault(last_use[n.name], []).append(name)
            for dead in dies_at.pop(i, []):
                lines.append(f"    del {dead}")
        if memory is not None:
            for state_name, node_name in memory.commits.items():
                node = next(n for n in graph.nodes if n.name == node_name)
                lines.append(f"    s{state_index[state_name]}[...] = {var[id(node)]}  # update {state_name}")
        else:
            for state_name, node in graph.updates.items():
                lines.append(f"    s{state_index[state_name]}[...] = {var[id(node)]}  # update {state_name}")
        outs = []
        for n in graph.outputs:
            v = var[id(n)]
            if memory is None or n.name in memory.copy_outputs:
                v = f"{v}.copy()"
            if not n.shape:
                v = f"xp.asarray({v})"  # NumPy gives scalars for 0-d results; outputs are arrays
            outs.append(v)
        lines.append("    return (" + "".join(o + ", " for o in outs) + ")")
        return "\n".join(lines) + "\n"

    def _view(self, slot: int, node: Node) -> str:
        """The name of slot ``slot``'s raw memory viewed with ``node``'s shape and dtype."""
        key = (slot, tuple(node.shape), node.dtype.name)
        name = self._views.get(key)
        if name is None:
            name = self._views[key] = f"b{slot}_{len(self._views)}"
            nbytes = node.dtype.itemsize
            for d in node.shape:
                nbytes *= d
            self.namespace[name] = self._raw[slot][:nbytes].view(node.dtype.array_dtype).reshape(node.shape)
        return name

    def reshaped(self, buffer_name: str, shape: tuple) -> str:
        """A name for buffer ``buffer_name`` viewed with another ``shape``, made once at compile time."""
        name = f"{buffer_name}_as{len(self.namespace)}"
        self.namespace[name] = self.namespace[buffer_name].reshape(shape)
        return name

    def _literal(self, value: Any) -> str:
        """Python source for a literal input: its repr, or a named constant when repr is not source
        (``inf``, ``nan``)."""
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            name = f"lit{len(self.namespace)}"
            self.namespace[name] = value
            return name
        return repr(value)

    def _kernel(self, key: str, op: Any, attrs: dict) -> str:
        name = f"k_{key}"
        self.namespace[name] = functools.partial(op.forward, **attrs) if attrs else op.forward
        return name

    def _call(self, i: int, n: Node, args: list[str], out: str | None) -> str:
        """The expression computing op node ``n``: the ufunc it is, its own ``emit`` rule, or its forward."""
        op = n.op
        if op.ufunc and not n.attrs:
            return call_source(f"xp.{op.ufunc}", args, out)
        if op.emit is not None:
            code = op.emit(args, n.inputs, None if out is None else OutName(out, self), **n.attrs)
            if code is not None:
                return code
        return call_source(self._kernel(str(i), op, n.attrs), ["xp", *args], out)

    def _fused_lines(self, name: str, n: Node, args: list[str], out: str | None, scratch: str | None) -> list[str]:
        """Inline a fused kernel: its steps one after the other, in place in one buffer."""
        program = n.attrs["program"]
        lines = [f"    # fused kernel: {' > '.join(step['op'] for step in program)}"]
        prev = None
        for index, step in enumerate(program):
            op = OPS[step["op"]]
            step_inputs = step_args(step, args, prev, literal=self._literal)
            last = index == len(program) - 1
            target = out if (last or scratch is None) else scratch
            if target is None and prev is not None:
                target = prev
            result = name if last else f"{name}_t"
            if op.ufunc and not step["attrs"]:
                call = call_source(f"xp.{op.ufunc}", step_inputs, target)
            else:
                call = call_source(self._kernel(f"{name}_{index}", op, step["attrs"]), ["xp", *step_inputs], target)
            if target is None:
                call = f"xp.asarray({call})"  # step 0 without a buffer: keep a writable array, not a scalar
            lines.append(f"    {result} = {call}")
            prev = result
        if len(program) > 1:
            lines.append(f"    del {name}_t")
        return lines



class OutName(str):
    """The name of the array an op writes into, as its ``emit`` rule receives it: a plain string in the
    generated code, plus :meth:`reshaped` for rules that must write through a view of another shape."""

    def __new__(cls, name: str, plan: Plan) -> OutName:
        self = super().__new__(cls, name)
        self.plan = plan
        return self

    def reshaped(self, shape: tuple) -> str | None:
        """A name for this buffer seen with ``shape``, made once now; None for a state's array, which
        arrives only with each call."""
        return self.plan.reshaped(self, shape) if self in self.plan.namespace else None


def _graph_device(graph: Graph):
    for n in graph.nodes:
        if n.kind in (INPUT, STATE, CONSTANT, OP):
            return n.device
    return backend.CPU
