"""float32 discipline for every registered op: float32 inputs with Python-number operands give float32
outputs and float32 gradients (NumPy 2 silently widens float32 with a float64 constant, and one stray
``xp.asarray(0.5)`` or ``1 / xp.sqrt(n)`` is enough).

``CALLS`` says how to call each op in ``toynet.ops.OPS``. The registry is iterated, so an op that a
later change registers without an entry here fails ``test_every_registered_op_is_covered``: add one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import toynet as flow
import toynet.nn.functional as F
from toynet.ops import OPS
from toynet.dynamic.tensor import apply


def f32(*shape, positive=False, device="cpu"):
    """A float32 leaf that requires grad."""
    rng = np.random.default_rng(sum(shape))
    values = rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)
    return flow.tensor(values.astype(np.float32), device=device, requires_grad=True)


@dataclass
class Call:
    """``make(device)`` returns ``(output, leaves)``; ``grad`` says whether gradients must reach the leaves."""
    make: Callable
    grad: bool = True
    out_dtype: object = None      # None: float32; otherwise the dtype the op is asked to produce


def unary(method, positive=False):
    def make(device):
        x = f32(2, 3, positive=positive, device=device)
        return method(x), [x]
    return Call(make)


def with_scalars(op_name, positive=False):
    """Tensor-number, number-tensor and tensor-tensor calls of a binary elementwise op."""
    def make(device):
        x, y = f32(2, 3, positive=positive, device=device), f32(3, positive=True, device=device)
        op = OPS[op_name]
        return [apply(op, x, 2.5), apply(op, 1.5, x), apply(op, x, y), apply(op, x, 2)], [x, y]
    return Call(make)


def pool_helper(forward, build):
    """A pooling op or its backward-only helper, called with the attributes the forward op recorded."""
    def make(device):
        x = f32(1, 2, 4, 4, device=device)
        y = forward(x)
        return build(x, y, y.grad_fn.attrs), [x]
    return Call(make)


def _conv(device):
    x, w, b = f32(1, 2, 4, 4, device=device), f32(3, 2, 3, 3, device=device), f32(3, device=device)
    return F.conv2d(x, w, b, padding=1), [x, w, b]


def _conv_helper(name):
    def make(device):
        x, w = f32(1, 2, 4, 4, device=device), f32(3, 2, 3, 3, device=device)
        y = F.conv2d(x, w, padding=1, stride=2)
        g = f32(*y.shape, device=device)
        if name == "conv2d_grad_input":
            return apply(OPS[name], g, w, input_shape=tuple(x.shape), **y.grad_fn.attrs), [g, w]
        return apply(OPS[name], x, g, weight_shape=tuple(w.shape), **y.grad_fn.attrs), [x, g]
    return Call(make)


def _conv_fused(device):
    """The compiler's fused convolution, NCHW (dense, BatchNorm, relu6) and NHWC (depthwise, bias, relu)."""
    x, w = f32(1, 4, 4, 4, device=device), f32(3, 4, 3, 3, device=device)
    mean, var = f32(3, device=device), flow.ones(3, device=device)
    gamma, beta = f32(3, device=device), f32(3, device=device)
    dense = apply(OPS["conv2d_fused"], x, w, mean, var, gamma, beta, padding=(1, 1), norm="affine",
                  activation="relu6")
    last, depthwise, bias = f32(1, 4, 4, 4, device=device), f32(4, 1, 3, 3, device=device), f32(4, device=device)
    nhwc = apply(OPS["conv2d_fused"], last, depthwise, bias, padding=(1, 1), groups=4, bias=True, activation="relu",
                 channels_last=True)
    return [dense, nhwc], [x, w, last]


def _conv_nhwc_helper(name):
    def make(device):
        x, w = f32(1, 4, 4, 2, device=device), f32(3, 2, 1, 1, device=device)   # NHWC, a 1x1 convolution
        g = f32(1, 2, 2, 3, device=device)                                     # stride 2: NHWC output
        if name == "conv2d_nhwc_grad_input":
            return apply(OPS[name], g, w, input_shape=(1, 4, 4, 2), stride=(2, 2)), [g, w]
        return apply(OPS[name], x, g, weight_shape=(3, 2, 1, 1), stride=(2, 2)), [x, g]
    return Call(make, grad=False)


