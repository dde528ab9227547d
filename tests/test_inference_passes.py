"""The inference passes (issue 11): FoldBatchNorm folds eval-mode BatchNorm and the activation into the
convolution, ChannelsLast runs 1x1/depthwise convolutions in NHWC. They must change only speed: the
compiled graph agrees with Eager mode, also after the statistics change, and leaves training alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn
from toynet.ops import OPS
from toynet.ops.fast.conv_fused import nchw, nhwc
from toynet.vision.models import mobilenet_v2

# What this file tests lives on the fast path (TOYNET_FAST=1): every test runs there.
pytestmark = pytest.mark.usefixtures("fast_path")


class Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def trained_statistics(model, shape, steps=2):
    """Running statistics that are not the initial 0 and 1 (else folding BatchNorm changes nothing)."""
    model.train()
    with flow.no_grad():
        for k in range(steps):
            model(flow.randn(*shape) * (k + 1) + k)
    return model.eval()


def eager_eval(model, x):
    with flow.no_grad():
        return model(x).numpy()


# ------------------------------------------------------------------------------------- the fused op


def reference(x, w, b, norm, eps, activation, stride, padding, groups):
    """conv2d -> batch_norm (eval) -> activation, one Eager op at a time."""
    y = flow.nn.functional.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
    if norm is not None:
        y = flow.nn.functional.batch_norm(y, *norm, training=False, eps=eps)
    if activation == "relu":
        y = flow.relu(y)
    elif activation == "relu6":
        y = flow.nn.functional.relu6(y)
    return y.numpy()


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["pointwise", "depthwise", "dense"]), stride=st.sampled_from([1, 2]),
       bias=st.booleans(), norm=st.sampled_from([None, "plain", "affine"]),
       activation=st.sampled_from([None, "relu", "relu6"]), size=st.integers(1, 7), channels_last=st.booleans())
def test_conv2d_fused_equals_conv_then_batch_norm_then_activation(kind, stride, bias, norm, activation, size,
                                                                     channels_last):
    if channels_last and kind == "dense":
        channels_last = False
    rng = np.random.default_rng(size)
    c = 4
    out_c, in_per_group, k, groups, padding = {"pointwise": (6, c, 1, 1, 0), "depthwise": (c, 1, 3, c, 1),
                                               "dense": (5, c, 3, 1, 1)}[kind]
    x = rng.standard_normal((3, c, size, size)).astype(np.float32) * 4
    w = rng.standard_normal((out_c, in_per_group, k, k)).astype(np.float32)
    params = [rng.standard_normal(out_c).astype(np.float32)] if bias else []
    norm_arrays = []
    if norm is not None:
        norm_arrays = [rng.standard_normal(out_c).astype(np.float32), rng.random(out_c).astype(np.float32) + 0.1]
        if norm == "affine":
            norm_arrays += [rng.standard_normal(out_c).astype(np.float32) for _ in range(2)]
    attrs = dict(stride=(stride, stride), padding=(padding, padding), dilation=(1, 1), groups=groups, bias=bias,
                 norm=norm, eps=1e-3, activation=activation, channels_last=channels_last)
    op = OPS["conv2d_fused"]
    inputs = [x.transpose(0, 2, 3, 1).copy() if channels_last else x, w, *params, *norm_arrays]
    metas = [flow.tensor(a) for a in inputs]
    shape, dtype = op.infer(*metas, **attrs)
    got = op.forward(np, *inputs, **attrs)
    assert got.shape == shape and got.dtype == np.float32
    # with a buffer to write into, as the compiled plan calls it
    out = np.full(shape, np.nan, dtype=np.float32)
    assert op.forward(np, *inputs, **attrs, out=out) is out
    want = reference(flow.tensor(x), flow.tensor(w), flow.tensor(params[0]) if bias else None,
                     [flow.tensor(a) for a in norm_arrays] or None, 1e-3, activation, stride, padding, groups)
    if channels_last:
        got, out = got.transpose(0, 3, 1, 2), out.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_layout_conversions_are_inverse_copies():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    last = OPS["to_channels_last"].forward(np, x)
    assert last.shape == nhwc(x.shape) and last.flags.c_contiguous
    np.testing.assert_array_equal(last, x.transpose(0, 2, 3, 1))
    back = np.empty(nchw(last.shape), np.float32)
    OPS["to_channels_first"].forward(np, last, out=back)
    np.testing.assert_array_equal(back, x)


def test_conv2d_fused_rejects_what_it_cannot_run():
    x, w = flow.randn(1, 4, 5, 5), flow.randn(4, 4, 3, 3)
    with pytest.raises(ValueError, match="channels_last=True serves 1x1 and depthwise"):
        OPS["conv2d_fused"].infer(flow.randn(1, 5, 5, 4), w, channels_last=True, padding=(1, 1))
    with pytest.raises(ValueError, match="activation must be one of"):
        OPS["conv2d_fused"].infer(x, w, activation="gelu")
    with pytest.raises(ValueError, match="take 2 inputs after the weight"):
        OPS["conv2d_fused"].infer(x, w, flow.randn(4), norm="plain")


# ------------------------------------------------------------------------------------------ the passes


@pytest.fixture(scope="module")
def mobilenet():
    flow.manual_seed(0)
    return trained_statistics(mobilenet_v2(num_classes=10), (4, 3, 32, 32))


def reports_of(graph):
    return {r.name: r for r in graph.passes}


def test_mobilenet_inference_folds_every_batch_norm_and_runs_channels_last(mobilenet):
    x = flow.randn(4, 3, 32, 32)
    graph = Infer(mobilenet)
    np.testing.assert_allclose(graph(x).numpy(), eager_eval(mobilenet, x), rtol=1e-4, atol=1e-5)
    reports = reports_of(graph)
    norms = sum(isinstance(m, nn.BatchNorm2d) for m in mobilenet.modules())
    assert len(reports["FoldBatchNorm"].fused) == norms == 52
    ops = [n.op.name for n in graph.ir.op_nodes]
    assert "batch_norm" not in ops and "relu6" not in ops and ops.count("conv2d_fused") == norms
    assert ops.count("to_channels_last") == 1 and ops.count("to_channels_first") == 1
    assert "ops channels-last" in reports["ChannelsLast"].summary()


@pytest.mark.parametrize("disabled", [("FoldBatchNorm",), ("ChannelsLast",), ("FoldBatchNorm", "ChannelsLast")])
def test_each_inference_pass_can_be_switched_off_and_the_result_stays(mobilenet, disabled):
    x = flow.randn(2, 3, 32, 32)
    graph = Infer(mobilenet)
    for name in disabled:
        graph.config.enable_pass(name, False)
    np.testing.assert_allclose(graph(x).numpy(), eager_eval(mobilenet, x), rtol=1e-4, atol=1e-5)
    ops = {n.op.name for n in graph.ir.op_nodes}
    assert ("batch_norm" in ops) == ("FoldBatchNorm" in disabled)
    assert ("to_channels_last" in ops) == ("ChannelsLast" not in disabled)


def test_folding_is_never_stale_when_statistics_or_weights_change():
    flow.manual_seed(1)
    model = trained_statistics(nn.Sequential(nn.Conv2d(3, 8, 1, bias=True), nn.BatchNorm2d(8), nn.ReLU6()),
                               (2, 3, 6, 6))
    graph, x = Infer(model), flow.randn(2, 3, 6, 6) * 3
    np.testing.assert_allclose(graph(x).numpy(), eager_eval(model, x), rtol=1e-5, atol=1e-6)
    state = {k: v.numpy() * 0.5 + 0.25 for k, v in model.state_dict().items() if v.dtype.is_floating_point}
    model.load_state_dict({**model.state_dict(), **{k: flow.tensor(v) for k, v in state.items()}})
    np.testing.assert_allclose(graph(x).numpy(), eager_eval(model, x), rtol=1e-5, atol=1e-6)
    with flow.no_grad():
        model[1].running_var.mul_(3.0)   # in place, as a user might
        model[0].weight.add_(1.0)
    np.testing.assert_allclose(graph(x).numpy(), eager_eval(model, x), rtol=1e-5, atol=1e-6)


def train_small(disabled=(), steps=3):
    flow.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.BatchNorm2d(8), nn.ReLU6(),
                          nn.Conv2d(8, 8, 3, padding=1, groups=8, stride=2), nn.BatchNorm2d(8), nn.ReLU6(),
                          nn.Flatten(), nn.Linear(8 * 4, 2))
    optimizer = flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)

        def build(self, x):
            loss = (self.model(x) ** 2).mean()
            loss.backward()
            return loss

    graph = Train()
    for name in disabled:
        graph.config.enable_pass(name, False)
    flow.manual_seed(3)
    x = flow.randn(16, 3, 4, 4)
    losses = [graph(x).item() for _ in range(steps)]
    return model, graph, losses


def test_training_graphs_keep_batch_norm_run_channels_last_and_recompute_and_agree():
    model, graph, losses = train_small()
    reports = reports_of(graph)
    assert not reports["FoldBatchNorm"].fused     # training BatchNorm normalises with the batch's statistics
    assert "6 ops channels-last" not in reports["ChannelsLast"].summary()
    assert "ops channels-last" in reports["ChannelsLast"].summary()
    assert "recomputes 2 activations" in reports["RecomputeActivations"].summary()
    ops = [n.op.name for n in graph.ir.op_nodes]
    assert {"batch_norm", "relu6", "conv2d_nhwc_grad_input", "conv2d_nhwc_grad_weight"} <= set(ops)
    reference_model, _, reference = train_small(disabled=("ChannelsLast", "RecomputeActivations"))
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_recomputing_gives_the_very_same_bits():
    model, _, losses = train_small(disabled=("ChannelsLast",))
    reference_model, _, reference = train_small(disabled=("ChannelsLast", "RecomputeActivations"))
    assert losses == reference
    for p, q in zip(model.parameters(), reference_model.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_a_value_the_user_returns_is_not_folded_away():
    flow.manual_seed(3)
    conv, norm = nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)
    trained_statistics(nn.Sequential(conv, norm), (2, 3, 5, 5))

    class Both(nn.Graph):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = conv, norm

        def build(self, x):
            c = self.conv(x)
            return c, flow.relu(self.norm(c))

    x = flow.randn(2, 3, 5, 5)
    c, r = Both()(x)
    with flow.no_grad():
        want_c = conv(x)
        want_r = flow.relu(norm(want_c))
    np.testing.assert_allclose(c.numpy(), want_c.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r.numpy(), want_r.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ the arena


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=40))
def test_the_arena_never_overlaps_two_values_alive_at_once(buffers):
    from toynet.static.passes.fast.memory import _place
    sizes = [64 * n for n, _, _ in buffers]
    spans = [(start, start + length) for _, start, length in buffers]
    offsets, arena = _place(sizes, spans)
    for i in range(len(sizes)):
        assert offsets[i] % 64 == 0 and offsets[i] + sizes[i] <= arena
        for j in range(i):
            if spans[i][0] <= spans[j][1] and spans[j][0] <= spans[i][1]:   # alive at the same time
                assert offsets[i] + sizes[i] <= offsets[j] or offsets[j] + sizes[j] <= offsets[i]
    # Never more than one array each, never less than what is alive at the busiest moment.
    busiest = max(sum(s for s, (a, b) in zip(sizes, spans) if a <= t <= b) for t in range(41))
    assert busiest <= arena <= sum(sizes)
