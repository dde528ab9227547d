"""Charts of measurements and training runs, so that a teaching cell says what it plots, not how.

Three kinds of chart, each a function that returns a matplotlib ``Figure`` (a notebook shows it when it is the
cell's value; ``fig.savefig("chart.png")`` saves it)::

    from toynet.viz import charts

    # contenders side by side: one panel per measurement, one bar per contender, top to bottom
    charts.bars({"ms per step": {"Eager mode": 173, "Graph mode": 151},
                 "MB at the peak of a step": {"Eager mode": 80.9, "Graph mode": 71.6}},
                colors={"Eager mode": "tab:orange"}, reference="Graph mode")

    # a training curve: the loss of every step, its moving average, and reference levels
    charts.curves({"each step": losses}, average=10, log=True, lines={"ln 10": math.log(10)},
                  ylabel="training loss")

    # pictures in a row, each under its title (images, or matrices such as attention weights)
    charts.image_row([image.numpy().transpose(1, 2, 0) for image in images], titles=classes)

Two or more charts side by side: ``flow.viz.side_by_side(chart_a, chart_b)``. The figures are made with
``matplotlib.pyplot`` (so that a notebook's inline backend is set up) and closed at once, so a notebook
shows each one once, as the value of its cell. :func:`moving_average` is the average the curves draw.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from ..backend import host as np  # charts are host data (NumPy)

__all__ = ["bars", "curves", "image_row", "moving_average"]

#: Dots per inch of every chart: small files, and text that stays legible in a notebook's column.
DPI = 80
#: The colour of reference lines and their labels.
GREY = "gray"


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """The mean of each ``window`` consecutive values: ``len(values) - window + 1`` of them (none if there are
    fewer values than ``window``). Entry ``i`` averages ``values[i:i + window]``, so it belongs to step
    ``i + window`` when ``values[0]`` is step 1."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    values = np.asarray(values, dtype=float)
    if len(values) < window:
        return np.empty(0)
    return np.convolve(values, np.ones(window) / window, mode="valid")


def bars(panels: Mapping[str, Mapping[str, float]], *, colors: Mapping[str, str] | Sequence[str] | str | None = None,
         reference: str | None = None, spreads: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
         hatched: Mapping[str, Mapping[str, float]] | None = None, title: str | None = None,
         width: float | None = None, row_height: float = 0.32) -> Any:
    """Horizontal bar charts side by side: one panel per measurement, one bar per contender.

    ``panels`` maps each panel's axis label (its unit: "ms per step") to ``{contender: value}``; the bars run top
    to bottom in that order. A panel's contenders are named on its left, unless they are the previous panel's; an
    axis label too long for its panel is wrapped.

    * ``colors``: a colour for every bar (``"tab:blue"``), one per row (a list), or one per contender (a mapping;
      contenders it does not name get the first colour of matplotlib's cycle);
    * ``reference``: a contender whose value is drawn as a dotted line across its panel, to read the other bars
      against (say, a baseline that the other rows are compared with);
    * ``spreads``: ``{panel: {contender: (low, high)}}``, a black line over the bar from ``low`` to ``high`` (the
      fastest to the slowest round of a timing, for instance);
    * ``hatched``: ``{panel: {contender: value}}``, a hatched outline bar drawn over the bar (a part of the value,
      such as the memory held between steps within the peak of a step);
    * ``title`` above the panels; ``width`` (inches: 8 for one panel, 4.5 a panel for more) and ``row_height``
      size the figure.
    """
    if not panels:
        raise ValueError("bars needs at least one panel: {axis label: {contender: value}}")
    for label, values in panels.items():
        if not values:
            raise ValueError(f"panel {label!r} has no bars")
    for option, given in (("spreads", spreads), ("hatched", hatched)):
        unknown = set(given or {}) - set(panels)
        if unknown:
            raise ValueError(f"{option} names panels that do not exist: {sorted(unknown)}; panels: {list(panels)}")
    plt = _pyplot()
    rows = max(len(values) for values in panels.values())
    width = width if width is not None else 4.5 * len(panels) if len(panels) > 1 else 8.0
    # An axis label wider than its panel is wrapped (about 9 characters of 10-point text to the inch).
    labels = {label: textwrap.fill(label, max(20, int(9 * width / len(panels) * 0.75))) for label in panels}
    label_lines = max(text.count("\n") + 1 for text in labels.values())
    height = 0.6 + 0.2 * label_lines + row_height * rows + (0.25 if title else 0)
    fig, axes = plt.subplots(1, len(panels), figsize=(width, height), dpi=DPI, squeeze=False, layout="constrained")
    previous: list[str] | None = None
    for ax, (label, values) in zip(axes[0], panels.items()):
        names = list(values)
        positions = np.arange(len(names))
        ax.barh(positions, [values[n] for n in names], color=_colours(colors, names))
        over = (hatched or {}).get(label, {})
        if over:
            ax.barh([positions[names.index(n)] for n in over], list(over.values()), color="none",
                    edgecolor="black", hatch="//")
        spread = (spreads or {}).get(label, {})
        if spread:
            ax.hlines([positions[names.index(n)] for n in spread], [low for low, _ in spread.values()],
                      [high for _, high in spread.values()], color="black")
        if reference is not None and reference in values:
            ax.axvline(values[reference], linestyle=":", color=GREY)
        ax.set_yticks(positions, names if names != previous else [""] * len(names))
        ax.set_ylim(len(names) - 0.5, -0.5)  # the first contender on top
        ax.set_xlabel(labels[label])
        previous = names
    if title:
        fig.suptitle(title, fontsize=11)
    return _finish(fig)


