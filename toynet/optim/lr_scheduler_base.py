"""The base class of toynet's learning-rate schedulers, :class:`LRScheduler`: the epoch counter, each group's base
lr, an all-or-nothing ``step``, and state dicts checked before they load (``checked_state``, then
``_apply_state``). The schedulers themselves are in :mod:`toynet.optim.lr_scheduler` (PyTorch's) and
:mod:`toynet.optim.lr_warmup` (warm-up, and schedules in sequence)."""

from __future__ import annotations

import math
from collections.abc import Callable
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
