"""The Graph-mode half of a recording: the nodes a tracer reports, in steps, each with its debug lines.

While ``flow.viz.record()`` is active, the tracer of an ``nn.Graph`` calls :meth:`TracedSteps.on_node`
with every node it adds (``toynet.mode.node_observers``), and every message ``graph.debug(level)``
prints reaches :meth:`TracedSteps.on_log` (``toynet.mode.log_observers``). Both are cut into the same
steps, so each frame of the animation carries the lines printed while its nodes appeared:

* consecutive op nodes of the same phase, module and source line form one step; the graph's inputs
  form the first; state and constants join the step of the op that first reads them;
* a line joins the step being built when it is printed, with two exceptions that keep a line with the
  nodes it names: a ``(MODULE:...)`` line ends the step before it (the module's ops come next), and an
  ``(OPERATOR:...)`` line (printed just before its node is added) waits for its node;
* what is printed once the trace is over (the end of the build, the passes, compiling) is a last step
  of its own, "compile", which adds no node.

The steps are the same at every debug level (a MODULE line ends a step only where the next node would
have ended it anyway); the level only chooses how many lines they carry. Joined, the lines of all
steps are exactly what the graph printed.

The frames show the graph by module, as ``print(graph)`` nests it (:mod:`~toynet.viz.draw_module`),
when the ``nn.Graph`` that was traced is found after the block; the plain static picture otherwise.
"""

from __future__ import annotations

from typing import Any

from .. import mode
from ..static.ir import CONSTANT, INPUT, OP, STATE, Graph, Node
from .draw_module import placed_modules
from .draw_static import static_picture
from .frames import Frame, Step, build_frames
from .model import Picture


