"""An optimizer's parameter groups (``add_param_group``, checked as the constructor checks them; OneFlow's
per-group gradient clipping, ``clip_grad``) and its state dict: :meth:`OptimizerState.state_dict` and a
:meth:`~OptimizerState.load_state_dict` that checks everything before it writes anything.

PyTorch's format: ``{"state": {index: {slot: tensor}}, "param_groups": [{..., "params": [index]}]}``, the
parameters numbered in order across groups. Loading validates the groups (their number, their sizes, every
hyper-parameter through the optimizer's own checks) and every slot (its name, shape, dtype and device, made
ready on the parameter's device), and only then replaces the hyper-parameters and the state, in one
section a Ctrl-C cannot split. A failed load leaves the optimizer exactly as it was.

:class:`OptimizerState` is a base class of :class:`~toynet.optim.optimizer.Optimizer`: what a training
step needs is in ``optimizer.py``, what saving and resuming need is here.
"""

from __future__ import annotations

from typing import Any

from .. import backend

from ..dynamic.tensor import Tensor
from ..utils.interrupts import defer_interrupts
from ..utils.loading import ShapeMismatch, prepared
from . import hyper as checks
from .clip_grad import clip_groups


class OptimizerState:
    """An optimizer's parameter groups, and saving and loading its hyper-parameters and state (a base class of
    ``Optimizer``)."""

    # ----------------------------------------------------------------------------- groups

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own hyper-parameters (fine-tuning a new head, say)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"a parameter group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        params = group.get("params")
        if params is None:
            raise ValueError("a parameter group needs a 'params' entry")
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"an optimizer can only optimize tensors, got {type(p).__name__}")
            if p.is_lazy:
                raise TypeError("cannot optimize a lazy tensor: build the optimizer from the module's "
                                "parameters outside nn.Graph.build()")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf tensor (it was computed from other tensors); "
                                 "optimize the leaf parameters it came from")
            if not p.dtype.is_floating_point:
                raise TypeError(f"can only optimize floating-point tensors, got {p.dtype}")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("a parameter group lists the same parameter twice")
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in existing for p in params):
            raise ValueError("some parameters appear in more than one parameter group; each parameter may "
                             "belong to one group only")
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        if checks.CLIP_MAX_NORM in group:   # OneFlow's per-group clipping: the Euclidean norm unless given
            group.setdefault(checks.CLIP_NORM_TYPE, 2.0)
        group["params"] = params
        self._validate(group)
        self.param_groups.append(group)

    def clip_grad(self, error_if_nonfinite: bool = True) -> None:
        """OneFlow's per-group gradient clipping, in Eager mode: for each group that holds
        ``clip_grad_max_norm``, scale its gradients so that their total ``clip_grad_norm_type``-norm is at most
        that (see :mod:`toynet.optim.clip_grad`). Call it after ``backward()`` and before ``step()``; an
        ``nn.Graph`` does the same inside its compiled step. A non-finite norm raises (OneFlow's
        ``error_if_nonfinite=True``) before any gradient changed."""
        clip_groups(self, error_if_nonfinite)

    def group_of(self, param: Tensor) -> dict:
        """The parameter group that holds ``param`` (init_state reads its hyper-parameters)."""
        for group in self.param_groups:
            if any(p is param for p in group["params"]):
                return group
        raise KeyError("this tensor is not one of the optimizer's parameters")

    # ----------------------------------------------------------------------------- printing

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines + [")"])

    # ----------------------------------------------------------------------------- state dict

    def state_dict(self) -> dict:
        """PyTorch's format: ``{"state": {index: {slot: tensor}}, "param_groups": [{..., "params": [index]}]}``.

        Parameters are numbered in order across groups; the tensors are the state itself (not copies),
        which is safe because updates replace state tensors instead of writing into them.
        """
        index_of: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            indices = []
            for p in group["params"]:
                index_of.setdefault(id(p), len(index_of))
                indices.append(index_of[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": indices})
        state = {index_of[id(p)]: dict(slots) for p, slots in self.state.items()
                 if slots and id(p) in index_of}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyper-parameters and state saved by :meth:`state_dict`.

        Everything is checked first (group count and sizes, parameter indices, hyper-parameters with the
        checks of the constructor, slot names, shapes and values, for the settings being loaded); if
        anything is wrong, an error says what, and the optimizer is left unchanged. Then all is written at
        once. A parameter's slot tensors keep their identity (a compiled ``nn.Graph`` reads them).
        """
        if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
            raise ValueError("an optimizer state dict is a dict with exactly the keys 'state' and "
                             f"'param_groups'; got {_describe(state_dict)}")
        saved_groups = state_dict["param_groups"]
        if not isinstance(saved_groups, (list, tuple)) or len(saved_groups) != len(self.param_groups):
            count = len(saved_groups) if isinstance(saved_groups, (list, tuple)) else _describe(saved_groups)
            raise ValueError(f"loaded state dict has {count} parameter groups, this optimizer has "
                             f"{len(self.param_groups)}")
        param_of: dict[int, Tensor] = {}
        group_of: dict[int, dict] = {}
        new_groups = []
        for i, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            indices = saved.get("params") if isinstance(saved, dict) else None
            if not isinstance(indices, (list, tuple)) or len(indices) != len(group["params"]):
                raise ValueError(f"loaded state dict's parameter group {i} has "
                                 f"{len(indices) if isinstance(indices, (list, tuple)) else 'no'} parameters, "
                                 f"this optimizer's group {i} has {len(group['params'])}")
            new_group = self.checked_group(i, saved)
            for index, p in zip(indices, group["params"]):
                index = _index(index)
                if index is None or index in param_of:
                    raise ValueError(f"loaded state dict's parameter group {i} lists "
                                     f"{checks.short_repr(index)}: parameters are numbered 0, 1, 2... once each")
                param_of[index], group_of[index] = p, new_group
            new_groups.append(new_group)

        saved_state = state_dict["state"]
        if not isinstance(saved_state, dict):
            raise TypeError(f"the 'state' entry must be a dict, got {_describe(saved_state)}")
        new_state: dict[Tensor, dict] = {}
        for key, slots in saved_state.items():
            index = _index(key)
            if index not in param_of:
                raise ValueError(f"loaded state dict has state for parameter {checks.short_repr(key)}, which "
                                 "none of its parameter groups lists")
            new_state[param_of[index]] = self.checked_slots(key, param_of[index], group_of[index], slots)

        with defer_interrupts():  # commit: nothing below can fail
            for group, new_group in zip(self.param_groups, new_groups):
                group.clear()
                group.update(new_group)
            self.state = {p: self.adopt_slots(p, slots) for p, slots in new_state.items()}

    def checked_group(self, i: int, saved: Any) -> dict:
        """Group ``i`` as it would be after loading ``saved`` (its saved hyper-parameters over the current
        ones, params kept), checked as the constructor checks; ``ValueError`` if it cannot be loaded."""
        if not isinstance(saved, dict):
            raise ValueError(f"loaded parameter group {i} should be a dict, got {_describe(saved)}")
        group = self.param_groups[i]
        try:
            for key, value in saved.items():
                checks.check_extra(key, value, known=set(self.defaults) | set(checks.SCHEDULER_KEYS))
            new_group = {**group, **{k: v for k, v in saved.items() if k != "params"}, "params": group["params"]}
            if checks.CLIP_MAX_NORM in new_group:   # (as add_param_group does)
                new_group.setdefault(checks.CLIP_NORM_TYPE, 2.0)
            self._validate(new_group)
        except (TypeError, ValueError) as error:
            raise ValueError(f"loaded parameter group {i}: {error}") from error
        return new_group

    def checked_slots(self, key: Any, param: Tensor, group: dict, slots: Any) -> dict[str, Tensor]:
        """The saved slots of one parameter, checked against fresh ones for ``group``'s settings, as new
        tensors of the slots' dtypes on the parameter's device (``ValueError``/``TypeError`` if wrong)."""
        expected = self.init_state(param, group)
        required = set(expected) - set(self.optional_slots)
        if not isinstance(slots, dict) or not required <= set(slots) <= set(expected):
            got = sorted(map(str, slots)) if isinstance(slots, dict) else _describe(slots)
            raise ValueError(f"state of parameter {key}: expected slots {sorted(expected)}, got {got} "
                             f"(was it saved by a {type(self).__name__} with the same settings?)")
        return {name: self.checked_slot(f"state of parameter {key}: slot {name!r}", name, fresh, slots[name])
                for name, fresh in expected.items() if name in slots}

    def checked_slot(self, where: str, name: str, fresh: Tensor, value: Any) -> Tensor:
        """One loaded slot value (a tensor or an array), checked against the ``fresh`` slot, as a new
        tensor like it."""
        try:
            ready = prepared(value, fresh.shape, fresh.dtype, fresh.device, getattr(fresh, "_placement", None))
            problem = self.check_slot(name, ready.numpy())
        except ShapeMismatch as error:
            raise ValueError(f"{where} has shape {error.got}, the parameter needs {error.expected}") from None
        except (TypeError, ValueError) as error:
            raise (TypeError if isinstance(error, TypeError) else ValueError)(f"{where} {error}") from None
        if problem:
            raise ValueError(f"{where} {problem}")
        if ready.array is value or ready.array is getattr(value, "array", None) or not backend.owns_memory(ready.array):
            ready = Tensor.wrap(ready.array.copy(), ready.device)  # the state must not share the caller's array
        return ready

    def adopt_slots(self, param: Tensor, slots: dict[str, Tensor]) -> dict[str, Tensor]:
        """``slots`` (checked, owned tensors) as ``param``'s new state, reusing the tensor objects of the
        slots it already has (they take the new arrays). Cannot fail: loads call it while committing."""
        old = self.state.get(param) or {}
        for name, value in slots.items():
            tensor = old.get(name)
            if tensor is not None and tensor.device == value.device and tensor.dtype is value.dtype:
                tensor.array = value.array
                slots[name] = tensor
        return slots




def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return checks.short_repr(f"a dict with keys {sorted(map(str, value))}", 200)
    return f"a {type(value).__name__}"


def _index(key: Any) -> int | None:
    """A parameter's number in a state dict: an int, or its decimal string (formats that only have string
    keys); None for anything else."""
    if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        return key
    if isinstance(key, str) and key.isdigit() and key.isascii() and str(int(key)) == key:
        return int(key)
    return None
