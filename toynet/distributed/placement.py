"""``toynet.placement``: the processes (and their kind of device) a global tensor lives on.

``toynet.placement(type="cpu", ranks=[0, 1])``: on the CPUs of processes 0 and 1. ``ranks`` may be nested,
``[[0, 1], [2, 3]]``, to arrange the processes in a 2-D *hierarchy* (``placement.hierarchy == Size([2, 2])``),
as OneFlow does for 2-D SBP (split along one axis of the grid, broadcast along the other). A placement may
name some of the processes only (``ranks=[1]``: a pipeline stage): the others hold an empty part of its
tensors and skip their ops, and ``x.to_global(placement=other)`` moves a value between placements.

``type="cuda"`` is accepted as in OneFlow, where each process uses the GPU of its ``LOCAL_RANK``. OneFlow's
distributed pages are written for GPUs, and a placement is a *logical* description of where the parts of a
value live: on a machine without a GPU (or without CuPy) a "cuda" placement keeps its type, prints as written,
and its processes compute on their CPUs, after one warning that says so. (A *local* tensor's
``.to("cuda")`` still fails without a GPU: that asks for a device, not for a layout over processes.)
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import backend
from ..backend import CPU, Device
from ..dynamic.tensor import Size
from .world import describe


_warned: list[bool] = []   # the no-GPU warning is given once a run


class placement:
    __slots__ = ("_ranks", "hierarchy", "type")

    def __init__(self, type: str = "cpu", ranks: Any = None):
        if type not in ("cpu", "cuda"):
            raise ValueError(f"placement type must be 'cpu' or 'cuda', got {type!r}")
        if type == "cuda" and not backend.cuda_is_available() and not _warned:
            _warned.append(True)
            warnings.warn("placement type 'cuda', but toynet.cuda.is_available() is False here (no GPU, or no CuPy): "
                          "the processes of cuda placements compute on their CPUs. Install CuPy on a GPU machine to "
                          "use the GPUs, or write toynet.placement('cpu', ranks)", UserWarning, stacklevel=2)
        if ranks is None:
            raise TypeError("placement needs ranks: the processes, e.g. toynet.placement('cpu', ranks=[0, 1])")
        self.type = type
        self._ranks, self.hierarchy = _nested(ranks)

    @classmethod
    def all(cls, type: str = "cpu") -> placement:
        """Every process of the run: ``ranks=[0, 1, ..., world_size - 1]``."""
        return cls(type, list(range(describe().size)))

    @property
    def ranks(self) -> list:
        """The ranks as given: a list, or a list of lists for a 2-D hierarchy."""
        return _as_lists(self._ranks)

    @property
    def device_type(self) -> str:
        return self.type

    def flat_ranks(self) -> tuple[int, ...]:
        flat: list[int] = []
        _flatten(self._ranks, flat)
        return tuple(flat)

    def device(self) -> Device:
        """The device this process holds its part on: the CPU, or the GPU of its LOCAL_RANK (the CPU when the
        machine has no GPU: see the module's docstring)."""
        if self.type == "cpu" or not backend.cuda_is_available():
            return CPU
        return Device("cuda", describe().local_rank)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, placement) and (self.type, self._ranks) == (other.type, other._ranks)

    def __hash__(self) -> int:
        return hash((self.type, self._ranks))

    def __repr__(self) -> str:
        return f'toynet.placement(type="{self.type}", ranks={self.ranks})'


def check_for_tensors(p: Any) -> placement:
    """The placement of a global tensor: what toynet supports so far, with the reason when it does not."""
    if not isinstance(p, placement):
        raise TypeError(f"placement must be a toynet.placement, e.g. toynet.placement('cpu', ranks=[0, 1]); got {p!r}")
    if len(p.hierarchy) > 2:
        raise NotImplementedError(f"{p} has a {len(p.hierarchy)}-D grid of processes; toynet lays values out over "
                                  "1-D and 2-D ones")
    w = describe()
    missing = [r for r in p.flat_ranks() if not 0 <= r < w.size]
    if missing:   # more ranks than processes: the run was started with too few
        raise ValueError(f"{p} names rank(s) {missing}, but this run has {w.size} process(es) (ranks "
                         f"{list(range(w.size))}); start it with enough processes, e.g. python -m "
                         f"toynet.distributed.launch --nproc_per_node {max(p.flat_ranks()) + 1} script.py")
    return p


def _nested(ranks: Any) -> tuple[tuple, Size]:
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        ranks = [ranks]
    if isinstance(ranks, range):
        ranks = list(ranks)
    if not isinstance(ranks, (list, tuple)) or not ranks:
        raise TypeError(f"placement ranks must be a non-empty list of process numbers (or a list of lists), "
                        f"got {ranks!r}")
    if all(isinstance(r, (list, tuple, range)) for r in ranks):
        rows = [_nested(r) for r in ranks]
        if len({h for _, h in rows}) != 1:
            raise ValueError(f"placement ranks {ranks!r}: the rows of a hierarchy must all have the same shape")
        nested, hierarchy = tuple(r for r, _ in rows), Size((len(rows),) + tuple(rows[0][1]))
    elif any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ranks):
        raise TypeError(f"placement ranks must be process numbers (ints >= 0), or lists of them; got {ranks!r}")
    else:
        nested, hierarchy = tuple(ranks), Size([len(ranks)])
    flat: list[int] = []
    _flatten(nested, flat)
    if len(set(flat)) != len(flat):
        raise ValueError(f"placement ranks {ranks!r} name a process twice")
    return nested, hierarchy


def _flatten(ranks: Any, out: list[int]) -> None:
    for r in ranks:
        if isinstance(r, tuple):
            _flatten(r, out)
        else:
            out.append(r)


def _as_lists(ranks: Any) -> list:
    return [_as_lists(r) if isinstance(r, tuple) else r for r in ranks]
