"""Before and after an optimisation pass, side by side.

A pass is a function from a graph to a graph. To show what it did, we need only the two graphs and,
from the pass, which node names it ``removed`` and which new nodes it ``fused`` out of old ones
(``{new name: [old names]}``); nodes are matched across the two graphs by name. Anything the pass did
not report is worked out from the names: a name only in *before* was removed, a name only in *after*
is new (a folded constant, say).

In the picture, *before* is on the left with removed nodes dashed red and fused-away nodes dashed
orange; *after* is on the right with fused nodes in orange (their label lists what they replaced) and
new nodes with a green border.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..static.ir import Graph
from .draw_static import static_picture
from .model import Picture


def pass_picture(before: Graph, after: Graph, removed: Iterable[str] | None = None,
                 fused: Mapping[str, Iterable[str]] | None = None, *,
                 titles: tuple[str, str] = ("before", "after"), **options: Any) -> Picture:
    """The picture :func:`toynet.viz.draw_pass` draws (see the module docstring)."""
    fused = {new: list(olds) for new, olds in (fused or {}).items()}
    before_names = {n.name for n in before.nodes}
    after_names = {n.name for n in after.nodes}
    fused_away = {old: new for new, olds in fused.items() for old in olds}
    _check_names("fused (new node)", fused, after_names, "after")
    _check_names("fused (old node)", fused_away, before_names, "before")
    if removed is None:
        removed = sorted(before_names - after_names - set(fused_away))
    else:
        removed = list(removed)
        _check_names("removed", removed, before_names, "before")
    new = [n.name for n in after.nodes if n.name not in before_names and n.name not in fused]

    picture = Picture()
    picture.clusters[("before",)] = (titles[0], "side")
    picture.clusters[("after",)] = (titles[1], "side")
    options.setdefault("show_names", True)  # the pass reports names, so show them
    _, before_ids = static_picture(before, prefix="b_", root=("before",), picture=picture, **options)
    _, after_ids = static_picture(after, prefix="a_", root=("after",), picture=picture, **options)

    for name in removed:
        if name in before_ids:
            picture.add_mark(before_ids[name], "removed")
    for old, new_name in fused_away.items():
        if old in before_ids:
            picture.add_mark(before_ids[old], "fused_away")
            picture.nodes[before_ids[old]].tooltip += f"  fused into %{new_name}"
    for new_name, olds in fused.items():
        if new_name in after_ids:
            node = picture.nodes[after_ids[new_name]]
            picture.add_mark(node.id, "fused")
            node.label = node.label + _wrap("fused: ", [f"%{o}" for o in olds])
    for name in new:
        if name in after_ids and name not in fused:
            picture.add_mark(after_ids[name], "new")
    picture.anchors = [i for i in picture.anchors if i.startswith("a_")]
    parts = [f"{len(before.nodes)} -> {len(after.nodes)} nodes", f"{len(removed)} removed"]
    if fused:
        parts.append(f"{len(fused_away)} fused into {len(fused)}")
    if new:
        parts.append(f"{len(new)} new")
    picture.notes.append(", ".join(parts))
    return picture


def _check_names(what: str, names: Iterable[str], known: set[str], graph: str) -> None:
    unknown = sorted(set(names) - known)
    if unknown:
        raise ValueError(f"draw_pass: {what} names {unknown} are not nodes of the {graph!r} graph; a pass "
                         f"must report the names of nodes that exist in its {graph} graph")


def _wrap(prefix: str, names: list[str], per_line: int = 3) -> list[str]:
    lines = []
    for start in range(0, len(names), per_line):
        chunk = ", ".join(names[start:start + per_line])
        lines.append((prefix if start == 0 else "  ") + chunk)
    return lines
