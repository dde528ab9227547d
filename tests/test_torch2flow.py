"""Converting a PyTorch model: build the same network in toynet, copy PyTorch's ``state_dict`` over with
``load_state_dict``, and the two give the same outputs (the pattern of OneFlow's torch2flow page).

* a small classifier, its state dict saved and loaded by PyTorch, through NumPy (``.detach().cpu().numpy()``)
  or handed over as PyTorch tensors directly;
* the style-transfer network, written here in PyTorch with flowvision's module names: every key
  matches, and Eager and Graph mode outputs agree with PyTorch's; the converted weights then serve as the
  local file ``neural_style_transfer(pretrained=True)`` reads;
* a state dict of another architecture is refused with the keys and shapes that differ.
"""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.vision.models.neural_style_transfer.stylenet import neural_style_transfer, pretrained_path

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def _numpy_bridge(state: dict) -> dict:
    return {key: value.detach().cpu().numpy() for key, value in state.items()}


def test_small_model_through_a_saved_file_and_numpy(tmp_path):
    model_torch = torch.nn.Sequential(torch.nn.Linear(128, 2), torch.nn.Softmax(dim=1))
    torch.save(model_torch.state_dict(), tmp_path / "model.pth")
    model_flow = nn.Sequential(nn.Linear(128, 2), nn.Softmax(dim=1))
    result = model_flow.load_state_dict(_numpy_bridge(torch.load(tmp_path / "model.pth")))
    assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
    x = RNG.standard_normal((5, 128)).astype(np.float32)
    with torch.no_grad():
        expected = model_torch(torch.tensor(x)).numpy()
    np.testing.assert_allclose(model_flow(flow.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-7)


def test_pytorch_tensors_are_accepted_as_they_are():
    model_torch = torch.nn.Linear(3, 4)
    model_flow = nn.Linear(3, 4)
    model_flow.load_state_dict(model_torch.state_dict())
    np.testing.assert_array_equal(model_flow.weight.numpy(), model_torch.weight.detach().numpy())
    model_flow.load_state_dict(dict(model_torch.named_parameters()))  # parameters that require grad, too
    np.testing.assert_array_equal(model_flow.bias.numpy(), model_torch.bias.detach().numpy())
    assert model_flow.weight.dtype is flow.float32 and model_flow.weight.requires_grad


class TorchConvLayer(torch.nn.Module):
    def __init__(self, cin, cout, kernel, stride):
        super().__init__()
        self.reflection_pad = torch.nn.ReflectionPad2d(kernel // 2)
        self.conv2d = torch.nn.Conv2d(cin, cout, kernel, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class TorchResidual(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1, self.in1 = TorchConvLayer(channels, channels, 3, 1), torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2, self.in2 = TorchConvLayer(channels, channels, 3, 1), torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return self.in2(self.conv2(self.relu(self.in1(self.conv1(x))))) + x


class TorchUpsampleConv(TorchConvLayer):
    def __init__(self, cin, cout, kernel, stride, upsample):
        super().__init__(cin, cout, kernel, stride)
        self.interpolate = torch.nn.UpsamplingNearest2d(scale_factor=upsample)

    def forward(self, x):
        return super().forward(self.interpolate(x))


class TorchStyleNet(torch.nn.Module):
    """The same network in PyTorch, module for module."""

    def __init__(self):
        super().__init__()
        norm = lambda c: torch.nn.InstanceNorm2d(c, affine=True)  # noqa: E731
        self.conv1, self.in1 = TorchConvLayer(3, 32, 9, 1), norm(32)
        self.conv2, self.in2 = TorchConvLayer(32, 64, 3, 2), norm(64)
        self.conv3, self.in3 = TorchConvLayer(64, 128, 3, 2), norm(128)
        for k in range(1, 6):
            setattr(self, f"res{k}", TorchResidual(128))
        self.deconv1, self.in4 = TorchUpsampleConv(128, 64, 3, 1, 2), norm(64)
        self.deconv2, self.in5 = TorchUpsampleConv(64, 32, 3, 1, 2), norm(32)
        self.deconv3 = TorchConvLayer(32, 3, 9, 1)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        y = self.relu(self.in1(self.conv1(x)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        for k in range(1, 6):
            y = getattr(self, f"res{k}")(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return torch.clamp(self.deconv3(y), 0, 255)


def test_style_transfer_network_converts_and_agrees(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model_torch = TorchStyleNet().eval()
    with torch.no_grad():  # trained-looking affine parameters, so the check does not rest on ones and zeros
        for name, p in model_torch.named_parameters():
            if ".in" in name or name.startswith("in"):
                p.add_(torch.randn_like(p) * 0.3)
    model_flow = neural_style_transfer(pretrained=False)
    assert list(model_flow.state_dict()) == list(model_torch.state_dict())
    model_flow.load_state_dict(_numpy_bridge(model_torch.state_dict()))
    model_flow.eval()
    image = (RNG.random((1, 3, 32, 32)) * 255).astype(np.float32)
    with torch.no_grad():
        expected = model_torch(torch.tensor(image)).numpy()
    assert expected.max() > 0, "an all-clamped output would compare nothing"
    np.testing.assert_allclose(model_flow(flow.tensor(image)).numpy(), expected, rtol=1e-3, atol=2e-2)

    class Inference(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model_flow

        def build(self, x):
            return self.model(x)

    np.testing.assert_allclose(Inference()(flow.tensor(image)).numpy(), expected, rtol=1e-3, atol=2e-2)
    # The converted weights, saved where pretrained=True looks, are what it loads.
    monkeypatch.setenv("TOYNET_HOME", str(tmp_path))
    flow.save(model_flow.state_dict(), pretrained_path("udnie"))
    loaded = neural_style_transfer(pretrained=True, style_model="udnie").eval()
    np.testing.assert_allclose(loaded(flow.tensor(image)).numpy(), expected, rtol=1e-3, atol=2e-2)


def test_another_architecture_is_refused_with_what_differs():
    model_flow = nn.Sequential(nn.Linear(128, 2), nn.Softmax(dim=1))
    other = torch.nn.Sequential(torch.nn.Linear(64, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
    with pytest.raises(RuntimeError) as error:
        model_flow.load_state_dict(_numpy_bridge(other.state_dict()))
    message = str(error.value)
    assert "0.weight" in message and "(2, 64)" in message and "(2, 128)" in message
    assert "2.weight" in message
