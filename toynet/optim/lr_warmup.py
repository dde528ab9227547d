"""Warm-up, and schedules one after another: a cosine decay with a warm-up, written OneFlow's way or PyTorch's.

A large model trained with a large learning rate from its first step often diverges: Adam's second moments
are still estimates of a few batches. So the learning rate *warms up*, rising over the first steps, then
decays, often along a cosine. Two spellings of that schedule (``W`` warm-up steps, then ``D`` of decay)::

    # OneFlow: a warm-up wrapped around the decay
    decay = flow.optim.lr_scheduler.CosineDecayLR(optimizer, decay_steps=D, alpha=0.1)
    schedule = flow.optim.lr_scheduler.WarmupLR(decay, warmup_factor=0.01, warmup_iters=W, warmup_prefix=True)

    # PyTorch: two schedules in sequence
    warmup = flow.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, end_factor=1.0, total_iters=W)
    decay = flow.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=D, eta_min=0.1 * lr)
    schedule = flow.optim.lr_scheduler.SequentialLR(optimizer, [warmup, decay], milestones=[W])

Both give the same learning rate at every step up to ``W + D`` (after that OneFlow's decay stays at
``alpha·lr`` while PyTorch's cosine climbs back). Call ``schedule.step()`` after each ``optimizer.step()``,
or hand the schedule to an ``nn.Graph``: ``graph.add_optimizer(optimizer, lr_sch=schedule)`` steps it
after each call. Step only the outer schedule: it drives the ones inside it.

:class:`LinearLR` and :class:`SequentialLR` follow PyTorch (the chainable form, a hand-edited learning rate
carries on); :class:`CosineDecayLR` and :class:`WarmupLR` follow OneFlow, whose schedulers compute every
step's learning rate from the base one (the closed form). Their state dicts hold the schedulers inside them,
and loading checks them all before it changes any.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from ..utils.interrupts import defer_interrupts
from . import hyper as checks
from .lr_scheduler_base import LRScheduler, _number, _positive_int
from .optimizer import Optimizer

# ----------------------------------------------------------------------------------- setting checks


def _factor(low_open: bool) -> Any:
    """A check of a multiplicative factor in ``[0, 1]`` (``(0, 1]`` if ``low_open``), PyTorch's messages."""
    def check(scheduler: str, name: str, value: Any) -> float:
        _number(scheduler, name, value)
        if value > 1.0 or value < 0 or (low_open and value == 0):
            bounds = "greater than 0 and less or equal to 1" if low_open else "between 0 and 1"
            raise ValueError(f"{scheduler}: {name} (a multiplicative factor) expected to be {bounds}, got {value}")
        return value
    return check


