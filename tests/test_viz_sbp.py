"""toynet.viz.draw_sbp: pictures of a global tensor's parts and of a boxing, read back from the figures.

Each picture is checked for what it promises: the cells of the logical value and of each rank's part hold the
numbers toynet's own rule gives (``boxing.component``), in the rank's colour; a partial sum's parts add up to
the value; a boxing names the step of ``boxing.PATHS`` and draws an arrow from every part to every result for a
collective, one per rank for a local step. Parts that are not the layout they claim are refused.
"""

from __future__ import annotations

import io

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation

import toynet as flow
from toynet.distributed import boxing
from toynet.viz import draw_sbp

M = np.arange(24).reshape(4, 6)
S0, S1, B, P = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum
# M = X @ W with X (4, 2) and W (2, 6): rank r's summand when X is split along columns and W along rows.
X = np.stack([np.arange(4), np.ones(4)], axis=1)
W = np.stack([np.full(6, 6), np.arange(6)])
SUMMANDS = [np.outer(X[:, r], W[r]) for r in range(2)]


def cells(ax) -> dict[tuple[float, float], tuple[tuple, str]]:
    """(x, y) of each cell's top left corner -> (its fill colour, the number written in it)."""
    numbers = {(t.get_position()[0] - 0.5, t.get_position()[1] - 0.5): t.get_text() for t in ax.texts
               if not isinstance(t, Annotation)}
    return {(p.get_x(), p.get_y()): (p.get_facecolor(), numbers[(p.get_x(), p.get_y())])
            for p in ax.patches if isinstance(p, Rectangle)}


def grid(found: dict, fill: str, x_from: float = -1.0, x_to: float = 1e9) -> np.ndarray:
    """The cells of one colour between two x positions, as the matrix they draw (rows by y, columns by x)."""
    mine = {xy: float(n) for xy, (face, n) in found.items() if face == to_rgba(fill) and x_from <= xy[0] < x_to}
    ys, xs = sorted({y for _, y in mine}), sorted({x for x, _ in mine})
    return np.array([[mine[(x, y)] for x in xs] for y in ys])


def parts_drawn(fig, ranks: int = 2) -> list[np.ndarray]:
    (ax,) = fig.axes
    start = draw_sbp.LABEL + M.shape[1]    # the parts are drawn right of the logical value
    return [grid(cells(ax), draw_sbp.FILLS[r], x_from=start) for r in range(ranks)]


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts]


def arrows(fig) -> list[Annotation]:
    return [t for t in fig.axes[0].texts if isinstance(t, Annotation)]


@pytest.mark.parametrize("layout", [S0, S1, B])
def test_each_rank_part_is_what_toynets_rule_gives(layout):
    fig = draw_sbp.layouts(M, [layout])
    expected = [boxing.component(M, layout, r, 2) for r in range(2)]
    for drawn, part in zip(parts_drawn(fig), expected):
        np.testing.assert_array_equal(drawn, part)
    for r, part in enumerate(expected):
        assert f"rank {r} holds {part.shape}" in texts(fig)
    assert layout.short in texts(fig) and "logical value (4, 6)" in texts(fig)
    assert fig.number not in plt.get_fignums(), "closed: a notebook shows it once, as the cell's value"


def test_the_logical_value_is_coloured_by_the_rank_that_holds_it():
    found = cells(draw_sbp.layouts(M, [S1]).axes[0])
    logical = {xy: v for xy, v in found.items() if xy[0] < draw_sbp.LABEL + M.shape[1]}
    fills = {(round(x - draw_sbp.LABEL), y): face for (x, y), (face, _) in logical.items()}
    assert all(fills[(j, y)] == to_rgba(draw_sbp.FILLS[0 if j < 3 else 1]) for j, y in fills), "columns 0-2: rank 0"
    shared = cells(draw_sbp.layouts(M, [B]).axes[0])
    assert sum(face == to_rgba(draw_sbp.SHARED_FILL) for face, _ in shared.values()) == M.size, "B: no owner"


def test_a_partial_sum_draws_parts_that_add_up_to_the_value():
    fig = draw_sbp.layouts(M, [P], parts={P: SUMMANDS})
    zero, one = parts_drawn(fig)
    np.testing.assert_array_equal(zero, SUMMANDS[0])
    np.testing.assert_array_equal(zero + one, M)
    assert "=" in texts(fig) and "+" in texts(fig)
    default = parts_drawn(draw_sbp.layouts(M, [P]))   # toynet's own: the first rank holds it all
    np.testing.assert_array_equal(default[0], M)
    np.testing.assert_array_equal(default[1], np.zeros_like(M))


