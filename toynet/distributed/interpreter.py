"""The global interpreter: how ops run on global tensors in Eager mode.

Every op goes through :func:`toynet.dynamic.tensor.apply`, whose first line hands the call to
``toynet.mode.tracer`` when one is set: in Graph mode that is the tracer that records nodes. While global
tensors exist (:func:`toynet.distributed.global_tensor.make` installs it, the last one to go removes it),
this interpreter stands there instead, as OneFlow picks its global interpreter for ops on global tensors:

* an op with only local inputs runs exactly as before (the interpreter steps aside for it);
* an op with global inputs: :func:`run` checks they share a placement, asks :mod:`.sbp_rules` for a signature,
  boxes each input to it (:func:`~toynet.distributed.global_tensor.box`), runs the op's forward on the local
  parts, and wraps the result with the signature's SBP and the logical shape the op's shape rule gives.
  Autograd records the op with the global inputs, so backward is global too.

The tracer's two other duties are a module call (run its ``forward``, as Eager mode does) and an in-place
write (``x.copy_(y)``, ``x.add_(y)``, ``x.zero_()``...), which :meth:`GlobalInterpreter.assign` does on the
local part, the value boxed to the tensor's layout first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from .. import backend, mode
from ..dynamic import autograd
from ..dynamic import tensor as eager
from ..dynamic.autograd import GradFn
from ..dynamic.tensor import Tensor
from . import boxing, comm, global_tensor
from .global_tensor import GlobalTensor, box, make
from .sbp import broadcast_on, partial_sum
from .sbp_rules import signature

_NUMBERS = (backend.host.number, backend.host.bool_)


class GlobalInterpreter:
    """What ``toynet.mode.tracer`` holds while global tensors live: the three calls a tracer answers."""

    def apply(self, op: Any, inputs: tuple, attrs: dict) -> Tensor:
        if not any(isinstance(x, GlobalTensor) for x in inputs):
            return eagerly(eager.apply, op, *inputs, **attrs)
        return run(op, inputs, attrs)

    def call_module(self, module: Any, args: tuple, kwargs: dict) -> Any:
        return module.forward(*args, **kwargs)

    def assign(self, target: Tensor, value: Any) -> Tensor:
        if not isinstance(target, GlobalTensor):
            if isinstance(value, GlobalTensor):
                raise RuntimeError("cannot write a global tensor into a local one; write value.to_local(), or "
                                   "make the target global")
            return eagerly(Tensor.copy_, target, value)
        return _assign_global(target, value)


def eagerly(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn`` with the interpreter stepped aside: plain Eager mode."""
    previous, mode.tracer = mode.tracer, None
    try:
        return fn(*args, **kwargs)
    finally:   # (unless the last global tensor died meanwhile)
        mode.tracer = previous if previous is not INTERPRETER or global_tensor._alive[0] > 0 else None


def run(op: Any, inputs: tuple, attrs: dict) -> GlobalTensor:
    """Box the inputs to a signature of ``op``, run its forward on the local parts, wrap the result."""
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    _check_inputs(op.name, tensors)
    if op.changes_device:
        raise RuntimeError(f"{op.name}: a global tensor's device comes from its placement ({tensors[0].placement}); "
                           "it cannot be moved with .to(device)")
    sig = signature(op, inputs, attrs)
    boxed = tuple(box(x, s) if isinstance(x, GlobalTensor) else x for x, s in zip(inputs, sig.inputs))
    shape, dtype = op.infer(*boxed, **attrs)                   # the logical shape, from the op's shape rule
    first = tensors[0]
    if comm.rank() in first._members:
        out = _compute(op, sig, boxed, attrs, first, tuple(shape))
    else:                # not one of the placement's processes: it holds no part and computes nothing
        out = first.device.xp.empty((0,), dtype=dtype.array_dtype)
    result = make(out, first.device, first.placement, sig.output, shape)
    if mode.grad_enabled and out.dtype.kind == "f" and any(t.requires_grad for t in tensors):
        result.requires_grad = True
        result.grad_fn = GradFn(op, boxed, attrs, weakref.ref(result) if op.saves_output else None)
    return result


