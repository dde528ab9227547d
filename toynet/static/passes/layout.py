"""Layout planning: run chains of convolutions on channels-last (NHWC) images.

Every tensor a user can see is NCHW (batch, channels, height, width), the layout PyTorch and OneFlow
show. For MobileNetV2's convolutions it is the slow one: a 1x1 convolution of an NCHW batch is one
matrix product *per image* (or a transpose first), and a depthwise one slides along rows only a few
pixels long. In NHWC, a 1x1 convolution of the whole batch is a single ``(N*H*W, C) @ (C, O)`` product,
and a depthwise one works on contiguous runs of channels.

Eager mode cannot switch: each op's result must be NCHW, for whoever reads it next. A compiled graph
knows every reader, so this pass marks a *region* of ops that can all work in NHWC:

* ``conv2d_fused`` nodes (after :mod:`.fold_batch_norm`) with a 1x1 or depthwise kernel, and
* elementwise ops whose inputs all come from the region with the same shape (the residual ``add``),

switches them to NHWC (their node shapes become ``[N, H, W, C]``), and puts one copy,
``to_channels_last``, where a value enters the region and one, ``to_channels_first``, where a value
leaves it (for a reader outside, or as an output). Only forward-only (inference) graphs are rewritten:
in a training graph the backward ops read the forward's values in NCHW.
"""

from __future__ import annotations

from ...ops import OPS
from ...ops.conv_fused import kernel_for, nhwc
from ..ir import FORWARD, OP, Graph, Node
from .report import PassReport, timed


def _channels_last_conv(node: Node) -> bool:
    return (node.kind == OP and node.op.name == "conv2d_fused" and not node.attrs.get("channels_last")
            and node.dtype.is_floating_point
            and kernel_for(node.inputs[0].shape, node.inputs[1].shape, node.attrs["padding"],
                           node.attrs["groups"]) != "dense")


def _region(graph: Graph) -> set[int]:
    """The ids of the nodes that will run channels-last."""
    region: set[int] = set()
    for node in graph.nodes:
        if _channels_last_conv(node):
            region.add(id(node))
        elif (node.kind == OP and node.op.elementwise and node.input_nodes
              and all(id(x) in region and x.shape == node.shape for x in node.input_nodes)):
            region.add(id(node))
    return region


def _conversion(graph: Graph, op_name: str, source: Node, shape: tuple) -> Node:
    return Node(graph.unique_name(f"{source.name}-{op_name}"), OP, shape, source.dtype, source.device,
                op=OPS[op_name], inputs=(source,), phase=FORWARD, scope=source.scope, source=source.source)


def _run(graph: Graph, report: PassReport) -> Graph:
    if any(n.kind == OP and n.phase != FORWARD for n in graph.nodes):
        report.notes.append("not applied: the graph has a backward (it reads the forward's values as NCHW)")
        return graph
    region = _region(graph)
    if not region:
        return graph
    logical = {id(n): n.shape for n in graph.nodes if id(n) in region}  # NCHW shapes, before the switch
    into: dict[int, Node] = {}    # id(value outside) -> its NHWC copy
    out_of: dict[int, Node] = {}  # id(value inside) -> its NCHW copy
    new_nodes: list[Node] = []

    def converted(cache: dict, op_name: str, source: Node, shape: tuple) -> Node:
        if id(source) not in cache:
            cache[id(source)] = _conversion(graph, op_name, source, shape)
            new_nodes.append(cache[id(source)])
        return cache[id(source)]

    for node in graph.nodes:
        if id(node) in region:
            if node.op.name == "conv2d_fused":
                x = node.inputs[0]
                if id(x) not in region:
                    x = converted(into, "to_channels_last", x, nhwc(x.shape))
                node.inputs = (x,) + node.inputs[1:]
                node.attrs = dict(node.attrs, channels_last=True)
            node.shape = nhwc(node.shape)
        else:
            node.inputs = tuple(converted(out_of, "to_channels_first", x, logical[id(x)])
                                if isinstance(x, Node) and id(x) in region else x for x in node.inputs)
        new_nodes.append(node)
    roots = [n for n in graph.roots() if id(n) in region]
    replaced = {id(n): converted(out_of, "to_channels_first", n, logical[id(n)]) for n in roots}
    graph.nodes = new_nodes
    graph.redirect_roots(replaced)
    report.notes.append(f"{len(region)} ops channels-last, {len(into)} copies in, {len(out_of)} out")
    return graph


def plan_layout(graph: Graph) -> tuple[Graph, PassReport]:
    """The pass: chains of 1x1/depthwise convolutions (and the elementwise ops between them) run NHWC."""
    return timed("ChannelsLast", _run, graph)
