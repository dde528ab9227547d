"""``toynet.nn.functional``: the layers as functions (``F.linear``, ``F.relu``, ``F.mse_loss``...)."""

from __future__ import annotations

from ..ops import OPS, ShapeError
from ..dynamic.tensor import Tensor, apply
# The image layers live in functional_vision.py; F gives them all (F.conv2d, F.dropout...).
from .functional_vision import (  # noqa: F401
    _pair, adaptive_avg_pool2d, avg_pool2d, batch_norm, conv2d, dropout, instance_norm, interpolate, max_pool2d, pad,
)
from .functional_transformer import embedding, gelu, layer_norm, scaled_dot_product_attention  # noqa: F401,E402


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """A fully connected layer: ``x @ weight.t() + bias``, with ``weight`` of shape (out, in)."""
    if weight.ndim != 2 or not x.ndim or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: input of shape {tuple(x.shape)} does not fit weight of shape {tuple(weight.shape)}: "
                         f"the input's last dimension must equal in_features = "
                         f"{weight.shape[1] if weight.ndim == 2 else '?'}")
    y = x @ weight.t()
    return y if bias is None else y + bias


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
    """The squared error ``(prediction - target)^2``, averaged (``"mean"``), summed (``"sum"``) or kept per
    element (``"none"``). The shapes must match: a (N, 1) prediction against a (N,) target would broadcast
    to (N, N) without a word."""
    if reduction not in ("mean", "sum", "none") or prediction.shape != target.shape:
        raise ShapeError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
                         if reduction not in ("mean", "sum", "none") else
                         f"mse_loss: input shape {tuple(prediction.shape)} and target shape {tuple(target.shape)} "
                         "differ; they must match (reshape or flatten the prediction)")
    squared = (prediction - target).square()
    if reduction == "none":
        return squared
    return squared.sum() if reduction == "sum" else squared.mean()


def cross_entropy(logits: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy of ``logits`` ``(N, C)`` or ``(N, C, d1, ...)`` against int64 class indices
    ``target`` ``(N,)`` or ``(N, d1, ...)``, as one op (a stable log-softmax and a pick). Targets equal to
    ``ignore_index`` are skipped; ``"mean"`` averages over the others; ``label_smoothing`` mixes the target with
    the uniform distribution, as PyTorch. Unbatched ``(C,)`` logits with a 0-d target also work."""
    if not isinstance(target, Tensor):
        target = Tensor.from_data(target, device=logits.device)
    smoothing, attrs = (float(label_smoothing),) if label_smoothing else (), dict(reduction=reduction,
                                                                                   ignore_index=ignore_index)
    if logits.ndim == 1 and target.ndim == 0:  # one sample without a batch dimension
        loss = apply(OPS["cross_entropy"], logits.unsqueeze(0), target.unsqueeze(0), *smoothing, **attrs)
        return loss.squeeze(0) if reduction == "none" else loss
    if logits.ndim == 2 and tuple(target.shape) == (logits.shape[0], 1) and not target.dtype.is_floating_point:
        target = target.reshape(-1)  # one index a row as a column (N, 1), as OneFlow's AMP and checkpointing pages pass
    return apply(OPS["cross_entropy"], logits, target, *smoothing, **attrs)


def one_hot(target: Tensor, num_classes: int = -1) -> Tensor:
    """int64 indicator vectors along a new last dimension; ``num_classes=-1`` means ``target.max() + 1``
    (which reads the data, so pass it explicitly inside an ``nn.Graph``)."""
    if num_classes == -1:
        num_classes = int(target.max().item()) + 1
    if not target.is_lazy and target.numel() and (int(target.min().item()) < 0
                                                   or int(target.max().item()) >= num_classes):
        raise ValueError(f"one_hot: class values must be in [0, {num_classes}), got values from "
                         f"{int(target.min().item())} to {int(target.max().item())}")
    return apply(OPS["one_hot"], target, num_classes=num_classes, dim=-1)
