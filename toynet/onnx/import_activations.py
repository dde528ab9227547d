"""The activation functions of ONNX as toynet ops: Clip, LeakyRelu, Elu, Selu, HardSwish, Gelu...

Most have no single toynet op: each is written with ops toynet has (``where``, ``exp``, ``clamp``,
``erf``), so what the imported graph computes, and its gradient, come from ops that are already tested
and gradient-checked. Registered in :data:`toynet.onnx.import_ops.IMPORTERS`.
"""

from __future__ import annotations

from .import_ops import IMPORTERS, importer


@importer("LeakyRelu")
def _leaky_relu(b, args, attrs):
    x = args[0]
    return b.op("where", b.op("gt", x, 0.0), x, b.op("mul", x, float(attrs.get("alpha", 0.01))))


@importer("PRelu")
def _prelu(b, args, attrs):
    x, slope = args
    return b.op("where", b.op("gt", x, 0.0), x, b.op("mul", x, slope))


@importer("ThresholdedRelu")
def _thresholded_relu(b, args, attrs):
    x = args[0]
    return b.op("where", b.op("gt", x, float(attrs.get("alpha", 1.0))), x, 0.0)


@importer("Elu")
def _elu(b, args, attrs):
    x = args[0]
    negative = b.op("mul", b.op("sub", b.op("exp", x), 1.0), float(attrs.get("alpha", 1.0)))
    return b.op("where", b.op("gt", x, 0.0), x, negative)


@importer("Celu")
def _celu(b, args, attrs):
    x, alpha = args[0], float(attrs.get("alpha", 1.0))
    negative = b.op("mul", b.op("sub", b.op("exp", b.op("div", x, alpha)), 1.0), alpha)
    return b.op("where", b.op("gt", x, 0.0), x, negative)


@importer("Selu")
def _selu(b, args, attrs):
    x = args[0]
    alpha = float(attrs.get("alpha", 1.67326319217681884765625))
    gamma = float(attrs.get("gamma", 1.05070102214813232421875))
    negative = b.op("mul", b.op("sub", b.op("exp", x), 1.0), alpha)
    return b.op("mul", b.op("where", b.op("gt", x, 0.0), x, negative), gamma)


@importer("HardSigmoid")
def _hard_sigmoid(b, args, attrs):
    scaled = b.op("add", b.op("mul", args[0], float(attrs.get("alpha", 0.2))), float(attrs.get("beta", 0.5)))
    return b.op("clamp", scaled, min=0.0, max=1.0)


@importer("HardSwish")
def _hard_swish(b, args, attrs):
    gate = b.op("clamp", b.op("add", b.op("mul", args[0], 1.0 / 6.0), 0.5), min=0.0, max=1.0)
    return b.op("mul", args[0], gate)


@importer("Softplus")
def _softplus(b, args, attrs):
    return b.op("log", b.op("add", b.op("exp", args[0]), 1.0))


@importer("Softsign")
def _softsign(b, args, attrs):
    return b.op("div", args[0], b.op("add", b.op("abs", args[0]), 1.0))


@importer("Mish")
def _mish(b, args, attrs):
    softplus = b.op("log", b.op("add", b.op("exp", args[0]), 1.0))
    return b.op("mul", args[0], b.op("tanh", softplus))


@importer("Clip")
def _clip(b, args, attrs):
    x = args[0]
    low = attrs.get("min") if len(args) < 2 or args[1] is None else b.known(args[1], "min").item()
    high = attrs.get("max") if len(args) < 3 or args[2] is None else b.known(args[2], "max").item()
    if low is None and high is None:
        return b.op("identity", x)
    cast = float if x.dtype.is_floating_point else int
    return b.op("clamp", x, min=None if low is None else cast(low), max=None if high is None else cast(high))


__all__ = ["IMPORTERS"]
