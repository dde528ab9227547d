"""The colours of the debug lines a recording carries: each tag in the colour of the nodes it names.

``graph.debug(level)`` tags its lines as ``print(graph)`` does: ``(GRAPH:...)``, ``(CONFIG:...)``,
``(MODULE:...)``, ``(PARAMETER:...)``, ``(BUFFER:...)``, ``(INPUT:...)``, ``(OUTPUT:...)`` and, from level
2, ``(OPERATOR:...)``. The GIF and the notebook player show a frame's lines beside its picture, each on
the fill of the node it names (an INPUT line on the blue of INPUT nodes, an OPERATOR line on the fill of
its phase's op boxes), so that the log and the picture read as one. The colours are read from
:data:`~toynet.viz.style.ROLES`, the one table of how things look, so they cannot disagree.
"""

from __future__ import annotations

import re

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
