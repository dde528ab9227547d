"""The image layers as functions: dropout, batch normalisation, convolution, pooling, and the padding,
instance norm and resizing of the style-transfer network. ``toynet.nn.functional`` gives them all
(``F.conv2d``...); they live here so that the functions of a plain MLP (:mod:`toynet.nn.functional`) read
on one screen."""

from __future__ import annotations

import operator
from typing import Any

from ..mode import call_with_grad_mode
from ..ops import OPS
from ..dynamic.creation import ones, zeros
from ..dynamic.tensor import Tensor, apply


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (training only).

    ``x * mask`` with a mask from the random op ``dropout_mask``, so the gradient is ``g * mask``.
    ``inplace`` is accepted for PyTorch compatibility; toynet never overwrites its input.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    return x * apply(OPS["dropout_mask"], x, p=float(p))


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: Any = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dimension 1) of ``x`` ``(N, C, *spatial)``, then scale and shift it.

    ``training=True`` uses the batch's own mean and (biased) variance and, when running statistics are
    given, updates them in place: ``running = (1 - momentum) * running + momentum * batch`` with the
    unbiased batch variance (as PyTorch). The update goes through ``Tensor.copy_``, which Graph mode
    records as a state update. ``training=False`` normalises with the running statistics.
    ``momentum`` may be a 0-d tensor (BatchNorm's cumulative average when ``momentum=None``).
    """
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of shape (N, C) or (N, C, *spatial), got shape "
                         f"{tuple(x.shape)}")
    channels = x.shape[1]
    affine = () if weight is None and bias is None else (
        weight if weight is not None else ones(channels, dtype=x.dtype, device=x.device),
        bias if bias is not None else zeros(channels, dtype=x.dtype, device=x.device))
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: training=False normalises with the running statistics, but "
                             "running_mean or running_var is None; pass them, or use training=True")
        return apply(OPS["batch_norm"], x, running_mean, running_var, *affine, eps=float(eps), training=False)
    count = x.numel() // channels
    if count < 2:
        raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input of "
                         f"shape {tuple(x.shape)}")
    # Without grad: batch_norm's vjp accounts for the statistics' dependence on x.
    stats = call_with_grad_mode(False, apply, OPS["batch_norm_stats"], x)
    mean, var = stats[0], stats[1]
    y = apply(OPS["batch_norm"], x, mean, var, *affine, eps=float(eps), training=True)
    if running_mean is not None and running_var is not None:
        call_with_grad_mode(False, _update_running_stats, running_mean, running_var, mean, var, momentum, count)
    return y


def _update_running_stats(running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor,
                          momentum: float, count: int) -> None:
    """Move the running statistics towards this batch's (the variance unbiased: count / (count - 1))."""
    running_mean.copy_(running_mean * (1 - momentum) + mean * momentum)
    running_var.copy_(running_var * (1 - momentum) + var * (momentum * (count / (count - 1))))


# ------------------------------------------------------------------------- convolution and pooling


def _pair(value: Any, name: str) -> tuple[int, int]:
    """``3`` -> ``(3, 3)``; ``(3, 1)`` stays. PyTorch accepts both for every 2-d size argument."""
    def integer(v: Any) -> int:
        if isinstance(v, bool):
            raise TypeError
        return operator.index(v)  # ints and NumPy integers; floats are refused

    try:
        if isinstance(value, (tuple, list)):
            if len(value) == 2:
                return (integer(value[0]), integer(value[1]))
        else:
            return (integer(value), integer(value))
    except TypeError:
        pass
    raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-d convolution of ``input`` (N, C, H, W) with ``weight`` (O, C/groups, kh, kw), plus ``bias`` (O,).

    ``padding`` is an int, a pair, ``"valid"`` (none) or ``"same"`` (output as large as the input;
    stride 1 only; when the kernel needs an odd total padding, the extra row/column goes at the end,
    as in PyTorch).
    """
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    crop = (0, 0)
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        if stride != (1, 1):
            raise ValueError("conv2d: padding='same' needs stride 1; give the padding as numbers instead")
        totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
        padding = tuple((t + 1) // 2 for t in totals)
        crop = tuple(t % 2 for t in totals)  # odd total: pad one more in front, then drop that output
    else:
        padding = _pair(padding, "padding")
    inputs = (input, weight) if bias is None else (input, weight, bias)
    y = apply(OPS["conv2d"], *inputs, stride=stride, padding=padding, dilation=dilation, groups=int(groups))
    return y[:, :, crop[0]:, crop[1]:] if crop != (0, 0) else y


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """The maximum of each ``kernel_size`` window (``stride`` defaults to ``kernel_size``)."""
    if return_indices:
        raise NotImplementedError("max_pool2d: return_indices=True is not supported in toynet; the "
                                  "gradient recomputes where each maximum is, so no indices are needed")
    kernel_size = _pair(kernel_size, "kernel_size")
    return apply(OPS["max_pool2d"], input, kernel_size=kernel_size,
                 stride=kernel_size if stride is None else _pair(stride, "stride"),
                 padding=_pair(padding, "padding"), dilation=_pair(dilation, "dilation"), ceil_mode=bool(ceil_mode))


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """The mean of each ``kernel_size`` window (``stride`` defaults to ``kernel_size``)."""
    kernel_size = _pair(kernel_size, "kernel_size")
    return apply(OPS["avg_pool2d"], input, kernel_size=kernel_size,
                 stride=kernel_size if stride is None else _pair(stride, "stride"),
                 padding=_pair(padding, "padding"), ceil_mode=bool(ceil_mode),
                 count_include_pad=bool(count_include_pad),
                 divisor_override=None if divisor_override is None else int(divisor_override))


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average-pool to ``output_size`` (an int, a pair, or a pair with ``None`` = keep that size)."""
    if isinstance(output_size, int):
        output_size = (output_size, output_size)
    if not isinstance(output_size, (tuple, list)) or len(output_size) != 2:
        raise TypeError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got {output_size!r}")
    size = tuple(int(input.shape[-2 + i]) if s is None else int(s) for i, s in enumerate(output_size))
    return apply(OPS["adaptive_avg_pool2d"], input, output_size=size)


# ------------------------------------------------------------------------- the style-transfer network's layers


def pad(input: Tensor, pad: Any, mode: str = "reflect", value: float = 0.0) -> Tensor:
    """Pad the last two axes by ``pad = (left, right, top, bottom)`` (an int pads all four). toynet pads
    by reflection only (``mode="reflect"``); zero padding is part of ``conv2d``'s ``padding``."""
    if mode != "reflect":
        raise NotImplementedError(f"pad: mode={mode!r} is not supported in toynet, only mode='reflect'; for zeros "
                                  "around a convolution's input use conv2d's padding argument")
    sides = (pad,) * 4 if isinstance(pad, int) else tuple(pad)
    if len(sides) != 4:
        raise ValueError(f"pad: give (left, right, top, bottom) for the last two axes, got {pad!r}")
    return apply(OPS["reflection_pad2d"], input, sides=tuple(operator.index(p) for p in sides))


def instance_norm(input: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
                  eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) plane of (N, C, H, W) on its own; then ``* weight + bias`` per channel."""
    y = apply(OPS["instance_norm"], input, eps=float(eps))
    if weight is not None:
        y = y * weight.reshape(1, -1, 1, 1)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None) -> Tensor:
    """Resize (N, C, H, W) to ``size`` or by ``scale_factor``. toynet resizes by nearest neighbour, by
    whole-number factors (``size`` must then be a multiple of the input's size)."""
    if mode != "nearest":
        raise NotImplementedError(f"interpolate: mode={mode!r} is not supported in toynet, only mode='nearest'")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    h, w = input.shape[-2:]
    if size is not None:
        out_h, out_w = (size, size) if isinstance(size, int) else size
        if out_h % h or out_w % w:
            raise ValueError(f"interpolate: size {(out_h, out_w)} is not a whole multiple of the input's {(h, w)}; "
                             "toynet upsamples by whole-number factors only")
        scale = (out_h // h, out_w // w)
    else:
        factors = (scale_factor, scale_factor) if not isinstance(scale_factor, (tuple, list)) else scale_factor
        if any(float(f) != int(f) for f in factors):
            raise ValueError(f"interpolate: scale_factor {scale_factor!r} must be whole numbers in toynet (e.g. 2)")
        scale = tuple(int(f) for f in factors)
    return apply(OPS["upsample_nearest2d"], input, scale=scale)
