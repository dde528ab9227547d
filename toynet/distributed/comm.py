"""Collective communication on arrays: what every process of a run calls together.

Each function takes this process's array (NumPy, or CuPy: it is moved to the host for MPI and the result
moved back) and returns a new one; every process of the run must call the same functions in the same order
(that is what *collective* means). With one process they compute the same results without MPI, so code
written for N processes runs unchanged on one.

=================================  ==========================================================================
``all_reduce(x, op="sum")``        every process gets the elementwise sum (or mean, max, min, prod) of all xs
``all_gather(x, axis)``            every process gets all xs concatenated along ``axis``, in rank order
``reduce_scatter(x, axis)``        the sum of all xs, cut along ``axis``: process r keeps piece r
``all_to_all(x, split, concat)``   x cut along ``split``: piece j goes to process j, who concatenates the
                                   pieces it receives along ``concat``
``broadcast(x, root)``             every process gets the root's x
``barrier()``                      returns once every process has called it
=================================  ==========================================================================

Each takes ``ranks=``, to run among some of the processes only (a :class:`Group`: a placement's ranks).

Pieces follow one rule everywhere in toynet (and NumPy's ``array_split``): a length ``n`` cut in ``k`` gives
the first ``n % k`` pieces one element more (:func:`shard_sizes`). Before moving data, each collective
compares the shapes and dtypes all processes passed, so a mismatch is an error that lists them rather than
a hang or garbage.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .. import backend
from .world import describe, world

np = backend.host  # NumPy: MPI sends host memory (only toynet.backend imports NumPy or CuPy)

_REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def rank() -> int:
    """This process's number, 0..world_size()-1 (``RANK``)."""
    return describe().rank


def world_size() -> int:
    """How many processes the run has (``WORLD_SIZE``)."""
    return describe().size


def local_rank() -> int:
    """This process's number among those on its machine (``LOCAL_RANK``): which GPU it would use."""
    return describe().local_rank


def shard_sizes(n: int, parts: int) -> list[int]:
    """How a length ``n`` is cut into ``parts`` pieces: ``shard_sizes(5, 2) == [3, 2]``."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def shard_slice(n: int, parts: int, index: int) -> slice:
    """Where piece ``index`` of a length ``n`` cut in ``parts`` lies: ``shard_slice(5, 2, 1) == slice(3, 5)``."""
    sizes = shard_sizes(n, parts)
    start = sum(sizes[:index])
    return slice(start, start + sizes[index])


# ------------------------------------------------------------------------------------------ groups


@dataclass
class Group:
    """Some of the processes, running collectives among themselves: those of a placement on part of the run
    (``toynet.placement("cpu", ranks=[1])``). ``rank``/``size``: this process's place among them; ``ranks``:
    their numbers in the run. Only they call the collectives of the group; the others go on without them."""

    ranks: tuple[int, ...]
    rank: int
    size: int
    comm: Any
    mpi: Any
    guard: Any


_groups: dict[tuple[int, ...], Group] = {}


def group(ranks: Sequence[int] | None = None) -> Any:
    """Who runs a collective: the whole run (``None``, or every rank), or the group of ``ranks``, which this
    process must be one of. Its MPI communicator is made on first use, by the group's processes only."""
    w = world()
    if ranks is None or tuple(ranks) == tuple(range(w.size)):
        return w
    ranks = tuple(ranks)
    if w.rank not in ranks:
        raise RuntimeError(f"rank {w.rank} called a collective of ranks {list(ranks)}, which it is not one of; only "
                           "the processes of a placement take part in its collectives")
    found = _groups.get(ranks)
    if found is None:
        comm = None
        if len(ranks) > 1:   # MPI_Comm_create_group: collective over the group's processes only
            with _waiting(w, "making a group of ranks"):
                comm = w.comm.Create_group(w.comm.Get_group().Incl(list(ranks)), tag=sum(ranks) % 30000)
        found = _groups[ranks] = Group(ranks, ranks.index(w.rank), len(ranks), comm, w.mpi, w.guard)
    return found


# ------------------------------------------------------------------------------------------ collectives


def barrier(ranks: Sequence[int] | None = None) -> None:
    w = group(ranks)
    if w.size > 1:
        with _waiting(w, "barrier"):
            w.comm.Barrier()


