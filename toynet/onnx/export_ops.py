"""How each toynet op is written as ONNX nodes: one small function per op, in :data:`CONVERTERS`.

A converter gets the :class:`Writer` (which names values, adds initializers and nodes) and the toynet
node, and returns the name of the ONNX value that holds the node's result. Most ops are one ONNX node;
a few need two (``rsqrt`` is ``Reciprocal(Sqrt(x))``, ``ne`` is ``Not(Equal(a, b))``).

The opset decides a few spellings: from opset 13 ``ReduceSum`` takes its axes as an input, from 18 the
other reductions do too. The oldest opset written is 13, where ``Softmax`` normalises along one axis
(before, it flattened the trailing axes) and ``Clip`` takes ``min``/``max`` as inputs. A transformer's ops
use newer ones where the opset has them (``Trilu`` from 14, ``LayerNormalization`` from 17, ``Gelu`` from 20)
and are written out in older ops below that.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import backend
from ..static.ir import Node

# The same op, the same ONNX name, the same inputs, no attributes.
_DIRECT = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "neg": "Neg", "pow": "Pow",
           "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
           "abs": "Abs", "sign": "Sign", "maximum": "Max", "minimum": "Min", "where": "Where",
           "matmul": "MatMul", "eq": "Equal", "gt": "Greater", "ge": "GreaterOrEqual", "lt": "Less",
           "le": "LessOrEqual", "logical_and": "And", "logical_or": "Or", "logical_not": "Not",
           "identity": "Identity", "to_device": "Identity", "sin": "Sin", "cos": "Cos", "tan": "Tan",
           "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh", "asinh": "Asinh",
           "acosh": "Acosh", "atanh": "Atanh", "erf": "Erf", "floor": "Floor", "ceil": "Ceil", "round": "Round",
           "reciprocal": "Reciprocal"}
_SQRT_HALF, _SQRT_2_OVER_PI = 0.7071067811865476, 0.7978845608028654


class Writer:
    """What converters write into: ``value(x)`` gives an ONNX name for a node or a literal number,
    ``constant(array)`` adds an initializer, ``node(op_type, inputs, **attrs)`` adds an ONNX node (named
    after the toynet node being converted, with its source line as doc string)."""

    def __init__(self, helper: Any, numpy_helper: Any, opset: int, dynamic_batch: bool = False):
        self.helper, self.numpy_helper, self.opset = helper, numpy_helper, opset
        self.dynamic_batch = dynamic_batch
        self.nodes: list = []
        self.initializers: list = []
        self.names: dict[int, str] = {}
        self.current: Node | None = None
        self._count = 0

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{base}:{self._count}"

    def constant(self, array: Any, base: str = "const") -> str:
        name = self.fresh(base)
        self.initializers.append(self.numpy_helper.from_array(backend.host.asarray(array), name))
        return name

    def ints(self, values: Any) -> str:
        return self.constant(backend.host.asarray(list(values), dtype=backend.host.int64), "ints")

    def value(self, x: Any, like: Node | None = None) -> str:
        """The ONNX name of input ``x``: a node's name, or a new scalar initializer for a literal number
        (of ``like``'s dtype: ONNX does not promote types as NumPy does)."""
        if isinstance(x, Node):
            return self.names[id(x)]
        dtype = (like or self.current).dtype.array_dtype
        return self.constant(backend.host.asarray(x, dtype=dtype), "literal")

    def node(self, op_type: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        here = self.current
        output = output or self.fresh(here.name)
        self.nodes.append(self.helper.make_node(op_type, inputs, [output], name=self.fresh(here.name),
                                                doc_string=here.source, **attrs))
        return output


def _tensor_like(node: Node) -> Node | None:
    """The first input that is a node: literal numbers take its dtype."""
    return next((x for x in node.inputs if isinstance(x, Node)), None)


def _direct(op_type: str) -> Callable:
    def convert(w: Writer, n: Node) -> str:
        like = _tensor_like(n)
        return w.node(op_type, [w.value(x, like) for x in n.inputs])
    return convert


def _pairs(value: Any) -> list[int]:
    return [value, value] if isinstance(value, int) else list(value)


def _linear(w: Writer, n: Node) -> str:
    x, weight, bias = (list(n.inputs) + [None])[:3]
    if len(x.shape) == 2:  # (N, in) @ W^T + b is exactly what Gemm computes
        inputs = [w.value(x), w.value(weight)] + ([w.value(bias)] if bias is not None else [])
        return w.node("Gemm", inputs, transB=1)
    product = w.node("MatMul", [w.value(x), w.node("Transpose", [w.value(weight)], perm=[1, 0])])
    return product if bias is None else w.node("Add", [product, w.value(bias)])


def _conv2d(w: Writer, n: Node) -> str:
    a = n.attrs
    pad = _pairs(a.get("padding", 0))
    return w.node("Conv", [w.value(x) for x in n.inputs if x is not None],
                  strides=_pairs(a.get("stride", 1)), pads=pad + pad, dilations=_pairs(a.get("dilation", 1)),
                  group=a.get("groups", 1), kernel_shape=list(n.inputs[1].shape[2:]))


def _batch_norm(w: Writer, n: Node) -> str:
    if n.attrs.get("training", True):
        raise ValueError("batch_norm in training mode has no ONNX inference form: call model.eval() before "
                         "tracing the graph you export")
    x, mean, var, weight, bias = (list(n.inputs) + [None, None])[:5]
    channels = x.shape[1]
    dtype = x.dtype.array_dtype
    scale = w.value(weight) if weight is not None else w.constant(backend.host.ones(channels, dtype=dtype))
    shift = w.value(bias) if bias is not None else w.constant(backend.host.zeros(channels, dtype=dtype))
    return w.node("BatchNormalization", [w.value(x), scale, shift, w.value(mean), w.value(var)],
                  epsilon=float(n.attrs.get("eps", 1e-5)))


def _clip(low: Any, high: Any) -> Callable:
    def convert(w: Writer, n: Node) -> str:
        lo = n.attrs.get("min") if low == "attr" else low
        hi = n.attrs.get("max") if high == "attr" else high
        x = n.inputs[0]
        bounds = [w.value(lo, x) if lo is not None else "", w.value(hi, x) if hi is not None else ""]
        while bounds and bounds[-1] == "":
            bounds.pop()
        return w.node("Clip", [w.value(x)] + bounds)
    return convert


def _pool_attrs(n: Node, dilation: bool) -> dict:
    a = n.attrs
    pad = _pairs(a.get("padding", 0))
    kernel = _pairs(a["kernel_size"])
    attrs = dict(kernel_shape=kernel, strides=_pairs(a.get("stride") or kernel), pads=pad + pad,
                 ceil_mode=int(bool(a.get("ceil_mode", False))))
    if dilation:
        attrs["dilations"] = _pairs(a.get("dilation", 1))
    return attrs


def _max_pool2d(w: Writer, n: Node) -> str:
    return w.node("MaxPool", [w.value(n.inputs[0])], **_pool_attrs(n, dilation=True))


def _avg_pool2d(w: Writer, n: Node) -> str:
    if n.attrs.get("divisor_override") is not None:
        raise ValueError("avg_pool2d with divisor_override has no ONNX AveragePool form")
    return w.node("AveragePool", [w.value(n.inputs[0])], **_pool_attrs(n, dilation=False),
                  count_include_pad=int(n.attrs.get("count_include_pad", True)))


def _adaptive_avg_pool2d(w: Writer, n: Node) -> str:
    x = n.inputs[0]
    out_hw, in_hw = _pairs(n.attrs.get("output_size", 1)), list(x.shape[2:])
    if out_hw == [1, 1]:
        return w.node("GlobalAveragePool", [w.value(x)])
    if any(i % o for i, o in zip(in_hw, out_hw)):
        raise ValueError(f"adaptive_avg_pool2d from {in_hw} to {out_hw} has uneven windows, which ONNX's "
                         "AveragePool cannot express: choose an output size that divides the input size")
    kernel = [i // o for i, o in zip(in_hw, out_hw)]
    return w.node("AveragePool", [w.value(x)], kernel_shape=kernel, strides=kernel)


def _reshape(w: Writer, n: Node) -> str:
    shape = list(n.shape)
    if w.dynamic_batch and shape and n.inputs[0].shape[:1] == n.shape[:1]:
        shape[0] = 0  # ONNX: "0 copies the input's dimension", so the batch size can vary
    return w.node("Reshape", [w.value(n.inputs[0]), w.ints(shape)])


def _permute(w: Writer, n: Node) -> str:
    rank = len(n.shape)
    return w.node("Transpose", [w.value(n.inputs[0])], perm=[d % rank for d in n.attrs["dims"]])


def _broadcast_to(w: Writer, n: Node) -> str:
    return w.node("Expand", [w.value(n.inputs[0]), w.ints(n.shape)])


def _cat(w: Writer, n: Node) -> str:
    return w.node("Concat", [w.value(x) for x in n.inputs], axis=n.attrs.get("dim", 0))


def _axis_op(op_type: str) -> Callable:
    def convert(w: Writer, n: Node) -> str:
        return w.node(op_type, [w.value(n.inputs[0])], axis=n.attrs.get("dim", -1))
    return convert


def _axes(n: Node) -> list[int]:
    dim = n.attrs.get("dim", ())
    rank = len(n.inputs[0].shape)
    if dim is None or dim == ():
        return list(range(rank))
    return [d % rank for d in ((dim,) if isinstance(dim, int) else dim)]


def _reduce(op_type: str) -> Callable:
    def convert(w: Writer, n: Node) -> str:
        keep = int(bool(n.attrs.get("keepdim", False)))
        axes_as_input = w.opset >= (13 if op_type == "ReduceSum" else 18)
        if axes_as_input:
            return w.node(op_type, [w.value(n.inputs[0]), w.ints(_axes(n))], keepdims=keep)
        return w.node(op_type, [w.value(n.inputs[0])], axes=_axes(n), keepdims=keep)
    return convert


def _argmax(w: Writer, n: Node) -> str:
    return w.node("ArgMax", [w.value(n.inputs[0])], axis=n.attrs.get("dim", 0),
                  keepdims=int(bool(n.attrs.get("keepdim", False))))


def _cast(w: Writer, n: Node) -> str:
    return w.node("Cast", [w.value(n.inputs[0])], to=w.helper.np_dtype_to_tensor_dtype(n.dtype.array_dtype))


def _rsqrt(w: Writer, n: Node) -> str:
    return w.node("Reciprocal", [w.node("Sqrt", [w.value(n.inputs[0])])])


def _getitem(w: Writer, n: Node) -> str:
    """Basic indexing (ints, slices, None, ...) as one ``Slice`` of every indexed axis, then a ``Reshape``
    to the known result shape, which drops the int-indexed axes and adds the ``None`` ones."""
    x, index = n.inputs[0], n.attrs.get("index", ())
    if len(n.inputs) > 1 or any(isinstance(i, str) for i in index):
        raise NotImplementedError(f"indexing with tensors at {n.source or n.name} has no ONNX mapping here; "
                                  "index with ints and slices")
    real = [i for i in index if i is not None and i is not Ellipsis]
    if Ellipsis in index:  # the Ellipsis stands for the axes no other item names
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(x.shape) - len(real)) + index[at + 1:]
    starts, ends, axes, steps = [], [], [], []
    axis = 0
    for item in index:
        if item is None:
            continue
        size = x.shape[axis]
        if isinstance(item, int):
            item = slice(item % size, item % size + 1, 1)
        start, stop, step = item.indices(size)
        if (start, stop, step) != (0, size, 1):
            starts.append(start)
            ends.append(stop if stop >= 0 else -size - 1)  # a negative step running past the first element
            axes.append(axis)
            steps.append(step)
        axis += 1
    result = w.value(x)
    if axes:
        result = w.node("Slice", [result, w.ints(starts), w.ints(ends), w.ints(axes), w.ints(steps)])
    shape = list(n.shape)
    if w.dynamic_batch and index and index[0] == slice(None):
        shape[0] = 0  # the batch axis passes through: copy it, whatever its size
    return w.node("Reshape", [result, w.ints(shape)])


def _cumsum(w: Writer, n: Node) -> str:
    return w.node("CumSum", [w.value(n.inputs[0]), w.ints([n.attrs.get("dim", 0)])])


def _ne(w: Writer, n: Node) -> str:
    like = _tensor_like(n)
    return w.node("Not", [w.node("Equal", [w.value(x, like) for x in n.inputs])])


def _where(w: Writer, n: Node) -> str:
    """A literal branch takes the result's dtype (the condition, the first input, is bool)."""
    condition, a, b = n.inputs
    return w.node("Where", [w.value(condition), w.value(a, n), w.value(b, n)])


# ------------------------------------------------------------------------------- a transformer's ops


def _embedding(w: Writer, n: Node) -> str:
    weight, indices = n.inputs
    return w.node("Gather", [w.value(weight), w.value(indices)], axis=0)


def _layer_norm(w: Writer, n: Node) -> str:
    x, *params = n.inputs
    dims, eps = len(n.attrs.get("dim", (-1,))), float(n.attrs.get("eps", 1e-5))
    dtype = n.dtype.array_dtype
    row = list(x.shape[len(x.shape) - dims:])
    weight = w.value(params[0]) if params else w.constant(backend.host.ones(row, dtype=dtype), "ones")
    bias = [w.value(params[1])] if len(params) > 1 else []
    if w.opset >= 17:
        return w.node("LayerNormalization", [w.value(x), weight] + bias, axis=-dims, epsilon=eps)
    axes = list(range(len(x.shape) - dims, len(x.shape)))
    mean = _reduce_mean(w, w.value(x), axes)
    centered = w.node("Sub", [w.value(x), mean])
    variance = _reduce_mean(w, w.node("Mul", [centered, centered]), axes)
    std = w.node("Sqrt", [w.node("Add", [variance, w.constant(backend.host.asarray(eps, dtype=dtype), "eps")])])
    result = w.node("Mul", [w.node("Div", [centered, std]), weight])
    return w.node("Add", [result] + bias) if bias else result


def _reduce_mean(w: Writer, value: str, axes: list[int]) -> str:
    if w.opset >= 18:
        return w.node("ReduceMean", [value, w.ints(axes)], keepdims=1)
    return w.node("ReduceMean", [value], axes=axes, keepdims=1)


def _gelu(w: Writer, n: Node) -> str:
    x = w.value(n.inputs[0])
    approximate = "tanh" if n.op.name == "gelu_tanh" else "none"
    if w.opset >= 20:
        return w.node("Gelu", [x], approximate=approximate)

    def number(value: float) -> str:
        return w.value(value, n)
    if approximate == "tanh":   # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = w.node("Mul", [w.node("Mul", [x, x]), x])
        inner = w.node("Mul", [w.node("Add", [x, w.node("Mul", [cube, number(0.044715)])]), number(_SQRT_2_OVER_PI)])
        cdf = w.node("Add", [w.node("Tanh", [inner]), number(1.0)])
    else:                       # x/2 (1 + erf(x / sqrt(2)))
        cdf = w.node("Add", [w.node("Erf", [w.node("Mul", [x, number(_SQRT_HALF)])]), number(1.0)])
    return w.node("Mul", [w.node("Mul", [x, number(0.5)]), cdf])


def _triangle(upper: int) -> Callable:
    def convert(w: Writer, n: Node) -> str:
        x, diagonal = n.inputs[0], int(n.inputs[1]) if len(n.inputs) > 1 else 0
        if w.opset >= 14:
            k = w.constant(backend.host.asarray(diagonal, dtype=backend.host.int64), "k")
            return w.node("Trilu", [w.value(x), k], upper=upper)
        rows, cols = x.shape[-2:]
        keep = (backend.host.triu if upper else backend.host.tril)(backend.host.ones((rows, cols), dtype=bool), diagonal)
        return w.node("Where", [w.constant(keep, "triangle"), w.value(x), w.value(0, x)])
    return convert


def _gather(w: Writer, n: Node) -> str:
    x, index = n.inputs
    dim = n.attrs.get("dim", 0)
    data = w.value(x)
    if any(d != dim and i != s for d, (i, s) in enumerate(zip(index.shape, x.shape))):  # read only the corner
        axes = [d for d in range(len(x.shape)) if d != dim]
        data = w.node("Slice", [data, w.ints([0] * len(axes)), w.ints([index.shape[d] for d in axes]), w.ints(axes)])
    return w.node("GatherElements", [data, w.value(index)], axis=dim)


def _topk_indices(w: Writer, n: Node) -> str:
    """ONNX's TopK gives the values and the indices; toynet's op is the indices (the values are a gather)."""
    x, k, largest = n.inputs
    values, indices = w.fresh(n.name), w.fresh(n.name)
    k = w.constant(backend.host.asarray([int(k)], dtype=backend.host.int64), "k")
    w.nodes.append(w.helper.make_node("TopK", [w.value(x), k], [values, indices], name=w.fresh(n.name),
                                      doc_string=n.source, axis=n.attrs.get("dim", -1), largest=int(bool(largest)),
                                      sorted=1))
    return indices


CONVERTERS: dict[str, Callable[[Writer, Node], str]] = {
    **{name: _direct(op_type) for name, op_type in _DIRECT.items()},
    "linear": _linear, "conv2d": _conv2d, "batch_norm": _batch_norm,
    "relu6": _clip(0.0, 6.0), "clamp": _clip("attr", "attr"),
    "max_pool2d": _max_pool2d, "avg_pool2d": _avg_pool2d, "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "reshape": _reshape, "permute": _permute, "broadcast_to": _broadcast_to, "cat": _cat,
    "softmax": _axis_op("Softmax"), "log_softmax": _axis_op("LogSoftmax"),
    "sum": _reduce("ReduceSum"), "mean": _reduce("ReduceMean"), "amax": _reduce("ReduceMax"),
    "argmax": _argmax, "cast": _cast, "rsqrt": _rsqrt, "ne": _ne, "cumsum": _cumsum,
    "getitem": _getitem, "where": _where,
    "embedding": _embedding, "layer_norm": _layer_norm, "gelu": _gelu, "gelu_tanh": _gelu,
    "tril": _triangle(0), "triu": _triangle(1),
    "gather": _gather, "topk_indices": _topk_indices,
}
