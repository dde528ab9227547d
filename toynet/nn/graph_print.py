"""What ``print(graph)`` and ``graph.debug(v_level)`` show: OneFlow's tagged outline, and the messages of each
stage of a compilation.

**The outline** is a tree of :class:`Entry` objects, each a tag (GRAPH, CONFIG, MODULE, PARAMETER, BUFFER,
INPUT, OUTPUT, OPERATOR), a name and a description::

    (GRAPH:LinearTrainGraph_0:LinearTrainGraph): (
      (CONFIG:config:GraphConfig(training=True, ))
      (MODULE:model:Sequential()): (
        (MODULE:model.0:Linear(in_features=3, out_features=1, bias=True)): (
          (PARAMETER:model.0.weight:tensor(..., size=(1, 3), dtype=toynet.float32, requires_grad=True)): ()
          ...

Before the first call it holds the module tree; the trace's events (the tracer's record of the graph's
inputs and outputs and of every module call: a module called twice gets two sets) add the INPUT and
OUTPUT entries. :func:`build_outline` makes it, when it is printed.

**The debug levels**: 0 the build and compile stages, with timings; 1 also the graph's inputs and outputs,
each module call (MODULE, its INPUT, PARAMETER, BUFFER and OUTPUT lines) and each pass starting and
finishing; 2 also every op as it is traced (name, inputs, device, shapes) and what each pass changed (in a
graph of global tensors, every op again once lowered: its SBP signature, the boxing, the placement); 3
also each op's source line and every pass's graph before and after. With ``op_repr_with_py_stack=True``,
``print(graph)`` lists each op under its module, with the Python stack that made it, as OneFlow writes it::

    Python Stack[-2]: 'build' at 'train.py': line 40; Python Stack[-1]: 'forward' at 'net.py': line 12;  ... more
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, NamedTuple

from .. import mode
from ..distributed.sbp import short
from ..dynamic.printing import meta_repr
from ..dynamic.tensor import Tensor
from ..static.ir import Graph as StaticGraph
from ..static.ir import format_bytes
from ..static.trace import PACKAGE_DIR, flatten

# Tags whose entries print as blocks (`header: (...)`), and those that print as leaves with `: ()`.
_BLOCK_TAGS = ("GRAPH", "MODULE")
_EMPTY_BLOCK_TAGS = ("PARAMETER", "BUFFER")


class Entry:
    """One tagged line of the outline, with the entries nested under it. ``node``: for an INPUT/OUTPUT traced as
    a lazy tensor, the name of the graph node holding its value (how toynet.viz connects the two)."""

    __slots__ = ("tag", "name", "text", "children", "module", "node")

    def __init__(self, tag: str, name: str, text: str, module: Any = None, node: str | None = None):
        self.tag, self.name, self.text, self.module, self.node = tag, name, text, module, node
        self.children: list[Entry] = []

    def header(self) -> str:
        if self.tag == "OPERATOR":  # the whole line is made by operator_line
            return self.text
        if self.text.startswith("<class "):  # a non-tensor input or output: OneFlow flags it
            return f"[WARNING]({self.tag}:{self.name}:{self.text})"
        return f"({self.tag}:{self.name}:{self.text})"

    def walk(self) -> Any:
        yield self
        for child in self.children:
            yield from child.walk()

    def render(self) -> str:
        """The entry and its children, nested by two spaces per level, as OneFlow prints a graph."""
        head = self.header()
        if self.tag in _EMPTY_BLOCK_TAGS or (self.tag in _BLOCK_TAGS and not self.children):
            return head + ": ()"
        if self.tag not in _BLOCK_TAGS:
            return head
        body = "\n".join(child.render() for child in self.children)
        return head + ": (\n" + "\n".join("  " + line for line in body.split("\n")) + "\n)"

    def __repr__(self) -> str:
        return f"<Entry {self.header()} with {len(self.children)} children>"


def io_entry(tag: str, name: str, value: Any) -> Entry:
    """The entry of one input or output: a tensor's meta, or (OneFlow warns of it) another value's type."""
    if isinstance(value, Tensor):
        return Entry(tag, name, meta_repr(value), node=value.node.name if value.node is not None else None)
    return Entry(tag, name, repr(type(value)))


class Record(NamedTuple):
    """What one trace adds to the outline: the tracer's events, and each op's Python stack (when asked for)."""

    events: list
    stacks: dict


def _io_entries(record: Record | None) -> dict[str, list[Entry]]:
    """The INPUT and OUTPUT entries of the record's events, by where they print: ``"graph in"``/``"graph out"``,
    or ``"<path> in"``/``"<path> out"`` for a module's call."""
    found: dict[str, list[Entry]] = {}
    for kind, name, value in record.events if record is not None else ():
        if kind in ("input", "output"):
            where = "graph in" if kind == "input" else "graph out"
            found.setdefault(where, []).append(io_entry(kind.upper(), name, value))
        else:
            tag = "INPUT" if kind == "enter" else "OUTPUT"
            leaves, _ = flatten(value[1])
            found.setdefault(f"{name} {'in' if kind == 'enter' else 'out'}", []).extend(
                io_entry(tag, f"_{name}-{tag.lower()}_{i}", v) for i, v in enumerate(leaves))
    return found


