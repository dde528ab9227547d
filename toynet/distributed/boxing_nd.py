"""2-D SBP: a value laid out over a grid of processes, one SBP per axis of the grid.

``toynet.placement("cpu", ranks=[[0, 1], [2, 3]])`` arranges four processes in a 2 x 2 grid; a global tensor on
it has one SBP per axis, ``sbp=(broadcast, split(0))``. Read it in two steps, as OneFlow's 2-D SBP page does:
the first SBP lays the value out over the grid's rows (row i holds an intermediate value V_i), the second lays
each V_i out over the processes of its row. With ``(broadcast, split(0))`` each row holds the whole value and
its two processes hold its halves: the processes of one column hold the same part.

Converting one 2-D layout into another (:func:`convert`) takes the same two steps back: each row makes its
V_i whole (a 1-D boxing among the row's processes), each column makes V whole from the V_i (a 1-D boxing among
the column's), and every process keeps its part of the new layout. That is correct for any pair of layouts,
not the cheapest path (OneFlow boxes one axis at a time when only one changes). Ops derive their 2-D signature
axis by axis with the 1-D rules (:func:`toynet.distributed.sbp_rules.signature`).
"""

from __future__ import annotations

from typing import Any

from . import boxing_1d as boxing
from . import comm
from .sbp import broadcast as B


def position(grid: tuple) -> tuple[int, int] | None:
    """Where this process sits in the grid, (row, column); None if it is not in it."""
    for i, row in enumerate(grid):
        if comm.rank() in row:
            return i, row.index(comm.rank())
    return None


def local_shape(shape: tuple, layout: tuple, grid: tuple) -> tuple:
    """The shape of this process's part of a ``shape`` value laid out as ``layout`` over ``grid``."""
    where = position(grid)
    if where is None:
        return (0,)
    (i, j), (rows, cols) = where, (len(grid), len(grid[0]))
    middle = boxing.local_shape(shape, layout[0], i, rows)
    return boxing.local_shape(middle, layout[1], j, cols)


def component(full: Any, layout: tuple, grid: tuple) -> Any:
    """This process's part of a whole value ``full`` laid out as ``layout`` (no communication)."""
    where = position(grid)
    if where is None:
        return full.reshape(-1)[:0].copy()
    (i, j), (rows, cols) = where, (len(grid), len(grid[0]))
    return boxing.component(boxing.component(full, layout[0], i, rows), layout[1], j, cols)


def convert(xp: Any, local: Any, src: tuple, dst: tuple, shape: tuple, grid: tuple) -> Any:
    """This process's part under ``dst`` from its part under ``src``: the row makes its V_i whole, the column
    makes V whole, each process keeps its part (collectives among a row's, then a column's processes)."""
    where = position(grid)
    if where is None or src == dst:
        return local.copy()
    i, j = where
    row, column = tuple(grid[i]), tuple(r[j] for r in grid)
    middle_shape = boxing.local_shape(shape, src[0], i, len(grid))
    middle = boxing.convert(xp, local, src[1], B, middle_shape, ranks=row)
    whole = boxing.convert(xp, middle, src[0], B, shape, ranks=column)
    return component(whole, dst, grid)


def logical_shape(shapes: dict[int, tuple], layout: tuple, grid: tuple) -> tuple:
    """The whole value's shape from the parts' (``shapes``: rank -> the shape of its part), joining the
    parts of each row along the second SBP's split, then the rows along the first's."""
    def join(parts: list[tuple], s: Any) -> tuple:
        if not hasattr(s, "dim"):
            return parts[0]
        out = list(parts[0])
        out[s.dim] = sum(p[s.dim] for p in parts)
        return tuple(out)
    middles = [join([shapes[r] for r in row], layout[1]) for row in grid]
    return join(middles, layout[0])
