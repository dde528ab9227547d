"""Learning-rate schedulers: change ``group["lr"]`` of an optimizer as training goes on (PyTorch's formulas).

Call ``scheduler.step()`` once per epoch (or per iteration), *after* ``optimizer.step()``::

    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    for epoch in range(100):
        train_one_epoch()              # calls optimizer.step() many times
        scheduler.step()               # lr: 0.1 for epochs 0-29, 0.01 for 30-59, ...

Warm-up and schedules in sequence (``LinearLR``, ``SequentialLR``, ``CosineDecayLR``, ``WarmupLR``) are in
:mod:`toynet.optim.lr_warmup`, and the base class :class:`LRScheduler` in :mod:`toynet.optim.lr_scheduler_base`;
all are reached from here. Each scheduler has two forms of its formula, as in PyTorch:

* :meth:`LRScheduler.get_lr`, the *chainable* form used by ``step()``: the next lr is computed from the
  current ``group["lr"]``, so a change made by hand (or by another scheduler) carries on;
* :meth:`LRScheduler.lr_at`, the *closed* form: the lr at any epoch from the base lr alone. Graph mode can
  use it to compute each step's lr from the step count, as OneFlow does.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from typing import Any

from .lr_scheduler_base import LRScheduler, _milestones, _number, _positive_int
from .lr_warmup import CosineDecayLR, LinearLR, SequentialLR, WarmupLR  # noqa: F401
from .optimizer import Optimizer


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs: ``lr = base_lr · gamma^(epoch // step_size)``."""

    _settings = {"step_size": _positive_int, "gamma": _number}

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _number("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone epoch: ``lr = base_lr · gamma^(milestones passed)``.

    A milestone listed twice multiplies by ``gamma`` twice.
    """

    _settings = {"milestones": _milestones, "gamma": _number}

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = _milestones("MultiStepLR", "milestones", list(milestones))
        self.gamma = _number("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        times = self.milestones.count(self.last_epoch)
        if times == 0:
            return self._current_lrs()
        return [lr * self.gamma ** times for lr in self._current_lrs()]

    def lr_at(self, epoch: int) -> list[float]:
        passed = bisect.bisect_right(self.milestones, epoch)
        return [base * self.gamma ** passed for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch: ``lr = base_lr · gamma^epoch``."""

    _settings = {"gamma": _number}

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = _number("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._initial:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]

    def lr_at(self, epoch: int) -> list[float]:
        return [base * self.gamma ** epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    r"""Follow half a cosine from the base lr down to ``eta_min`` over ``T_max`` epochs (SGDR, no restarts)::

        lr(t) = eta_min + (base_lr - eta_min) · (1 + cos(π t / T_max)) / 2

    Past ``T_max`` the cosine carries on and the lr climbs back, as in PyTorch.
    """

    _settings = {"T_max": _positive_int, "eta_min": _number}

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _number("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, T, low = self.last_epoch, self.T_max, self.eta_min
        if self._initial:
            return self._current_lrs()
        if (t - 1 - T) % (2 * T) == 0:
            # Leaving the bottom of the cosine: the ratio below would divide by 1 + cos(π) = 0.
            return [lr + (base - low) * (1 - math.cos(math.pi / T)) / 2
                    for base, lr in zip(self.base_lrs, self._current_lrs())]
        # lr(t) - eta_min is proportional to 1 + cos(π t / T): scale the current distance by the ratio.
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [low + ratio * (lr - low) for lr in self._current_lrs()]

    def lr_at(self, epoch: int) -> list[float]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2
                for base in self.base_lrs]


class LambdaLR(LRScheduler):
    """``lr = base_lr · lr_lambda(epoch)``; one function for every group, or a list with one per group.

    The functions are code, not data: :meth:`state_dict` leaves them out, so re-create the scheduler with
    the same functions before loading its state.
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | list, last_epoch: int = -1):
        groups = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
        lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * groups
        if len(lambdas) != groups:
            raise ValueError(f"LambdaLR: expected {groups} lr_lambdas (one per parameter group), "
                             f"got {len(lambdas)}")
        if not all(callable(f) for f in lambdas):
            raise TypeError("LambdaLR: lr_lambda must be a function of the epoch (or a list of them)")
        self.lr_lambdas = lambdas
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return self.lr_at(self.last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        return [base * f(epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}