def build_outline(name: str, class_name: str, training: bool, modules: dict, record: Record | None,
                  operators: list[tuple[str, str]] | None = None) -> Entry:
    """The tree print(graph) shows; ``operators``: ``(scope, OPERATOR line)`` of each op, when asked for."""
    ops = _operator_entries(operators, modules) if operators else {}
    io = _io_entries(record)
    root = Entry("GRAPH", name, class_name)
    root.children = [Entry("CONFIG", "config", f"GraphConfig(training={training}, )"), *io.get("graph in", [])]
    root.children += [_module_entry(path, module, io, ops) for path, module in modules.items()]
    root.children += ops.get("", []) + io.get("graph out", [])
    return root


def _module_entry(path: str, module: Any, io: dict, ops: dict) -> Entry:
    """A MODULE entry in OneFlow's order: inputs, parameters, buffers, submodules, operators, outputs."""
    entry = Entry("MODULE", path, module._shallow_repr(), module)
    entry.children = list(io.get(f"{path} in", []))
    entry.children += [io_entry("PARAMETER", f"{path}.{k}", p) for k, p in module._parameters.items() if p is not None]
    entry.children += [io_entry("BUFFER", f"{path}.{k}", b) for k, b in module._buffers.items() if b is not None]
    entry.children += [_module_entry(f"{path}.{k}", m, io, ops) for k, m in module._modules.items() if m is not None]
    entry.children += ops.get(path, []) + io.get(f"{path} out", [])
    return entry


def _operator_entries(operators: list[tuple[str, str]], modules: dict) -> dict[str, list[Entry]]:
    """OPERATOR entries by the module path they print under: the op's scope, or the innermost module whose
    path begins it (an optimizer's update of ``model.0.weight`` goes under ``model.0``); ``""``: the graph."""
    paths = {path for name, module in modules.items() for path, _ in module.named_modules(prefix=name)}
    grouped: dict[str, list[Entry]] = {}
    for scope, line in operators:
        while scope and scope not in paths:
            scope = scope.rpartition(".")[0]
        grouped.setdefault(scope, []).append(Entry("OPERATOR", "", line))
    return grouped


def operator_line(node: Any, location: str = "", layouts: dict | None = None) -> str:
    """One traced op as OneFlow prints it::

        (OPERATOR: model.0-matmul-1(x/out:(size=(20, 3), ...), ...) -> (model.0-matmul-1/out_0:(...)), device=(cpu:0))

    In a graph of global tensors (``layouts``: node name -> its Layout, toynet.distributed.graph_lowering) each
    value shows its SBP and logical size, and the op its placement: ``(sbp=(S(0)), size=(8, 3), ...)``,
    ``placement=(toynet.placement(type="cpu", ranks=[0, 1]))``.
    """
    def meta(n: Any) -> str:
        layout = layouts.get(n.name) if layouts else None
        if layout is not None:
            return f"(sbp=({short(layout.sbp)}), size={tuple(layout.shape)}, dtype=({n.dtype!r}))"
        return f"(size={tuple(n.shape)}, dtype=({n.dtype!r}))"
    args = ", ".join(f"{x.name}/out:{meta(x)}" if hasattr(x, "shape") and hasattr(x, "name") else repr(x)
                     for x in node.inputs)
    where = f", location=({location})" if location else ""
    layout = layouts.get(node.name) if layouts else None
    on = f"placement=({layout.placement!r})" if layout is not None else f"device=({node.device})"
    return f"(OPERATOR: {node.name}({args}) -> ({node.name}/out_0:{meta(node)}), {on}{where})"


# ------------------------------------------------------------------------------------------ debug


def say(message: str) -> None:
    """Print one debug message; every line printed goes through here, so that an observer in
    ``toynet.mode.log_observers`` (a ``flow.viz.record()`` animation) sees exactly what was printed."""
    print(message, flush=True)
    for observer in mode.log_observers:
        observer(message)


