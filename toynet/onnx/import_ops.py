"""How each ONNX op is written with toynet ops: one function per ONNX op type, in :data:`IMPORTERS`.

An importer gets the :class:`~toynet.onnx.load.Builder` ``b``, the op's inputs (``Value``\\ s, ``None``
for an omitted optional input) and its attributes (a dict), and returns the output value(s). It adds
toynet ops with ``b.op(name, *inputs, **attrs)``. Inputs that fix a shape (``Reshape``'s shape, axes,
``Clip``'s bounds) must be known before the graph runs: ``b.known(value, what)`` reads them.

ONNX ops toynet has no single op for are written as several (``LeakyRelu`` is
``where(x > 0, x, alpha * x)``), so their gradients come from ops that are already gradient-checked.
Attributes this importer does not handle raise an error naming them, rather than computing something
else.
"""

from __future__ import annotations

import math

from typing import Any, Callable

from .. import backend
from .errors import ONNXImportError, ONNXUnsupportedError

IMPORTERS: dict[str, Callable] = {}


def importer(*op_types: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for op_type in op_types:
            IMPORTERS[op_type] = fn
        return fn
    return register


#: Attributes an importer may leave unread because they cannot change what inference computes; any other attribute
#: an importer does not look at is refused (toynet/onnx/load.py), since ignoring it would compute something else.
IGNORED_ATTRIBUTES: dict[str, set[str]] = {
    "*": {"consumed_inputs"},                 # opset 1's hint for in-place buffers
    "Dropout": {"seed", "ratio"},             # inference passes the input through
    "BatchNormalization": {"momentum"},       # how training updates the running statistics
    "LayerNormalization": {"stash_type"},     # the precision of the statistics: toynet computes in the input's
    "Cast": {"saturate"}, "CastLike": {"saturate"},   # float8 conversions only, which toynet does not have
    "TopK": {"sorted"},                       # sorted=0 lets the order be anything, so sorted is one right answer
    # Opset 1-6 binary ops: broadcast=1 (without "axis") aligns trailing dimensions, as NumPy does, and
    # broadcast=0 allows only equal shapes, which NumPy's broadcasting computes alike. ("axis" is refused.)
    **{op: {"broadcast"} for op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater",
                                     "Less", "Gemm")},
}


def refuse(b: Any, attrs: dict, **allowed_values: Any) -> None:
    """Fail on attribute values this importer does not implement (``auto_pad="SAME_UPPER"``...)."""
    for name, ok in allowed_values.items():
        if name in attrs and not ok(attrs[name]):
            raise ONNXUnsupportedError(f"{b.where()}: attribute {name}={attrs[name]!r} is not supported")


_DTYPES = {d.array_dtype: d for d in backend.ALL_DTYPES}


def to_toynet_dtype(array_dtype: Any, what: str) -> backend.DType:
    found = _DTYPES.get(backend.host.dtype(array_dtype))
    if found is None:
        known = ", ".join(d.name for d in backend.ALL_DTYPES)
        raise ONNXUnsupportedError(f"{what}: dtype {array_dtype} has no toynet dtype (toynet has {known})")
    return found


def as_ints(values: Any) -> tuple:
    return tuple(int(v) for v in backend.host.asarray(values).reshape(-1))


# ----------------------------------------------------------------------------- elementwise


def _simple(op_name: str) -> Callable:
    return lambda b, args, attrs: b.op(op_name, *args)


for _onnx, _toynet in {"Add": "add", "Sub": "sub", "Mul": "mul", "Neg": "neg",
                       "Abs": "abs", "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp",
                       "Log": "log", "Sqrt": "sqrt", "Sign": "sign", "Where": "where", "Equal": "eq",
                       "Greater": "gt", "GreaterOrEqual": "ge", "Less": "lt", "LessOrEqual": "le",
                       "And": "logical_and", "Or": "logical_or", "Not": "logical_not", "MatMul": "matmul",
                       "Identity": "identity", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
                       "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
                       "Acosh": "acosh", "Atanh": "atanh", "Erf": "erf", "Floor": "floor", "Ceil": "ceil",
                       "Round": "round", "Reciprocal": "reciprocal"}.items():
    IMPORTERS[_onnx] = _simple(_toynet)


