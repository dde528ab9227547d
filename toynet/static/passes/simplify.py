"""The three passes that remove work from a traced graph without changing what it computes.

* **Dead-code elimination**: keep only the nodes an output or a state update depends on. Tracing records
  everything the Python code did, including values it computed and then ignored (and folding or merging
  leave more such orphans). Walking backwards from the roots marks what is needed; every other op and
  constant is dropped. Inputs and state stay: they are the graph's interface, even when unused.
* **Constant folding**: an op whose inputs are all constants gives the same result on every call, so it is
  computed once, now, and becomes a constant (the seed ``ones_like(loss)`` times a scale, the ``1 - beta`` of
  an optimizer). Random ops are never folded: they must draw new numbers every call.
* **Common-subexpression elimination**: two nodes that apply the same op to the same inputs with the same
  attributes compute the same value: the first is kept and the second's readers read it (backward is full
  of these: ``a - b`` recomputed by a loss's vjp, the same transpose taken twice). Random ops never merge.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..ir import CONSTANT, INPUT, OP, STATE, Graph, Node, PassReport, graph_pass


def live_nodes(graph: Graph) -> set[int]:
    """ids of the nodes the outputs and updates depend on."""
    live: set[int] = set()
    stack = list(graph.roots())
    while stack:
        node = stack.pop()
        if id(node) not in live:
            live.add(id(node))
            stack.extend(node.input_nodes)
    return live


@graph_pass("EliminateDeadCode")
def eliminate_dead_code(graph: Graph, report: PassReport) -> Graph:
    """Drop the ops and constants no output or state update needs."""
    live = live_nodes(graph)
    report.removed += [n.name for n in graph.nodes if id(n) not in live and n.kind not in (INPUT, STATE)]
    graph.nodes = [n for n in graph.nodes if id(n) in live or n.kind in (INPUT, STATE)]
    return graph


@graph_pass("FoldConstants")
def fold_constants(graph: Graph, report: PassReport) -> Graph:
    """Compute now every op whose inputs are all constants; it becomes a constant."""
    def fold(node: Node) -> Node:
        if node.kind != OP or node.op.random or not all(x.kind == CONSTANT for x in node.input_nodes):
            return node
        args = [x.value if isinstance(x, Node) else x for x in node.inputs]
        value = node.device.xp.asarray(node.op.forward(node.device.xp, *args, **node.attrs))
        report.folded.append(node.name)
        return replace(node, kind=CONSTANT, op=None, inputs=(), attrs={}, value=value, kernel="")
    graph.rewrite(fold)
    return graph


@graph_pass("EliminateCommonSubexpressions")
def eliminate_common_subexpressions(graph: Graph, report: PassReport) -> Graph:
    """Compute identical expressions once: a node that repeats an earlier one is replaced by it."""
    seen: dict[Any, Node] = {}

    def merge(node: Node) -> Node:
        key = _key(node)    # (None: a node that is never merged)
        first = node if key is None else seen.setdefault(key, node)
        if first is not node:
            report.merged[node.name] = first.name
        return first
    graph.rewrite(merge)
    return graph


def _key(node: Node) -> Any:
    """What makes two nodes compute the same value (None: never merged)."""
    if node.kind == OP and not node.op.random:
        inputs = tuple(("node", id(x)) if isinstance(x, Node) else ("literal", type(x).__name__, x)
                       for x in node.inputs)
        return node.op.name, inputs, tuple(sorted((k, repr(v)) for k, v in node.attrs.items()))
    if node.kind == CONSTANT and node.value is not None and node.value.size == 1:
        # Small constants with equal values (1.0 seeds, scales) merge too, so ops reading them can.
        return "constant", node.dtype.name, tuple(node.shape), node.value.reshape(()).item()
    return None
