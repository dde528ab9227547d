"""Dead-code elimination: keep only the nodes that an output or a state update depends on.

Tracing records everything the Python code did, including values it computed and then ignored (and
folding or merging later leaves more such orphans). Walking backwards from the roots (outputs and
updates) marks what is needed; every other op and constant is dropped. Inputs and state stay: they are
the graph's interface, even when unused.
"""

from __future__ import annotations

from ..ir import INPUT, STATE, Graph
from .report import PassReport, timed


def live_nodes(graph: Graph) -> set[int]:
    live: set[int] = set()
    stack = list(graph.roots())
    while stack:
        node = stack.pop()
        if id(node) in live:
            continue
        live.add(id(node))
        stack.extend(node.input_nodes)
    return live


def _run(graph: Graph, report: PassReport) -> Graph:
    live = live_nodes(graph)
    kept = []
    for node in graph.nodes:
        if id(node) in live or node.kind in (INPUT, STATE):
            kept.append(node)
        else:
            report.removed.append(node.name)
    graph.nodes = kept
    return graph


def eliminate_dead_code(graph: Graph) -> tuple[Graph, PassReport]:
    return timed("EliminateDeadCode", _run, graph)