def _fold(op_name: str, mean: bool = False) -> Callable:
    """A variadic ONNX op (``Max(a, b, c)``) as a chain of binary toynet ops."""
    def convert(b, args, attrs):
        result = args[0]
        for x in args[1:]:
            result = b.op(op_name, result, x)
        if len(args) == 1:
            result = b.op("identity", result)
        return b.op("div", result, float(len(args))) if mean else result
    return convert


IMPORTERS.update({"Max": _fold("maximum"), "Min": _fold("minimum"), "Sum": _fold("add"),
                  "Mean": _fold("add", mean=True)})


@importer("Div")
def _div(b, args, attrs):
    a, c = args
    if a.dtype.is_floating_point or c.dtype.is_floating_point:
        return b.op("div", a, c)
    # ONNX divides integers to an integer, rounding towards zero; toynet's div is true division (done here
    # in float64, exact for integers up to 2**53).
    wide = [b.op("cast", x, dtype=backend.float64) for x in (a, c)]
    return b.op("cast", b.op("trunc", b.op("div", *wide)), dtype=a.dtype)


@importer("Pow")
def _pow(b, args, attrs):
    """ONNX's Pow keeps the base's dtype whatever the exponent's (float32 ** int64 is float32, int32 ** float32 is
    int32, truncated); toynet's pow promotes as NumPy does (float32 ** int64 would be float64)."""
    x, y = args
    if x.dtype.is_floating_point:
        # Same dtype, or an exponent cast to the base's (small integer exponents are exact in any float).
        return b.op("pow", x, y if y.dtype == x.dtype else b.op("cast", y, dtype=x.dtype))
    if not y.dtype.is_floating_point and y.known is not None and (backend.host.asarray(y.known) >= 0).all():
        # An integer power known not to be negative: exact in the base's integers, as NumPy computes it.
        return b.op("pow", x, y if y.dtype == x.dtype else b.op("cast", y, dtype=x.dtype))
    # Any other exponent of an integer base (a float, or an integer that may be negative, which NumPy refuses
    # for integers): computed in float64, then cast back to the base's dtype, towards zero as ONNX Runtime does
    # (2 ** -1 is 0).
    wide = [b.op("cast", v, dtype=backend.float64) for v in (x, y)]
    return b.op("cast", b.op("pow", *wide), dtype=x.dtype)


@importer("Xor")
def _xor(b, args, attrs):
    return b.op("ne", *args)


@importer("Gelu")
def _gelu(b, args, attrs):
    approximate = attrs.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    refuse(b, {"approximate": approximate}, approximate=lambda a: a in ("none", "tanh"))
    return b.op("gelu" if approximate == "none" else "gelu_tanh", args[0])


@importer("Cast")
def _cast(b, args, attrs):
    dtype = to_toynet_dtype(b.onnx.helper.tensor_dtype_to_np_dtype(attrs["to"]), b.where())
    return b.op("cast", args[0], dtype=dtype)


@importer("Constant")
def _constant(b, args, attrs):
    if "value" in attrs:
        return b.constant(b.onnx.numpy_helper.to_array(attrs["value"]), "constant")
    for key, dtype in (("value_float", "float32"), ("value_floats", "float32"), ("value_int", "int64"),
                       ("value_ints", "int64")):
        if key in attrs:
            return b.constant(backend.host.asarray(attrs[key], dtype=dtype), "constant")
    raise ONNXUnsupportedError(f"{b.where()}: constant attributes {sorted(attrs)} are not supported")


