"""``apply`` written for speed: the lesson's door (:func:`toynet.dynamic.tensor.apply`) as one loop.

The lesson's ``apply`` reads in four steps (the tensors among the inputs, their one device, their arrays,
the record), each a comprehension or ``any`` over the inputs. On a small model, where a training step is
a few dozen ops on small arrays, those passes over the inputs and the calls around them are a third of an
op's cost. Here one loop over the inputs finds the device, the arrays and whether any input requires grad,
and the result tensor is filled in place. It computes exactly what the lesson's does.

Every module that calls ``apply`` by name gets this version while the fast path is on (the modules bind
``apply`` when they import it, so each is registered as an owner).
"""

from __future__ import annotations

import weakref
from typing import Any

from ... import mode
from ...backend import CPU
from ...mode import fast_replacement
from ...ops import _op as op_base
from ...ops import op_errors
from .. import functional, tensor, tensor_data, tensor_maths, tensor_methods
from ..autograd import GradFn
from ..tensor import _SCALARS, Tensor, _refusal

_new = Tensor.__new__


def fast_apply(op: Any, *inputs: Any, **attrs: Any) -> Tensor:
    """What :func:`toynet.dynamic.tensor.apply` computes, in one pass over the inputs."""
    if mode.tracer is not None:
        return mode.tracer.apply(op, inputs, attrs)
    device, requires_grad, args = None, False, []
    for x in inputs:
        if isinstance(x, Tensor):
            if x.array is None or (device is not None and x.device is not device):
                raise _refusal(op, inputs)
            device = x.device
            requires_grad = requires_grad or x.requires_grad
            args.append(x.array)
        elif isinstance(x, _SCALARS):
            args.append(x.item())   # NumPy scalars become Python numbers, which never widen a dtype
        else:
            args.append(x)
    if device is None:
        device = attrs.get("device") or CPU
    try:
        out = op.forward(device.xp, *args, **attrs)
    except Exception as error:
        raise op_errors.explain_failure(op, inputs, attrs, error) from error
    if op.changes_device:
        device = attrs["device"]
    if not out.ndim:
        out = device.xp.asarray(out)
    result = _new(Tensor)
    result.array, result.node, result.device, result.grad, result.name = out, None, device, None, None
    if op.may_alias_input and len(inputs) == 1:
        result._version, inputs[0]._has_views = inputs[0], True
    else:
        result._version = None
    if requires_grad and mode.grad_enabled and out.dtype.kind == "f":
        result.requires_grad = True
        result.grad_fn = GradFn(op, inputs, attrs, weakref.ref(result) if op.saves_output else None)
    else:
        result.requires_grad, result.grad_fn = False, None
    if mode.op_observers:
        for observer in mode.op_observers:
            observer(op, inputs, attrs, result)
    return result


for _owner in (tensor, tensor_methods, tensor_maths, tensor_data, functional):
    fast_replacement(_owner, "apply")(fast_apply)
fast_replacement(op_base, "_apply")(fast_apply)
