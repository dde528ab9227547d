"""What a folded module does, in the words a paper uses: "conv 3x3 s2 3->32, BN, ReLU6", "linear 1280->10".

A module drawn as one box (``depth=``) shows the layers it runs, read from the ops traced inside it and
their attributes and shapes, not a count of op names: an ``InvertedResidual`` of MobileNetV2 runs dozens of
ops (the convolutions, and BatchNorm's statistics, reshapes and running-average updates), and what the
reader wants is its three convolutions. :func:`layer_lines` turns a module's forward ops into lines:

* each **layer op** becomes a word: a convolution its kernel, stride, groups and channels
  (``conv 1x1 16->96``, ``dwconv 3x3 s2 96`` for a depthwise one), a matrix product with a parameter
  ``linear 1280->10``, ``BN``, ``ReLU6``, ``avgpool``, ``dropout``...; ops that only serve a layer
  (BatchNorm's statistics, reshapes, indexing, the running averages' updates) are left out;
* a layer with weights (a convolution, a linear map) starts a line, and what follows it (normalisation,
  activation) joins that line; an ``add`` of two computed values of its own shape is a ``+ residual``;
* repeated lines are counted (``conv 3x3 64->64, BN, ReLU  x3``); a module with more lines than fit
  counts its layers by kind instead (MobileNetV2's ``features`` in one box: ``52 layers: 35 conv,
  17 dwconv, 52 BN, 35 ReLU6, 10 residual``); a module with no layer op says what its ops are
  (``sub, square, sum``).

The same ops decide the words whatever the path compiled them: a fused ``conv2d_fused`` (convolution,
BatchNorm and activation in one kernel) reads as the three it fused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..static.ir import STATE, Node

#: ops whose word follows the layer before it on the same line
ACTIVATIONS = {"relu": "ReLU", "relu6": "ReLU6", "sigmoid": "sigmoid", "tanh": "tanh", "gelu": "GELU",
               "gelu_tanh": "GELU", "softmax": "softmax", "log_softmax": "log-softmax", "clamp": "clamp"}
NORMS = {"batch_norm": "BN", "layer_norm": "LayerNorm", "instance_norm": "InstanceNorm"}
#: ops that only serve a layer (its statistics, shapes, running averages): never a word of their own
GLUE = {"batch_norm_stats", "getitem", "reshape", "permute", "broadcast_to", "mul", "add", "sub", "div",
        "fused_elementwise", "identity", "cast", "to_device", "to_channels_last", "to_channels_first", "sum_to",
        "logical_not", "where", "tril", "triu"}   # (the last four: an attention's causal mask)
#: the most lines a box gets; more are counted on the last one
MAX_LINES = 6


def layer_lines(ops: Sequence[Node], max_lines: int = MAX_LINES) -> list[str]:
    """The lines that say what ``ops`` (a module's forward ops, in order) compute."""
    words = [w for n in ops for w in _words(n)]
    if all(kind == "other" for kind, _ in words):  # no layer it knows: what the ops are
        names = list(dict.fromkeys(n.op_name for n in ops))
        return [", ".join(names[:4]) + (", ..." if len(names) > 4 else "")] if names else []
    lines: list[str] = []
    for kind, word in words:
        if kind != "start" and lines:
            lines[-1] += ", " + word
        else:
            lines.append(word)
    counted = _counted(lines, max_lines + 1)
    return counted if len(counted) <= max_lines else _census([w for k, w in words if k != "other"])


def _census(words: list[str], width: int = 36) -> list[str]:
    """The layers by kind, "52 layers: 35 conv, 17 dwconv, 52 BN, ...", in lines of about ``width``."""
    kinds: dict[str, int] = {}
    for word in words:
        kind = {"+ residual": "residual", "global avgpool": "avgpool"}.get(word, word.split(" ")[0])
        kinds[kind] = kinds.get(kind, 0) + 1
    parts = [f"{n} {kind}" for kind, n in kinds.items()]
    lines = [f"{len(words)} layers:"]
    for part in parts:
        if len(lines) > 1 and len(lines[-1]) + len(part) + 2 <= width:
            lines[-1] += ", " + part
        else:
            lines[-1] += ("," if len(lines) > 1 else "")
            lines.append(part)
    return lines


def _words(n: Node) -> Iterable[tuple[str, str]]:
    """(kind, word) for one op: ``"start"`` begins a line, ``"follow"`` joins the line before, ``"other"``
    (an op it has no word for) too."""
    name = n.op_name
    if name in ("conv2d", "conv2d_fused"):
        yield "start", _conv(n)
        if n.attrs.get("norm"):
            yield "follow", "BN"
        if n.attrs.get("activation"):
            yield "follow", ACTIVATIONS.get(n.attrs["activation"], n.attrs["activation"])
    elif name in ("matmul", "linear") and _parameter_of(n) is not None:
        yield "start", _linear(n)
    elif name in NORMS:
        yield "follow", NORMS[name]
    elif name in ACTIVATIONS:
        yield "follow", ACTIVATIONS[name]
    elif name == "fused_elementwise":
        for step in n.attrs.get("program", ()):  # an activation fused into an elementwise kernel still shows
            if isinstance(step, dict) and step.get("op") in ACTIVATIONS:
                yield "follow", ACTIVATIONS[step["op"]]
    elif name in ("max_pool2d", "avg_pool2d"):
        kernel = _pair(n.attrs.get("kernel_size", ""))
        stride = _pair(n.attrs.get("stride", ""))
        yield "start", f"{name[:3]}pool {kernel}x{kernel}" + (f" s{stride}" if stride not in ("", "1") else "")
    elif name == "adaptive_avg_pool2d":
        size = tuple(n.shape[-2:])
        yield "start", "global avgpool" if size == (1, 1) else f"avgpool to {size[0]}x{size[1]}"
    elif name == "dropout_mask":
        yield "follow", "dropout"
    elif name == "cross_entropy":
        yield "start", "cross-entropy"
    elif name in ("mse_loss",):
        yield "start", "MSE"
    elif name == "embedding":
        weight = n.inputs[0] if n.inputs and isinstance(n.inputs[0], Node) else None
        yield "start", f"embedding {weight.shape[0]}x{weight.shape[1]}" if weight is not None and len(weight.shape) == 2 \
            else "embedding"
    elif name == "add" and _residual(n):
        yield "start", "+ residual"
    elif name not in GLUE:
        yield "other", name


def _conv(n: Node) -> str:
    """``conv 3x3 s2 3->32``, ``dwconv 3x3 96`` (depthwise), ``conv 3x3 g4 64->64`` (grouped)."""
    x, w = n.inputs[0], n.inputs[1]
    out, _, kh, kw = w.shape
    channels = x.shape[-1] if n.attrs.get("channels_last") else x.shape[1]
    groups = n.attrs.get("groups", 1)
    stride = _pair(n.attrs.get("stride", 1))
    s = f" s{stride}" if stride != "1" else ""
    if groups > 1 and groups == channels == out:
        return f"dwconv {kh}x{kw}{s} {out}"
    return f"conv {kh}x{kw}{s}" + (f" g{groups}" if groups > 1 else "") + f" {channels}->{out}"


def _linear(n: Node) -> str:
    x = n.inputs[0] if isinstance(n.inputs[0], Node) else None
    if x is None or not x.shape or not n.shape:
        return "linear"
    return f"linear {x.shape[-1]}->{n.shape[-1]}"


def _parameter_of(n: Node) -> Node | None:
    """The parameter a matrix product multiplies by (directly or through a transpose), if any."""
    for x in n.input_nodes:
        if x.kind == STATE and x.state_kind == "parameter":
            return x
        if x.op_name == "permute" and x.input_nodes and x.input_nodes[0].kind == STATE \
                and x.input_nodes[0].state_kind == "parameter":
            return x.input_nodes[0]
    return None


def _residual(n: Node) -> bool:
    """An add of two computed values of the shape of its result: a skip connection."""
    ins = n.input_nodes
    return len(ins) == 2 and all(x.kind not in (STATE,) and tuple(x.shape) == tuple(n.shape) for x in ins) \
        and len(n.shape) >= 2


def _pair(value: Any) -> str:
    """``2`` from ``2`` or ``(2, 2)``; ``2x1`` from ``(2, 1)``."""
    if isinstance(value, (tuple, list)):
        return str(value[0]) if len(set(value)) == 1 else "x".join(str(v) for v in value)
    return str(value)


def _counted(lines: list[str], max_lines: int) -> list[str]:
    """Runs of the same line as one line with ``  xN``; at most ``max_lines``, the rest counted."""
    runs: list[list] = []
    for line in lines:
        if runs and runs[-1][0] == line:
            runs[-1][1] += 1
        else:
            runs.append([line, 1])
    out = [line + (f"  x{count}" if count > 1 else "") for line, count in runs]
    return out[:max_lines]
