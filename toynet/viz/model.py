"""A picture before it is Graphviz: nodes, edges and clusters with *meaning* (roles), not colours.

Both designs are first described as a :class:`Picture` (``draw_eager`` walks ``grad_fn`` records,
``draw_static`` walks a ``Graph``), and only then turned into DOT by :mod:`toynet.viz.dot`. The split
keeps each drawer short, lets one size cap (:func:`limit`) serve both, and lets an animation draw one
final picture many times with different nodes hidden.

Node ids are given by the drawers in traversal order (``t0, op0, t1...``), never from ``id()``, so the
same graph always gives the same DOT source.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class VNode:
    """One box or ellipse. ``label`` lines are joined with line breaks when drawn."""

    id: str
    label: list[str]
    role: str
    cluster: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()
    tooltip: str = ""
    xlabel: str = ""


@dataclass
class VEdge:
    tail: str
    head: str
    role: str = "data"
    label: str = ""


@dataclass
class Picture:
    """Everything a drawing shows, in the order it should be written out."""

    nodes: dict[str, VNode] = field(default_factory=dict)
    edges: list[VEdge] = field(default_factory=list)
    #: cluster path -> (title, cluster role from style.CLUSTERS)
    clusters: dict[tuple[str, ...], tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: nodes the picture is "about" (outputs); the size cap keeps the nodes nearest to them.
    anchors: list[str] = field(default_factory=list)

    def add_node(self, node: VNode) -> VNode:
        if node.id in self.nodes:
            raise ValueError(f"internal error: two picture nodes share the id {node.id!r}")
        self.nodes[node.id] = node
        return node

    def add_edge(self, tail: str, head: str, role: str = "data", label: str = "") -> None:
        self.edges.append(VEdge(tail, head, role, label))

    def add_mark(self, node_id: str, mark: str) -> None:
        node = self.nodes[node_id]
        if mark not in node.marks:
            node.marks = node.marks + (mark,)

    def only(self, kept: set[str]) -> "Picture":
        """A new picture of the nodes in ``kept`` and the edges between them (clusters and notes kept)."""
        result = Picture(clusters=dict(self.clusters), notes=list(self.notes),
                         anchors=[a for a in self.anchors if a in kept])
        for nid, node in self.nodes.items():
            if nid in kept:
                result.add_node(node)
        result.edges = [e for e in self.edges if e.tail in kept and e.head in kept]
        return result

    def roles(self) -> list[str]:
        """The roles and marks used, in first-use order (what the legend must explain)."""
        seen: dict[str, None] = {}
        for node in self.nodes.values():
            seen.setdefault(node.role)
            for mark in node.marks:
                seen.setdefault(mark)
        return list(seen)


def limit(picture: Picture, max_nodes: int | None) -> Picture:
    """Keep at most ``max_nodes`` nodes: those nearest to the anchors, walking edges backwards.

    The left-out nodes become one summary node, linked to every kept node that lost an input, and
    a note says how to see everything. A picture within the cap is returned unchanged.
    """
    if max_nodes is None or len(picture.nodes) <= max_nodes:
        return picture
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1 (or None for no limit), got {max_nodes}")
    producers: dict[str, list[str]] = {n: [] for n in picture.nodes}
    for e in picture.edges:
        if e.role == "data":
            producers[e.head].append(e.tail)
    # Breadth-first from the anchors (or the last nodes, if none) towards the inputs.
    start = [a for a in picture.anchors if a in picture.nodes] or list(picture.nodes)[-1:]
    kept: dict[str, None] = {}
    queue = deque(start)
    while queue and len(kept) < max_nodes - 1:
        nid = queue.popleft()
        if nid in kept:
            continue
        kept[nid] = None
        queue.extend(p for p in producers[nid] if p not in kept)
    hidden = len(picture.nodes) - len(kept)
    result = Picture(clusters=dict(picture.clusters), notes=list(picture.notes), anchors=list(start))
    for nid, node in picture.nodes.items():  # keep the original order for stable layouts
        if nid in kept:
            result.add_node(node)
    summary = result.add_node(VNode("more", [f"... {hidden} more nodes", "(size cap)"], "summary"))
    fed: set[str] = set()
    for e in picture.edges:
        if e.tail in kept and e.head in kept:
            result.edges.append(e)
        elif e.head in kept and e.head not in fed:
            fed.add(e.head)
            result.add_edge(summary.id, e.head, role="summary")
    result.notes.append(f"Showing the {len(kept)} nodes nearest the output of {len(picture.nodes)}; "
                        "pass max_nodes=None to draw them all.")
    return result


def neighbourhood(picture: Picture, centre: set[str], hops: int) -> Picture:
    """Only the ``centre`` nodes and those at most ``hops`` edges away (either direction), with a note.

    Literal nodes of a kept op are kept too, so that kept ops still show all their arguments.
    """
    neighbours: dict[str, set[str]] = {n: set() for n in picture.nodes}
    for e in picture.edges:
        neighbours[e.tail].add(e.head)
        neighbours[e.head].add(e.tail)
    kept, frontier = set(centre), set(centre)
    for _ in range(hops):
        frontier = {m for n in frontier for m in neighbours[n]} - kept
        kept |= frontier
    kept |= {e.tail for e in picture.edges if e.head in kept and picture.nodes[e.tail].role == "literal"}
    result = picture.only(kept)
    if centre:
        result.notes.append(f"Showing the {len(centre)} changed nodes and their neighbours up to {hops} edge(s) "
                            f"away ({len(kept)} of {len(picture.nodes)} nodes); pass context=None to see all.")
    else:
        result.notes.append("No node changed.")
    return result