def all_reduce(array: Any, op: str = "sum", ranks: Sequence[int] | None = None) -> Any:
    host, back = _to_host(array)
    w = group(ranks)
    if op not in _REDUCTIONS:
        raise ValueError(f"all_reduce: op must be one of {', '.join(_REDUCTIONS)}, got {op!r}")
    if w.size == 1:
        return back(host.copy())
    with _waiting(w, "all_reduce"):
        _check_same(w, "all_reduce", host)
        work = _reducible(host, "all_reduce")
        out = np.empty_like(work)
        w.comm.Allreduce(work.reshape(-1), out.reshape(-1), op=_mpi_op(w, op))
    if op == "mean":
        out = out / w.size
    return back(out.astype(host.dtype) if out.dtype.kind == host.dtype.kind else out)


def all_gather(array: Any, axis: int = 0, ranks: Sequence[int] | None = None) -> Any:
    host, back = _to_host(array)
    axis = _axis(host, axis, "all_gather")
    w = group(ranks)
    if w.size == 1:
        return back(host.copy())
    with _waiting(w, "all_gather"):
        shapes = _check_same(w, "all_gather", host, free_axis=axis)
        moved = _contiguous(np.moveaxis(host, axis, 0))
        shapes = [(s[axis],) + tuple(d for i, d in enumerate(s) if i != axis) for s in shapes]
        counts = [math.prod(s) * host.itemsize for s in shapes]
        received = np.empty(sum(counts), np.uint8)
        w.comm.Allgatherv(_bytes(moved), [received, counts])
    out = np.concatenate(_unpack(received, counts, shapes, host.dtype), axis=0)
    return back(np.moveaxis(out, 0, axis))


def reduce_scatter(array: Any, axis: int = 0, op: str = "sum", ranks: Sequence[int] | None = None) -> Any:
    host, back = _to_host(array)
    axis = _axis(host, axis, "reduce_scatter")
    w = group(ranks)
    if op not in _REDUCTIONS or op == "mean":
        raise ValueError(f"reduce_scatter: op must be sum, max, min or prod, got {op!r}")
    sizes = shard_sizes(host.shape[axis], w.size)
    if w.size == 1:
        return back(host.copy())
    with _waiting(w, "reduce_scatter"):
        _check_same(w, "reduce_scatter", host)
        moved = _contiguous(np.moveaxis(_reducible(host, "reduce_scatter"), axis, 0))
        inner = math.prod(moved.shape[1:])
        out = np.empty((sizes[w.rank],) + moved.shape[1:], moved.dtype)
        w.comm.Reduce_scatter(moved.reshape(-1), out.reshape(-1), recvcounts=[s * inner for s in sizes],
                              op=_mpi_op(w, op))
    return back(np.moveaxis(out, 0, axis).astype(host.dtype))


def all_to_all(array: Any, split_axis: int, concat_axis: int, ranks: Sequence[int] | None = None) -> Any:
    host, back = _to_host(array)
    split_axis, concat_axis = _axis(host, split_axis, "all_to_all"), _axis(host, concat_axis, "all_to_all")
    w = group(ranks)
    if w.size == 1:
        return back(host.copy())
    with _waiting(w, "all_to_all"):
        shapes = _check_same(w, "all_to_all", host, free_axis=concat_axis)
        pieces = [_contiguous(host[(slice(None),) * split_axis + (shard_slice(host.shape[split_axis],
                                                                                     w.size, j),)])
                  for j in range(w.size)]
        send_counts = [p.nbytes for p in pieces]
        incoming = []   # the shape of the piece each rank sends here
        for shape in shapes:
            piece = list(shape)
            piece[split_axis] = shard_sizes(shape[split_axis], w.size)[w.rank]
            incoming.append(tuple(piece))
        recv_counts = [math.prod(s) * host.itemsize for s in incoming]
        received = np.empty(sum(recv_counts), np.uint8)
        sendbuf = np.concatenate([_bytes(p) for p in pieces]) if pieces else np.empty(0, np.uint8)
        w.comm.Alltoallv([sendbuf, send_counts], [received, recv_counts])
    return back(np.concatenate(_unpack(received, recv_counts, incoming, host.dtype), axis=concat_axis))


