"""What mixed precision and activation checkpointing add to an ``nn.Graph``.

* :class:`GraphModule`: ``graph.model.block.to(nn.graph.GraphModule).activation_checkpointing = True``, OneFlow's
  per-module Graph-mode setting (the pass :mod:`toynet.static.passes.checkpoint` does what it asks). OneFlow
  wraps every module assigned to an ``nn.Graph`` in a proxy that keeps such settings; toynet has no proxies
  (``graph.model`` is the very module you assigned), so a GraphModule is a small view onto one module that
  keeps its settings in the module's own ``__dict__`` (under :data:`SETTINGS`). OneFlow's older spelling
  ``module.config.activation_checkpointing`` works too. A setting belongs to the module: every graph that
  holds it sees it, and a plan's guard compiles again after a change (``toynet.nn.graph_plans.settings_of``).
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
from ..dynamic.functional import cat, stack, where
from ..static.trace import Tracer, flatten, unflatten
from ..dynamic.tensor import Tensor
from .module import CHANGES, Module

SETTINGS = "_graph_module_settings"  # the key, in a module's __dict__, of its Graph-mode settings

LOSS_SCALE = "System-Train-LossScale"
GROWTH_TRACKER = "System-Train-LossScaleGrowthTracker"

__all__ = ["GradScalerMixin", "GraphModule", "SETTINGS", "scaled_build", "unscale_and_check"]


class GraphModule:
    """Graph-mode settings of one module: ``activation_checkpointing`` (and ``config``, itself, for
    OneFlow's older ``module.config.activation_checkpointing`` spelling)."""

    #: ``module.to(GraphModule)`` asks for this view rather than a device or dtype.
    wraps_modules = True

    def __init__(self, module: Any):
        object.__setattr__(self, "origin", module)

    @classmethod
    def of(cls, module: Any) -> "GraphModule":
        return cls(module)

    def _settings(self) -> dict:
        return self.origin.__dict__.setdefault(SETTINGS, {})

    @property
    def config(self) -> "GraphModule":
        return self

    @property
    def stage_id(self) -> int | None:
        """The pipeline stage this module is (``set_stage``), None if it is none."""
        return self._settings().get("stage_id")

    @property
    def stage_placement(self) -> Any:
        return self._settings().get("stage_placement")

    def set_stage(self, stage_id: int, placement: Any = None) -> None:
        """Make this module pipeline stage ``stage_id`` (numbered from 0) on ``placement``: in a graph of
        global tensors, an input of the module that lives on another placement is moved to this one
        (``to_global(placement=...)``) when the module reads it. With ``graph.config.set_gradient_accumulation_
        steps(n)`` the stages work on micro-batches."""
        if isinstance(stage_id, bool) or not isinstance(stage_id, int) or stage_id < 0:
            raise ValueError(f"set_stage takes a stage number >= 0, got {stage_id!r}")
        if placement is not None and not hasattr(placement, "flat_ranks"):
            raise TypeError(f"set_stage(placement=...) takes a toynet.placement, got {placement!r}")
        self._settings().update(stage_id=stage_id, stage_placement=placement)
        CHANGES[0] += 1

    @property
    def activation_checkpointing(self) -> bool:
        """Recompute this module's activations in backward instead of keeping them from forward."""
        return self._settings().get("activation_checkpointing", False)

    @activation_checkpointing.setter
    def activation_checkpointing(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"activation_checkpointing must be True or False, got {value!r}")
        self._settings()["activation_checkpointing"] = value
        CHANGES[0] += 1

    def to(self, cls: type) -> "GraphModule":
        if cls is GraphModule:
            return self
        raise TypeError(f"a GraphModule converts only to nn.graph.GraphModule, got {cls!r}; to move or cast the "
                        f"module itself, call .to() on graph_module.origin")

    def __setattr__(self, name: str, value: Any) -> None:
        if not hasattr(type(self), name):
            raise AttributeError(f"nn.graph.GraphModule has no setting {name!r}; the one toynet knows is "
                                 "activation_checkpointing")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        stage = f", stage_id={self.stage_id}" if self.stage_id is not None else ""
        checkpointing = self.activation_checkpointing
        return f"GraphModule({type(self.origin).__name__}{stage}, activation_checkpointing={checkpointing})"



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
    """``graph.build``, or (with a grad scaler) build with the tracer's ``loss_scale`` set first; with gradient
    accumulation, build run once per micro-batch (:func:`accumulated`)."""
    scaler = graph.__dict__.get("_grad_scaler")
    if scaler is None:
        return accumulated(graph, graph.build)

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
    return accumulated(graph, build)


def accumulated(graph: Any, build: Callable) -> Callable:
    """``build`` as a step of n micro-batches (``graph.config.set_gradient_accumulation_steps(n)``): every
    tensor argument is cut along dim 0 into n pieces, build runs on each in turn (each ``loss.backward()``
    adding its gradients, weighted 1/steps: the mean over micro-batches is the gradient of the whole batch), the
    results are joined: 0-d tensors stacked into shape ``(steps,)``, others concatenated along dim 0."""
    steps = graph.config.plan_settings.get("gradient accumulation steps", 1)
    if steps == 1:
        return build

    def step(*args: Any, **kwargs: Any) -> Any:
        tracer = mode.current_tracer()
        tracer.loss_scale = 1.0 / steps if tracer.loss_scale is None else tracer.loss_scale * (1.0 / steps)
        leaves, spec = flatten((args, kwargs))
        for t in leaves:
            if t.ndim == 0 or t.shape[0] % steps:
                raise ValueError(f"nn.Graph {graph.name}: gradient accumulation cuts each input's dim 0 into "
                                 f"{steps} micro-batches, but an input has shape {tuple(t.shape)}; give inputs "
                                 f"whose first dimension is a multiple of {steps}")
        results = []
        for k in range(steps):
            pieces = [t[k * (t.shape[0] // steps):(k + 1) * (t.shape[0] // steps)] for t in leaves]
            micro_args, micro_kwargs = unflatten(spec, iter(pieces))
            results.append(flatten(build(*micro_args, **micro_kwargs)))
        outputs, structure = results[0]
        joined = [stack([r[0][i] for r in results]) if o.ndim == 0 else cat([r[0][i] for r in results])
                  for i, o in enumerate(outputs)]
        return unflatten(structure, iter(joined))
    return step


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


Module.graph_settings = GraphModule  # module.config is this view