def _as_list(made):
    out, leaves = made
    return (out if isinstance(out, list) else [out]), leaves


def _batch_norm(device):
    x, w, b = f32(4, 3, device=device), f32(3, device=device), f32(3, device=device)
    mean, var = flow.zeros(3, device=device), flow.ones(3, device=device)
    return [F.batch_norm(x, None, None, w, b, training=True),
            F.batch_norm(x, mean, var, w, b, training=False, eps=1e-3)], [x, w, b]


def _bn_helper(name):
    def make(device):
        x, g = f32(4, 3, device=device), f32(4, 3, device=device)
        stats = apply(OPS["batch_norm_stats"], x.detach())
        mean, var = stats[0], stats[1]
        sums = apply(OPS["batch_norm_grad_stats"], g, x, mean)
        if name == "batch_norm_grad_stats":
            return sums, [x, g]
        return apply(OPS["batch_norm_grad_input"], g, x, mean, var, sums, f32(3, device=device), eps=1e-5), [x, g]
    return Call(make, grad=False)


def _fused(device):
    x = f32(2, 3, device=device)
    program = [{"op": "mul", "args": [["in", 0], ["lit", 0.5]], "attrs": {}},
               {"op": "add", "args": [["prev"], ["lit", 1.0]], "attrs": {}},
               {"op": "tanh", "args": [["prev"]], "attrs": {}}]
    return apply(OPS["fused_elementwise"], x, program=program), [x]


def _getitem_grad(device):
    g = f32(3, device=device)
    return apply(OPS["getitem_grad"], g, index=(1,), shape=(2, 3)), [g]


def _mse_grad(device):
    g, a, b = f32(device=device), f32(2, 3, device=device), f32(2, 3, device=device)
    return apply(OPS["mse_loss_grad"], g, a, b, reduction="mean"), [g, a, b]


def _cross_entropy(device):
    logits = f32(4, 3, device=device)
    target = flow.tensor([0, 2, 1, 2], device=device)
    return [F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="none")], [logits]


