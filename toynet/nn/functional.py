"""``toynet.nn.functional``: the layers as functions (``F.linear``, ``F.relu``, ``F.mse_loss``...)."""

from __future__ import annotations

from typing import Any

from ..ops import OPS
from ..tensor import Tensor, apply


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` as one op."""
    if bias is None:
        return apply(OPS["linear"], x, weight)
    return apply(OPS["linear"], x, weight, bias)


def relu(x: Tensor, inplace: bool = False) -> Tensor:
    return x.relu()


def relu6(x: Tensor, inplace: bool = False) -> Tensor:
    return x.relu6()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return x.softmax(dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return x.log_softmax(dim)


def mse_loss(prediction: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return apply(OPS["mse_loss"], prediction, target, reduction=reduction)


def cross_entropy(logits: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100) -> Any:
    raise NotImplementedError("cross_entropy")
