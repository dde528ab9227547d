"""Boxing: turning one layout of a value into another, on this process's part of it.

When an op's inputs do not have the SBP its signature needs (:mod:`toynet.distributed.sbp_rules`), toynet
converts them first, as OneFlow does. The logical value never changes; only how it is laid out. Read
:mod:`.boxing_1d` first: on a 1-D placement each conversion is one collective (S->B all-gather, P->B
all-reduce, P->S reduce-scatter, S(i)->S(j) all-to-all) or a local step; its table is :data:`PATHS`.
:mod:`.boxing_nd` does 2-D SBP over a grid of processes with those. This module picks one by the layout (a
single SBP, or a tuple of one per axis of the grid) and moves values between placements (:func:`move`).
"""

from __future__ import annotations

from typing import Any

from . import boxing_nd, comm
from .boxing_1d import PATHS, kind, place  # noqa: F401  (the table and its helpers, for readers of this module)
from . import boxing_1d
from .sbp import broadcast, sbp


def local_shape(shape: tuple, s: Any, rank: int | None = None, size: int | None = None,
                ranks: tuple | None = None) -> tuple:
    """The shape of the part process ``rank`` (of ``size``) holds of a value of ``shape`` laid out as ``s``; by
    default this process's part over ``ranks`` (a placement's; a grid for 2-D SBP). Outside them: ``(0,)``."""
    if isinstance(s, tuple):
        return boxing_nd.local_shape(shape, s, ranks)
    return boxing_1d.local_shape(shape, s, rank, size, ranks)


def component(full: Any, s: Any, rank: int | None = None, size: int | None = None, ranks: tuple | None = None) -> Any:
    """This process's part of a whole value ``full`` laid out as ``s`` (no communication)."""
    if isinstance(s, tuple):
        return boxing_nd.component(full, s, ranks)
    return boxing_1d.component(full, s, rank, size, ranks)


def convert(xp: Any, local: Any, src: Any, dst: Any, shape: tuple, ranks: tuple | None = None) -> Any:
    """This process's part of a value of logical ``shape`` laid out as ``dst``, from its part as ``src``, over
    the processes ``ranks``; every one of them calls it together. Always a new array."""
    if isinstance(dst, tuple):
        return boxing_nd.convert(xp, local, src, dst, shape, ranks)
    return boxing_1d.convert(xp, local, src, dst, shape, ranks)


def move(xp: Any, local: Any, src: tuple, src_sbp: sbp, dst: tuple, dst_sbp: sbp, shape: tuple, dtype: Any) -> Any:
    """This process's part of a value moved from the processes ``src`` (laid out as ``src_sbp``) to ``dst``
    (as ``dst_sbp``): the sources make it whole among themselves, the first of them sends it to every process
    of either placement, and each process of ``dst`` keeps its part. Every process of ``src`` and ``dst`` must
    call it together; any other gets an empty part at once (``dtype``: its array dtype)."""
    me = comm.rank()
    if isinstance(src_sbp, tuple) or isinstance(dst_sbp, tuple):
        raise NotImplementedError("moving a value laid out with 2-D SBP to another placement is not supported; "
                                  "make it broadcast first, or move it from a 1-D placement")
    whole = convert(xp, local, src_sbp, broadcast, shape, ranks=src) if me in src else None
    both = tuple(sorted(set(src) | set(dst)))
    if me not in dst:
        if me in both and len(both) > 1:
            comm.broadcast(whole, root=src[0], ranks=both)
        return xp.empty((0,), dtype=dtype)
    whole = xp.asarray(comm.broadcast(whole, root=src[0], ranks=both)) if len(both) > 1 else whole
    return component(whole, dst_sbp, ranks=dst)
