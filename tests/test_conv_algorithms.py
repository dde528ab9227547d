"""The depthwise algorithms Graph mode chooses among (ChooseKernels sets the ``algorithm`` of channels-last
depthwise convolutions and their gradients): the shifted-rows kernel (toynet.ops.fast.conv_rows) and the matrix
kernel (toynet.ops.fast.conv_matrix) must compute what the taps kernel computes, forward and backward, for
every geometry they accept, and be refused where they cannot compute it."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import TrainGraph, eager_losses
from hypothesis import given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn
from toynet.ops import OPS, ShapeError
from toynet.ops.fast import conv_matrix, conv_nhwc, conv_rows
from toynet.static.passes.fast import kernels as choose

# What this file tests lives on the fast path (TOYNET_FAST=1): every test runs there.
pytestmark = pytest.mark.usefixtures("fast_path")

FUSED, GRAD_INPUT, GRAD_WEIGHT = OPS["conv2d_fused"], OPS["conv2d_nhwc_grad_input"], OPS["conv2d_nhwc_grad_weight"]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


geometry = dict(n=st.integers(1, 5), c=st.integers(1, 9), h=st.integers(1, 9), w=st.integers(1, 9),
                k=st.sampled_from([(1, 1), (3, 3), (5, 5), (3, 1), (1, 3), (2, 2)]), padding=st.integers(0, 2),
                dilation=st.integers(1, 2))


def _fits(h, w, k, padding, dilation):
    return all(size + 2 * padding - dilation * (kk - 1) >= 1 for size, kk in zip((h, w), k))


@settings(max_examples=60, deadline=None)
@given(**geometry, activation=st.sampled_from([None, "relu", "relu6"]), bias=st.booleans())
def test_rows_forward_equals_the_taps_kernel(n, c, h, w, k, padding, dilation, activation, bias):
    if not _fits(h, w, k, padding, dilation):
        return
    x, weight = rand(n, h, w, c) * 4, rand(c, 1, *k, seed=1)
    b = rand(c, seed=2) if bias else None
    pad, dil = (padding, padding), (dilation, dilation)
    out_shape = FUSED._nhwc_out(x.shape, weight.shape, (1, 1), pad, dil)
    expected = conv_nhwc.depthwise_nhwc(np, x, weight, b, activation, (1, 1), pad, dil, np.empty(out_shape, np.float32))
    got = conv_rows.depthwise_rows(np, x, weight, b, activation, pad, dil, np.full(out_shape, np.nan, np.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(**geometry)
def test_rows_input_gradient_equals_the_taps_kernel(n, c, h, w, k, padding, dilation):
    if not _fits(h, w, k, padding, dilation) or not conv_rows.applies((1, 1), (padding,) * 2, (dilation,) * 2, k, True):
        return
    pad, dil = (padding, padding), (dilation, dilation)
    weight = rand(c, 1, *k, seed=1)
    out_shape = FUSED._nhwc_out((n, h, w, c), weight.shape, (1, 1), pad, dil)
    g = rand(*out_shape, seed=3)
    expected = conv_nhwc.depthwise_grad_input_nhwc(np, g, weight, (n, h, w, c), (1, 1), pad, dil)
    got = conv_rows.depthwise_rows_grad_input(np, g, weight, (n, h, w, c), pad, dil)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(**geometry, stride=st.integers(1, 3), activation=st.sampled_from([None, "relu6"]), bias=st.booleans())
def test_the_matrix_kernel_equals_the_taps_kernel_forward_and_backward(n, c, h, w, k, padding, dilation, stride,
                                                                       activation, bias):
    if not _fits(h, w, k, padding, dilation):
        return
    x, weight = rand(n, h, w, c) * 4, rand(c, 1, *k, seed=1)
    b = rand(c, seed=2) if bias else None
    geo = ((stride, stride), (padding, padding), (dilation, dilation))
    out_shape = FUSED._nhwc_out(x.shape, weight.shape, *geo)
    expected = conv_nhwc.depthwise_nhwc(np, x, weight, b, activation, *geo, np.empty(out_shape, np.float32))
    got = conv_matrix.depthwise_matrix(np, x, weight, b, activation, *geo, np.full(out_shape, np.nan, np.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    g = rand(*out_shape, seed=3)
    np.testing.assert_allclose(conv_matrix.depthwise_matrix_grad_input(np, g, weight, x.shape, *geo),
                               conv_nhwc.depthwise_grad_input_nhwc(np, g, weight, x.shape, *geo), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(conv_matrix.depthwise_matrix_grad_weight(np, x, g, weight.shape, *geo),
                               conv_nhwc.depthwise_grad_weight_nhwc(np, x, g, weight.shape, *geo), rtol=1e-4, atol=1e-4)


def test_each_algorithm_is_offered_only_where_it_computes_the_convolution():
    fused = dict(groups=4, channels_last=True, padding=(1, 1), dilation=(1, 1))

    class Meta:   # an input as the compiler knows it: a shape and a dtype
        def __init__(self, *shape):
            self.shape, self.dtype = shape, flow.float32

    assert FUSED.algorithms(Meta(2, 6, 6, 4), Meta(4, 1, 3, 3), stride=(1, 1), **fused) == ["taps", "rows"]
    # stride 2: no rows; a 6x6 image to 3x3 is 9 x 36 matrix entries per channel: small enough for the matrix
    assert FUSED.algorithms(Meta(2, 6, 6, 4), Meta(4, 1, 3, 3), stride=(2, 2), **fused) == ["taps", "matrix"]
    assert FUSED.algorithms(Meta(2, 4, 4, 4), Meta(4, 1, 3, 3), stride=(1, 1), **fused) == ["taps", "rows", "matrix"]
    assert GRAD_WEIGHT.algorithms(Meta(2, 4, 4, 4), Meta(2, 4, 4, 4), weight_shape=(4, 1, 3, 3), padding=(1, 1),
                                  groups=4) == ["taps", "matrix"]      # (the rows kernel has no weight gradient)
    assert FUSED.algorithms(Meta(2, 6, 6, 4), Meta(8, 4, 1, 1), stride=(1, 1), groups=1,
                            channels_last=True, padding=(0, 0), dilation=(1, 1)) == []    # a 1x1 convolution
    # the input gradient's padding d*(k-1) - p would be negative: the rows kernel cannot compute it (and a
    # 6x6 image padded by 3 gives 10x10: 3600 matrix entries, too many)
    assert GRAD_INPUT.algorithms(Meta(2, 8, 8, 4), Meta(4, 1, 3, 3), input_shape=(2, 6, 6, 4), padding=(3, 3),
                                 groups=4) == ["taps"]
    with pytest.raises(ShapeError, match="algorithm 'rows' cannot compute"):
        FUSED.infer(Meta(2, 6, 6, 4), Meta(4, 1, 3, 3), stride=(2, 2), algorithm="rows", **fused)


def _depthwise_net():
    flow.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU6(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


@pytest.mark.parametrize("faster, expected", [
    ("rows", {"conv2d_fused", "conv2d_nhwc_grad_input"}),                              # the stride-1 layer
    ("matrix", {"conv2d_fused", "conv2d_nhwc_grad_input", "conv2d_nhwc_grad_weight"}),  # the strided one
])
def test_graph_mode_takes_the_faster_algorithm_and_trains_as_eager(monkeypatch, faster, expected):
    """With a timer that finds one algorithm faster, the convolutions and gradients it can compute run it,
    the plan and the graph say so, and the steps match Eager mode's."""
    monkeypatch.setattr(choose, "_TIMINGS", {})
    monkeypatch.setattr(choose, "_measure_interleaved",
                        lambda calls: {name: (1e-4 if name == faster else 1e-3) for name in calls})
    x = flow.tensor(rand(4, 3, 8, 8))
    y = flow.tensor(np.array([0, 1, 2, 3]))
    model = _depthwise_net()
    graph = TrainGraph(model, nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=0.1))
    graph.config.enable_pass("ChooseKernels")   # kernel timing is opt-in
    losses = [graph(x, y).item() for _ in range(3)]
    chosen = [n.op.name for n in graph.ir.nodes if n.kind == "op" and n.attrs.get("algorithm") == faster]
    assert sorted(chosen) == sorted(expected)
    assert f"kernel: {faster}, the fastest when compiling" in graph.plan.source
    assert f"algorithm={faster}" in graph.ir.format()
    report = next(r for r in graph.passes if r.name == "ChooseKernels")
    assert any(text.startswith(f"{faster} ") and "(taps " in text for text in report.kernels.values())

    eager_model = _depthwise_net()
    eager = eager_losses(eager_model, nn.CrossEntropyLoss(), flow.optim.SGD(eager_model.parameters(), lr=0.1), x, y, 3)
    np.testing.assert_allclose(losses, eager, rtol=1e-4)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5)
