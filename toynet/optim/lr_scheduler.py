"""Learning-rate schedulers: change ``group["lr"]`` of an optimizer as training goes on (PyTorch's formulas).

Call ``scheduler.step()`` once per epoch (or per iteration), *after* ``optimizer.step()``::

    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)
    for epoch in range(100):
        train_one_epoch()              # calls optimizer.step() many times
        scheduler.step()               # lr: 0.1 for epochs 0-29, 0.01 for 30-59, ...

Warm-up and schedules in sequence (``LinearLR``, ``SequentialLR``, ``CosineDecayLR``, ``WarmupLR``) are in
:mod:`toynet.optim.lr_warmup`, and reached from here too. Each scheduler has two forms of its formula, as in
PyTorch:

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

from ..utils.interrupts import defer_interrupts
from . import hyper as checks
from .optimizer import Optimizer


class LRScheduler:
    """Base class: holds the optimizer, the epoch counter and each group's base (initial) learning rate.

    ``last_epoch=-1`` starts a new schedule: each group's current lr is recorded as its
    ``"initial_lr"``. A larger ``last_epoch`` resumes one, which needs ``"initial_lr"`` in every group
    (load the optimizer's state dict first).
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs a toynet optimizer, got {type(optimizer).__name__}")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError(f"last_epoch must be an integer >= -1, got {last_epoch!r}")
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param_groups[{i}] has no 'initial_lr', which resuming a schedule with "
                                   f"last_epoch={last_epoch} needs; load the optimizer's state dict first")
        self.optimizer = optimizer
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        # The constructor makes the first step, moving last_epoch to 0 (or one past the resumed epoch);
        # schedulers that would change the lr on every step check `_initial` to keep the starting lr.
        self._initial = True
        try:
            self.step()
        finally:
            self._initial = False

    def get_lr(self) -> list[float]:
        """The chainable form: each group's lr for ``last_epoch``, from its current lr."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr()")

    def lr_at(self, epoch: int) -> list[float]:
        """The closed form: each group's lr at ``epoch``, from the base lrs alone."""
        raise NotImplementedError(f"{type(self).__name__} has no closed form")

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``, using the closed form) and set each group's lr; all or
        nothing (an error in the formula, or a Ctrl-C, leaves the epoch and every lr as they were)."""
        previous = self.last_epoch
        try:
            if epoch is None:
                self.last_epoch += 1  # get_lr reads it
                values = list(self.get_lr())
            else:
                self.last_epoch = epoch
                values = list(self.lr_at(epoch))
        except BaseException:
            self.last_epoch = previous
            raise
        groups = self.optimizer.param_groups
        with defer_interrupts():
            for group, lr in zip(groups, values):
                group["lr"] = lr
            self._last_lr = [group["lr"] for group in groups]

    @property
    def last_step(self) -> int:
        """OneFlow's name for :attr:`last_epoch` (OneFlow's schedulers count steps)."""
        return self.last_epoch

    @last_step.setter
    def last_step(self, value: int) -> None:
        self.last_epoch = value

    def get_last_lr(self) -> list[float]:
        """The learning rates set by the last ``step()``, one per parameter group."""
        return list(self._last_lr)

    def _current_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    # ----------------------------------------------------------------------------- state dict

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's settings and progress (everything but the optimizer), as plain data."""
        return {key: value for key, value in vars(self).items() if key not in ("optimizer", "_initial")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned. Everything is checked first (the same keys, so the
        same kind of scheduler; each setting as the constructor checks it; one learning rate per parameter
        group); a state dict that does not fit raises and changes nothing."""
        self._apply_state(self.checked_state(state_dict))

    def checked_state(self, state_dict: Any) -> dict[str, Any]:
        """``state_dict`` checked, ready for :meth:`_apply_state` (``TypeError``/``ValueError`` if wrong)."""
        name = type(self).__name__
        if not isinstance(state_dict, dict):
            raise TypeError(f"a scheduler state dict is a dict, got {type(state_dict).__name__}")
        own = self.state_dict()
        unknown = sorted(map(str, set(state_dict) - set(own)))
        missing = sorted(set(own) - set(state_dict))
        if unknown or missing:
            raise ValueError(f"{name}.load_state_dict: unexpected keys {unknown}, missing keys {missing} (was it "
                             "saved by another kind of scheduler?)")
        return {key: self._checked_field(key, value) for key, value in state_dict.items()}

    def _checked_field(self, key: str, value: Any) -> Any:
        name = type(self).__name__
        groups = len(self.optimizer.param_groups)
        if key == "last_epoch":
            if isinstance(value, bool) or not isinstance(value, int) or value < -1:
                raise ValueError(f"{name}: last_epoch must be an integer >= -1, got {checks.short_repr(value)}")
            return value
        if key in ("base_lrs", "_last_lr"):
            if not isinstance(value, (list, tuple)) or len(value) != groups:
                count = len(value) if isinstance(value, (list, tuple)) else checks.short_repr(value)
                raise ValueError(f"{name}.load_state_dict: {key} has {count} entries, the optimizer has "
                                 f"{groups} parameter groups")
            for lr in value:
                checks.in_range(key, lr, "learning rate")
            return list(value)
        check = self._settings.get(key)
        if check is None:  # a subclass's own attribute: same type as now
            if type(value) is not type(getattr(self, key)):
                raise TypeError(f"{name}: {key} should be a {type(getattr(self, key)).__name__}, got "
                                f"{type(value).__name__}")
            return value
        return check(name, key, value)

    def _apply_state(self, checked: dict[str, Any]) -> None:
        with defer_interrupts():
            self.__dict__.update(checked)

    #: Setting name -> check(scheduler, name, value) returning the value to keep (subclasses fill it).
    _settings: dict[str, Callable[[str, str, Any], Any]] = {}


def _positive_int(scheduler: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{scheduler}: {name} must be a positive integer, got {value!r}")
    return value


def _number(scheduler: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{scheduler}: {name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{scheduler}: {name} must be finite, got {value}")
    return value


def _milestones(scheduler: str, name: str, value: Any) -> list[int]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{scheduler}: {name} must be a list of integers (epochs), got {type(value).__name__}")
    for m in value:
        if isinstance(m, bool) or not isinstance(m, int):
            raise TypeError(f"{scheduler}: milestones must be integers (epochs), got {checks.short_repr(m)}")
    return sorted(value)


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


from .lr_warmup import CosineDecayLR, LinearLR, SequentialLR, WarmupLR  # noqa: E402,F401  (they build on the above)
