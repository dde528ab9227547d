"""Batch norm, dropout and cross-entropy: gradients against finite differences (float64, every device of
the fixture), forward values, gradients and running statistics against PyTorch, dropout's statistics,
float32 discipline and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import toynet as flow
from toynet import nn
from toynet.nn import functional as F
from toynet.ops import OPS, ShapeError


def _torch():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


# ====================================================================================== cross-entropy


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradient(device, reduction):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((5, 4))
    target = np.array([0, 3, 1, 1, 2])
    check_grad(lambda a, t: F.cross_entropy(a, t, reduction=reduction), logits, target, device=device)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradient_with_ignore_index(device, reduction):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((6, 3))
    target = np.array([2, -1, 0, -1, 1, 1])
    check_grad(lambda a, t: F.cross_entropy(a, t, reduction=reduction, ignore_index=-1), logits, target,
               device=device)
    x = flow.tensor(logits, device=device, requires_grad=True)
    F.cross_entropy(x, flow.tensor(target, device=device), reduction=reduction, ignore_index=-1).sum().backward()
    grad = x.grad.numpy()
    assert np.all(grad[target == -1] == 0), "ignored targets must get no gradient"
    assert np.all(np.abs(grad[target != -1]).sum(axis=1) > 0)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_gradient_4d(device, reduction):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((2, 3, 2, 3))
    target = rng.integers(0, 3, (2, 2, 3))
    target[0, 1, 2] = 7  # ignored
    check_grad(lambda a, t: F.cross_entropy(a, t, reduction=reduction, ignore_index=7), logits, target,
               device=device)


def test_cross_entropy_second_order(device):
    """The vjp is written with toynet ops, so the gradient can be differentiated again."""
    rng = np.random.default_rng(4)
    target = flow.tensor([1, 0, 2], device=device)

    def grad_of_loss(a):
        a = a if a.requires_grad else a.detach().requires_grad_()
        (g,) = flow.autograd.grad(F.cross_entropy(a, target), a, create_graph=True)
        return g

    check_grad(grad_of_loss, rng.standard_normal((3, 3)), device=device)


def test_cross_entropy_mean_counts_only_kept_targets():
    logits = flow.tensor(np.log(np.array([[1.0, 3.0], [1.0, 1.0], [2.0, 2.0]])))
    target = flow.tensor([1, -100, 0])
    loss = F.cross_entropy(logits, target)
    np.testing.assert_allclose(loss.item(), (-np.log(0.75) - np.log(0.5)) / 2, rtol=1e-12)
    total = F.cross_entropy(logits, target, reduction="sum")
    np.testing.assert_allclose(total.item(), -np.log(0.75) - np.log(0.5), rtol=1e-12)
    per_sample = F.cross_entropy(logits, target, reduction="none").numpy()
    np.testing.assert_allclose(per_sample, [-np.log(0.75), 0.0, -np.log(0.5)], rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(8, 5), (4, 5, 3, 2)])
def test_cross_entropy_matches_torch(shape, reduction):
    torch = _torch()
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(shape).astype(np.float32) * 3
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    target.reshape(-1)[::3] = -100
    ours = flow.tensor(logits, requires_grad=True)
    theirs = torch.tensor(logits, requires_grad=True)
    a = F.cross_entropy(ours, flow.tensor(target), reduction=reduction)
    b = torch.nn.functional.cross_entropy(theirs, torch.tensor(target), reduction=reduction)
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    weights = rng.standard_normal(a.shape).astype(np.float32)
    (a * flow.tensor(weights)).sum().backward()
    (b * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_cross_entropy_module_matches_torch_unbatched_and_module_form():
    torch = _torch()
    logits = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    loss = nn.CrossEntropyLoss()(flow.tensor(logits), flow.tensor(2))
    expected = torch.nn.CrossEntropyLoss()(torch.tensor(logits), torch.tensor(2))
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-6)
    assert loss.shape == ()
    assert repr(nn.CrossEntropyLoss()) == "CrossEntropyLoss()"
    summed = nn.CrossEntropyLoss(reduction="sum", ignore_index=1)
    value = summed(flow.tensor([[1.0, 2.0], [3.0, 0.0]]), flow.tensor([1, 0]))
    np.testing.assert_allclose(value.item(), np.log(np.exp(3) + 1) - 3, rtol=1e-6)


def test_cross_entropy_huge_logits_are_stable():
    torch = _torch()
    logits = np.array([[1e4, 0.0, -1e4], [-1e4, 1e4, 1e4 - 5]], dtype=np.float32)
    target = np.array([2, 2])
    x = flow.tensor(logits, requires_grad=True)
    loss = F.cross_entropy(x, flow.tensor(target))
    loss.backward()
    assert np.isfinite(loss.item()) and np.all(np.isfinite(x.grad.numpy()))
    t = torch.tensor(logits, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(t, torch.tensor(target))
    expected.backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-7)


def test_cross_entropy_keeps_float32(device):
    x = flow.randn(4, 6, device=device, requires_grad=True)
    target = flow.tensor([0, 5, 2, 3], device=device)
    for reduction in ("mean", "sum", "none"):
        loss = F.cross_entropy(x, target, reduction=reduction)
        assert loss.dtype is flow.float32
        loss.sum().backward()
        assert x.grad.dtype is flow.float32
        x.grad = None


def test_cross_entropy_errors(device):
    x = flow.randn(4, 3, device=device)
    with pytest.raises(ShapeError, match="integer class indices"):
        F.cross_entropy(x, flow.tensor([0.0, 1.0, 2.0, 1.0], device=device))
    with pytest.raises(ShapeError, match="Soft"):
        F.cross_entropy(x, flow.rand(4, 3, device=device))
    with pytest.raises(ShapeError, match=r"need a target of shape \(4,\)"):
        F.cross_entropy(x, flow.tensor([0, 1, 2], device=device))
    with pytest.raises(ShapeError, match="reduction"):
        F.cross_entropy(x, flow.tensor([0, 1, 2, 0], device=device), reduction="average")
    with pytest.raises(IndexError, match=r"class index 3, outside \[0, 3\)"):
        F.cross_entropy(x, flow.tensor([0, 1, 3, 0], device=device))
    with pytest.raises(IndexError, match="class index -2"):
        F.cross_entropy(x, flow.tensor([0, -2, 1, 0], device=device))
    with pytest.raises(ValueError, match="reduction"):
        nn.CrossEntropyLoss(reduction="avg")


def test_one_hot(device):
    torch = pytest.importorskip("torch")
    target = np.array([[0, 2], [1, 1]])
    ours = F.one_hot(flow.tensor(target, device=device), 3)
    assert ours.dtype is flow.int64
    np.testing.assert_array_equal(ours.numpy(), torch.nn.functional.one_hot(torch.tensor(target), 3).numpy())
    np.testing.assert_array_equal(F.one_hot(flow.tensor([2, 0])).numpy(), [[0, 0, 1], [1, 0, 0]])
    middle = flow.tensor(OPS["one_hot"].forward(np, np.array([1, -100]), num_classes=2, dim=0,
                                                dtype=flow.float32))
    np.testing.assert_array_equal(middle.numpy(), [[0, 0], [1, 0]])  # out-of-range index: all-zero column
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        F.one_hot(flow.tensor([0, 2]), 2)
    with pytest.raises(ShapeError, match="integer class indices"):
        F.one_hot(flow.tensor([0.0, 1.0]), 2)


# ========================================================================================= batch norm


def _bn_train(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True)


# Kernels take one path for short spatial rows (L < 32) and another for long ones: cover both.
@pytest.mark.parametrize("shape", [(3, 2, 2, 3), (5, 3), (2, 3, 4), (2, 2, 4, 8)])
def test_batch_norm_train_gradient(device, shape):
    rng = np.random.default_rng(6)
    c = shape[1]
    check_grad(_bn_train, rng.standard_normal(shape) * 2 + 1, rng.uniform(0.5, 2, c), rng.standard_normal(c),
               device=device)


def test_batch_norm_train_gradient_without_affine(device):
    rng = np.random.default_rng(7)
    check_grad(lambda x: F.batch_norm(x, None, None, training=True), rng.standard_normal((4, 3, 2)),
               device=device)


def test_batch_norm_eval_gradient(device):
    rng = np.random.default_rng(8)
    mean = flow.tensor(rng.standard_normal(3), device=device)
    var = flow.tensor(rng.uniform(0.5, 2, 3), device=device)
    check_grad(lambda x, w, b: F.batch_norm(x, mean, var, w, b, training=False),
               rng.standard_normal((2, 3, 4, 8)), rng.standard_normal(3), rng.standard_normal(3), device=device)
    check_grad(lambda x: F.batch_norm(x, mean, var, training=False), rng.standard_normal((4, 3)), device=device)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_second_order_and_both_vjp_paths_agree(device, training):
    """Under create_graph=True the vjp takes its differentiable path; its gradient must equal the fused
    path's, and its own gradient must match finite differences."""
    rng = np.random.default_rng(9)
    running = (flow.tensor(rng.standard_normal(3), device=device), flow.tensor(rng.uniform(0.5, 2, 3), device=device))
    weights = flow.tensor(rng.standard_normal((4, 3, 2)), device=device)

    def bn(x, w, b):
        return F.batch_norm(x, *(running if not training else (None, None)), w, b, training=training)

    def gradients(x, w, b, create_graph):
        leaves = [t if t.requires_grad else t.detach().requires_grad_() for t in (x, w, b)]
        return flow.autograd.grad((bn(*leaves) * weights).sum(), leaves, create_graph=create_graph)

    arrays = [rng.standard_normal((4, 3, 2)), rng.uniform(0.5, 2, 3), rng.standard_normal(3)]
    tensors = [flow.tensor(a, device=device) for a in arrays]
    for fused, differentiable in zip(gradients(*tensors, False), gradients(*tensors, True)):
        np.testing.assert_allclose(fused.numpy(), differentiable.numpy(), rtol=1e-10, atol=1e-12)
    check_grad(lambda x, w, b: gradients(x, w, b, True), *arrays, device=device)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_gradients_only_where_asked(training):
    """The fused vjp skips what nobody needs: frozen affine parameters, an input without grad."""
    rng = np.random.default_rng(15)
    x_data, g = rng.standard_normal((4, 3, 5)), flow.tensor(rng.standard_normal((4, 3, 5)))
    reference = nn.BatchNorm1d(3).double().train(training)
    x_ref = flow.tensor(x_data, requires_grad=True)
    (reference(x_ref) * g).sum().backward()
    for frozen in ("weight", "bias", "both", "input"):
        bn = nn.BatchNorm1d(3).double().train(training)
        x = flow.tensor(x_data, requires_grad=frozen != "input")
        for name in ("weight", "bias"):
            getattr(bn, name).requires_grad_(frozen not in (name, "both"))
        (bn(x) * g).sum().backward()
        for tensor, expected in ((x, x_ref), (bn.weight, reference.weight), (bn.bias, reference.bias)):
            if tensor.requires_grad:
                np.testing.assert_allclose(tensor.grad.numpy(), expected.grad.numpy(), rtol=1e-12, atol=1e-12)
            else:
                assert tensor.grad is None


