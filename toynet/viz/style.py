"""How each kind of thing looks: one table from a *role* to Graphviz attributes, and the legend text.

Every node of a picture has one role (what it is: an op, a parameter, an input...) and possibly some
*marks* (what happened to it: it is an output, a pass removed it, this animation step created it).
Keeping the look in one table means the eager picture, the static picture and the legend can never
disagree about what orange means.

Colours are light fills with dark text, readable in print and by most colour-blind readers; shape
carries meaning too (ellipse = a value, box = a computation), so a greyscale print still reads.
"""

from __future__ import annotations

from typing import Any

FONT = "Helvetica"

#: role -> (Graphviz node attributes, legend text). Order is the legend's order; roles with no legend
#: text (notes, the size cap's summary) explain themselves and stay out of the legend.
ROLES: dict[str, tuple[dict[str, str], str]] = {
    "input": ({"shape": "ellipse", "style": "filled", "fillcolor": "#cfe2ff"},
              "input / constant (no gradient)"),
    "parameter": ({"shape": "ellipse", "style": "filled", "fillcolor": "#ffd8a8"},
                  "parameter (a leaf that requires grad)"),
    "value": ({"shape": "ellipse", "style": "solid"}, "computed value"),
    "op": ({"shape": "box", "style": "rounded,filled", "fillcolor": "#eeeeee"}, "op"),
    "literal": ({"shape": "plaintext", "fontsize": "10", "fontcolor": "#555555", "height": "0.2",
                 "width": "0.2", "margin": "0.02"}, "Python number"),
    # static graph
    "graph_input": ({"shape": "ellipse", "style": "filled", "fillcolor": "#cfe2ff"}, "graph input"),
    "constant": ({"shape": "ellipse", "style": "dashed,filled", "fillcolor": "#f4f4f4"},
                 "constant (folded into the graph)"),
    "state_parameter": ({"shape": "ellipse", "style": "filled", "fillcolor": "#ffd8a8"}, "state: parameter"),
    "state_buffer": ({"shape": "ellipse", "style": "filled", "fillcolor": "#e5dbff"}, "state: buffer"),
    "state_optimizer": ({"shape": "ellipse", "style": "filled", "fillcolor": "#ffdeeb"},
                        "state: optimizer slot"),
    "state_system": ({"shape": "ellipse", "style": "filled", "fillcolor": "#dee2e6"},
                     "state: system (train step)"),
    "op_forward": ({"shape": "box", "style": "rounded,filled", "fillcolor": "#ffffff"}, "forward op"),
    "op_backward": ({"shape": "box", "style": "rounded,filled", "fillcolor": "#fff3bf"}, "backward op"),
    "op_optimizer": ({"shape": "box", "style": "rounded,filled", "fillcolor": "#d3f9d8"},
                     "optimizer update op"),
    "group": ({"shape": "box3d", "style": "filled", "fillcolor": "#f1f3f5"}, "collapsed group of ops"),
    # an nn.Graph by module: the outline's tags (print(graph)), same colours as the state they are
    "INPUT": ({"shape": "invhouse", "style": "filled", "fillcolor": "#cfe2ff", "fontsize": "9"},
              "INPUT of the graph or of a module call"),
    "OUTPUT": ({"shape": "house", "style": "filled", "fillcolor": "#c3fae8", "fontsize": "9"},
               "OUTPUT of the graph or of a module call"),
    "PARAMETER": ({"shape": "ellipse", "style": "filled", "fillcolor": "#ffd8a8"}, "PARAMETER of a module"),
    "BUFFER": ({"shape": "ellipse", "style": "filled", "fillcolor": "#e5dbff"}, "BUFFER of a module"),
    "module": ({"shape": "box3d", "style": "filled", "fillcolor": "#f1f3f5", "margin": "0.12,0.08"},
               "MODULE drawn as one box (depth=...): its class and layers"),
    "note": ({"shape": "plaintext", "fontsize": "9", "fontcolor": "#868e96"}, ""),
    "summary": ({"shape": "note", "style": "filled", "fillcolor": "#fff9db", "fontsize": "10"}, ""),
}