@importer("Dropout")
def _dropout(b, args, attrs):  # inference: the input unchanged (and an all-true mask if asked for)
    x = args[0]
    if len(args) > 2 and args[2] is not None and b.known(args[2], "training_mode").item():
        raise ONNXUnsupportedError(f"{b.where()}: Dropout in training mode is not supported (inference only)")
    if len(b.onnx_node.output) < 2 or not b.onnx_node.output[1]:
        return b.op("identity", x)    # (the mask is not asked for: nothing to allocate)
    return [b.op("identity", x), b.constant(backend.host.ones(b.allocation(x.shape, 1, "mask"), dtype=bool), "mask")]


# ------------------------------------------------------------------------------------ shapes


@importer("Reshape")
def _reshape(b, args, attrs):
    x, target = args[0], list(as_ints(b.known(args[1], "shape")))
    if not attrs.get("allowzero", 0):  # 0 copies the input's dimension at that place
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return b.op("reshape", x, shape=tuple(target))


@importer("Flatten")
def _flatten(b, args, attrs):
    x = args[0]
    axis = b.axis(attrs.get("axis", 1), len(x.shape), end=True)   # (a place between dimensions: 0..rank)
    return b.op("reshape", x, shape=(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@importer("Transpose")
def _transpose(b, args, attrs):
    x = args[0]
    rank = len(x.shape)
    dims = tuple(int(d) for d in attrs.get("perm", range(rank - 1, -1, -1)))
    if sorted(dims) != list(range(rank)):
        raise ONNXImportError(f"{b.where()}: attribute 'perm' is {list(dims)}; for an input of {rank} dimension(s) "
                              f"it must hold each of 0..{rank - 1} once")
    return b.op("permute", x, dims=dims)


def _axes(b, args, attrs, rank: int, position: int = 1, end: bool = False) -> tuple | None:
    """The ``axes`` attribute (older opsets) or input (newer), each checked against ``rank``; None if neither."""
    if "axes" in attrs:
        return b.axes([int(a) for a in attrs["axes"]], rank, end=end)
    if len(args) > position and args[position] is not None:
        return b.axes(as_ints(b.known(args[position], "axes")), rank, "input 'axes'", end=end)
    return None


@importer("Squeeze")
def _squeeze(b, args, attrs):
    x = args[0]
    axes = _axes(b, args, attrs, len(x.shape))
    drop = set(axes) if axes is not None else {i for i, d in enumerate(x.shape) if d == 1}
    wide = [a for a in sorted(drop) if x.shape[a] != 1]
    if wide:
        raise ONNXImportError(f"{b.where()}: axes {wide} of its input {b.onnx_node.input[0]!r} (shape "
                              f"{list(x.shape)}) are not of size 1; Squeeze removes only dimensions of size 1")
    return b.op("reshape", x, shape=tuple(d for i, d in enumerate(x.shape) if i not in drop))


@importer("Unsqueeze")
def _unsqueeze(b, args, attrs):
    x = args[0]
    given = [int(a) for a in attrs["axes"]] if "axes" in attrs else (
        as_ints(b.known(args[1], "axes")) if len(args) > 1 and args[1] is not None else None)
    if given is None:
        raise ONNXImportError(f"{b.where()}: needs its axes (the input 'axes', or the attribute before opset 13)")
    rank = len(x.shape) + len(given)   # (the axes are places in the output)
    places = set(b.axes(given, rank, "its axes", input=None))
    rest = iter(x.shape)
    return b.op("reshape", x, shape=tuple(1 if i in places else next(rest) for i in range(rank)))


@importer("Concat")
def _concat(b, args, attrs):
    inputs = [x for x in args if x is not None]
    return b.op("cat", *inputs, dim=b.axis(int(attrs["axis"]), len(inputs[0].shape)))


@importer("Expand")
def _expand(b, args, attrs):
    x, target = args[0], as_ints(b.known(args[1], "shape"))
    rank = max(len(x.shape), len(target))
    ours = (1,) * (rank - len(x.shape)) + x.shape
    theirs = (1,) * (rank - len(target)) + target
    # ONNX's Expand broadcasts both ways (a 1 in the target keeps the input's size).
    return b.op("broadcast_to", x, shape=tuple(max(o, t) if 1 in (o, t) else t for o, t in zip(ours, theirs)))


@importer("Shape")
def _shape(b, args, attrs):
    shape = backend.host.asarray(args[0].shape, dtype=backend.host.int64)
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return b.constant(shape[start:end], "shape")


@importer("Size")
def _size(b, args, attrs):
    return b.constant(backend.host.asarray(int(backend.host.prod(args[0].shape)), dtype=backend.host.int64), "size")


@importer("Slice")
def _slice(b, args, attrs):
    x = args[0]
    rank = len(x.shape)
    if b.since_version < 10:   # (starts, ends and axes were attributes then)
        starts, ends = tuple(attrs["starts"]), tuple(attrs["ends"])
        axes, steps = tuple(attrs.get("axes", range(len(starts)))), (1,) * len(starts)
    else:
        starts, ends = as_ints(b.known(args[1], "starts")), as_ints(b.known(args[2], "ends"))
        axes = as_ints(b.known(args[3], "axes")) if len(args) > 3 and args[3] is not None else range(len(starts))
        steps = as_ints(b.known(args[4], "steps")) if len(args) > 4 and args[4] is not None else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ONNXImportError(f"{b.where()}: starts, ends, axes and steps must be as long as one another; got "
                              f"{list(starts)}, {list(ends)}, {list(axes)}, {list(steps)}")
    axes = b.axes(axes, rank, "its axes")
    if 0 in steps:
        raise ONNXImportError(f"{b.where()}: its steps {list(steps)} hold a 0; a slice's step is not zero")
    index = [slice(None)] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps):
        size = x.shape[axis]
        start, end = (max(min(v, 2 * size), -2 * size - 1) for v in (start, end))  # INT64_MAX means "to the end"
        if step < 0 and end < -size:
            end = None
        index[axis] = slice(start, end, step)
    return b.op("getitem", x, index=tuple(index))


@importer("Gather")
def _gather(b, args, attrs):
    x, indices = args
    axis = b.axis(attrs.get("axis", 0), len(x.shape))
    if indices.known is not None:  # constant indices: negative ones count from the end, as NumPy does
        check_indices(b, indices.known, x.shape[axis], axis)
        indices = b.constant(backend.host.asarray(indices.known, dtype=backend.host.int64), "indices")
    return take(b, x, indices, axis)


def take(b, x, indices, axis: int):
    """``x`` indexed along ``axis`` by the integer tensor ``indices`` (toynet's ``getitem``). Its shape rule indexes a
    dummy array to find the shape, which NumPy materialises at a byte per output element: so the output's size is
    checked against the cap on what importing allocates first."""
    b.allocation(x.shape[:axis] + tuple(indices.shape) + x.shape[axis + 1:], 1, "output")
    return b.op("getitem", x, indices, index=(slice(None),) * axis + ("<tensor>",))


def check_indices(b, known, size: int, axis: int) -> None:
    """Constant indices must lie in -size..size-1 (ONNX counts negative ones from the end): known before the graph
    runs, so one out of range is refused now, by name, rather than an IndexError at every call."""
    known = backend.host.asarray(known)
    if known.size and (known.min() < -size or known.max() >= size):
        bad = int(known.min()) if known.min() < -size else int(known.max())
        raise ONNXImportError(f"{b.where()}: index {bad} is out of range for axis {axis} of size {size}; expected "
                              f"indices from {-size} to {size - 1}")


# ------------------------------------------------------------------------------ reductions


def _reversed_order(b, x):
    """``x`` mapped by an order-reversing function that cannot overflow, and the function again to map back: the
    max of the result is the min of ``x``. ``-x`` for floats; ``-1 - x`` for signed integers (``-x`` overflows on
    the most negative one); ``255 - x`` for uint8 (``-x`` wraps around); ``not x`` for bools."""
    if x.dtype.is_floating_point:
        return b.op("neg", x), lambda v: b.op("neg", v)
    if x.dtype == backend.bool_:
        return b.op("logical_not", x), lambda v: b.op("logical_not", v)
    top = int(backend.host.iinfo(x.dtype.array_dtype).max) if x.dtype == backend.uint8 else -1
    return b.op("sub", top, x), lambda v: b.op("sub", top, v)


def _empty_reduction(b, x, op_name: str, axes: tuple, keep: bool):
    """ReduceMax/ReduceMin over no elements: ONNX gives the identity of max (the lowest value of the dtype, -inf for
    floats) and of min (the highest), as a constant of the reduced shape."""
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    dtype = x.dtype.array_dtype
    if x.dtype.is_floating_point:
        fill = -backend.host.inf if op_name == "amax" else backend.host.inf
    elif x.dtype == backend.bool_:
        fill = op_name == "amin"
    else:
        limits = backend.host.iinfo(dtype)
        fill = limits.min if op_name == "amax" else limits.max
    return b.constant(backend.host.full(b.allocation(shape, dtype.itemsize, "output"), fill, dtype=dtype), "empty")


def _reduce(op_name: str) -> Callable:
    def convert(b, args, attrs):
        x = args[0]
        axes = _axes(b, args, attrs, len(x.shape))
        keep = bool(attrs.get("keepdims", 1))
        noop = attrs.get("noop_with_empty_axes", 0)
        if not axes:
            if noop:
                return b.op("identity", x)
            axes = tuple(range(len(x.shape)))
        axes = tuple(sorted(axes))
        if op_name in ("amax", "amin") and any(x.shape[a] == 0 for a in axes):
            return _empty_reduction(b, x, op_name, axes, keep)
        if op_name == "amin":
            mirrored, back = _reversed_order(b, x)
            return back(b.op("amax", mirrored, dim=axes, keepdim=keep))
        if op_name == "sum_square":
            return b.op("sum", b.op("mul", x, x), dim=axes, keepdim=keep)
        if op_name == "l1":
            return b.op("sum", b.op("abs", x), dim=axes, keepdim=keep)
        if op_name == "l2":
            return b.op("sqrt", b.op("sum", b.op("mul", x, x), dim=axes, keepdim=keep))
        if op_name == "log_sum":
            return b.op("log", b.op("sum", x, dim=axes, keepdim=keep))
        if op_name == "log_sum_exp":
            return b.op("log", b.op("sum", b.op("exp", x), dim=axes, keepdim=keep))
        return b.op(op_name, x, dim=axes, keepdim=keep)
    return convert


IMPORTERS.update({"ReduceSum": _reduce("sum"), "ReduceMean": _reduce("mean"), "ReduceMax": _reduce("amax"),
                  "ReduceMin": _reduce("amin"), "ReduceSumSquare": _reduce("sum_square"),
                  "ReduceL1": _reduce("l1"), "ReduceL2": _reduce("l2"), "ReduceLogSum": _reduce("log_sum"),
                  "ReduceLogSumExp": _reduce("log_sum_exp")})


@importer("ArgMax", "ArgMin")
def _argmax(b, args, attrs):
    refuse(b, attrs, select_last_index=lambda v: v == 0)
    axis = b.axis(attrs.get("axis", 0), len(args[0].shape))
    if args[0].shape[axis] == 0:
        raise ONNXImportError(f"{b.where()}: axis {axis} of its input (shape {list(args[0].shape)}) is empty; "
                              f"{b.onnx_node.op_type} needs at least one element to pick")
    x = args[0] if b.onnx_node.op_type == "ArgMax" else _reversed_order(b, args[0])[0]
    return b.op("argmax", x, dim=axis, keepdim=bool(attrs.get("keepdims", 1)))


def on_2d_before_13(b, x, attrs, apply: Callable):
    """Softmax, LogSoftmax and Hardmax before opset 13 work on the input seen as a matrix (the dimensions before
    ``axis``, default 1, times those from it on); from 13 on, along one axis (default -1)."""
    rank = len(x.shape)
    if b.since_version >= 13:
        return apply(x, b.axis(attrs.get("axis", -1), rank))
    axis = b.axis(attrs.get("axis", 1), rank, end=True)
    matrix = b.op("reshape", x, shape=(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
    return b.op("reshape", apply(matrix, 1), shape=x.shape)


@importer("Softmax", "LogSoftmax")
def _softmax(b, args, attrs):
    op_name = "softmax" if b.onnx_node.op_type == "Softmax" else "log_softmax"
    return on_2d_before_13(b, args[0], attrs, lambda x, axis: b.op(op_name, x, dim=axis))



@importer("CastLike")
def _cast_like(b, args, attrs):
    return b.op("cast", args[0], dtype=args[1].dtype)


@importer("ConstantOfShape")
def _constant_of_shape(b, args, attrs):
    fill = b.onnx.numpy_helper.to_array(attrs["value"]) if "value" in attrs else backend.host.zeros(1, "float32")
    if fill.size != 1:
        raise ONNXImportError(f"{b.where()}: attribute 'value' holds {fill.size} values; expected one, the fill")
    to_toynet_dtype(fill.dtype, f"{b.where()}: attribute 'value'")
    target = backend.host.asarray(b.known(args[0], "shape"))
    if target.ndim != 1:
        raise ONNXImportError(f"{b.where()}: its input 'shape' has shape {list(target.shape)}; expected a 1-d list "
                              "of sizes")
    shape = b.allocation(as_ints(target), fill.dtype.itemsize, "output")
    return b.constant(backend.host.full(shape, fill.reshape(-1)[0], dtype=fill.dtype), "filled")


@importer("Range")
def _range(b, args, attrs):
    start, limit, delta = (backend.host.asarray(b.known(x, what)) for x, what in zip(args, ("start", "limit", "delta")))
    for value, what in ((start, "start"), (limit, "limit"), (delta, "delta")):
        if value.size != 1 or not backend.host.isfinite(value).all():
            raise ONNXImportError(f"{b.where()}: its {what} is {value.tolist()}; expected one finite number")
    start, limit, delta = start.reshape(()), limit.reshape(()), delta.reshape(())
    if delta == 0:
        raise ONNXImportError(f"{b.where()}: its delta is 0 (Range needs a step that is not zero)")
    b.allocation((max(0, math.ceil((float(limit) - float(start)) / float(delta))),), start.dtype.itemsize, "output")
    return b.constant(backend.host.arange(start, limit, delta, dtype=start.dtype), "range")


@importer("LayerNormalization")
def _layer_norm(b, args, attrs):
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axis = b.axis(attrs.get("axis", -1), len(x.shape))
    dims = tuple(range(axis, len(x.shape)))
    eps = float(attrs.get("epsilon", 1e-5))
    wanted = [name for name in b.onnx_node.output if name]
    if len(wanted) == 1 and all(p is None or tuple(p.shape) == tuple(x.shape[axis:]) for p in (scale, bias)):
        return b.op("layer_norm", *(p for p in (x, scale, bias) if p is not None), dim=dims, eps=eps)
    mean = b.op("mean", x, dim=dims, keepdim=True)   # the optional outputs Mean and InvStdDev are asked for
    centred = b.op("sub", x, mean)
    variance = b.op("mean", b.op("mul", centred, centred), dim=dims, keepdim=True)
    inv_std = b.op("rsqrt", b.op("add", variance, eps))
    result = b.op("mul", b.op("mul", centred, inv_std), scale)
    result = result if bias is None else b.op("add", result, bias)
    return [result, mean, inv_std]  # ONNX's optional outputs Mean and InvStdDev