CALLS: dict[str, Call] = {
    # elementwise arithmetic, with Python numbers on either side
    "add": with_scalars("add"), "sub": with_scalars("sub"), "mul": with_scalars("mul"),
    "div": with_scalars("div", positive=True), "pow": with_scalars("pow", positive=True),
    "maximum": with_scalars("maximum"), "minimum": with_scalars("minimum"),
    "neg": unary(lambda x: -x),
    "exp": unary(lambda x: x.exp()), "log": unary(lambda x: x.log(), positive=True),
    "sqrt": unary(lambda x: x.sqrt(), positive=True), "rsqrt": unary(lambda x: x.rsqrt(), positive=True),
    "tanh": unary(lambda x: x.tanh()), "sigmoid": unary(lambda x: x.sigmoid()),
    "relu": unary(lambda x: x.relu()), "relu6": unary(lambda x: x.relu6() * 6.0),
    "clamp": unary(lambda x: [x.clamp(-0.5, 0.5), x.clamp(min=0), x.clamp(max=1)]),
    "abs": unary(lambda x: x.abs()),
    "sign": Call(lambda d: (f32(2, 3, device=d).sign(), []), grad=False),
    **{name: unary(lambda x, name=name: getattr(x, name)()) for name in (
        "sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "erf", "erfc", "expm1", "reciprocal", "square",
        "floor", "ceil", "round", "trunc")},
    **{name: unary(lambda x, name=name: getattr(x * 0.4, name)()) for name in ("asin", "acos", "atanh")},
    **{name: unary(lambda x, name=name: getattr(x, name)(), positive=True) for name in ("log1p", "log2", "log10")},
    "acosh": unary(lambda x: (x + 1.0).acosh(), positive=True),
    "where": unary(lambda x: [flow.where(x > 0, x, 0.5), flow.where(x > 0, 2, x), flow.where(x > 0, x, x * 2),
                              flow.where(x > 0, 1.0, 0.0) * x]),  # a mask from two numbers is float32 too
    "identity": unary(lambda x: x.clone()),
    "cast": Call(lambda d: (lambda x: (x.to(flow.float16), [x]))(f32(2, 3, device=d)), out_dtype=flow.float16),
    "to_device": unary(lambda x: x.to("strict" if x.device.type == "cpu" else "cpu")),
    # comparisons take floats and give bools
    **{name: Call(lambda d, name=name: (apply(OPS[name], f32(2, 3, device=d), 0.5), []), grad=False,
                  out_dtype=flow.bool) for name in ("lt", "le", "gt", "ge", "eq", "ne")},
    # reductions
    "sum": unary(lambda x: [x.sum(), x.sum(1)]), "mean": unary(lambda x: [x.mean(), x.mean(0)]),
    "var": unary(lambda x: [x.var(), x.var(1, unbiased=False)]),
    "amax": unary(lambda x: [x.amax(), x.amax(1)]),
    "argmax": Call(lambda d: (f32(2, 3, device=d).argmax(1), []), grad=False, out_dtype=flow.int64),
    "any": Call(lambda d: ((f32(2, 3, device=d) > 0).any(), []), grad=False, out_dtype=flow.bool),
    "all": Call(lambda d: ((f32(2, 3, device=d) > 0).all(), []), grad=False, out_dtype=flow.bool),
    "sum_to": unary(lambda x: x.sum_to((1, 3))),
    "sum_squares": unary(lambda x: apply(OPS["sum_squares"], x)),
    "softmax": unary(lambda x: x.softmax(1)), "log_softmax": unary(lambda x: x.log_softmax(0)),
    "cumsum": unary(lambda x: apply(OPS["cumsum"], x, dim=1)),
    # shapes and indexing
    "reshape": unary(lambda x: x.reshape(3, 2)), "permute": unary(lambda x: x.t()),
    "broadcast_to": unary(lambda x: x.expand(4, 2, 3)),
    "getitem": unary(lambda x: [x[1], x[:, ::-1], x[[0, 0]], x[x > 0]]),
    "getitem_grad": Call(_getitem_grad),
    "cat": unary(lambda x: flow.cat([x, x * 2.0], 1)),
    # layers and losses
    "matmul": unary(lambda x: [x @ x.t(), x[0] @ x[1]]),
    "linear": Call(lambda d: (lambda x, w, b: (F.linear(x, w, b), [x, w, b]))(
        f32(4, 3, device=d), f32(2, 3, device=d), f32(2, device=d))),
    "linear_grad_weight": Call(lambda d: (lambda g, x: (apply(OPS["linear_grad_weight"], g, x), [g, x]))(
        f32(4, 2, device=d), f32(4, 3, device=d))),
    "mse_loss": Call(lambda d: (lambda a, b: ([F.mse_loss(a, b), F.mse_loss(a, b, reduction="sum")], [a, b]))(
        f32(2, 3, device=d), f32(2, 3, device=d))),
    "mse_loss_grad": Call(_mse_grad),
    "sub_scaled": Call(lambda d: (lambda a, b, lr: ([apply(OPS["sub_scaled"], a, b, 0.1),
                                                     apply(OPS["sub_scaled"], a, b, lr)], [a, b, lr]))(
        f32(2, 3, device=d), f32(2, 3, device=d), f32(device=d))),
    "cross_entropy": Call(_cross_entropy),
    "conv2d": Call(_conv), "conv2d_grad_input": _conv_helper("conv2d_grad_input"),
    "conv2d_grad_weight": _conv_helper("conv2d_grad_weight"),
    "max_pool2d": pool_helper(lambda x: F.max_pool2d(x, 2), lambda x, y, attrs: y),
    "max_pool2d_grad": pool_helper(lambda x: F.max_pool2d(x, 2), lambda x, y, attrs: apply(
        OPS["max_pool2d_grad"], x, y * 1.5, **attrs)),
    "max_pool2d_select": pool_helper(lambda x: F.max_pool2d(x, 2), lambda x, y, attrs: apply(
        OPS["max_pool2d_select"], x, x * 1.5, **attrs)),
    "avg_pool2d": pool_helper(lambda x: F.avg_pool2d(x, 2), lambda x, y, attrs: y),
    "avg_pool2d_grad": pool_helper(lambda x: F.avg_pool2d(x, 2), lambda x, y, attrs: apply(
        OPS["avg_pool2d_grad"], y * 1.5, input_shape=tuple(x.shape), **attrs)),
    "adaptive_avg_pool2d": pool_helper(lambda x: F.adaptive_avg_pool2d(x, 1), lambda x, y, attrs: y),
    "adaptive_avg_pool2d_grad": pool_helper(lambda x: F.adaptive_avg_pool2d(x, 1), lambda x, y, attrs: apply(
        OPS["adaptive_avg_pool2d_grad"], y * 1.5, input_shape=tuple(x.shape))),
    "batch_norm_stats": unary(lambda x: apply(OPS["batch_norm_stats"], x.reshape(3, 2))),
    "batch_norm": Call(_batch_norm),
    "batch_norm_grad_stats": _bn_helper("batch_norm_grad_stats"),
    "batch_norm_grad_input": _bn_helper("batch_norm_grad_input"),
    "dropout_mask": Call(lambda d: (apply(OPS["dropout_mask"], f32(2, 3, device=d), p=0.25), []), grad=False),
    "fused_elementwise": Call(_fused, grad=False),
    # ops only Graph mode's compiler writes (toynet/ops/conv_fused.py): no vjp
    "conv2d_fused": Call(_conv_fused, grad=False),
    "conv2d_nhwc_grad_input": _conv_nhwc_helper("conv2d_nhwc_grad_input"),
    "conv2d_nhwc_grad_weight": _conv_nhwc_helper("conv2d_nhwc_grad_weight"),
    "to_channels_last": Call(lambda d: (lambda x: (apply(OPS["to_channels_last"], x), [x]))(
        f32(1, 2, 3, 4, device=d)), grad=False),
    "to_channels_first": Call(lambda d: (lambda x: (apply(OPS["to_channels_first"], x), [x]))(
        f32(1, 2, 3, 4, device=d)), grad=False),
    # the style-transfer network's ops (tests/test_stylenet.py)
    "reflection_pad2d": unary(lambda x: F.pad(x.reshape(1, 1, 2, 3), (2, 1, 1, 0))),
    "reflection_pad2d_grad": unary(lambda x: apply(OPS["reflection_pad2d_grad"], x.reshape(1, 1, 2, 3),
                                                   sides=(1, 0, 0, 0))),
    "upsample_nearest2d": unary(lambda x: F.interpolate(x.reshape(1, 1, 2, 3), scale_factor=2)),
    "upsample_nearest2d_grad": unary(lambda x: apply(OPS["upsample_nearest2d_grad"], x.reshape(1, 1, 2, 3),
                                                     scale=(2, 1))),
    "instance_norm": unary(lambda x: F.instance_norm(x.reshape(1, 2, 3, 1), eps=1e-3)),
    # a transformer's ops (tests/test_transformer_ops.py)
    "gelu": unary(lambda x: F.gelu(x)), "gelu_tanh": unary(lambda x: F.gelu(x, approximate="tanh")),
    **{name: Call(lambda d, name=name: (lambda g, x: (apply(OPS[name], g, x, x * 0.5), [g, x]))(
        f32(2, 3, device=d), f32(2, 3, device=d)), grad=False) for name in ("gelu_grad", "gelu_tanh_grad")},
    "layer_norm": Call(lambda d: (lambda x, w, b: ([F.layer_norm(x, (3,), w, b, eps=1e-3), F.layer_norm(x, (2, 3))],
                                                   [x, w, b]))(f32(2, 3, device=d), f32(3, device=d), f32(3, device=d))),
    "layer_norm_grad": Call(lambda d: (lambda g, x: (apply(OPS["layer_norm_grad"], g, x, dim=(1,)), [g, x]))(
        f32(2, 3, device=d), f32(2, 3, device=d)), grad=False),
    "embedding": Call(lambda d: (lambda w: (F.embedding(flow.tensor([[0, 2], [2, 1]], device=d), w, padding_idx=1),
                                            [w]))(f32(3, 4, device=d))),
    "embedding_grad": Call(lambda d: (lambda g: (apply(OPS["embedding_grad"], g, flow.tensor([0, 2], device=d), shape=(3, 4)),
                                                 [g]))(f32(2, 4, device=d))),
    "gather": unary(lambda x: x.gather(1, flow.tensor([[0, 0], [2, 1]], device=x.device))),
    "gather_grad": unary(lambda x: apply(OPS["gather_grad"], x, flow.tensor([[0, 1, 1], [2, 0, 1]], device=x.device),
                                         dim=0, shape=(3, 3))),
    "topk_indices": Call(lambda d: (f32(2, 3, device=d).topk(2)[1], []), grad=False, out_dtype=flow.int64),
    "multinomial": Call(lambda d: (f32(2, 3, positive=True, device=d).multinomial(2), []), grad=False,
                        out_dtype=flow.int64),
    "tril": unary(lambda x: x.tril()), "triu": unary(lambda x: x.triu(1)),
    # softmax's backward as one op (toynet/ops/fast/softmax.py)
    "softmax_grad": Call(lambda d: (lambda g, s: (apply(OPS["softmax_grad"], g, s.softmax(1), dim=1), [g, s]))(
        f32(2, 3, device=d), f32(2, 3, device=d))),
}

