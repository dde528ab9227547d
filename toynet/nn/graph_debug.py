"""What ``graph.debug(v_level)`` prints while an ``nn.Graph`` compiles.

Level 0: the build and compile stages, with timings. Level 1: also the graph's inputs and outputs,
each module call (MODULE, its INPUT, PARAMETER, BUFFER and OUTPUT lines) and each pass starting and
finishing. Level 2: also every op as it is traced (name, inputs, device, shapes) and what each pass
changed. Level 3: also each op's source line and every pass's graph before and after.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import mode
from .graph_outline import OutlineRecorder, io_entry, tensor_entry


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
                    on_module_call=self.module_call_logger(record), log_op=self.op_logger())

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

    def op_logger(self) -> Callable | None:
        if self.level < 2:
            return None
        return lambda node: say(operator_line(node, with_location=self.level >= 3))

    def pass_logger(self) -> Callable:
        name = self.graph.name

        def on_pass(event: str, index: int, pass_name: str, payload: Any) -> None:
            if event == "start":
                self.log(1, f"{name} start compiling with pass pass_cnt_{index}-{pass_name}")
                return
            self.log(1, f"{name} finish compiling with pass pass_cnt_{index}-{pass_name}")
            if self.level >= 3:
                say(payload.details())
                say(f"--- before {pass_name} ---\n{payload.before.format(show_source=True)}")
                say(f"--- after {pass_name} ---\n{payload.after.format(show_source=True)}")
            elif self.level >= 2:
                say(payload.summary())
        return on_pass
