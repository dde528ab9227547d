"""Adam (Kingma & Ba, 2015) with PyTorch's semantics: L2 weight decay, bias correction, optional AMSGrad."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from .. import backend
from ..dynamic.creation import zeros, zeros_like
from ..dynamic.tensor import Tensor
from . import hyper as checks
from .optimizer import Optimizer


class Adam(Optimizer):
    r"""Adaptive moment estimation.

    Each parameter keeps running averages of its gradient (``exp_avg``, *m*) and squared gradient
    (``exp_avg_sq``, *v*), and a step count *t*::

        g = g + λ·p                                   (weight decay, if λ != 0)
        t = t + 1
        m = β1·m + (1 - β1)·g
        v = β2·v + (1 - β2)·g²
        v̂ = max(v̂, v) if amsgrad else v
        p = p - lr/(1 - β1^t) · m / (sqrt(v̂)/sqrt(1 - β2^t) + eps)

    The averages start at zero, so early on they are biased towards zero; dividing by ``1 - β^t``
    corrects that. *t* is a 0-d float32 tensor, so ``β1 ** t`` is a tensor op and the same rule runs on
    the lazy tensors of Graph mode (``lr`` is then a 0-d tensor too).
    """

    slot_names: ClassVar[dict[str, str]] = {"step": "step", "exp_avg": "m", "exp_avg_sq": "v",
                                            "max_exp_avg_sq": "max_v"}

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, {"lr": lr, "betas": tuple(betas) if isinstance(betas, list) else betas,
                                  "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad})

    def _validate(self, hyper: dict) -> None:
        """PyTorch's checks (lr, eps, weight_decay >= 0; 0 <= beta < 1), every number finite, ``amsgrad``
        a bool."""
        super()._validate(hyper)
        betas = hyper.get("betas", (0.9, 0.999))
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"betas must be a pair (beta1, beta2), got {checks.short_repr(betas)}")
        for i, beta in enumerate(betas):
            checks.in_range("betas", beta, f"beta parameter at index {i}", 0.0, below=1.0)
        checks.in_range("eps", hyper.get("eps", 0.0), "epsilon value")
        checks.in_range("weight_decay", hyper.get("weight_decay", 0.0), "weight_decay value")
        checks.flag("amsgrad", hyper.get("amsgrad", False))

    def init_state(self, param: Tensor, group: dict | None = None) -> dict[str, Tensor]:
        state = {"step": zeros((), dtype=backend.float32, device=param.device),
                 "exp_avg": zeros_like(param),
                 "exp_avg_sq": zeros_like(param)}
        if (self.group_of(param) if group is None else group)["amsgrad"]:
            state["max_exp_avg_sq"] = zeros_like(param)
        return state

    def check_slot(self, name: str, values: Any) -> str | None:
        if name in ("exp_avg_sq", "max_exp_avg_sq") and (values < 0).any():
            return "holds negative values: a second moment (a mean of squares) is never negative"
        if name == "step" and not ((values >= 0) & (values == backend.host.trunc(values))).all():
            return "holds a step count that is not a whole number >= 0"
        return None

    #: Weight decay as L2 (added to the gradient: Adam) or decoupled (the weights shrink directly: AdamW).
    decoupled_weight_decay: ClassVar[bool] = False

    def update(self, param: Tensor, grad: Tensor, state: dict, group: dict, lr: Any) -> tuple[Tensor, dict]:
        beta1, beta2 = group["betas"]
        if group["weight_decay"] != 0 and self.decoupled_weight_decay:
            param = param * (1 - lr * group["weight_decay"])
        elif group["weight_decay"] != 0:
            grad = grad + group["weight_decay"] * param
        step = state["step"] + 1
        exp_avg = beta1 * state["exp_avg"] + (1 - beta1) * grad
        exp_avg_sq = beta2 * state["exp_avg_sq"] + (1 - beta2) * (grad * grad)
        new_state = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        second_moment = exp_avg_sq
        if group["amsgrad"]:
            second_moment = new_state["max_exp_avg_sq"] = state["max_exp_avg_sq"].maximum(exp_avg_sq)
        # 1 - β^t keeps few digits in float32 when β is close to 1 (float32(0.999) is already off by 1e-8,
        # a relative 1e-5 of 1 - β), so the two 0-d corrections are computed in float64, as PyTorch does
        # on the host, and cast back before they meet the parameter-sized tensors.
        t = step.to(backend.float64)
        step_size = (lr / (1 - beta1 ** t)).to(param.dtype)
        bias_correction2_sqrt = (1 - beta2 ** t).sqrt().to(param.dtype)
        denom = second_moment.sqrt() / bias_correction2_sqrt + group["eps"]
        return param - step_size * (exp_avg / denom), new_state
