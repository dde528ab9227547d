"""Recompute cheap activations in backward instead of keeping them from forward.

A training step keeps every value backward reads from the end of forward until backward gets to it. In
MobileNetV2 each ``conv -> batch_norm -> relu6`` keeps two images: the convolution's output ``x``
(BatchNorm's backward needs it) and ``r = relu6(batch_norm(x))`` (relu6's backward mask and the next
convolution's weight gradient need it). But ``r`` is two elementwise passes away from ``x``, with
per-channel numbers (the batch statistics, the BatchNorm weights) that are kept anyway. So this pass
lets forward drop ``r`` after its last forward reader, and recomputes it in backward, right before its
first backward reader::

    forward:   %r  = relu6(batch_norm(%x, %mean, %var, %w, %b))     # read by the next conv, then freed
    backward:  %r' = relu6(batch_norm(%x, %mean, %var, %w, %b))     # same op, same inputs: same bits
               ... the backward readers of %r read %r' ...

The trade-off, in MobileNetV2's training step: the six-times-wider images inside each block are kept
once instead of twice (about a third less memory at the peak), for two extra elementwise passes per
block (a few percent of the step). Eager mode cannot do this: it keeps what each op's backward will
read, and does not know, when forward runs, which values are cheap to make again.
"""

from __future__ import annotations

from ...ir import BACKWARD, FORWARD, OP, Graph, Node, PassReport, graph_pass

_ACTIVATIONS = ("relu", "relu6")


def _candidates(graph: Graph, users: dict) -> list[Node]:
    """Activations of a BatchNorm, computed in forward, read in backward."""
    found = []
    for r in graph.nodes:
        if (r.kind == OP and r.phase == FORWARD and r.op.name in _ACTIVATIONS and isinstance(r.inputs[0], Node)
                and r.inputs[0].kind == OP and r.inputs[0].op.name == "batch_norm"
                and any(u.phase == BACKWARD for u in users[id(r)])):
            found.append(r)
    return found


def _clone(graph: Graph, node: Node, inputs: tuple) -> Node:
    return Node(graph.unique_name(f"{node.name}-recomputed"), OP, node.shape, node.dtype, node.device, op=node.op,
                inputs=inputs, attrs=node.attrs, phase=BACKWARD, scope=node.scope, source=node.source)


@graph_pass("RecomputeActivations")
def recompute_activations(graph: Graph, report: PassReport) -> Graph:
    """Activations of BatchNorm read in backward are recomputed there instead of being kept."""
    users = graph.users()
    roots = {id(n) for n in graph.roots()}
    position = {id(n): k for k, n in enumerate(graph.nodes)}
    insert_before: dict[int, list[Node]] = {}   # id(first backward reader) -> the clones to put before it
    saved, recomputed = 0, 0
    for r in _candidates(graph, users):
        if id(r) in roots:
            continue
        norm = r.inputs[0]
        norm_again = _clone(graph, norm, norm.inputs)
        r_again = _clone(graph, r, (norm_again,) + r.inputs[1:])
        backward_readers = [u for u in users[id(r)] if u.phase == BACKWARD]
        for u in backward_readers:
            u.redirect_inputs({id(r): r_again})
        first = min(backward_readers, key=lambda u: position[id(u)])
        insert_before.setdefault(id(first), []).extend([norm_again, r_again])
        recomputed += 1
        saved += r.dtype.itemsize * _count(r.shape)
    if not insert_before:
        return graph
    nodes = []
    for node in graph.nodes:
        nodes.extend(insert_before.get(id(node), []))
        nodes.append(node)
    graph.nodes = nodes
    report.notes.append(f"recomputes {recomputed} activations in backward instead of keeping "
                        f"{saved / 1e6:.1f} MB of them from forward")
    return graph


def _count(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
