"""Convolution and pooling: ops, functional API and modules.

* every kernel (dense im2col, grouped, 1x1 per-image and channel-major, depthwise) against central
  finite differences in float64 on every device of the fixture, and against PyTorch (forward, input,
  weight and bias gradients) when it is importable;
* second order: the backward ops' own vjps by finite differences, and double backward vs PyTorch;
* pooling (max with ties, padding, dilation, ceil_mode; avg with count_include_pad, divisor_override;
  adaptive avg: global, divisible and PyTorch's general windows) the same way;
* float32 stays float32, shape errors name the shapes, module reprs, parameter shapes and init bounds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import check_grad

import toynet as flow
from toynet.ops import OPS, ShapeError
from toynet.dynamic.tensor import apply

F = flow.nn.functional

# (name, x shape, weight shape, stride, padding, dilation, groups): every kernel and its corner cases.
CONVS = [
    ("dense_3x3", (2, 3, 5, 5), (4, 3, 3, 3), 1, 1, 1, 1),
    ("dense_nonsquare_stride", (2, 2, 7, 6), (3, 2, 3, 2), (2, 1), (1, 0), 1, 1),
    ("dense_dilation", (1, 2, 7, 7), (2, 2, 3, 3), 1, 2, 2, 1),
    ("dense_stride_leaves_rows", (1, 2, 6, 6), (2, 2, 3, 3), 2, 0, 1, 1),  # last row is never read
    ("grouped", (2, 4, 5, 4), (6, 2, 3, 3), 1, 1, 1, 2),
    ("depthwise", (2, 3, 5, 5), (3, 1, 3, 3), 1, 1, 1, 3),
    ("depthwise_stride2", (2, 3, 6, 5), (3, 1, 3, 3), 2, 1, 1, 3),
    ("depthwise_dilated_nonsquare", (1, 2, 6, 7), (2, 1, 3, 2), (1, 2), (2, 1), (2, 1), 2),
    ("depthwise_multiplier", (2, 2, 4, 4), (4, 1, 3, 3), 1, 1, 1, 2),  # 2 outputs per channel: dense
    ("pointwise_per_image", (2, 3, 4, 5), (4, 3, 1, 1), 1, 0, 1, 1),     # 20 pixels: batched matmul
    ("pointwise_channel_major", (3, 3, 3, 3), (2, 3, 1, 1), 1, 0, 1, 1),  # 9 pixels: one GEMM
    ("pointwise_strided", (2, 3, 5, 4), (2, 3, 1, 1), 2, 0, 1, 1),
    ("pointwise_padded", (1, 2, 3, 3), (2, 2, 1, 1), 1, 1, 1, 1),         # padding: the dense kernel
]


def conv_call(x_shape, w_shape, stride, padding, dilation, groups):
    return lambda x, w, *b: F.conv2d(x, w, b[0] if b else None, stride, padding, dilation, groups)


@pytest.mark.parametrize("case", CONVS, ids=[c[0] for c in CONVS])
def test_conv2d_gradients_match_finite_differences(case, device):
    _, xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(1)
    fn = conv_call(xs, ws, stride, padding, dilation, groups)
    check_grad(fn, rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(ws[0]), device=device)


@pytest.mark.parametrize("case", CONVS, ids=[c[0] for c in CONVS])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv2d_matches_pytorch(case, dtype, device):
    torch = pytest.importorskip("torch")
    _, xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (xs, ws, (ws[0],))]
    ours = [flow.tensor(a, device=device, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = F.conv2d(*ours, stride=stride, padding=padding, dilation=dilation, groups=groups)
    ty = torch.nn.functional.conv2d(*theirs, stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = rng.standard_normal(tuple(ty.shape)).astype(dtype)
    y.backward(flow.tensor(g, device=device))
    ty.backward(torch.tensor(g))
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-10}
    assert y.dtype == flow.float32 if dtype == "float32" else y.dtype == flow.float64
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **tol)
    for mine, ref in zip(ours, theirs):
        assert mine.grad.dtype == mine.dtype
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), **tol)


DENSE = [c for c in CONVS if c[0].startswith(("dense", "grouped", "depthwise_multiplier", "pointwise_padded"))]


@pytest.mark.parametrize("taps", ["shift", "window"])
@pytest.mark.parametrize("chunk_bytes", [1, 1 << 30], ids=["image_by_image", "whole_batch"])
@pytest.mark.parametrize("case", DENSE + [("dense_stride_2x1_dilated", (3, 2, 7, 6), (3, 2, 2, 3), (2, 1), (1, 2),
                                           (1, 2), 1)], ids=lambda c: c[0])
def test_dense_kernels_layouts_and_chunks_agree_with_pytorch(case, chunk_bytes, taps, device, monkeypatch):
    """The dense kernels build im2col a few images at a time (DENSE_CHUNK_BYTES), and read stride-1
    taps as shifts of the flattened image unless that wastes too much (SHIFT_MAX_WASTE). Every
    combination (one image per chunk or the whole batch; shifts or windows) must give PyTorch's
    forward and both gradients."""
    torch = pytest.importorskip("torch")
    from toynet.ops import conv_dense

    monkeypatch.setattr(conv_dense, "DENSE_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(conv_dense, "SHIFT_MAX_WASTE", float("inf") if taps == "shift" else 0.0)
    _, xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(10)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    ours = [flow.tensor(a, device=device, requires_grad=True) for a in (x, w)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w)]
    y = F.conv2d(*ours, stride=stride, padding=padding, dilation=dilation, groups=groups)
    ty = torch.nn.functional.conv2d(*theirs, stride=stride, padding=padding, dilation=dilation, groups=groups)
    g = rng.standard_normal(tuple(ty.shape))
    y.backward(flow.tensor(g, device=device))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for mine, ref in zip(ours, theirs):
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", [c for c in CONVS if c[0] in ("dense_nonsquare_stride", "grouped", "depthwise_stride2",
                                                                 "pointwise_strided", "dense_dilation")],
                         ids=lambda c: c[0])
def test_conv_backward_ops_have_correct_vjps(case, device):
    """conv2d_grad_input and conv2d_grad_weight are differentiable in both their inputs."""
    _, xs, ws, stride, padding, dilation, groups = case
    attrs = {"stride": flow.nn.functional._pair(stride, "s"), "padding": flow.nn.functional._pair(padding, "p"),
                 "dilation": flow.nn.functional._pair(dilation, "d"), "groups": groups}
    rng = np.random.default_rng(3)
    out_shape = F.conv2d(flow.zeros(*xs), flow.zeros(*ws), None, stride, padding, dilation, groups).shape
    check_grad(lambda g, w: apply(OPS["conv2d_grad_input"], g, w, input_shape=xs, **attrs),
               rng.standard_normal(out_shape), rng.standard_normal(ws), device=device)
    check_grad(lambda x, g: apply(OPS["conv2d_grad_weight"], x, g, weight_shape=ws, **attrs),
               rng.standard_normal(xs), rng.standard_normal(out_shape), device=device)


def test_conv2d_double_backward_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 4, 5, 5)), rng.standard_normal((4, 2, 3, 3))

    def second_order(L, x, w):
        y = (L.nn.functional.conv2d(x, w, stride=2, padding=1, groups=2) ** 2).sum()
        gx, gw = L.autograd.grad(y, (x, w), create_graph=True)
        return L.autograd.grad((gx * gx).sum() + (gw ** 3).sum(), (x, w))

    ours = second_order(flow, flow.tensor(x, device=device, requires_grad=True),
                        flow.tensor(w, device=device, requires_grad=True))
    theirs = second_order(torch, torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # PyTorch's note about its own extra copy
def test_conv2d_padding_same_and_valid_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 6, 5))
    for ks, dilation in [((3, 3), 1), ((4, 2), 1), ((2, 3), 2)]:
        w = rng.standard_normal((3, 2) + ks)
        for padding in ("same", "valid"):
            xt = flow.tensor(x, requires_grad=True)
            y = F.conv2d(xt, flow.tensor(w), padding=padding, dilation=dilation)
            ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=padding, dilation=dilation)
            np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-10, atol=1e-10)
    check_grad(lambda x, w: F.conv2d(x, w, padding="same"), x, rng.standard_normal((2, 2, 2, 3)))


# ------------------------------------------------------------------------------------------ pooling

POOLS = [
    ("max_2x2", lambda x: F.max_pool2d(x, 2), (2, 3, 4, 6)),
    ("max_3x3_s2_p1", lambda x: F.max_pool2d(x, 3, 2, 1), (2, 2, 7, 6)),
    ("max_nonsquare_dilated", lambda x: F.max_pool2d(x, (2, 3), (1, 2), (1, 1), dilation=(2, 1)), (1, 2, 6, 7)),
    ("max_ceil_mode", lambda x: F.max_pool2d(x, 2, 2, ceil_mode=True), (1, 2, 5, 5)),
    ("avg_2x2", lambda x: F.avg_pool2d(x, 2), (2, 3, 4, 6)),
    ("avg_3x3_s2_p1", lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 2, 7, 6)),
    ("avg_exclude_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (1, 2, 6, 5)),
    ("avg_ceil_mode", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (1, 2, 6, 6)),
    ("avg_divisor_override", lambda x: F.avg_pool2d(x, (2, 3), 1, divisor_override=4), (1, 1, 4, 5)),
    ("adaptive_global", lambda x: F.adaptive_avg_pool2d(x, 1), (2, 3, 4, 5)),
    ("adaptive_divisible", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), (2, 2, 4, 6)),
    ("adaptive_general", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 2, 5, 7)),
    ("adaptive_upsampling", lambda x: F.adaptive_avg_pool2d(x, (4, None)), (1, 2, 3, 5)),
]


def distinct(rng, shape):
    """Values far apart (no ties), so finite differences never move a maximum to another pixel."""
    return rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1 + rng.uniform(-0.01, 0.01, shape)


@pytest.mark.parametrize("case", POOLS, ids=[c[0] for c in POOLS])
def test_pool_gradients_match_finite_differences(case, device):
    _, fn, shape = case
    check_grad(fn, distinct(np.random.default_rng(6), shape), device=device)


@pytest.mark.parametrize("case", POOLS, ids=[c[0] for c in POOLS])
def test_pool_matches_pytorch(case, device):
    torch = pytest.importorskip("torch")
    _, fn, shape = case
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    ours, theirs = flow.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = fn(ours)
    ty = _torch_version(case[0], theirs, torch)
    assert y.dtype == flow.float32 and tuple(y.shape) == tuple(ty.shape)
    g = np.random.default_rng(8).standard_normal(tuple(ty.shape)).astype(np.float32)
    y.backward(flow.tensor(g, device=device))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert ours.grad.dtype == flow.float32
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def _torch_version(name, x, torch):
    """The same calls as POOLS, spelled with torch.nn.functional."""
    TF = torch.nn.functional
    return {
        "max_2x2": lambda: TF.max_pool2d(x, 2),
        "max_3x3_s2_p1": lambda: TF.max_pool2d(x, 3, 2, 1),
        "max_nonsquare_dilated": lambda: TF.max_pool2d(x, (2, 3), (1, 2), (1, 1), dilation=(2, 1)),
        "max_ceil_mode": lambda: TF.max_pool2d(x, 2, 2, ceil_mode=True),
        "avg_2x2": lambda: TF.avg_pool2d(x, 2),
        "avg_3x3_s2_p1": lambda: TF.avg_pool2d(x, 3, 2, 1),
        "avg_exclude_pad": lambda: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
        "avg_ceil_mode": lambda: TF.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
        "avg_divisor_override": lambda: TF.avg_pool2d(x, (2, 3), 1, divisor_override=4),
        "adaptive_global": lambda: TF.adaptive_avg_pool2d(x, 1),
        "adaptive_divisible": lambda: TF.adaptive_avg_pool2d(x, (2, 3)),
        "adaptive_general": lambda: TF.adaptive_avg_pool2d(x, (3, 4)),
        "adaptive_upsampling": lambda: TF.adaptive_avg_pool2d(x, (4, None)),
    }[name]()


def test_max_pool_ties_send_the_gradient_to_the_first_maximum_like_pytorch(device):
    torch = pytest.importorskip("torch")
    x = np.array([[[[1.0, 1.0, 0.0], [1.0, 0.5, 1.0], [1.0, 1.0, 1.0]]]], dtype=np.float32)
    ours = flow.tensor(x, device=device, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    F.max_pool2d(ours, 2, 1).sum().backward()
    torch.nn.functional.max_pool2d(theirs, 2, 1).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


def test_pool_backward_ops_have_correct_vjps(device):
    """Second order: max_pool2d_grad / max_pool2d_select are each other's vjp; avg and adaptive grads
    are differentiated by their forward ops."""
    rng = np.random.default_rng(9)
    x = distinct(rng, (1, 2, 5, 5))
    attrs = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": False}
    check_grad(lambda x, g: apply(OPS["max_pool2d_grad"], x, g, **attrs), x, rng.standard_normal((1, 2, 3, 3)),
               device=device)
    check_grad(lambda x, h: apply(OPS["max_pool2d_select"], x, h, **attrs), x, rng.standard_normal(x.shape),
               device=device)
    avg = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "ceil_mode": True, "count_include_pad": False,
               "divisor_override": None}
    check_grad(lambda g: apply(OPS["avg_pool2d_grad"], g, input_shape=(1, 2, 6, 6), **avg),
               rng.standard_normal((1, 2, 4, 4)), device=device)
    for out in ((1, 1), (2, 3), (3, 4)):
        check_grad(lambda g: apply(OPS["adaptive_avg_pool2d_grad"], g, input_shape=(1, 2, 6, 7)),
                   rng.standard_normal((1, 2) + out), device=device)


# ------------------------------------------------------------------------------------ shape errors


@pytest.mark.parametrize("call, message", [
    (lambda: F.conv2d(flow.zeros(1, 3, 8, 8), flow.zeros(4, 2, 3, 3)), r"\(1, 3, 8, 8\).*3 channels.*\(4, 2, 3, 3\)"),
    (lambda: F.conv2d(flow.zeros(1, 3, 8, 8), flow.zeros(4, 2, 1, 1)), r"expects 2"),
    (lambda: F.conv2d(flow.zeros(3, 8, 8), flow.zeros(4, 3, 3, 3)), r"4-d input.*\(3, 8, 8\).*unsqueeze"),
    (lambda: F.conv2d(flow.zeros(1, 3, 2, 2), flow.zeros(4, 3, 3, 3)), r"does not fit.*\(1, 3, 2, 2\)"),
    (lambda: F.conv2d(flow.zeros(1, 4, 8, 8), flow.zeros(3, 2, 3, 3), groups=2), r"groups=2 must divide"),
    (lambda: F.conv2d(flow.zeros(1, 3, 8, 8), flow.zeros(4, 3, 3, 3), flow.zeros(3)), r"bias of shape \(3,\)"),
    (lambda: F.max_pool2d(flow.zeros(1, 1, 4, 4), 2, padding=2), r"padding \(2, 2\).*half"),
    (lambda: F.avg_pool2d(flow.zeros(1, 1, 2, 2), 3), r"does not fit.*\(1, 1, 2, 2\)"),
    (lambda: F.adaptive_avg_pool2d(flow.zeros(4, 4), 2), r"4-d input.*\(4, 4\)"),
])
def test_shape_errors_name_the_shapes(call, message):
    with pytest.raises(ShapeError, match=message):
        call()


def test_shape_rules_agree_with_forward():
    cases = [(OPS["conv2d"], (flow.zeros(2, 4, 9, 7), flow.zeros(6, 2, 3, 2)),
              {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}),
             (OPS["max_pool2d"], (flow.zeros(1, 2, 7, 5),),
              {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "ceil_mode": True})]
    for op, inputs, attrs in cases:
        shape, dtype = op.infer(*inputs, **attrs)
        out = apply(op, *inputs, **attrs)
        assert shape == tuple(out.shape) and dtype == out.dtype


# ----------------------------------------------------------------------------------------- modules


def test_module_reprs_match_pytorch():
    nn = flow.nn
    assert repr(nn.Conv2d(3, 32, kernel_size=3, stride=2, padding=1, bias=False)) == \
        "Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)"
    assert repr(nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)) == \
        "Conv2d(16, 16, kernel_size=(3, 3), stride=(1, 1), padding=(2, 2), dilation=(2, 2), groups=16)"
    assert repr(nn.Conv2d(4, 8, (1, 3))) == "Conv2d(4, 8, kernel_size=(1, 3), stride=(1, 1))"
    assert repr(nn.Conv2d(4, 8, 3, padding="same")) == "Conv2d(4, 8, kernel_size=(3, 3), stride=(1, 1), padding=same)"
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.MaxPool2d(3, 2, 1)) == "MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)"
    assert repr(nn.AvgPool2d((2, 2))) == "AvgPool2d(kernel_size=(2, 2), stride=(2, 2), padding=0)"
    assert repr(nn.AdaptiveAvgPool2d((1, 1))) == "AdaptiveAvgPool2d(output_size=(1, 1))"
    assert repr(nn.AdaptiveAvgPool2d(7)) == "AdaptiveAvgPool2d(output_size=7)"


@pytest.mark.parametrize("groups", [1, 4])
def test_conv2d_parameters_have_pytorch_shapes_and_init_bounds(groups):
    conv = flow.nn.Conv2d(8, 256, (3, 5), groups=groups)  # enough values that the extremes near the bound
    assert tuple(conv.weight.shape) == (256, 8 // groups, 3, 5) and tuple(conv.bias.shape) == (256,)
    assert conv.weight.dtype == flow.float32 and conv.weight.requires_grad
    bound = 1 / math.sqrt(8 // groups * 3 * 5)  # kaiming_uniform(a=sqrt(5)) gives 1/sqrt(fan_in)
    for p in (conv.weight, conv.bias):
        values = np.abs(p.numpy())
        assert values.max() <= bound and values.max() > 0.7 * bound
    assert [name for name, _ in conv.named_parameters()] == ["weight", "bias"]
    assert list(flow.nn.Conv2d(2, 2, 1, bias=False).state_dict()) == ["weight"]


def test_conv2d_module_errors():
    with pytest.raises(ValueError, match="divisible by groups"):
        flow.nn.Conv2d(6, 4, 3, groups=4)
    with pytest.raises(ValueError, match="padding_mode"):
        flow.nn.Conv2d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(TypeError, match="kernel_size"):
        flow.nn.Conv2d(2, 2, (3, 3, 3))
    with pytest.raises(TypeError, match="stride"):
        F.max_pool2d(flow.zeros(1, 1, 4, 4), 2, stride=1.5)
    assert flow.nn.Conv2d(2, 2, np.int64(3), stride=(1, np.int32(2))).stride == (1, 2)  # NumPy ints work


def test_small_conv_net_trains_in_float32(device):
    nn = flow.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 4, 1), nn.AvgPool2d(2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    model.to(device)
    x = flow.randn(4, 3, 8, 8, device=device)
    target = flow.randn(4, 2, device=device)
    losses = []
    for _ in range(5):
        loss = F.mse_loss(model(x), target)
        model.zero_grad()
        loss.backward()
        with flow.no_grad():
            for p in model.parameters():
                assert p.grad.dtype == flow.float32 and p.grad.shape == p.shape
                p.copy_(p - p.grad * 0.1)
        losses.append(loss.item())
    assert loss.dtype == flow.float32
    assert losses[-1] < losses[0]


def test_graph_mode_traces_the_layers_and_matches_eager():
    """nn.Graph traces Conv2d and the pools (shape rules, vjps on lazy tensors): same losses as Eager."""
    nn = flow.nn

    def make():
        flow.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 4, 1), nn.AvgPool2d(2),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

    x, t = flow.randn(4, 3, 8, 8), flow.randn(4, 2)
    eager_model, graph_model = make(), make()
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.1)
    graph_opt = flow.optim.SGD(graph_model.parameters(), lr=0.1)

    class TrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = graph_model
            self.add_optimizer(graph_opt)

        def build(self, x, t):
            loss = F.mse_loss(self.model(x), t)
            loss.backward()
            return loss

    graph = TrainGraph()
    for _ in range(3):
        loss = F.mse_loss(eager_model(x), t)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(graph(x, t).numpy(), loss.numpy(), rtol=1e-5)
    assert "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)" in repr(graph)
