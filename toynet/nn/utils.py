"""``toynet.nn.utils``: gradient clipping, as in PyTorch and OneFlow.

* :func:`clip_grad_norm_`: scale all the gradients together so that their total norm is at most ``max_norm``;
* :func:`clip_grad_value_`: clamp each gradient element into ``[-clip_value, clip_value]``.

Call either after ``loss.backward()`` and before ``optimizer.step()``. The maths lives in
:mod:`toynet.optim.clip_grad`, beside OneFlow's per-group clipping (``clip_grad_max_norm`` in a parameter
group, ``optimizer.clip_grad()``), which an ``nn.Graph`` traces into its training step.
"""

from __future__ import annotations

from ..optim.clip_grad import clip_grad_norm_, clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
