"""Fused ops: several lesson ops as one, so that Eager mode pays one Python call (and one Tensor) for them.

Eager mode's cost on a small model is its per-op overhead (a Python call, a record for backward, a new
Tensor), not the arithmetic. These ops compute what a few plain ops compute, in one call each, with a
closed-form vjp that is itself one op where that matters:

=====================  =========================================  ==============================
fused op               the plain ops it stands for                 used by (fast path)
=====================  =========================================  ==============================
``linear``             ``x @ weight.t() + bias``                   ``nn.functional.linear``
``linear_grad_weight`` ``grad.t() @ x`` over all leading dims      ``linear``'s vjp
``mse_loss``           ``(a - b).square().sum()`` (or mean)        ``nn.functional.mse_loss``
``mse_loss_grad``      ``2 (a - b) g`` (divided by n for mean)     ``mse_loss``'s vjp
``sum_squares``        ``a.square().sum()``                        ``mse_loss``'s decomposition
``sub_scaled``         ``a - scale * b``                           ``optim.SGD.update``
=====================  =========================================  ==============================

Graph mode traces ``mse_loss`` and ``sub_scaled`` as their ``decompose`` rules (the simpler ops), so that its
passes can share and fuse the pieces; ``linear`` stays one node, which the fast compiler writes as one line.
Every fused op is tested equal to the plain ops it stands for (tests/test_fast_path.py).
"""

from __future__ import annotations

import math

from ... import backend
from .matmul import folded_matmul
from .._op import (OPS, Elementwise, Op, ShapeError, apply, full_reduction, needs_grad, register, require_float,
                   shape_of, unbroadcast)

_REDUCTIONS = ("mean", "sum", "none")


@register
class Linear(Op):
    """``x @ weight^T + bias``, the fully connected layer as one op (PyTorch's ``addmm``).

    d/dx = g @ W, d/dW = g^T @ x (summed over leading dimensions), d/db = g summed over all but the last
    dimension.
    """

    name = "linear"
    supports_out = True

    def forward(self, xp, x, weight, bias=None, out=None):
        if x.ndim > 2 and (out is None or out.flags.c_contiguous):   # (a transformer's (B, T, C) input)
            y = folded_matmul(xp, x, weight.T, out)
        else:
            y = xp.matmul(x, weight.T, out=out)
        if bias is not None:
            y += bias
        return y

    def infer(self, x, weight, bias=None):
        sx, sw = shape_of(x), shape_of(weight)
        if len(sw) != 2 or not sx or sx[-1] != sw[1]:
            raise ShapeError(f"linear: input of shape {sx} does not fit weight of shape {sw}: the input's last "
                             f"dimension must equal in_features = {sw[1] if len(sw) == 2 else '?'}")
        if bias is not None and shape_of(bias) != (sw[0],):
            raise ShapeError(f"linear: bias of shape {shape_of(bias)} should have shape ({sw[0]},)")
        return sx[:-1] + (sw[0],), backend.promote(x.dtype, weight.dtype)

    def vjp(self, grad, inputs, output, **attrs):
        x, weight, bias = inputs if len(inputs) == 3 else (*inputs, None)
        grad_x = grad @ weight if needs_grad(x) else None
        grad_w = apply(LinearGradWeight, grad, x) if needs_grad(weight) else None
        grad_b = grad.sum_to(bias.shape) if needs_grad(bias) else None
        return grad_x, grad_w, grad_b


@register
class LinearGradWeight(Op):
    """The weight gradient of ``linear``: ``grad^T @ x`` summed over all leading dimensions, as one matrix
    product. Its own vjp (for second derivatives): d/dgrad = x @ gw^T, d/dx = grad @ gw."""

    name = "linear_grad_weight"
    supports_out = True

    def forward(self, xp, grad, x, out=None):
        if grad.ndim != 2:  # fold leading (batch) dimensions into one
            grad, x = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
        return xp.matmul(grad.T, x, out=out)

    def infer(self, grad, x):
        sg, sx = shape_of(grad), shape_of(x)
        if not sg or sg[:-1] != sx[:-1]:
            raise ShapeError(f"linear_grad_weight: gradient of shape {sg} does not match input of shape {sx} "
                             "in the leading dimensions")
        return (sg[-1], sx[-1]), backend.promote(grad.dtype, x.dtype)

    def vjp(self, gw, inputs, output):
        grad, x = inputs
        return (x @ gw.t() if needs_grad(grad) else None, grad @ gw if needs_grad(x) else None)


