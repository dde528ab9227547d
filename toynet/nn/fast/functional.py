"""``linear`` and ``mse_loss`` as one fused op each (see :mod:`toynet.ops.fast.fused`): what the fast path
runs instead of the plain ops of :mod:`toynet.nn.functional`, to the same values."""

from __future__ import annotations

from ...dynamic.fast.apply import fast_apply as apply
from ...dynamic.tensor import Tensor
from ...mode import fast_replacement
from ...ops.fast.fused import Linear, MseLoss
from .. import functional, functional_vision

# The fast door for the functions of toynet.nn that call it by name (see toynet.dynamic.fast.apply).
fast_replacement(functional, "apply")(apply)
fast_replacement(functional_vision, "apply")(apply)


@fast_replacement(functional, "linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.t() + bias`` as one op, ``linear``."""
    return apply(Linear, x, weight) if bias is None else apply(Linear, x, weight, bias)


@fast_replacement(functional, "mse_loss")
def mse_loss(prediction: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """The squared error as one op, ``mse_loss``."""
    return apply(MseLoss, prediction, target, reduction=reduction)
