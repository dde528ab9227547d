"""Boxing on a 1-D placement: turning one SBP of a value into another, on this process's part of it.

When an op's inputs do not have the SBP its signature needs (:mod:`toynet.distributed.sbp_rules`), toynet
converts them first, as OneFlow does. The logical value never changes; only how it is laid out. Each
conversion is one collective of :mod:`toynet.distributed.comm`, or a local step with no communication:

==============  ======================  ====================================================================
from            to                      how
==============  ======================  ====================================================================
split(i)        broadcast               ``all_gather`` along i: everybody gets every piece
partial_sum     broadcast               ``all_reduce``: everybody gets the sum
partial_sum     split(i)                ``reduce_scatter`` along i: the sum, each keeping its piece
split(i)        split(j)                ``all_to_all``: cut along j, send piece r to process r, join along i
broadcast       split(i)                local: keep your piece (no communication)
broadcast       partial_sum             local: the first process keeps the value, the others hold zeros
split(i)        partial_sum             local: your piece in place, zeros elsewhere
==============  ======================  ====================================================================

:data:`PATHS` is this table; :func:`convert` follows it. The functions here work on arrays; the tensor step
(:func:`toynet.distributed.global_tensor.box`) records each conversion for autograd too. Its gradient is the
identity on the logical value: the gradient keeps whatever layout it has, and is boxed later where an op or
a leaf needs another.
"""

from __future__ import annotations

from typing import Any

from . import comm
from .sbp import broadcast, partial_sum, sbp, split

#: (from, to) -> the collective (or local step) that converts, by kind: "S", "B", "P".
PATHS = {("S", "B"): "all_gather", ("P", "B"): "all_reduce", ("P", "S"): "reduce_scatter",
         ("S", "S"): "all_to_all", ("B", "S"): "local slice", ("B", "P"): "local: first rank keeps, zeros elsewhere",
         ("S", "P"): "local: piece in place, zeros elsewhere"}


def kind(s: sbp) -> str:
    return "S" if isinstance(s, split) else s.short


def place(ranks: tuple | None = None) -> tuple[int | None, int]:
    """This process's index among ``ranks`` (None if it is not one of them) and how many they are; ``None``:
    every process of the run."""
    me = comm.rank()
    if ranks is None:
        return me, comm.world_size()
    return (ranks.index(me) if me in ranks else None), len(ranks)


def local_shape(shape: tuple, s: sbp, rank: int | None = None, size: int | None = None,
                ranks: tuple | None = None) -> tuple:
    """The shape of the part process ``rank`` (of ``size``) holds of a value of ``shape`` laid out as ``s``; by
    default this process's part, over ``ranks`` (a placement's). A process outside ``ranks`` holds nothing:
    an empty part, shape ``(0,)``."""
    if rank is None:
        rank, size = place(ranks)
        if rank is None:
            return (0,)
    if not isinstance(s, split):
        return tuple(shape)
    out = list(shape)
    out[s.dim] = comm.shard_sizes(shape[s.dim], size)[rank]
    return tuple(out)


def component(full: Any, s: sbp, rank: int | None = None, size: int | None = None, ranks: tuple | None = None) -> Any:
    """This process's part of a whole value ``full`` laid out as ``s`` (no communication: every process must
    hold ``full`` already). Always a new array."""
    if rank is None:
        rank, size = place(ranks)
        if rank is None:
            return full.reshape(-1)[:0].copy()     # not one of the placement's processes: an empty part
    if isinstance(s, split):
        index = (slice(None),) * s.dim + (comm.shard_slice(full.shape[s.dim], size, rank),)
        return full[index].copy()
    if s == partial_sum and rank != 0:
        return full * 0
    return full.copy()


def convert(xp: Any, local: Any, src: sbp, dst: sbp, shape: tuple, ranks: tuple | None = None) -> Any:
    """This process's part of a value of logical ``shape`` laid out as ``dst``, from its part as ``src``
    (``xp``: the array module, NumPy or CuPy), over the processes ``ranks`` (a placement's; None: all). Every
    one of them must call it together when the conversion is a collective; a process outside them gets an
    empty part at once. Always a new array."""
    rank, size = place(ranks)
    if rank is None:
        return local.copy()
    if src == dst:
        return local.copy()
    if dst == broadcast:
        if isinstance(src, split):
            return comm.all_gather(local, axis=src.dim, ranks=ranks)
        return comm.all_reduce(local, ranks=ranks)                         # partial_sum -> broadcast
    if isinstance(dst, split):
        if src == partial_sum:
            return comm.reduce_scatter(local, axis=dst.dim, ranks=ranks)
        if isinstance(src, split):
            return comm.all_to_all(local, split_axis=dst.dim, concat_axis=src.dim, ranks=ranks)
        return component(local, dst, rank, size)                           # broadcast -> split: a slice
    if src == broadcast:                                                   # -> partial_sum
        return component(local, partial_sum, rank, size)
    whole = xp.zeros(shape, dtype=local.dtype)                             # split -> partial_sum
    whole[(slice(None),) * src.dim + (comm.shard_slice(shape[src.dim], size, rank),)] = local
    return whole

