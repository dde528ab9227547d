"""An ``nn.Graph`` drawn by module: the outline ``print(graph)`` shows, with the static graph's ops inside.

``print(graph)`` and ``graph.debug(1)`` render one model of an ``nn.Graph``: the tree of tagged
:class:`~toynet.nn.graph_outline.Entry` objects that ``graph.outline()`` returns (GRAPH, CONFIG, MODULE,
PARAMETER, BUFFER, INPUT, OUTPUT). This picture is drawn from that same tree, entry by entry, so the
drawing and the printout cannot disagree:

* each MODULE is a cluster, nested as the modules are, titled as the outline prints it;
* each PARAMETER, BUFFER, INPUT and OUTPUT entry is a node in its module's cluster, coloured by tag
  (a parameter's colour is the one the static graph gives parameter state);
* every op of the static graph sits in the cluster of the module it was traced in (its ``scope``), and
  an edge that enters or leaves a module passes through that module call's INPUT or OUTPUT node (an
  entry knows which graph node held its value), as the value did when the program ran.

A training graph has three parts. The forward ops sit in the module clusters; the backward ops in a
mirror of the module tree (dashed, "(backward)"), since a cluster holding both a module's forward and
backward ops would stretch over the whole picture; the optimizer's update ops in one cluster of their
own, with the dashed update edges back to the state they replace.

The three parts stack top to bottom: the edges from forward values to the backward and update ops that
read them (activations kept for backward, parameters read by their update) are grey and do not rank the
layout, and backward hangs from the loss by an invisible edge.

``depth=k`` draws each module ``k`` levels deep as one box (its name, class and op count) that holds
everything inside it, its backward ops and its parameters' updates in boxes of their own: the way to
read a big network by its blocks. Example::

    >>> import toynet as flow
    >>> class Infer(flow.nn.Graph):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.model = flow.nn.Sequential(flow.nn.Linear(3, 4), flow.nn.ReLU(), flow.nn.Linear(4, 1))
    ...     def build(self, x):
    ...         return self.model(x)
    >>> graph = Infer()
    >>> _ = graph(flow.randn(2, 3))
    >>> drawing = flow.viz.draw(graph)             # every op, in clusters model, model.0, model.1, model.2
    >>> "model.0: Linear(in_features=3, out_features=4, bias=True)" in drawing.source
    True
    >>> "3 ops" in flow.viz.draw(graph, depth=1).source   # the model as one box
    True
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import backend
from ..static.ir import BACKWARD, FORWARD, INPUT, OP, OPTIMIZER, PHASES, STATE, Graph, Node
from . import labels
from .draw_static import MAX_UPDATE_EDGES, PHASE_TITLES, value_node, visible_nodes
from .model import Picture, VNode, limit

#: With more edges than this from forward values to backward/update ops, they are left out by default.
MAX_SAVED_EDGES = 24

#: Outline tags drawn as nodes (GRAPH and CONFIG go in the caption, MODULEs are clusters or boxes).
NODE_TAGS = ("INPUT", "OUTPUT", "PARAMETER", "BUFFER")
_STATE_ROLES = {"parameter": "PARAMETER", "buffer": "BUFFER", "optimizer": "state_optimizer",
                "system": "state_system"}


@dataclass
class _Module:
    """One MODULE entry: where it is drawn, and the graph nodes its call's INPUT/OUTPUT entries hold."""

    index: int
    entry: Any
    chain: tuple[str, ...]                      # module paths from the outermost down to this one
    clusters: tuple[str, ...]                   # its forward cluster's path ("m<i>" keys)
    box: str | None = None                      # the box holding it, if it is collapsed (depth=)
    ports: dict[str, dict[str, str]] = field(default_factory=lambda: {"INPUT": {}, "OUTPUT": {}})


