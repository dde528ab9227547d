"""Gradient clipping, written once for both designs: PyTorch's ``clip_grad_norm_`` and ``clip_grad_value_``
(``toynet.nn.utils``), and OneFlow's per-group clipping.

Clipping by norm treats all the gradients as one long vector *g*, takes its p-norm
``‖g‖ = (Σ|gᵢ|ᵖ)^(1/p)`` (the largest ``|gᵢ|`` for ``p = inf``), and scales every gradient by::

    c = min(1, max_norm / (‖g‖ + 1e-6))

so a step never moves further than ``max_norm`` allows, whatever one bad batch did to the loss. Like an
optimizer's ``update`` rule, :func:`total_norm` and :func:`clip_coefficient` use toynet tensor ops only, so
the same lines run on eager gradients and, while ``nn.Graph`` traces, on lazy ones.

**OneFlow's per-group clipping.** A parameter group may hold ``clip_grad_max_norm`` (and
``clip_grad_norm_type``, 2.0 unless given)::

    optimizer = flow.optim.AdamW([{"params": model.parameters(), "clip_grad_max_norm": 1.0,
                                   "clip_grad_norm_type": 2.0}], lr=1e-3)

In Eager mode ``optimizer.clip_grad()`` clips each such group (the norm is over the group's gradients),
then ``optimizer.step()`` updates; in an ``nn.Graph`` the traced training step clips them itself, before
the updates (:func:`clip_traced`, called by :func:`toynet.nn.graph_train.trace_updates`). A compiled plan
holds the clipping settings as constants: adding, changing or removing a group's ``clip_grad_max_norm``
makes the next call compile again (the plan's guard compares a group's set of settings and each value; see
:mod:`toynet.nn.graph_plans`).

**All or nothing.** Every new gradient is computed before any is written; a non-finite norm with
``error_if_nonfinite=True`` raises before anything changed. Graph mode cannot raise half-way through a
step: its clipping is ``clip_grad_norm_(..., error_if_nonfinite=False)``'s, as PyTorch's and OneFlow's
compiled steps are (an inf or NaN norm makes NaN gradients; a grad scaler skips such a step).
"""

from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Iterable
from typing import Any

from .. import backend, mode
from ..dynamic import autograd
from ..dynamic.creation import zeros
from ..dynamic.tensor import Tensor
from ..utils.interrupts import defer_interrupts
from . import hyper as checks

CLIP_MAX_NORM, CLIP_NORM_TYPE = checks.CLIP_MAX_NORM, checks.CLIP_NORM_TYPE   # a group's clipping keys
#: Added to the norm before dividing by it (PyTorch's and OneFlow's): no division by zero for zero gradients.
EPS = 1e-6


# ------------------------------------------------------------------------------- the maths (both modes)


def total_norm(grads: list[Tensor], norm_type: float) -> Tensor:
    """The ``norm_type``-norm of all ``grads`` together, as one vector: a 0-d tensor of their widest dtype,
    on the first one's device (float16 gradients are summed in float32, as PyTorch does)."""
    dtype = functools.reduce(_wider, (g.dtype for g in grads))
    work = backend.float32 if dtype is backend.float16 else dtype
    device = grads[0].device
    parts = []
    for g in grads:
        g = g if g.dtype is work else g.to(work)
        if norm_type == math.inf:
            part = g.abs().amax()
        elif norm_type == 2.0:
            part = (g * g).sum()
        elif norm_type == 1.0:
            part = g.abs().sum()
        else:
            part = (g.abs() ** norm_type).sum()
        parts.append(part if part.device == device else part.to(device))
    if norm_type == math.inf:
        norm = functools.reduce(lambda a, b: a.maximum(b), parts)
    else:
        norm = functools.reduce(operator.add, parts)
        norm = norm.sqrt() if norm_type == 2.0 else norm if norm_type == 1.0 else norm ** (1.0 / norm_type)
    return norm if norm.dtype is dtype else norm.to(dtype)