#: Ops that take no float input, so float32 discipline does not apply to them.
NO_FLOAT_INPUTS = {
    "logical_and": "bool inputs", "logical_or": "bool inputs", "logical_not": "bool input",
    "one_hot": "integer class indices in, the requested dtype out",
}


def test_every_registered_op_is_covered():
    missing = sorted(set(OPS) - set(CALLS) - set(NO_FLOAT_INPUTS))
    assert not missing, (f"ops without an entry in tests/test_dtypes.py: {missing}; add a CALLS entry saying "
                         "how to call each with float32 inputs (or list it in NO_FLOAT_INPUTS)")
    stale = sorted((set(CALLS) | set(NO_FLOAT_INPUTS)) - set(OPS))
    assert not stale, f"entries for ops that are not registered (renamed or removed?): {stale}"


def _check(name, call, device):
    outs, leaves = _as_list(call.make(device))
    want = call.out_dtype or flow.float32
    for out in outs:
        assert out.dtype is want, f"{name}: output dtype {out.dtype}, expected {want}"
        assert out.array.dtype == want.array_dtype
    if not call.grad:
        return
    total = None
    for out in outs:
        term = (out.to(flow.float32) * 1.5).sum()
        total = term if total is None else total + term
    total.backward()
    assert total.dtype is flow.float32
    reached = [leaf for leaf in leaves if leaf.grad is not None]
    assert reached, f"{name}: no gradient reached the float32 inputs"
    for leaf in reached:
        assert leaf.grad.dtype is flow.float32, f"{name}: gradient dtype {leaf.grad.dtype}, expected float32"
        assert leaf.grad.array.dtype == np.float32


