"""A global graph's picture: each value's SBP, the boxing nodes, and the placement.

An ``nn.Graph`` whose inputs or parameters are global tensors is lowered after tracing
(:mod:`toynet.distributed.graph_lowering`): every value gets a layout (placement, SBP, logical shape) and a
**boxing** node is put wherever an op needs an input laid out another way. The lowered graph is a
:class:`~toynet.distributed.graph_lowering.GlobalGraph`, whose ``layouts`` maps a node's name to its layout.
Its pictures are the ordinary ones (:mod:`toynet.viz.draw_static`, :mod:`toynet.viz.draw_module`) with
three things added by :func:`annotate`:

* under each value's type, its SBP: ``S(0)`` (split along dim 0), ``B`` (broadcast), ``P`` (partial sum);
  ``S(0) of [8, 3]`` when this process's part is smaller than the logical value (the type shows the part);
* each boxing node in a shape and colour of its own (role ``boxing``), saying the conversion and the step
  of :data:`toynet.distributed.boxing.PATHS` that does it: ``boxing P->B`` / ``all_reduce``;
* a caption: ``placement: cpu ranks [0, 1]``, what the letters mean, and how many boxing nodes of each kind.

``flow.viz.draw(nn_graph)``, ``flow.viz.draw(nn_graph.ir)`` and ``flow.viz.draw(nn_graph._last.traced)``
all draw it; a graph of local tensors is drawn exactly as before. Example (one process is a placement too)::

    P = flow.placement("cpu", ranks=[0])
    model = flow.nn.Linear(3, 2).to_global(placement=P, sbp=flow.sbp.broadcast)
    ...   # an nn.Graph training it on data split(0), called once
    flow.viz.draw(graph).source      # "S(0)", "B", "P", "boxing P->B\\nall_reduce", "placement: cpu ranks [0]"

The picture's nodes are found by the ids the drawers give them (``n<j>``: ``graph.nodes[j]``; ``e<i>``: the
i-th entry of the outline), each checked against its tooltip, so a node that is not what its id says is
left as it is rather than labelled wrong.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..distributed import boxing, comm
from ..distributed.sbp import short
from ..static.ir import OP, Graph, Node
from . import labels, style
from .model import Picture

__all__ = ["BOXING_ROLE", "annotate", "boxing_lines", "caption", "is_boxing", "is_global", "placements", "sbp_text"]

#: The role of a boxing node. Its colours are ones the pictures already use (the GIF palette is made of
#: style's colours, so a new colour would change every animation's bytes); the hexagon and the thick
#: violet border are its own.
BOXING_ROLE = "boxing"
style.ROLES.setdefault(BOXING_ROLE, (
    {"shape": "hexagon", "style": "filled", "fillcolor": "#e5dbff", "color": "#7048e8", "penwidth": "2"},
    "boxing: converts the SBP of a value (a collective, or a local step)"))

#: Picture roles that stand for many nodes, or for none: they get no SBP line.
_NOT_VALUES = {"group", "module", "literal", "note", "summary"}
_NODE_ID = re.compile(r"n(\d+)")
_ENTRY_ID = re.compile(r"e(\d+)")


def is_global(graph: Any) -> bool:
    """Whether ``graph`` is a lowered global graph (it has layouts to draw)."""
    return isinstance(graph, Graph) and bool(getattr(graph, "layouts", None))


def where(placement: Any) -> str:
    """``cpu ranks [0, 1]``; a value every process holds whole (placement None): ``every process``."""
    return "every process" if placement is None else f"{placement.type} ranks {placement.ranks}"


def sbp_text(layout: Any, local_shape: tuple | None = None, placed: bool = False) -> str:
    """``S(0)``, ``B`` or ``P``; ``S(0) of [8, 3]`` when ``local_shape`` (the part drawn) is not the logical shape;
    ``placed``: followed by where (``B on cpu ranks [1]``), for a graph with values on several placements."""
    text = short(layout.sbp)
    if local_shape is not None and tuple(local_shape) != tuple(layout.shape):
        text += f" of [{', '.join(str(d) for d in layout.shape)}]"
    return text + (f" on {where(layout.placement)}" if placed and layout.placement is not None else "")


def is_boxing(node: Node) -> bool:
    """A boxing node (one placement, one SBP to another) or a move (one placement to another)."""
    return node.kind == OP and node.op_name in ("boxing", "move") and "src" in node.attrs


def boxing_lines(node: Node) -> list[str]:
    """A boxing node's first two lines: the conversion and how it is done (``boxing P->B``, ``all_reduce``);
    a move's: its SBPs and the processes it goes from and to."""
    if node.op_name == "move":
        src, dst = node.attrs["src_sbp"], node.attrs["dst_sbp"]
        return [f"move {short(src)}->{short(dst)}", f"ranks {list(node.attrs['src'])} -> {list(node.attrs['dst'])}"]
    src, dst = node.attrs["src"], node.attrs["dst"]
    if isinstance(dst, tuple):
        how = "2-D: rows, then columns"
    else:
        how = boxing.PATHS.get((boxing.kind(src), boxing.kind(dst)), "a copy") if src != dst else "a copy"
    return [f"boxing {short(src)}->{short(dst)}", how]


