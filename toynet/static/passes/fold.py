"""Constant folding: an op whose inputs are all constants has the same result on every call, so
compute it once, now, and put the result in the graph as a constant.

Tracing makes many such ops: the loss gradient seed ``ones_like(loss)`` times a scale, a tensor made
with ``toynet.ones`` inside ``build``, the ``1 - beta`` of an optimizer. Random ops are never folded
(they must draw new numbers every call), and neither is anything that reads state or inputs.
"""

from __future__ import annotations

from ..ir import CONSTANT, OP, Graph, Node
from .report import PassReport, timed


def _run(graph: Graph, report: PassReport) -> Graph:
    replaced: dict[int, Node] = {}
    new_nodes = []
    for node in graph.nodes:
        node.redirect_inputs(replaced)
        foldable = (node.kind == OP and not node.op.random
                    and all(x.kind == CONSTANT for x in node.input_nodes))
        if foldable:
            args = [x.value if isinstance(x, Node) else x for x in node.inputs]
            value = node.device.xp.asarray(node.op.forward(node.device.xp, *args, **node.attrs))
            constant = Node(node.name, CONSTANT, node.shape, node.dtype, node.device, value=value,
                            phase=node.phase, scope=node.scope, source=node.source)
            replaced[id(node)] = constant
            report.folded.append(node.name)
            node = constant
        new_nodes.append(node)
    graph.nodes = new_nodes
    graph.redirect_roots(replaced)
    return graph


def fold_constants(graph: Graph) -> tuple[Graph, PassReport]:
    return timed("FoldConstants", _run, graph)