def clip_coefficient(norm: Tensor, max_norm: float) -> Tensor:
    """What every gradient is multiplied by: ``min(1, max_norm / (norm + 1e-6))`` (1 when no clipping is
    needed: multiplying by it changes nothing, and no branch on a value keeps the rule traceable)."""
    return (max_norm / (norm + EPS)).clamp(max=1.0)


def clipped(grads: list[Tensor], max_norm: float, norm_type: float) -> tuple[Tensor, list[Tensor]]:
    """The total norm of ``grads`` and the clipped gradients (new tensors; nothing is written)."""
    norm = total_norm(grads, norm_type)
    return norm, scaled(grads, norm, max_norm)


def scaled(grads: list[Tensor], norm: Tensor, max_norm: float) -> list[Tensor]:
    """``grads`` (whose total norm is ``norm``) clipped to ``max_norm``: new tensors."""
    coef = clip_coefficient(norm, max_norm)
    return [g * _like(coef, g) for g in grads]


def group_settings(group: dict) -> tuple[float, float]:
    """A clipping group's ``(max_norm, norm_type)``, checked again (the group may have been edited by hand)."""
    checks.check_clip(group)
    return group[checks.CLIP_MAX_NORM], float(group.get(checks.CLIP_NORM_TYPE, 2.0))


# ------------------------------------------------------------------------------------------ Graph mode


def clip_traced(tracer: Any, scope: str, group: dict, grads: dict[str, Tensor], names: dict[int, str]
                ) -> dict[str, Tensor]:
    """While ``nn.Graph`` traces a training step: ``grads`` (parameter name -> lazy gradient) with those of
    ``group``'s parameters clipped together (``names``: id of a parameter -> its name); the ops are named
    after ``scope``."""
    max_norm, norm_type = group_settings(group)
    mine = [name for name in (names.get(id(p)) for p in group["params"]) if name in grads]
    if not mine:
        return grads
    with tracer.scope(scope, source="clip_grad_norm_"):
        _, new = clipped([grads[name] for name in mine], max_norm, norm_type)
    return {**grads, **dict(zip(mine, new))}


