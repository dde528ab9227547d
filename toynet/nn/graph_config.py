"""``graph.config``: how one ``nn.Graph`` compiles (training, the passes switched off, AMP, the arguments whose
numbers are constants of the plan, how many plans to keep). What of it a plan depends on is in
:mod:`toynet.nn.graph_plans` (``compile_options``, ``settings_of``)."""

from __future__ import annotations

import inspect
from typing import Any

from ..static.ir import PASSES
from .module import CHANGES


class GraphConfig:
    """Settings of one graph. ``training`` is True once an optimizer has been added.

    ``cache_limit``: how many compiled plans the graph keeps (8; the least recently used is evicted, with
    a warning the first time). ``static_arguments``: the arguments of ``build`` whose numbers are
    constants of the plan (see :meth:`set_static_arguments`).
    """

    def __init__(self) -> None:
        self.training = False
        #: Passes switched off. Kernel timing (ChooseKernels, a fast-path pass) is opt-in: with it, which kernel
        #: a plan uses, and so the last bits of its results, depend on the machine and the moment it compiled.
        self.disabled_passes: set[str] = {"ChooseKernels"}
        self.cache_limit = 8
        self.static_arguments: frozenset[str] = frozenset()
        #: float16 matrix products with float32 master weights (see toynet.static.passes.amp).
        self.amp_enabled = False
        #: Settings that change what a plan computes, by name (the plans' guards compare them): "gradient
        #: accumulation steps" (when more than 1), "zero".
        self.plan_settings: dict[str, Any] = {}

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "cache_limit" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"cache_limit must be a whole number >= 1, got {value!r}")
        object.__setattr__(self, name, value)

    def set_static_arguments(self, *names: str) -> None:
        """Make the numbers in these arguments of ``build`` constants of the plan, as Python values in
        ``build`` (``range(steps)``, a size, a dropout rate): each new value then compiles a plan of its
        own. Other Python numbers are inputs of the plan, 0-d tensors in ``build``."""
        if not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise TypeError(f"static arguments are named by build()'s parameter names, got {names!r}")
        self.static_arguments = frozenset(names)

    def enable_amp(self, mode: bool = True) -> None:
        """Run matrix products and convolutions in float16, the rest and the weights in float32 (the
        pass toynet.static.passes.amp); add a loss scaler with ``graph.set_grad_scaler``."""
        if not isinstance(mode, bool):
            raise TypeError(f"enable_amp() takes True or False, got {mode!r}")
        self.amp_enabled = mode
        CHANGES[0] += 1  # the compiled plans' guards recheck their settings

    def set_gradient_accumulation_steps(self, steps: int) -> None:
        """Cut each call's batch (dim 0 of every tensor input) into ``steps`` micro-batches: build runs on each,
        the gradients add up (each micro-batch's loss weighted 1/steps, so the step equals one on the whole
        batch), and the optimizers step once. A 0-d output comes back with one value per micro-batch, shape
        ``(steps,)``; others are joined along dim 0. (In OneFlow pipeline stages work on different micro-batches
        at once; toynet's plan runs them in turn.)"""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"set_gradient_accumulation_steps takes a whole number >= 1, got {steps!r}")
        self._setting("gradient accumulation steps", steps if steps > 1 else None)

    def enable_zero(self, mode: bool = True, *, stage: int = 2, shard_min_size: int = 1024,
                    shard_restore_level: int = 1) -> None:
        """ZeRO for a data-parallel graph of global tensors: every optimizer slot (momentum, Adam's moments)
        of at least ``shard_min_size`` elements is split over the processes, each keeping and updating its
        1/n; the gradients are reduce-scattered and the new parameters all-gathered. Stages 1 and 2 shard the
        optimizer state (toynet's gradients live only inside the step, so 2 adds nothing); stage 3 would shard
        the parameters too, which toynet does not do: it is refused."""
        if not isinstance(mode, bool):
            raise TypeError(f"enable_zero() takes True or False, got {mode!r}")
        if stage not in (1, 2, 3):
            raise ValueError(f"enable_zero(stage=...) takes 1, 2 or 3, got {stage!r}")
        if stage == 3 and mode:
            raise NotImplementedError("enable_zero(stage=3) shards the parameters too, which toynet does not do; "
                                      "stages 1 and 2 shard the optimizer state")
        if isinstance(shard_min_size, bool) or not isinstance(shard_min_size, int) or shard_min_size < 1:
            raise ValueError(f"enable_zero(shard_min_size=...) takes a whole number >= 1, got {shard_min_size!r}")
        self._setting("zero", {"stage": stage, "shard_min_size": shard_min_size} if mode else None)

    def set_zero_redundancy_optimizer_mode(self, mode: Any = None) -> None:
        raise RuntimeError("`set_zero_redundancy_optimizer_mode` has been changed to `enable_zero`, please use "
                           "`enable_zero(True)` to activate ZeRO optimization.")

    def _setting(self, name: str, value: Any) -> None:
        if value is None:
            self.plan_settings.pop(name, None)
        else:
            self.plan_settings[name] = value
        CHANGES[0] += 1  # the compiled plans' guards recheck their settings

    def enable_pass(self, name: str, enabled: bool = True) -> None:
        """Turn one optimisation pass off (or back on) for graphs compiled from now on."""
        if name not in PASSES:
            raise ValueError(f"unknown pass {name!r}; the passes are {', '.join(PASSES)}")
        if enabled:
            self.disabled_passes.discard(name)
        else:
            self.disabled_passes.add(name)

    def __repr__(self) -> str:
        return f"GraphConfig(training={self.training}, )"


def build_parameters(graph_class: type, static: frozenset) -> tuple[str, ...]:
    """The names of ``graph_class.build``'s parameters, after checking that ``static`` names some of them."""
    build = getattr(graph_class.build, "__wrapped__", graph_class.build)
    params = list(inspect.signature(build).parameters.values())[1:]
    names = tuple(p.name for p in params)
    unknown = set(static) - set(names)
    if unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
        raise ValueError(f"graph.config.set_static_arguments names {sorted(unknown)}, but "
                         f"{graph_class.__name__}.build() takes {list(names)}")
    return names
