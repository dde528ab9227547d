"""``graph.state_dict()`` / ``graph.load_state_dict()``: everything needed to resume training exactly.

Besides each module's own state dict (under the module's attribute name), a training graph saves what
exists only because of training, under OneFlow's names:

* ``System-Train-TrainStep``: how many steps have run (int64, shape (1,));
* ``<param path>-<slot>``: optimizer state, e.g. ``model.0.weight-momentum`` (SGD), ``-m``/``-v`` (Adam);
* ``System-Train-Optimizer-<i>``: the optimizer's hyper-parameters (the current learning rate);
* ``System-Train-LRScheduler-<i>``: the learning-rate scheduler's position.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .. import backend
from ..tensor import Tensor
from .graph_train import TRAIN_STEP

_OPTIMIZER = "System-Train-Optimizer-"
_SCHEDULER = "System-Train-LRScheduler-"


class GraphStateMixin:
    """state_dict / load_state_dict for nn.Graph (kept apart so graph.py stays about compiling)."""

    def state_dict(self, destination: dict | None = None) -> "OrderedDict":
        out = OrderedDict() if destination is None else destination
        for name, module in self._modules.items():
            out[name] = module.state_dict()
        extras = self._extra_state()
        for key in sorted(extras):
            out[key] = extras[key]
        return out

    def _slot_keys(self) -> dict[str, tuple]:
        """``"<param>-<suffix>"`` -> (optimizer, parameter, slot) for every optimizer slot there can be."""
        names = self._parameter_names()
        keys = {}
        for binding in self._optimizers:
            opt = binding.optimizer
            for group in opt.param_groups:
                for p in group["params"]:
                    state = opt.state.get(p) or opt.init_state(p)
                    for slot in state:
                        keys[f"{names.get(id(p), '?')}-{opt.slot_names.get(slot, slot)}"] = (opt, p, slot)
        return keys

    def _extra_state(self) -> dict[str, Any]:
        if not self._optimizers:
            return {}
        extras: dict[str, Any] = {}
        if self._train_step is not None:
            extras[TRAIN_STEP] = self._train_step.detach()
        names = self._parameter_names()
        for i, binding in enumerate(self._optimizers):
            opt = binding.optimizer
            for p, state in opt.state.items():
                if id(p) in names:
                    for slot, value in state.items():
                        extras[f"{names[id(p)]}-{opt.slot_names.get(slot, slot)}"] = value.detach()
            extras[f"{_OPTIMIZER}{i}"] = {"param_groups": [
                {k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]}
            if binding.lr_scheduler is not None:
                extras[f"{_SCHEDULER}{i}"] = binding.lr_scheduler.state_dict()
        return extras

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """Restore a state dict made by :meth:`state_dict`; only before the graph's first call.

        Everything is checked first, so a state dict that does not fit changes nothing.
        """
        if self._last is not None:
            raise AssertionError("nn.Graph's state dict can only be loaded before the first call of a graph.")
        slot_keys = self._slot_keys()
        problems = []
        for key, value in state_dict.items():
            if key in self._modules:
                problems += _module_problems(key, self._modules[key], value, strict)
            elif key in slot_keys:
                opt, p, slot = slot_keys[key]
                shape = tuple((opt.state.get(p) or opt.init_state(p))[slot].shape)
                if tuple(getattr(value, "shape", ())) != shape:
                    problems.append(f"{key!r} has shape {tuple(getattr(value, 'shape', ()))}, expected {shape}")
            elif key == TRAIN_STEP or key.startswith(_OPTIMIZER) or key.startswith(_SCHEDULER):
                index = key.rsplit("-", 1)[-1]
                if key != TRAIN_STEP and (not index.isdigit() or int(index) >= len(self._optimizers)):
                    problems.append(f"{key!r} refers to optimizer {index}, but the graph has "
                                    f"{len(self._optimizers)}")
                elif key.startswith(_SCHEDULER) and self._optimizers[int(index)].lr_scheduler is None:
                    problems.append(f"{key!r} holds a learning-rate scheduler's state, but optimizer {index} "
                                    "was added without lr_sch")
                else:
                    problems += _system_problems(key, value, self._optimizers[int(index)].optimizer
                                                 if key.startswith(_OPTIMIZER) else None)
            elif strict:
                problems.append(f"unexpected key {key!r}")
        if strict:
            problems += [f"missing module {name!r}" for name in self._modules if name not in state_dict]
        if problems:
            raise RuntimeError(f"Error(s) in loading state_dict for nn.Graph {self.name}:\n  " + "\n  ".join(problems))

        for key, value in state_dict.items():
            if key in self._modules:
                self._modules[key].load_state_dict(value, strict)
            elif key in slot_keys:
                opt, p, slot = slot_keys[key]
                state = opt.state.get(p)
                if state is None:
                    state = opt.state[p] = opt.init_state(p)
                state[slot].copy_(_as_tensor(value))
            elif key == TRAIN_STEP:
                device = next((p.device for m in self._modules.values() for p in m.parameters()), backend.CPU)
                self._train_step_tensor(device).copy_(_as_tensor(value))
            elif key.startswith(_OPTIMIZER):
                opt = self._optimizers[int(key.rsplit("-", 1)[-1])].optimizer
                for group, saved in zip(opt.param_groups, value["param_groups"]):
                    group.update({k: v for k, v in saved.items() if k != "params"})
            elif key.startswith(_SCHEDULER):
                self._optimizers[int(key.rsplit("-", 1)[-1])].lr_scheduler.load_state_dict(value)


def _as_tensor(value: Any) -> Tensor:
    return value if isinstance(value, Tensor) else Tensor(value)


def _system_problems(key: str, value: Any, optimizer: Any) -> list[str]:
    """What is wrong with a saved train step, optimizer or scheduler entry (checked before loading any)."""
    if key == TRAIN_STEP:
        shape = tuple(getattr(value, "shape", ()))
        try:
            dtype = value.dtype if isinstance(value, Tensor) else backend.dtype_of(value)
        except (TypeError, ValueError, AttributeError):
            dtype = None
        if shape != (1,) or dtype is None or dtype.is_floating_point or dtype is backend.bool_:
            return [f"{key!r} should be an integer tensor of shape (1,) (the step count), got "
                    f"{type(value).__name__} of shape {shape}"]
        return []
    if not isinstance(value, dict):
        return [f"{key!r} should hold a dict, got {type(value).__name__}"]
    if optimizer is not None:
        groups = value.get("param_groups")
        if (not isinstance(groups, (list, tuple)) or len(groups) != len(optimizer.param_groups)
                or not all(isinstance(g, dict) for g in groups)):
            return [f"{key!r} should hold 'param_groups': a list of {len(optimizer.param_groups)} dict(s), one "
                    f"per parameter group of the optimizer"]
    return []


def _module_problems(key: str, module: Any, value: Any, strict: bool) -> list[str]:
    if not isinstance(value, dict):
        return [f"{key!r} should hold the module's state dict, got {type(value).__name__}"]
    own = module.state_dict()
    problems = []
    if strict:
        problems += [f"missing key {key}.{k}" for k in own if k not in value]
        problems += [f"unexpected key {key}.{k}" for k in value if k not in own]
    for k, t in own.items():
        if k in value and tuple(getattr(value[k], "shape", ())) != tuple(t.shape):
            problems.append(f"size mismatch for {key}.{k}: the checkpoint has "
                            f"{tuple(getattr(value[k], 'shape', ()))}, the model has {tuple(t.shape)}")
    return problems
