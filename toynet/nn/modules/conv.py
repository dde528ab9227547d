"""``Conv2d``: a learnable 2-d convolution (weights, optional bias) around ``F.conv2d``."""

from __future__ import annotations

import math
from typing import Any

from ... import backend
from ...dynamic.creation import zeros
from ...dynamic.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter


class Conv2d(Module):
    """Convolve (N, in_channels, H, W) images with ``out_channels`` learnt ``kernel_size`` filters.

    ``weight`` has shape (out_channels, in_channels // groups, kh, kw) and ``bias`` (out_channels,).
    Initialised as in PyTorch: weight by ``kaiming_uniform_(a=sqrt(5))``, which is
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels // groups * kh * kw, and the bias
    from the same range.

    >>> conv = Conv2d(3, 32, kernel_size=3, stride=2, padding=1, bias=False)
    >>> conv
    Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device: Any = None, dtype: Any = None):
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) must both "
                             f"be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"Conv2d: padding_mode {padding_mode!r} is not supported; toynet pads with zeros "
                             f"(padding_mode='zeros')")
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise ValueError(f"Conv2d: padding must be a number, a pair, 'same' or 'valid', got {padding!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = F._pair(kernel_size, "kernel_size")
        self.stride = F._pair(stride, "stride")
        self.padding = padding if isinstance(padding, str) else F._pair(padding, "padding")
        self.dilation = F._pair(dilation, "dilation")
        self.groups = groups
        self.padding_mode = padding_mode
        dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
        self.weight = Parameter(zeros(out_channels, in_channels // groups, *self.kernel_size,
                                      dtype=dtype, device=device))
        self.bias = Parameter(zeros(out_channels, dtype=dtype, device=device)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init.calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        # PyTorch's format: always the channels, kernel size and stride; the rest only when not default.
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s