class TracedSteps:
    """The nodes reported by a tracer, grouped into :class:`~toynet.viz.frames.Step` objects with their lines."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.steps: list[Step] = []
        self.graph: Graph | None = None      # the traced graph, once known
        self.nn_graph: Any = None             # the nn.Graph that traced it, if found (for its outline)
        self._waiting: list[Node] = []        # state and constants, until the op that reads them
        self._key: tuple = ()
        self._lines: list[str] = []           # printed during the step being built
        self._op_lines: list[str] = []        # OPERATOR lines whose node has not been reported yet
        self._after_trace: list[str] = []     # printed after the trace ended: the "compile" step

    # ------------------------------------------------------------------------ what is watched

    def on_node(self, node: Node, graph: Graph | None = None) -> None:
        if graph is not None:
            self.graph = graph
        self._close_compile_step()
        if node.kind in (STATE, CONSTANT):
            self._waiting.append(node)
            return
        key = ("input",) if node.kind == INPUT else (node.phase, node.scope, node.source)
        if self.nodes and key != self._key:
            self.close(flush=False)
        self._key = key
        self.nodes += self._waiting + [node]
        self._waiting.clear()
        self._lines += self._op_lines
        self._op_lines.clear()

    def on_log(self, message: str) -> None:
        """One printed message (it may hold several lines: level 3 prints whole graphs)."""
        lines = message.split("\n")  # not splitlines(): print's own "\n" after a trailing "\n" is a blank line
        if mode.tracer is None and self.nodes:  # the trace is over: compiling
            self.close()
            self._after_trace += lines
        elif message.startswith("(OPERATOR:"):
            self._op_lines += lines
        else:
            if message.startswith("(MODULE:") and self.nodes:
                self.close(flush=False)
            self._lines += lines

    # ------------------------------------------------------------------------------- steps

    def close(self, flush: bool = True, label: str | None = None) -> None:
        """End the step being built (if it added nodes); ``flush``: state still waiting for a reader joins it."""
        if flush:
            self.nodes += self._waiting
            self._waiting.clear()
        done = self.steps[-1].count if self.steps else 0
        if len(self.nodes) == done:
            return
        new = self.nodes[done:]
        ops = [n for n in new if n.kind == OP]
        if not ops:
            label = label or "graph inputs: " + ", ".join(n.name for n in new if n.kind == INPUT)
            source = ""
        else:
            first = ops[0]
            source = first.source
            names = ", ".join(n.op_name for n in ops[:4]) + (" ..." if len(ops) > 4 else "")
            label = f"{first.phase} {first.scope or '(graph)'}: {names}" + (f"\n{source}" if source else "")
        self.steps.append(Step(label, source, None, len(self.nodes), log=self._lines))
        self._lines = []

    def finish(self) -> None:
        """End the last step, and the compile step if anything was printed after the trace."""
        self.close()
        self._close_compile_step()
        if self._lines or self._op_lines:  # printed after the last step and not yet carried: the last step's
            last = self.steps[-1]
            last.log = last.log + self._lines + self._op_lines
            self._lines, self._op_lines = [], []

    def _close_compile_step(self) -> None:
        if self._after_trace:
            self.steps.append(Step("compile: optimise the traced graph, make the plan", "", None, len(self.nodes),
                                   log=self._after_trace))
            self._after_trace = []

    # ------------------------------------------------------------------------------ frames

    def frames(self, draw_options: dict, layout: dict, by_module: bool = True) -> tuple[list[Frame], Picture]:
        """One frame per step, and the final picture: the graph by module if its ``nn.Graph`` is known
        (and ``by_module``), else the static picture."""
        graph = self.graph if self.graph is not None else _graph_of(self.nodes)
        total = len(self.nodes)
        if self.nn_graph is not None and by_module:
            placed = placed_modules(self.nn_graph.outline(), graph, **draw_options)
            picture, ids = placed.picture, placed.id_of
            ports = [(nid, value, module.clusters) for module in placed.modules.values()
                     for tag in ("INPUT", "OUTPUT") for value, nid in module.ports[tag].items()]
            ports += [(nid, value, ()) for nid, value in placed.graph_outputs if value is not None]
        else:
            picture, ids = static_picture(graph, **draw_options)
            ports = []

        # An op's literal arguments and its write-back node (updates="nodes") appear with the op.
        attached: dict[str, list[str]] = {}
        for e in picture.edges:
            if picture.nodes[e.tail].role == "literal":
                attached.setdefault(e.head, []).append(e.tail)
            elif e.role == "writeback":
                attached.setdefault(e.tail, []).append(e.head)

        def present(count: int) -> set[str]:
            if count >= total:  # the last frames show everything, modules never called included
                return set(picture.nodes)
            names = {n.name for n in self.nodes[:count]}
            names |= {x.name for n in self.nodes[:count] for x in n.input_nodes}
            shown = {ids[name] for name in names if name in ids}
            # A module's INPUT and OUTPUT entries appear with the first of its ops, not with the value
            # (a graph input exists long before the module that reads it is called).
            opened = {n.cluster[:k] for nid in shown for n in [picture.nodes[nid]] for k in range(len(n.cluster) + 1)}
            shown |= {nid for nid, value, cluster in ports if value in names and cluster in opened}
            return shown | {a for nid in shown for a in attached.get(nid, ())}

        return build_frames(picture, self.steps, present, layout), picture

    def find_graph(self, namespaces: list) -> None:
        """After the block: the ``nn.Graph`` among the block's variables whose traced graph holds the nodes."""
        if not self.nodes:
            return
        for namespace in namespaces:
            for value in list(namespace.values()):
                try:
                    traced = getattr(value, "traced_ir", None) if hasattr(type(value), "traced_ir") else None
                except RuntimeError:  # an nn.Graph that has not been compiled
                    continue
                if isinstance(traced, Graph) and any(n is self.nodes[0] for n in traced.nodes):
                    self.graph, self.nn_graph = traced, value
                    return


def _graph_of(nodes: list[Node]) -> Graph:
    """A Graph holding the reported nodes (and the inputs and state they read), in order."""
    graph = Graph("recorded")
    seen: set[int] = set()
    for node in nodes:
        for x in list(node.input_nodes) + [node]:
            if id(x) not in seen:
                seen.add(id(x))
                graph.nodes.append(x)
                if x.kind == "input":
                    graph.inputs.append(x)
    return graph
