"""In-place writes and backward: how often each tensor's memory was written (PyTorch's version counters).

``x.mul_(2)`` or ``x[0] = 1`` would silently change what a vjp reads. Each write is counted on the
:class:`Version` of the tensor's memory (:func:`note_write`), and backward refuses a vjp whose saved tensors
were written after its op ran (:func:`check_saved`). To keep the forward pass cheap, a record
(``toynet.dynamic.autograd.GradFn``) notes only the global write :data:`clock` when its op ran (its ``epoch``), and
backward checks a record only if the clock has moved since then.
"""

from __future__ import annotations

from typing import Any

class Version:
    """How often a tensor's memory has been written in place: PyTorch's version counter.

    One Version counts the writes into one memory, whichever tensor they go through. ``Tensor._version``
    is ``None`` until the first write or check (an op result costs nothing), or, for a view (reshape,
    slicing, ``detach()``...), the tensor it views. The class attributes are the defaults (cheap to make).
    """

    n = 0            # writes so far: the tensor "is at version n"
    stamps = ()      # the write clock at the last few writes, oldest first (for backward's check)
    writer = ""      # the in-place method that wrote last, for error messages
    rebased = 0      # the stamp of the last write that gave the tensor a new history (``a.mul_(w)``)


_KEPT_STAMPS = 16
clock = 0            # in-place writes so far, counted over all tensors (GradFn.epoch reads it)


def version_of(tensor: Any) -> Version:
    """The Version of ``tensor``'s memory, made on first use (following a view to the tensor it views)."""
    base = tensor
    version = getattr(base, "_version", None)   # nn.Parameter leaves the slot unset: hence getattr
    while version is not None and type(version) is not Version:
        base, version = version, getattr(version, "_version", None)
    if version is None:
        version = base._version = Version()
    if base is not tensor:
        tensor._version = base   # one step next time, however long the chain of views was
    return version


def note_write(tensor: Any, writer: str, rebased: bool = False) -> None:
    """Count one in-place write into ``tensor``'s memory, made by ``writer``. ``rebased``: it gave the tensor
    a new ``grad_fn``; the ops that used the tensor before would follow it, so they are differentiated no more."""
    global clock
    clock += 1
    version = version_of(tensor)
    version.n += 1
    version.stamps = version.stamps[1 - _KEPT_STAMPS:] + (clock,)
    version.writer = writer
    if rebased:
        version.rebased = clock


# Ops whose vjp reads only the shapes and dtypes of its inputs before position N (N here): a write into
# them changes nothing backward computes (PyTorch does not save them). Other ops read all their inputs.
_UNREAD_INPUTS = {**dict.fromkeys(("add", "sub", "neg", "identity", "cast", "to_device", "reshape", "permute",
                                   "broadcast_to", "sum", "sum_to", "mean", "cat"), 1 << 30),
                  "getitem": 1,      # getitem reads only its index tensors
                  "sub_scaled": 1}   # a - scale * b reads b and scale only


def check_saved(fn: Any, output: Any) -> None:
    """Refuse to run ``fn``'s vjp if a tensor it uses was written in place after the op ran (backward calls
    it only if the write clock moved since then); ``output``: the op's output, if its vjp reads it."""
    unread = _UNREAD_INPUTS.get(fn.op.name, 0)
    for i, x in enumerate(fn.inputs):
        if _written_since(x, fn.epoch) and (version_of(x).rebased > fn.epoch or i >= unread and _read_by_vjp(fn, i)):
            raise _modified_error(fn, x, f"input {i}")
    if output is not None and _written_since(output, fn.epoch):
        raise _modified_error(fn, output, "output")


def _read_by_vjp(fn: Any, i: int) -> bool:
    """mul's vjp reads one factor only for the other's gradient (so does div its numerator): ``y * 2``
    needs no value of ``y``. Every other op (past _UNREAD_INPUTS) is taken to read all its inputs."""
    name = fn.op.name
    if name == "mul" or (name == "div" and i == 0):
        return getattr(fn.inputs[1 - i], "requires_grad", False)
    return True


def _written_since(x: Any, epoch: int) -> bool:
    if getattr(x, "_version", None) is None:   # a number, or a tensor never written nor viewing another
        return False
    version = version_of(x)
    return version.n > 0 and version.stamps[-1] > epoch


def _modified_error(fn: Any, x: Any, role: str) -> RuntimeError:
    version = version_of(x)
    later = sum(1 for s in version.stamps if s > fn.epoch)
    exact = later < len(version.stamps) or len(version.stamps) == version.n
    made = f", which is the output of {x.grad_fn.name}," if x.grad_fn is not None else ""
    rebased = version.rebased > fn.epoch
    used, why = ("used", "then gave it a new history (gradients flow through that write), so its gradient would "
                 "take that history instead of the one the op used") if rebased else \
        ("saved", "changed it after that op ran, so the gradient would be computed from the new values")
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[tensor of shape {tuple(x.shape)}, dtype {x.dtype.name}]{made} is at version {version.n}; expected "
        f"version {version.n - later}{'' if exact else ' or earlier'} instead. It was {used} by {fn.op.name} "
        f"({fn.name}) as its {role}, and {version.writer} {why}. Fix: write into a copy (y = x.clone(); "
        "y.mul_(2)), use the out-of-place form (x = x * 2), or call backward() before the in-place write.")