def module_picture(outline: Any, graph: Graph | None, *, renamed: Mapping[str, str | None] | None = None,
                   phases: Iterable[str] = PHASES, depth: int | None = None, updates: str = "auto",
                   show_saved: bool | None = None, show_values: bool = False, show_names: bool = False,
                   literals: str = "node") -> Picture:
    """The picture of an ``nn.Graph`` by module (see the module docstring).

    ``outline`` is ``nn_graph.outline()``; ``graph`` the static graph to place in it (None before the
    first call: the modules, parameters and buffers only); ``renamed`` what :func:`renamed_by_passes`
    gives when ``graph`` is the optimised graph.

    ``show_saved``: draw the grey edges from forward values to the backward and update ops that read
    them (activations kept for backward, parameters read by their update). They run across the whole
    picture and cost dot most of its time (7 s against 0.3 s for MobileNetV2 by blocks), so the default
    (None) draws them only when there are at most :data:`MAX_SAVED_EDGES`, and says so otherwise.
    """
    if depth is not None and depth < 1:
        raise ValueError(f"depth counts module levels and must be at least 1 (or None), got {depth}")
    if updates not in ("auto", "edges", "nodes"):
        raise ValueError(f"updates must be 'auto', 'edges' or 'nodes', got {updates!r}")
    if literals not in ("node", "inline"):
        raise ValueError(f"literals must be 'node' or 'inline', got {literals!r}")
    return _ModuleDrawer(outline, graph, dict(renamed or {}), tuple(phases), depth, updates, show_saved,
                         {"show_values": show_values, "show_names": show_names, "literals": literals}).picture