def curves(series: Mapping[str, Sequence[float] | Mapping[int, float]], *, average: int | None = None,
           log: bool = False, lines: Mapping[str, float] | None = None, xlabel: str = "step",
           ylabel: str | None = None, ylim: tuple[float | None, float | None] | None = None,
           title: str | None = None, size: tuple[float, float] = (8.0, 3.2)) -> Any:
    """Curves over the steps of a run, such as losses: one line per series, and reference levels.

    A series is either one value per step (a list: its first value is step 1), drawn as a thin line, or
    ``{step: value}`` for values measured now and then (an estimate every 50 steps), drawn as points joined by
    lines. ``average=k`` adds, for each list, a thick line of the same colour: the mean of the last ``k``
    steps at each step (:func:`moving_average`). ``log=True`` makes the vertical axis logarithmic. ``lines``
    maps a label to a level, drawn as a dotted line with its label at the right end ("ln 10"). ``ylim`` is
    ``(bottom, top)``; either may be ``None``. A legend names the series when there are several lines.
    """
    if not series:
        raise ValueError("curves needs at least one series: {label: values}")
    if average is not None and average < 1:
        raise ValueError(f"average must be at least 1, got {average}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=size, dpi=DPI, layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    for k, (label, values) in enumerate(series.items()):
        colour = colours[k % len(colours)]
        if isinstance(values, Mapping):
            steps, ys = list(values), list(values.values())
            ax.plot(steps, ys, "o-", color=colour, label=label)
            drawn += 1
        else:
            steps, ys = list(range(1, len(values) + 1)), list(values)
            thin = average is not None
            ax.plot(steps, ys, color=colour, linewidth=0.8 if thin else 1.2, alpha=0.5 if thin else 1.0, label=label)
            drawn += 1
            smooth = moving_average(ys, average) if average is not None else np.empty(0)
            if len(smooth):
                name = f"average of {average}" if len(series) == 1 else f"{label}, average of {average}"
                ax.plot(steps[average - 1:], smooth, linewidth=2, color=colour, label=name)
                drawn += 1
    if log:
        ax.set_yscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    for text, level in (lines or {}).items():
        ax.axhline(level, linestyle=":", color=GREY)
        ax.annotate(text, (1.0, level), xycoords=("axes fraction", "data"), xytext=(-3, 2),
                    textcoords="offset points", ha="right", va="bottom", fontsize=9, color=GREY)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=11)
    if drawn > 1:
        ax.legend(fontsize=8, loc="best")
    return _finish(fig)


def image_row(images: Sequence[Any], titles: Sequence[str] | None = None, *,
              title_colors: Sequence[str] | None = None, cmap: str | None = None, vmin: float | None = None,
              vmax: float | None = None, ticks: Sequence[str] | None = None, xlabel: str | None = None,
              ylabel: str | None = None, width: float = 9.0, height: float | None = None) -> Any:
    """Pictures in one row, each under its title: images (height x width, or height x width x 3 with channels
    last, as matplotlib wants them) or matrices.

    ``title_colors`` colours each title (green for a right answer, red for a wrong one). ``cmap``, ``vmin`` and
    ``vmax`` are matplotlib's (``cmap="gray_r"`` for ink on paper, ``"viridis"`` for weights from 0 to 1).
    Without ``ticks`` the axes are hidden; ``ticks`` names the rows and columns of a matrix (the characters of a
    text, for attention weights), and ``xlabel`` and ``ylabel`` say what they are (``ylabel`` on the first
    picture only). Tensors are accepted (``.numpy()`` is called).
    """
    if not images:
        raise ValueError("image_row needs at least one picture")
    for option, given in (("titles", titles), ("title_colors", title_colors)):
        if given is not None and len(given) != len(images):
            raise ValueError(f"{len(images)} pictures but {len(given)} {option}")
    arrays = [np.asarray(image.numpy() if hasattr(image, "numpy") else image) for image in images]
    plt = _pyplot()
    if height is None:
        first = arrays[0]
        height = width / len(arrays) * first.shape[0] / first.shape[1] + (0.35 if titles else 0.1)
        if ticks is not None:
            height += 0.9
    fig, axes = plt.subplots(1, len(arrays), figsize=(width, height), dpi=DPI, squeeze=False, layout="constrained")
    for k, (ax, array) in enumerate(zip(axes[0], arrays)):
        ax.imshow(array, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        if titles is not None:
            ax.set_title(titles[k], fontsize=10, **({"color": title_colors[k]} if title_colors is not None else {}))
        if ticks is None:
            ax.axis("off")
            continue
        ax.set_xticks(range(len(ticks)), ticks, fontsize=7, family="monospace")
        ax.set_yticks(range(len(ticks)), ticks, fontsize=7, family="monospace")
        if xlabel:
            ax.set_xlabel(xlabel)
        if ylabel and k == 0:
            ax.set_ylabel(ylabel)
    return _finish(fig)


def _colours(colors: Mapping[str, str] | Sequence[str] | str | None, names: list[str]) -> list[str] | str | None:
    if colors is None or isinstance(colors, str):
        return colors
    if isinstance(colors, Mapping):
        return [colors.get(name, "tab:blue") for name in names]
    colors = list(colors)
    if len(colors) < len(names):
        raise ValueError(f"{len(names)} bars but {len(colors)} colours")
    return colors[:len(names)]


def _pyplot() -> Any:
    import matplotlib.pyplot as plt  # here, not at import: toynet.viz loads without matplotlib's start-up cost

    return plt


def _finish(fig: Any) -> Any:
    """Take the figure (laid out by matplotlib's constrained layout) off pyplot's list of open figures: a notebook
    then shows it once, as the value of its cell (an open figure would also be shown when the cell ends)."""
    _pyplot().close(fig)
    return fig

