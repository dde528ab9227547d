"""What ``graph.debug(v_level)`` prints while an ``nn.Graph`` compiles.

Level 0: the build and compile stages, with timings. Level 1: also the graph's inputs and outputs,
each module call (MODULE, its INPUT, PARAMETER, BUFFER and OUTPUT lines) and each pass starting and
finishing. Level 2: also every op as it is traced (name, inputs, device, shapes) and what each pass
changed. Level 3: also each op's source line and every pass's graph before and after.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import mode
from ..static.ir import format_bytes
from .graph_outline import OutlineRecorder, io_entry, tensor_entry
from .graph_pystack import capture, source_text, stack_text


def _meta(node: Any) -> str:
    return f"(size={tuple(node.shape)}, dtype=({node.dtype!r}))"


def operator_line(node: Any, with_location: bool = False) -> str:
    """One traced op as OneFlow prints it::

        (OPERATOR: model.0-linear-0(x/out:(size=(20, 3), ...), ...) -> (model.0-linear-0/out_0:(...)), device=(cpu))
    """
    args = ", ".join(f"{x.name}/out:{_meta(x)}" if hasattr(x, "shape") and hasattr(x, "name") else repr(x)
                     for x in node.inputs)
    line = (f"(OPERATOR: {node.name}({args}) -> ({node.name}/out_0:{_meta(node)}), "
            f"device=({node.device}))")
    if with_location and node.source:
        line = line[:-1] + f", location=({node.source}))"
    return line


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
        self.level = v_level
        self.max_py_stack_depth = max_py_stack_depth
        self.only_user_py_stack = bool(only_user_py_stack)
        self.op_repr = bool(op_repr_with_py_stack)

    def operators(self, compiled: Any) -> list[tuple[str, str]] | None:
        """``(module path, OPERATOR line)`` of every op traced by the ``compiled`` step (forward, backward,
        updates, as written before the passes rewrite them), for print(graph); None unless asked for."""
        if not self.op_repr or compiled is None:
            return None
        lines = []
        stacks = compiled.record.op_stacks
        for node in compiled.traced.op_nodes:
            line = operator_line(node)
            where = stacks.get(node.name) or (source_text(node.source) if node.source else "")
            if where:
                line = line[:-1] + f", location=({where}))"
            lines.append((node.scope, line))
        return lines

    @property
    def tag(self) -> str:
        return f"(GRAPH:{self.graph.name}:{type(self.graph).__name__})"

    def log(self, level: int, message: str) -> None:
        if self.level >= level:
            say(message)

    def trace_hooks(self, record: OutlineRecorder) -> dict[str, Callable | None]:
        """The callbacks :func:`toynet.static.trace.trace_step` takes: they fill ``record`` (the INPUT and
        OUTPUT entries print(graph) shows) and print what this level asks for as tracing goes."""
        def on_io(entries: list, tag: str) -> Callable:
            def on_value(name: str, value: Any) -> None:
                entries.append(io_entry(tag, name, value))
                self.log(1, entries[-1].header())
            return on_value
        return dict(on_input=on_io(record.graph_inputs, "INPUT"), on_output=on_io(record.graph_outputs, "OUTPUT"),
                    on_module_call=self.module_call_logger(record), log_op=self.op_logger(record))

    def module_call_logger(self, record: OutlineRecorder) -> Callable:
        def on_module_call(phase: str, path: str, module: Any, values: Any) -> None:
            entries = record.on_module_call(phase, path, module, values)
            if self.level < 1:
                return
            if phase == "enter":
                say(f"(MODULE:{path}:{module._shallow_repr()})")
            for entry in entries:
                say(entry.header())
            if phase == "enter":
                for name, p in module._parameters.items():
                    if p is not None:
                        say(tensor_entry("PARAMETER", f"{path}.{name}", p).header())
                for name, b in module._buffers.items():
                    if b is not None:
                        say(tensor_entry("BUFFER", f"{path}.{name}", b).header())
        return on_module_call

    def op_logger(self, record: OutlineRecorder) -> Callable | None:
        """Told of each op as it is traced: prints it at level 2 and up, and keeps the Python stack that made
        it when print(graph) is to show the stacks (an op of the user's code, not a gradient or update)."""
        if self.level < 2 and not self.op_repr:
            return None
        depth, only_user = self.max_py_stack_depth, self.only_user_py_stack

        def on_op(node: Any) -> None:
            if self.op_repr and node.source and source_text(node.source) != node.source:
                record.op_stacks[node.name] = stack_text(*capture(depth, only_user))
            if self.level >= 2:
                say(operator_line(node, with_location=self.level >= 3))
        return on_op

    def pass_logger(self) -> Callable:
        name = self.graph.name

        def on_pass(event: str, index: int, pass_name: str, payload: Any) -> None:
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
