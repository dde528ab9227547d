"""The layers a fast style-transfer network adds to convolutions: ``ReflectionPad2d``, ``InstanceNorm2d``
and nearest upsampling (``UpsamplingNearest2d``, ``Upsample``). The work is done by ``F.pad``,
``F.instance_norm`` and ``F.interpolate``; the ops live in ``toynet/ops/`` (padding, instance_norm,
upsample)."""

from __future__ import annotations

from typing import Any

from ... import backend
from ...dynamic.creation import ones, zeros
from ...dynamic.tensor import Tensor
from .. import functional as F
from ..module import Module
from ..parameter import Parameter


class ReflectionPad2d(Module):
    """Pad the last two axes by mirroring the border: ``padding`` is an int or (left, right, top, bottom).

    >>> ReflectionPad2d(4)
    ReflectionPad2d((4, 4, 4, 4))
    """

    def __init__(self, padding: Any):
        super().__init__()
        self.padding = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
        if len(self.padding) != 4:
            raise ValueError(f"ReflectionPad2d: padding must be an int or (left, right, top, bottom), got {padding!r}")

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, self.padding, mode="reflect")

    def extra_repr(self) -> str:
        return f"{self.padding}"


class InstanceNorm2d(Module):
    """Normalise each image's channels on their own (mean 0, variance 1 per plane), then scale by
    ``weight`` and shift by ``bias`` when ``affine``. Parameter names and defaults as in PyTorch, so
    PyTorch's state dicts load; running statistics (``track_running_stats=True``) are not supported.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__()
        if track_running_stats:
            raise NotImplementedError("InstanceNorm2d: track_running_stats=True is not supported in toynet; each "
                                      "image is normalised with its own statistics (the default, False)")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != self.num_features:
            raise ValueError(f"InstanceNorm2d({self.num_features}) expects an input (N, {self.num_features}, H, W), "
                             f"got shape {tuple(x.shape)}")
        return F.instance_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class Upsample(Module):
    """Resize by ``scale_factor`` or to ``size``; toynet supports ``mode="nearest"`` by whole factors."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def extra_repr(self) -> str:
        shown = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return f"{shown}, mode='{self.mode}'"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour upsampling, e.g. ``UpsamplingNearest2d(scale_factor=2)`` repeats each pixel 2x2."""

    def __init__(self, size: Any = None, scale_factor: Any = None):
        super().__init__(size, scale_factor, mode="nearest")
