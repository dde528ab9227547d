"""The fast path's compiler: the lesson's plan (:mod:`toynet.static.compile`) with the tricks that save
Python calls on small arrays, to the same values. Where the lesson writes every op as a call of its
``forward``, this one writes the ufunc an elementwise op is (``xp.add(a, b, out=b0_0)``), the one-line
source of :data:`toynet.ops.fast.emit.EMIT` (``v3.reshape((2000,))``), the kernel ChooseKernels timed
fastest, reshapes of planned buffers made once (``b0_0_as6``), Python numbers read by a ufunc as 0-d arrays
of its dtype made once (``lit14``), and fused kernels inlined step by step. ``plan.body`` and
``plan.output_sources`` are what the repeat call (:mod:`toynet.nn.fast.repeat_call`) inlines.

What follows is the lesson compiler's explanation, which holds here too.

Compilation: turn an optimised graph into a :class:`Plan`, a generated Python function.

The function is the graph flattened into straight-line code: one block per op, each a direct call on
arrays (the ufunc the op is, the line its ``emit`` rule writes, or its ``forward``), writing into the
buffers the memory plan chose::

    # The compiled plan of graph TrainGraph_0: ...      (a header explaining the names)
    def run(inputs, states, commit=None):
        v_in0 = inputs[0]
        s0 = states[0]  # model.0.weight
        ...
        # ---- forward: the model and the loss
        # model.0-linear-0    (poly.py:41 in build: loss = self.loss_fn(self.model(x), y))
        v0 = xp.add(xp.matmul(v_in0, s0.T, out=b0_0), s1, out=b0_0)
        ...
        # ---- commit: ...
        if commit is None:
            _commit(map(_setitem, (s0, s1), _ALL, (v7, v9)))
        else:
            commit((s0, s1), (v7, v9))
        return (xp.asarray(v3),)

No Tensor objects, no autograd records, no shape checks, no dictionary lookups per op: everything
Eager mode decides at run time on every call was decided once, here. That is where Graph mode's speed
comes from. ``plan.source`` shows the generated code.

**A step is all or nothing.** No op writes into a state's array: a training step's new parameters,
optimizer slots and step counter are computed into buffers of their own (the memory plan keeps them to
the end), and the last statement copies them all into the state arrays. An error anywhere before it (an
overflow raised by ``numpy.errstate``, a shape error, a Ctrl-C) leaves every state as it was. The copy is
one C-level call, ``deque(maxlen=0).extend(map(operator.setitem, ...))``: CPython runs a Python-level
signal handler, and so raises ``KeyboardInterrupt``, only between bytecodes of Python code, so a
Ctrl-C during the copy is raised after it, once every state is written. (A caller with Python code to
add to the commit, such as a learning-rate scheduler's step, passes ``commit``: it receives the state
arrays and their new values and must copy them itself; ``nn.Graph`` defers SIGINT around it.)
Copying costs one pass over the states' memory; swapping the arrays into the state tensors instead
would cost nothing, but would change the arrays a user may hold (``p.numpy()`` shares its memory) and
let the next step write into the old ones.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import re
from typing import Any

from ... import backend
from ...mode import fast_replacement
from ...ops import OPS
from ...ops.fast.emit import EMIT, KERNELS, UFUNCS, bind_ones, call_source
from .. import compile as lesson
from ..compile import PHASE_TITLES, _graph_device, _number_nodes, _reads_state, _tuple, as_comment, origin_comment
from ..ir import CONSTANT, OP, STATE, Graph, Node
from ..passes.fuse import FusedElementwise, step_args
from ..passes.memory import END

#: What the generated code's names mean, for the header of ``plan.source``: (pattern, explanation).
NAMES = [
    (r"v_in\d+", "v_in0, v_in1...  the arrays passed to this call (inputs[k])"),
    (r"s\d+", "s0, s1...        the state arrays (parameters, buffers, optimizer slots, train step) from\n"
              "                 states[k]; only the commit at the end writes them"),
    (r"c\d+", "c0, c1...        constants: values fixed when compiling (folded, or eager tensors the build read)"),
    (r"lit\d+", "lit0...          numbers made once: 0-d arrays of the dtype an op computes in (NumPy converts\n"
                "                 a Python number on every call), or what Python source cannot spell (inf, nan)"),
    (r"b\d+_\d+", "b2_5...          buffer 2 of the memory plan seen with one shape and dtype: allocated once,\n"
                  "                 reused by every call (b2_5_as9: the same memory seen with another shape)"),
    (r"k_\w+", "k_4, k_v9_1...   an op's forward with its attributes bound, for ops with no one-line form"),
    (r"v\d+", "v0, v1...        the value of op 0, 1...; `del` drops one not in a buffer after its last reader"),
    (r"v\d+_t", "v9_t             a fused kernel's intermediate result, between its steps"),
]


class FastPlan:
    """A compiled graph: call ``plan.run(input_arrays, state_arrays)`` to get the output arrays.

    State arrays are read at the start of the call and written once, all together, just before it
    returns (see the module's docstring); ``plan.run(inputs, states, commit)`` hands that write to
    ``commit(state_arrays, new_values)``. An input the graph takes as a Python number (``number_inputs``)
    is passed as the number itself.
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        self.device = _graph_device(graph)
        self.state_names = [n.state_name for n in graph.nodes if n.kind == STATE]
        self.input_names = [n.name for n in graph.inputs]
        #: Positions in ``inputs`` of the Python numbers of the call (a plain int or float each call).
        self.number_inputs = [k for k, n in enumerate(graph.inputs) if n.attrs.get("number")]
        self.namespace: dict[str, Any] = {"xp": self.device.xp, "_commit": _COMMIT, "_setitem": operator.setitem,
                                          "_ALL": _ALL}
        self.source = self._generate()
        code = compile(self.source, f"<toynet plan {graph.name}>", "exec")
        exec(code, self.namespace)  # noqa: S102  (our own generated code)
        self.run = self.namespace["run"]

    # ----------------------------------------------------------------------------- codegen

    def _generate(self) -> str:
        """The source of ``run``: a header naming what the names mean, then the reads of inputs and
        state, one block per op, the outputs, the commit of every state update, and the return."""
        memory = self.graph.memory
        if memory is not None:
            # One raw byte arena, a slice of it per slot; each value placed in a slot gets a typed view of
            # that slice (made once, here).
            xp = self.device.xp
            arena = xp.empty(memory.arena_bytes, dtype=backend.uint8.array_dtype)
            self._raw = [arena[offset:offset + nbytes] for offset, nbytes in zip(memory.offsets, memory.buffers)]
            self._views: dict[tuple, str] = {}
        self._var: dict[int, str] = {}   # id(node) -> its name in the generated code
        self._state_index = {name: i for i, name in enumerate(self.state_names)}
        self._temporaries: set[str] = set()   # fused kernels' intermediate results
        self._numbers = _number_nodes(self.graph)  # values that are Python numbers at run time
        #: The function's body without its return, and the expression of each output: what a caller that
        #: generates its own function around the plan inlines (toynet.nn.fast.repeat_call's repeat call).
        self.body = self._reads() + self._op_lines() + self._commits()
        self.output_sources = self._outputs()
        body = self.body + [f"    return {_tuple(self.output_sources)}"]
        source = "\n".join(self._header() + ["def run(inputs, states, commit=None):"] + body) + "\n"
        del self._var, self._temporaries, self._numbers  # bookkeeping of the code generation only
        return source

    def _header(self) -> list[str]:
        """Comments saying what each kind of name in the code means (only the kinds it uses)."""
        names = set(self.namespace) | set(self._var.values()) | self._temporaries
        lines = [f"# The compiled plan of graph {as_comment(self.graph.name)}: its optimised ops as straight-line",
                 "# array code, one block per op, in the order they run. xp is the array module (NumPy, or CuPy",
                 "# on a GPU). Names:"]
        for pattern, text in NAMES:
            if any(re.fullmatch(pattern, name) for name in names):
                lines += [f"#   {line}" for line in text.splitlines()]
        return lines

    def _reads(self) -> list[str]:
        """Bind the call's input arrays and the state arrays to short names; constants live in the namespace."""
        lines, constants = [], []
        for k, n in enumerate(self.graph.inputs):
            self._var[id(n)] = f"v_in{k}"
            lines.append(f"    v_in{k} = inputs[{k}]")
        for n in self.graph.nodes:
            if n.kind == STATE:
                index = self._state_index[n.state_name]
                self._var[id(n)] = f"s{index}"
                lines.append(f"    s{index} = states[{index}]  # {as_comment(n.state_name)}")
            elif n.kind == CONSTANT:
                name = self._var[id(n)] = f"c{len(constants)}"
                constants.append(name)
                value = n.value
                if getattr(value, "shape", None) == ():  # a NumPy scalar (a folded sum): a 0-d array, which
                    value = self.device.xp.asarray(value)  # NumPy's ufuncs take without converting it each call
                self.namespace[name] = value
        return lines

    def _op_lines(self) -> list[str]:
        """One block per op: a comment saying where it came from, then the line(s) computing it."""
        memory = self.graph.memory
        last_use = memory.last_use if memory is not None else {}
        dies_at: dict[int, list[str]] = {}
        lines = []
        phase = None
        for i, n in enumerate(n for n in self.graph.nodes if n.kind == OP):
            if n.phase != phase:
                phase = n.phase
                lines.append(f"    # ---- {PHASE_TITLES.get(phase, phase)}")
            name = self._var[id(n)] = f"v{i}"
            origin = origin_comment(n)
            lines.append(f"    # {as_comment(n.name)}" + (f"    ({as_comment(origin)})" if origin else ""))
            chosen = n.kernel or (n.attrs.get("algorithm") if n.attrs.get("algorithm", "taps") != "taps" else "")
            if chosen:
                lines.append(f"    # kernel: {as_comment(chosen)}, the fastest when compiling (ChooseKernels)")
            out = self._out(n)
            args = [self._var[id(x)] if isinstance(x, Node) else self._literal(x) for x in n.inputs]
            if n.op is FusedElementwise:
                lines += self._fused_lines(name, n, args, out)
            else:
                lines.append(f"    {name} = {self._call(i, n, args, out)}")
            if id(n) in self._numbers:
                # Computed from the call's Python numbers only: keep it a Python number, as Eager mode's
                # Python arithmetic would, so it stays 'weak' in NumPy's promotion (x32 * it is float32).
                lines.append(f"    {name} = {name}.item()")
            # A fresh (unpooled) value is dropped as soon as its last reader has run, freeing memory early.
            if memory is not None and out is None and i < last_use.get(n.name, -1) < END:
                dies_at.setdefault(last_use[n.name], []).append(name)
            lines += [f"    del {dead}" for dead in dies_at.pop(i, [])]
        return lines

    def _out(self, n: Node) -> str | None:
        """Where the memory plan has op ``n`` write: a buffer view, or nowhere (None: a fresh array)."""
        memory = self.graph.memory
        if memory is None or n.name not in memory.buffer_of:
            return None
        return self._view(memory.buffer_of[n.name], n)

    def _commits(self) -> list[str]:
        """The commit: every state's new value copied into the state's array, in one C-level call (or
        handed to ``commit``). A new value that still reads a state's memory (``prev.copy_(cur)``: the
        old ``cur``) is copied first, so no order of the copies can mix old and new values."""
        memory = self.graph.memory
        if memory is not None:
            by_name = {n.name: n for n in self.graph.nodes}
            updates = {state: by_name[node_name] for state, node_name in memory.commits.items()}
        else:
            updates = {state: n for state, n in self.graph.updates.items() if n.state_name != state}
        if not updates:
            return []
        lines = ["    # ---- commit: every state update at once, nothing written before (a failed step changes",
                 "    # nothing); one C call, so a Ctrl-C cannot split it"]
        targets, values = [], []
        for state, node in updates.items():
            value = self._var[id(node)]
            if _reads_state(node, memory):
                lines.append(f"    {value}_old = {value}.copy()  # the old value of a state, for {as_comment(state)}")
                value = f"{value}_old"
            targets.append(f"s{self._state_index[state]}")
            values.append(value)
        targets, values = _tuple(targets), _tuple(values)
        return lines + ["    if commit is None:",
                        f"        _commit(map(_setitem, {targets}, _ALL, {values}))",
                        "    else:",
                        f"        commit({targets}, {values})"]

    def _outputs(self) -> list[str]:
        """The outputs, arrays the caller may keep (after the commit: an output that is a state shows it
        after the step, as the eager tensor would)."""
        memory = self.graph.memory
        outs = []
        for n in self.graph.outputs:
            v = self._var[id(n)]
            if id(n) in self._numbers:
                outs.append(f"xp.asarray({v}, dtype={n.dtype.array_dtype.name!r})")  # a Python number
                continue
            if memory is None or n.name in memory.copy_outputs:
                v = f"{v}.copy()"  # its memory is reused or owned elsewhere (a view, a state)
            if not n.shape:
                v = f"xp.asarray({v})"  # NumPy gives scalars for 0-d results; outputs are arrays
            outs.append(v)
        return outs

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

    def _ufunc_or_forward(self, key: str, op: Any, attrs: dict, args: list[str], out: str | None) -> str:
        """A call of the ufunc the op is (``xp.add(a, b)``), or else of its forward with the attributes bound
        once, here (``k_4``)."""
        if op.name in UFUNCS and not attrs:
            return call_source(f"xp.{UFUNCS[op.name]}", args, out)
        kernel = f"k_{key}"
        self.namespace[kernel] = functools.partial(op.forward, **attrs) if attrs else op.forward
        return call_source(kernel, ["xp", *args], out)

    def _call(self, i: int, n: Node, args: list[str], out: str | None) -> str:
        """The expression computing op node ``n``: its own ``emit`` rule where it has one that applies,
        else the ufunc it is or its forward."""
        if n.kernel:  # the kernel ChooseKernels timed fastest, if it fits the buffer the memory plan gave
            out_name = None if out is None else OutName(out, self)
            code = KERNELS[n.op.name](args, n.inputs, out_name, **n.attrs).get(n.kernel)
            if code is not None:
                bind_ones(code, self.namespace, self.device.xp)  # the vectors of ones it sums with
                return code
        view = self._view_of_buffer(n)
        if view is not None:
            return view
        if n.op.name in EMIT:
            code = EMIT[n.op.name](args, n.inputs, None if out is None else OutName(out, self), **n.attrs)
            if code is not None:
                return code
        if n.op.name in UFUNCS and not n.attrs and id(n) not in self._numbers:
            args = [a if isinstance(x, Node) else self._typed_literal(x, n, a) for x, a in zip(n.inputs, args)]
        return self._ufunc_or_forward(str(i), n.op, n.attrs, args, out)

    def _view_of_buffer(self, n: Node) -> str | None:
        """A reshape of a value the memory plan keeps in a buffer is a view of that buffer: made once, now,
        instead of on every call (where a NumPy reshape costs more than the work of a small op)."""
        memory = self.graph.memory
        source = n.inputs[0] if n.inputs else None
        if n.op is not OPS["reshape"] or memory is None or not isinstance(source, Node) \
                or source.name not in memory.buffer_of:
            return None
        return self.reshaped(self._view(memory.buffer_of[source.name], source), tuple(n.shape))

    def _typed_literal(self, value: Any, n: Node, source: str) -> str:
        """A Python number a ufunc node reads, as a 0-d array of the dtype the node computes in, made once:
        NumPy converts a Python number on every call (about 0.4 us, more than adding two small arrays),
        an array of the right dtype not at all. The values are the same: NumPy casts a Python number to
        the array's dtype anyway (NEP 50). Only where the inputs and the result share one numeric dtype
        (not a comparison) and the number fits it; anything else stays as written (``source``)."""
        dtype = n.dtype.array_dtype
        if type(value) not in (int, float) or any(isinstance(x, Node) and x.dtype is not n.dtype for x in n.inputs):
            return source
        if dtype.kind in "iu":
            info = self.device.xp.iinfo(dtype)
            if type(value) is not int or not info.min <= value <= info.max:
                return source
        elif dtype.kind != "f" or (type(value) is int and abs(value) >= 2 ** 53):
            return source
        name = f"lit{len(self.namespace)}"
        self.namespace[name] = self.device.xp.asarray(value, dtype=dtype)
        return name

    def _fused_lines(self, name: str, n: Node, args: list[str], out: str | None) -> list[str]:
        """Inline a fused kernel: its steps one after the other, in place in one buffer."""
        program = n.attrs["program"]
        lines = [f"    # fused kernel: {as_comment(' > '.join(step['op'] for step in program))}"]
        prev = None
        for index, step in enumerate(program):
            op = OPS[step["op"]]
            step_inputs = step_args(step, args, prev, literal=self._literal)
            last = index == len(program) - 1
            target = out
            if target is None and prev is not None:
                target = prev  # no buffer planned: every later step writes over the array step 0 made
            result = name if last else f"{name}_t"
            if not last:
                self._temporaries.add(result)
            call = self._ufunc_or_forward(f"{name}_{index}", op, step["attrs"], step_inputs, target)
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

    def __new__(cls, name: str, plan: FastPlan) -> OutName:
        self = super().__new__(cls, name)
        self.plan = plan
        return self

    def reshaped(self, shape: tuple) -> str | None:
        """A name for this buffer seen with ``shape``, made once now; None for a state's array, which
        arrives only with each call."""
        return self.plan.reshaped(self, shape) if self in self.plan.namespace else None


#: The commit's machinery, all C (see toynet.static.compile.commit).
_COMMIT = collections.deque(maxlen=0).extend
_ALL = itertools.repeat(Ellipsis)


@fast_replacement(lesson, "compile_graph")
def compile_graph(graph: Graph) -> FastPlan:
    """The fast plan of an optimised graph."""
    return FastPlan(graph)