@pytest.mark.parametrize("name", sorted(CALLS))
def test_float32_stays_float32(name, device):
    _check(name, CALLS[name], device)


def test_float32_survives_numpy_scalars_and_a_training_step(device):
    w = f32(3, 2, device=device)
    x = flow.tensor(np.ones((4, 3), dtype=np.float32), device=device)
    loss = F.mse_loss((x @ w).tanh() * np.float64(2.0), flow.zeros(4, 2, device=device)) * np.float32(0.5)
    loss.backward()
    assert loss.dtype is flow.float32 and w.grad.dtype is flow.float32
    with flow.no_grad():
        w.sub_(w.grad * np.float64(0.1))
    assert w.dtype is flow.float32


def test_second_derivatives_stay_float32():
    x = f32(3)
    (g,) = flow.autograd.grad((x.tanh() * x ** 3).sum(), x, create_graph=True)
    (g2,) = flow.autograd.grad(g.sum(), x)
    assert g.dtype is flow.float32 and g2.dtype is flow.float32


def test_integer_true_division_gives_the_float_its_shape_rule_declares():
    """int / int is float64 (NumPy's true_divide); the shape rule used to say int32 while the kernel
    made float64, so a compiled plan's buffers and an exported ONNX graph disagreed with Eager mode."""
    a = flow.tensor([1, 2, 3], dtype=flow.int32)
    b = flow.tensor([2, 2, 2], dtype=flow.int32)
    _, declared = OPS["div"].infer(a, b)
    eager = a / b
    assert declared is eager.dtype is flow.float64 and eager.tolist() == [0.5, 1.0, 1.5]

    class Halves(flow.nn.Graph):
        def build(self, x, y):
            return x / y
    assert Halves()(a, b).dtype is flow.float64