class _ModuleDrawer:
    """Builds one module picture; each method adds one kind of thing (entries, ops, edges, updates)."""

    def __init__(self, outline: Any, graph: Graph | None, renamed: dict, phases: tuple, depth: int | None,
                 updates: str, show_saved: bool | None, node_options: dict):
        self.picture = Picture()
        self.graph, self.renamed, self.depth, self.node_options = graph, renamed, depth, node_options
        self.index = {id(e): i for i, e in enumerate(outline.walk())}
        self.modules: dict[str, _Module] = {}
        self.id_of: dict[str, str] = {}             # graph node name -> picture id
        self.chain_of: dict[str, tuple | None] = {}  # picture id -> module chain (forward values only)
        self.shown: dict[str, str] = {}              # picture id -> the box drawn instead, if folded
        self.box_ops: dict[str, list[Node]] = {}
        self.edges: set[tuple[str, str, str]] = set()
        self.used: set[str] = set()                  # picture ids some edge starts or ends at
        self.updates, self.show_saved = updates, show_saved
        self.saved: list[tuple[str, str]] = []       # forward value -> backward/update op, drawn at the end
        self.box_module: dict[str, _Module] = {}     # box id -> the module it folds
        self.phase_of: dict[str, str] = {}           # picture id -> forward, backward or optimizer
        self.graph_outputs: list[tuple[str, str | None]] = []
        self.last_backward: str | None = None       # the node of the last backward op (updates go below it)
        self.visible = visible_nodes(graph, phases) if graph is not None else []
        drawn_phases = {n.phase for n in self.visible if n.kind == OP}
        self.wrap = bool(drawn_phases - {FORWARD})  # phase clusters only when there is more than forward
        self.root = (FORWARD,) if self.wrap else ()
        if self.wrap:
            for phase in PHASES:
                if phase in drawn_phases or phase == FORWARD:
                    self.picture.clusters[(phase,)] = (PHASE_TITLES[phase], phase)
        self.picture.notes.append(outline.header() + "  " + "  ".join(
            c.header() for c in outline.children if c.tag == "CONFIG"))
        self._add_entries(outline, ())
        if graph is None:
            self.picture.notes.append("Not compiled yet: call the graph once to see its ops.")
        else:
            self._add_graph()
        self._fill_boxes()
        self._mark_empty_modules()

    # ----------------------------------------------------------------------------- the outline

    def _add_entries(self, entry: Any, chain: tuple[_Module, ...]) -> None:
        for child in entry.children:
            if child.tag == "MODULE":
                self._add_module(child, chain)
            elif child.tag in NODE_TAGS:
                self._add_tag(child, chain)

    def _add_module(self, entry: Any, chain: tuple[_Module, ...]) -> None:
        i = self.index[id(entry)]
        parent = chain[-1] if chain else None
        module = _Module(i, entry, tuple(m.entry.name for m in chain) + (entry.name,),
                         (parent.clusters if parent else self.root) + (f"m{i}",),
                         box=parent.box if parent else None)
        self.modules[entry.name] = module
        if module.box is not None:
            self.shown[f"e{i}"] = module.box
        elif self.depth is not None and len(module.chain) >= self.depth:
            module.box = f"e{i}"
            self.box_module[module.box] = module
            self.phase_of[module.box] = FORWARD
            self.picture.add_node(VNode(module.box, [entry.name], "module", cluster=module.clusters[:-1],
                                        tooltip=entry.header()))
            self.box_ops[module.box] = []
        else:
            self.picture.clusters[module.clusters] = (f"{entry.name}: {entry.text}", "module")
        self._add_entries(entry, chain + (module,))

    def _add_tag(self, entry: Any, chain: tuple[_Module, ...]) -> None:
        nid = f"e{self.index[id(entry)]}"
        module = chain[-1] if chain else None
        self.phase_of[nid] = FORWARD
        self.chain_of[nid] = tuple(m.entry.name for m in chain)
        value = self._resolve(entry.node)  # the graph node holding an INPUT's or OUTPUT's value
        if entry.tag in ("PARAMETER", "BUFFER"):
            self.id_of.setdefault(entry.name, nid)  # its state node is named after it
        elif module is None and entry.tag == "INPUT":
            self.id_of[entry.name] = nid  # so is a graph input's node
        elif module is None:
            self.graph_outputs.append((nid, value))
        elif value is not None:  # a module call's input or output: a port values pass through
            module.ports[entry.tag].setdefault(value, nid)
        if module is not None and module.box is not None:
            self.shown[nid] = module.box
            return
        short = entry.name.rsplit("-", 1)[-1] if entry.tag in ("INPUT", "OUTPUT") else entry.name.rsplit(".", 1)[-1]
        lines = [short] + ([_type_from_text(entry.text)] if "size=" in entry.text else [])
        marks = ("output",) if module is None and entry.tag == "OUTPUT" else ()
        self.picture.add_node(VNode(nid, lines, entry.tag, cluster=module.clusters if module else (),
                                    marks=marks, tooltip=entry.header()))
        if marks:
            self.picture.anchors.append(nid)

    def _resolve(self, name: str | None) -> str | None:
        return self.renamed.get(name, name) if name is not None else None

    # ------------------------------------------------------------------------------ the graph

    def _add_graph(self) -> None:
        waiting: list[tuple[int, Node]] = []  # constants and other state, placed by their first reader
        index = {id(n): j for j, n in enumerate(self.graph.nodes)}
        for n in self.visible:
            j = index[id(n)]
            if n.kind == STATE and n.state_name in self.id_of and n.state_kind in ("parameter", "buffer"):
                self.id_of[n.name] = self.id_of[n.state_name]
            elif n.kind == INPUT and n.name in self.id_of:
                pass
            elif n.kind == OP:
                self._add_op(n, f"n{j}")
            else:
                waiting.append((j, n))
        readers: dict[str, list[str]] = {}
        for n in self.visible:
            for x in n.input_nodes if n.kind == OP else ():
                readers.setdefault(x.name, []).append(self.id_of[n.name])
        for name, src in self.graph.updates.items():
            if src.name in self.id_of:
                readers.setdefault(self.graph.state(name).name, []).append(self.id_of[src.name])
        for j, n in waiting:
            self._add_value(n, f"n{j}", readers.get(n.name, []))
        for n in self.visible:
            if n.kind == OP:
                self._add_inputs(n)
        for nid, value in self.graph_outputs:
            if value is not None:
                self._route(value, nid, ())
        self._connect_unused_ports()
        self._add_updates()
        self._put_later_phases_below()
        if self.show_saved or (self.show_saved is None and len(self.saved) <= MAX_SAVED_EDGES):
            for tail, head in self.saved:
                self.picture.add_edge(tail, head, "saved")
        elif self.saved:
            self.picture.notes.append(f"{len(self.saved)} edges from forward values to the backward and update "
                                      "ops that read them are not drawn; pass show_saved=True to draw them.")

    def _put_later_phases_below(self) -> None:
        """Backward and update nodes that no drawn edge ranks (their inputs are all saved forward values, or
        none, as the train-step counter) hang by an invisible edge from the graph's output (backward) or
        from the last backward node (update): the phases then stack top to bottom."""
        ranked = {e.head for e in self.picture.edges if e.role in ("data", "writeback")}
        anchors = [a for a in self.picture.anchors if a in self.picture.nodes]
        if not anchors:
            return
        after = {BACKWARD: anchors[0], OPTIMIZER: self.last_backward or anchors[0]}
        for nid in list(self.picture.nodes):
            phase = self.phase_of.get(nid, FORWARD)
            if phase != FORWARD and nid not in ranked and after[phase] != nid:
                self._edge(after[phase], nid, "order")

    def _module_of(self, scope: str) -> _Module | None:
        """The module an op was traced in: the longest module path that starts its scope."""
        while scope:
            if scope in self.modules:
                return self.modules[scope]
            scope = scope.rpartition(".")[0]
        return None

    def _add_op(self, n: Node, nid: str) -> None:
        module = self._module_of(n.scope)
        node = value_node(n, nid, (), **self.node_options)
        self.id_of[n.name] = nid
        self.phase_of[nid] = n.phase
        if n.phase == FORWARD:
            self.chain_of[nid] = module.chain if module else ()
            node.cluster = module.clusters if module else self.root
            box = module.box if module else None
        elif n.phase == BACKWARD:
            node.cluster = self._backward_cluster(module)
            box = self._side_box(module, "b", node.cluster, " (backward)")
            self.last_backward = box or nid
        else:
            node.cluster = (OPTIMIZER,)
            box = self._side_box(module, "o", node.cluster, " (update)")
        if box is not None:
            self.shown[nid] = box
            self.box_ops[box].append(n)
        else:
            self.picture.add_node(node)

    def _backward_cluster(self, module: _Module | None) -> tuple[str, ...]:
        """The backward mirror of ``module``'s cluster (created on first use), ``("backward", "b<i>"...)``."""
        if module is None:
            return (BACKWARD,)
        path: tuple[str, ...] = (BACKWARD,)
        for name in module.chain:
            outer = self.modules[name]
            if outer.box is not None:  # folded from here on: its backward ops go in a box
                break
            path += (f"b{outer.index}",)
            self.picture.clusters.setdefault(path, (f"{name} (backward)", "module_backward"))
        return path

    def _side_box(self, module: _Module | None, letter: str, cluster: tuple, suffix: str) -> str | None:
        """The backward (``b``) or update (``o``) box of a collapsed module, created on first use."""
        if module is None or module.box is None:
            return None
        box = letter + module.box[1:]
        if box not in self.box_ops:
            holder = self.box_module[module.box]
            self.box_module[box] = holder
            self.phase_of[box] = BACKWARD if letter == "b" else OPTIMIZER
            self.picture.add_node(VNode(box, [holder.entry.name + suffix], "module", cluster=cluster,
                                        tooltip=holder.entry.header()))
            self.box_ops[box] = []
        return box

    def _add_value(self, n: Node, nid: str, readers: list[str]) -> None:
        """A constant, optimizer slot or system value: next to the op that first reads it, or folded into
        the box that holds every op reading it."""
        self.id_of[n.name] = nid
        reader = readers[0] if readers else None
        self.phase_of[nid] = self.phase_of.get(reader, FORWARD) if reader else FORWARD
        boxes = {self.shown.get(r) for r in readers}
        if reader is not None and len(boxes) == 1 and None not in boxes:
            self.shown[nid] = boxes.pop()
            return
        reader_node = self.picture.nodes.get(self.shown.get(reader, reader)) if reader else None
        node = value_node(n, nid, (), **self.node_options)
        node.role = _STATE_ROLES.get(n.state_kind, node.role) if n.kind == STATE else node.role
        node.cluster = reader_node.cluster if reader_node is not None else ()
        self.picture.add_node(node)

    # ------------------------------------------------------------------------------ edges

    def _add_inputs(self, n: Node) -> None:
        head = self.id_of[n.name]
        chain = self.chain_of.get(head)
        for k, x in enumerate(n.inputs):
            if isinstance(x, Node):
                self._route(x.name, head, chain)
            elif self.node_options["literals"] == "node" and head not in self.shown:
                lit = self.picture.add_node(VNode(f"{head}_arg{k}", [labels.number_text(x)], "literal",
                                                  cluster=self.picture.nodes[head].cluster))
                self.phase_of[lit.id] = self.phase_of[head]
                self._edge(lit.id, head)

    def _route(self, value: str, head: str, head_chain: tuple | None) -> None:
        """An edge from ``value``'s node to ``head`` through the OUTPUT entries of the modules it leaves and
        the INPUT entries of those it enters (forward values only; backward reads go straight)."""
        tail = self.id_of.get(value)
        if tail is None:
            return
        hops = [tail]
        tail_chain = self.chain_of.get(tail)
        if tail_chain is not None and head_chain is not None:
            common = 0
            while common < min(len(tail_chain), len(head_chain)) and tail_chain[common] == head_chain[common]:
                common += 1
            hops += [p for m in reversed(tail_chain[common:]) if (p := self.modules[m].ports["OUTPUT"].get(value))]
            hops += [p for m in head_chain[common:] if (p := self.modules[m].ports["INPUT"].get(value))]
        hops.append(head)
        for a, b in itertools.pairwise(hops):
            self._edge(a, b)

    def _edge(self, tail: str, head: str, role: str = "data", label: str = "") -> None:
        self.used.update((tail, head))
        tail, head = self.shown.get(tail, tail), self.shown.get(head, head)
        if role == "data" and self.phase_of[tail] == FORWARD and self.phase_of[head] != FORWARD:
            if tail != head and (tail, head) not in self.saved:
                self.saved.append((tail, head))
            return
        if tail != head and (tail, head, role) not in self.edges:
            self.edges.add((tail, head, role))
            self.picture.add_edge(tail, head, role, label)

    def _connect_unused_ports(self) -> None:
        """A module call's INPUT or OUTPUT that no route went through (its value was passed on untouched,
        or only backward read it) still gets an edge from its value, so that no entry floats alone."""
        used = set(self.used)
        for module in self.modules.values():
            for tag in ("INPUT", "OUTPUT"):
                for value, port in module.ports[tag].items():
                    if port in used or value not in self.id_of:
                        continue
                    passed_on = module.ports["INPUT"].get(value) if tag == "OUTPUT" else None
                    self._edge(passed_on or self.id_of[value], port)

    def _add_updates(self) -> None:
        """Dashed edges (or write-back nodes) from each new state value to the state it replaces.

        Folded modules need none: a box that updates its own buffers, or the "(update)" box of a module
        writing that module's parameters, says so by its name (a note says it once).
        """
        pairs: dict[tuple[str, str], Node] = {}
        implied = 0
        for state_name, src in self.graph.updates.items():
            target = self.graph.state(state_name)
            tail, head = self.id_of.get(src.name), self.id_of.get(target.name)
            if tail is None or head is None:
                continue
            tail, head = self.shown.get(tail, tail), self.shown.get(head, head)
            if tail == head or (tail in self.box_ops and tail[1:] == head[1:]):
                implied += tail != head
                continue
            pairs.setdefault((tail, head), target)
        if implied:
            self.picture.notes.append("Each '(update)' box writes its module's new parameters back (not drawn).")
        as_edges = self.updates == "edges" or (self.updates == "auto" and len(pairs) <= MAX_UPDATE_EDGES)
        for k, ((tail, head), target) in enumerate(pairs.items()):
            if as_edges:
                self._edge(tail, head, "update", "update")
                continue
            drawn = self.picture.nodes[head]
            name = drawn.label[0] if drawn.role != "module" else drawn.label[0] + ".*"
            sink = self.picture.add_node(VNode(f"u{k}", [f"new {name}"], _STATE_ROLES.get(target.state_kind, "BUFFER"),
                                               cluster=self.picture.nodes[tail].cluster, marks=("writeback",),
                                               tooltip=f"written back to %{target.name}"))
            self.phase_of[sink.id] = self.phase_of[tail]
            self._edge(tail, sink.id, "writeback")

    # ------------------------------------------------------------------------------ finishing

    def _fill_boxes(self) -> None:
        """Each box says what it folds: the module's class, its ops by kind, its state."""
        for box, ops in self.box_ops.items():
            node = self.picture.nodes[box]
            kinds = Counter(n.op_name for n in ops)
            common = ", ".join(f"{name} x{count}" for name, count in kinds.most_common(3))
            count = f"{len(ops)} ops: {common}" + (", ..." if len(kinds) > 3 else "") if ops else "no ops"
            if box.startswith("e"):
                module = self.box_module[box]
                state = Counter(e.tag for e in module.entry.walk() if e.tag in ("PARAMETER", "BUFFER"))
                held = ", ".join(f"{n} {tag.lower()}{'s' if n > 1 else ''}" for tag, n in sorted(state.items()))
                node.label += [_shorten(module.entry.text), count] + ([held] if held else [])
            else:
                node.label.append(count)

    def _mark_empty_modules(self) -> None:
        """A module cluster with nothing in it (a module never called) would vanish: it says so instead."""
        filled = {n.cluster[:k] for n in self.picture.nodes.values() for k in range(1, len(n.cluster) + 1)}
        for module in self.modules.values():
            if module.box is None and module.clusters not in filled:
                self.picture.add_node(VNode(f"e{module.index}_empty", ["(not called)"], "note",
                                            cluster=module.clusters))


