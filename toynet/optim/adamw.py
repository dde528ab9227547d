"""AdamW (Loshchilov & Hutter, 2019) with PyTorch's semantics: Adam with *decoupled* weight decay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from .adam import Adam


class AdamW(Adam):
    r"""Adam whose weight decay shrinks the weights directly instead of adding ``λ·p`` to the gradient::

        p = p · (1 - lr·λ)                            (decoupled weight decay, if λ != 0)
        t = t + 1
        m = β1·m + (1 - β1)·g
        v = β2·v + (1 - β2)·g²
        v̂ = max(v̂, v) if amsgrad else v
        p = p - lr/(1 - β1^t) · m / (sqrt(v̂)/sqrt(1 - β2^t) + eps)

    With Adam's L2 decay, ``λ·p`` goes through the moments and is divided by ``sqrt(v̂)``, so weights with
    large gradients are hardly decayed; decoupled, every weight shrinks by the same factor each step,
    which is what the regularisation meant. The state (``step``, ``exp_avg``, ``exp_avg_sq``,
    ``max_exp_avg_sq``) and its state dict are Adam's, as in PyTorch; the default ``weight_decay`` is
    PyTorch's ``1e-2``.

    >>> opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)   # doctest: +SKIP
    """

    decoupled_weight_decay: ClassVar[bool] = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
