"""What mixed precision and activation checkpointing add to an ``nn.Graph``'s compilation.

* :func:`compile_options`: the optional passes a compilation runs (``graph.config.enable_amp(True)``:
  float16 matrix products; modules with ``activation_checkpointing``: recompute in backward), and
  :func:`settings_of`, which the plan's guard checks are still what it was compiled with (toggling either
  compiles again).
* :class:`GradScalerMixin`: ``graph.set_grad_scaler(scaler)``.
* :func:`scaled_build`: build() with the loss scale as a state of the graph, by which the tracer
  multiplies backward's seed (``loss.backward()`` then differentiates S * loss).
* :func:`unscale_and_check`: after backward, the gradients divided by S, whether all are finite, the
  scaler's new state recorded, and the function the optimizer's updates go through so that a step with
  an inf/NaN gradient keeps every old value (see :mod:`toynet.dynamic.amp` for the rule itself).
"""

from __future__ import annotations

from typing import Any, Callable

from .. import backend, mode
from ..dynamic.amp import GradScaler
from ..dynamic.functional import where
from ..static.trace import Tracer
from ..dynamic.tensor import Tensor
from .graph_module import GraphModule, checkpointed_paths
from .module import CHANGES

LOSS_SCALE = "System-Train-LossScale"
GROWTH_TRACKER = "System-Train-LossScaleGrowthTracker"

__all__ = ["GradScalerMixin", "GraphModule", "compile_options", "scaled_build", "settings_of", "unscale_and_check"]


def compile_options(graph: Any) -> dict:
    """The keyword arguments of :func:`toynet.static.passes.optimize` this graph's settings ask for."""
    return {"amp": graph.config.amp_enabled, "checkpoint": checkpointed_paths(graph._modules)}


def settings_of(graph: Any) -> dict:
    """The graph's settings a compiled plan depends on: AMP, the checkpointed modules, the grad scaler's
    settings (its guard checks they are still what they were, see toynet.nn.graph_guard)."""
    scaler = graph.__dict__.get("_grad_scaler")
    return {**compile_options(graph), "grad scaler": scaler.settings() if scaler is not None else None}


class GradScalerMixin:
    """``set_grad_scaler`` for nn.Graph."""

    def set_grad_scaler(self, grad_scaler: GradScaler) -> None:
        """Scale the loss (and unscale the gradients, skip inf/NaN steps) with ``grad_scaler``
        (``flow.amp.GradScaler`` or ``StaticGradScaler``) in every training step."""
        if not isinstance(grad_scaler, GradScaler):
            raise TypeError(f"set_grad_scaler() takes a flow.amp.GradScaler or StaticGradScaler, got "
                            f"{type(grad_scaler).__name__}")
        self.__dict__["_grad_scaler"] = grad_scaler
        CHANGES[0] += 1


def _on(tensor: Tensor, device: backend.Device) -> Tensor:
    return tensor if tensor.device == device else tensor.to(device)


def scaled_build(graph: Any) -> Callable:
    """``graph.build``, or (with a grad scaler) build with the tracer's ``loss_scale`` set first."""
    scaler = graph.__dict__.get("_grad_scaler")
    if scaler is None:
        return graph.build

    def build(*args: Any, **kwargs: Any) -> Any:
        if not graph._optimizers:
            raise RuntimeError(f"nn.Graph {graph.name} has a grad scaler but no optimizer: loss scaling is part "
                               "of a training step; call self.add_optimizer(optimizer) too")
        tracer = mode.current_tracer()
        device = tracer.device or backend.CPU
        scaler.scale_tensor = _on(scaler.scale_tensor, device)
        scaler.growth_tracker = _on(scaler.growth_tracker, device)
        with tracer.scope(LOSS_SCALE, source="GradScaler"):
            tracer.loss_scale = tracer.add_state(LOSS_SCALE, "system", scaler.scale_tensor)
        return graph.build(*args, **kwargs)
    return build


def unscale_and_check(tracer: Tracer, scaler: GradScaler, grads: dict[str, Tensor]
                      ) -> tuple[dict[str, Tensor], Callable[[Tensor, Tensor], Tensor]]:
    """The gradients divided by the loss scale, and ``keep(new, old)``: what each state becomes (the new
    value, or the old one in a step with an inf/NaN gradient). Records the scaler's new state."""
    with tracer.scope(LOSS_SCALE, source=f"{type(scaler).__name__}.unscale"):
        scale = tracer.add_state(LOSS_SCALE, "system", scaler.scale_tensor)
        inverse = 1.0 / scale
        unscaled = {name: g * inverse for name, g in grads.items()}
        if not scaler.dynamic:
            return unscaled, lambda new, old: new
        finite = scaler.all_finite(list(unscaled.values()))
        tracker = tracer.add_state(GROWTH_TRACKER, "system", scaler.growth_tracker)
        new_scale, new_tracker = scaler.next_state(scale, tracker, finite)
        tracer.update(scaler.scale_tensor, new_scale)
        tracer.update(scaler.growth_tracker, new_tracker)
    return unscaled, lambda new, old: where(finite, new, old)
