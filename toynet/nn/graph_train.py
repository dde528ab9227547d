"""What an optimizer adds to an ``nn.Graph``: the update ops traced after backward, and the learning rates
fed into the compiled plan on every call.

:func:`trace_updates` is the ``updates`` step of :func:`toynet.static.trace.trace_step`. It runs while the
tracer is installed, after ``loss.backward()`` has appended the backward ops, so each optimizer's own
``update`` rule (the very code Eager mode runs) records its ops on lazy tensors. Every state the step
changes is recorded with ``tracer.update``, and the plan writes it back after each run. States get
OneFlow's names, which ``graph.state_dict()`` uses too:

* ``System-Train-TrainStep``: the step counter, incremented by every call;
* ``System-Train-LearningRate-<i>-<g>``: group ``g`` of optimizer ``i``'s learning rate, a 0-d tensor in its
  parameters' dtype (:func:`_lr_array`) that the graph refills before each run (a scheduler's change reaches it);
* ``<param path>-<slot>``: optimizer slots, e.g. ``model.0.weight-momentum``.

A step is all or nothing: the plan computes every new value first and commits them together (see
:mod:`toynet.static.compile`). When the commit has Python work of its own (a learning-rate scheduler's
step), :class:`~toynet.utils.interrupts.defer_interrupts` holds Ctrl-C off until it is done.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import backend
from ..static.compile import commit
from ..static.trace import Tracer
from ..dynamic.tensor import Tensor
from ..optim.clip_grad import CLIP_MAX_NORM, clip_traced
from ..utils.interrupts import defer_interrupts
from .graph_amp import unscale_and_check

TRAIN_STEP = "System-Train-TrainStep"


class OptimizerBinding:
    """An optimizer added to a graph, its learning-rate scheduler, and the 0-d tensors that feed the
    current learning rate of each parameter group into the compiled plan."""

    def __init__(self, optimizer: Any, lr_scheduler: Any = None):
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.lr_tensors: list[Tensor] = []

    def lr_tensors_on(self, device: backend.Device) -> list[Tensor]:
        """The learning-rate tensors on ``device``, made again only if the groups or the device changed:
        every plan compiled for the graph reads the same tensors, so feeding them once feeds all."""
        groups = self.optimizer.param_groups
        if len(self.lr_tensors) != len(groups) or (self.lr_tensors and self.lr_tensors[0].device != device):
            self.lr_tensors = [Tensor.wrap(_lr_array(device.xp, g), device) for g in groups]
        return self.lr_tensors

    def feed_learning_rates(self) -> None:
        """Copy each group's current ``lr`` (a scheduler may have changed it) into the plan's input."""
        for tensor, group in zip(self.lr_tensors, self.optimizer.param_groups):
            tensor.array[...] = group["lr"]


def _lr_array(xp: Any, group: dict) -> Any:   # (float32 at least: a float64 model's rate exact, float32's as Eager's)
    return xp.array(float(group["lr"]), xp.result_type(xp.float32, *[p.dtype.array_dtype for p in group["params"]]))


def scheduled_commit(bindings: list[OptimizerBinding]) -> Callable[[tuple, tuple], None]:
    """The commit of a plan's step (``plan.run(..., commit)``) when it has Python work too: the new states,
    then each scheduler's step, with Ctrl-C held off until both are done (raised after them)."""
    def commit_step(targets: tuple, values: tuple) -> None:
        with defer_interrupts():
            commit(targets, values)
            for binding in bindings:
                if binding.lr_scheduler is not None:
                    binding.lr_scheduler.step()
    return commit_step


def _slot(tracer: Tracer, optimizer: Any, param_name: str, key: str, value: Tensor) -> Tensor:
    """The lazy stand-in of an optimizer slot, named as OneFlow names it (``model.0.weight-momentum``)."""
    return tracer.add_state(f"{param_name}-{optimizer.slot_names.get(key, key)}", "optimizer", value)


def _inputs_text(tracer: Tracer) -> str:
    return ", ".join(f"{n.name} {tuple(n.shape)} {n.dtype.name}" for n in tracer.graph.inputs) or "none"


