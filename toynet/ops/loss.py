"""Loss functions as single ops: one pass over the data and a closed-form vjp."""

from __future__ import annotations

from .. import backend
from ._op import Op, ShapeError, full_reduction, register, require_float, shape_of

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


@register
class MseLoss(Op):
    """Squared error ``(a - b)^2``, summed, averaged or kept per element (``reduction``);
    d/da = 2 (a - b) g (divided by n for the mean), d/db = -d/da."""

    name = "mse_loss"

    def forward(self, xp, a, b, reduction="mean"):
        diff = xp.subtract(a, b)
        xp.square(diff, out=diff)
        if reduction == "none":
            return diff
        total = xp.sum(diff)
        return full_reduction(xp, total / diff.size if reduction == "mean" else total)

    def infer(self, a, b, reduction="mean"):
        _check_reduction(self.name, reduction)
        require_float(self.name, a)
        if shape_of(a) != shape_of(b):
            raise ShapeError(f"mse_loss: input shape {shape_of(a)} and target shape {shape_of(b)} differ; "
                             "they must match (reshape or flatten the prediction)")
        return (shape_of(a) if reduction == "none" else ()), backend.promote(a.dtype, b.dtype)

    def vjp(self, grad, inputs, output, reduction="mean"):
        a, b = inputs
        scale = 2.0 / a.numel() if reduction == "mean" else 2.0
        d = (a - b) * (grad * scale)
        return (d if getattr(a, "requires_grad", False) else None,
                -d if getattr(b, "requires_grad", False) else None)