def _compute(op: Any, sig: Any, boxed: tuple, attrs: dict, first: GlobalTensor, shape: tuple) -> Any:
    """This process's part of the op's output: its forward (or the rule's) on the local parts (``first``: an
    input, whose device and placement the output shares)."""
    xp = first.device.xp
    args = [x.array if isinstance(x, Tensor) else x.item() if isinstance(x, _NUMBERS) else x for x in boxed]
    out = sig.forward(xp, *args) if sig.forward is not None else op.forward(xp, *args, **(sig.attrs or attrs))
    out = xp.asarray(out)
    if op.random:        # every process drew its own numbers: the first one's are the value
        members = first._members
        out = xp.asarray(comm.broadcast(out, root=members[0], ranks=members))
    expected = boxing.local_shape(shape, sig.output, ranks=first._ranks)
    if tuple(out.shape) != expected:
        raise RuntimeError(f"{op.name}: the SBP rule ({sig.rule}) gave a local part of shape {tuple(out.shape)}, "
                           f"but a {shape} value laid out as {sig.output!r} has parts of shape {expected} "
                           "here; the rule is wrong (toynet.distributed.sbp_rules)")
    return out


def _check_inputs(what: str, tensors: list) -> None:
    local = [t for t in tensors if not isinstance(t, GlobalTensor)]
    if local:
        raise RuntimeError(
            f"{what}: got global and local tensors together (a local one of shape {tuple(local[0].shape)}). "
            "Global and local tensors do not mix: make the local one global, e.g. "
            "y.to_global(placement=x.placement, sbp=toynet.sbp.broadcast), or take the global one's local part "
            "with x.to_local()")
    placements = list(dict.fromkeys(t.placement for t in tensors))
    if len(placements) > 1:
        raise RuntimeError(f"{what}: its inputs are on different placements, {placements[0]} and {placements[1]}; "
                           "put them on the same one, e.g. y.to_global(placement=x.placement)")


def _assign_global(target: GlobalTensor, value: Any) -> GlobalTensor:
    """``target.copy_(value)`` (and ``fill_``, ``add_``... which end in it): write the value's part, laid out
    as the target, into the target's local part."""
    xp = target.device.xp
    recording = False
    if isinstance(value, Tensor):
        if not isinstance(value, GlobalTensor):
            raise RuntimeError("cannot write a local tensor into a global one; make it global first, e.g. "
                               "value.to_global(placement=x.placement, sbp=toynet.sbp.broadcast)")
        _check_inputs("copy_", [target, value])
        loading = target.requires_grad and target.grad_fn is None   # a leaf being loaded: not differentiated
        recording = mode.grad_enabled and not loading and (target.requires_grad or value.requires_grad)
        if tuple(value.shape) != tuple(target.shape):   # broadcast the value to the target's shape first
            whole = xp.broadcast_to(box(value, broadcast_on(value._placement)).array, tuple(target.shape))
            local = boxing.component(whole, target._sbp, ranks=target._ranks)
        else:
            value = box(value, target._sbp)
            local = value.array
    else:
        number = backend.as_device_value(value, target.device, target.dtype)
        if isinstance(target._sbp, tuple):     # 2-D SBP: laid out as its parts would be
            local = boxing.component(xp.broadcast_to(xp.asarray(number), tuple(target.shape)), target._sbp,
                                     ranks=target._ranks)
        else:
            first = comm.rank() == target._members[0]   # (a partial sum: the first process holds the number)
            local = xp.zeros_like(target.array) if target._sbp == partial_sum and not first else number
    target.array[...] = local
    autograd.note_write(target, "copy_", rebased=recording)
    if recording:
        target.grad_fn, target.requires_grad = value.grad_fn, value.requires_grad
    return target


INTERPRETER = GlobalInterpreter()
global_tensor.INTERPRETER = INTERPRETER
