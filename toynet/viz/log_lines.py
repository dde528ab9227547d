"""The colours of the debug lines a recording carries: each tag in the colour of the nodes it names.

``graph.debug(level)`` tags its lines as ``print(graph)`` does: ``(GRAPH:...)``, ``(CONFIG:...)``,
``(MODULE:...)``, ``(PARAMETER:...)``, ``(BUFFER:...)``, ``(INPUT:...)``, ``(OUTPUT:...)`` and, from level
2, ``(OPERATOR:...)``. The GIF and the notebook player show a frame's lines beside its picture, each on
the fill of the node it names (an INPUT line on the blue of INPUT nodes, an OPERATOR line on the fill of
its phase's op boxes), so that the log and the picture read as one. The colours are read from
:data:`~toynet.viz.style.ROLES`, the one table of how things look, so they cannot disagree.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

from .style import ROLES

_TAG = re.compile(r"\((GRAPH|CONFIG|MODULE|PARAMETER|BUFFER|INPUT|OUTPUT|OPERATOR):")

#: The whole graph and its settings, and a module call (drawn as a cluster, whose box has this grey).
GRAPH_FILL = "#dee2e6"

#: The text colour of lines printed in earlier steps (shown above this step's, dimmed).
EARLIER = "#868e96"


def tag_of(line: str) -> str | None:
    """The tag a debug line starts with (``"INPUT"``...), or ``None`` for untagged lines (the passes)."""
    match = _TAG.match(line)
    return match[1] if match else None


def fill_of(line: str, phase: str | None = None) -> str | None:
    """The background of ``line``: its tag's node fill; an OPERATOR line takes the fill of ``phase``'s op
    boxes (forward ops are white boxes: their lines get the grey of an op). ``None``: no background."""
    tag = tag_of(line)
    if tag in ("GRAPH", "CONFIG"):
        return GRAPH_FILL
    if tag == "MODULE":
        return _fill("module")
    if tag == "OPERATOR":
        fill = _fill(f"op_{phase}") if f"op_{phase}" in ROLES else None
        return fill if fill not in (None, "#ffffff") else _fill("op")
    return _fill(tag) if tag else None


def phase_of(label: str) -> str | None:
    """The phase of a Graph-mode step from its label ("backward model.0: ..." -> "backward")."""
    first = label.split(" ", 1)[0]
    return first if first in ("forward", "backward", "optimizer") else None


def _fill(role: str) -> str | None:
    return ROLES[role][0].get("fillcolor")


def log_html(frames: Sequence[Any], index: int, height: int, font_px: int = 12) -> str:
    """The notebook player's log for frame ``index``: every line printed so far in a box ``height`` pixels
    high that opens scrolled to its end (a flex column in reverse starts at the bottom: no script), the
    earlier steps' lines dimmed, this step's on the fills of the nodes they name. Lines are never
    wrapped (a wrapped tensor description is hard to read): a long one scrolls sideways. A log shorter
    than the box starts at its top (the auto margin takes the free space)."""
    phase = phase_of(frames[index].label)
    rows = [f"<div style='color:{EARLIER}'>{html.escape(line) or '&nbsp;'}</div>"
            for frame in frames[:index] for line in frame.log]
    for line in frames[index].log:
        fill = fill_of(line, phase)
        background = f"background:{fill};" if fill else ""
        rows.append(f"<div style='{background}color:#212529'>{html.escape(line) or '&nbsp;'}</div>")
    if not rows:
        rows = [f"<div style='color:{EARLIER}'>(nothing printed: set graph.debug(level) before the first call "
                "to see what it prints here)</div>"]
    return (f"<div style='display:flex;flex-direction:column-reverse;overflow:auto;height:{height}px;"
            f"border:1px solid #dee2e6;background:#fcfcfd'><div style='font:{font_px}px/1.35 monospace;"
            "white-space:pre;width:max-content;min-width:100%;margin-bottom:auto;padding:4px 6px'>"
            f"{''.join(rows)}</div></div>")
