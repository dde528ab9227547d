"""Layout planning: run the convolutions, and what lies between them, on channels-last (NHWC) images.

Every tensor a user can see is NCHW (batch, channels, height, width), the layout PyTorch and OneFlow
show. For MobileNetV2's convolutions it is the slow one: a 1x1 convolution of an NCHW batch is one
matrix product *per image*, and a depthwise one slides along rows only a few pixels long, so the NCHW
kernels copy each chunk of images to NHWC and back (:mod:`toynet.ops.conv_kernels`). In NHWC, a 1x1
convolution of the whole batch is a single ``(N*H*W, C) @ (C, O)`` product, forward and backward, and
a depthwise one works on contiguous runs of channels (:mod:`toynet.ops.fast.conv_nhwc`).

Eager mode cannot switch: each op's result must be NCHW, for whoever reads it next. A compiled graph
knows every reader, forward and backward, so this pass picks a *region* that runs in NHWC:

* 1x1 and depthwise convolutions and their two backward ops (``conv2d_nhwc_grad_input/weight``);
* BatchNorm's four ops: on NHWC data a channel's values are a column of the ``(N*H*W, C)`` matrix the
  array *is* (a free reshape), which the same kernels handle as a 2-d batch;
* elementwise ops (relu6 and its mask, the residual ``add``, gradient sums) reading a region value,
  when every 4-d input has the output's shape (no broadcasting that would need the NCHW axes).

Values in the region have NHWC node shapes (``[N, H, W, C]``). One copy, ``to_channels_last``, is put
where a value enters the region, and one, ``to_channels_first``, where a value leaves it (for a reader
outside, or as an output): MobileNetV2 has two of each, around its first (dense) convolution and its
pooling head.
"""

from __future__ import annotations

from ....ops import OPS
from ....ops.fast.conv_fused import kernel_for, nhwc
from ...ir import OP, Graph, Node, PassReport, graph_pass

#: BatchNorm's ops, and which of their inputs are activations (NHWC in the region, so reshaped to 2-d).
_NORM_INPUTS = {"batch_norm_stats": (0,), "batch_norm": (0,), "batch_norm_grad_stats": (0, 1),
                "batch_norm_grad_input": (0, 1)}
#: Those of them whose output has the activation's shape.
_NORM_ACTIVATION_OUTPUT = {"batch_norm", "batch_norm_grad_input"}


def _conv_shapes(node: Node) -> tuple | None:
    """(NCHW input shape, weight shape) of a convolution op or one of its backward ops, else None."""
    name = node.op.name
    if name == "conv2d" or (name == "conv2d_fused" and not node.attrs.get("channels_last")):
        return node.inputs[0].shape, node.inputs[1].shape
    if name == "conv2d_grad_input":
        return tuple(node.attrs["input_shape"]), node.inputs[1].shape
    if name == "conv2d_grad_weight":
        return node.inputs[0].shape, tuple(node.attrs["weight_shape"])
    return None


def _nhwc_conv(node: Node) -> bool:
    shapes = _conv_shapes(node)
    # (The forward's defaults: a saved graph may leave out attributes that have their default value.)
    padding, groups = node.attrs.get("padding", (0, 0)), node.attrs.get("groups", 1)
    return shapes is not None and node.dtype.is_floating_point and kernel_for(*shapes, padding, groups) != "dense"


def _activation_inputs(node: Node) -> tuple:
    """Positions of the inputs that are images (NHWC once the node runs in the region)."""
    name = node.op.name
    if name in _NORM_INPUTS:
        return _NORM_INPUTS[name]
    if name == "conv2d_grad_weight":
        return (0, 1)
    if _conv_shapes(node) is not None:
        return (0,)
    return tuple(k for k, x in enumerate(node.inputs) if isinstance(x, Node) and len(x.shape) == 4)


def _plan(graph: Graph) -> tuple[set[int], set[int]]:
    """``(converted, nhwc_values)``: the ids of the nodes that run in NHWC, and of those whose value is NHWC."""
    converted: set[int] = set()
    values: set[int] = set()
    for node in graph.nodes:
        if node.kind != OP:
            continue
        if _nhwc_conv(node):
            converted.add(id(node))
            if node.op.name != "conv2d_grad_weight":
                values.add(id(node))
        elif node.op.name in _NORM_INPUTS:
            if any(id(node.inputs[k]) in values for k in _NORM_INPUTS[node.op.name]) and len(node.inputs[0].shape) == 4:
                converted.add(id(node))
                if node.op.name in _NORM_ACTIVATION_OUTPUT:
                    values.add(id(node))
        elif (node.op.elementwise and len(node.shape) == 4
              and any(id(x) in values for x in node.input_nodes)
              and all(x.shape == node.shape for x in node.input_nodes if len(x.shape) == 4)
              and all(len(x.shape) in (0, 4) for x in node.input_nodes)):
            converted.add(id(node))
            values.add(id(node))
    return converted, values


