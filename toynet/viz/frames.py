"""The frames of a recording: the final picture drawn once per step, with what is not there yet hidden.

Every frame is the *final* picture with the nodes that did not exist yet drawn invisibly
(``style=invis``): dot then places every node at the same spot in every frame, so nothing jumps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dot import to_digraph
from .model import Picture
from .rendering import Drawing


@dataclass
class Frame:
    """One step of a recording: what was run (``source``, ``lineno``) and the picture after it."""

    index: int
    label: str
    source: str
    lineno: int | None
    drawing: Drawing
    added: tuple[str, ...] = ()

    @property
    def dot(self) -> str:
        """The DOT source of this frame."""
        return self.drawing.source

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return self.drawing._repr_mimebundle_(include, exclude)


@dataclass
class Step:
    """What one step of a recording added: the counts say how much of the final picture it shows."""

    label: str
    source: str
    lineno: int | None
    count: int                 # tensors (eager) or nodes (static) present after the step
    ops: int = 0               # ops run during the step (0: it only created tensors)
    manual: bool = False


def build_frames(picture: Picture, steps: list[Step], present: Callable[[int], set[str]],
                 layout: dict[str, Any]) -> list[Frame]:
    """One frame per step: ``present(step.count)`` names the picture nodes that exist after the step;
    the nodes new in that step are highlighted."""
    legend_items = picture.roles() + ["highlight"]
    frames, before = [], set()
    for index, step in enumerate(steps):
        now = present(step.count)
        added = tuple(n for n in picture.nodes if n in now and n not in before)
        drawing = to_digraph(picture, hidden=set(picture.nodes) - now, highlight=added,
                             legend_items=legend_items, **layout)
        frames.append(Frame(index, step.label, step.source, step.lineno, drawing, added))
        before = now
    return frames
