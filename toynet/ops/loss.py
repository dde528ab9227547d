"""Loss functions as single ops: one pass over the data and a closed-form vjp."""

from __future__ import annotations

from .. import backend
from ._op import Op, ShapeError, apply, full_reduction, register, require_float, shape_of

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ShapeError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")


def _check_indices(op: str, dtype: backend.DType, hint: str = "") -> None:
    if dtype.is_floating_point or dtype is backend.bool_:
        raise ShapeError(f"{op}: needs integer class indices (int64), got a {dtype} tensor; convert it with "
                         f".long().{hint}")


@register
class OneHot(Op):
    """Class indices to indicator vectors: ``out[..., k, ...] = (target == k)`` along a new dimension
    ``dim`` of size ``num_classes``. Indices outside ``[0, num_classes)`` give an all-zero vector (which
    is how ``cross_entropy`` drops ignored targets). No gradient: indices are not differentiable."""

    name = "one_hot"
    nondifferentiable = (0,)

    def forward(self, xp, target, num_classes=0, dim=-1, dtype=backend.int64):
        _check_indices(self.name, backend.dtype_of(target))
        ndim = target.ndim + 1
        axis = dim % ndim
        classes = xp.arange(num_classes).reshape((num_classes,) + (1,) * (ndim - 1 - axis))
        return (xp.expand_dims(target, axis) == classes).astype(dtype.array_dtype)

    def infer(self, target, num_classes=0, dim=-1, dtype=backend.int64):
        shape = shape_of(target)
        _check_indices(self.name, target.dtype)
        if num_classes < 1:
            raise ShapeError(f"one_hot: num_classes must be at least 1, got {num_classes}")
        if not -(len(shape) + 1) <= dim <= len(shape):
            raise ShapeError(f"one_hot: dim {dim} is out of range for a result with {len(shape) + 1} dimensions")
        axis = dim % (len(shape) + 1)
        return shape[:axis] + (num_classes,) + shape[axis:], dtype

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


@register
class CrossEntropy(Op):
    """Softmax cross-entropy of ``logits`` ``(N, C, *d)`` against class indices ``target`` ``(N, *d)``.

    Per element, ``loss = logsumexp(logits) - logits[target]`` over the class dimension 1, computed
    after shifting the logits by their maximum so ``exp`` never overflows. Targets equal to
    ``ignore_index`` contribute nothing, and ``reduction="mean"`` divides by the number of the others
    (as PyTorch). vjp: ``(softmax(logits) - one_hot(target)) * g``, divided by that count for the mean.

    ``label_smoothing`` ``e`` (PyTorch's definition) aims at ``1 - e`` on the target plus ``e / C`` spread over
    all ``C`` classes: ``loss = (1 - e) * nll + e / C * sum_c(logsumexp - logits[c])``, which is
    ``logsumexp - (1 - e) logits[target] - e * mean_c(logits[c])``; the one-hot of the vjp becomes
    ``(1 - e) * one_hot + e / C``. ``label_smoothing`` is a third input (a Python number), given only when
    it is not 0.
    """

    name = "cross_entropy"
    nondifferentiable = (1, 2)

    def forward(self, xp, logits, target, label_smoothing=0.0, reduction="mean", ignore_index=-100):
        _check_reduction(self.name, reduction)  # eager mode runs infer only after a failure
        _check_smoothing(label_smoothing)
        classes = logits.shape[1]
        valid = target != ignore_index
        out_of_range = valid & ((target < 0) | (target >= classes))
        if xp.any(out_of_range):  # cheap next to the logits: the target has C times fewer elements
            bad = int(target[out_of_range][0])
            raise IndexError(f"cross_entropy: target holds class index {bad}, outside [0, {classes}) for logits "
                             f"with {classes} classes (or set ignore_index={bad} to skip such targets)")
        shifted = logits - xp.max(logits, axis=1, keepdims=True)
        log_total = xp.log(xp.sum(xp.exp(shifted), axis=1))
        picked = xp.take_along_axis(shifted, xp.expand_dims(xp.where(valid, target, 0), 1), axis=1)
        if label_smoothing:
            picked = picked * (1.0 - label_smoothing) + xp.mean(shifted, axis=1, keepdims=True) * label_smoothing
        losses = xp.where(valid, log_total - picked[:, 0], 0)
        if reduction == "none":
            return losses
        total = xp.sum(losses)
        if reduction == "sum":
            return full_reduction(xp, total)
        return full_reduction(xp, total / xp.sum(valid).astype(losses.dtype))

    def infer(self, logits, target, label_smoothing=0.0, reduction="mean", ignore_index=-100):
        _check_reduction(self.name, reduction)
        _check_smoothing(label_smoothing)
        require_float(self.name, logits)
        ls, ts = shape_of(logits), shape_of(target)
        _check_indices(self.name, target.dtype,
                       " Soft (probability) targets of the logits' shape are not supported." if ts == ls else "")
        if len(ls) < 2:
            raise ShapeError(f"cross_entropy: logits must have shape (N, C) or (N, C, d1, ...), got {ls}")
        expected = ls[:1] + ls[2:]
        if ts != expected:
            raise ShapeError(f"cross_entropy: logits of shape {ls} need a target of shape {expected} (one class "
                             f"index per sample, without the class dimension 1), got {ts}")
        return (expected if reduction == "none" else ()), logits.dtype

    def vjp(self, grad, inputs, output, reduction="mean", ignore_index=-100):

        logits, target, label_smoothing = (tuple(inputs) + (0.0,))[:3]
        valid = (target != ignore_index).to(logits.dtype)        # 1 for counted targets, 0 for ignored
        if reduction == "mean":
            valid = valid * (grad / valid.sum())
        else:                                                      # "sum": grad is 0-d; "none": per element
            valid = valid * grad
        hot = apply(OneHot, target, num_classes=logits.shape[1], dim=1, dtype=logits.dtype)
        if label_smoothing:
            hot = hot * (1.0 - label_smoothing) + label_smoothing / logits.shape[1]
        return ((logits.softmax(1) - hot) * valid.unsqueeze(1), None) + (None,) * (len(inputs) - 2)
