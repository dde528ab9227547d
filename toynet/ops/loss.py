"""Loss functions as single ops: one pass over the data and a closed-form vjp."""

from __future__ import annotations

from .. import backend
from ._op import OPS, Op, ShapeError, apply, full_reduction, register, require_float, shape_of

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_mse(a_shape: tuple, b_shape: tuple, reduction: str) -> None:
    _check_reduction("mse_loss", reduction)
    if a_shape != b_shape:
        raise ShapeError(f"mse_loss: input shape {a_shape} and target shape {b_shape} differ; they must match "
                         "(reshape or flatten the prediction)")


@register
class MseLoss(Op):
    """Squared error ``(a - b)^2``, summed, averaged or kept per element (``reduction``);
    d/da = 2 (a - b) g (divided by n for the mean), d/db = -d/da."""

    name = "mse_loss"

    def forward(self, xp, a, b, reduction="mean"):
        if getattr(a, "shape", ()) != getattr(b, "shape", ()) or reduction not in _REDUCTIONS:
            _check_mse(shape_of(a), shape_of(b), reduction)  # NumPy would broadcast (3, 1) against (3,) silently
        diff = xp.subtract(a, b)
        if reduction == "none":
            return xp.square(diff, out=diff)
        flat = diff.reshape(-1)
        total = flat.dot(flat)  # the sum of squares in one pass, without a squared temporary (the method: xp.dot
        # runs a Python dispatcher first, 0.2 us)
        return full_reduction(xp, total / diff.size if reduction == "mean" else total)

    def infer(self, a, b, reduction="mean"):
        _check_mse(shape_of(a), shape_of(b), reduction)
        require_float(self.name, a)
        return (shape_of(a) if reduction == "none" else ()), backend.promote(a.dtype, b.dtype)

    def decompose(self, a, b, reduction="mean"):
        """``sum((a - b)^2)`` in two ops: traced this way, the difference is shared by the forward and
        the backward (CSE), where Eager mode's vjp has to compute it again."""
        diff = a - b
        if reduction == "none":
            return diff * diff
        total = apply(OPS["sum_squares"], diff)
        return total / diff.numel() if reduction == "mean" else total

    def vjp(self, grad, inputs, output, reduction="mean"):
        a, b = inputs
        d = apply(MseLossGrad, grad, a, b, reduction=reduction)
        return (d if getattr(a, "requires_grad", False) else None,
                -d if getattr(b, "requires_grad", False) else None)


@register
class MseLossGrad(Op):
    """The vjp of ``mse_loss`` as one op: ``2 (a - b) g``, divided by n for the mean.

    One op instead of three (subtract, scale, multiply) matters in Eager mode, where every op costs a
    Python call; its own vjp (for second derivatives) is written with toynet ops as usual.
    """

    name = "mse_loss_grad"
    supports_out = True

    def forward(self, xp, grad, a, b, reduction="mean", out=None):
        d = xp.subtract(a, b, out=out)
        scale = 2.0 / d.size if reduction == "mean" else 2.0
        d *= grad * scale
        return d

    def infer(self, grad, a, b, reduction="mean"):
        return shape_of(a), backend.promote(a.dtype, b.dtype)

    def vjp(self, gg, inputs, output, reduction="mean"):
        grad, a, b = inputs
        scale = 2.0 / a.numel() if reduction == "mean" else 2.0
        diff = a - b
        d_grad = (gg * diff).sum_to(grad.shape) * scale if getattr(grad, "requires_grad", False) else None
        d_a = gg * grad * scale
        return (d_grad,
                d_a if getattr(a, "requires_grad", False) else None,
                -d_a if getattr(b, "requires_grad", False) else None)


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
    """

    name = "cross_entropy"
    nondifferentiable = (1,)

    def forward(self, xp, logits, target, reduction="mean", ignore_index=-100):
        _check_reduction(self.name, reduction)  # eager mode runs infer only after a failure
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
        losses = xp.where(valid, log_total - picked[:, 0], 0)
        if reduction == "none":
            return losses
        total = xp.sum(losses)
        if reduction == "sum":
            return full_reduction(xp, total)
        return full_reduction(xp, total / xp.sum(valid).astype(losses.dtype))

    def infer(self, logits, target, reduction="mean", ignore_index=-100):
        _check_reduction(self.name, reduction)
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

        logits, target = inputs
        valid = (target != ignore_index).to(logits.dtype)        # 1 for counted targets, 0 for ignored
        if reduction == "mean":
            valid = valid * (grad / valid.sum())
        else:                                                      # "sum": grad is 0-d; "none": per element
            valid = valid * grad
        hot = apply(OneHot, target, num_classes=logits.shape[1], dim=1, dtype=logits.dtype)
        return (logits.softmax(1) - hot) * valid.unsqueeze(1), None
