"""A notebook player for a recording: Play button, step slider, the step's source, the graph as SVG.

The Play button and the slider are linked in the browser (``jslink``), so playing moves the slider;
the slider drives what is shown, so setting ``player.slider.value = 2`` from Python shows step 3.
Each frame is rendered to SVG by ``dot`` the first time it is shown.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from .rendering import to_svg


class Player(widgets.VBox):
    """``rec.player()``: the widget; ``.play``, ``.slider``, ``.caption`` and ``.view`` are its parts."""

    def __init__(self, frames: Sequence[Any], interval: int = 1000):
        if not frames:
            raise ValueError("nothing to play: the recording has no steps")
        self.frames = list(frames)
        self._svgs: dict[int, str] = {}
        last = len(self.frames) - 1
        self.play = widgets.Play(value=0, min=0, max=last, step=1, interval=interval, description="Play")
        self.slider = widgets.IntSlider(value=0, min=0, max=last, step=1, description="step")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.caption = widgets.HTML()
        self.view = widgets.HTML()
        self.slider.observe(self._on_slider, names="value")
        super().__init__([widgets.HBox([self.play, self.slider]), self.caption, self.view])
        self.show(0)

    def _on_slider(self, change: dict) -> None:
        self.show(change["new"])

    def show(self, index: int) -> None:
        """Display frame ``index`` (what moving the slider does)."""
        frame = self.frames[index]
        if index not in self._svgs:
            svg = to_svg(frame.drawing)
            self._svgs[index] = svg[svg.find("<svg"):]  # drop the XML prologue to embed it in HTML
        where = f"line {frame.lineno}: " if frame.lineno else ""
        self.caption.value = (f"<b>step {index + 1}/{len(self.frames)}</b> {html.escape(where)}"
                              f"<pre style='margin:0'>{html.escape(frame.label)}</pre>")
        self.view.value = self._svgs[index]
