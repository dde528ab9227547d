"""A static :class:`~toynet.static.Graph` as a picture.

Each :class:`~toynet.static.Node` is one value, so each becomes one picture node: the op boxes say
what computes the value (``matmul``, ``f32[1, 3]``); inputs, state and constants are ellipses styled
by kind. Op nodes sit in one cluster per phase (forward, backward, optimizer update), and a dashed
"update" edge goes from the value a training step computes back to the state it replaces, which is
how a static graph says "this is the new weight".

Big graphs: ``depth=k`` folds the ops (and state) of each module ``k`` levels deep into one box, the
way one reads a network by its blocks; :func:`summary_picture` picks the deepest ``depth`` that fits a
node budget, and cuts what is left over (:func:`~toynet.viz.model.limit`) if even that is too many.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ..static.ir import CONSTANT, INPUT, OP, PHASES, STATE, Graph, Node
from . import labels
from .model import Picture, VNode, limit
from .style import ROLES

#: With more state updates than this, ``updates="auto"`` draws them as write-back nodes.
MAX_UPDATE_EDGES = 16

PHASE_TITLES = {"forward": "forward", "backward": "backward (from autodiff)", "optimizer": "optimizer update"}


def visible_nodes(graph: Graph, phases: Iterable[str]) -> list[Node]:
    """The op nodes of ``phases`` and every non-op node they read, return or update, in graph order."""
    phases = set(phases)
    ops = {id(n) for n in graph.nodes if n.kind == OP and n.phase in phases}
    used = {id(x) for n in graph.nodes if id(n) in ops for x in n.input_nodes}
    used |= {id(n) for n in graph.inputs} | {id(n) for n in graph.outputs}
    updated = {name for name, src in graph.updates.items() if id(src) in ops or id(src) in used}
    return [n for n in graph.nodes if id(n) in ops or (n.kind != OP and (
        id(n) in used or (n.kind == STATE and n.state_name in updated)))]


def static_picture(graph: Graph, *, phases: Iterable[str] = PHASES, show_values: bool = False,
                   show_names: bool = False, literals: str = "node", depth: int | None = None,
                   updates: str = "auto", prefix: str = "", root: tuple[str, ...] = (),
                   picture: Picture | None = None) -> tuple[Picture, dict[str, str]]:
    """Add ``graph`` to ``picture`` (a new one by default) under cluster ``root``.

    ``updates="edges"`` draws each state update as a dashed edge back to the state it replaces;
    ``updates="nodes"`` as a "new <state>" node after the op instead: tidier on big graphs, where the
    edges going back up cross everything, and much faster to lay out (dot spends seconds routing
    dozens of such edges: 25 s against 1 s for MobileNetV2's 66 updates). ``"auto"``: edges for at
    most :data:`MAX_UPDATE_EDGES` updates, else nodes. Returns the picture and ``node name -> picture
    id`` (several names share an id when grouped).
    """
    if literals not in ("node", "inline"):
        raise ValueError(f"literals must be 'node' or 'inline', got {literals!r}")
    if updates not in ("auto", "edges", "nodes"):
        raise ValueError(f"updates must be 'auto', 'edges' or 'nodes', got {updates!r}")
    if updates == "auto":
        updates = "edges" if len(graph.updates) <= MAX_UPDATE_EDGES else "nodes"
    if depth is not None and depth < 1:
        raise ValueError(f"depth counts module levels and must be at least 1 (or None), got {depth}")
    picture = picture if picture is not None else Picture()
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    ids: dict[str, str] = {}
    groups: dict[tuple, list[Node]] = {}
    group_ids: dict[tuple, str] = {}
    for n in visible_nodes(graph, phases):
        i = index[id(n)]
        key = _group_key(n, depth)
        if key is not None:
            if key not in groups:
                groups[key] = []
                cluster = root + (n.phase,) if n.kind == OP else root
                group_ids[key] = picture.add_node(VNode(f"{prefix}g{i}", [], "group", cluster=cluster)).id
            groups[key].append(n)
            ids[n.name] = group_ids[key]
            continue
        node = value_node(n, f"{prefix}n{i}", root, show_values, show_names, literals)
        if n.kind == OP:
            picture.clusters[root + (n.phase,)] = (PHASE_TITLES.get(n.phase, n.phase), n.phase)
        picture.add_node(node)
        ids[n.name] = node.id
    for key, members in groups.items():
        _fill_group(picture.nodes[group_ids[key]], key, members)
        if members[0].kind == OP:
            picture.clusters[root + (members[0].phase,)] = (PHASE_TITLES.get(members[0].phase, ""),
                                                           members[0].phase)
    _add_edges(picture, graph, ids, literals)
    _add_updates(picture, graph, ids, updates, prefix, root)
    for n in graph.outputs:
        if n.name in ids:
            picture.add_mark(ids[n.name], "output")
            picture.anchors.append(ids[n.name])
    return picture, ids


def value_node(n: Node, nid: str, root: tuple[str, ...], show_values: bool, show_names: bool, literals: str) -> VNode:
    """The picture node of one graph node: an op box (in the phase cluster under ``root``), or an ellipse."""
    type_ = labels.type_text(n.shape, n.dtype)
    tooltip = f"%{n.name} : {type_}" + (f"  ({n.source})" if n.source else "")
    if n.kind == INPUT:
        return VNode(nid, [n.name, type_], "graph_input", cluster=root, tooltip=tooltip)
    if n.kind == STATE:
        role = f"state_{n.state_kind}" if f"state_{n.state_kind}" in ROLES else "state_buffer"
        return VNode(nid, [n.state_name or n.name, type_], role, cluster=root, tooltip=tooltip)
    if n.kind == CONSTANT:
        values = labels.array_values(n.value, n.device) if show_values else None
        return VNode(nid, [n.name, type_] + (values or []), "constant", cluster=root, tooltip=tooltip)
    head = n.op.describe(**n.attrs)
    if literals == "inline" and any(not isinstance(x, Node) for x in n.inputs):
        head += "(" + ", ".join("·" if isinstance(x, Node) else labels.number_text(x) for x in n.inputs) + ")"
    lines = [head] + ([f"%{n.name}"] if show_names else []) + [type_]
    return VNode(nid, lines, f"op_{n.phase}", cluster=root + (n.phase,), tooltip=tooltip)


def _group_key(n: Node, depth: int | None) -> tuple | None:
    """Nodes with equal keys fold into one box: ops by (phase, module path cut to ``depth`` levels),
    state by (kind, name cut to ``depth`` levels). Inputs, constants and graph-level ops stay single."""
    if depth is None:
        return None
    if n.kind == OP and n.scope:
        return ("op", n.phase, ".".join(n.scope.split(".")[:depth]))
    if n.kind == STATE and n.state_name.count(".") >= depth:
        return ("state", n.state_kind, ".".join(n.state_name.split(".")[:depth]))
    return None


def _fill_group(node: VNode, key: tuple, members: list[Node]) -> None:
    if key[0] == "op":
        kinds = Counter(m.op.name for m in members)
        common = ", ".join(f"{name} x{count}" for name, count in kinds.most_common(3))
        more = ", ..." if len(kinds) > 3 else ""
        node.label = [key[2], f"{len(members)} ops: {common}{more}"]
    else:
        role = f"state_{key[1]}"
        node.role = role if role in ROLES else "state_buffer"
        node.label = [key[2] + ".*", f"{len(members)} {key[1] or 'state'} tensors"]
    node.tooltip = ", ".join(f"%{m.name}" for m in members[:20]) + (" ..." if len(members) > 20 else "")


def _add_edges(picture: Picture, graph: Graph, ids: dict[str, str], literals: str) -> None:
    seen: set[tuple] = set()  # folded groups would otherwise repeat an edge once per member
    for n in graph.nodes:
        head = ids.get(n.name)
        if head is None or n.kind != OP:
            continue
        grouped = picture.nodes[head].role == "group"
        for j, x in enumerate(n.inputs):
            if isinstance(x, Node):
                tail = ids.get(x.name)
                if tail is not None and tail != head and (tail, head) not in seen:
                    seen.add((tail, head))
                    picture.add_edge(tail, head)
            elif literals == "node" and not grouped:
                lit = picture.add_node(VNode(f"{head}_arg{j}", [labels.number_text(x)], "literal",
                                             cluster=picture.nodes[head].cluster))
                picture.add_edge(lit.id, head)


def _add_updates(picture: Picture, graph: Graph, ids: dict[str, str], updates: str, prefix: str,
                 root: tuple[str, ...]) -> None:
    states = {n.state_name: n for n in graph.nodes if n.kind == STATE}
    seen: set[tuple[str, str]] = set()
    for k, (state_name, src) in enumerate(graph.updates.items()):
        target = states.get(state_name)
        tail, head = ids.get(src.name), ids.get(target.name) if target is not None else None
        if tail is None or head is None or (tail, head) in seen:
            continue
        seen.add((tail, head))
        if updates == "edges":
            picture.add_edge(tail, head, role="update", label="update")
        else:
            state = picture.nodes[head]
            sink = picture.add_node(VNode(f"{prefix}u{k}", [f"new {state.label[0]}"], state.role, cluster=root,
                                          marks=("writeback",), tooltip=f"written back to %{target.name}"))
            picture.add_edge(tail, sink.id, role="writeback")


def summary_picture(graph: Graph, max_nodes: int | None, **options: Any) -> Picture:
    """The full picture if it has at most ``max_nodes`` nodes; else ops folded by module, as deep as fits."""
    picture, _ = static_picture(graph, **options)
    total = len(picture.nodes)
    if max_nodes is None or total <= max_nodes or options.get("depth") is not None:
        return limit(picture, max_nodes)
    deepest = max((n.scope.count(".") + 1 for n in graph.nodes if n.kind == OP and n.scope), default=0)
    for depth in range(deepest, 0, -1):
        folded, _ = static_picture(graph, **dict(options, depth=depth))
        if len(folded.nodes) <= max_nodes:
            folded.notes.append(f"{total} nodes are more than max_nodes={max_nodes}: ops are "
                                f"folded by module (depth={depth}); pass max_nodes=None to draw every node.")
            return folded
        picture = folded  # the most folded picture so far is the best one to cut
    return limit(picture, max_nodes)
