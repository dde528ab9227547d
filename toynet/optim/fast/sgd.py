"""SGD's update as one op, ``sub_scaled`` (``param - lr * d``; see :mod:`toynet.ops.fast.fused`): Eager mode
then pays one Python call per parameter instead of two. Graph mode traces the op's decomposition, the
same two ops as the lesson's update."""

from __future__ import annotations

from typing import Any

from ...dynamic.tensor import Tensor, apply
from ...mode import fast_replacement
from ...ops.fast.fused import SubScaled
from ..sgd import SGD


@fast_replacement(SGD, "update")
def update(self: SGD, param: Tensor, grad: Tensor, state: dict, group: dict, lr: Any) -> tuple[Tensor, dict]:
    d, new_state = self.direction(param, grad, state, group)
    return apply(SubScaled, param, d, lr), new_state
