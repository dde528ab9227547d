"""``graph.state_dict()`` / ``graph.load_state_dict()``: everything needed to resume training exactly.

Besides each module's own state dict (under the module's attribute name), a training graph saves what
exists only because of training, under OneFlow's names:

* ``System-Train-TrainStep``: how many steps have run (int64, shape (1,));
* ``<param path>-<slot>``: optimizer state, e.g. ``model.0.weight-momentum`` (SGD), ``-m``/``-v`` (Adam);
* ``System-Train-Optimizer-<i>``: the optimizer's hyper-parameters (the current learning rate);
* ``System-Train-LRScheduler-<i>``: the learning-rate scheduler's position;
* ``System-Train-GradScaler``: the loss scale and its count of good steps (with ``set_grad_scaler``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .. import backend
from ..dynamic.tensor import Tensor
from ..utils.interrupts import defer_interrupts
from ..utils.loading import prepared
from ..distributed.placement import placement
from ..distributed.sbp import broadcast
from .graph_train import TRAIN_STEP
from .module_state import commit_writes

_OPTIMIZER = "System-Train-Optimizer-"
_SCHEDULER = "System-Train-LRScheduler-"
_GRAD_SCALER = "System-Train-GradScaler"


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

    def _parameter_names(self) -> dict[int, str]:
        """id -> state-dict name (``model.fc.weight``) of every parameter of the graph's modules."""
        names = {}
        for name, module in self._modules.items():
            for pname, p in module.named_parameters(prefix=name):
                names.setdefault(id(p), pname)
        return names

    def _slot_keys(self, groups: dict[int, list[dict]]) -> dict[str, tuple]:
        """``"<param>-<suffix>"`` -> (optimizer, parameter, slot, fresh slot tensor) for every slot there can
        be with the settings of ``groups`` (optimizer index -> its parameter groups as they will be)."""
        names = self._parameter_names()
        keys = {}
        for i, binding in enumerate(self._optimizers):
            opt = binding.optimizer
            for group in groups[i]:
                for p in group["params"]:
                    for slot, fresh in opt.init_state(p, group).items():
                        keys[f"{names.get(id(p), '?')}-{opt.slot_names.get(slot, slot)}"] = (opt, p, slot, fresh)
        return keys

    def _extra_state(self) -> dict[str, Any]:
        if not self._optimizers:
            return {}
        extras: dict[str, Any] = {}
        if self._train_step is not None:
            extras[TRAIN_STEP] = self._train_step.detach()
            layout = next((p.placement for m in self._modules.values() for p in m.parameters() if p.is_global), None)
            if layout is not None:   # a graph of global tensors: its step count too, the same on every process
                extras[TRAIN_STEP] = extras[TRAIN_STEP].to_global(placement=placement.all(layout.type), sbp=broadcast)
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
        if self._grad_scaler is not None:
            extras[_GRAD_SCALER] = self._grad_scaler.state_dict()
        return extras

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """Restore a state dict made by :meth:`state_dict`; only before the graph's first call.

        Everything is checked first: each module's entries (names, shapes, numeric values its dtypes can
        hold), the optimizer slots (for the hyper-parameters being loaded), the train step, the
        hyper-parameters (as the optimizer's constructor checks them) and the scheduler (same kind, valid
        settings). A state dict that does not fit raises, listing every problem, and changes nothing; one
        that fits is written all at once, in a section a Ctrl-C cannot split.
        """
        if self._last is not None:
            raise AssertionError("nn.Graph's state dict can only be loaded before the first call of a graph.")
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict expects a dict (from graph.state_dict()), got "
                            f"{type(state_dict).__name__}")
        load = _Load(self, strict)
        for key, value in state_dict.items():  # hyper-parameters first: they decide which slots there are
            if isinstance(key, str) and key.startswith(_OPTIMIZER):
                load.optimizer_groups(key, value)
        slot_keys = self._slot_keys(load.groups)
        for key, value in state_dict.items():
            if not isinstance(key, str):
                load.unexpected(key)
            elif key in self._modules:
                load.module(key, value)
            elif key in slot_keys:
                load.slot(key, value, *slot_keys[key])
            elif key == TRAIN_STEP:
                load.train_step(value)
            elif key.startswith(_SCHEDULER):
                load.scheduler(key, value)
            elif key == _GRAD_SCALER:
                load.grad_scaler(value)
            elif not key.startswith(_OPTIMIZER):
                load.unexpected(key)
        if strict:
            load.problems += [f"missing module {name!r}" for name in self._modules if name not in state_dict]
        load.check_slot_sets()
        if load.problems:
            raise RuntimeError(f"Error(s) in loading state_dict for nn.Graph {self.name}:\n  "
                               + "\n  ".join(load.problems))
        load.commit()


