"""Running Graphviz's ``dot`` program, and saying exactly what to install when it is missing.

Drawing (building DOT source) needs only the ``graphviz`` Python package; turning DOT into pictures
needs the ``dot`` program from Graphviz itself, which pip cannot install. So :func:`toynet.viz.draw`
always works and returns a :class:`Drawing` whose ``.source`` is the DOT text; only rendering (SVG,
PNG, a notebook display, a GIF) raises :class:`GraphvizNotInstalled`, whose message says how to get
``dot`` on each platform.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import graphviz

INSTALL_HELP = (
    "Rendering a toynet drawing needs Graphviz's `dot` program, which was not found on PATH "
    "(the `graphviz` Python package only writes DOT text; pip cannot install `dot`). Install it with\n"
    "  Debian/Ubuntu:  sudo apt-get install graphviz\n"
    "  macOS:          brew install graphviz\n"
    "  conda:          conda install -c conda-forge graphviz\n"
    "  Windows:        winget install graphviz  (then reopen the terminal)\n"
    "The drawing itself still works without it: `toynet.viz.draw(...).source` is the DOT text, which "
    "you can paste into any Graphviz viewer.")


class GraphvizNotInstalled(RuntimeError):
    """The ``dot`` program is missing; the message says how to install it."""


class Drawing(graphviz.Digraph):
    """A ``graphviz.Digraph`` whose rendering methods explain a missing ``dot`` in plain words.

    Everything else is the ordinary graphviz API: ``.source``, ``.render(...)``, ``.pipe(...)``, and
    Jupyter shows it as SVG.
    """

    def pipe(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().pipe(*args, **kwargs)
        except graphviz.ExecutableNotFound as error:
            raise GraphvizNotInstalled(INSTALL_HELP) from error

    def render(self, *args: Any, **kwargs: Any) -> str:
        try:
            return super().render(*args, **kwargs)
        except graphviz.ExecutableNotFound as error:
            raise GraphvizNotInstalled(INSTALL_HELP) from error


#: Pixels per point of dot's bitmaps (96 dpi), which is also how big a browser shows an SVG's points.
SCREEN = 96 / 72

#: The smallest text a picture may show, in pixels at the size it is shown.
MIN_TEXT_PX = 11

#: A part of a layout: ``(x0, y0, x1, y1)`` in points, y upwards, as dot places things.
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Extent:
    """Where dot put things and what it drew, in its layout's points (``dot -Tjson``).

    ``bb`` is the whole layout, invisible nodes included: every frame of a recording has the same.
    ``box`` holds what is drawn (a ``style=invis`` node draws nothing), ``nodes`` each drawn node's box,
    and ``smallest_text`` the smallest font size, in points, of any drawn text (``None``: no text).
    """

    bb: Box
    box: Box | None
    nodes: dict[str, Box]
    smallest_text: float | None


def render(source: Any, format: str = "svg", max_size: int | None = None, window: Box | None = None,
           scale: float | None = None) -> Any:
    """Lay out and render a drawing (or DOT text): ``"svg"`` and ``"json"`` give text, ``"png"`` bytes.

    ``max_size``: scale the picture down to at most this many pixels on its longest side (bitmaps of
    tall graphs are otherwise huge: rasterising a 900-node chain at full size takes ~30 s).
    ``window``: draw only this part of the layout (a :data:`Box`, as :func:`extent` gives them); the layout
    itself is the same as without it. ``scale``: pixels per point (PNG: ``dpi = 72 * scale``; SVG: the
    ``width`` and ``height`` it asks a browser for).
    """
    dot = source.source if isinstance(source, graphviz.Digraph) else str(source)
    attrs = []
    if max_size is not None:
        inches = max_size / 96  # dot's default bitmap resolution; "size" without "!" only shrinks
        attrs.append(f'size="{inches:.2f},{inches:.2f}"')
    if window is not None:  # viewport="W,H,zoom,x,y": W x H points around (x, y), clipped by dot itself
        x0, y0, x1, y1 = window
        attrs.append(f'viewport="{x1 - x0:.2f},{y1 - y0:.2f},1,{(x0 + x1) / 2:.2f},{(y0 + y1) / 2:.2f}"')
    if scale is not None and format == "png":
        attrs.append(f'dpi="{72 * scale:.2f}"')
    if attrs:
        dot = dot.replace("{", "{\n\t" + "\n\t".join(attrs), 1)
    try:
        data = graphviz.Source(dot).pipe(format=format)
    except graphviz.ExecutableNotFound as error:
        raise GraphvizNotInstalled(INSTALL_HELP) from error
    if format == "svg" and scale is not None:
        return _svg_size(data.decode("utf-8"), scale)
    return data.decode("utf-8") if format in ("svg", "json") else data


def to_svg(source: Any, window: Box | None = None, scale: float | None = None) -> str:
    return render(source, "svg", window=window, scale=scale)


def to_png(source: Any, max_size: int | None = None, window: Box | None = None,
           scale: float | None = None) -> bytes:
    return render(source, "png", max_size, window, scale)


def extent(source: Any) -> Extent:
    """Lay ``source`` out (``dot -Tjson``) and measure it: see :class:`Extent`."""
    layout = json.loads(render(source, "json"))
    bb = tuple(float(v) for v in layout["bb"].split(","))
    boxes, nodes, sizes = [], {}, []
    drawn = [(None, {k: v for k, v in layout.items() if k != "_draw_"})]  # not the page's white background
    drawn += [(o["name"] if "bb" not in o else None, o) for o in layout.get("objects", [])]  # clusters have bb
    drawn += [(None, e) for e in layout.get("edges", [])]
    for name, thing in drawn:
        ops = [op for key, value in thing.items() if key.startswith("_") and key.endswith("draw_") for op in value]
        box, smallest = _measure(ops)
        if box is not None:
            boxes.append(box)
            if name is not None:
                nodes[name] = box
        if smallest is not None:
            sizes.append(smallest)
    return Extent(bb, union(boxes) if boxes else None, nodes, min(sizes) if sizes else None)


def union(boxes: Any) -> Box:
    """The smallest box holding every one of ``boxes``."""
    boxes = list(boxes)
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def scale_for(size: tuple[float, float], smallest_text: float | None, max_px: float | None = None,
              min_text_px: float = MIN_TEXT_PX) -> float:
    """Pixels per point for a picture of ``size`` points: dot's 96 dpi (:data:`SCREEN`), less if its
    longest side would pass ``max_px`` pixels, but never so little that ``smallest_text`` (points) is
    under ``min_text_px`` pixels. Rounded up to a whole hundredth of a dpi, so that dot is told exactly it."""
    scale = SCREEN
    if max_px is not None and max(size) > 0:
        scale = min(scale, max_px / max(size))
    if smallest_text:
        scale = max(scale, min_text_px / smallest_text)
    return math.ceil(scale * 7200) / 7200


def _measure(ops: list[dict]) -> tuple[Box | None, float | None]:
    """The box of xdot drawing operations, and the smallest font size of the text among them."""
    xs: list[float] = []
    ys: list[float] = []
    size, smallest = 14.0, None
    for op in ops:
        kind = op["op"]
        if kind == "F":
            size = float(op["size"])
        elif kind == "T" and op["text"].strip():
            (x, y), width = op["pt"], float(op["width"])
            left = x - {"l": 0.0, "c": width / 2, "r": width}[op["align"]]
            xs += [left, left + width]
            ys += [y - size / 4, y + size]  # from the baseline: descenders below, ascenders above
            smallest = size if smallest is None else min(smallest, size)
        elif kind == "E":
            x, y, rx, ry = op["rect"]
            xs += [x - rx, x + rx]
            ys += [y - ry, y + ry]
        elif "points" in op:
            xs += [p[0] for p in op["points"]]
            ys += [p[1] for p in op["points"]]
    return ((min(xs), min(ys), max(xs), max(ys)) if xs else None), smallest


def _svg_size(svg: str, scale: float) -> str:
    """Ask for ``scale`` pixels a point: dot writes the size in whole points; the viewBox has it exactly."""
    width, height = (float(v) for v in re.search(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+) ([\d.]+)"', svg).groups())
    return re.sub(r'<svg width="[\d.]+pt" height="[\d.]+pt"',
                  f'<svg width="{width * scale:.0f}px" height="{height * scale:.0f}px"', svg, count=1)
