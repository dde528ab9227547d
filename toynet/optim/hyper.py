"""Checks of optimizer hyper-parameters, with PyTorch's messages ("Invalid learning rate: -1").

An optimizer checks its hyper-parameters when it is built, when a parameter group is added, and when a
state dict is loaded, so that a bad value fails where it was given instead of steps later. Numbers must be
Python ``int`` or ``float`` (not ``bool``, not strings), finite, and in range; flags must be ``True`` or
``False``.
"""

from __future__ import annotations

import math
from typing import Any

#: Keys a parameter group may hold besides the optimizer's own hyper-parameters and ``"params"``:
#: ``"initial_lr"`` is added by learning-rate schedulers.
SCHEDULER_KEYS = ("initial_lr",)
#: OneFlow's per-group gradient clipping: a group holding ``"clip_grad_max_norm"`` has its gradients scaled
#: so that their total ``"clip_grad_norm_type"``-norm is at most that (see :mod:`toynet.optim.clip_grad`).
CLIP_MAX_NORM, CLIP_NORM_TYPE = "clip_grad_max_norm", "clip_grad_norm_type"


def short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def real(name: str, value: Any) -> float:
    """``value`` if it is a real number (int or float, not bool); else ``TypeError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number (int or float), got {type(value).__name__} "
                        f"{short_repr(value)}")
    return value


def in_range(name: str, value: Any, label: str, low: float = 0.0, below: float | None = None) -> None:
    """``low <= value`` (and ``value < below``), finite; ``ValueError(f"Invalid {label}: {value}")`` if not."""
    real(name, value)
    if not (math.isfinite(value) and low <= value and (below is None or value < below)):
        raise ValueError(f"Invalid {label}: {value}")


def flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {short_repr(value)}")


def check_common(hyper: dict) -> None:
    """The checks every optimizer shares: ``lr``, a scheduler's ``initial_lr``, and the clipping keys."""
    if "lr" in hyper:
        in_range("lr", hyper["lr"], "learning rate")
    if "initial_lr" in hyper:
        in_range("initial_lr", hyper["initial_lr"], "initial learning rate")
    check_clip(hyper)


def check_clip(hyper: dict) -> None:
    """A group's ``clip_grad_max_norm`` is a positive finite number, and its ``clip_grad_norm_type`` a positive
    number or ``inf`` (``float("inf")``: the largest absolute value); a norm type alone is refused."""
    if CLIP_MAX_NORM in hyper:
        value = real(CLIP_MAX_NORM, hyper[CLIP_MAX_NORM])
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"clip_grad_max_norm must be a positive finite number, got {value}")
    elif CLIP_NORM_TYPE in hyper:
        raise ValueError("a parameter group has clip_grad_norm_type but no clip_grad_max_norm: give both (the "
                         "group's gradients are clipped to that norm), or neither")
    if CLIP_NORM_TYPE in hyper:
        norm_type(hyper[CLIP_NORM_TYPE], CLIP_NORM_TYPE)


def norm_type(value: Any, name: str = "norm_type") -> float:
    """``value`` as the order p of a p-norm: a positive number, or ``inf``; ``ValueError``/``TypeError`` if not."""
    p = real(name, value)
    if not p > 0:   # (NaN fails too)
        raise ValueError(f"{name} must be a positive number or inf (float('inf')), got {p}")
    return float(p)


def check_extra(key: Any, value: Any, known: Any) -> None:
    """A loaded group's key that is not a hyper-parameter: kept if it is plain data (a number, a string),
    as PyTorch keeps a user's own group entries; anything else is refused."""
    if not isinstance(key, str):
        raise TypeError(f"parameter group keys are strings, got {type(key).__name__} {short_repr(key)}")
    if key in known or key == "params":
        return
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise TypeError(f"unknown entry {key!r} holds a {type(value).__name__}; a parameter group holds "
                        f"{sorted(known)} and plain numbers or strings only")
