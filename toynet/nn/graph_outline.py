"""The tagged outline of an ``nn.Graph``: what ``print(graph)`` and ``graph.debug(1)`` show.

One model serves both printers and the visualiser: a tree of :class:`Entry` objects, each a tag
(GRAPH, CONFIG, MODULE, PARAMETER, BUFFER, INPUT, OUTPUT), a name and a description::

    (GRAPH:LinearTrainGraph_0:LinearTrainGraph): (
      (CONFIG:config:GraphConfig(training=True, ))
      (MODULE:model:Sequential()): (
        (MODULE:model.0:Linear(in_features=3, out_features=1, bias=True)): (
          (PARAMETER:model.0.weight:tensor(..., size=(1, 3), dtype=toynet.float32, requires_grad=True)): ()
          ...

Before the first call it holds the module tree; tracing adds the INPUT and OUTPUT entries of the graph
and of every module call (a module called twice gets two sets).
"""

from __future__ import annotations

from typing import Any, Iterator

from ..dynamic.printing import meta_repr
from ..static.arguments import flatten
from ..dynamic.tensor import Tensor

# Tags whose entries print as blocks (`header: (...)`), as leaves with `: ()`, or as bare headers.
_BLOCK_TAGS = ("GRAPH", "MODULE")
_EMPTY_BLOCK_TAGS = ("PARAMETER", "BUFFER")


class Entry:
    """One tagged line of the outline, with the entries nested under it."""

    __slots__ = ("tag", "name", "text", "children", "module", "node")

    def __init__(self, tag: str, name: str, text: str, module: Any = None, node: str | None = None):
        self.tag, self.name, self.text = tag, name, text
        self.children: list[Entry] = []
        self.module = module
        #: For an INPUT/OUTPUT traced as a lazy tensor: the name of the graph node holding its value
        #: (how toynet.viz connects the outline to the static graph).
        self.node = node

    def header(self) -> str:
        if self.tag == "OPERATOR":  # the whole line is made by graph_debug.operator_line
            return self.text
        if self.text.startswith("<class "):  # a non-tensor input or output: OneFlow flags it
            return f"[WARNING]({self.tag}:{self.name}:{self.text})"
        return f"({self.tag}:{self.name}:{self.text})"

    def walk(self) -> Iterator["Entry"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def render(self) -> str:
        """The entry and its children, nested by two spaces per level, as OneFlow prints a graph."""
        head = self.header()
        if self.tag in _EMPTY_BLOCK_TAGS:
            return head + ": ()"
        if self.tag not in _BLOCK_TAGS:
            return head
        if not self.children:
            return head + ": ()"
        body = "\n".join(child.render() for child in self.children)
        return head + ": (\n" + _indent(body, 2) + "\n)"

    def __repr__(self) -> str:
        return f"<Entry {self.header()} with {len(self.children)} children>"


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in text.split("\n"))


def tensor_entry(tag: str, name: str, t: Tensor) -> Entry:
    return Entry(tag, name, meta_repr(t), node=t.node.name if t.node is not None else None)


def value_entry(tag: str, name: str, value: Any) -> Entry:
    """An input or output that is not a tensor: OneFlow marks it with a warning."""
    return Entry(tag, name, repr(type(value)))


def io_entry(tag: str, name: str, value: Any) -> Entry:
    """The INPUT or OUTPUT entry of one value, a tensor or not."""
    return tensor_entry(tag, name, value) if isinstance(value, Tensor) else value_entry(tag, name, value)


class OutlineRecorder:
    """Collects the INPUT/OUTPUT entries of one trace: the graph's own and each module call's."""

    def __init__(self, graph_name: str):
        self.graph_name = graph_name
        self.graph_inputs: list[Entry] = []
        self.graph_outputs: list[Entry] = []
        self.module_inputs: dict[str, list[Entry]] = {}
        self.module_outputs: dict[str, list[Entry]] = {}
        #: op name -> the Python stack that made it (graph.debug(op_repr_with_py_stack=True); see graph_pystack)
        self.op_stacks: dict[str, str] = {}

    def io_entries(self, tag: str, prefix: str, values: Any) -> list[Entry]:
        """One entry per leaf of a module call's (nested) arguments or result."""
        leaves, _ = flatten(values)
        return [io_entry(tag, f"{prefix}-{tag.lower()}_{i}", v) for i, v in enumerate(leaves)]

    def on_module_call(self, phase: str, path: str, module: Any, values: Any) -> list[Entry]:
        if phase == "enter":
            entries = self.io_entries("INPUT", f"_{path}", values)
            self.module_inputs.setdefault(path, []).extend(entries)
        else:
            entries = self.io_entries("OUTPUT", f"_{path}", values)
            self.module_outputs.setdefault(path, []).extend(entries)
        return entries


def module_entry(path: str, module: Any, record: OutlineRecorder | None, ops: dict | None = None) -> Entry:
    entry = Entry("MODULE", path, module._shallow_repr(), module)
    if record is not None:
        entry.children += record.module_inputs.get(path, [])
    for name, p in module._parameters.items():
        if p is not None:
            entry.children.append(tensor_entry("PARAMETER", f"{path}.{name}", p))
    for name, b in module._buffers.items():
        if b is not None:
            entry.children.append(tensor_entry("BUFFER", f"{path}.{name}", b))
    for name, child in module._modules.items():
        if child is not None:
            entry.children.append(module_entry(f"{path}.{name}", child, record, ops))
    if ops:  # after the submodules, before the outputs, as OneFlow orders them
        entry.children += ops.get(path, [])
    if record is not None:
        entry.children += record.module_outputs.get(path, [])
    return entry


def operator_entries(operators: list[tuple[str, str]], modules: dict) -> dict[str, list[Entry]]:
    """OPERATOR entries by the module path they print under: the op's scope, or the innermost module whose
    path begins it (an optimizer's update of ``model.0.weight`` goes under ``model.0``); ``""``: the graph."""
    paths = {path for name, module in modules.items() for path, _ in module.named_modules(prefix=name)}
    grouped: dict[str, list[Entry]] = {}
    for scope, line in operators:
        owner = scope
        while owner and owner not in paths:
            owner = owner.rpartition(".")[0]
        grouped.setdefault(owner, []).append(Entry("OPERATOR", "", line))
    return grouped


def build_outline(name: str, class_name: str, training: bool, modules: dict, record: OutlineRecorder | None,
                  operators: list[tuple[str, str]] | None = None) -> Entry:
    """The tree print(graph) shows; ``operators``: ``(scope, OPERATOR line)`` of each op, when asked for."""
    ops = operator_entries(operators, modules) if operators else None
    root = Entry("GRAPH", name, class_name)
    root.children.append(Entry("CONFIG", "config", f"GraphConfig(training={training}, )"))
    if record is not None:
        root.children += record.graph_inputs
    for path, module in modules.items():
        root.children.append(module_entry(path, module, record, ops))
    if ops:
        root.children += ops.get("", [])
    if record is not None:
        root.children += record.graph_outputs
    return root