class _Load:
    """One ``graph.load_state_dict``: the checks of each entry, what to write if all pass, and the write."""

    def __init__(self, graph: Any, strict: bool):
        self.graph, self.strict = graph, strict
        self.problems: list[str] = []
        self.writes: list[tuple[Tensor, Tensor]] = []           # (module tensor, ready value)
        self.groups = {i: b.optimizer.param_groups for i, b in enumerate(graph._optimizers)}
        self.new_groups: list[tuple[Any, list[dict]]] = []      # (optimizer, its groups as loaded)
        self.slots: dict[tuple[int, int], tuple] = {}           # (id(opt), id(p)) -> (opt, p, group, {slot: ready})
        self.schedulers: list[tuple[Any, dict]] = []
        self.step: Tensor | None = None
        self.scaler_state: dict | None = None

    def unexpected(self, key: Any) -> None:
        if self.strict:
            self.problems.append(f"unexpected key {key!r}")

    def _binding(self, key: str, prefix: str) -> Any:
        index = key[len(prefix):]
        count = len(self.graph._optimizers)
        if not (index.isascii() and index.isdigit() and str(int(index)) == index and int(index) < count):
            self.problems.append(f"{key!r} refers to optimizer {index!r}, but the graph has {count}")
            return None
        return self.graph._optimizers[int(index)]

    def optimizer_groups(self, key: str, value: Any) -> None:
        binding = self._binding(key, _OPTIMIZER)
        if binding is None:
            return
        opt = binding.optimizer
        groups = value.get("param_groups") if isinstance(value, dict) else None
        if (not isinstance(groups, (list, tuple)) or len(groups) != len(opt.param_groups)
                or (self.strict and set(value) != {"param_groups"})):
            self.problems.append(f"{key!r} should hold {{'param_groups': a list of {len(opt.param_groups)} "
                                 "dict(s)}, one per parameter group of the optimizer")
            return
        try:
            new = [opt.checked_group(i, saved) for i, saved in enumerate(groups)]
        except ValueError as error:
            self.problems.append(f"{key!r}: {error}")
            return
        self.groups[self.graph._optimizers.index(binding)] = new
        self.new_groups.append((opt, new))

    def module(self, key: str, value: Any) -> None:
        if not isinstance(value, dict):
            self.problems.append(f"{key!r} should hold the module's state dict, got {type(value).__name__}")
            return
        plan = self.graph._modules[key]._plan_load(value, self.strict)
        self.problems += [f"in {key!r}: {problem}" for problem in plan.problems]
        self.writes += plan.writes

    def slot(self, key: str, value: Any, opt: Any, p: Tensor, slot: str, fresh: Tensor) -> None:
        try:
            ready = opt.checked_slot(repr(key), slot, fresh, value)
        except (TypeError, ValueError) as error:
            self.problems.append(str(error))
            return
        group = next(g for g in self.groups[self._index_of(opt)] if any(q is p for q in g["params"]))
        self.slots.setdefault((id(opt), id(p)), (opt, p, group, {}))[3][slot] = ready

    def _index_of(self, opt: Any) -> int:
        return next(i for i, b in enumerate(self.graph._optimizers) if b.optimizer is opt)

    def check_slot_sets(self) -> None:
        """A parameter's loaded slots must include all its update needs (or none: a parameter that never
        had a gradient has no state); with ``strict=False`` the missing ones start fresh."""
        names = self.graph._parameter_names()
        for opt, p, group, slots in self.slots.values():
            fresh = opt.init_state(p, group)
            missing = sorted(set(fresh) - set(slots) - set(opt.optional_slots))
            if missing and self.strict:
                suffixes = [f"{names.get(id(p), '?')}-{opt.slot_names.get(s, s)}" for s in missing]
                self.problems.append(f"missing key(s) {suffixes}: the other slots of this parameter are there")
            old = opt.state.get(p) or {}
            for name in missing:  # (strict=False) the state the parameter has, else a fresh one
                slots[name] = old[name] if name in old else fresh[name]

    def train_step(self, value: Any) -> None:
        modules = self.graph._modules.values()
        device = next((p.device for m in modules for p in m.parameters()), backend.CPU)
        try:
            ready = prepared(value, (1,), backend.int64, device)
            if int(ready.numpy()[0]) < 0:
                raise ValueError("is negative")
        except (TypeError, ValueError) as error:
            self.problems.append(f"{TRAIN_STEP!r} should be the step count, an integer tensor of shape (1,) "
                                 f"that is >= 0; it {error}")
            return
        self.step = Tensor.wrap(ready.array.copy(), device)

    def scheduler(self, key: str, value: Any) -> None:
        binding = self._binding(key, _SCHEDULER)
        if binding is None:
            return
        if binding.lr_scheduler is None:
            self.problems.append(f"{key!r} holds a learning-rate scheduler's state, but optimizer "
                                 f"{key[len(_SCHEDULER):]} was added without lr_sch")
            return
        try:
            self.schedulers.append((binding.lr_scheduler, binding.lr_scheduler.checked_state(value)))
        except (TypeError, ValueError) as error:
            self.problems.append(f"{key!r}: {error}")

    def grad_scaler(self, value: Any) -> None:
        scaler = self.graph._grad_scaler
        if scaler is None:
            self.problems.append(f"{_GRAD_SCALER!r} holds a grad scaler's state, but the graph has none: call "
                                 "self.set_grad_scaler(...) in its __init__, or leave the entry out")
            return
        try:
            self.scaler_state = scaler.checked_state(value)
        except ValueError as error:
            self.problems.append(f"{_GRAD_SCALER!r} {error}")

    def commit(self) -> None:
        """Write everything checked; nothing here can fail, and a Ctrl-C waits for the end."""
        graph = self.graph
        with defer_interrupts():
            commit_writes(self.writes)
            for opt, p, _, slots in self.slots.values():
                opt.state[p] = opt.adopt_slots(p, slots)
            for opt, new in self.new_groups:
                for group, loaded in zip(opt.param_groups, new):
                    group.clear()
                    group.update(loaded)
                for p, slots in opt.state.items():   # slots the loaded settings do not use would show stale values
                    for name in set(slots) - set(opt.init_state(p)):
                        del slots[name]
            for scheduler, checked in self.schedulers:
                scheduler._apply_state(checked)
            if self.scaler_state is not None:
                graph._grad_scaler.load_state_dict(self.scaler_state)
            if self.step is not None:
                old = graph._train_step
                if old is not None and old.device == self.step.device:
                    old.array = self.step.array
                else:
                    graph.__dict__["_train_step"] = self.step
