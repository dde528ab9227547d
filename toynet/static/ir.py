"""The static design's data structures: :class:`Node` and :class:`Graph`.

A static graph is a program written down before it runs. Each :class:`Node` is one value the program
computes: an op applied to earlier nodes, or a value that comes from outside (an input of the call,
a piece of *state* such as a parameter, or a constant). The :class:`Graph` keeps the nodes in an order
where every node comes after its inputs, plus three lists that give the program its interface:

* ``inputs``: what each call passes in (``x``, ``y``);
* ``outputs``: what each call returns;
* ``updates``: the new value of each piece of state after a call (a training step's new weights,
  momentum buffers, BatchNorm running statistics, the train-step counter).

It prints as text, one node a line, like a jaxpr or a torch.fx graph::

    %model.0-matmul-1 : f32[20, 1] = matmul(%x, %model.0-permute-0)   # poly.py:41 in forward

A *pass* rewrites a graph into another (:mod:`toynet.static.passes`): it works on a copy, so the graph
before it stays to be printed or drawn, and says what it changed in a :class:`PassReport`.
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator

from ..backend import Device, DType

#: Where in a training step a node belongs.
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
PHASES = (FORWARD, BACKWARD, OPTIMIZER)

#: What a node is. Only "op" nodes compute; the others are given values before the plan runs.
INPUT, STATE, CONSTANT, OP = "input", "state", "constant", "op"


@dataclass(slots=True, eq=False, repr=False)
class Node:
    """One value of a static graph.

    Attributes:
        name: unique within the graph; op nodes are named ``<module path>-<op>-<k>`` as OneFlow does.
        kind: ``"input"``, ``"state"``, ``"constant"`` or ``"op"``.
        op: the :class:`toynet.ops.Op` (op nodes only), the very object Eager mode runs.
        inputs: the op's arguments: other nodes, or Python numbers kept as literals.
        attrs: the op's attributes (``dim=1``, ``stride=(2, 2)``...).
        shape: the value's shape, known without computing it (shape rules).
        dtype: the value's dtype, known the same way.
        device: where the value will live.
        phase: ``"forward"``, ``"backward"`` or ``"optimizer"``.
        scope: the module path the op was traced in (``"model.features.0.0"``), ``""`` at graph level.
        source: where in the user's code the op came from (``"train.py:12 in forward: y = self.fc(x)"``).
        state_name: for state nodes, the name in ``graph.state_dict()``.
        state_kind: for state nodes, whether it is a ``"parameter"``, ``"buffer"``, ``"optimizer"`` slot
            or ``"system"`` value (the train step).
        value: for constant nodes, the array.
        kernel: for op nodes, which of the op's ``kernels`` computes it (chosen by timing when compiling,
            :mod:`toynet.static.passes.fast.kernels`); ``""``: the op's usual code.
    """

    name: str
    kind: str
    shape: tuple
    dtype: DType
    device: Device
    _: KW_ONLY
    op: Any = None
    inputs: tuple = ()
    attrs: dict = field(default_factory=dict)
    phase: str = FORWARD
    scope: str = ""
    source: str = ""
    state_name: str = ""
    state_kind: str = ""
    value: Any = None
    requires_grad: bool = False
    kernel: str = ""

    def __post_init__(self) -> None:
        # (Copies of a graph share a node's attrs dict: a pass replaces a node's attrs, never edits them.)
        self.shape, self.inputs, self.attrs = tuple(self.shape), tuple(self.inputs), self.attrs or {}

    def redirect_inputs(self, replaced: dict[int, "Node"]) -> None:
        """Read replacement nodes (``id(old) -> new``) instead of the ones a pass removed."""
        if replaced:
            self.inputs = tuple(replaced.get(id(x), x) if isinstance(x, Node) else x for x in self.inputs)

    @property
    def input_nodes(self) -> list["Node"]:
        """The inputs that are nodes (not literal numbers)."""
        return [x for x in self.inputs if isinstance(x, Node)]

    @property
    def op_name(self) -> str:
        return self.op.name if self.op is not None else self.kind

    def type_str(self) -> str:
        """``f32[20, 3]``: dtype and shape, as the text form shows them."""
        return f"{short_dtype(self.dtype)}[{', '.join(str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"<Node %{self.name} : {self.type_str()} {self.kind}{' ' + self.op_name if self.op else ''}>"


_SHORT_DTYPES = {"float16": "f16", "float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32",
                 "int8": "i8", "uint8": "u8", "bool": "bool"}


def short_dtype(dtype: DType) -> str:
    return _SHORT_DTYPES.get(dtype.name, dtype.name)


def format_arg(x: Any) -> str:
    return f"%{x.name}" if isinstance(x, Node) else repr(x)


@dataclass(eq=False, repr=False)
class Graph:
    """A traced program: nodes in dependency order plus its inputs, outputs and state updates.

    ``output_structure`` says how to rebuild build()'s return value around ``outputs`` (see
    :func:`toynet.static.trace.unflatten`); ``updates`` maps each state's name to the node whose value it
    holds after a call; ``memory`` is set by the memory-planning pass.
    """

    name: str
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Node] = field(default_factory=list)
    outputs: list[Node] = field(default_factory=list)
    output_structure: Any = None
    updates: dict[str, Node] = field(default_factory=dict)
    memory: Any = None
    _names: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------------------ building

    def unique_name(self, base: str) -> str:
        name, k = base, 1
        while name in self._names:
            name = f"{base}_{k}"
            k += 1
        self._names.add(name)
        return name

    def add(self, node: Node) -> Node:
        node.name = self.unique_name(node.name)
        self.nodes.append(node)
        return node

    def rewrite(self, replace: Callable[[Node], "Node | None"]) -> dict[int, Node]:
        """Walk the nodes in order and let ``replace(node)`` say what becomes of each: the node itself (kept),
        another node (its readers, the outputs and the updates read that one instead: a new node takes its
        place, an earlier one is simply shared), or None (dropped: nothing may read it). Each node is shown
        with its inputs already replaced. Returns ``id(old) -> new`` of what was replaced."""
        replaced: dict[int, Node] = {}
        kept: dict[int, Node] = {}           # id -> node, in order (a node shared by several is kept once)
        for node in self.nodes:
            node.redirect_inputs(replaced)
            new = replace(node)
            if new is not None:
                kept.setdefault(id(new), new)
            if new is not node and new is not None:
                replaced[id(node)] = new
        self.nodes = list(kept.values())
        self.redirect_roots(replaced)
        return replaced

    # ------------------------------------------------------------------------------- queries

    @property
    def states(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == STATE]

    def state(self, name: str) -> Node:
        for n in self.nodes:
            if n.kind == STATE and n.state_name == name:
                return n
        raise KeyError(f"graph {self.name} has no state named {name!r}")

    @property
    def op_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == OP]

    def users(self) -> dict[int, list[Node]]:
        """id(node) -> the op nodes that read it."""
        result: dict[int, list[Node]] = {id(n): [] for n in self.nodes}
        for n in self.nodes:
            for x in n.input_nodes:
                result[id(x)].append(n)
        return result

    def redirect_roots(self, replaced: dict[int, Node]) -> None:
        """Point outputs and updates at replacement nodes (``id(old) -> new``), after a pass swapped nodes."""
        self.outputs = [replaced.get(id(n), n) for n in self.outputs]
        self.updates = {k: replaced.get(id(n), n) for k, n in self.updates.items()}

    def roots(self) -> list[Node]:
        """The nodes the program must produce: outputs and state updates."""
        return list(self.outputs) + list(self.updates.values())

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def count_ops(self, phases: Iterable[str] = PHASES) -> int:
        phases = set(phases)
        return sum(1 for n in self.nodes if n.kind == OP and n.phase in phases)

    # ------------------------------------------------------------------------------- copying

    def copy(self) -> "Graph":
        """A graph with fresh Node objects (so a pass can rewrite it while the original stays)."""
        new: dict[int, Node] = {}
        for n in self.nodes:
            new[id(n)] = replace(n, inputs=tuple(new[id(x)] if isinstance(x, Node) else x for x in n.inputs))
        return replace(self, nodes=list(new.values()), inputs=[new[id(n)] for n in self.inputs],
                       outputs=[new[id(n)] for n in self.outputs], _names=set(self._names),
                       updates={k: new[id(v)] for k, v in self.updates.items()})

    # ------------------------------------------------------------------------------- printing

    def format(self, show_source: bool = False, phases: Iterable[str] = PHASES) -> str:
        """The program as text: inputs, state, constants, then one op a line, then outputs and updates."""
        phases = set(phases)
        head = ", ".join(f"%{n.name}: {n.type_str()}" for n in self.inputs)
        lines = [f"graph {self.name}({head}) {{"]
        for n in self.nodes:
            if n.kind == STATE:
                lines.append(f"  %{n.name} : {n.type_str()} = {n.state_kind or 'state'}()")
            elif n.kind == CONSTANT:
                lines.append(f"  %{n.name} : {n.type_str()} = constant()")
        current_phase = None
        for n in self.nodes:
            if n.kind != OP or n.phase not in phases:
                continue
            if n.phase != current_phase:
                current_phase = n.phase
                lines.append(f"  # {current_phase}")
            args = ", ".join(format_arg(x) for x in n.inputs)
            label = n.op.describe(**n.attrs)
            line = f"  %{n.name} : {n.type_str()} = {label}({args})" + (f"  kernel={n.kernel}" if n.kernel else "")
            if show_source and n.source:
                line += f"    # {n.source}"
            lines.append(line)
        lines.append("  return " + ", ".join(f"%{n.name}" for n in self.outputs))
        for state_name, n in self.updates.items():
            lines.append(f"  update {state_name} <- %{n.name}")
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {self.count_ops()} ops, {len(self.outputs)} outputs>"


# ------------------------------------------------------------------------------------------- passes


@dataclass
class PassReport:
    """What one pass did: the graphs before and after, and which nodes it removed, folded, merged or fused."""

    name: str
    before: Graph
    after: Graph
    removed: list[str] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)
    merged: dict[str, str] = field(default_factory=dict)       # removed duplicate -> the node kept
    fused: dict[str, list[str]] = field(default_factory=dict)  # new fused node -> the nodes it replaced
    kernels: dict[str, str] = field(default_factory=dict)      # node -> the kernel chosen, and the timings
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ops_before(self) -> int:
        return self.before.count_ops()

    @property
    def ops_after(self) -> int:
        return self.after.count_ops()

    def summary(self) -> str:
        parts = [f"{self.name}: {self.ops_before} -> {self.ops_after} ops"]
        if self.removed:
            parts.append(f"removed {len(self.removed)}")
        if self.folded:
            parts.append(f"folded {len(self.folded)}")
        if self.merged:
            parts.append(f"merged {len(self.merged)}")
        if self.fused:
            parts.append(f"fused {sum(len(v) for v in self.fused.values())} ops into {len(self.fused)} kernels")
        parts.extend(self.notes)
        return ", ".join(parts) + f" ({self.seconds * 1000:.1f} ms)"

    def details(self) -> str:
        """Every change, one a line (what ``graph.debug(3)`` prints with the before/after texts)."""
        lines = [self.summary()]
        lines += [f"  removed  %{n}" for n in self.removed]
        lines += [f"  folded   %{n} into a constant" for n in self.folded]
        lines += [f"  merged   %{a} into %{b}" for a, b in self.merged.items()]
        lines += [f"  fused    %{k} <- " + ", ".join(f"%{n}" for n in v) for k, v in self.fused.items()]
        lines += [f"  kernel   %{k}: {v}" for k, v in self.kernels.items()]
        return "\n".join(lines)


Pass = Callable[[Graph], "tuple[Graph, PassReport]"]

#: Every pass by name, the fast path's too: ``graph.config.enable_pass(name)`` checks names against it.
PASSES: dict[str, Pass] = {}


def graph_pass(name: str) -> Callable[[Callable[..., Graph]], Pass]:
    """Decorator: ``run(graph, report) -> graph``, which rewrites its own copy of a graph and fills the report,
    becomes the pass ``name``, ``pass(graph) -> (new graph, report)``, registered in :data:`PASSES`. (Extra
    keyword arguments of the pass are handed to ``run``.)"""
    def make(run: Callable[..., Graph]) -> Pass:
        def graph_pass(graph: Graph, **options: Any) -> tuple[Graph, PassReport]:
            return timed(name, lambda copy, report: run(copy, report, **options), graph)
        graph_pass.__name__, graph_pass.__qualname__, graph_pass.__doc__ = run.__name__, run.__qualname__, run.__doc__
        graph_pass.__module__ = run.__module__
        graph_pass.name = name  # type: ignore[attr-defined]
        PASSES[name] = graph_pass
        return graph_pass
    return make


def timed(name: str, fn: Callable[[Graph, PassReport], Graph], graph: Graph) -> tuple[Graph, PassReport]:
    """Run ``fn`` on a copy of ``graph``, filling and timing a report."""
    start, report = time.perf_counter(), PassReport(name, before=graph, after=graph)
    report.after = fn(graph.copy(), report)
    report.seconds = time.perf_counter() - start
    return report.after, report


def format_bytes(nbytes: int) -> str:
    """A size the way the reports print it: ``1.2 MB``, ``0.3 kB``, ``12 B``."""
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e3:.1f} kB" if nbytes >= 1e3 else f"{nbytes} B"
