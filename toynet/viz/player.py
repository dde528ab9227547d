"""A notebook player for a recording: Play button, step slider, the step's source, the graph as SVG.

The Play button and the slider are linked in the browser (``jslink``), so playing moves the slider;
the slider drives what is shown, so setting ``player.slider.value = 2`` from Python shows step 3.

It fits a laptop screen: the controls (Play, the slider, the step with its source line) sit above the
picture, and the whole widget is at most ``height`` pixels (700) high. The picture has one scale for the
whole recording, chosen to fit the final graph into the view but never so small that text is under
:data:`~toynet.viz.rendering.MIN_TEXT_PX` pixels; a graph too big for that scrolls, and each step opens
scrolled to the corner nearest its new nodes (the bottom of a top-down graph): the box that scrolls
takes the flex-flow whose start is that corner, so no script is needed.
Each frame shows the final picture's part cut back to the nodes present so far (:meth:`Frame.grown`),
so early steps are small and no node moves. A frame is rendered to SVG by ``dot`` when first shown.

A Graph-mode recording whose graph had ``graph.debug(level)`` set carries the lines it printed: they
sit in a box beside the picture (``.debug_log``), every line printed so far, scrolled to this step's, which
are on the colours of the nodes they name (:func:`~toynet.viz.log_lines.log_html`). Moving the slider
scrolls the log with it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from .log_lines import log_html
from .rendering import Box, scale_for

HEIGHT = 700     # pixels: the whole widget
LOG_WIDTH = "42%"  # the log's share of the width, when there is a log
CONTROLS = 36    # the row of Play and the slider
CAPTION = 84     # the step, its line and its source: four lines, then it scrolls
GAPS = 12        # the widgets' margins



class Player(widgets.VBox):
    """``rec.player()``: the widget; ``.play``, ``.slider``, ``.caption`` and ``.view`` are its parts
    (``.view`` holds the SVG, inside ``.picture``, the box that scrolls), and ``.debug_log`` the debug lines
    (``None`` if the frames carry none); ``.scale`` is the picture's pixels per point, ``.view_height``
    the most pixels it is shown in."""

    def __init__(self, frames: Sequence[Any], interval: int = 1000, height: int = HEIGHT):
        if not frames:
            raise ValueError("nothing to play: the recording has no steps")
        self.frames = list(frames)
        self._svgs: dict[int, str] = {}
        self.view_height = height - CONTROLS - CAPTION - GAPS
        if self.view_height < 100:
            raise ValueError(f"height={height} leaves no room for the picture: give at least "
                             f"{CONTROLS + CAPTION + GAPS + 100} pixels")
        final = self.frames[-1]
        self._whole = final.window()
        tall = self._whole[3] - self._whole[1]  # only the height must fit: a wide picture scrolls sideways
        self.scale = scale_for((0.0, tall), final.extent.smallest_text, self.view_height)
        last = len(self.frames) - 1
        self.play = widgets.Play(value=0, min=0, max=last, step=1, interval=interval, description="Play")
        self.slider = widgets.IntSlider(value=0, min=0, max=last, step=1, description="step")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.caption = widgets.HTML(layout=widgets.Layout(max_height=f"{CAPTION}px", overflow="auto"))
        self.view = widgets.HTML()
        # The box that scrolls: as wide as the picture (up to the notebook's width), at most view_height high.
        self.picture = widgets.Box([self.view], layout=widgets.Layout(
            max_height=f"{self.view_height}px", width="fit-content", max_width="100%", overflow="auto",
            align_items="flex-start", flex_flow=CORNERS[False, False]))
        self.slider.observe(self._on_slider, names="value")
        controls = widgets.HBox([self.play, self.slider], layout=widgets.Layout(height=f"{CONTROLS}px"))
        body: Any = self.picture
        self.debug_log = None
        if any(f.log for f in self.frames):
            self.picture.layout.max_width = f"calc(100% - {LOG_WIDTH} - 8px)"  # the log and its margin
            self.debug_log = widgets.HTML(layout=widgets.Layout(width=LOG_WIDTH, flex="0 0 auto", margin="0 0 0 8px"))
            body = widgets.HBox([self.picture, self.debug_log], layout=widgets.Layout(align_items="flex-start"))
        super().__init__([controls, self.caption, body],
                         layout=widgets.Layout(max_height=f"{height}px", overflow="hidden"))
        self.show(0)

    def _on_slider(self, change: dict) -> None:
        self.show(change["new"])

    def show(self, index: int) -> None:
        """Display frame ``index`` (what moving the slider does)."""
        frame = self.frames[index]
        window = frame.grown(self._whole)
        if index not in self._svgs:
            svg = frame.to_svg(self.scale, window)
            svg = svg[svg.find("<svg"):]  # without the XML prologue, to sit in HTML
            self._svgs[index] = '<svg style="display:block"' + svg[len("<svg"):]  # no gap under it
        where = f"line {frame.lineno}: " if frame.lineno else ""
        self.caption.value = (f"<b>step {index + 1}/{len(self.frames)}</b> {html.escape(where)}"
                              f"<pre style='margin:0;line-height:1.3'>{html.escape(frame.label)}</pre>")
        self.view.value = self._svgs[index]
        if self.debug_log is not None:
            self.debug_log.value = log_html(self.frames, index, self.view_height - 2)  # less its border
        self.picture.layout.flex_flow = corner(window, frame.focus())


#: (right, bottom) -> the flex-flow whose scroll origin is that corner: a box that scrolls opens at the
#: start of its flex directions, so the new nodes are in view without a script.
CORNERS = {(False, False): "row", (True, False): "row-reverse", (False, True): "row wrap-reverse",
           (True, True): "row-reverse wrap-reverse"}


def corner(window: Box, focus: Box | None) -> str:
    """The flex-flow that opens ``window`` scrolled to the corner nearest ``focus`` (a step's new nodes)."""
    if focus is None:
        return CORNERS[False, False]
    x0, y0, x1, y1 = window
    right = (focus[0] + focus[2]) / 2 > (x0 + x1) / 2
    bottom = (focus[1] + focus[3]) / 2 < (y0 + y1) / 2  # y points up
    return CORNERS[right, bottom]
