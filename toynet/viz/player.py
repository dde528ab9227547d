"""A notebook player for a recording: Play button, step slider, the step's source, the graph as SVG.

The Play button and the slider are linked in the browser (``jslink``), so playing moves the slider;
the slider drives what is shown, so setting ``player.slider.value = 2`` from Python shows step 3.

It fits a laptop screen: the controls (Play, the slider, the step with its source line) sit above the
picture, and the whole widget is at most ``height`` pixels (700) high. The picture has one scale for the
whole recording, chosen to fit the final graph into the view but never so small that text is under
:data:`~toynet.viz.rendering.MIN_TEXT_PX` pixels; a graph too big for that scrolls, and each step opens
scrolled to the corner nearest its new nodes (the bottom of a top-down graph).
Each frame shows the final picture's part cut back to the nodes present so far (:meth:`Frame.grown`),
so early steps are small and no node moves. A frame is rendered to SVG by ``dot`` when first shown.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from .rendering import Box, scale_for

HEIGHT = 700     # pixels: the whole widget
CONTROLS = 36    # the row of Play and the slider
CAPTION = 84     # the step, its line and its source: four lines, then it scrolls
GAPS = 12        # the widgets' margins



class Player(widgets.VBox):
    """``rec.player()``: the widget; ``.play``, ``.slider``, ``.caption`` and ``.view`` are its parts;
    ``.scale`` is the picture's pixels per point, ``.view_height`` the most pixels it is shown in."""

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
        self.view = widgets.HTML(layout=widgets.Layout(max_height=f"{self.view_height}px", overflow="hidden"))
        self.slider.observe(self._on_slider, names="value")
        controls = widgets.HBox([self.play, self.slider], layout=widgets.Layout(height=f"{CONTROLS}px"))
        super().__init__([controls, self.caption, self.view],
                         layout=widgets.Layout(max_height=f"{height}px", overflow="hidden"))
        self.show(0)

    def _on_slider(self, change: dict) -> None:
        self.show(change["new"])

    def show(self, index: int) -> None:
        """Display frame ``index`` (what moving the slider does)."""
        frame = self.frames[index]
        if index not in self._svgs:
            window = frame.grown(self._whole)
            svg = frame.to_svg(self.scale, window)
            self._svgs[index] = _scroll_box(svg[svg.find("<svg"):], window, frame.focus(), self.view_height)
        where = f"line {frame.lineno}: " if frame.lineno else ""
        self.caption.value = (f"<div style='line-height:1.3'><b>step {index + 1}/{len(self.frames)}</b> "
                              f"{html.escape(where)}<pre style='margin:0;line-height:1.3'>"
                              f"{html.escape(frame.label)}</pre></div>")
        self.view.value = self._svgs[index]


def _scroll_box(svg: str, window: Box, focus: Box | None, height: int) -> str:
    """The SVG in a box at most ``height`` pixels high that scrolls, opening at the corner nearest the
    step's new nodes (``focus``) without a script: a ``column-reverse`` flexbox opens at its bottom, a
    right-to-left one at its right. A new box each step, so each step opens there again."""
    x0, y0, x1, y1 = window
    fx, fy = ((focus[0] + focus[2]) / 2, (focus[1] + focus[3]) / 2) if focus else (x0, y1)
    column = "column-reverse" if fy < (y0 + y1) / 2 else "column"  # y points up: below the middle
    direction = "rtl" if fx > (x0 + x1) / 2 else "ltr"
    return (f"<div style='display:flex;flex-direction:{column};align-items:flex-start;direction:{direction};"
            f"width:fit-content;max-width:100%;max-height:{height}px;overflow:auto;line-height:0'>"
            f"<div style='direction:ltr;width:max-content'>{svg}</div></div>")
