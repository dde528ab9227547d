"""Loss layers: ``MSELoss`` and ``CrossEntropyLoss``, each with ``reduction`` ("mean", "sum", "none")."""

from __future__ import annotations

from ...dynamic.tensor import Tensor
from .. import functional as F
from ..module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction


class MSELoss(_Loss):
    """Mean (or summed) squared error between prediction and target of the same shape."""

    def forward(self, prediction: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(prediction, target, reduction=self.reduction)


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits ``(N, C)`` (or ``(N, C, ...)``) against class indices ``(N, ...)``."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        if weight is not None or label_smoothing:
            raise NotImplementedError("CrossEntropyLoss: class weights and label smoothing are not supported")
        self.ignore_index = ignore_index

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, reduction=self.reduction, ignore_index=self.ignore_index)
