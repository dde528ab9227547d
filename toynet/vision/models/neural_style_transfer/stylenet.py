"""The image transformation network of fast neural style transfer (Johnson, Alahi and Fei-Fei 2016,
"Perceptual Losses for Real-Time Style Transfer and Super-Resolution"), with flowvision's module and
parameter names, so its checkpoints' keys and ``print(graph)`` lines match.

One forward pass restyles a whole image (no optimisation per image, as the original method needed):

1. three convolutions (9x9, then two 3x3 with stride 2) shrink the image 4x and widen it to 128 channels;
2. five residual blocks transform it at that small size (cheap: 16x fewer pixels);
3. two "upsample then convolve" layers grow it back (nearest upsampling followed by a convolution
   avoids the checkerboard artefacts of transposed convolutions), and a last 9x9 convolution gives
   3 channels, clamped to pixel values 0..255.

Every convolution pads by *reflection* first (zeros would draw a dark frame around each restyled image),
and every normalisation is *instance* normalisation (each image's own statistics: contrast is style).

>>> model = neural_style_transfer()
>>> sum(p.numel() for p in model.parameters())
1679235
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ....nn import Conv2d, InstanceNorm2d, Module, ReflectionPad2d, ReLU, UpsamplingNearest2d
from ....serialization import load
from ....dynamic.tensor import Tensor

__all__ = ["NeuralStyleTransfer", "neural_style_transfer", "pretrained_path"]

#: The styles flowvision publishes weights for.
STYLES = ("sketch", "candy", "mosaic", "rain_princess", "udnie")


class ConvLayer(Module):
    """Reflection padding of ``kernel_size // 2``, then a convolution (so stride 1 keeps the size)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        self.reflection_pad = ReflectionPad2d(kernel_size // 2)
        self.conv2d = Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(Module):
    """conv, instance norm, ReLU, conv, instance norm, plus the block's input (He et al. 2015)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = InstanceNorm2d(channels, affine=True)
        self.relu = ReLU()

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.in1(self.conv1(x)))
        return self.in2(self.conv2(out)) + x


class UpsampleConvLayer(Module):
    """Nearest upsampling by ``upsample`` (if given), then a :class:`ConvLayer`'s padding and convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 upsample: int | None = None):
        super().__init__()
        self.upsample = upsample
        if upsample:
            self.interpolate = UpsamplingNearest2d(scale_factor=upsample)
        self.reflection_pad = ReflectionPad2d(kernel_size // 2)
        self.conv2d = Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: Tensor) -> Tensor:
        if self.upsample:
            x = self.interpolate(x)
        return self.conv2d(self.reflection_pad(x))


class NeuralStyleTransfer(Module):
    """The transformation network: (N, 3, H, W) images in, (N, 3, H, W) restyled images in 0..255 out
    (H and W multiples of 4, so the two halvings and two doublings give the size back)."""

    def __init__(self):
        super().__init__()
        self.conv1 = ConvLayer(3, 32, kernel_size=9, stride=1)
        self.in1 = InstanceNorm2d(32, affine=True)
        self.conv2 = ConvLayer(32, 64, kernel_size=3, stride=2)
        self.in2 = InstanceNorm2d(64, affine=True)
        self.conv3 = ConvLayer(64, 128, kernel_size=3, stride=2)
        self.in3 = InstanceNorm2d(128, affine=True)
        self.res1 = ResidualBlock(128)
        self.res2 = ResidualBlock(128)
        self.res3 = ResidualBlock(128)
        self.res4 = ResidualBlock(128)
        self.res5 = ResidualBlock(128)
        self.deconv1 = UpsampleConvLayer(128, 64, kernel_size=3, stride=1, upsample=2)
        self.in4 = InstanceNorm2d(64, affine=True)
        self.deconv2 = UpsampleConvLayer(64, 32, kernel_size=3, stride=1, upsample=2)
        self.in5 = InstanceNorm2d(32, affine=True)
        self.deconv3 = ConvLayer(32, 3, kernel_size=9, stride=1)
        self.relu = ReLU()

    def forward(self, x: Tensor) -> Tensor:
        y = self.relu(self.in1(self.conv1(x)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        for block in (self.res1, self.res2, self.res3, self.res4, self.res5):
            y = block(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y).clamp(0, 255)


def pretrained_path(style_model: str = "sketch") -> Path:
    """Where ``pretrained=True`` looks for a style's weights: ``$TOYNET_HOME/models/neural_style_transfer/
    <style>`` (``TOYNET_HOME`` defaults to ``~/.toynet``), a state dict saved with ``toynet.save``."""
    home = Path(os.environ.get("TOYNET_HOME", "~/.toynet")).expanduser()
    return home / "models" / "neural_style_transfer" / style_model


def neural_style_transfer(pretrained: bool = False, progress: bool = True, style_model: str = "sketch",
                          **kwargs: Any) -> NeuralStyleTransfer:
    """Build the style-transfer network (:class:`NeuralStyleTransfer`), randomly initialised.

    ``pretrained=True`` loads the weights of ``style_model`` (one of sketch, candy, mosaic, rain_princess,
    udnie) from a local directory, :func:`pretrained_path`: ``~/.toynet/models/neural_style_transfer/<style>``
    unless ``TOYNET_HOME`` says otherwise. toynet downloads nothing; put a state dict there with
    ``toynet.save(model.state_dict(), path)`` (e.g. one converted from PyTorch, see tests/test_torch2flow.py).
    ``progress`` is accepted for compatibility and unused.
    """
    if style_model not in STYLES:
        raise ValueError(f"neural_style_transfer: style_model must be one of {', '.join(STYLES)}, got {style_model!r}")
    model = NeuralStyleTransfer(**kwargs)
    if pretrained:
        path = pretrained_path(style_model)
        if not path.exists():
            raise FileNotFoundError(
                f"neural_style_transfer(pretrained=True): no weights for style {style_model!r} at {path}. toynet "
                f"never downloads weights: save a state dict there with toynet.save(model.state_dict(), '{path}') "
                f"(or set TOYNET_HOME to the folder holding models/), or use pretrained=False.")
        model.load_state_dict(load(path, kind="state_dict"))
    return model
