"""ONNX ops that cut, pad, pick from and rearrange tensors: Split, Pad, Trilu, CumSum, Tile, Hardmax,
DepthToSpace, SpaceToDepth, GatherElements, TopK.

Each becomes toynet ops that already have gradients (``getitem`` with slices or index arrays, ``cat``,
``where``, ``reshape``, ``permute``) or, for CumSum and Trilu, toynet's ``cumsum``, ``tril`` and ``triu``. Registered in
:data:`toynet.onnx.import_ops.IMPORTERS`.
"""

from __future__ import annotations

from .. import backend
from .import_ops import IMPORTERS, as_ints, importer


@importer("Split")
def _split(b, args, attrs):
    x = args[0]
    axis = attrs.get("axis", 0) % len(x.shape)
    if len(args) > 1 and args[1] is not None:
        sizes = as_ints(b.known(args[1], "split"))
    elif "split" in attrs:
        sizes = tuple(attrs["split"])
    else:  # equal parts, the last one smaller (opset 18's num_outputs)
        parts = attrs.get("num_outputs", len(b.onnx_node.output))
        step = -(-x.shape[axis] // parts)
        sizes = tuple(min(step, x.shape[axis] - i * step) for i in range(parts))
    outputs, start = [], 0
    for size in sizes:
        index = (slice(None),) * axis + (slice(start, start + size),)
        outputs.append(b.op("getitem", x, index=index))
        start += size
    return outputs


@importer("Trilu")
def _trilu(b, args, attrs):
    k = int(b.known(args[1], "k").item()) if len(args) > 1 and args[1] is not None else 0
    return b.op("triu" if attrs.get("upper", 1) else "tril", args[0], k)


@importer("GatherElements")
def _gather_elements(b, args, attrs):
    x, index = args
    axis = attrs.get("axis", 0) % len(x.shape)
    index = b.op("where", b.op("lt", index, 0), b.op("add", index, x.shape[axis]), index)  # negative: from the end
    return b.op("gather", x, b.op("cast", index, dtype=backend.int64), dim=axis)


@importer("TopK")
def _topk(b, args, attrs):
    x = args[0]
    k = int(backend.host.asarray(b.known(args[1], "K")).reshape(-1)[0])
    axis = attrs.get("axis", -1) % len(x.shape)
    indices = b.op("topk_indices", x, k, bool(attrs.get("largest", 1)), dim=axis)
    return [b.op("gather", x, indices, dim=axis), indices]


@importer("CumSum")
def _cumsum(b, args, attrs):
    x = args[0]
    dim = int(b.known(args[1], "axis").reshape(-1)[0]) % len(x.shape)
    flip = (slice(None),) * dim + (slice(None, None, -1),)
    source = b.op("getitem", x, index=flip) if attrs.get("reverse", 0) else x
    total = b.op("cumsum", source, dim=dim)
    if attrs.get("exclusive", 0):  # each total without its own element
        total = b.op("sub", total, source)
    return b.op("getitem", total, index=flip) if attrs.get("reverse", 0) else total


_PAD_MODES = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}  # ONNX's names are NumPy's


@importer("Pad")
def _pad(b, args, attrs):
    """Axis by axis: a negative pad is a slice, a constant pad is a concatenation with filled blocks, and
    reflect/edge/wrap gather the input's own elements (the indices computed here, as NumPy pads an arange)."""
    x = args[0]
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    rank = len(x.shape)
    pads = as_ints(b.known(args[1], "pads")) if len(args) > 1 and args[1] is not None else tuple(attrs["pads"])
    value = b.known(args[2], "constant_value").item() if len(args) > 2 and args[2] is not None else 0
    axes = as_ints(b.known(args[3], "axes")) if len(args) > 3 and args[3] is not None else tuple(range(rank))
    if mode != "constant" and mode not in _PAD_MODES:
        raise NotImplementedError(f"{b.where()}: pad mode {mode!r} is not supported")
    result = x
    for k, axis in enumerate(a % rank for a in axes):
        before, after = pads[k], pads[k + len(axes)]
        if before < 0 or after < 0:
            size = result.shape[axis]
            cut = slice(max(-before, 0), size - max(-after, 0))
            result = b.op("getitem", result, index=(slice(None),) * axis + (cut,))
            before, after = max(before, 0), max(after, 0)
        if before == after == 0:
            continue
        if mode == "constant":
            blocks = []
            for count in (before, after):
                shape = b.allocation(result.shape[:axis] + (count,) + result.shape[axis + 1:],
                                     result.dtype.array_dtype.itemsize, "padding")
                blocks.append(b.constant(backend.host.full(shape, value, dtype=result.dtype.array_dtype), "pad")
                              if count else None)
            parts = [p for p in (blocks[0], result, blocks[1]) if p is not None]
            result = b.op("cat", *parts, dim=axis)
        else:
            where = backend.host.pad(backend.host.arange(result.shape[axis]), (before, after), mode=_PAD_MODES[mode])
            result = b.op("getitem", result, b.constant(where.astype(backend.host.int64), "pad_index"),
                          index=(slice(None),) * axis + ("<tensor>",))
    return result if result is not x else b.op("identity", x)


@importer("Tile")
def _tile(b, args, attrs):
    x, result = args[0], args[0]
    for axis, times in enumerate(as_ints(b.known(args[1], "repeats"))):
        if times != 1:  # gather the axis's elements times times over: 0 1 2 0 1 2...
            b.allocation((x.shape[axis] * times,), 8, "index along axis {axis}".format(axis=axis))
            where = backend.host.tile(backend.host.arange(x.shape[axis]), times).astype(backend.host.int64)
            result = b.op("getitem", result, b.constant(where, "tile_index"),
                          index=(slice(None),) * axis + ("<tensor>",))
    return result if result is not x else b.op("identity", x)


@importer("Hardmax")
def _hardmax(b, args, attrs):
    x = args[0]
    axis = attrs.get("axis", -1) % len(x.shape)
    first_max = b.op("argmax", x, dim=axis, keepdim=False)  # ties go to the first, as ONNX says
    return b.op("one_hot", first_max, num_classes=x.shape[axis], dim=axis, dtype=x.dtype)


@importer("DepthToSpace", "SpaceToDepth")
def _depth_space(b, args, attrs):
    x, k = args[0], int(attrs["blocksize"])
    n, c, h, w = x.shape
    mode = attrs.get("mode", b"DCR")
    crd = (mode.decode() if isinstance(mode, bytes) else mode) == "CRD"  # channel first, then the block's row, column
    if b.onnx_node.op_type == "SpaceToDepth":
        blocks = b.op("reshape", x, shape=(n, c, h // k, k, w // k, k))
        moved = b.op("permute", blocks, dims=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
        return b.op("reshape", moved, shape=(n, c * k * k, h // k, w // k))
    if crd:
        blocks = b.op("reshape", x, shape=(n, c // (k * k), k, k, h, w))
        moved = b.op("permute", blocks, dims=(0, 1, 4, 2, 5, 3))
    else:  # DCR: the block's row and column, then the channel
        blocks = b.op("reshape", x, shape=(n, k, k, c // (k * k), h, w))
        moved = b.op("permute", blocks, dims=(0, 3, 4, 1, 5, 2))
    return b.op("reshape", moved, shape=(n, c // (k * k), h * k, w * k))


__all__ = ["IMPORTERS"]