class _Rewriter:
    """Walks the graph once, switching the planned nodes to NHWC and adding the copies and reshapes."""

    def __init__(self, graph: Graph, converted: set[int], values: set[int]):
        self.graph, self.converted, self.values = graph, converted, values
        self.logical = {id(n): n.shape for n in graph.nodes}      # NCHW shapes, before the switch
        self.into: dict[int, Node] = {}                            # id(NCHW value) -> its NHWC copy
        self.out_of: dict[int, Node] = {}                          # id(NHWC value) -> its NCHW copy
        self.replaced: dict[int, Node] = {}                        # BatchNorm node -> its reshape back
        self.nodes: list[Node] = []
        self.reshapes = 0

    def _new(self, op_name: str, source: Node, out_shape: tuple, **attrs) -> Node:
        node = Node(self.graph.unique_name(f"{source.name}-{op_name}"), OP, out_shape, source.dtype, source.device,
                    op=OPS[op_name], inputs=(source,), attrs=attrs, phase=source.phase, scope=source.scope,
                    source=source.source)
        self.nodes.append(node)
        return node

    def nhwc_value(self, x: Node) -> Node:
        if id(x) in self.values:
            return x
        if id(x) not in self.into:
            self.into[id(x)] = self._new("to_channels_last", x, nhwc(x.shape))
            self.values.add(id(self.into[id(x)]))
        return self.into[id(x)]

    def nchw_value(self, x: Node) -> Node:
        if id(x) not in self.values:
            return x
        if id(x) not in self.out_of:
            self.out_of[id(x)] = self._new("to_channels_first", x, self.logical[id(x)])
        return self.out_of[id(x)]

    def rows(self, x: Node) -> Node:
        """An NHWC image batch seen as the (N*H*W, C) matrix BatchNorm's kernels take as a 2-d batch."""
        n, h, w, c = x.shape
        self.reshapes += 1
        return self._new("reshape", x, (n * h * w, c), shape=(n * h * w, c))

    def switch(self, node: Node) -> Node:
        name = node.op.name
        inputs = list(node.inputs)
        for k in _activation_inputs(node):
            inputs[k] = self.nhwc_value(inputs[k])
        if name in _NORM_INPUTS:
            for k in _NORM_INPUTS[name]:
                inputs[k] = self.rows(inputs[k])
            node.inputs = tuple(inputs)
            if name not in _NORM_ACTIVATION_OUTPUT:
                return node
            logical = node.shape
            node.shape = inputs[0].shape
            self.nodes.append(node)
            back = self._new("reshape", node, nhwc(logical), shape=nhwc(logical))
            self.values.add(id(back))
            self.logical[id(back)] = logical
            self.replaced[id(node)] = back
            return None
        node.inputs = tuple(inputs)
        if name == "conv2d":
            node.op = OPS["conv2d_fused"]
            node.attrs = dict(node.attrs, bias=len(inputs) == 3, norm=None, activation=None)
        if name in ("conv2d", "conv2d_fused"):
            node.attrs = dict(node.attrs, channels_last=True)
        elif name == "conv2d_grad_input":
            node.op = OPS["conv2d_nhwc_grad_input"]
            node.attrs = dict(node.attrs, input_shape=nhwc(tuple(node.attrs["input_shape"])))
        elif name == "conv2d_grad_weight":
            node.op = OPS["conv2d_nhwc_grad_weight"]
            return node
        node.shape = nhwc(node.shape)
        return node

    def run(self) -> None:
        for node in self.graph.nodes:
            node.redirect_inputs(self.replaced)
            if id(node) in self.converted:
                node = self.switch(node)
                if node is None:      # (a BatchNorm node, appended with its reshape back)
                    continue
            elif node.kind == OP:
                node.inputs = tuple(self.nchw_value(x) if isinstance(x, Node) else x for x in node.inputs)
            self.nodes.append(node)
        self.graph.redirect_roots(self.replaced)
        roots = {id(n): self.nchw_value(n) for n in self.graph.roots() if id(n) in self.values}
        self.graph.nodes = self.nodes
        self.graph.redirect_roots(roots)


@graph_pass("ChannelsLast")
def plan_layout(graph: Graph, report: PassReport) -> Graph:
    """1x1/depthwise convolutions, BatchNorm and the elementwise ops between them run NHWC."""
    converted, values = _plan(graph)
    if not converted:
        return graph
    rewriter = _Rewriter(graph, converted, values)
    rewriter.run()
    report.notes.append(f"{len(converted)} ops channels-last, {len(rewriter.into)} copies in, "
                        f"{len(rewriter.out_of)} out")
    return graph
