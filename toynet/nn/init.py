"""In-place initialisers, with PyTorch's defaults (``kaiming_uniform_(a=sqrt(5))`` for layers).

All draw from toynet's one random generator, so ``toynet.manual_seed`` makes models reproducible.
"""

from __future__ import annotations

import math

from .. import backend
from ..dynamic.tensor import Tensor


def _fill(t: Tensor, array) -> Tensor:
    t.array[...] = array
    return t


def calculate_fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    """fan_in = inputs feeding one output unit; fan_out = outputs fed by one input unit."""
    if t.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 dimensions, got shape {tuple(t.shape)}")
    receptive = 1
    for d in t.shape[2:]:
        receptive *= d
    return t.shape[1] * receptive, t.shape[0] * receptive


def gain(nonlinearity: str, param: float | None = None) -> float:
    if nonlinearity in ("linear", "conv2d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


calculate_gain = gain


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return _fill(t, backend.random_uniform(tuple(t.shape), a, b, t.dtype, t.device))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _fill(t, backend.random_normal(tuple(t.shape), t.dtype, t.device) * std + mean)


def constant_(t: Tensor, value: float) -> Tensor:
    return _fill(t, value)


def zeros_(t: Tensor) -> Tensor:
    return _fill(t, 0)


def ones_(t: Tensor) -> Tensor:
    return _fill(t, 1)


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    fan_in, fan_out = calculate_fan_in_and_fan_out(t)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = math.sqrt(3.0) * gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    fan_in, fan_out = calculate_fan_in_and_fan_out(t)
    fan = fan_in if mode == "fan_in" else fan_out
    return normal_(t, 0.0, gain(nonlinearity, a) / math.sqrt(fan))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    fan_in, fan_out = calculate_fan_in_and_fan_out(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    fan_in, fan_out = calculate_fan_in_and_fan_out(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
