"""The frames of a recording: the final picture drawn once per step, with what is not there yet hidden.

Every frame is the *final* picture with the nodes that did not exist yet drawn invisibly
(``style=invis``): dot then places every node at the same spot in every frame, so nothing jumps.

A frame is shown *cropped*, not laid out again: :meth:`Frame.window` is the part of the layout it
draws (the nodes present so far, the legend, a margin), and :meth:`Frame.to_png` and
:meth:`Frame.to_svg` ask dot for that part only (its ``viewport``), at a scale where the smallest text
is at least :data:`~toynet.viz.rendering.MIN_TEXT_PX` pixels. So an early step's still is small and
legible, and a node has the same place, relative to the others, in every frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .dot import to_digraph
from .model import Picture
from .rendering import MIN_TEXT_PX, Box, Drawing, Extent, extent, scale_for, to_png, to_svg, union

#: Points of white around what a frame draws (dot's own pad is 4).
MARGIN = 8.0


@dataclass
class Frame:
    """One step of a recording: what was run (``source``, ``lineno``) and the picture after it."""

    index: int
    label: str
    source: str
    lineno: int | None
    drawing: Drawing
    added: tuple[str, ...] = ()
    log: tuple[str, ...] = ()   # the debug lines printed during this step (Graph mode, graph.debug(level))
    _extent: Extent | None = field(default=None, repr=False, compare=False)

    @property
    def dot(self) -> str:
        """The DOT source of this frame."""
        return self.drawing.source

    @property
    def extent(self) -> Extent:
        """Where dot puts everything (the same in every frame) and what this frame draws; measured once."""
        if self._extent is None:
            self._extent = extent(self.drawing)
        return self._extent

    def window(self, margin: float = MARGIN) -> Box:
        """The part of the layout this frame draws, plus ``margin`` points of white (dot fills it), out to
        whole points: windows with the same edge then put the nodes on the very same pixels."""
        box = self.extent.box or self.extent.bb
        return (math.floor(box[0] - margin), math.floor(box[1] - margin),
                math.ceil(box[2] + margin), math.ceil(box[3] + margin))

    def grown(self, whole: Box) -> Box:
        """``whole`` (a later frame's window) cut back to what this frame draws on the side the graph grows
        towards (the bottom of a top-down graph); the other sides stay, so no node moves between frames."""
        rankdir = self.drawing.graph_attr.get("rankdir", "TB")
        mine, (x0, y0, x1, y1) = self.window(), whole
        if rankdir == "TB":
            y0 = max(y0, mine[1])  # y points up: a top-down graph grows towards smaller y
        elif rankdir == "BT":
            y1 = min(y1, mine[3])
        elif rankdir == "LR":
            x1 = min(x1, mine[2])
        else:
            x0 = max(x0, mine[0])
        return x0, y0, x1, y1

    def focus(self, where: Extent | None = None) -> Box | None:
        """The box of the nodes this step added (``None`` if it added none that are drawn); ``where``: the
        extent to look them up in (a later frame's will do: the layout is the same)."""
        nodes = (where or self.extent).nodes
        boxes = [nodes[n] for n in self.added if n in nodes]
        return union(boxes) if boxes else None

    def scale(self, max_px: float | None = None, min_text_px: float = MIN_TEXT_PX) -> float:
        """Pixels per point for this frame's window: dot's 96 dpi, less if the longest side would pass
        ``max_px``, never so little that the smallest text is under ``min_text_px`` pixels."""
        x0, y0, x1, y1 = self.window()
        return scale_for((x1 - x0, y1 - y0), self.extent.smallest_text, max_px, min_text_px)

    def to_png(self, scale: float | None = None, window: Box | None = None, max_px: float | None = None) -> bytes:
        """This frame as a PNG: ``window`` (default: :meth:`window`) at ``scale`` pixels a point (default:
        :meth:`scale` with ``max_px``)."""
        return to_png(self.drawing, window=window or self.window(), scale=scale or self.scale(max_px))

    def to_svg(self, scale: float | None = None, window: Box | None = None) -> str:
        """This frame as SVG text, cropped as :meth:`to_png` is, sized in pixels for a browser."""
        return to_svg(self.drawing, window=window or self.window(), scale=scale or self.scale())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        """A notebook shows the frame as its still: cropped, at a legible scale."""
        svg = self.to_svg()
        bundle = {"image/svg+xml": svg[svg.find("<svg"):], "text/plain": f"<toynet.viz.Frame {self.index + 1}: "
                                                                         f"{self.label.splitlines()[0]}>"}
        return {k: v for k, v in bundle.items() if (not include or k in include) and (not exclude or k not in exclude)}


@dataclass
class Step:
    """What one step of a recording added: the counts say how much of the final picture it shows."""

    label: str
    source: str
    lineno: int | None
    count: int                 # tensors (eager) or nodes (static) present after the step
    ops: int = 0               # ops run during the step (0: it only created tensors)
    manual: bool = False
    log: list[str] = field(default_factory=list)   # debug lines printed during the step


def build_frames(picture: Picture, steps: list[Step], present: Callable[[int], set[str]],
                 layout: dict[str, Any]) -> list[Frame]:
    """One frame per step: ``present(step.count)`` names the picture nodes that exist after the step;
    the nodes new in that step are highlighted. A cluster (a module, a phase) is drawn once all of its
    nodes exist: drawn earlier, its box would reach round nodes still hidden."""
    legend_items = picture.roles() + ["highlight"]
    frames, before = [], set()
    for index, step in enumerate(steps):
        now = present(step.count)
        added = tuple(n for n in picture.nodes if n in now and n not in before)
        drawing = to_digraph(picture, hidden=set(picture.nodes) - now, highlight=added,
                             legend_items=legend_items, partial_clusters=False, **layout)
        frames.append(Frame(index, step.label, step.source, step.lineno, drawing, added, tuple(step.log)))
        before = now
    return frames


def follow(whole: Box, size: tuple[float, float], focus: Box | None, previous: Box | None = None,
           rankdir: str = "TB") -> Box:
    """A ``size`` (points) window onto ``whole`` that shows ``focus``, kept inside ``whole``: along the
    ranks (``rankdir``) the focus sits at the end the graph grows towards, with what came before it in
    view; across them it is centred. A focus longer than the window shows where it starts, as one reads: its
    top (or left) end, and the graph's top (left) edge with it if that is less than a quarter window away. No focus: ``previous`` (or the start). Where ``whole`` fits, it is the window."""
    def axis(lo: float, hi: float, length: float, f_lo: float, f_hi: float, towards: str,
             start_of: str) -> tuple[float, float]:
        if hi - lo <= length:
            return lo, hi
        too_long = f_hi - f_lo + 2 * MARGIN > length
        if too_long:  # where it starts, as one reads a graph
            towards = {"low": "high", "high": "low"}.get(towards, start_of)
        start = {"low": f_lo - MARGIN, "high": f_hi + MARGIN - length}.get(towards, (f_lo + f_hi - length) / 2)
        if too_long and towards == "low" and start - lo <= length / 4:
            start = lo  # near the graph's edge (its left): show the edge too, rather than cut a sliver off
        elif too_long and towards == "high" and hi - (start + length) <= length / 4:
            start = hi - length  # near its top: the top (a title, the first nodes) stays in view
        start = min(max(round(start), lo), hi - length)  # whole points, as Frame.window's
        return start, start + length

    if focus is None and previous is not None:
        return previous
    if focus is None:
        focus = (whole[0], whole[3], whole[0], whole[3])
    x_end = {"LR": "high", "RL": "low"}.get(rankdir, "centre")
    y_end = {"TB": "low", "BT": "high"}.get(rankdir, "centre")  # y points up: top-down grows to low y
    x0, x1 = axis(whole[0], whole[2], size[0], focus[0], focus[2], x_end, "low")  # across: the left...
    y0, y1 = axis(whole[1], whole[3], size[1], focus[1], focus[3], y_end, "high")  # ...and the top
    return x0, y0, x1, y1


def smallest_text(frames: Sequence[Frame]) -> float | None:
    """The smallest font size, in points, that any of ``frames`` draws."""
    sizes = [f.extent.smallest_text for f in frames if f.extent.smallest_text]
    return min(sizes) if sizes else None
