"""toynet.viz.charts: the notebooks' bar charts, training curves and rows of pictures, read back from the figures.

Each chart is checked for what it promises: the bars' lengths, order and colours, the labels on the left only
where the contenders change, the reference, spread and hatched marks; the thin curve, its moving average and
the reference levels; the pictures, their titles and axes. Figures are closed once made (a notebook shows each
once, as its cell's value), and they save as PNG and go into ``flow.viz.side_by_side``.
"""

from __future__ import annotations

import io

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgba

import toynet as flow
from toynet.viz import charts

TIMES = {"Eager mode": 173.0, "Graph mode, lesson path": 151.0, "Graph mode, fast path": 110.0}
PEAKS = {"Eager mode": 80.9, "Graph mode, lesson path": 71.6, "Graph mode, fast path": 49.2}


def bar_widths(ax) -> list[float]:
    """The widths of the filled bars of a panel, top to bottom (hatched outlines left out)."""
    filled = [p for p in ax.patches if p.get_facecolor()[3] > 0]
    return [p.get_width() for p in sorted(filled, key=lambda p: p.get_y())]


def tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


# ----------------------------------------------------------------------------------- moving_average


def test_moving_average_averages_each_window():
    assert charts.moving_average([1, 2, 3, 4, 5], 2).tolist() == [1.5, 2.5, 3.5, 4.5]
    assert charts.moving_average([1, 2, 3], 3).tolist() == [2.0]
    assert charts.moving_average([4.0, 8.0], 1).tolist() == [4.0, 8.0]
    assert len(charts.moving_average([1, 2], 5)) == 0
    with pytest.raises(ValueError, match="at least 1"):
        charts.moving_average([1, 2], 0)


# ------------------------------------------------------------------------------------------- bars


def test_bars_draws_one_panel_per_measurement_with_bars_top_to_bottom():
    fig = charts.bars({"ms per step": TIMES, "MB at the peak": PEAKS})
    left, right = fig.axes
    assert bar_widths(left) == list(TIMES.values()) and bar_widths(right) == list(PEAKS.values())
    bottom, top = left.get_ylim()
    assert bottom > top, "the y axis runs downwards: the first contender on top"
    assert (left.get_xlabel(), right.get_xlabel()) == ("ms per step", "MB at the peak")
    assert tick_labels(left) == list(TIMES) and tick_labels(right) == ["", "", ""], "the names once, on the left"
    assert fig.number not in plt.get_fignums(), "closed: a notebook shows it once, as the cell's value"


def test_bars_names_the_contenders_again_where_they_change():
    training = {"lesson plan": 111.0, "fast plan, no RecomputeActivations": 86.0}
    inference = {"lesson plan": 32.0, "fast plan, no FoldBatchNorm": 23.0}
    fig = charts.bars({"training, ms": training, "training, MB": {"lesson plan": 61.3,
                       "fast plan, no RecomputeActivations": 64.7}, "inference, ms": inference})
    assert [tick_labels(ax) for ax in fig.axes] == [list(training), ["", ""], list(inference)]


def test_bars_colours_reference_spread_and_hatched_marks():
    colours = {"Eager mode": "tab:orange", "Graph mode, fast path": "tab:green"}
    fig = charts.bars({"ms": TIMES, "MB": PEAKS}, colors=colours, reference="Graph mode, lesson path",
                      spreads={"ms": {name: (t - 5, t + 5) for name, t in TIMES.items()}},
                      hatched={"MB": {name: 30.0 for name in PEAKS}})
    left, right = fig.axes
    filled = sorted((p for p in left.patches if p.get_facecolor()[3] > 0), key=lambda p: p.get_y())
    assert [p.get_facecolor() for p in filled] == [to_rgba("tab:orange"), to_rgba("tab:blue"), to_rgba("tab:green")]
    for ax, values in ((left, TIMES), (right, PEAKS)):
        dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert [line.get_xdata()[0] for line in dotted] == [values["Graph mode, lesson path"]], "the reference"
    (spread,) = left.collections
    assert [tuple(segment[:, 0]) for segment in spread.get_segments()] == [(t - 5, t + 5) for t in TIMES.values()]
    outlines = [p for p in right.patches if p.get_facecolor()[3] == 0]
    assert [p.get_width() for p in outlines] == [30.0] * 3 and all(p.get_hatch() == "//" for p in outlines)
    assert not right.collections and not [p for p in left.patches if p.get_facecolor()[3] == 0]


def test_bars_takes_one_colour_or_one_per_row():
    fig = charts.bars({"ms": TIMES}, colors="tab:red")
    assert {p.get_facecolor() for p in fig.axes[0].patches} == {to_rgba("tab:red")}
    fig = charts.bars({"ms": TIMES}, colors=["tab:red", "tab:green", "tab:blue"])
    assert [p.get_facecolor() for p in sorted(fig.axes[0].patches, key=lambda p: p.get_y())] == [
        to_rgba("tab:red"), to_rgba("tab:green"), to_rgba("tab:blue")]
    with pytest.raises(ValueError, match="3 bars but 2 colours"):
        charts.bars({"ms": TIMES}, colors=["tab:red", "tab:green"])