def all_gather_object(obj: Any) -> list:
    """Every process's ``obj`` (small Python values: shapes, names), in rank order."""
    w = world()
    if w.size == 1:
        return [obj]
    with _waiting(w, "all_gather_object"):
        return w.comm.allgather(obj)


def broadcast(array: Any, root: int = 0, ranks: Sequence[int] | None = None) -> Any:
    """Every process (of ``ranks``) gets ``root``'s array; the others may pass ``None`` (or any array: it is
    not read). ``root`` is a rank of the run, one of ``ranks``."""
    w = group(ranks)
    host, back = _to_host(array) if array is not None else (None, lambda a: a)
    members = w.ranks
    if root not in members:
        raise ValueError(f"broadcast: root {root} is not one of the ranks {list(members)}")
    root = list(members).index(root)
    if w.size == 1:
        return back(host.copy())
    with _waiting(w, "broadcast"):
        if w.rank == root and host is None:
            raise ValueError(f"broadcast: rank {members[root]} is the root and must pass the array to send")
        shape, dtype = w.comm.bcast((host.shape, host.dtype.str) if w.rank == root else None, root=root)
        out = _contiguous(host) if w.rank == root else np.empty(shape, np.dtype(dtype))
        w.comm.Bcast(_bytes(out), root=root)
    return back(out.copy() if out is host else out)


# ------------------------------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _waiting(w: Any, name: str) -> Iterator[None]:
    """While a collective waits, the guard watches for ranks that will never come (:mod:`.guard`)."""
    with w.guard.collective(name, w.ranks) if w.guard is not None else contextlib.nullcontext():
        yield


def _to_host(array: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """A NumPy copy of ``array`` to hand to MPI, and how to give results back in ``array``'s module."""
    if isinstance(array, np.ndarray):
        return array, lambda a: a
    if type(array).__module__.startswith("cupy"):
        cupy = sys.modules["cupy"]
        return array.get(), cupy.asarray
    return np.asarray(array), lambda a: a


def _axis(host: np.ndarray, axis: int, what: str) -> int:
    if not -host.ndim <= axis < host.ndim:
        raise ValueError(f"{what}: axis {axis} is out of range for an array of shape {host.shape}")
    return axis % host.ndim


def _check_same(w: Any, what: str, host: np.ndarray, free_axis: int | None = None) -> list[tuple]:
    """Every rank's shape (equal but for ``free_axis``) and dtype; an error naming them all otherwise."""
    metas = w.comm.allgather((host.shape, host.dtype.str))
    def key(shape: tuple) -> tuple:
        return tuple(d for i, d in enumerate(shape) if i != free_axis) if free_axis is not None else shape
    if len({(len(s), key(s), d) for s, d in metas}) > 1:
        listed = ", ".join(f"rank {r}: {tuple(s)} {np.dtype(d).name}"
                           for r, (s, d) in zip(w.ranks, metas))
        free = f" (they may differ along axis {free_axis} only)" if free_axis is not None else ""
        raise RuntimeError(f"{what}: the processes passed arrays that do not match{free}: {listed}")
    return [tuple(s) for s, _ in metas]


def _reducible(host: np.ndarray, what: str) -> np.ndarray:
    if host.dtype == np.float16:      # MPI has no standard half type: add in float32
        return host.astype(np.float32, order="C")
    if host.dtype.kind not in "fiu":
        raise TypeError(f"{what}: cannot add up arrays of dtype {host.dtype}; convert them to a number type first")
    return _contiguous(host)


def _mpi_op(w: Any, op: str) -> Any:
    MPI = w.mpi
    return {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]


def _contiguous(array: np.ndarray) -> np.ndarray:
    """``array``, copied if its memory is not one C-ordered block (keeping 0-d arrays 0-d, which
    ``np.ascontiguousarray`` would not)."""
    return array if array.flags.c_contiguous else np.array(array, order="C")


def _bytes(array: np.ndarray) -> np.ndarray:
    """A contiguous array's memory as bytes (how data that is only moved, never added, goes through MPI)."""
    return array.reshape(-1).view(np.uint8)


def _unpack(received: np.ndarray, counts: list[int], shapes: list[tuple], dtype: Any) -> list[np.ndarray]:
    pieces, start = [], 0
    for count, shape in zip(counts, shapes):
        pieces.append(received[start:start + count].view(dtype).reshape(shape))
        start += count
    return pieces
