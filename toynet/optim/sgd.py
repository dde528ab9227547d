"""Stochastic gradient descent, with PyTorch's momentum, dampening, Nesterov and weight decay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from ..dynamic.creation import zeros, zeros_like
from ..dynamic.tensor import Tensor
from . import hyper as checks
from .optimizer import Optimizer


class SGD(Optimizer):
    r"""Gradient descent, optionally with momentum.

    With gradient :math:`g`, weight decay :math:`\lambda`, momentum :math:`\mu` and dampening :math:`\tau`::

        d = g + λ·p                       (weight decay, if λ != 0)
        b = μ·b + (1 - τ)·d               (momentum buffer, if μ != 0; the first step sets b = d)
        d = d + μ·b  if nesterov else b
        p = p - lr·d

    >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9)   # doctest: +SKIP
    """

    slot_names: ClassVar[dict[str, str]] = {"momentum_buffer": "momentum", "step": "step"}
    # A state without "step" is one whose dampening was switched on after its first step (see update).
    optional_slots: ClassVar[tuple[str, ...]] = ("step",)

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def _validate(self, hyper: dict) -> None:
        """PyTorch's checks (lr, momentum and weight_decay >= 0; Nesterov needs momentum and no dampening),
        and dampening >= 0; every number finite, ``nesterov`` a bool."""
        super()._validate(hyper)
        for name in ("momentum", "dampening", "weight_decay"):
            checks.in_range(name, hyper.get(name, 0.0), f"{name} value")
        checks.flag("nesterov", hyper.get("nesterov", False))
        if hyper.get("nesterov") and (hyper.get("momentum", 0) <= 0 or hyper.get("dampening", 0) != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def init_state(self, param: Tensor, group: dict | None = None) -> dict[str, Tensor]:
        return self._fresh_state(param, self.group_of(param) if group is None else group)

    def check_slot(self, name: str, values: Any) -> str | None:
        if name == "step" and not (values >= 0).all():
            return "holds a negative step count"
        return None

    def _fresh_state(self, param: Tensor, group: dict) -> dict[str, Tensor]:
        if group["momentum"] == 0:
            return {}  # plain SGD keeps no state
        state = {"momentum_buffer": zeros_like(param)}
        if group["dampening"] != 0:
            # PyTorch starts the buffer at the first gradient, undamped. A zero buffer gives exactly that
            # when dampening is 0 (μ·0 + 1·d = d); otherwise the rule needs to know the step count.
            state["step"] = zeros((), dtype=param.dtype, device=param.device)
        return state

    def update(self, param: Tensor, grad: Tensor, state: dict, group: dict, lr: Any) -> tuple[Tensor, dict]:
        d, new_state = self.direction(param, grad, state, group)
        return param - lr * d, new_state

    def direction(self, param: Tensor, grad: Tensor, state: dict, group: dict) -> tuple[Tensor, dict]:
        """The step's direction ``d`` (the update is ``param - lr * d``) and the new state."""
        d = grad if group["weight_decay"] == 0 else grad + group["weight_decay"] * param
        if group["momentum"] == 0:
            return d, state
        momentum, dampening = group["momentum"], group["dampening"]
        if "momentum_buffer" not in state:  # momentum was switched on after the first step
            state = self._fresh_state(param, group)
        new_state = dict(state)
        if "step" in state:
            # Damp from the second step on: the factor is 1 when step == 0 and (1 - τ) after.
            not_first = state["step"].clamp(max=1.0)
            buf = momentum * state["momentum_buffer"] + (1 - dampening * not_first) * d
            new_state["step"] = state["step"] + 1
        else:
            buf = momentum * state["momentum_buffer"] + (1 - dampening) * d
        new_state["momentum_buffer"] = buf
        d = d + momentum * buf if group["nesterov"] else buf
        return d, new_state