def _count(scheduler: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{scheduler}: {name} must be an integer >= 0, got {value!r}")
    return value


def _non_negative(scheduler: str, name: str, value: Any) -> float:
    if _number(scheduler, name, value) < 0:
        raise ValueError(f"{scheduler}: {name} must be >= 0, got {value}")
    return value


def _method(scheduler: str, name: str, value: Any) -> str:
    if value not in ("linear", "constant"):
        raise ValueError(f"{scheduler}: {name} must be 'linear' or 'constant', got {value!r}")
    return value


def _flag(scheduler: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{scheduler}: {name} must be True or False, got {value!r}")
    return value


def _closed_form(scheduler: LRScheduler, owner: str) -> None:
    """Refuse a scheduler without a closed form (``lr_at``), which ``owner`` needs."""
    if type(scheduler).lr_at is LRScheduler.lr_at:
        raise TypeError(f"{owner} needs schedulers with a closed form (lr_at); {type(scheduler).__name__} has none")


# --------------------------------------------------------------------------------------- PyTorch's


class LinearLR(LRScheduler):
    """Scale the base lr by a factor going in a straight line from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs, then keep ``end_factor``: ``lr = base_lr · (s + (e - s)·min(epoch, T)/T)``.

    The usual warm-up: ``LinearLR(optimizer, start_factor=0.01, total_iters=100)`` rises from 1% of the lr
    to all of it over 100 steps. ``0 < start_factor <= 1`` and ``0 <= end_factor <= 1``, as in PyTorch.
    """

    _settings = {"start_factor": _factor(low_open=True), "end_factor": _factor(low_open=False),
                 "total_iters": _positive_int}

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        for name, value in (("start_factor", start_factor), ("end_factor", end_factor), ("total_iters", total_iters)):
            setattr(self, name, self._settings[name]("LinearLR", name, value))
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        s, e, t = self.start_factor, self.end_factor, self.last_epoch
        if t == 0:
            return [lr * s for lr in self._current_lrs()]
        if self._initial or t > self.total_iters:
            return self._current_lrs()
        # lr(t) / lr(t - 1), each the straight line's factor at its epoch
        ratio = 1.0 + (e - s) / (self.total_iters * s + (t - 1) * (e - s))
        return [lr * ratio for lr in self._current_lrs()]

    def lr_at(self, epoch: int) -> list[float]:
        s, e, total = self.start_factor, self.end_factor, self.total_iters
        return [base * (s + (e - s) * min(total, epoch) / total) for base in self.base_lrs]


class _Nesting(LRScheduler):
    """A scheduler made of others (attribute ``_inner``): its state dict holds theirs, and loading checks
    theirs with its own before it changes anything."""

    _inner = ""

    def _children(self, value: Any) -> list:
        return [] if value is None else list(value) if isinstance(value, list) else [value]

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        inner = getattr(self, self._inner)
        nested = [s.state_dict() for s in self._children(inner)]
        state[self._inner] = nested if isinstance(inner, list) else nested[0] if nested else None
        return state

    def _checked_field(self, key: str, value: Any) -> Any:
        if key != self._inner:
            return super()._checked_field(key, value)
        inner = getattr(self, self._inner)
        mine, saved = self._children(inner), self._children(value)
        if isinstance(inner, list) is not isinstance(value, list) or len(mine) != len(saved):
            raise ValueError(f"{type(self).__name__}.load_state_dict: {key} holds {len(saved)} scheduler states, "
                             f"this one is made of {len(mine)} schedulers")
        return [s.checked_state(v) for s, v in zip(mine, saved)]

    def _apply_state(self, checked: dict[str, Any]) -> None:
        nested = checked.pop(self._inner)
        with defer_interrupts():
            super()._apply_state(checked)
            for scheduler, state in zip(self._children(getattr(self, self._inner)), nested):
                scheduler._apply_state(state)


class SequentialLR(_Nesting):
    """Run ``schedulers`` one after another: the first until epoch ``milestones[0]``, the second from there
    (started afresh: its epoch 0 is the milestone) until ``milestones[1]``, and so on, as PyTorch's does.

    Every scheduler must drive ``optimizer``; make them first, then the sequence, and step only the
    sequence. ``milestones``: one fewer than the schedulers, whole numbers in increasing order.
    """

    _inner = "_schedulers"

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"SequentialLR needs a toynet optimizer, got {type(optimizer).__name__}")
        if not isinstance(schedulers, (list, tuple)) or not schedulers:
            raise ValueError("SequentialLR expects a list of at least one scheduler")
        for i, scheduler in enumerate(schedulers):
            if not isinstance(scheduler, LRScheduler):
                raise TypeError(f"SequentialLR: schedulers[{i}] is a {type(scheduler).__name__}, not a scheduler")
            if scheduler.optimizer is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same optimizer, but "
                                 f"schedulers[{i}] ({type(scheduler).__name__}) drives another one")
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, int) or last_epoch < -1:
            raise ValueError(f"last_epoch must be an integer >= -1, got {last_epoch!r}")
        self._milestones = self._checked_milestones("SequentialLR", list(milestones), len(schedulers))
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch + 1
        self._initial = False
        # As PyTorch: back to the base lrs, undo the first step each scheduler made when it was made, then
        # the active scheduler makes its first step again.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        _undo_first_step(self)
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._initial = True
        try:
            first.step()
        finally:
            first._initial = False
        self._last_lr = first.get_last_lr()

    def _checked_field(self, key: str, value: Any) -> Any:
        if key == "_milestones":
            return self._checked_milestones(type(self).__name__, value, len(self._schedulers))
        return super()._checked_field(key, value)

    @staticmethod
    def _checked_milestones(name: str, value: Any, schedulers: int) -> list[int]:
        if not isinstance(value, (list, tuple)) or len(value) != schedulers - 1:
            count = len(value) if isinstance(value, (list, tuple)) else checks.short_repr(value)
            raise ValueError(f"{name} expects one milestone fewer than schedulers: {schedulers} schedulers, "
                             f"{count} milestones")
        for m in value:
            if isinstance(m, bool) or not isinstance(m, int) or m < 0:
                raise TypeError(f"{name}: milestones must be whole numbers (epochs) >= 0, got {checks.short_repr(m)}")
        if list(value) != sorted(value):
            raise ValueError(f"{name}: milestones must be in increasing order, got {list(value)}")
        return list(value)

    def _active(self, epoch: int) -> tuple[LRScheduler, int | None]:
        """The scheduler in charge at ``epoch``, and the milestone it started at (None for the first)."""
        i = bisect.bisect_right(self._milestones, epoch)
        return self._schedulers[i], self._milestones[i - 1] if i else None

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch: the scheduler in charge steps, or starts (at its epoch 0, in closed form) if
        this epoch is its milestone; with ``epoch``, jump there with the closed forms. All or nothing."""
        target = self.last_epoch + 1 if epoch is None else epoch
        if isinstance(target, bool) or not isinstance(target, int) or target < 0:
            raise ValueError(f"SequentialLR.step: epoch must be an integer >= 0, got {target!r}")
        scheduler, start = self._active(target)
        with defer_interrupts():   # (a failed step restores the scheduler; nothing of ours changed yet)
            if epoch is not None or start == target:
                scheduler.step(target - (start or 0))
            else:
                scheduler.step()
            self.last_epoch, self._last_lr = target, scheduler.get_last_lr()

    def lr_at(self, epoch: int) -> list[float]:
        scheduler, start = self._active(epoch)
        return scheduler.lr_at(epoch - (start or 0))


def _undo_first_step(scheduler: LRScheduler) -> None:
    """Take back the step every scheduler inside ``scheduler`` made when it was made (PyTorch's
    ``recursive_undo``: a sequence's own count stays)."""
    for inner in getattr(scheduler, "_schedulers", ()):
        if isinstance(inner, SequentialLR):
            _undo_first_step(inner)
        else:
            inner.last_epoch -= 1


# --------------------------------------------------------------------------------------- OneFlow's


class CosineDecayLR(LRScheduler):
    r"""OneFlow's cosine decay: from the base lr down to ``alpha · base_lr`` over ``decay_steps`` steps, then
    stay there::

        lr(t) = base_lr · ((1 - alpha) · (1 + cos(π · min(t, D) / D)) / 2 + alpha)

    Up to ``D`` this is PyTorch's ``CosineAnnealingLR(T_max=D, eta_min=alpha · base_lr)``. Every step
    computes from the base lr, as OneFlow's does (a hand-edited lr is overwritten).
    """

    _settings = {"decay_steps": _positive_int, "alpha": _non_negative}

    def __init__(self, optimizer: Optimizer, decay_steps: int, alpha: float = 0.0, last_step: int = -1):
        self.decay_steps = _positive_int("CosineDecayLR", "decay_steps", decay_steps)
        self.alpha = _non_negative("CosineDecayLR", "alpha", alpha)
        super().__init__(optimizer, last_step)

    def get_lr(self) -> list[float]:
        return self.lr_at(self.last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        cos_decay = 0.5 * (1 + math.cos(math.pi * min(epoch, self.decay_steps) / self.decay_steps))
        return [base * ((1 - self.alpha) * cos_decay + self.alpha) for base in self.base_lrs]


class WarmupLR(_Nesting):
    """OneFlow's warm-up, in front of another schedule or of a constant lr.

    For the first ``warmup_iters`` steps the lr is the base lr times a factor that starts at
    ``warmup_factor`` and, with ``warmup_method="linear"``, rises in a straight line (``"constant"``: stays).
    Then ``scheduler_or_optimizer`` takes over: a scheduler (which must have a closed form, as all of
    toynet's do) or, given an optimizer, the base lr itself.

    ``warmup_prefix=False`` (OneFlow's default): the warm-up *overlays* the schedule's first steps; the
    schedule counts from step 0 and the linear warm-up ends where the schedule is at step ``warmup_iters``.
    ``warmup_prefix=True``: the warm-up comes *before* the schedule, which starts at step ``warmup_iters``
    from its own step 0, and the linear warm-up rises to the base lr: PyTorch's
    ``SequentialLR([LinearLR(...), schedule], milestones=[warmup_iters])``.

    The wrapped scheduler is not stepped itself: step the warm-up only. OneFlow computes the end of a linear
    warm-up from the first parameter group and refuses groups with other base lrs; here each group's is its
    own (the same numbers where OneFlow has them).
    """

    _inner = "scheduler"
    _settings = {"warmup_factor": _factor(low_open=False), "warmup_iters": _count, "warmup_method": _method,
                 "warmup_prefix": _flag}

    def __init__(self, scheduler_or_optimizer: LRScheduler | Optimizer, warmup_factor: float = 1.0 / 3,
                 warmup_iters: int = 5, warmup_method: str = "linear", warmup_prefix: bool = False,
                 last_step: int = -1):
        if isinstance(scheduler_or_optimizer, LRScheduler):
            _closed_form(scheduler_or_optimizer, "WarmupLR")
            scheduler, optimizer = scheduler_or_optimizer, scheduler_or_optimizer.optimizer
        elif isinstance(scheduler_or_optimizer, Optimizer):
            scheduler, optimizer = None, scheduler_or_optimizer
        else:
            raise TypeError("WarmupLR: scheduler_or_optimizer must be a toynet scheduler or optimizer, got "
                            f"{type(scheduler_or_optimizer).__name__}")
        for name, value in (("warmup_factor", warmup_factor), ("warmup_iters", warmup_iters),
                            ("warmup_method", warmup_method), ("warmup_prefix", warmup_prefix)):
            setattr(self, name, self._settings[name]("WarmupLR", name, value))
        if scheduler is None and warmup_iters == 0:
            raise ValueError("WarmupLR: warmup_iters can't be 0 when warming up an optimizer (there is nothing "
                             "else to schedule)")
        self.scheduler = scheduler
        super().__init__(optimizer, last_step)

    def get_lr(self) -> list[float]:
        return self.lr_at(self.last_epoch)

    def lr_at(self, epoch: int) -> list[float]:
        warmup, inner = self.warmup_iters, self.scheduler
        if epoch >= warmup:   # the schedule's turn (or the base lr's)
            return list(self.base_lrs) if inner is None else inner.lr_at(epoch - warmup if self.warmup_prefix else epoch)
        if self.warmup_method == "constant":
            return [base * self.warmup_factor for base in self.base_lrs]
        ends = self.base_lrs if inner is None or self.warmup_prefix else inner.lr_at(warmup)
        start = self.warmup_factor
        return [base * (start + (end / base - start) * (epoch / warmup)) if base else 0.0
                for base, end in zip(self.base_lrs, ends)]