def test_rows_for_several_layouts_and_three_ranks():
    fig = draw_sbp.layouts(M, [S0, S1, B, P], ranks=3)
    shown = texts(fig)
    for layout in (S0, S1, B, P):
        assert layout.short in shown and layout.name in shown
    assert "rank 2 holds (1, 6)" in shown and "rank 0 holds (2, 6)" in shown    # 4 rows cut 2, 1, 1
    assert "rank 2 holds (4, 2)" in shown
    assert sum(isinstance(p, Rectangle) for p in fig.axes[0].patches) == 4 * M.size + (1 + 1 + 3 + 3) * M.size


def test_numbers_keep_a_decimal_when_they_are_not_whole_and_a_vector_is_one_row():
    fig = draw_sbp.layouts(np.array([0.5, 1.0, 2.5]), [S1], ranks=3)
    numbers = [t for t in texts(fig) if t.replace(".", "").isdigit()]
    assert sorted(numbers) == ["0.5", "0.5", "1.0", "1.0", "2.5", "2.5"], numbers   # the value, and the parts
    assert "logical value (1, 3)" in texts(fig)
    assert draw_sbp.layouts(flow.tensor(M), [S0]).axes, "a toynet tensor is drawn from its values"


def test_parts_that_are_not_the_layout_are_refused():
    with pytest.raises(ValueError, match="add up"):
        draw_sbp.layouts(M, [P], parts={P: [M, M]})
    with pytest.raises(ValueError, match="not this value laid out as split"):
        draw_sbp.layouts(M, [S0], parts={S0: [M[2:], M[:2]]})
    with pytest.raises(ValueError, match="3 parts given for 2 ranks"):
        draw_sbp.layouts(M, [B], parts={B: [M, M, M]})
    with pytest.raises(ValueError, match="not among the SBPs drawn"):
        draw_sbp.layouts(M, [S0], parts={P: SUMMANDS})
    with pytest.raises(ValueError, match="1-D or 2-D"):
        draw_sbp.layouts(np.zeros((2, 2, 2)), [B])
    with pytest.raises(ValueError, match="dimensions 0 and 1"):
        draw_sbp.layouts(M, [flow.sbp.split(2)])
    with pytest.raises(TypeError, match="expected an SBP"):
        draw_sbp.layouts(M, ["S(0)"])
    with pytest.raises(ValueError, match="at least one SBP"):
        draw_sbp.layouts(M, [])


@pytest.mark.parametrize(("src", "dst", "ranks", "how", "count"), [
    (P, B, 2, "all_reduce", 4), (S0, B, 2, "all_gather", 4), (S1, S0, 2, "all_to_all", 4),
    (B, S0, 2, "local slice", 2), (S0, B, 3, "all_gather", 9), (P, S1, 2, "reduce_scatter", 4)])
def test_a_boxing_names_its_step_and_joins_every_part_to_every_result_when_collective(src, dst, ranks, how, count):
    fig = draw_sbp.boxing_step(M, src, dst, ranks=ranks)
    assert how == boxing.PATHS[(boxing.kind(src), boxing.kind(dst))] and how in texts(fig)
    assert len(arrows(fig)) == count
    assert f"before: {src.short}" in texts(fig) and f"after: {dst.short}" in texts(fig)
    found = cells(fig.axes[0])
    for r in range(ranks):
        after = grid(found, draw_sbp.FILLS[r], x_from=draw_sbp.LABEL + M.shape[1] + 1)
        np.testing.assert_array_equal(after, boxing.component(M, dst, r, ranks))


def test_a_boxing_from_given_summands():
    fig = draw_sbp.boxing_step(M, P, B, parts=SUMMANDS, title="P to B")
    found = cells(fig.axes[0])
    before = grid(found, draw_sbp.FILLS[1], x_to=draw_sbp.LABEL + M.shape[1])
    np.testing.assert_array_equal(before, SUMMANDS[1])
    assert fig._suptitle.get_text() == "P to B"
    with pytest.raises(ValueError, match="no step"):
        draw_sbp.boxing_step(M, B, B)
    with pytest.raises(ValueError, match="add up"):
        draw_sbp.boxing_step(M, P, B, parts=[M, M])


def test_pictures_save_as_png():
    for fig in (draw_sbp.layouts(M, [S0, P]), draw_sbp.boxing_step(M, P, B)):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        assert buffer.getvalue().startswith(b"\x89PNG")