def test_bars_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="at least one panel"):
        charts.bars({})
    with pytest.raises(ValueError, match="has no bars"):
        charts.bars({"ms": {}})
    with pytest.raises(ValueError, match="spreads names panels that do not exist"):
        charts.bars({"ms": TIMES}, spreads={"seconds": {"Eager mode": (1, 2)}})


# ----------------------------------------------------------------------------------------- curves


def test_curves_draws_each_step_its_moving_average_and_reference_levels():
    losses = [7.0, 6.0, 5.0, 3.0, 2.0, 1.0]
    fig = charts.curves({"each step": losses}, average=3, log=True, lines={"ln 10": 2.3}, ylim=(None, 30),
                        ylabel="training loss")
    (ax,) = fig.axes
    thin, smooth, level = ax.get_lines()
    assert list(thin.get_xdata()) == [1, 2, 3, 4, 5, 6] and list(thin.get_ydata()) == losses
    assert list(smooth.get_xdata()) == [3, 4, 5, 6], "the average of steps 1 to 3 belongs to step 3"
    assert np.allclose(smooth.get_ydata(), [6.0, 14 / 3, 10 / 3, 2.0])
    assert smooth.get_linewidth() > thin.get_linewidth() and smooth.get_color() == thin.get_color()
    assert smooth.get_label() == "average of 3"
    assert level.get_linestyle() == ":" and list(level.get_ydata()) == [2.3, 2.3]
    assert [t.get_text() for t in ax.texts] == ["ln 10"]
    assert ax.get_yscale() == "log" and ax.get_ylim()[1] == 30 and ax.get_ylabel() == "training loss"
    assert ax.get_legend() is not None


def test_curves_draws_occasional_estimates_as_points():
    fig = charts.curves({"Graph mode": [3.0, 2.5, 2.0, 1.9], "held out (estimate)": {2: 2.6, 4: 2.1}},
                        average=2)
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["Graph mode", "Graph mode, average of 2", "held out (estimate)"]
    estimate = ax.get_lines()[2]
    assert list(estimate.get_xdata()) == [2, 4] and estimate.get_marker() == "o"
    assert ax.get_yscale() == "linear"


def test_curves_without_average_or_with_one_line_has_no_legend():
    (ax,) = charts.curves({"accuracy": {0: 0.0, 25: 9.0, 50: 41.0}}, lines={"chance: 10%": 10}).axes
    assert ax.get_legend() is None and len(ax.get_lines()) == 2
    with pytest.raises(ValueError, match="at least one series"):
        charts.curves({})
    with pytest.raises(ValueError, match="average must be at least 1"):
        charts.curves({"loss": [1.0]}, average=0)


# -------------------------------------------------------------------------------------- image_row


def test_image_row_shows_each_picture_under_its_coloured_title():
    images = [np.full((4, 4, 3), k / 3) for k in range(3)]
    fig = charts.image_row(images, titles=["cat", "dog", "ship"], title_colors=["green", "red", "green"])
    assert len(fig.axes) == 3
    assert [ax.get_title() for ax in fig.axes] == ["cat", "dog", "ship"]
    assert [ax.title.get_color() for ax in fig.axes] == ["green", "red", "green"]
    assert all(not ax.axison for ax in fig.axes), "no axes around pictures"
    assert [ax.get_images()[0].get_array().shape for ax in fig.axes] == [(4, 4, 3)] * 3


def test_image_row_labels_the_rows_and_columns_of_matrices():
    weights = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    fig = charts.image_row([flow.tensor(weights.astype(np.float32)), weights], titles=["head 0", "head 1"],
                           cmap="viridis", vmin=0, vmax=1, ticks=list("abc"), xlabel="looks at", ylabel="predicts")
    first, second = fig.axes
    assert [t.get_text() for t in first.get_xticklabels()] == ["a", "b", "c"]
    assert first.get_ylabel() == "predicts" and second.get_ylabel() == "" and second.get_xlabel() == "looks at"
    assert first.get_images()[0].get_clim() == (0, 1)
    with pytest.raises(ValueError, match="2 pictures but 1 titles"):
        charts.image_row([weights, weights], titles=["one"])
    with pytest.raises(ValueError, match="at least one picture"):
        charts.image_row([])


# ------------------------------------------------------------------------------------ using them


def test_charts_save_as_png_and_go_side_by_side():
    fig = charts.bars({"ms": TIMES})
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")
    row = flow.viz.side_by_side(fig, charts.curves({"loss": [3.0, 2.0]}), titles=("time", "loss"))
    assert [picture.format for picture in row.pictures] == ["png", "png"]
    assert "data:image/png;base64," in row.html()
