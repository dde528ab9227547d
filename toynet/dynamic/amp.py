"""Loss scaling for mixed-precision training: ``flow.amp.GradScaler`` and ``flow.amp.StaticGradScaler``.

float16 holds numbers from about 6e-8 to 65504. Gradients are often smaller than the low end, so a
float16 backward turns them into zeros. *Loss scaling* multiplies the loss by a large factor S before
backward, so every gradient is S times larger and stays representable; the gradients are divided by S
again (*unscaled*) before the optimizer sees them. Too large an S overflows instead: some gradient
becomes ``inf`` or ``NaN``. A :class:`GradScaler` therefore adjusts S as training goes, as OneFlow's
and PyTorch's do:

* a step whose gradients are all finite is applied; after ``growth_interval`` such steps in a row,
  S is multiplied by ``growth_factor`` (try a larger scale);
* a step with an ``inf``/``NaN`` gradient is *skipped* (no parameter or optimizer state changes) and S
  is multiplied by ``backoff_factor`` (the scale was too large).

In an ``nn.Graph`` (``self.set_grad_scaler(scaler)``) all of that is part of the compiled step: S and
the count of good steps are states of the graph, and the skip is a ``where`` that keeps the old value
of every state when a gradient was not finite (see :mod:`toynet.nn.graph_amp`). In Eager mode the
scaler is used as PyTorch's is: ``scaler.scale(loss).backward(); scaler.step(optimizer);
scaler.update()``. Both modes apply the same rule, :meth:`GradScaler.next_state`, written with tensor
operations so that it runs on eager tensors and is traced on lazy ones.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from .creation import tensor
from .functional import where
from .tensor import Tensor


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"GradScaler: {name} must be a positive number, got {value!r}")
    return float(value)


class GradScaler:
    """Dynamic loss scaling: start at ``init_scale``; on an inf/NaN gradient skip the step and multiply
    the scale by ``backoff_factor``; after ``growth_interval`` good steps in a row multiply it by
    ``growth_factor``."""

    dynamic = True

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000):
        _positive("init_scale", init_scale)
        if _positive("growth_factor", growth_factor) < 1.0:
            raise ValueError(f"GradScaler: growth_factor must be >= 1 (it makes the scale larger), "
                             f"got {growth_factor}")
        if not _positive("backoff_factor", backoff_factor) < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be < 1 (it makes the scale smaller), "
                             f"got {backoff_factor}")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a whole number >= 1, got {growth_interval!r}")
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        #: The current scale S and the number of good steps since it last changed: 0-d tensors, which a
        #: graph reads and writes as states ("System-Train-LossScale", "...-GrowthTracker").
        self.scale_tensor = tensor(float(init_scale), dtype=backend.float32)
        self.growth_tracker = tensor(0, dtype=backend.int64)
        self._found_inf: dict[int, bool] = {}   # id(optimizer) -> did its unscaled gradients overflow?

    # ------------------------------------------------------------------------------ the rule

    def settings(self) -> tuple:
        """What a compiled step bakes in (a graph compiles again if it changes)."""
        return (type(self).__name__, self.growth_factor, self.backoff_factor, self.growth_interval)

    def next_state(self, scale: Tensor, tracker: Tensor, finite: Tensor) -> tuple[Tensor, Tensor]:
        """The new (scale, growth tracker) after a step whose gradients were all finite or not (``finite``,
        a 0-d bool tensor). Tensor operations only: the same code in Eager and Graph mode."""
        good_steps = where(finite, tracker + 1, 0)
        grow = good_steps >= self.growth_interval
        new_scale = where(finite, where(grow, scale * self.growth_factor, scale), scale * self.backoff_factor)
        return new_scale, where(grow, 0, good_steps)

    @staticmethod
    def all_finite(grads: list[Tensor]) -> Tensor:
        """A 0-d bool tensor: are all of ``grads`` free of inf and NaN? (``g * 0`` is 0 for a finite
        number and NaN for inf or NaN, so the sum is 0 exactly when every element is finite.)"""
        total = None
        for g in grads:
            part = (g.float() * 0).sum()
            total = part if total is None else total + part
        return (total if total is not None else tensor(0.0)) == 0

    # ------------------------------------------------------------------------------ Eager mode

    def get_scale(self) -> float:
        return float(self.scale_tensor.numpy())

    def scale(self, loss: Tensor) -> Tensor:
        """``loss`` times the current scale (call ``.backward()`` on the result)."""
        return loss * self.scale_tensor.to(loss.device)

    def unscale_(self, optimizer: Any) -> None:
        """Divide the gradients of ``optimizer``'s parameters by the scale, in place, and note whether
        any is inf or NaN (``step`` then skips)."""
        if id(optimizer) in self._found_inf:
            raise RuntimeError("GradScaler.unscale_() was already called on this optimizer since the last "
                               "update(); call it once per step")
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        inverse = 1.0 / self.get_scale()
        for g in grads:
            g.array[...] = g.array * g.array.dtype.type(inverse)
        self._found_inf[id(optimizer)] = not bool(self.all_finite(grads).numpy())

    def step(self, optimizer: Any) -> bool:
        """Unscale (unless done) and run ``optimizer.step()``, or skip it if a gradient was not finite.
        Returns whether the step was applied."""
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        if self._found_inf[id(optimizer)]:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        """Adjust the scale after a step (every optimizer's verdict counts), and start the next step."""
        if not self._found_inf:
            raise RuntimeError("GradScaler.update() needs a step first: call scaler.step(optimizer)")
        finite = tensor(not any(self._found_inf.values()), dtype=backend.bool_)
        self.scale_tensor, self.growth_tracker = self.next_state(self.scale_tensor, self.growth_tracker, finite)
        self._found_inf.clear()

    # ------------------------------------------------------------------------------ saving

    def state_dict(self) -> dict:
        """The scale and the count of good steps (``graph.state_dict()`` keeps it as System-Train-GradScaler)."""
        return {"scale": self.get_scale(), "growth_tracker": int(self.growth_tracker.numpy())}

    def checked_state(self, state: Any) -> dict:
        """``state`` as :meth:`state_dict` made it, or a ValueError saying what is wrong with it."""
        if not isinstance(state, dict) or set(state) != {"scale", "growth_tracker"}:
            raise ValueError(f"should be a dict with the keys 'scale' and 'growth_tracker', got {state!r}")
        scale, tracker = state["scale"], state["growth_tracker"]
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
            raise ValueError(f"its scale should be a positive finite number, got {scale!r}")
        if isinstance(tracker, bool) or not isinstance(tracker, int) or tracker < 0:
            raise ValueError(f"its growth_tracker should be a whole number >= 0, got {tracker!r}")
        return {"scale": float(scale), "growth_tracker": tracker}

    def load_state_dict(self, state: dict) -> None:
        checked = self.checked_state(state)
        # Written into the very tensors a compiled graph reads, so its plan stays valid.
        self.scale_tensor.array[...] = checked["scale"]
        self.growth_tracker.array[...] = checked["growth_tracker"]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(scale={self.get_scale()}, growth_factor={self.growth_factor}, "
                f"backoff_factor={self.backoff_factor}, growth_interval={self.growth_interval})")


class StaticGradScaler(GradScaler):
    """A fixed loss scale: gradients are scaled and unscaled, the scale never changes and no step is
    skipped (OneFlow's static loss scaling)."""

    dynamic = False

    def __init__(self, scale_factor: float):
        super().__init__(init_scale=_positive("scale_factor", scale_factor), growth_factor=1.0,
                         backoff_factor=0.5, growth_interval=1)

    def settings(self) -> tuple:
        return (type(self).__name__,)

    def next_state(self, scale: Tensor, tracker: Tensor, finite: Tensor) -> tuple[Tensor, Tensor]:
        return scale, tracker

    def step(self, optimizer: Any) -> bool:
        if id(optimizer) not in self._found_inf:
            self.unscale_(optimizer)
        optimizer.step()
        return True


__all__ = ["GradScaler", "StaticGradScaler"]
