"""SBP: how a global tensor's one logical value is laid out over the processes of its placement.

OneFlow names three ways, and toynet has the same (``toynet.sbp``):

* ``toynet.sbp.split(dim)`` (**S**): the value is cut along ``dim``; process r holds piece r. A (4, 5)
  tensor split(0) over 2 processes: each holds (2, 5). Pieces follow :func:`toynet.distributed.comm.shard_sizes`.
* ``toynet.sbp.broadcast`` (**B**): every process holds the whole value, the same.
* ``toynet.sbp.partial_sum`` (**P**): every process holds a tensor of the whole shape, and the value is their
  sum. ``x @ w`` with ``x`` split along its columns and ``w`` along its rows gives that: each process
  multiplies its pieces, and the products still have to be added up.

The three are descriptions, not copies: turning one into another (*boxing*, :mod:`toynet.distributed.boxing`)
is a collective or a local slice, and the value never changes. ``tensor.sbp`` is a tuple with one per
dimension of the placement's hierarchy, as in OneFlow: ``(toynet.sbp.split(dim=0),)``.
"""

from __future__ import annotations

from typing import Any


class sbp:
    """What the three kinds share. Two descriptions are equal when they lay a value out the same way."""

    __slots__ = ()
    short = "?"

    def __repr__(self) -> str:
        return f"toynet.sbp.{self.name}"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__name__)


class split(sbp):
    """Cut along dimension ``dim``: process r holds piece r."""

    __slots__ = ("dim",)

    def __init__(self, dim: int):
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"toynet.sbp.split(dim) takes an int, the dimension to cut along; got {dim!r}")
        self.dim = dim

    @property
    def name(self) -> str:
        return f"split(dim={self.dim})"

    @property
    def short(self) -> str:
        return f"S({self.dim})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, split) and other.dim == self.dim

    def __hash__(self) -> int:
        return hash(("split", self.dim))


class _Broadcast(sbp):
    """Every process holds the whole value."""

    __slots__ = ()
    name, short = "broadcast", "B"


class _PartialSum(sbp):
    """Every process holds a tensor of the whole shape; the value is their sum."""

    __slots__ = ()
    name, short = "partial_sum", "P"


broadcast = _Broadcast()
partial_sum = _PartialSum()


def one(value: Any) -> sbp:
    """The single SBP of a 1-D placement, from ``sbp=`` as users write it: an SBP, or a tuple/list of one."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"sbp={value!r} has {len(value)} entries: that is 2-D SBP, for a placement with a 2-D "
                             "grid of ranks (ranks=[[0, 1], [2, 3]]); a 1-D placement takes one, e.g. "
                             "toynet.sbp.split(0)")
        value = value[0]
    if not isinstance(value, sbp):
        raise TypeError(f"sbp must be toynet.sbp.split(dim), toynet.sbp.broadcast or toynet.sbp.partial_sum, "
                        f"got {value!r}")
    return value


def broadcast_on(placement: Any) -> sbp | tuple:
    """Broadcast, as a layout on ``placement``: B, or (B, B) on a 2-D grid (every process holds the whole value)."""
    axes = len(placement.hierarchy)
    return broadcast if axes == 1 else tuple(broadcast for _ in range(axes))


def short(layout: Any) -> str:
    """``S(0)``, ``B``, ``P``; ``B, S(0)`` for 2-D SBP (one per axis of the grid), as OneFlow prints them."""
    return ", ".join(s.short for s in layout) if isinstance(layout, tuple) else layout.short


def layout(value: Any, placement: Any, ndim: int) -> sbp | tuple:
    """``sbp=`` as users write it, for a tensor of ``ndim`` dimensions on ``placement``: one SBP for a 1-D
    placement (``split(0)`` or ``(split(0),)``), a tuple of one SBP per axis for a 2-D grid of processes."""
    axes = len(placement.hierarchy) if placement is not None else 1
    if axes == 1:
        return for_tensor(one(value), ndim)
    if not isinstance(value, (tuple, list)) or len(value) != axes:
        raise ValueError(f"{placement} is a {axes}-D grid of processes: sbp= needs one SBP per axis, a tuple of "
                         f"{axes} such as (toynet.sbp.broadcast, toynet.sbp.split(0)); got {value!r}")
    return tuple(for_tensor(one(v), ndim) for v in value)


def for_tensor(value: sbp, ndim: int) -> sbp:
    """``value`` with a negative split dimension counted from the end of an ``ndim``-d tensor."""
    if isinstance(value, split):
        if not -ndim <= value.dim < ndim:
            raise ValueError(f"toynet.sbp.split(dim={value.dim}) cannot cut a tensor of {ndim} dimension(s) "
                             f"(valid dims: {-ndim}..{ndim - 1})" if ndim else
                             "a 0-d tensor has no dimension to split: use toynet.sbp.broadcast or partial_sum")
        return split(value.dim % ndim) if value.dim < 0 else value
    return value
