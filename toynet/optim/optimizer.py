"""The :class:`Optimizer` base class: parameter groups, per-parameter state, and an all-or-nothing step.

An optimizer turns gradients into new parameter values. Every optimizer in toynet writes its maths
*once*, in the pure method :meth:`Optimizer.update`::

    new_param, new_state = optimizer.update(param, grad, state, group, lr)

``update`` uses toynet tensor operations only and changes nothing: it returns new tensors. That one rule
then runs two ways, like the op definitions do:

* **Eager mode**: :meth:`Optimizer.step` calls it on every parameter that has a gradient, under
  ``no_grad``, and commits the results;
* **Graph mode**: ``nn.Graph`` calls the very same method on *lazy* tensors while tracing, which appends
  the update nodes to the training graph (``lr`` is then a lazy 0-d tensor, which is why the rules write
  ``lr * x`` and never branch on the value of ``lr``).

Per-parameter state (momentum buffers, Adam's moments) lives in :attr:`Optimizer.state`, a dict keyed by
the parameter object; each value is a dict of tensors ("slots") that :meth:`Optimizer.init_state` creates.

:meth:`Optimizer.step` first computes *every* update and only then writes any of them, so an error part
way (a gradient of the wrong shape, a device mismatch) leaves all parameters and all state as they were;
the writes themselves are one call of C code (:func:`commit`), so a Ctrl-C lands before or after them,
never between two. Saving and loading the state (``state_dict``) is :mod:`toynet.optim.optimizer_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import collections
import itertools
import operator

from .. import mode
from ..dynamic import autograd
from ..dynamic.creation import zeros_like
from ..dynamic.tensor import Tensor
from . import hyper as checks
from .optimizer_state import OptimizerState


class Optimizer(OptimizerState):
    """Base class of toynet's optimizers (:class:`~toynet.optim.SGD`, :class:`~toynet.optim.Adam`).

    ``params`` is an iterable of parameters, or of dicts (*parameter groups*) such as
    ``{"params": model.head.parameters(), "lr": 0.1}``; a group's missing hyper-parameters come from
    ``defaults``. ``optimizer.param_groups[i]["lr"] = 0.01`` changes the learning rate from the next step.
    """

    #: State slot name -> the suffix OneFlow gives that slot in ``graph.state_dict()``
    #: (Graph mode names a parameter's slot ``"<param path>-<suffix>"``, e.g. ``"linear.weight-momentum"``).
    slot_names: ClassVar[dict[str, str]] = {}
    #: Slots that :meth:`update` does without (a saved state may lack them); every other slot of
    #: :meth:`init_state` must be loaded with its parameter's others.
    optional_slots: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Iterable[Any], defaults: dict):
        if isinstance(params, Tensor):
            raise TypeError("params must be an iterable of tensors (e.g. model.parameters()), got a single "
                            "Tensor; wrap it in a list: [tensor]")
        self.defaults = dict(defaults)
        self._validate(self.defaults)
        self.param_groups: list[dict] = []
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list; pass model.parameters() of a model that "
                             "has parameters")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # ------------------------------------------------------------------ what subclasses write

    def _validate(self, hyper: dict) -> None:
        """Raise ``ValueError`` for impossible hyper-parameters (``Invalid learning rate: -1``) and
        ``TypeError`` for ones of the wrong type (``lr="fast"``); subclasses extend it."""
        checks.check_common(hyper)

    def init_state(self, param: Tensor, group: dict | None = None) -> dict[str, Tensor]:
        """The fresh state slots of one parameter (before its first step), for the settings of ``group``
        (by default the parameter's own group; loading asks with the group being loaded)."""
        return {}

    def check_slot(self, name: str, values: Any) -> str | None:
        """What is wrong with the loaded values (a NumPy array) of slot ``name``, beyond shape and dtype
        (None if nothing); Adam refuses a negative second moment, which would take a square root."""
        return None

    def update(self, param: Tensor, grad: Tensor, state: dict, group: dict, lr: Any) -> tuple[Tensor, dict]:
        """Pure update rule: ``(new_param, new_state)`` from toynet tensors, mutating nothing."""
        raise NotImplementedError(f"{type(self).__name__} must implement update()")

    # ----------------------------------------------------------------------------- eager step

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients of every parameter (set them to ``None``, or to zeros)."""
        for p in (p for group in self.param_groups for p in group["params"]):
            p.grad = None if set_to_none or p.grad is None else zeros_like(p.grad)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient, in Eager mode; all or nothing.

        ``closure`` (optional) re-computes the loss with gradients on and returns it; ``step`` returns it.
        """
        loss = None if closure is None else mode.call_with_grad_mode(True, closure)
        previous, mode.grad_enabled = mode.grad_enabled, False  # an update is not differentiated
        try:
            updates = [self._update(p, g) for g in self.param_groups for p in g["params"] if p.grad is not None]
        finally:
            mode.grad_enabled = previous
        # The parameters get new values behind the same tensors: a graph kept with retain_graph=True that saved
        # the old ones must not backward through them (PyTorch's in-place step bumps the version too).
        for p, _, _ in updates:
            autograd.note_write(p, f"{type(self).__name__}.step()")
        # All at once: each parameter's new array, each parameter's new state (new tensors: nothing is written
        # into the old ones, which a compiled nn.Graph may still read); a slot the step left alone (Adam's
        # max_exp_avg_sq with amsgrad switched off) is kept, as nn.Graph keeps a state no update writes.
        commit([(p, "array", new.array) for p, new, _ in updates],
               [(self.state, p, {**self.state.get(p, {}), **s}) for p, _, s in updates])
        return loss

    def _update(self, p: Tensor, group: dict) -> tuple[Tensor, Tensor, dict]:
        """Parameter ``p``, its new value and its new state, computed by ``update``; nothing is written."""
        _check_grad(p, p.grad)
        state = self.state[p] if p in self.state else self.init_state(p)
        return (p, *self.update(p, p.grad, state, group, group["lr"]))


def commit(writes: list, inserts: list) -> None:
    """``setattr(tensor, "array", new)`` for each of ``writes`` and ``dict[key] = value`` for each of ``inserts``,
    in ONE call of C code: Python raises a ``KeyboardInterrupt`` only between bytecodes of Python code, so a
    Ctrl-C cannot land between two of the writes, and a step is applied whole (the same commit ends a
    compiled plan, see toynet.static.compile)."""
    _DRAIN(itertools.chain(itertools.starmap(setattr, writes), itertools.starmap(operator.setitem, inserts)))


_DRAIN = collections.deque(maxlen=0).extend  # runs an iterator to its end, in C


def _check_grad(param: Tensor, grad: Any) -> None:
    if isinstance(grad, Tensor) and grad.device is param.device and grad.array is not None and (
            grad.array.shape, grad.array.dtype) == (param.array.shape, param.array.dtype):
        return  # the usual case (the checks below name what is wrong otherwise)
    if not isinstance(grad, Tensor):
        raise TypeError(f"the gradient of a parameter of shape {tuple(param.shape)} is a "
                        f"{type(grad).__name__}, not a tensor")
    if grad.shape != param.shape:
        raise ValueError(f"a parameter of shape {tuple(param.shape)} has a gradient of shape "
                         f"{tuple(grad.shape)}; they must match (was .grad assigned by hand?)")
    if grad.dtype is not param.dtype:
        raise TypeError(f"a {param.dtype} parameter has a {grad.dtype} gradient; they must match")
    if grad.device != param.device:
        raise ValueError(f"a parameter on {param.device} has its gradient on {grad.device}; move the "
                         f"gradient (or the parameter) so both are on the same device")
