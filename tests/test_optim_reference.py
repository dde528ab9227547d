"""Every optimizer against a plain NumPy reference written from the published update rules (issue 21: the formulas
were checked only against PyTorch, which a fresh machine may not have). float64 throughout, so the comparison is
exact to rounding; Eager mode and Graph mode (both paths) are both checked.

The references follow the algorithm boxes of PyTorch's documentation (torch.optim.SGD, Adam, AdamW), which
OneFlow's optimizers share: SGD with L2 weight decay, momentum with dampening (the first step takes the gradient
as it is) and Nesterov; Adam with L2 weight decay, bias corrections and AMSGrad (the running maximum of the second
moment); AdamW with its decay applied to the weights before Adam's step.
"""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn

STEPS = 6


def sgd_reference(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    p, buf = p.copy(), None
    for g in grads:
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def adam_reference(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False):
    p, m, v, v_max = p.copy(), np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    b1, b2 = betas
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        if amsgrad:
            v_max = np.maximum(v_max, v)
        second = v_max if amsgrad else v
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(second / (1 - b2 ** t)) + eps)
    return p


CASES = {
    "sgd": (flow.optim.SGD, dict(lr=0.1), sgd_reference),
    "sgd momentum": (flow.optim.SGD, dict(lr=0.1, momentum=0.9), sgd_reference),
    "sgd momentum dampening decay": (flow.optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
                                     sgd_reference),
    "sgd nesterov": (flow.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1), sgd_reference),
    "adam": (flow.optim.Adam, dict(lr=0.01), adam_reference),
    "adam decay amsgrad": (flow.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1, amsgrad=True),
                           adam_reference),
    "adamw": (flow.optim.AdamW, dict(lr=0.01, weight_decay=0.1), lambda p, g, **k: adam_reference(p, g, **k,
                                                                                                 decoupled=True)),
    "adamw amsgrad": (flow.optim.AdamW, dict(lr=0.02, weight_decay=0.05, amsgrad=True),
                      lambda p, g, **k: adam_reference(p, g, **k, decoupled=True)),
}


def gradients(seed=0):
    rng = np.random.default_rng(seed)
    start = rng.standard_normal((3, 4))
    return start, [rng.standard_normal((3, 4)) for _ in range(STEPS)]


@pytest.mark.parametrize("case", list(CASES))
def test_eager_steps_follow_the_published_formula(case):
    make, settings, reference = CASES[case]
    start, grads = gradients()
    p = nn.Parameter(flow.tensor(start))
    optimizer = make([p], **settings)
    for g in grads:
        p.grad = flow.tensor(g)
        optimizer.step()
    np.testing.assert_allclose(p.numpy(), reference(start, grads, **settings), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fast", [False, True], ids=["lesson", "fast"])
@pytest.mark.parametrize("case", list(CASES))
def test_graph_steps_follow_the_published_formula(case, fast):
    """In an nn.Graph the gradient comes from backward: loss = sum(p * g_t), whose gradient is g_t."""
    make, settings, reference = CASES[case]
    start, grads = gradients(1)
    holder = nn.Module()
    holder.p = nn.Parameter(flow.tensor(start))

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.holder = holder
            self.add_optimizer(make(holder.parameters(), **settings))

        def build(self, g):
            loss = (self.holder.p * g).sum()
            loss.backward()
            return loss

    with flow.set_fast_path(fast):
        step = Step()
        for g in grads:
            step(flow.tensor(g))
    np.testing.assert_allclose(holder.p.numpy(), reference(start, grads, **settings), rtol=1e-10, atol=1e-12)