def trace_updates(tracer: Tracer, graph: Any) -> None:
    """Record one step of ``graph`` (an nn.Graph)'s updates: the step counter's, then each of its optimizers'
    update of each parameter that received a gradient. With a grad scaler the gradients are unscaled first, and
    a step with an inf/NaN gradient keeps every state; a group with clip_grad_max_norm has its gradients clipped."""
    device, bindings, scaler = tracer.device or backend.CPU, graph._optimizers, graph._grad_scaler
    grads = tracer.gradients()
    keep = lambda new, old: new  # noqa: E731  (with loss scaling: the old value if a gradient overflowed)
    if scaler is not None:
        grads, keep = unscale_and_check(tracer, scaler, grads)
    names = {id(info.tensor): info.name for info in tracer.states.values() if info.kind == "parameter"}
    with tracer.scope(TRAIN_STEP, source="step counter"):
        tracer.update(TRAIN_STEP, tracer.add_state(TRAIN_STEP, "system", graph._train_step_tensor(device)) + 1)
    for i, binding in enumerate(bindings):
        optimizer, states = binding.optimizer, binding.optimizer.state  # (new slots go in: the guards read it)
        for g, (group, lr_tensor) in enumerate(zip(optimizer.param_groups, binding.lr_tensors_on(device))):
            lr = tracer.add_state(f"System-Train-LearningRate-{i}-{g}", "system", lr_tensor)
            if CLIP_MAX_NORM in group:  # OneFlow's per-group clipping, before the updates (toynet.optim.clip_grad)
                grads = clip_traced(tracer, f"System-Train-ClipGrad-{i}-{g}", group, grads, names)
            for p in group["params"]:
                name = names.get(id(p))
                if name is None:
                    raise ValueError(
                        f"Parameter of shape {tuple(p.shape)} is not in the corresponding nn.Graph/nn.Module. "
                        "Please make sure you call the module's to(..) method first, then add the module's "
                        "parameters into an optimizer. (A parameter replaced on a module after the optimizer "
                        "was made, as in model.fc.weight = nn.Parameter(...), leaves the optimizer with the "
                        "old one: make the optimizer again, or copy new values in with load_state_dict().)")
                grad = grads.get(name)
                if grad is None:
                    continue  # not used by the loss: no gradient, no update (as in Eager mode)
                if grad.dtype is not p.dtype:
                    # Eager mode's optimizer.step() refuses this step too (a TypeError, nothing changed).
                    raise TypeError(
                        f"nn.Graph {tracer.graph.name}: {name} is {p.dtype.name} but its gradient is "
                        f"{grad.dtype.name}, so {type(optimizer).__name__} cannot update it (Eager mode's "
                        f"optimizer.step() refuses the same step). The call's inputs: {_inputs_text(tracer)}. "
                        "Give the graph inputs of the parameters' dtype (x.float() or x.to(flow.float32)), "
                        "or convert the model to the inputs' dtype (model.double()).")
                state = states[p] if p in states else states.setdefault(p, optimizer.init_state(p, group))
                lazy_state = {k: _slot(tracer, optimizer, name, k, v) for k, v in state.items()}
                # Update ops are named after their parameter, and say which rule made them.
                with tracer.scope(name, source=f"{type(optimizer).__name__}.update"):
                    new_param, new_state = optimizer.update(tracer.lazy(p), grad, lazy_state, group, lr)
                    made = [k for k in new_state if k not in state]
                    if made:
                        # The rule made slots the state lacks (momentum switched on after a step), as Eager's
                        # step adds them. The plan must read them on later calls: add them (zeros, the fresh
                        # value), and trace the rule again on the full state (the first try is dead code).
                        for k in made:
                            v = new_state[k]
                            state[k] = Tensor.wrap(device.xp.zeros(tuple(v.shape), dtype=v.dtype.array_dtype), device)
                            lazy_state[k] = _slot(tracer, optimizer, name, k, state[k])
                        new_param, new_state = optimizer.update(tracer.lazy(p), grad, lazy_state, group, lr)
                    tracer.update(p, keep(new_param, tracer.lazy(p)))
                    for k, v in new_state.items():
                        tracer.update(state[k], keep(v, lazy_state[k]))
