"""The neural-network ONNX ops as toynet ops: Gemm, Conv, BatchNormalization, pooling.

Separate from :mod:`toynet.onnx.import_ops` (elementwise, shapes, reductions) because these read the
most attributes: padding, strides, dilations, groups. toynet's convolution and pooling are 2-d with the
same padding on both sides of an axis; other ONNX settings (3-d, asymmetric pads) are refused by name.
"""

from __future__ import annotations

from typing import Any

from .errors import ONNXImportError, ONNXUnsupportedError
from .import_ops import IMPORTERS, importer, refuse


@importer("Gemm")
def _gemm(b, args, attrs):
    a, w = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    # Plain ops only (permute, matmul, mul, add), as nn.Linear itself traces on the lesson path.
    if attrs.get("transA", 0):
        a = b.op("permute", a, dims=(1, 0))
    if attrs.get("transB", 0):
        w = b.op("permute", w, dims=(1, 0))
    result = b.op("matmul", a, w)
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        result = b.op("mul", result, alpha)
    if c is not None:
        result = b.op("add", result, c if beta == 1.0 else b.op("mul", c, beta))
    return result


def _pair(b: Any, attrs: dict, name: str, default: Any, least: int) -> tuple:
    """A 2-d setting (``strides``, ``dilations``, ``kernel_shape``): two ints, each at least ``least``."""
    values = tuple(int(v) for v in attrs.get(name, default))
    if len(values) != 2 or min(values) < least:
        raise ONNXImportError(f"{b.where()}: attribute {name!r} is {list(values)}; expected two ints (height, width), "
                              f"each {least} or more")
    return values


def _padding(b: Any, attrs: dict, x: Any, kernel: tuple, strides: tuple, dilations: tuple) -> tuple:
    """Symmetric (top, left) padding from ONNX's ``pads`` or ``auto_pad``."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode(errors="replace") if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ONNXImportError(f"{b.where()}: attribute 'auto_pad' is {auto!r}; expected NOTSET, SAME_UPPER, "
                              "SAME_LOWER or VALID")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            pads.append((total // 2, total - total // 2) if auto == "SAME_UPPER" else (total - total // 2, total // 2))
        begin, end = [p[0] for p in pads], [p[1] for p in pads]
    elif auto == "VALID":
        begin = end = [0, 0]
    else:
        pads = [int(p) for p in attrs.get("pads", [0] * 4)]
        if len(pads) != 4 or min(pads) < 0:
            raise ONNXImportError(f"{b.where()}: attribute 'pads' is {pads}; expected four sizes, 0 or more (top, "
                                  "left, bottom, right)")
        begin, end = pads[:2], pads[2:]
    if begin != end:
        raise ONNXUnsupportedError(f"{b.where()}: padding {begin} before and {end} after differ; toynet pads "
                                  "both sides of an axis alike")
    return tuple(int(p) for p in begin)


def _spatial(b: Any, x: Any) -> None:
    if len(x.shape) != 4:
        raise ONNXUnsupportedError(f"{b.where()}: toynet's convolution and pooling are 2-d (N, C, H, W); got an "
                                  f"input of shape {list(x.shape)}")


@importer("Conv")
def _conv(b, args, attrs):
    x, w = args[0], args[1]
    _spatial(b, x)
    kernel = _pair(b, attrs, "kernel_shape", w.shape[2:], 1)
    if kernel != tuple(w.shape[2:]):
        raise ONNXImportError(f"{b.where()}: attribute 'kernel_shape' is {list(kernel)}, but its weight has shape "
                              f"{list(w.shape)}; expected the weight's last two sizes")
    strides = _pair(b, attrs, "strides", (1, 1), 1)
    dilations = _pair(b, attrs, "dilations", (1, 1), 1)
    padding = _padding(b, attrs, x, kernel, strides, dilations)
    inputs = [x, w] + ([args[2]] if len(args) > 2 and args[2] is not None else [])
    return b.op("conv2d", *inputs, stride=strides, padding=padding, dilation=dilations,
                groups=int(attrs.get("group", 1)))


@importer("BatchNormalization")
def _batch_norm(b, args, attrs):
    refuse(b, attrs, training_mode=lambda v: v == 0)
    x, scale, bias, mean, var = args[:5]
    return b.op("batch_norm", x, mean, var, scale, bias, eps=float(attrs.get("epsilon", 1e-5)), training=False)


def _pool_settings(b, x, attrs) -> tuple[dict, tuple]:
    _spatial(b, x)
    kernel = _pair(b, attrs, "kernel_shape", attrs["kernel_shape"], 1)
    strides = _pair(b, attrs, "strides", (1, 1), 1)
    dilations = _pair(b, attrs, "dilations", (1, 1), 1)
    return dict(kernel_size=kernel, stride=strides, padding=_padding(b, attrs, x, kernel, strides, dilations),
                ceil_mode=bool(attrs.get("ceil_mode", 0))), dilations


@importer("MaxPool")
def _max_pool(b, args, attrs):
    refuse(b, attrs, storage_order=lambda v: v == 0)
    if len(b.onnx_node.output) > 1 and b.onnx_node.output[1]:
        raise ONNXUnsupportedError(f"{b.where()}: MaxPool's Indices output is not supported")
    settings, dilations = _pool_settings(b, args[0], attrs)
    return b.op("max_pool2d", args[0], dilation=dilations, **settings)


@importer("AveragePool")
def _avg_pool(b, args, attrs):
    settings, dilations = _pool_settings(b, args[0], attrs)
    if dilations != (1, 1):
        raise ONNXUnsupportedError(f"{b.where()}: dilated average pooling is not supported")
    return b.op("avg_pool2d", args[0], count_include_pad=bool(attrs.get("count_include_pad", 0)), **settings)


@importer("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(b, args, attrs):
    x = args[0]
    axes = tuple(range(2, len(x.shape)))
    return b.op("mean" if b.onnx_node.op_type == "GlobalAveragePool" else "amax", x, dim=axes, keepdim=True)


def _normalize(b, x, dims: tuple, eps: float):
    """``(x - mean) / sqrt(var + eps)`` over ``dims``, the core of the normalisations below."""
    centred = b.op("sub", x, b.op("mean", x, dim=dims, keepdim=True))
    variance = b.op("mean", b.op("mul", centred, centred), dim=dims, keepdim=True)
    return b.op("mul", centred, b.op("rsqrt", b.op("add", variance, eps)))


@importer("InstanceNormalization")
def _instance_norm(b, args, attrs):
    x, scale, bias = args
    if len(x.shape) < 3:
        raise ONNXImportError(f"{b.where()}: its input has shape {list(x.shape)}; expected (N, C, ...) with at least "
                              "one dimension after the channels")
    per_channel = (x.shape[1],) + (1,) * (len(x.shape) - 2)
    normal = _normalize(b, x, tuple(range(2, len(x.shape))), float(attrs.get("epsilon", 1e-5)))
    return b.op("add", b.op("mul", normal, b.op("reshape", scale, shape=per_channel)),
                b.op("reshape", bias, shape=per_channel))


@importer("MeanVarianceNormalization")
def _mean_variance_norm(b, args, attrs):
    dims = b.axes([int(a) for a in attrs.get("axes", (0, 2, 3))], len(args[0].shape))
    return _normalize(b, args[0], dims, 1e-9)


__all__ = ["IMPORTERS"]