#: mark -> (attributes laid over the role's, legend text).
MARKS: dict[str, tuple[dict[str, str], str]] = {
    "output": ({"penwidth": "2.5", "peripheries": "2"}, "output (double border)"),
    "removed": ({"color": "#c92a2a", "fontcolor": "#868e96", "penwidth": "2", "extra_style": "dashed",
                 "fillcolor": "#ffe3e3"}, "removed by the pass"),
    "fused_away": ({"color": "#e8590c", "penwidth": "2", "extra_style": "dashed"}, "fused into a new node"),
    "fused": ({"color": "#e8590c", "penwidth": "3", "fillcolor": "#ffe8cc"}, "fused node (new)"),
    "folded": ({"color": "#7048e8", "penwidth": "2.5"}, "folded into a constant"),
    "merged": ({"color": "#1098ad", "penwidth": "2", "extra_style": "dashed"},
               "merged into an identical node"),
    "new": ({"color": "#2b8a3e", "penwidth": "2.5"}, "new node"),
    "freed": ({"color": "#868e96", "extra_style": "dashed"}, "inputs freed by backward()"),
    "highlight": ({"color": "#d6336c", "penwidth": "3"}, "added in this step"),
    "writeback": ({"color": "#1c7ed6", "penwidth": "2", "extra_style": "dashed"},
                  "new state value, written back after the step"),
}

#: edge role -> attributes.
EDGES: dict[str, dict[str, str]] = {
    "data": {},
    "update": {"style": "dashed", "color": "#1c7ed6", "fontcolor": "#1c7ed6", "constraint": "false"},
    "writeback": {"style": "dashed", "color": "#1c7ed6"},
    "summary": {"style": "dotted", "color": "#adb5bd"},
    # a forward value read by a backward or update op (kept from the forward pass): drawn, but left out
    # of the ranking, so that the phases stack instead of standing side by side
    "saved": {"color": "#868e96", "constraint": "false"},
    # no line: only puts a later phase below the loss
    "order": {"style": "invis"},
}

#: cluster role -> attributes.
CLUSTERS: dict[str, dict[str, str]] = {
    "forward": {"style": "rounded,filled", "fillcolor": "#f8f9fa", "color": "#adb5bd"},
    "backward": {"style": "rounded,filled", "fillcolor": "#fff9db", "color": "#fab005"},
    "optimizer": {"style": "rounded,filled", "fillcolor": "#ebfbee", "color": "#40c057"},
    "side": {"style": "rounded", "color": "#495057"},
    "module": {"style": "rounded", "color": "#868e96", "fontsize": "10"},
    "module_backward": {"style": "rounded,dashed", "color": "#e67700", "fontsize": "10"},
    "legend": {"style": "rounded,dashed", "color": "#adb5bd", "fontsize": "10"},
}

# newrank: rank the whole graph at once instead of cluster by cluster; with phase clusters and edges
# between them, the old ranking made dot take minutes on a few hundred nodes (0.1 s with this).
GRAPH_ATTRS = {"fontname": FONT, "labeljust": "l", "labelloc": "t", "nodesep": "0.25", "ranksep": "0.35",
               "newrank": "true"}
NODE_ATTRS = {"fontname": FONT, "fontsize": "11", "height": "0.3", "margin": "0.08,0.03"}
EDGE_ATTRS = {"fontname": FONT, "fontsize": "9", "arrowsize": "0.7"}


def node_attrs(role: str, marks: tuple[str, ...] = ()) -> dict[str, Any]:
    """Graphviz attributes for a node of ``role`` carrying ``marks``."""
    if role not in ROLES:
        raise KeyError(f"unknown picture role {role!r}; known roles: {', '.join(ROLES)}")
    attrs = dict(ROLES[role][0])
    for mark in marks:
        extra = dict(MARKS[mark][0])
        added_style = extra.pop("extra_style", None)
        attrs.update(extra)
        if added_style:
            attrs["style"] = _add_style(attrs.get("style", ""), added_style)
    return attrs


def _add_style(style: str, extra: str) -> str:
    parts = [p for p in style.split(",") if p and p not in ("solid", "dashed", "dotted")]
    return ",".join([extra] + parts)


def legend_text(role_or_mark: str) -> str:
    if role_or_mark in ROLES:
        return ROLES[role_or_mark][1]
    return MARKS[role_or_mark][1]
