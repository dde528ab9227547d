"""Automatic mixed precision: run the matrix-multiply-like ops in float16, everything else in float32.

``graph.config.enable_amp(True)`` turns this pass on. It works as PyTorch's autocast and OneFlow's AMP
lists do, on the traced graph instead of on each call:

* :data:`FLOAT16_OPS` run in float16: matrix products and convolutions, forward *and* backward. They do
  most of a network's arithmetic and tolerate float16's 11-bit mantissa, because each output sums
  many products (and on GPUs they run on tensor cores).
* :data:`FLOAT32_OPS` are never put in float16: exponentials, logarithms, softmax and losses,
  normalisation statistics and sums, whose range or accumulated rounding float16 cannot hold
  (``exp(12)`` already overflows it). The pass's report names those the graph has.
* every other op (ReLU, add, reshape...) runs in the dtype of its inputs, which is float32 here, since
  each float16 op's result is cast back to float32 straight away.

So the parameters (the *master weights*), their gradients and the optimizer's arithmetic stay float32:
the pass inserts a ``cast`` to float16 before each float16 op's float32 inputs and a ``cast`` back after
it. A weight read by several float16 ops is cast once (the later ones read the same cast). A float16
op whose result exceeds 65504 gives ``inf``; that is what the gradient scaler's inf/NaN check catches.
"""

from __future__ import annotations

from ...backend import float16, float32
from ...ops import OPS
from ..ir import OP, OPTIMIZER, Graph, Node, PassReport, graph_pass

#: Ops computed in float16 (their float32 inputs cast down, the result cast back up).
FLOAT16_OPS = frozenset({"matmul", "linear", "linear_grad_weight", "conv2d", "conv2d_grad_input",
                         "conv2d_grad_weight"})
#: Ops that must not run in float16 (no float16 value reaches them: every float16 result is cast back first).
FLOAT32_OPS = frozenset({"exp", "log", "pow", "softmax", "log_softmax", "cross_entropy", "nll_loss",
                         "mse_loss", "sum", "mean", "sum_squares", "batch_norm", "var", "norm"})


def _cast(graph: Graph, value: Node, dtype, reader: Node, why: str) -> Node:
    return Node(graph.unique_name(f"{value.name}-to-{dtype.name}"), OP, value.shape, dtype, value.device,
                op=OPS["cast"], inputs=(value,), attrs={"dtype": dtype}, phase=reader.phase, scope=reader.scope,
                source=f"amp: {why}")


@graph_pass("AutoMixedPrecision")
def auto_mixed_precision(graph: Graph, report: PassReport) -> Graph:
    down: dict[int, Node] = {}      # id(float32 value) -> its float16 cast, made before its first reader
    up: dict[int, Node] = {}        # id(float16 op) -> the cast of its result back to float32
    nodes: list[Node] = []
    converted = 0
    for n in graph.nodes:
        n.redirect_inputs(up)
        if n.kind != OP or n.phase == OPTIMIZER or n.op.name not in FLOAT16_OPS or n.dtype is not float32:
            nodes.append(n)
            continue
        inputs = []
        for x in n.inputs:
            if isinstance(x, Node) and x.dtype is float32:
                if id(x) not in down:
                    down[id(x)] = _cast(graph, x, float16, n, f"{n.op.name} runs in float16")
                    nodes.append(down[id(x)])
                x = down[id(x)]
            inputs.append(x)
        n.inputs, n.dtype = tuple(inputs), float16
        nodes.append(n)
        up[id(n)] = _cast(graph, n, float32, n, "back to float32 after a float16 op")
        nodes.append(up[id(n)])
        converted += 1
    graph.nodes = nodes
    graph.redirect_roots(up)
    ops = [n for n in nodes if n.kind == OP]
    half = sorted({n.op.name for n in ops if n.op.name in FLOAT16_OPS and n.dtype is float16})
    kept = sorted({n.op.name for n in ops if n.op.name in FLOAT32_OPS})
    report.notes.append(f"{converted} ops in float16 ({', '.join(half) or 'none'}), {len(down) + len(up)} casts; "
                        f"kept float32: {', '.join(kept) or 'none'}")
    return graph