def check_mse(a_shape: tuple, b_shape: tuple, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ShapeError(f"mse_loss: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
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
            check_mse(shape_of(a), shape_of(b), reduction)  # NumPy would broadcast (3, 1) against (3,) silently
        diff = xp.subtract(a, b)
        if reduction == "none":
            return xp.square(diff, out=diff)
        flat = diff.reshape(-1)
        total = flat.dot(flat)  # the sum of squares in one pass, without a squared temporary
        return full_reduction(xp, total / diff.size if reduction == "mean" else total)

    def infer(self, a, b, reduction="mean"):
        check_mse(shape_of(a), shape_of(b), reduction)
        require_float(self.name, a)
        return (shape_of(a) if reduction == "none" else ()), backend.promote(a.dtype, b.dtype)

    def decompose(self, a, b, reduction="mean"):
        """``sum((a - b)^2)`` in two ops: traced this way, the difference is shared by the forward and
        the backward (CSE), where Eager mode's vjp has to compute it again."""
        diff = a - b
        if reduction == "none":
            return diff * diff
        total = apply(SumSquares, diff)
        return total / diff.numel() if reduction == "mean" else total

    def vjp(self, grad, inputs, output, reduction="mean"):
        a, b = inputs
        d = apply(MseLossGrad, grad, a, b, reduction=reduction)
        return (d if needs_grad(a) else None, -d if needs_grad(b) else None)


@register
class MseLossGrad(Op):
    """The vjp of ``mse_loss`` as one op: ``2 (a - b) g``, divided by n for the mean (its own vjp, for
    second derivatives, is written with toynet ops as usual)."""

    name = "mse_loss_grad"
    supports_out = True

    def forward(self, xp, grad, a, b, reduction="mean", out=None):
        d = xp.subtract(a, b, out=out)
        scale = (2.0 / d.size if d.size else math.nan) if reduction == "mean" else 2.0   # (an empty batch: NaN)
        d *= grad * scale
        return d

    def infer(self, grad, a, b, reduction="mean"):
        return shape_of(a), backend.promote(a.dtype, b.dtype)

    def vjp(self, gg, inputs, output, reduction="mean"):
        grad, a, b = inputs
        scale = (2.0 / a.numel() if a.numel() else math.nan) if reduction == "mean" else 2.0
        diff = a - b
        d_grad = (gg * diff).sum_to(grad.shape) * scale if needs_grad(grad) else None
        d_a = gg * grad * scale
        return d_grad, d_a if needs_grad(a) else None, -d_a if needs_grad(b) else None


@register
class SumSquares(Op):
    """Sum of the squares of all elements (the squared L2 norm), one pass; d/da = 2 a g."""

    name = "sum_squares"

    def forward(self, xp, a):
        flat = a.reshape(-1)
        return full_reduction(xp, xp.dot(flat, flat))

    def infer(self, a):
        require_float(self.name, a)
        return (), a.dtype

    def vjp(self, grad, inputs, output):
        return (inputs[0] * (grad * 2.0),)


@register
class SubScaled(Elementwise):
    """``a - scale * b`` as one op: the step of gradient descent, ``param - lr * grad`` (PyTorch's SGD runs
    ``param.add_(grad, alpha=-lr)``, one kernel, for the same reason). d/da = 1, d/db = -scale,
    d/dscale = -b."""

    name = "sub_scaled"

    def forward(self, xp, a, b, scale, out=None):
        return xp.subtract(a, xp.multiply(scale, b), out=out)

    def decompose(self, a, b, scale):
        return a - scale * b

    def vjp(self, grad, inputs, output, **attrs):
        a, b, scale = inputs
        return (unbroadcast(grad, a),
                unbroadcast(-(grad * scale), b) if needs_grad(b) else None,
                unbroadcast(-(grad * b), scale) if needs_grad(scale) else None)


__all__ = ["OPS", "Linear", "LinearGradWeight", "MseLoss", "MseLossGrad", "SumSquares", "SubScaled"]
