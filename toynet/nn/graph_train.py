"""What an optimizer adds to an ``nn.Graph``: the update ops traced after backward, and the learning rates
fed into the compiled plan on every call.

:func:`trace_updates` is the ``updates`` step of :func:`toynet.static.trace.trace_step`. It runs while the
tracer is installed, after ``loss.backward()`` has appended the backward ops, so each optimizer's own
``update`` rule (the very code Eager mode runs) records its ops on lazy tensors. Every state the step
changes is recorded with ``tracer.update``, and the plan writes it back after each run. States get
OneFlow's names, which ``graph.state_dict()`` uses too:

* ``System-Train-TrainStep``: the step counter, incremented by every call;
* ``System-Train-LearningRate-<i>-<g>``: the learning rate of group ``g`` of optimizer ``i``, a 0-d
  tensor the graph refills before each run, so a scheduler's change reaches the compiled plan;
* ``<param path>-<slot>``: optimizer slots, e.g. ``model.0.weight-momentum``.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import backend
from ..static.trace import Tracer
from ..tensor import Tensor

TRAIN_STEP = "System-Train-TrainStep"


class OptimizerBinding:
    """An optimizer added to a graph, its learning-rate scheduler, and the 0-d tensors that feed the
    current learning rate of each parameter group into the compiled plan."""

    def __init__(self, optimizer: Any, lr_scheduler: Any = None):
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.lr_tensors: list[Tensor] = []
        self._fed: list = []   # the learning rates last copied into lr_tensors

    def lr_tensors_on(self, device: backend.Device) -> list[Tensor]:
        """The learning-rate tensors on ``device``, made again only if the groups or the device changed:
        every plan compiled for the graph reads the same tensors, so feeding them once feeds all."""
        groups = self.optimizer.param_groups
        if len(self.lr_tensors) != len(groups) or (self.lr_tensors and self.lr_tensors[0].device != device):
            self.lr_tensors = [Tensor(float(g["lr"]), dtype=backend.float32, device=device) for g in groups]
            self._fed = [None] * len(groups)
        return self.lr_tensors

    def feed_learning_rates(self) -> None:
        """Copy each group's current ``lr`` (a scheduler may have changed it) into the plan's input."""
        for i, (group, tensor) in enumerate(zip(self.optimizer.param_groups, self.lr_tensors)):
            if self._fed[i] != group["lr"]:
                tensor.array[...] = group["lr"]
                self._fed[i] = group["lr"]


def trace_updates(tracer: Tracer, bindings: list[OptimizerBinding], train_step: Callable) -> None:
    """Record one step's updates: the step counter's, then each optimizer's update of each parameter
    that received a gradient. ``train_step(device)`` is the graph's step counter tensor."""
    device = tracer.device or backend.CPU
    grads = tracer.gradients()
    names = {id(info.tensor): info.name for info in tracer.states.values() if info.kind == "parameter"}
    with tracer.scope(TRAIN_STEP, source="step counter"):
        tracer.update(TRAIN_STEP, tracer.add_state(TRAIN_STEP, "system", train_step(device)) + 1)
    for i, binding in enumerate(bindings):
        optimizer = binding.optimizer
        for g, (group, lr_tensor) in enumerate(zip(optimizer.param_groups, binding.lr_tensors_on(device))):
            lr = tracer.add_state(f"System-Train-LearningRate-{i}-{g}", "system", lr_tensor)
            for p in group["params"]:
                name = names.get(id(p))
                if name is None:
                    raise ValueError(
                        f"Parameter of shape {tuple(p.shape)} is not in the corresponding nn.Graph/nn.Module. "
                        "Please make sure you call the module's to(..) method first, then add the module's "
                        "parameters into an optimizer.")
                grad = grads.get(name)
                if grad is None:
                    continue  # not used by the loss: no gradient, no update (as in Eager mode)
                state = optimizer.state.get(p)
                if state is None:
                    state = optimizer.state[p] = optimizer.init_state(p)
                slots = optimizer.slot_names
                lazy_state = {k: tracer.add_state(f"{name}-{slots.get(k, k)}", "optimizer", v)
                              for k, v in state.items()}
                # Update ops are named after their parameter, and say which rule made them.
                with tracer.scope(name, source=f"{type(optimizer).__name__}.update"):
                    new_param, new_state = optimizer.update(tracer.lazy(p), grad, lazy_state, group, lr)
                    tracer.update(p, new_param)
                    for k, v in new_state.items():
                        tracer.update(state[k], v)
