"""The shifted-rows depthwise kernel (toynet.ops.conv_rows) and Graph mode's choice of it (ChooseKernels sets
the ``algorithm`` of channels-last depthwise convolutions): it must compute what the taps kernel computes,
forward and backward to the input, for every geometry it accepts, and refuse the ones it cannot compute."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import TrainGraph
from hypothesis import given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn
from toynet.ops import OPS, ShapeError, conv_nhwc, conv_rows
from toynet.static.passes import kernels as choose

FUSED, GRAD_INPUT = OPS["conv2d_fused"], OPS["conv2d_nhwc_grad_input"]


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


def test_the_rows_kernel_is_offered_only_where_it_computes_the_convolution():
    fused = dict(groups=4, channels_last=True, padding=(1, 1), dilation=(1, 1))

    class Meta:   # an input as the compiler knows it: a shape and a dtype
        def __init__(self, *shape):
            self.shape, self.dtype = shape, flow.float32

    assert FUSED.algorithms(Meta(2, 6, 6, 4), Meta(4, 1, 3, 3), stride=(1, 1), **fused) == ["taps", "rows"]
    assert FUSED.algorithms(Meta(2, 6, 6, 4), Meta(4, 1, 3, 3), stride=(2, 2), **fused) == ["taps"]
    assert FUSED.algorithms(Meta(2, 6, 6, 4), Meta(8, 4, 1, 1), stride=(1, 1), groups=1,
                            channels_last=True, padding=(0, 0), dilation=(1, 1)) == []    # a 1x1 convolution
    # the input gradient's padding d*(k-1) - p would be negative: the rows kernel cannot compute it
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


def test_graph_mode_takes_the_faster_algorithm_and_trains_as_eager(monkeypatch):
    """With a timer that finds the rows kernel faster, the stride-1 depthwise convolution and its input
    gradient run it (the strided one cannot), the plan says so, and the steps match Eager mode's."""
    monkeypatch.setattr(choose, "_TIMINGS", {})
    monkeypatch.setattr(choose, "_measure_interleaved",
                        lambda calls: {name: (1e-4 if "rows" in name else 1e-3) for name in calls})
    x = flow.tensor(rand(4, 3, 8, 8))
    y = flow.tensor(np.array([0, 1, 2, 3]))
    model = _depthwise_net()
    graph = TrainGraph(model, nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=0.1))
    losses = [graph(x, y).item() for _ in range(3)]
    chosen = {n.op.name: n.attrs.get("algorithm") for n in graph.ir.nodes
              if n.kind == "op" and n.attrs.get("algorithm") == "rows"}
    assert chosen == {"conv2d_fused": "rows", "conv2d_nhwc_grad_input": "rows"}
    assert sum(1 for n in graph.ir.nodes if n.kind == "op" and n.attrs.get("algorithm") == "rows") == 2
    assert "kernel: rows, the fastest when compiling" in graph.plan.source
    assert "algorithm=rows" in graph.ir.format()
    report = next(r for r in graph.passes if r.name == "ChooseKernels")
    assert any(text.startswith("rows ") and "(taps " in text for text in report.kernels.values())

    eager_model = _depthwise_net()
    opt = flow.optim.SGD(eager_model.parameters(), lr=0.1)
    eager = []
    for _ in range(3):
        loss = nn.CrossEntropyLoss()(eager_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        eager.append(loss.item())
    np.testing.assert_allclose(losses, eager, rtol=1e-4)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5)