def _torch_bn_pair(torch, cls, torch_cls, channels, **kwargs):
    ours, theirs = cls(channels, **kwargs), torch_cls(channels, **kwargs)
    rng = np.random.default_rng(10)
    if kwargs.get("affine", True):
        w, b = rng.uniform(0.5, 1.5, channels).astype(np.float32), rng.standard_normal(channels).astype(np.float32)
        ours.weight.copy_(flow.tensor(w))
        ours.bias.copy_(flow.tensor(b))
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(w))
            theirs.bias.copy_(torch.tensor(b))
    return ours, theirs


@pytest.mark.parametrize("cls_name, shape, kwargs", [
    ("BatchNorm2d", (8, 4, 5, 5), {}),
    ("BatchNorm2d", (6, 3, 4, 4), {"momentum": None}),
    ("BatchNorm2d", (6, 3, 4, 4), {"affine": False, "momentum": 0.3, "eps": 1e-3}),
    ("BatchNorm1d", (16, 5), {}),
    ("BatchNorm1d", (4, 5, 7), {"track_running_stats": False}),
])
def test_batch_norm_matches_torch_over_several_steps(cls_name, shape, kwargs):
    torch = _torch()
    ours, theirs = _torch_bn_pair(torch, getattr(nn, cls_name), getattr(torch.nn, cls_name), shape[1], **kwargs)
    rng = np.random.default_rng(11)
    for step in range(4):
        x = (rng.standard_normal(shape) * (step + 1) + step).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        a, b = flow.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ya, yb = ours(a), theirs(b)
        np.testing.assert_allclose(ya.numpy(), yb.detach().numpy(), rtol=1e-4, atol=1e-5)
        ya.backward(flow.tensor(g))
        yb.backward(torch.tensor(g))
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)
        if ours.affine:
            np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(ours.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
            ours.zero_grad()
            theirs.zero_grad()
    expected_state = theirs.state_dict()
    our_state = ours.state_dict()
    assert list(our_state) == list(expected_state)
    for key, value in expected_state.items():
        np.testing.assert_allclose(our_state[key].numpy(), value.numpy(), rtol=1e-5, atol=1e-6, err_msg=key)
    ours.eval()
    theirs.eval()
    x = rng.standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        expected = theirs(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours(flow.tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("samples_per_chunk", [1, 2, 7])
@pytest.mark.parametrize("shape", [(7, 3, 6, 4), (7, 3, 2)], ids=["long_rows", "short_rows"])
def test_batch_norm_kernels_chunk_the_batch_without_changing_results(shape, samples_per_chunk, device, monkeypatch):
    """The kernels go through the batch CHUNK_BYTES of rows at a time (7 samples: chunks of 1, of 2 with a
    last one of 1, or all 7); every split gives PyTorch's output and gradients, on every device."""
    torch = _torch()
    from toynet.ops import norm

    row_bytes = int(np.prod(shape[1:])) * 8  # float64
    monkeypatch.setattr(norm, "CHUNK_BYTES", samples_per_chunk * row_bytes)
    rng = np.random.default_rng(14)
    x, g = rng.standard_normal(shape) * 3 + 2, rng.standard_normal(shape)
    w, b = rng.uniform(0.5, 2, shape[1]), rng.standard_normal(shape[1])
    ours = [flow.tensor(a, device=device, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = F.batch_norm(ours[0], None, None, ours[1], ours[2], training=True)
    ty = torch.nn.functional.batch_norm(theirs[0], None, None, theirs[1], theirs[2], training=True)
    y.backward(flow.tensor(g, device=device))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    for mine, ref in zip(ours, theirs):
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_batch_norm_updates_buffers_in_place_and_counts_batches():
    """Running statistics change through copy_ (Graph mode records that as a state update), never by
    rebinding the buffers."""
    bn = nn.BatchNorm2d(3)
    mean, var, count = bn.running_mean, bn.running_var, bn.num_batches_tracked
    arrays = (mean.array, var.array, count.array)
    x = flow.randn(4, 3, 2, 2) * 2 + 5
    bn(x)
    assert bn.running_mean is mean and bn.running_var is var and bn.num_batches_tracked is count
    assert all(now is before for now, before in zip((mean.array, var.array, count.array), arrays))
    batch = x.numpy()
    np.testing.assert_allclose(mean.numpy(), 0.1 * batch.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(var.numpy(), 0.9 + 0.1 * batch.var(axis=(0, 2, 3), ddof=1), rtol=1e-5)
    assert count.item() == 1 and count.dtype is flow.int64
    bn.eval()
    bn(x)
    assert count.item() == 1  # eval mode leaves the statistics alone
    np.testing.assert_allclose(mean.numpy(), 0.1 * batch.mean(axis=(0, 2, 3)), rtol=1e-5)


def test_batch_norm_statistics_are_stable_for_large_means(device):
    """Two-pass variance: E[x^2] - E[x]^2 would lose every digit here in float32."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((64, 2, 16, 16)) * 0.1 + 1000).astype(np.float32)
    stats = flow.tensor(x, device=device)
    got = flow.Tensor.wrap(OPS["batch_norm_stats"].forward(stats.device.xp, stats.array), stats.device).numpy()
    exact = x.astype(np.float64)
    np.testing.assert_allclose(got[0], exact.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(got[1], exact.var(axis=(0, 2, 3)), rtol=1e-3)
    y = F.batch_norm(stats, None, None, training=True).numpy()
    np.testing.assert_allclose(y.std(axis=(0, 2, 3)), 1.0, rtol=1e-3)


def test_batch_norm_keeps_float32(device):
    bn = nn.BatchNorm2d(3).to(device)
    x = flow.randn(4, 3, 2, 2, device=device, requires_grad=True)
    for training in (True, False):
        bn.train(training)
        y = bn(x)
        assert y.dtype is flow.float32
        y.sum().backward()
        assert x.grad.dtype is flow.float32 and bn.weight.grad.dtype is flow.float32
    assert bn.running_mean.dtype is flow.float32 and bn.running_var.dtype is flow.float32
    double = nn.BatchNorm2d(3).double()
    assert double(flow.randn(2, 3, 2, 2, dtype=flow.float64)).dtype is flow.float64
    assert double.num_batches_tracked.dtype is flow.int64


def test_batch_norm_handles_non_contiguous_input():
    torch = _torch()
    x = np.random.default_rng(13).standard_normal((3, 4, 5, 2)).astype(np.float32)
    ours = nn.BatchNorm2d(5)(flow.tensor(x).permute(0, 2, 1, 3))
    theirs = torch.nn.BatchNorm2d(5)(torch.tensor(x).permute(0, 2, 1, 3))
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_batch_norm_modules_repr_and_state():
    assert repr(nn.BatchNorm2d(32)) == "BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)"
    assert repr(nn.BatchNorm1d(8, momentum=None, affine=False)) == \
        "BatchNorm1d(8, eps=1e-05, momentum=None, affine=False, track_running_stats=True)"
    bn = nn.BatchNorm2d(4)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    np.testing.assert_array_equal(bn.weight.numpy(), np.ones(4))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(4))
    plain = nn.BatchNorm2d(4, affine=False, track_running_stats=False)
    assert list(plain.parameters()) == [] and plain.state_dict() == {}
    assert plain.running_mean is None and plain.weight is None
    plain.eval()  # without running statistics, eval mode still uses the batch's
    y = plain(flow.randn(8, 4, 3, 3) * 3 + 2).numpy()
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    bn.running_mean.fill_(3)
    bn.num_batches_tracked.fill_(9)
    bn.reset_running_stats()
    assert bn.running_mean.numpy().tolist() == [0] * 4 and bn.num_batches_tracked.item() == 0


def test_batch_norm_errors():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input"):
        nn.BatchNorm2d(3)(flow.randn(2, 3, 4))
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.BatchNorm1d(3)(flow.randn(2, 3, 4, 4))
    with pytest.raises(ValueError, match="has 4 channels in dimension 1, expected 3"):
        nn.BatchNorm2d(3)(flow.randn(2, 4, 2, 2))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(flow.randn(1, 3))
    with pytest.raises(ShapeError, match=r"weight has shape \(2,\) but the input \(4, 3\) has 3 channels"):
        F.batch_norm(flow.randn(4, 3), None, None, flow.ones(2), flow.zeros(2), training=True)
    with pytest.raises(ValueError, match="running_mean or running_var is None"):
        F.batch_norm(flow.randn(4, 3), None, None, training=False)
    one_sample = nn.BatchNorm1d(3).eval()(flow.randn(1, 3))  # eval mode: one sample is fine
    assert one_sample.shape == (1, 3)


# ============================================================================================ dropout


def test_dropout_statistics_and_scaling(device):
    p = 0.3
    x = flow.full((200, 500), 2.0, device=device)
    y = F.dropout(x, p).numpy()
    dropped = np.mean(y == 0)
    sigma = np.sqrt(p * (1 - p) / y.size)
    assert abs(dropped - p) < 5 * sigma
    np.testing.assert_allclose(np.unique(y[y != 0]), [2.0 / (1 - p)], rtol=1e-6)
    assert abs(y.mean() - 2.0) < 5 * 2.0 / (1 - p) * sigma  # the expected value is unchanged


def test_dropout_gradient_is_the_mask(device):
    x = flow.randn(50, 40, device=device, requires_grad=True)
    layer = nn.Dropout(0.5)
    y = layer(x)
    y.backward(flow.ones_like(y))
    mask = x.grad.numpy()
    assert set(np.unique(mask).tolist()) == {0.0, 2.0}
    np.testing.assert_allclose(y.numpy(), x.numpy() * mask, rtol=1e-6)


def test_dropout_eval_and_edge_probabilities_are_exact():
    x = flow.randn(30, 30, requires_grad=True)
    layer = nn.Dropout(0.2)
    layer.eval()
    assert layer(x) is x
    assert nn.Dropout(0.0)(x) is x
    zeroed = nn.Dropout(1.0)(x)
    assert np.all(zeroed.numpy() == 0)
    zeroed.sum().backward()
    assert np.all(x.grad.numpy() == 0)


def test_dropout_is_reproducible_with_manual_seed(device):
    x = flow.ones(64, 64, device=device)
    flow.manual_seed(123)
    first = F.dropout(x, 0.5).numpy()
    second = F.dropout(x, 0.5).numpy()
    flow.manual_seed(123)
    again = F.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second)
    cpu = F.dropout(flow.ones(64, 64), 0.5)
    flow.manual_seed(123)
    np.testing.assert_array_equal(F.dropout(flow.ones(64, 64), 0.5).numpy(), first)  # same on every device
    assert cpu.shape == (64, 64)


def test_dropout_keeps_dtype_and_is_a_random_op(device):
    for dtype in (flow.float32, flow.float64):
        x = flow.ones(10, 10, dtype=dtype, device=device, requires_grad=True)
        y = F.dropout(x, 0.4)
        assert y.dtype is dtype
        y.sum().backward()
        assert x.grad.dtype is dtype
    assert OPS["dropout_mask"].random and not OPS["batch_norm"].random


def test_dropout_repr_and_errors():
    assert repr(nn.Dropout(p=0.2)) == "Dropout(p=0.2, inplace=False)"
    assert repr(nn.Dropout()) == "Dropout(p=0.5, inplace=False)"
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    with pytest.raises(ValueError, match="between 0 and 1, but got -0.1"):
        F.dropout(flow.ones(3), -0.1)
    with pytest.raises(ShapeError, match="floating-point"):
        F.dropout(flow.tensor([1, 2, 3]), 0.5)


# ========================================================================================= Graph mode


class _SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3, momentum=None)  # cumulative average: a factor computed with tensor ops
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(12, 4)
        self.bn1d = nn.BatchNorm1d(4)

    def forward(self, x):
        x = self.drop(self.bn(x).relu())
        return self.bn1d(self.fc(x.flatten(1)))


def test_graph_mode_traces_batch_norm_dropout_and_cross_entropy(device):
    """A traced training step matches Eager mode exactly: losses, parameters and running statistics
    (updated through copy_, which the tracer records as state updates), and dropout masks drawn at run time."""
    def make():
        flow.manual_seed(0)
        model = _SmallNet().to(device)
        return model, flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    (eager, eager_opt), (traced, traced_opt) = make(), make()

    class TrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = traced
            self.loss_fn = nn.CrossEntropyLoss()
            self.add_optimizer(traced_opt)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    class EvalGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = traced

        def build(self, x):
            return self.model(x)

    train_graph = TrainGraph()
    rng = np.random.default_rng(14)
    for step in range(3):
        x = flow.tensor(rng.standard_normal((8, 3, 2, 2)).astype(np.float32) * 2 + 1, device=device)
        y = flow.tensor(rng.integers(0, 4, 8), device=device)
        flow.manual_seed(100 + step)
        loss = F.cross_entropy(eager(x), y)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        flow.manual_seed(100 + step)
        np.testing.assert_allclose(train_graph(x, y).numpy(), loss.numpy(), rtol=1e-6)
    for (key, a), b in zip(eager.state_dict().items(), traced.state_dict().values()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=key)
    assert traced.bn.num_batches_tracked.item() == 3
    eager.eval()
    traced.eval()
    x = flow.randn(5, 3, 2, 2, device=device)
    np.testing.assert_allclose(EvalGraph()(x).numpy(), eager(x).numpy(), rtol=1e-5, atol=1e-6)
