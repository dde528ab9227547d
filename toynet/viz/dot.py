"""Turn a :class:`~toynet.viz.model.Picture` into a Graphviz ``Digraph`` (DOT source).

Two knobs exist for animations: ``hidden`` node ids are written with ``style=invis`` (still laid out,
so every frame of a recording places every node at the same spot), and ``highlight`` ids get the
"added in this step" mark. ``partial_clusters=False`` also hides a cluster until all its nodes are shown:
a cluster is drawn around its whole final extent, so one drawn early would frame empty space.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

import graphviz

from . import style
from .model import Picture, VNode
from .rendering import Drawing


def text(lines: Iterable[str]) -> str:
    r"""A DOT label from lines: backslashes escaped (quotes are escaped by graphviz), lines joined by \n."""
    return "\\n".join(str(line).replace("\\", "\\\\") for line in lines)


def to_digraph(picture: Picture, *, rankdir: str = "TB", legend: bool = True, title: str = "",
               hidden: Iterable[str] = (), highlight: Iterable[str] = (),
               legend_items: Iterable[str] | None = None, name: str = "toynet",
               partial_clusters: bool = True) -> Drawing:
    """Write ``picture`` as a :class:`Drawing` (a ``graphviz.Digraph``)."""
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"rankdir must be 'TB' (top to bottom) or 'LR' (left to right), got {rankdir!r}")
    hidden, highlight = set(hidden), set(highlight)
    g = Drawing(name=name, graph_attr=dict(style.GRAPH_ATTRS, rankdir=rankdir),
                node_attr=dict(style.NODE_ATTRS), edge_attr=dict(style.EDGE_ATTRS))
    caption = ([title] if title else []) + picture.notes
    if caption:
        g.attr(label=graphviz.nohtml("".join(line.replace("\\", "\\\\") + "\\l" for line in caption)))

    # Group nodes by cluster path, keeping first-appearance order.
    members: dict[tuple[str, ...], list[VNode]] = {(): []}
    for node in picture.nodes.values():
        for depth in range(1, len(node.cluster) + 1):
            members.setdefault(node.cluster[:depth], [])
        members[node.cluster].append(node)

    def all_hidden(path: tuple[str, ...]) -> bool:
        inside = [n.id in hidden for p, ns in members.items() if p[:len(path)] == path for n in ns]
        return all(inside) or (not partial_clusters and any(inside))

    def emit(target: graphviz.Digraph, path: tuple[str, ...]) -> None:
        for node in members[path]:
            marks = node.marks + (("highlight",) if node.id in highlight else ())
            attrs = style.node_attrs(node.role, marks)
            if node.id in hidden:
                attrs["style"] = "invis"
            if node.tooltip:
                attrs["tooltip"] = graphviz.nohtml(node.tooltip.replace("\\", "\\\\").replace("\n", "\\n"))
            if node.xlabel:
                attrs["xlabel"] = graphviz.nohtml(node.xlabel)
            target.node(node.id, graphviz.nohtml(text(node.label)), **attrs)
        for child in members:
            if len(child) == len(path) + 1 and child[:len(path)] == path:
                title_, role = picture.clusters.get(child, (child[-1], "side"))
                with target.subgraph(name="cluster_" + "_".join(child)) as sub:
                    attrs = dict(style.CLUSTERS[role])
                    if all_hidden(child):
                        attrs["style"] = "invis"
                    sub.attr(label=graphviz.nohtml(title_), **attrs)
                    emit(sub, child)

    emit(g, ())
    for edge in picture.edges:
        attrs = dict(style.EDGES[edge.role])
        if edge.tail in hidden or edge.head in hidden:
            attrs["style"] = "invis"
        if edge.label:
            attrs["label"] = graphviz.nohtml(edge.label)
        g.edge(edge.tail, edge.head, **attrs)

    if legend:
        items = list(legend_items) if legend_items is not None else picture.roles()
        if highlight and "highlight" not in items:
            items.append("highlight")
        add_legend(g, items)
    return g


def add_legend(g: graphviz.Digraph, items: list[str]) -> None:
    """A small cluster holding one table: a swatch in each role's or mark's colours, and what it means.

    One node (not one per entry) so the legend takes a single rank and never stretches the layout.
    """
    items = [i for i in items if style.legend_text(i)]  # the summary and note nodes explain themselves
    if not items:
        return
    rows = []
    for item in items:
        attrs = style.node_attrs(item) if item in style.ROLES else style.node_attrs("op", (item,))
        rows.append(f"<TR><TD {_swatch(attrs)}>{'2' if attrs.get('shape') == 'plaintext' else ''}</TD>"
                    f"<TD ALIGN=\"LEFT\">{html.escape(style.legend_text(item))}</TD></TR>")
    table = ('<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="2" CELLPADDING="1">' + "".join(rows)
             + "</TABLE>>")
    with g.subgraph(name="cluster_legend") as sub:
        sub.attr(label="legend", **style.CLUSTERS["legend"])
        sub.node("legend", table, shape="plaintext", fontsize="9", margin="0")


def _swatch(attrs: dict) -> str:
    """HTML table-cell attributes that imitate a node's fill, border colour, width and dashes."""
    styles = attrs.get("style", "")
    fill = attrs.get("fillcolor", "#ffffff") if "filled" in styles else "#ffffff"
    if attrs.get("shape") == "plaintext":
        return 'WIDTH="26" HEIGHT="12" BORDER="0"'
    border = max(1, round(float(attrs.get("penwidth", "1"))))
    if attrs.get("peripheries") == "2":
        border = 3
    cell = (f'WIDTH="26" HEIGHT="12" BGCOLOR="{fill}" BORDER="{border}" '
            f'COLOR="{attrs.get("color", "#000000")}"')
    if "dashed" in styles:
        cell += ' STYLE="dashed"'
    return cell
