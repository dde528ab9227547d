"""MobileNetV2 (Sandler et al. 2018, "Inverted Residuals and Linear Bottlenecks"), as torchvision and
flowvision define it, with the same module names so checkpoints and ``print(graph)`` lines match.

The network is a stack of *inverted residual* blocks. Where a classic residual block squeezes channels,
works, then widens again, an inverted one does the opposite:

1. **expand**: a 1x1 convolution widens ``c_in`` channels to ``t * c_in`` (``t`` the expand ratio);
2. **depthwise**: a 3x3 convolution with ``groups = t * c_in`` filters each channel on its own
   (9 multiplications per pixel per channel instead of ``9 * channels``: this is where MobileNet saves);
3. **project**: a 1x1 convolution narrows back to ``c_out`` channels, with *no* activation after it
   (a "linear bottleneck": ReLU on few channels would destroy information);
4. **residual**: when the block keeps the resolution (stride 1) and ``c_in == c_out``, its input is
   added to its output.

Each convolution but the projection is followed by BatchNorm and ReLU6 (``min(max(x, 0), 6)``), packed as
a :class:`ConvBNActivation` (a ``Sequential`` of conv, BatchNorm2d, ReLU6; names ``0``, ``1``, ``2``).

Layout of ``MobileNetV2()`` (names as ``print(model)`` and state dicts show them)::

    features.0        ConvBNActivation(3 -> 32, stride 2)
    features.1..17    InvertedResidual blocks; block k has .conv = Sequential(
                          [0: ConvBNActivation 1x1 expand,]   (absent when t == 1)
                          ConvBNActivation 3x3 depthwise, Conv2d 1x1 project, BatchNorm2d)
    features.18       ConvBNActivation(320 -> 1280, 1x1)
    adaptive_avg_pool2d   AdaptiveAvgPool2d((1, 1)), then flatten
    classifier        Sequential(Dropout(0.2), Linear(1280, num_classes))

>>> from toynet.vision.models import mobilenet_v2
>>> model = mobilenet_v2(num_classes=10)
>>> sum(p.numel() for p in model.parameters())
2236682
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import nn
from ...dynamic.tensor import Tensor

__all__ = ["ConvBNActivation", "ConvBNReLU", "InvertedResidual", "MobileNetV2", "mobilenet_v2"]

#: The paper's Table 2, one row per stage: expand ratio t, output channels c, repeats n, first stride s.
DEFAULT_SETTING = [
    [1, 16, 1, 1],
    [6, 24, 2, 2],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


def make_divisible(value: float, divisor: int, min_value: int | None = None) -> int:
    """Round a channel count to the nearest multiple of ``divisor`` (at least ``min_value``), but never
    more than 10% below ``value``. Hardware likes channel counts in multiples of 8; ``width_mult``
    would otherwise give counts such as 0.75 * 24 = 18."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNActivation(nn.Sequential):
    """Conv2d (no bias: the BatchNorm after it has one) -> BatchNorm2d -> ReLU6, with "same" padding."""

    def __init__(self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1, groups: int = 1,
                 norm_layer: Callable[..., nn.Module] | None = None,
                 activation_layer: Callable[..., nn.Module] | None = None, dilation: int = 1):
        padding = (kernel_size - 1) // 2 * dilation
        norm_layer = norm_layer or nn.BatchNorm2d
        activation_layer = activation_layer or nn.ReLU6
        super().__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, dilation=dilation, groups=groups,
                      bias=False),
            norm_layer(out_planes),
            activation_layer(inplace=True),
        )
        self.out_channels = out_planes


ConvBNReLU = ConvBNActivation  # the older name, kept by torchvision and flowvision


class InvertedResidual(nn.Module):
    """expand (1x1) -> depthwise (3x3) -> linear projection (1x1), plus the input when shapes allow."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int,
                 norm_layer: Callable[..., nn.Module] | None = None):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"InvertedResidual: stride must be 1 or 2, got {stride}")
        norm_layer = norm_layer or nn.BatchNorm2d
        self.stride = stride
        hidden = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNActivation(inp, hidden, kernel_size=1, norm_layer=norm_layer))
        layers += [
            ConvBNActivation(hidden, hidden, stride=stride, groups=hidden, norm_layer=norm_layer),
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            norm_layer(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: Tensor) -> Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 for ``num_classes`` classes. ``width_mult`` scales every layer's channels;
    ``inverted_residual_setting`` replaces the table of stages (rows ``[t, c, n, s]``);
    ``round_nearest`` is the multiple channel counts are rounded to (1 turns rounding off)."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0,
                 inverted_residual_setting: list[list[int]] | None = None, round_nearest: int = 8,
                 block: Callable[..., nn.Module] | None = None,
                 norm_layer: Callable[..., nn.Module] | None = None):
        super().__init__()
        block = block or InvertedResidual
        norm_layer = norm_layer or nn.BatchNorm2d
        setting = DEFAULT_SETTING if inverted_residual_setting is None else inverted_residual_setting
        if len(setting) == 0 or any(len(row) != 4 for row in setting):
            raise ValueError("inverted_residual_setting must be a non-empty list of [t, c, n, s] rows "
                             f"(expand ratio, channels, repeats, stride), got {setting}")

        channels = make_divisible(32 * width_mult, round_nearest)
        self.last_channel = make_divisible(1280 * max(1.0, width_mult), round_nearest)
        layers: list[nn.Module] = [ConvBNActivation(3, channels, stride=2, norm_layer=norm_layer)]
        for t, c, n, s in setting:
            out_channels = make_divisible(c * width_mult, round_nearest)
            for i in range(n):  # only the first block of a stage changes resolution
                layers.append(block(channels, out_channels, s if i == 0 else 1, expand_ratio=t,
                                    norm_layer=norm_layer))
                channels = out_channels
        layers.append(ConvBNActivation(channels, self.last_channel, kernel_size=1, norm_layer=norm_layer))
        self.features = nn.Sequential(*layers)
        self.adaptive_avg_pool2d = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.last_channel, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        """torchvision's choice: He-normal convolutions (fan_out: the variance of the gradients flowing
        back is preserved), BatchNorm as the identity, and a near-zero classifier so the first
        predictions are almost uniform (the first loss is close to ln(num_classes))."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)
        x = self.adaptive_avg_pool2d(x)  # (N, C, 1, 1) whatever the image size
        x = x.flatten(1)                 # (N, C); not squeeze(), which would also drop a batch of 1
        return self.classifier(x)


def mobilenet_v2(pretrained: bool = False, progress: bool = True, **kwargs: Any) -> MobileNetV2:
    """Build a :class:`MobileNetV2` (keyword arguments go to its constructor: ``num_classes``,
    ``width_mult``, ``inverted_residual_setting``, ``round_nearest``, ``block``, ``norm_layer``).

    ``pretrained=True`` is refused: toynet downloads nothing. To start from trained weights, load a
    state dict you have on disk with ``model.load_state_dict(toynet.load(path))``.
    ``progress`` is accepted for compatibility and unused.
    """
    if pretrained:
        raise RuntimeError("mobilenet_v2(pretrained=True): toynet never downloads weights (this machine may have "
                           "no internet). Build the model with pretrained=False and, if you have trained weights "
                           "saved with toynet.save, load them with model.load_state_dict(toynet.load(path)).")
    return MobileNetV2(**kwargs)
