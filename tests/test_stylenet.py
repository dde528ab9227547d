"""The style-transfer network (flowvision's ``neural_style_transfer``) and the three ops it adds.

* ``reflection_pad2d``, ``upsample_nearest2d``, ``instance_norm``: gradients against central finite
  differences in float64 on every device of the fixture (the gradient ops' own vjps too, so second
  order holds), forward and gradients against PyTorch when it is importable, clear errors for bad input,
  and the same results in Graph mode as in Eager mode;
* the network: flowvision's parameter names, output shape and 0..255 range, Graph-mode output equal to
  Eager's, the deployment page's export (``flow.save(graph, dir)`` of the traced inference graph, then
  ``flow.load``) run with ``pretrained=False``, and ``pretrained=True`` reading a local file or naming
  the path it looked for.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import toynet as flow
from toynet.ops import OPS, ShapeError
from toynet.dynamic.tensor import apply
from toynet.vision.models.neural_style_transfer.stylenet import (NeuralStyleTransfer, neural_style_transfer,
                                                               pretrained_path)

F = flow.nn.functional
RNG = np.random.default_rng(0)
PADS = [(1, 1, 1, 1), (2, 0, 1, 3), (0, 3, 2, 0), (3, 3, 3, 3)]


# ------------------------------------------------------------------------------- ops: finite differences


@pytest.mark.parametrize("padding", PADS)
def test_reflection_pad_gradients(padding, device):
    x = RNG.standard_normal((2, 2, 4, 5))
    check_grad(lambda t: F.pad(t, padding, mode="reflect"), x, device=device)
    g = RNG.standard_normal((2, 2, 4 + padding[2] + padding[3], 5 + padding[0] + padding[1]))
    check_grad(lambda t: apply(OPS["reflection_pad2d_grad"], t, sides=padding), g, device=device)


@pytest.mark.parametrize("scale", [(2, 2), (1, 3), (3, 2)])
def test_upsample_gradients(scale, device):
    x = RNG.standard_normal((2, 3, 3, 2))
    check_grad(lambda t: F.interpolate(t, scale_factor=scale), x, device=device)
    g = RNG.standard_normal((2, 3, 3 * scale[0], 2 * scale[1]))
    check_grad(lambda t: apply(OPS["upsample_nearest2d_grad"], t, scale=scale), g, device=device)


def test_instance_norm_gradients(device):
    x = RNG.standard_normal((2, 3, 3, 4))
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    check_grad(lambda t, wt, bt: F.instance_norm(t, wt, bt, eps=1e-5), x, w, b, device=device)
    # Second order: the vjp is written with toynet ops, so its own gradient is checked the same way.
    v = RNG.standard_normal(x.shape)

    def grad_of_weighted_output(t):
        if not t.requires_grad:  # the finite differences call it on plain tensors
            t = flow.tensor(t.numpy(), device=t.device, requires_grad=True)
        y = F.instance_norm(t)
        (gx,) = flow.autograd.grad((y * flow.tensor(v, device=t.device) * y).sum(), [t], create_graph=True)
        return gx

    check_grad(grad_of_weighted_output, x, device=device, atol=1e-4, rtol=1e-3)


# ------------------------------------------------------------------------------- ops: PyTorch


def _compare_with_torch(ours, theirs, *arrays, rtol=1e-5, atol=1e-5):
    torch = pytest.importorskip("torch")
    mine = [flow.tensor(a, requires_grad=True) for a in arrays]
    refs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = ours(*mine), theirs(torch, *refs)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    g = RNG.standard_normal(tuple(y.shape)).astype(arrays[0].dtype)
    (y * flow.tensor(g)).sum().backward()
    ty.backward(torch.tensor(g))
    for m, r in zip(mine, refs):
        np.testing.assert_allclose(m.grad.numpy(), r.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("padding", PADS)
def test_reflection_pad_matches_pytorch(padding):
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    _compare_with_torch(lambda t: flow.nn.ReflectionPad2d(padding)(t),
                        lambda torch, t: torch.nn.ReflectionPad2d(padding)(t), x)


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2), dict(scale_factor=(2, 3)), dict(size=(8, 15))])
def test_upsample_matches_pytorch(kwargs):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    _compare_with_torch(lambda t: F.interpolate(t, mode="nearest", **kwargs),
                        lambda torch, t: torch.nn.functional.interpolate(t, mode="nearest", **kwargs), x)
    _compare_with_torch(lambda t: flow.nn.UpsamplingNearest2d(scale_factor=2)(t),
                        lambda torch, t: torch.nn.UpsamplingNearest2d(scale_factor=2)(t), x)


def test_instance_norm_matches_pytorch():
    x = (RNG.standard_normal((2, 4, 5, 6)) * 3 + 1).astype(np.float32)
    w, b = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    _compare_with_torch(lambda t, wt, bt: F.instance_norm(t, wt, bt),
                        lambda torch, t, wt, bt: torch.nn.functional.instance_norm(t, weight=wt, bias=bt), x, w, b,
                        rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------- ops: errors and Graph mode


def test_bad_input_is_refused_with_the_fix():
    x = flow.randn(1, 2, 3, 4)
    with pytest.raises(ShapeError, match=r"smaller than the padded axes \(H=3, W=4\)"):
        F.pad(x, (4, 0, 0, 0))
    with pytest.raises(ShapeError, match="4-d input"):
        flow.nn.ReflectionPad2d(1)(flow.randn(3, 4))
    with pytest.raises(NotImplementedError, match="only mode='reflect'"):
        F.pad(x, 1, mode="replicate")
    with pytest.raises(ValueError, match="whole numbers"):
        F.interpolate(x, scale_factor=1.5)
    with pytest.raises(ValueError, match="whole multiple"):
        F.interpolate(x, size=(5, 8))
    with pytest.raises(NotImplementedError, match="only mode='nearest'"):
        F.interpolate(x, scale_factor=2, mode="bilinear")
    with pytest.raises(NotImplementedError, match="track_running_stats"):
        flow.nn.InstanceNorm2d(2, track_running_stats=True)
    with pytest.raises(ValueError, match=r"expects an input \(N, 5, H, W\)"):
        flow.nn.InstanceNorm2d(5)(x)
    with pytest.raises(ShapeError, match="more than one value"):
        F.instance_norm(flow.randn(1, 2, 1, 1))


def test_the_ops_give_the_same_results_and_gradients_in_graph_mode():
    block = flow.nn.Sequential(flow.nn.UpsamplingNearest2d(scale_factor=2), flow.nn.ReflectionPad2d(1),
                               flow.nn.Conv2d(2, 3, 3), flow.nn.InstanceNorm2d(3, affine=True))
    optimizer = flow.optim.SGD(block.parameters(), lr=0.1)

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.block = block
            self.add_optimizer(optimizer)

        def build(self, x):
            loss = (self.block(x) ** 2 * flow.tensor([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)).sum()
            loss.backward()
            return loss

    x = flow.randn(2, 2, 3, 4)
    before = {k: v.numpy().copy() for k, v in block.state_dict().items()}
    eager_loss = (block(x) ** 2 * flow.tensor([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)).sum()
    eager_loss.backward()
    expected = {name: before[name] - 0.1 * p.grad.numpy() for name, p in block.named_parameters()}
    loss = Step()(x)
    np.testing.assert_allclose(loss.numpy(), eager_loss.numpy(), rtol=1e-5)
    for name, p in block.named_parameters():
        np.testing.assert_allclose(p.numpy(), expected[name], rtol=1e-4, atol=1e-6, err_msg=name)


# ------------------------------------------------------------------------------- the network


def test_flowvision_names_and_shapes():
    model = neural_style_transfer(pretrained=False, progress=True)
    keys = list(model.state_dict())
    assert keys[:4] == ["conv1.conv2d.weight", "conv1.conv2d.bias", "in1.weight", "in1.bias"]
    assert "res3.conv2.conv2d.weight" in keys and "res5.in2.bias" in keys
    assert "deconv1.conv2d.weight" in keys and keys[-2:] == ["deconv3.conv2d.weight", "deconv3.conv2d.bias"]
    assert len(keys) == 62
    assert sum(p.numel() for p in model.parameters()) == 1679235
    assert isinstance(model.deconv1.interpolate, flow.nn.UpsamplingNearest2d)
    model.eval()
    y = model(flow.rand(1, 3, 16, 20) * 255)
    assert tuple(y.shape) == (1, 3, 16, 20)
    assert 0 <= y.numpy().min() and y.numpy().max() <= 255


def test_export_of_the_traced_inference_graph(tmp_path):
    """The deployment page's example, with pretrained=False and a small image."""
    model = neural_style_transfer(pretrained=False, progress=True)
    model.eval()

    class MyGraph(flow.nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, *input):
            return self.model(*input)

    image = flow.rand(1, 3, 32, 32) * 255
    graph = MyGraph(model)
    out = graph(image)
    np.testing.assert_allclose(out.numpy(), model(image).numpy(), rtol=1e-4, atol=1e-3)
    flow.save(graph, tmp_path / "1" / "model")
    deployed = flow.load(tmp_path / "1" / "model")
    np.testing.assert_allclose(deployed(image).numpy(), out.numpy(), rtol=1e-5, atol=1e-4)


def test_pretrained_reads_a_local_file_or_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYNET_HOME", str(tmp_path))
    where = pretrained_path("candy")
    assert where == tmp_path / "models" / "neural_style_transfer" / "candy"
    with pytest.raises(FileNotFoundError, match=str(where).replace("\\", "\\\\")):
        neural_style_transfer(pretrained=True, style_model="candy")
    trained = NeuralStyleTransfer()
    flow.save(trained.state_dict(), where)
    loaded = neural_style_transfer(pretrained=True, style_model="candy")
    for (name, a), b in zip(trained.state_dict().items(), loaded.state_dict().values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    with pytest.raises(ValueError, match="must be one of sketch, candy"):
        neural_style_transfer(style_model="monet")
