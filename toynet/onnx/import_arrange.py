"""ONNX ops that cut, pad, pick from and rearrange tensors: Split, Pad, Trilu, CumSum, Tile, Hardmax,
DepthToSpace, SpaceToDepth, GatherElements, TopK.

Each becomes toynet ops that already have gradients (``getitem`` with slices or index arrays, ``cat``,
``where``, ``reshape``, ``permute``) or, for CumSum and Trilu, toynet's ``cumsum``, ``tril`` and ``triu``. Registered in
:data:`toynet.onnx.import_ops.IMPORTERS`.
"""

from __future__ import annotations

from .. import backend
from .errors import ONNXImportError, ONNXUnsupportedError
from .import_ops import IMPORTERS, as_ints, check_indices, importer, on_2d_before_13, take


@importer("Split")
def _split(b, args, attrs):
    x = args[0]
    axis = b.axis(attrs.get("axis", 0), len(x.shape))
    size = x.shape[axis]
    if len(args) > 1 and args[1] is not None:
        sizes = as_ints(b.known(args[1], "split"))
    elif "split" in attrs:
        sizes = tuple(int(k) for k in attrs["split"])
    else:  # equal parts, the last one smaller (opset 18's num_outputs)
        parts = attrs.get("num_outputs", len(b.onnx_node.output))
        if parts != len(b.onnx_node.output):   # (checked before making a list of them: num_outputs may be 2**62)
            raise ONNXImportError(f"{b.where()}: attribute 'num_outputs' is {parts}, but the node has "
                                  f"{len(b.onnx_node.output)} output(s); expected as many parts as outputs")
        step = -(-size // parts)
        sizes = tuple(max(0, min(step, size - i * step)) for i in range(parts))
    if any(k < 0 for k in sizes) or sum(sizes) != size or len(sizes) != len(b.onnx_node.output):
        raise ONNXImportError(f"{b.where()}: splits axis {axis} (size {size}) into {list(sizes)}; expected "
                              f"{len(b.onnx_node.output)} sizes (one per output), none negative, adding up to {size}")
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
    axis = b.axis(attrs.get("axis", 0), len(x.shape))
    if len(index.shape) != len(x.shape):
        raise ONNXImportError(f"{b.where()}: its indices have {len(index.shape)} dimension(s) and its data "
                              f"{len(x.shape)}; GatherElements needs as many")
    if index.known is not None:
        check_indices(b, index.known, x.shape[axis], axis)
    index = b.op("where", b.op("lt", index, 0), b.op("add", index, x.shape[axis]), index)  # negative: from the end
    return b.op("gather", x, b.op("cast", index, dtype=backend.int64), dim=axis)


@importer("TopK")
def _topk(b, args, attrs):
    x = args[0]
    axis = b.axis(attrs.get("axis", -1), len(x.shape))
    k = backend.host.asarray(b.known(args[1], "K"))
    if k.size != 1 or not 0 <= int(k.reshape(-1)[0]) <= x.shape[axis]:
        raise ONNXImportError(f"{b.where()}: its K is {k.tolist()}; expected one number from 0 to {x.shape[axis]}, "
                              f"the size of axis {axis}")
    k = int(k.reshape(-1)[0])
    indices = b.op("topk_indices", x, k, bool(attrs.get("largest", 1)), dim=axis)
    return [b.op("gather", x, indices, dim=axis), indices]


@importer("CumSum")
def _cumsum(b, args, attrs):
    x = args[0]
    axis = backend.host.asarray(b.known(args[1], "axis"))
    if axis.size != 1:
        raise ONNXImportError(f"{b.where()}: its axis is {axis.tolist()}; expected one number")
    dim = b.axis(int(axis.reshape(-1)[0]), len(x.shape), "input 'axis'")
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
    value = (b.known(args[2], "constant_value").item() if len(args) > 2 and args[2] is not None
             else attrs.get("value", 0))   # (an attribute before opset 11)
    axes = as_ints(b.known(args[3], "axes")) if len(args) > 3 and args[3] is not None else tuple(range(rank))
    axes = b.axes(axes, rank, "its axes")
    if len(pads) != 2 * len(axes):
        raise ONNXImportError(f"{b.where()}: its pads {list(pads)} should hold {2 * len(axes)} numbers (a start "
                              f"and an end for each of {len(axes)} axes)")
    if mode != "constant" and mode not in _PAD_MODES:
        raise ONNXUnsupportedError(f"{b.where()}: pad mode {mode!r} is not supported")
    result = x
    for k, axis in enumerate(axes):
        before, after = pads[k], pads[k + len(axes)]
        size = result.shape[axis]
        # ONNX's output element j along the axis is the input's element j - before, or padding where there is none;
        # negative pads cut. Of the input, elements lo..hi stay (hi computed without Python's wrap-around of
        # negative stops: cutting 3 from the end of 2 elements leaves none, not the first one).
        length = size + before + after
        if length < 0:
            raise ONNXImportError(f"{b.where()}: its pads {list(pads)} would leave {length} elements along axis "
                                  f"{axis} (of size {size}); expected pads that leave 0 or more")
        lo, hi = max(0, -before), max(0, min(size, size + after))
        kept = max(0, hi - lo)
        if (lo, hi) != (0, size):
            result = b.op("getitem", result, index=(slice(None),) * axis + (slice(lo, lo + kept),))
        lead = min(max(before, 0), length)    # padding before the kept elements
        trail = length - lead - kept          # and after them
        if mode != "constant" and kept == 0:
            # Edge, reflect and wrap repeat the kept elements: there must be some, as ONNX Runtime requires even
            # when nothing is padded.
            raise ONNXImportError(f"{b.where()}: its pads {list(pads)} leave no element of axis {axis} to repeat "
                                  f"in mode {mode!r}")
        if mode == "reflect" and max(lead, trail) >= kept:
            # A reflection repeats the elements after the edge one, each once at most (ONNX Runtime's rule; NumPy
            # would reflect again and again).
            raise ONNXImportError(f"{b.where()}: its pads {list(pads)} pad {max(lead, trail)} element(s) by "
                                  f"reflecting {kept} along axis {axis}; reflect pads at most {kept - 1}")
        if lead == trail == 0:
            continue
        if mode == "constant":
            blocks = []
            for count in (lead, trail):
                shape = b.allocation(result.shape[:axis] + (count,) + result.shape[axis + 1:],
                                     result.dtype.array_dtype.itemsize, "padding")
                blocks.append(b.constant(backend.host.full(shape, value, dtype=result.dtype.array_dtype), "pad")
                              if count else None)
            parts = [p for p in (blocks[0], result, blocks[1]) if p is not None]
            result = b.op("cat", *parts, dim=axis) if len(parts) > 1 else b.op("identity", parts[0])
        else:
            b.allocation((kept + lead + trail,), 8, f"index along axis {axis}")
            where = backend.host.pad(backend.host.arange(kept), (lead, trail), mode=_PAD_MODES[mode])
            result = take(b, result, b.constant(where.astype(backend.host.int64), "pad_index"), axis)
    return result if result is not x else b.op("identity", x)


@importer("Tile")
def _tile(b, args, attrs):
    x, result = args[0], args[0]
    repeats = as_ints(b.known(args[1], "repeats"))
    if len(repeats) != len(x.shape) or any(t < 0 for t in repeats):
        raise ONNXImportError(f"{b.where()}: its repeats {list(repeats)} should hold one count (0 or more) for each "
                              f"of the input's {len(x.shape)} dimension(s)")
    for axis, times in enumerate(repeats):
        if times != 1:  # gather the axis's elements times times over: 0 1 2 0 1 2...
            b.allocation((x.shape[axis] * times,), 8, f"index along axis {axis}")
            where = backend.host.tile(backend.host.arange(x.shape[axis]), times).astype(backend.host.int64)
            result = take(b, result, b.constant(where, "tile_index"), axis)
    return result if result is not x else b.op("identity", x)


@importer("Hardmax")
def _hardmax(b, args, attrs):
    def hardmax(x, axis):
        if x.shape[axis] == 0:
            return b.op("identity", x)   # (nothing to pick from: the empty input is its own answer)
        first_max = b.op("argmax", x, dim=axis, keepdim=False)  # ties go to the first, as ONNX says
        return b.op("one_hot", first_max, num_classes=x.shape[axis], dim=axis, dtype=x.dtype)
    return on_2d_before_13(b, args[0], attrs, hardmax)


@importer("DepthToSpace", "SpaceToDepth")
def _depth_space(b, args, attrs):
    x, k = args[0], int(attrs["blocksize"])
    if len(x.shape) != 4:
        raise ONNXImportError(f"{b.where()}: its input has shape {list(x.shape)}; expected 4 dimensions (N, C, H, W)")
    if k < 1:
        raise ONNXImportError(f"{b.where()}: attribute 'blocksize' is {k}; expected 1 or more")
    n, c, h, w = x.shape
    space_to_depth = b.onnx_node.op_type == "SpaceToDepth"
    if (h % k or w % k) if space_to_depth else c % (k * k):
        what = f"height {h} and width {w}" if space_to_depth else f"{c} channels"
        raise ONNXImportError(f"{b.where()}: its input's {what} do not divide by the block ({k} x {k})")
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