def _here(placement: Any) -> bool:
    """Whether this process holds a part of values on ``placement`` (None: every process holds them whole)."""
    return placement is None or comm.rank() in placement.flat_ranks()


def placements(graph: Graph) -> list:
    """The placements of ``graph``'s values, in order of first use (not None: values every process holds)."""
    return [p for p in dict.fromkeys(layout.placement for layout in graph.layouts.values()) if p is not None]


def caption(graph: Graph) -> list[str]:
    """The caption lines of a global graph: its placement, the SBP letters, its boxing nodes by kind."""
    lines = [f"placement: {'; '.join(where(p) for p in placements(graph)) or where(None)}",
             ("under each value its SBP: S(d) split along dim d, B broadcast (every rank holds it), "
              "P partial sum (the ranks' parts add up to it)")]
    parts = [n for n in graph.nodes if n.name in graph.layouts and _here(graph.layouts[n.name].placement)
             and tuple(n.shape) != tuple(graph.layouts[n.name].shape)]
    if parts:    # (several processes) a type is this process's part; say so with the first such value
        part, layout = parts[0], graph.layouts[parts[0].name]
        lines.append(f"types are this process's parts: {labels.type_text(part.shape, part.dtype)} above "
                     f"{sbp_text(layout, part.shape)} is its piece of a value of shape {list(layout.shape)}")
    for op, title in (("boxing", "boxing nodes"), ("move", "moves between placements")):
        kinds = Counter(tuple(boxing_lines(n)) for n in graph.nodes if is_boxing(n) and n.op_name == op)
        if kinds:
            said = ", ".join(f"{k} x {what.split(' ', 1)[1]} ({how})" for (what, how), k in kinds.items())
            lines.append(f"{title}: {said}")
    if not any(is_boxing(n) for n in graph.nodes):
        lines.append("no boxing: every op's inputs already have the SBP it needs")
    return lines


def annotate(picture: Picture, graph: Graph, outline: Any = None,
             renamed: Mapping[str, str | None] | None = None) -> Picture:
    """Add ``graph``'s SBPs, boxing nodes and placement to ``picture`` (drawn from ``graph``, or from an
    nn.Graph's ``outline`` and ``graph``); a graph with no layouts leaves it unchanged. Returns ``picture``."""
    if not is_global(graph):
        return picture
    layouts, renamed = graph.layouts, renamed or {}
    placed = len(placements(graph)) > 1       # values on several placements (pipeline stages): say where
    entries = list(outline.walk()) if outline is not None else []
    for nid, vnode in picture.nodes.items():
        if vnode.role in _NOT_VALUES:
            continue
        found = _NODE_ID.fullmatch(nid)
        if found and int(found.group(1)) < len(graph.nodes):
            node = graph.nodes[int(found.group(1))]
            if not vnode.tooltip.startswith(f"%{node.name} "):
                continue                       # not the node its id says: leave it alone
            layout = layouts.get(node.name)
            if is_boxing(node):
                vnode.role = BOXING_ROLE
                vnode.label = boxing_lines(node) + vnode.label[1:]
            elif layout is not None:
                part = None if node.op_name == "elsewhere" else node.shape     # (elsewhere: no part here)
                vnode.label = vnode.label + [sbp_text(layout, part, placed)]
            continue
        found = _ENTRY_ID.fullmatch(nid)
        if found and int(found.group(1)) < len(entries):
            entry = entries[int(found.group(1))]
            if vnode.tooltip != entry.header():
                continue
            name = entry.node or entry.name
            layout = layouts.get(renamed.get(name, name)) or layouts.get(entry.name)
            if layout is not None:
                vnode.label = vnode.label + [sbp_text(layout, None, placed)]   # an entry: the logical size
    picture.notes.extend(caption(graph))
    return picture
