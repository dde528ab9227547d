"""``toynet.nn.functional``: the layers as functions (``F.linear``, ``F.relu``, ``F.mse_loss``...)."""

from __future__ import annotations

from typing import Any

from ..autograd import no_grad
from ..ops import OPS
from ..tensor import Tensor, apply, ones, zeros


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


def cross_entropy(logits: Tensor, target: Tensor, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Softmax cross-entropy of ``logits`` ``(N, C)`` or ``(N, C, d1, ...)`` against int64 class indices
    ``target`` ``(N,)`` or ``(N, d1, ...)``, as one op (a stable log-softmax and a pick). Targets equal to
    ``ignore_index`` are skipped; ``"mean"`` averages over the others. Unbatched ``(C,)`` logits with a
    0-d target also work."""
    if not isinstance(target, Tensor):
        target = Tensor(target, device=logits.device)
    if logits.ndim == 1 and target.ndim == 0:  # one sample without a batch dimension
        loss = apply(OPS["cross_entropy"], logits.unsqueeze(0), target.unsqueeze(0),
                     reduction=reduction, ignore_index=ignore_index)
        return loss.squeeze(0) if reduction == "none" else loss
    return apply(OPS["cross_entropy"], logits, target, reduction=reduction, ignore_index=ignore_index)


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
    with no_grad():  # batch_norm's vjp accounts for the statistics' dependence on x
        stats = apply(OPS["batch_norm_stats"], x)
        mean, var = stats[0], stats[1]
    y = apply(OPS["batch_norm"], x, mean, var, *affine, eps=float(eps), training=True)
    if running_mean is not None and running_var is not None:
        with no_grad():
            running_mean.copy_(running_mean * (1 - momentum) + mean * momentum)
            running_var.copy_(running_var * (1 - momentum) + var * (momentum * (count / (count - 1))))
    return y
