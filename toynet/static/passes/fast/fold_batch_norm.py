"""Fold BatchNorm (eval mode) and the activation after it into the convolution before it.

MobileNetV2's inference is a chain of ``conv2d -> batch_norm -> relu6`` blocks. Run one op at a time,
each block makes three passes over its activations and keeps two intermediate arrays. In eval mode
BatchNorm only scales and shifts each channel by numbers that do not depend on the input, so it can be
moved into the convolution's weights and bias (see :mod:`toynet.ops.fast.conv_fused`), and the activation
can run in place on the convolution's output: one op, one pass, one buffer::

    %c : f32[64, 96, 16, 16] = conv2d(%x, %w)
    %n : f32[64, 96, 16, 16] = batch_norm[training=False](%c, %mean, %var, %gamma, %beta)
    %r : f32[64, 96, 16, 16] = relu6(%n)
        ->
    %r : f32[64, 96, 16, 16] = conv2d+batch_norm+relu6(%x, %w, %mean, %var, %gamma, %beta)

Only Graph mode can do this: Eager mode must produce ``%c`` and ``%n`` because the user's code might
read them. Here a node is absorbed only when nothing else reads it (no other op, no output, no state
update), which also keeps the rewrite out of training graphs, where backward reads them all. The
folded weights are computed from the BatchNorm statistics on every call (cheap: the weights only), so
the plan can never run with stale statistics after ``load_state_dict`` or a few training steps.
"""

from __future__ import annotations

from ....ops import OPS
from ...ir import OP, Graph, Node, PassReport, graph_pass

_ACTIVATIONS = ("relu", "relu6")


def _sole_reader(node: Node, users: dict, roots: set) -> Node | None:
    """The one op reading ``node``, when it has exactly one reader and is no output or state update."""
    readers = users[id(node)]
    if id(node) in roots or len(readers) != 1 or readers[0].input_nodes.count(node) != 1:
        return None
    return readers[0]


def _foldable_norm(conv: Node, reader: Node | None) -> bool:
    return (reader is not None and reader.kind == OP and reader.op.name == "batch_norm"
            and reader.inputs[0] is conv and not reader.attrs.get("training", True)
            and len(reader.inputs) in (3, 5) and all(isinstance(x, Node) for x in reader.inputs[1:]))


def _chains(graph: Graph) -> dict[int, tuple[list[Node], list, dict]]:
    """The chains to fold, by id of their last node: ``(nodes, inputs of the fused op, its attributes)``."""
    users = graph.users()
    roots = {id(n) for n in graph.roots()}
    chains = {}
    for conv in graph.nodes:
        if conv.kind != OP or conv.op.name != "conv2d":
            continue
        chain, inputs = [conv], list(conv.inputs)
        attrs = dict(conv.attrs, bias=len(conv.inputs) == 3, norm=None, eps=1e-5, activation=None)
        reader = _sole_reader(conv, users, roots)
        if _foldable_norm(conv, reader):
            inputs += list(reader.inputs[1:])
            attrs.update(norm="affine" if len(reader.inputs) == 5 else "plain", eps=reader.attrs.get("eps", 1e-5))
            chain.append(reader)
            reader = _sole_reader(reader, users, roots)
        if reader is not None and reader.kind == OP and reader.op.name in _ACTIVATIONS:
            attrs["activation"] = reader.op.name
            chain.append(reader)
        if len(chain) > 1:
            chains[id(chain[-1])] = (chain, inputs, attrs)
    return chains


@graph_pass("FoldBatchNorm")
def fold_batch_norm(graph: Graph, report: PassReport) -> Graph:
    """``conv2d [-> batch_norm (eval)] [-> relu/relu6]`` chains become one ``conv2d_fused`` node."""
    """Replace each chain by one ``conv2d_fused`` node at its last node's place (where every input it
    reads, the BatchNorm's statistics included, is already defined)."""
    chains = _chains(graph)
    absorbed = {id(n) for chain, _, _ in chains.values() for n in chain[:-1]}
    replaced: dict[int, Node] = {}
    new_nodes = []
    for node in graph.nodes:
        if id(node) in absorbed:
            continue
        if id(node) in chains:
            chain, inputs, attrs = chains[id(node)]
            conv = chain[0]
            fused = Node(node.name, OP, node.shape, node.dtype, node.device, op=OPS["conv2d_fused"],
                         inputs=tuple(inputs), attrs=attrs, phase=node.phase, scope=conv.scope, source=conv.source)
            replaced[id(node)] = fused
            report.fused[fused.name] = [n.name for n in chain]
            node = fused
        node.redirect_inputs(replaced)
        new_nodes.append(node)
    graph.nodes = new_nodes
    graph.redirect_roots(replaced)
    return graph