# ------------------------------------------------------------------------------------------ Eager mode


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float | str = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of ``parameters`` (a tensor or an iterable of them) so that their total
    ``norm_type``-norm is at most ``max_norm``; return that total norm, before clipping, as a 0-d tensor.

    ``norm_type``: a positive number, or ``inf`` (``float("inf")`` or ``"inf"``) for the largest absolute
    value. ``max_norm=float("inf")`` clips nothing and only measures. With ``error_if_nonfinite=True`` an
    inf or NaN total norm raises ``RuntimeError`` and leaves every gradient as it was; otherwise the
    gradients are scaled by it anyway (to NaN), as in PyTorch. Parameters without a gradient are skipped.
    The gradients get new values behind the same tensors, all at once.
    """
    params = _parameters(parameters)
    max_norm = _limit("max_norm", max_norm)
    p = checks.norm_type(_number(norm_type, "norm_type"))
    checks.flag("error_if_nonfinite", error_if_nonfinite)
    grads = _grads(params)
    if not grads:
        return zeros((), dtype=backend.float32)
    norm, new = _clip_eager(grads, max_norm, p, error_if_nonfinite, "")
    _write(grads, new, "clip_grad_norm_()")
    return norm


def clip_grad_value_(parameters: Any, clip_value: float) -> None:
    """Clamp every gradient of ``parameters`` (a tensor or an iterable of them) into
    ``[-clip_value, clip_value]``, element by element; all at once."""
    params = _parameters(parameters)
    clip_value = _limit("clip_value", clip_value)
    grads = _grads(params)
    new = mode.call_with_grad_mode(False, lambda: [g.clamp(-clip_value, clip_value) for g in grads])
    _write(grads, new, "clip_grad_value_()")


def clip_groups(optimizer: Any, error_if_nonfinite: bool = True) -> None:
    """``optimizer.clip_grad()``: clip the gradients of each parameter group that holds
    ``clip_grad_max_norm``, the norm taken over the group's gradients. All groups or none: a non-finite
    norm (with ``error_if_nonfinite``, OneFlow's choice) raises before any gradient changed."""
    checks.flag("error_if_nonfinite", error_if_nonfinite)
    groups = [(k, g) for k, g in enumerate(optimizer.param_groups) if checks.CLIP_MAX_NORM in g]
    if not groups:
        warnings.warn("optimizer.clip_grad() clipped nothing: no parameter group has clip_grad_max_norm. Give a "
                      "group 'clip_grad_max_norm' (and 'clip_grad_norm_type') when making the optimizer, as in "
                      "AdamW([{'params': model.parameters(), 'clip_grad_max_norm': 1.0, 'clip_grad_norm_type': 2.0}])",
                      UserWarning, stacklevel=3)
        return
    old, new = [], []
    for k, group in groups:
        max_norm, norm_type = group_settings(group)
        grads = _grads(group["params"])
        if grads:
            new += _clip_eager(grads, max_norm, norm_type, error_if_nonfinite, f" of parameter group {k}")[1]
            old += grads
    _write(old, new, "optimizer.clip_grad()")


def _clip_eager(grads: list[Tensor], max_norm: float, norm_type: float, error_if_nonfinite: bool, where: str
                ) -> tuple[Tensor, list[Tensor]]:
    norm = mode.call_with_grad_mode(False, total_norm, grads, norm_type)
    if error_if_nonfinite and not math.isfinite(float(norm.item())):
        raise RuntimeError(f"The total norm of order {norm_type} for the gradients{where} is non-finite "
                           f"({float(norm.item())}), so it cannot be clipped; no gradient was changed. To scale the "
                           "gradients by the non-finite norm anyway, pass error_if_nonfinite=False.")
    return norm, mode.call_with_grad_mode(False, scaled, grads, norm, max_norm)


def _write(grads: list[Tensor], new: list[Tensor], writer: str) -> None:
    """Give each gradient its new values (the same tensor objects, as PyTorch's in-place clipping), all at once
    (nothing below can fail, and a Ctrl-C waits for the end); a graph that saved a gradient
    (``create_graph=True``) then refuses to differentiate through it."""
    with defer_interrupts():
        for g, n in zip(grads, new):
            autograd.note_write(g, writer)
            g.array = n.array


def _parameters(parameters: Any) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"parameters must be tensors (e.g. model.parameters()), got a {type(p).__name__}")
    return params


def _grads(params: Iterable[Tensor]) -> list[Tensor]:
    """The gradients of ``params`` that exist (each once, should a parameter be listed twice)."""
    grads: dict[int, Tensor] = {}
    for p in params:
        g = p.grad
        if g is not None and not isinstance(g, Tensor):
            raise TypeError(f"the gradient of a parameter of shape {tuple(p.shape)} is a {type(g).__name__}, "
                            "not a tensor")
        if g is not None:
            grads.setdefault(id(g), g)
    return list(grads.values())


def _number(value: Any, name: str) -> Any:
    """PyTorch converts with ``float()``, so ``"inf"`` names the infinity norm; other strings are refused."""
    if isinstance(value, str):
        if value.strip().lower() not in ("inf", "+inf", "infinity"):
            raise ValueError(f"{name} must be a positive number or 'inf', got {value!r}")
        return math.inf
    return value


def _limit(name: str, value: Any) -> float:
    """A clipping bound: a real number >= 0 (``inf`` allowed: nothing is clipped)."""
    checks.real(name, value)
    if not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value}")
    return float(value)


def _wider(a: Any, b: Any) -> Any:
    return a if a is b or a.itemsize > b.itemsize else b


def _like(coef: Tensor, g: Tensor) -> Tensor:
    """The coefficient in ``g``'s dtype, on its device."""
    coef = coef if coef.dtype is g.dtype else coef.to(g.dtype)
    return coef if coef.device == g.device else coef.to(g.device)
