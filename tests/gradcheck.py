"""Finite-difference gradient checks shared by the op tests.

``check_grad(fn, *inputs)`` compares the gradients toynet's autograd computes for
``sum(fn(*inputs) * r)`` (``r`` a fixed random weighting, so every output element matters differently)
with central differences, ``(f(x + eps) - f(x - eps)) / 2 eps``, in float64.
"""

from __future__ import annotations

import numpy as np

import toynet as flow


def _as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def weighted_sum(fn, inputs, weights):
    outs = _as_list(fn(*inputs))
    total = None
    for o, w in zip(outs, weights):
        term = (o * flow.tensor(w, dtype=o.dtype, device=o.device)).sum()
        total = term if total is None else total + term
    return total


def numeric_grads(fn, arrays, weights, device, eps=1e-6):
    """Central differences of the weighted sum with respect to every float input array."""
    grads = []
    for i, a in enumerate(arrays):
        if not np.issubdtype(a.dtype, np.floating):
            grads.append(None)
            continue
        g = np.zeros_like(a, dtype=np.float64)
        flat = a.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            plus = weighted_sum(fn, [flow.tensor(x, device=device) for x in arrays], weights).item()
            flat[j] = old - eps
            minus = weighted_sum(fn, [flow.tensor(x, device=device) for x in arrays], weights).item()
            flat[j] = old
            g.reshape(-1)[j] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


def check_grad(fn, *arrays, device="cpu", atol=1e-5, rtol=1e-4, eps=1e-6, seed=0):
    """Assert that autograd and finite differences agree for ``fn`` at ``arrays`` (float64 numpy)."""
    rng = np.random.default_rng(seed)
    arrays = [np.array(a, copy=True) for a in arrays]
    tensors = [flow.tensor(a, device=device, requires_grad=np.issubdtype(a.dtype, np.floating)) for a in arrays]
    outs = _as_list(fn(*tensors))
    weights = [rng.standard_normal(o.shape) for o in outs]
    total = weighted_sum(fn, tensors, weights)
    total.backward()
    expected = numeric_grads(fn, arrays, weights, device, eps)
    for i, (t, e) in enumerate(zip(tensors, expected)):
        if e is None:
            continue
        got = np.zeros_like(e) if t.grad is None else t.grad.numpy()
        assert got.shape == e.shape, f"input {i}: gradient shape {got.shape} != {e.shape}"
        np.testing.assert_allclose(got, e, atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")
    return tensors