def _type_from_text(text: str) -> str:
    """``f32[2, 3]`` from an entry's ``tensor(..., size=(2, 3), dtype=toynet.float32)``."""
    found = re.search(r"size=\(([^)]*)\),\s*dtype=toynet\.(\w+)", text)
    if found is None:
        return ""
    dims = [d.strip() for d in found.group(1).split(",") if d.strip()]
    try:
        dtype = backend.to_dtype(found.group(2))
    except TypeError:
        return f"{found.group(2)}[{', '.join(dims)}]"
    return labels.type_text(dims, dtype)


def _shorten(text: str, width: int = 48) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def summary_module_picture(outline: Any, graph: Graph | None, max_nodes: int | None, **options: Any) -> Picture:
    """Every op if the picture has at most ``max_nodes`` nodes; else modules folded as deep as fits.

    Folding goes one module level at a time from the deepest; if even the top-level modules as boxes
    are too many, the most folded picture is cut (:func:`~toynet.viz.model.limit`).
    """
    picture = module_picture(outline, graph, **options)
    total = len(picture.nodes)
    if max_nodes is None or total <= max_nodes or options.get("depth") is not None:
        return limit(picture, max_nodes)
    deepest = max((e.name.count(".") + 1 for e in outline.walk() if e.tag == "MODULE"), default=0)
    for depth in range(deepest, 0, -1):
        folded = module_picture(outline, graph, **dict(options, depth=depth))
        if len(folded.nodes) <= max_nodes:
            folded.notes.append(f"{total} nodes are more than max_nodes={max_nodes}: modules {depth} levels deep "
                                f"are drawn as boxes (depth={depth}); pass depth=... or max_nodes=None to see more.")
            return folded
        picture = folded
    return limit(picture, max_nodes)
