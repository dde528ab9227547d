"""What happens to a module's tensors as a whole: saved (``state_dict``), loaded back (``load_state_dict``,
checked before anything is written), moved to a device and cast to a dtype (``to``, ``cuda``, ``double``).

:class:`ModuleState` is a base class of :class:`~toynet.nn.module.Module`: the registries, the call and the
traversal are in ``module.py``, everything here walks them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, NamedTuple

from .. import backend
from ..dynamic.tensor import Tensor
from ..mode import no_grad
from ..utils.interrupts import defer_interrupts
from ..utils.loading import ShapeMismatch, prepared, unaliased

class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict`` did not match: keys the module has but the dict lacked, and the reverse."""

    missing_keys: list
    unexpected_keys: list


class LoadPlan(NamedTuple):
    """The checked first pass of a load: problems found, and the copies to make if there are none."""

    problems: list
    writes: list      # (target tensor, ready tensor of its shape, dtype and device)
    missing: list
    unexpected: list


def commit_writes(writes: list) -> None:
    """The second pass of a load: copy every ready value into its target, all or none (nothing here can
    fail, and a Ctrl-C waits until the last copy is done)."""
    writes = unaliased(writes)
    with no_grad(), defer_interrupts():
        for target, ready in writes:
            target.copy_(ready)



class ModuleState:
    """Saving, loading, moving and casting a module's parameters and buffers (a base class of ``Module``)."""

    # ------------------------------------------------------------------------------ state dict

    def state_dict(self, destination: dict | None = None, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Every parameter and persistent buffer by dotted name (``"0.weight"``), detached. A parameter's
        entry shares its memory and, as in OneFlow, keeps its ``requires_grad`` (it prints so)."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach().requires_grad_(p.requires_grad)
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> IncompatibleKeys:
        """Copy values into this module's parameters and buffers by name (in place: the tensor objects,
        which optimizers hold, stay the same).

        Everything is checked before anything is copied, so a mismatch leaves the module unchanged:
        with ``strict``, missing and unexpected keys are errors; a value of another shape, one that is not
        numbers (strings, objects), or whose values the dtype cannot hold (1.5 into an integer buffer)
        always is (:mod:`toynet.utils.loading` says what is accepted). Values are cast to each tensor's
        dtype and moved to its device. The copy itself cannot be split by a Ctrl-C.
        Returns ``(missing_keys, unexpected_keys)`` as a named tuple, as PyTorch does.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict expects a dict of tensors, got {type(state_dict).__name__}")
        plan = self._plan_load(state_dict, strict)
        if plan.problems:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n  "
                               + "\n  ".join(plan.problems))
        commit_writes(plan.writes)
        return IncompatibleKeys(plan.missing, plan.unexpected)

    def _plan_load(self, state_dict: dict, strict: bool) -> LoadPlan:
        """The first pass of :meth:`load_state_dict` (``nn.Graph`` runs it for each of its modules before
        writing any): what is wrong, and the ``(target, ready value)`` pairs to copy if nothing is."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        problems = []
        if strict and missing:
            problems.append("Missing key(s) in state_dict: " + ", ".join(repr(k) for k in missing))
        if strict and unexpected:
            problems.append("Unexpected key(s) in state_dict: " + ", ".join(repr(k) for k in unexpected))
        writes = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            try:
                writes.append((target, prepared(state_dict[key], target.shape, target.dtype, target.device,
                                                getattr(target, "_placement", None))))
            except ShapeMismatch as error:
                problems.append(f"size mismatch for {key!r}: the checkpoint has shape {error.got}, this model "
                                f"has {error.expected}")
            except (TypeError, ValueError) as error:
                problems.append(f"{key!r} {error}")
        return LoadPlan(problems, writes, missing, unexpected)


    # ----------------------------------------------------------------------------- devices and dtypes

    def _convert(self, convert: Callable[[Tensor], Tensor]) -> "ModuleState":
        """Replace every parameter's and buffer's data in place, keeping the tensor objects (optimizers
        hold references to the parameters)."""
        for module in self.modules():
            for registry in (module._parameters, module._buffers):
                for t in registry.values():
                    if t is not None:
                        moved = convert(t.detach())
                        t.array, t.device = moved.array, moved.device
                        if t.grad is not None:
                            g = convert(t.grad)
                            t.grad = g
        return self

    def to(self, *args: Any, **kwargs: Any) -> "ModuleState":
        """Move (``"cuda"``) and/or cast (``toynet.float64``) every parameter and buffer, in place.
        Integer buffers keep their dtype. ``module.to(nn.graph.GraphModule)``: its Graph-mode settings."""
        if len(args) == 1 and getattr(args[0], "wraps_modules", False):
            return args[0].of(self)
        def convert(t: Tensor) -> Tensor:
            if not t.dtype.is_floating_point:
                device = kwargs.get("device") or next((a for a in args if not _is_dtype(a)), None)
                return t.to(device) if device is not None else t
            return t.to(*args, **kwargs)
        return self._convert(convert)

    def cpu(self) -> "ModuleState":
        return self.to("cpu")

    def cuda(self, index: int = 0) -> "ModuleState":
        return self.to(backend.Device("cuda", index))

    def float(self) -> "ModuleState":
        return self.to(backend.float32)

    def double(self) -> "ModuleState":
        return self.to(backend.float64)



def _is_dtype(a: Any) -> bool:
    if isinstance(a, backend.DType) or a in (float, int, bool):
        return True
    if isinstance(a, str):
        try:
            backend.to_dtype(a)
            return True
        except TypeError:
            return False
    return False
