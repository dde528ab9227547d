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

IMPORTERS: dict[str, Callable] = {}


def importer(*op_types: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for op_type in op_types:
            IMPORTERS[op_type] = fn
        return fn
    return register


def refuse(b: Any, attrs: dict, **allowed_values: Any) -> None:
    """Fail on attribute values this importer does not implement (``auto_pad="SAME_UPPER"``...)."""
    for name, ok in allowed_values.items():
        if name in attrs and not ok(attrs[name]):
            raise NotImplementedError(f"{b.where()}: attribute {name}={attrs[name]!r} is not supported")


_DTYPES = {d.array_dtype: d for d in backend.ALL_DTYPES}


def to_toynet_dtype(array_dtype: Any, what: str) -> backend.DType:
    found = _DTYPES.get(backend.host.dtype(array_dtype))
    if found is None:
        known = ", ".join(d.name for d in backend.ALL_DTYPES)
        raise ValueError(f"{what}: dtype {array_dtype} has no toynet dtype (toynet has {known})")
    return found


def as_ints(values: Any) -> tuple:
    return tuple(int(v) for v in backend.host.asarray(values).reshape(-1))


# ----------------------------------------------------------------------------- elementwise


def _simple(op_name: str) -> Callable:
    return lambda b, args, attrs: b.op(op_name, *args)


for _onnx, _toynet in {"Add": "add", "Sub": "sub", "Mul": "mul", "Pow": "pow", "Neg": "neg",
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
    raise NotImplementedError(f"{b.where()}: constant attributes {sorted(attrs)} are not supported")


@importer("Dropout")
def _dropout(b, args, attrs):  # inference: the input unchanged (and an all-true mask if asked for)
    x = args[0]
    if len(args) > 2 and args[2] is not None and b.known(args[2], "training_mode").item():
        raise NotImplementedError(f"{b.where()}: Dropout in training mode is not supported (inference only)")
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
    axis = attrs.get("axis", 1)
    axis = axis + len(x.shape) if axis < 0 else axis
    front = int(backend.host.prod(x.shape[:axis]))
    return b.op("reshape", x, shape=(front, int(backend.host.prod(x.shape[axis:]))))


@importer("Transpose")
def _transpose(b, args, attrs):
    x = args[0]
    dims = tuple(attrs.get("perm", range(len(x.shape) - 1, -1, -1)))
    return b.op("permute", x, dims=tuple(int(d) for d in dims))


def _axes(b, args, attrs, position: int = 1) -> tuple | None:
    if "axes" in attrs:
        return tuple(int(a) for a in attrs["axes"])
    if len(args) > position and args[position] is not None:
        return as_ints(b.known(args[position], "axes"))
    return None


@importer("Squeeze")
def _squeeze(b, args, attrs):
    x, axes = args[0], _axes(b, args, attrs)
    rank = len(x.shape)
    drop = {a % rank for a in axes} if axes is not None else {i for i, d in enumerate(x.shape) if d == 1}
    return b.op("reshape", x, shape=tuple(d for i, d in enumerate(x.shape) if i not in drop))


@importer("Unsqueeze")
def _unsqueeze(b, args, attrs):
    x, axes = args[0], _axes(b, args, attrs)
    rank = len(x.shape) + len(axes)
    shape, rest = [], iter(x.shape)
    places = {a % rank for a in axes}
    for i in range(rank):
        shape.append(1 if i in places else next(rest))
    return b.op("reshape", x, shape=tuple(shape))


@importer("Concat")
def _concat(b, args, attrs):
    inputs = [x for x in args if x is not None]
    return b.op("cat", *inputs, dim=int(attrs["axis"]) % len(inputs[0].shape))


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
    starts, ends = as_ints(b.known(args[1], "starts")), as_ints(b.known(args[2], "ends"))
    axes = as_ints(b.known(args[3], "axes")) if len(args) > 3 and args[3] is not None else range(len(starts))
    steps = as_ints(b.known(args[4], "steps")) if len(args) > 4 and args[4] is not None else (1,) * len(starts)
    index = [slice(None)] * len(x.shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        size = x.shape[axis]
        start, end = (max(min(v, 2 * size), -2 * size - 1) for v in (start, end))  # INT64_MAX means "to the end"
        if step < 0 and end < -size:
            end = None
        index[axis % len(x.shape)] = slice(start, end, step)
    return b.op("getitem", x, index=tuple(index))


@importer("Gather")
def _gather(b, args, attrs):
    x, indices = args
    axis = attrs.get("axis", 0) % len(x.shape)
    if indices.known is not None:  # constant indices: negative ones count from the end, as NumPy does
        indices = b.constant(backend.host.asarray(indices.known, dtype=backend.host.int64), "indices")
    return b.op("getitem", x, indices, index=(slice(None),) * axis + ("<tensor>",))


# ------------------------------------------------------------------------------ reductions


def _reduce(op_name: str) -> Callable:
    def convert(b, args, attrs):
        x, axes = args[0], _axes(b, args, attrs)
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return b.op("identity", x)
            axes = tuple(range(len(x.shape)))
        axes = tuple(sorted(a % len(x.shape) for a in axes))
        if op_name == "amin":
            return b.op("neg", b.op("amax", b.op("neg", x), dim=axes, keepdim=keep))
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
    x = args[0] if b.onnx_node.op_type == "ArgMax" else b.op("neg", args[0])
    found = b.op("argmax", x, dim=int(attrs.get("axis", 0)), keepdim=bool(attrs.get("keepdims", 1)))
    return found


@importer("Softmax", "LogSoftmax")
def _softmax(b, args, attrs):
    op_name = "softmax" if b.onnx_node.op_type == "Softmax" else "log_softmax"
    return b.op(op_name, args[0], dim=int(attrs.get("axis", -1)))



@importer("CastLike")
def _cast_like(b, args, attrs):
    return b.op("cast", args[0], dtype=args[1].dtype)


@importer("ConstantOfShape")
def _constant_of_shape(b, args, attrs):
    fill = b.onnx.numpy_helper.to_array(attrs["value"]) if "value" in attrs else backend.host.zeros(1, "float32")
    shape = b.allocation(as_ints(b.known(args[0], "shape")), fill.dtype.itemsize, "output")
    return b.constant(backend.host.full(shape, fill.reshape(-1)[0], dtype=fill.dtype), "filled")


@importer("Range")
def _range(b, args, attrs):
    start, limit, delta = (b.known(x, what) for x, what in zip(args, ("start", "limit", "delta")))
    if delta == 0:
        raise ValueError("its delta is 0 (Range needs a step that is not zero)")
    b.allocation((max(0, math.ceil((float(limit) - float(start)) / float(delta))),), start.dtype.itemsize, "output")
    return b.constant(backend.host.arange(start, limit, delta, dtype=start.dtype), "range")


@importer("LayerNormalization")
def _layer_norm(b, args, attrs):
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axis = attrs.get("axis", -1) % len(x.shape)
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
