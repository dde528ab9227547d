"""Where everything of an ``nn.Graph``'s module picture sits: clusters, folded boxes and nodes.

The first of the three steps of :func:`~toynet.viz.draw_module.module_picture`. :class:`ModuleLayout`
walks the outline ``print(graph)`` shows, making each MODULE a cluster (or, ``depth`` levels deep, a box)
and each PARAMETER, BUFFER, INPUT and OUTPUT entry a node in it; then it places every op of the static
graph in the cluster of the module it was traced in (backward ops in a mirror of the module tree, update
ops in one cluster of their own), and each constant or optimizer slot beside the op that first reads it.
It records what the edges need: which picture node stands for each graph node, which box a folded node
is drawn as, each node's phase, and the port a value passes when it enters or leaves a module call.

Then :class:`~toynet.viz.module_edges.ModuleEdges` draws the edges, and :meth:`ModuleLayout.finish`
writes into each box what it folds.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .. import backend
from ..static.ir import BACKWARD, FORWARD, INPUT, OP, OPTIMIZER, PHASES, STATE, Graph, Node
from . import labels
from .draw_static import PHASE_TITLES, value_node, visible_nodes
from .model import Picture, VNode
from .module_summary import layer_lines

#: Outline tags drawn as nodes (GRAPH and CONFIG go in the caption, MODULEs are clusters or boxes).
NODE_TAGS = ("INPUT", "OUTPUT", "PARAMETER", "BUFFER")
#: The node role of each kind of state (parameters and buffers are drawn as their outline tags).
STATE_ROLES = {"parameter": "PARAMETER", "buffer": "BUFFER", "optimizer": "state_optimizer",
               "system": "state_system"}


@dataclass
class PlacedModule:
    """One MODULE entry: where it is drawn, and the graph nodes its call's INPUT/OUTPUT entries hold."""

    index: int
    entry: Any
    chain: tuple[str, ...]                      # module paths from the outermost down to this one
    clusters: tuple[str, ...]                   # its forward cluster's path ("m<i>" keys)
    box: str | None = None                      # the box holding it, if it is collapsed (depth=)
    ports: dict[str, dict[str, str]] = field(default_factory=lambda: {"INPUT": {}, "OUTPUT": {}})


class ModuleLayout:
    """The nodes and clusters of one module picture, and the maps from graph nodes to picture nodes.

    Each method places one kind of thing: the outline's entries, the graph's ops, the values they read.
    """

    def __init__(self, outline: Any, graph: Graph | None, renamed: dict, phases: tuple, depth: int | None,
                 node_options: dict):
        self.picture = Picture()
        self.graph, self.renamed, self.depth, self.node_options = graph, renamed, depth, node_options
        self.index = {id(e): i for i, e in enumerate(outline.walk())}
        self.modules: dict[str, PlacedModule] = {}
        self.id_of: dict[str, str] = {}             # graph node name -> picture id
        self.chain_of: dict[str, tuple | None] = {}  # picture id -> module chain (forward values only)
        self.shown: dict[str, str] = {}              # picture id -> the box drawn instead, if folded
        self.box_ops: dict[str, list[Node]] = {}
        self.box_module: dict[str, PlacedModule] = {}  # box id -> the module it folds
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
            self._add_graph_nodes()

    def finish(self) -> None:
        """Last, once the edges are drawn: fill in the boxes and mark the modules never called."""
        self._fill_boxes()
        self._mark_empty_modules()

    # ----------------------------------------------------------------------------- the outline

    def _add_entries(self, entry: Any, chain: tuple[PlacedModule, ...]) -> None:
        for child in entry.children:
            if child.tag == "MODULE":
                self._add_module(child, chain)
            elif child.tag in NODE_TAGS:
                self._add_tag(child, chain)

    def _add_module(self, entry: Any, chain: tuple[PlacedModule, ...]) -> None:
        i = self.index[id(entry)]
        parent = chain[-1] if chain else None
        module = PlacedModule(i, entry, tuple(m.entry.name for m in chain) + (entry.name,),
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

    def _add_tag(self, entry: Any, chain: tuple[PlacedModule, ...]) -> None:
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
        """The name a graph node has in the drawn graph (passes rename or remove nodes)."""
        return self.renamed.get(name, name) if name is not None else None

    # ------------------------------------------------------------------------------ the graph

    def _add_graph_nodes(self) -> None:
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

    def _module_of(self, scope: str) -> PlacedModule | None:
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

    def _backward_cluster(self, module: PlacedModule | None) -> tuple[str, ...]:
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

    def _side_box(self, module: PlacedModule | None, letter: str, cluster: tuple, suffix: str) -> str | None:
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
        node.role = STATE_ROLES.get(n.state_kind, node.role) if n.kind == STATE else node.role
        node.cluster = reader_node.cluster if reader_node is not None else ()
        self.picture.add_node(node)

    # ------------------------------------------------------------------------------ finishing

    def _fill_boxes(self) -> None:
        """Each box says what it folds: a module's box its class and the layers it runs, read from its ops
        (:func:`~toynet.viz.module_summary.layer_lines`: "conv 3x3 s2 3->32, BN, ReLU6"); a backward or
        update box its op count. The tooltip has the op counts by name and the module's state."""
        for box, ops in self.box_ops.items():
            node = self.picture.nodes[box]
            kinds = Counter(n.op_name for n in ops)
            count = (f"{len(ops)} ops: " + ", ".join(f"{name} x{k}" for name, k in kinds.most_common())) if ops \
                else "no ops"
            if box.startswith("e"):
                module = self.box_module[box]
                entry = module.entry
                state = Counter(e.tag for e in entry.walk() if e.tag in ("PARAMETER", "BUFFER"))
                held = ", ".join(f"{n} {tag.lower()}{'s' if n > 1 else ''}" for tag, n in sorted(state.items()))
                node.label = [f"{entry.name}: {_class_name(entry)}"]
                node.label += layer_lines(ops) if ops else ["(not called)"]
                node.tooltip = "\n".join([entry.header(), count] + ([held] if held else []))
            else:
                node.label.append(f"{len(ops)} ops")
                node.tooltip = f"{node.tooltip}\n{count}"

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


def _class_name(entry: Any) -> str:
    """The class of a MODULE entry's module (``InvertedResidual``), from the module or its printed text."""
    if entry.module is not None:
        return type(entry.module).__name__
    return entry.text.split("(", 1)[0]