class DebugPrinter:
    """Prints a graph's compile-time messages at or below the chosen verbosity (-1: silent)."""

    def __init__(self, graph: Any):
        self.graph = graph
        self.level = -1
        #: ``debug(op_repr_with_py_stack=True)``: print(graph) lists the ops with their Python stack.
        self.op_repr = False
        self.max_py_stack_depth = 2
        self.only_user_py_stack = True

    def configure(self, v_level: int, max_py_stack_depth: int = 2, only_user_py_stack: bool = True,
                  op_repr_with_py_stack: bool = False) -> None:
        """What ``graph.debug(...)`` sets. The stacks are taken while the graph traces: set them before the
        first call (a graph compiled earlier shows each op's one-line source instead)."""
        if not -1 <= v_level <= 3:
            raise AssertionError(f"The min verbose debug info level is -1, the max is 3, got {v_level}.")
        if type(max_py_stack_depth) is not int or max_py_stack_depth < 1:
            raise AssertionError(f"max_py_stack_depth must be an int of at least 1, got {max_py_stack_depth!r}.")
        self.level, self.max_py_stack_depth = v_level, max_py_stack_depth
        self.only_user_py_stack, self.op_repr = bool(only_user_py_stack), bool(op_repr_with_py_stack)

    @property
    def tag(self) -> str:
        return f"(GRAPH:{self.graph.name}:{type(self.graph).__name__})"

    def log(self, level: int, message: str) -> None:
        if self.level >= level:
            say(message)

    def watcher(self, stacks: dict) -> Callable | None:
        """What the tracer tells its events to (``Tracer.watch``), printing what this level asks for as tracing
        goes and keeping each op's Python stack in ``stacks`` when print(graph) is to show them; None if
        neither is asked for."""
        if self.level < 1 and not self.op_repr:
            return None
        depth, only_user = self.max_py_stack_depth, self.only_user_py_stack

        def watch(kind: str, name: str, value: Any) -> None:
            if kind == "op":
                if self.op_repr and value.source and source_text(value.source) != value.source:
                    stacks[name] = stack_text(*capture(depth, only_user))
                if self.level >= 2:
                    say(operator_line(value, value.source if self.level >= 3 else ""))
            elif self.level >= 1:
                self._log_event(kind, name, value)
        return watch

    def _log_event(self, kind: str, name: str, value: Any) -> None:
        if kind in ("input", "output"):
            say(io_entry(kind.upper(), name, value).header())
            return
        module, values = value
        if kind == "enter":
            say(f"(MODULE:{name}:{module._shallow_repr()})")
        tag = "INPUT" if kind == "enter" else "OUTPUT"
        for i, v in enumerate(flatten(values)[0]):
            say(io_entry(tag, f"_{name}-{tag.lower()}_{i}", v).header())
        if kind == "enter":
            for k, p in list(module._parameters.items()) + list(module._buffers.items()):
                if p is not None:
                    say(io_entry("PARAMETER" if k in module._parameters else "BUFFER", f"{name}.{k}", p).header())

    def operators(self, compiled: Any) -> list[tuple[str, str]] | None:
        """``(module path, OPERATOR line)`` of every op traced by the ``compiled`` step (forward, backward,
        updates, as written before the passes rewrite them), for print(graph); None unless asked for."""
        if not self.op_repr or compiled is None:
            return None
        stacks, layouts = compiled.record.stacks, getattr(compiled.traced, "layouts", None)
        return [(node.scope, operator_line(node, stacks.get(node.name) or (source_text(node.source) if node.source
                                                                             else ""), layouts))
                for node in compiled.traced.op_nodes]

    def pass_logger(self) -> Callable | None:
        if self.level < 1:
            return None
        name = self.graph.name

        def on_pass(event: str, index: int, pass_name: str, payload: Any) -> None:
            layouts = getattr(payload, "layouts", None) if event == "start" and index == 0 else None
            if layouts and self.level >= 2:   # a graph of global tensors: the signatures and boxing chosen
                self.log(2, f"{name} gave each op an SBP signature and inserted boxing (toynet.distributed):")
                for node in payload.op_nodes:
                    say(operator_line(node, "", layouts))
            if event == "start":
                self.log(1, f"{name} start compiling with pass pass_cnt_{index}-{pass_name}")
                return
            memory = payload.after.memory if pass_name == "PlanMemory" else None
            # The memory plan says what the step's intermediate values will need, before it runs.
            planned = "" if memory is None else (
                f": an arena of {format_bytes(memory.arena_bytes)} for {len(memory.buffer_of)} values "
                f"({format_bytes(memory.bytes_without_reuse)} with an array of their own each)")
            self.log(1, f"{name} finish compiling with pass pass_cnt_{index}-{pass_name}{planned}")
            if self.level >= 3:
                say(payload.details())
                say(f"--- before {pass_name} ---\n{payload.before.format(show_source=True)}")
                say(f"--- after {pass_name} ---\n{payload.after.format(show_source=True)}")
            elif self.level >= 2:
                say(payload.summary())
        return on_pass


# ------------------------------------------------------------------------------- the Python stack

Frame = tuple[str, int, str]  # where, line, function


