"""Common-subexpression elimination: two nodes that apply the same op to the same inputs with the
same attributes compute the same value, so keep the first and point the second's readers at it.

Backward passes are full of these (``a - b`` recomputed by a loss's vjp, the same transpose taken twice).
Random ops are never merged: two dropout masks must differ.
"""

from __future__ import annotations

from typing import Any

from ..ir import CONSTANT, OP, Graph, Node
from .report import PassReport, timed


def _key(node: Node) -> Any:
    inputs = tuple(("node", id(x)) if isinstance(x, Node) else ("literal", type(x).__name__, x)
                   for x in node.inputs)
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
    return node.op.name, inputs, attrs


def _run(graph: Graph, report: PassReport) -> Graph:
    seen: dict[Any, Node] = {}
    replaced: dict[int, Node] = {}
    kept = []
    for node in graph.nodes:
        node.redirect_inputs(replaced)
        if node.kind == OP and not node.op.random:
            key = _key(node)
        elif node.kind == CONSTANT and node.value is not None and node.value.size == 1:
            # Small constants with equal values (1.0 seeds, scales) merge too, so ops reading them can.
            key = ("constant", node.dtype.name, tuple(node.shape), node.value.reshape(()).item())
        else:
            key = None
        if key is not None:
            first = seen.setdefault(key, node)
            if first is not node:
                replaced[id(node)] = first
                report.merged[node.name] = first.name
                continue
        kept.append(node)
    graph.nodes = kept
    graph.redirect_roots(replaced)
    return graph


def eliminate_common_subexpressions(graph: Graph) -> tuple[Graph, PassReport]:
    return timed("EliminateCommonSubexpressions", _run, graph)
