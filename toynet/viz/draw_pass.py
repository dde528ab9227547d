"""Before and after an optimisation pass, side by side.

A pass is a function from a graph to a graph. To show what it did, we need only the two graphs and,
from the pass, the names of the nodes it changed; nodes are matched across the two graphs by name:

* ``removed``: names of *before*'s nodes the pass deleted;
* ``fused``: ``{new node: [old nodes]}``, several ops replaced by one kernel;
* ``folded``: names of ops computed at compile time (in *after* they are constants of the same name);
* ``merged``: ``{duplicate: kept node}``, identical expressions computed once.

What was not reported is worked out from the names: a name only in *before* (and not fused or merged)
was removed, a name only in *after* is new. ``toynet.static.passes.PassReport`` objects carry exactly these fields, so
``draw_pass(report)`` works too.

*before* is drawn on the left (removed nodes dashed red, fused-away dashed orange, merged dashed
teal, folded purple), *after* on the right (fused nodes orange, listing what they replaced; folded
constants purple; new nodes green).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..static.ir import Graph
from .draw_static import static_picture
from .model import Picture, neighbourhood


def pass_picture(before: Graph, after: Graph, removed: Iterable[str] | None = None,
                 fused: Mapping[str, Iterable[str]] | None = None, folded: Iterable[str] = (),
                 merged: Mapping[str, str] | None = None, *, titles: tuple[str, str] = ("before", "after"),
                 context: int | None = None, pass_name: str = "", notes: Iterable[str] = (), **options: Any) -> Picture:
    """The picture :func:`toynet.viz.draw_pass` draws (see the module docstring).

    ``context=k`` keeps only the changed nodes and those within ``k`` edges of them (big graphs). The
    caption's one summary line starts with ``pass_name`` (if given) and ends with the pass's ``notes``.
    """
    summary_head = f"{pass_name}: " if pass_name else ""
    fused = {new: list(olds) for new, olds in (fused or {}).items()}
    merged = dict(merged or {})
    folded = list(folded)
    before_names = {n.name for n in before.nodes}
    after_names = {n.name for n in after.nodes}
    fused_away = {old: new for new, olds in fused.items() for old in olds}
    _check_names("fused (new node)", fused, after_names, "after")
    _check_names("fused (old node)", fused_away, before_names, "before")
    _check_names("folded", folded, before_names, "before")
    _check_names("merged (duplicate)", merged, before_names, "before")
    removed = list(removed or ())
    _check_names("removed", removed, before_names, "before")
    gone = before_names - after_names - set(fused_away) - set(merged)  # what the names say was removed
    removed = sorted(set(removed) | gone)
    new = [n.name for n in after.nodes
           if n.name not in before_names and n.name not in fused and n.name not in folded]

    picture = Picture()
    picture.clusters[("before",)] = (titles[0], "side")
    picture.clusters[("after",)] = (titles[1], "side")
    options.setdefault("show_names", True)  # the pass reports names, so show them
    _, before_ids = static_picture(before, prefix="b_", root=("before",), picture=picture, **options)
    _, after_ids = static_picture(after, prefix="a_", root=("after",), picture=picture, **options)

    def mark(ids: dict[str, str], name: str, what: str, note: str = "") -> None:
        if name in ids:
            picture.add_mark(ids[name], what)
            if note:
                picture.nodes[ids[name]].label.append(note)

    for name in removed:
        mark(before_ids, name, "removed")
    for old in fused_away:
        mark(before_ids, old, "fused_away")
    for new_name, olds in fused.items():
        mark(after_ids, new_name, "fused")
        if new_name in after_ids:
            picture.nodes[after_ids[new_name]].label += _wrap("fused: ", [f"%{o}" for o in olds])
    for name in folded:
        mark(before_ids, name, "folded")
        mark(after_ids, name, "folded")
    for duplicate, kept in merged.items():
        mark(before_ids, duplicate, "merged", f"same as %{kept}")
    for name in new:
        mark(after_ids, name, "new")
    picture.anchors = [i for i in picture.anchors if i.startswith("a_")]
    parts = [f"{before.count_ops()} -> {after.count_ops()} ops"]
    for count, what in ((len(removed), "removed"), (len(folded), "folded"), (len(merged), "merged"),
                        (len(new), "new")):
        if count:
            parts.append(f"{count} {what}")
    if fused:
        parts.append(f"{len(fused_away)} fused into {len(fused)}")
    parts += list(notes)
    picture.notes.append(summary_head + ", ".join(parts))
    if context is not None:
        changed = {nid for nid, node in picture.nodes.items() if node.marks and node.marks != ("output",)}
        picture = neighbourhood(picture, changed, context)
    return picture


def renamed_by_passes(reports: Iterable[Any]) -> dict[str, str | None]:
    """``traced node name -> name in the optimised graph`` (None: removed) for every node a pass renamed.

    Dead-code elimination removes, CSE merges a duplicate into the node it repeats, fusion replaces a
    chain by one node: an outline entry that names a traced node finds its value again this way.
    """
    mapping: dict[str, str | None] = {}
    for report in reports:
        step: dict[str, str | None] = {name: None for name in getattr(report, "removed", ())}
        step.update(getattr(report, "merged", {}) or {})
        for new, olds in (getattr(report, "fused", {}) or {}).items():
            step.update((old, new) for old in olds if old != new)
        for name, now in mapping.items():
            if now is not None and now in step:
                mapping[name] = step[now]
        for name, now in step.items():
            mapping.setdefault(name, now)
    return mapping


def report_fields(report: Any) -> dict[str, Any]:
    """The arguments of :func:`pass_picture` from a pass report (anything with ``before`` and ``after``)."""
    return {"before": report.before, "after": report.after, "removed": getattr(report, "removed", None),
            "fused": getattr(report, "fused", None), "folded": getattr(report, "folded", ()),
            "merged": getattr(report, "merged", None)}


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
