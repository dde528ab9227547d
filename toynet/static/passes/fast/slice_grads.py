"""MergeSliceGradients: the gradients of the pieces of a split, added up, become one ``cat``.

``q, k, v = x.split(C, dim=2)`` is three slices of ``x``. Backward gives each slice's gradient to ``x`` as a
``getitem_grad`` (an array of zeros of x's shape with the gradient written into the slice), and autograd adds
the three: three zero-filled arrays of x's size and two additions, where putting the three gradients side by
side is the whole answer. This pass finds a sum of ``getitem_grad``\\ s whose slices tile one axis of the same
shape exactly (each element covered once) and writes it as ``cat`` of the gradients in axis order: one pass
over the memory instead of six, and no zeros. A transformer does this in every attention layer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ....ops import OPS
from ...ir import OP, Graph, Node, PassReport, graph_pass
from ..simplify import eliminate_dead_code

_ADD, _SLICE_GRAD = "add", "getitem_grad"


def _full(item: slice, size: int) -> bool:
    return isinstance(item, slice) and item.step in (None, 1) and (item.start or 0) == 0 and \
        (item.stop is None or item.stop >= size)


def _span(node: Node) -> tuple[int, int, int] | None:
    """(axis, start, stop) of a getitem_grad that writes one slice along one axis, else None."""
    index, shape = node.attrs.get("index", ()), tuple(node.attrs.get("shape", ()))
    if len(node.inputs) != 1 or not isinstance(index, tuple) or len(index) > len(shape) or \
            not all(isinstance(i, slice) for i in index):
        return None
    partial = [axis for axis, item in enumerate(index) if not _full(item, shape[axis])]
    if len(partial) != 1:
        return None
    axis = partial[0]
    start, stop, step = index[axis].indices(shape[axis])
    return (axis, start, stop) if step == 1 and stop > start else None


def _leaves(node: Node, readers: Counter, root: bool = True) -> list[Node] | None:
    """The getitem_grad nodes an add tree sums (inner adds read by this tree only), else None."""
    if node.kind == OP and node.op.name == _ADD and (root or readers[id(node)] == 1) and \
            all(isinstance(x, Node) for x in node.inputs) and node.inputs[0].shape == node.inputs[1].shape:
        left, right = (_leaves(x, readers, root=False) for x in node.inputs)
        return None if left is None or right is None else left + right
    if node.kind == OP and node.op.name == _SLICE_GRAD and readers[id(node)] == 1:
        return [node]
    return None


def _tiling(node: Node, leaves: list[Node]) -> tuple[int, list[Node]] | None:
    """(axis, the leaves in axis order) when their slices tile one axis of ``node``'s shape exactly."""
    spans = [_span(leaf) for leaf in leaves]
    if len(leaves) < 2 or None in spans or len({s[0] for s in spans}) != 1 or \
            any(tuple(leaf.attrs["shape"]) != tuple(node.shape) or leaf.dtype is not node.dtype for leaf in leaves):
        return None
    order = sorted(range(len(leaves)), key=lambda k: spans[k][1])
    edges = [(spans[k][1], spans[k][2]) for k in order]
    axis = spans[0][0]
    if edges[0][0] != 0 or edges[-1][1] != node.shape[axis] or any(a[1] != b[0] for a, b in zip(edges, edges[1:])):
        return None
    return axis, [leaves[k] for k in order]


@graph_pass("MergeSliceGradients")
def merge_slice_gradients(graph: Graph, report: PassReport) -> Graph:
    """Sums of getitem_grads that tile an axis become one cat of their gradients."""
    readers = Counter(id(x) for n in graph.nodes for x in n.input_nodes)
    readers.update(id(n) for n in graph.roots())

    def merge(node: Node) -> Node:
        leaves = _leaves(node, readers) if node.kind == OP and node.op.name == _ADD else None
        found = _tiling(node, leaves) if leaves else None
        if found is None:
            return node
        axis, ordered = found
        report.fused[node.name] = [leaf.name for leaf in ordered] + [node.name]
        return replace(node, op=OPS["cat"], inputs=tuple(leaf.inputs[0] for leaf in ordered), attrs={"dim": axis},
                       kernel="")
    graph.rewrite(merge)
    if report.fused:   # the slices' gradients and the additions no one reads now (it runs after dead-code elimination)
        graph, dead = eliminate_dead_code(graph)
        report.removed += dead.removed
    return graph