def capture(depth: int, only_user: bool = True) -> tuple[tuple[Frame, ...], bool]:
    """The ``depth`` innermost frames of the stack that called the caller (the debug hook asking is no part
    of the story), only the user's when ``only_user`` (toynet's own skipped), innermost first, and whether
    more frames lie beyond them."""
    frames: list[Frame] = []
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        ours = os.path.abspath(filename).startswith(PACKAGE_DIR + os.sep)
        if not filename.startswith("<frozen") and not (ours and only_user):
            if len(frames) == depth:
                return tuple(frames), True
            where = (os.path.relpath(os.path.abspath(filename), os.path.dirname(PACKAGE_DIR)) if ours else
                     "cell" if "ipykernel_" in filename else os.path.basename(filename))
            frames.append((where, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(frames), False


def stack_text(frames: tuple[Frame, ...], more: bool) -> str:
    shown = [f"Python Stack[-{k + 1}]: '{function}' at '{where}': line {line}"
             for k, (where, line, function) in enumerate(frames)]
    return "; ".join(reversed(shown)) + ";" + ("  ... more" if more else "")


_SOURCE_FRAME = re.compile(r"^(.+):(\d+) in ([^:]+): ")


def source_text(source: str) -> str:
    """The tracer's one-frame label of an op (``"net.py:12 in forward: y = self.fc(x)"``) as a stack, for
    ops traced before the stacks were asked for; any other label as it is."""
    match = _SOURCE_FRAME.match(source)
    if match is None:
        return source
    where, line, function = match.groups()
    return stack_text(((where, int(line), function),), False)


# ------------------------------------------------------------------------------- the graph's views


class GraphViews:
    """What an ``nn.Graph`` shows: ``print(graph)``, ``graph.debug(level)``, and the compiled graph, passes and
    code of its latest compilation (a base class of ``nn.Graph``)."""

    def debug(self, v_level: int = 0, *, ranks: Any = None, max_py_stack_depth: int = 2,
              only_user_py_stack: bool = True, op_repr_with_py_stack: bool = False) -> None:
        """Print what happens while the graph compiles: 0 stages and timings, 1 each module's inputs,
        parameters and outputs, 2 each op (name, inputs, device, shapes) and each pass's changes,
        3 each op's source line and each pass's graph before and after. -1 turns it off.
        ``op_repr_with_py_stack=True``: ``print(graph)`` also lists each op, with where the code made it."""
        self._debug.configure(v_level, max_py_stack_depth, only_user_py_stack, op_repr_with_py_stack)

    def __repr__(self) -> str:
        return self.outline().render()

    def outline(self):
        """The tagged tree ``print(graph)`` shows (see toynet.nn.graph_print), with the inputs and outputs
        traced by the latest compilation."""
        latest = self._compiled.latest
        record = latest.record if latest is not None else None
        return build_outline(self._name, type(self).__name__, self.training, self._modules, record,
                             self._debug.operators(latest))

    @property
    def ir(self) -> StaticGraph:
        """The optimised static graph of the last compilation."""
        return self._require_compiled().optimized

    @property
    def traced_ir(self) -> StaticGraph:
        """The static graph as traced (forward, backward and optimizer nodes), before any pass."""
        return self._require_compiled().traced

    @property
    def passes(self) -> list:
        """What each optimisation pass did in the latest compilation (``print(r.details())`` for each)."""
        self._require_compiled()
        return self._compiled.latest.reports

    @property
    def plan(self) -> Any:
        """The compiled plan; ``graph.plan.source`` is the generated code."""
        return self._require_compiled().plan

    @property
    def step_source(self) -> str:
        """The code a call of this graph runs now: ``plan.source`` on the lesson path; on the fast path, once a
        call of tensors alone has made one, the generated repeat call (its guard checks, then the plan inlined)."""
        repeat = self.__dict__.get("_repeat")
        return repeat.source if mode.fast and repeat is not None else self.plan.source

    def _require_compiled(self) -> Any:
        if self._last is None:
            raise RuntimeError(f"[ERROR](GRAPH:{self._name}:{type(self).__name__}) has not been compiled yet; "
                               "call the graph once to trigger its compilation.")
        return self._last


# ------------------------------------------------------------------------------- messages


def describe_inputs(leaves: list) -> str:
    return ", ".join(f"{tuple(t.shape)} {t.dtype.name}" if isinstance(t, Tensor) else type(t).__name__
                     for t in leaves) or "none"


def eviction_warning(name: str, limit: int) -> str:
    return (f"nn.Graph {name} has compiled more than graph.config.cache_limit = {limit} plans and evicts the "
            "least recently used ones from now on; a graph that recompiles on every call runs slowly. It "
            "compiles once per input signature (shapes, dtypes, non-number arguments) and whenever a guard "
            "fails (graph.debug(1) says why): pad inputs to a few shapes, keep modules and optimizer "
            "settings fixed, or raise graph.config.cache_limit.")
