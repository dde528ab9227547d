"""Pictures of SBP: one global tensor and what each process (rank) holds of it, and a boxing step.

A global tensor is one *logical* value that the ranks of its placement hold in parts (:mod:`toynet.distributed`).
These pictures draw a small matrix with its numbers in every cell, and beside it each rank's part, in the
rank's colour (rank 0 blue, rank 1 orange, rank 2 green, rank 3 violet)::

    from toynet.viz import draw_sbp

    # one row per SBP: the logical value, then each rank's part
    draw_sbp.layouts(value, [flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum])

    # a boxing: each rank's part before, the collective that converts, each rank's part after
    draw_sbp.boxing_step(value, flow.sbp.partial_sum, flow.sbp.broadcast, parts=summands)

The parts come from toynet's own rule, :func:`toynet.distributed.boxing.component` (what rank r of n holds of a
value laid out as an SBP), so a picture shows what a run of n processes really holds. A partial sum has many
possible parts (any that add up to the value): ``boxing.component`` gives the first rank the value and the
others zeros; pass ``parts`` to draw others (what a matmul of split inputs leaves, for instance). Parts that
are not the value's layout are refused, so a picture cannot show a layout that is not so. Both functions
return a matplotlib ``Figure`` (made and closed as :mod:`toynet.viz.charts` does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..backend import host as np  # host data (only toynet.backend imports NumPy)
from ..distributed import boxing, comm
from ..distributed.sbp import partial_sum, sbp, split
from .charts import DPI, _finish, _pyplot

__all__ = ["EDGES", "FILLS", "boxing_step", "layouts", "parts_of"]

#: Each rank's colour: a light fill for its cells and a darker one for their borders and its labels.
FILLS = ("#cfe2ff", "#ffd8a8", "#d3f9d8", "#e5dbff")
EDGES = ("#1c7ed6", "#e8590c", "#2f9e44", "#7048e8")
#: The logical value's cells when no single rank owns them (broadcast, partial sum).
SHARED_FILL, SHARED_EDGE = "#f1f3f5", "#868e96"
#: Inches per cell, and the gaps between the pictures of a row, in cells.
CELL, GAP, LABEL = 0.34, 2.0, 3.2


def parts_of(value: Any, layout: sbp, ranks: int = 2) -> list:
    """What each of ``ranks`` processes holds of ``value`` laid out as ``layout`` (toynet's own rule)."""
    full = _matrix(value)
    return [boxing.component(full, layout, r, ranks) for r in range(ranks)]


def layouts(value: Any, sbps: Sequence[sbp], *, ranks: int = 2, parts: Mapping[sbp, Sequence[Any]] | None = None,
            title: str | None = None, decimals: int | None = None) -> Any:
    """One row per SBP of ``sbps``: the logical ``value`` (a 1-D or 2-D tensor or array), then each rank's part.

    In the logical value, a cell is in the colour of the rank that holds it (split) or grey (every rank holds it,
    broadcast; or it is the sum of the ranks' parts, partial sum). ``parts`` maps an SBP to the parts to draw
    instead of :func:`parts_of`'s (checked: they must be that layout of ``value``). ``decimals``: digits after
    the point in the cells (default: none when every number is whole, else 1).
    """
    full = _matrix(value)
    if not sbps:
        raise ValueError("layouts needs at least one SBP, e.g. [toynet.sbp.split(0), toynet.sbp.broadcast]")
    rows = [(s, _checked_parts(full, s, ranks, (parts or {}).get(s))) for s in sbps]
    unknown = set(parts or {}) - set(sbps)
    if unknown:
        raise ValueError(f"parts given for {sorted(s.short for s in unknown)}, which are not among the SBPs drawn")
    decimals = _decimals([full] + [p for _, ps in rows for p in ps], decimals)
    h, w = full.shape
    row_width = LABEL + w + GAP + max(sum(p.shape[1] for p in ps) + GAP * (ranks - 1) for _, ps in rows)
    row_height = h + 1.6
    plt = _pyplot()
    fig, ax = _canvas(plt, row_width + 0.2, row_height * len(rows), title)
    for k, (s, ps) in enumerate(rows):
        y = k * row_height + 1.1
        ax.text(0, y + h / 2 - 0.35, s.short, fontsize=15, fontweight="bold", va="center")
        ax.text(0, y + h / 2 + 0.55, s.name, fontsize=8.5, color=SHARED_EDGE, va="center")
        _grid(ax, full, LABEL, y, _owners(full.shape, s, ranks), decimals)
        ax.text(LABEL + w / 2, y - 0.3, f"logical value {tuple(full.shape)}", ha="center", fontsize=9.5)
        x = LABEL + w + GAP
        ax.text(x - GAP / 2, y + h / 2, "=" if s == partial_sum else "\u2192", ha="center", va="center", fontsize=15)
        for r, p in enumerate(ps):
            _grid(ax, p, x, y, _rank_colour(p.shape, r), decimals)
            ax.text(x + p.shape[1] / 2, y - 0.3, f"rank {r} holds {tuple(p.shape)}", ha="center", fontsize=9.5,
                    color=EDGES[r % 4], fontweight="bold")
            x += p.shape[1] + GAP
            if r < ranks - 1:
                ax.text(x - GAP / 2, y + h / 2, "+" if s == partial_sum else "", ha="center", va="center", fontsize=15)
    return _finish(fig)


def boxing_step(value: Any, src: sbp, dst: sbp, *, ranks: int = 2, parts: Sequence[Any] | None = None,
                title: str | None = None, decimals: int | None = None) -> Any:
    """A boxing: each rank's part of ``value`` as ``src`` (left), as ``dst`` (right), and between them the step of
    :data:`toynet.distributed.boxing.PATHS` that converts (a collective: every rank's result depends on every
    rank's part, drawn as arrows from every part to every result; a local step: one arrow per rank).
    ``parts``: the parts before, instead of :func:`parts_of`'s (a partial sum's summands)."""
    full = _matrix(value)
    if src == dst:
        raise ValueError(f"boxing from {src.short} to itself is no step: nothing changes")
    before = _checked_parts(full, src, ranks, parts)
    after = parts_of(full, dst, ranks)
    how = boxing.PATHS[(boxing.kind(src), boxing.kind(dst))]
    local = how.startswith("local")
    decimals = _decimals([full] + before + after, decimals)
    h = full.shape[0]
    left, right = max(p.shape[1] for p in before), max(p.shape[1] for p in after)
    middle = max(7.0, len(how) * 0.42)
    x_after = LABEL + left + middle
    row_height = h + 1.4
    plt = _pyplot()
    fig, ax = _canvas(plt, x_after + right + 0.2, row_height * ranks + 0.6, title)
    ax.text(LABEL + left / 2, 0.4, f"before: {src.short}", ha="center", va="center", fontsize=12, fontweight="bold")
    ax.text(x_after + right / 2, 0.4, f"after: {dst.short}", ha="center", va="center", fontsize=12, fontweight="bold")
    starts, ends = [], []
    for r in range(ranks):
        y = 1.0 + r * row_height
        ax.text(0, y + max(before[r].shape[0], after[r].shape[0]) / 2, f"rank {r}", fontsize=12, fontweight="bold", color=EDGES[r % 4], va="center")
        _grid(ax, before[r], LABEL, y, _rank_colour(before[r].shape, r), decimals)
        _grid(ax, after[r], x_after, y, _rank_colour(after[r].shape, r), decimals)
        starts.append(y + before[r].shape[0] / 2)
        ends.append(y + after[r].shape[0] / 2)
    for r, y0 in enumerate(starts):
        for t, y1 in enumerate(ends):
            if local and r != t:
                continue
            ax.annotate("", xy=(x_after - 0.4, y1), xytext=(LABEL + left + 0.4, y0),
                        arrowprops={"arrowstyle": "-|>", "color": EDGES[r % 4], "lw": 1.6, "alpha": 0.8})
    label_y = (starts[0] + starts[-1]) / 2 if ranks > 1 else starts[0] - h / 2 - 0.2
    ax.text(LABEL + left + middle / 2, label_y, how, ha="center", va="center", fontsize=12, family="monospace",
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": SHARED_EDGE})
    return _finish(fig)


# ------------------------------------------------------------------------------------------ helpers


def _matrix(value: Any) -> Any:
    full = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if full.ndim == 1:
        full = full[None, :]
    if full.ndim != 2 or full.size == 0:
        raise ValueError(f"draw_sbp draws a small 1-D or 2-D value, got shape {full.shape}")
    return full


def _checked_parts(full: Any, s: sbp, ranks: int, given: Sequence[Any] | None) -> list:
    if not isinstance(s, sbp):
        raise TypeError(f"expected an SBP (toynet.sbp.split(dim), broadcast, partial_sum), got {s!r}")
    if isinstance(s, split) and not 0 <= s.dim < 2:
        raise ValueError(f"{s.short}: a drawn value has dimensions 0 and 1 only")
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, got {ranks}")
    if given is None:
        return parts_of(full, s, ranks)
    ps = [_matrix(p) for p in given]
    if len(ps) != ranks:
        raise ValueError(f"{s.short}: {len(ps)} parts given for {ranks} ranks")
    if s == partial_sum:
        if any(p.shape != full.shape for p in ps) or not np.allclose(sum(ps), full):
            raise ValueError("partial_sum: the parts must have the value's shape and add up to it")
    elif any(p.shape != q.shape or not np.array_equal(p, q) for p, q in zip(ps, parts_of(full, s, ranks))):
        raise ValueError(f"{s.short}: the parts given are not this value laid out as {s.name}")
    return ps


def _rank_colour(shape: tuple, rank: int) -> list:
    """(fill, edge) of every cell of a part that ``rank`` holds: its colours."""
    return [[(FILLS[rank % 4], EDGES[rank % 4])] * shape[1] for _ in range(shape[0])]


def _owners(shape: tuple, s: sbp, ranks: int) -> list:
    """(fill, edge) of every cell of the logical value: its owning rank's colours for a split, grey otherwise."""
    colours = [[(SHARED_FILL, SHARED_EDGE)] * shape[1] for _ in range(shape[0])]
    if isinstance(s, split):
        for r in range(ranks):
            cut = comm.shard_slice(shape[s.dim], ranks, r)
            for i in range(shape[0]):
                for j in range(shape[1]):
                    if cut.start <= (i if s.dim == 0 else j) < cut.stop:
                        colours[i][j] = (FILLS[r % 4], EDGES[r % 4])
    return colours


def _grid(ax: Any, array: Any, x0: float, y0: float, colours: list, decimals: int) -> None:
    """The cells of ``array`` with their numbers, top left at (x0, y0); ``colours[i][j]``: (fill, edge) of a cell."""
    plt = _pyplot()
    for i in range(array.shape[0]):
        for j in range(array.shape[1]):
            fill, edge = colours[i][j]
            ax.add_patch(plt.Rectangle((x0 + j, y0 + i), 1, 1, facecolor=fill, edgecolor=edge, linewidth=1.2))
            ax.text(x0 + j + 0.5, y0 + i + 0.5, f"{array[i, j]:.{decimals}f}", ha="center", va="center",
                    fontsize=10 if decimals == 0 else 8.5)


def _decimals(arrays: list, decimals: int | None) -> int:
    if decimals is not None:
        return decimals
    return 0 if all(np.array_equal(a, np.round(a)) for a in arrays) else 1


def _canvas(plt: Any, width: float, height: float, title: str | None) -> tuple[Any, Any]:
    """A figure of ``width`` x ``height`` cells, one axes in cell units (y down), no frame."""
    extra = 0.35 if title else 0.0
    fig = plt.figure(figsize=(width * CELL + 0.2, height * CELL + 0.2 + extra), dpi=DPI)
    ax = fig.add_axes((0.1 / (width * CELL + 0.2), 0.1 / (height * CELL + 0.2 + extra),
                       width * CELL / (width * CELL + 0.2), height * CELL / (height * CELL + 0.2 + extra)))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=12, y=1 - 0.05 / (height * CELL + 0.2 + extra))
    return fig, ax
