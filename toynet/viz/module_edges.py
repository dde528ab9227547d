"""The edges of an ``nn.Graph``'s module picture, drawn once :mod:`~toynet.viz.module_layout` placed its nodes.

The second of the three steps of :func:`~toynet.viz.draw_module.module_picture`:

* a value's edge to an op that reads it passes through the OUTPUT entries of the modules it leaves and
  the INPUT entries of those it enters, as the value did when the program ran;
* an edge into or out of a folded module ends at the module's box;
* edges from forward values to the backward and update ops that read them (activations kept for
  backward, parameters read by their update) are set aside as grey "saved" edges that do not rank the
  layout, and backward and update nodes that nothing else ranks hang by invisible edges below the
  forward: the three phases stack top to bottom;
* each new state value gets a dashed update edge (or a write-back node) to the state it replaces.
"""

from __future__ import annotations

import itertools

from ..static.ir import BACKWARD, FORWARD, OP, OPTIMIZER, Node
from . import labels
from .draw_static import MAX_UPDATE_EDGES
from .model import VNode
from .module_layout import STATE_ROLES, ModuleLayout

#: With more edges than this from forward values to backward/update ops, they are left out by default.
MAX_SAVED_EDGES = 24


class ModuleEdges:
    """Adds the edges of one module picture; each method adds one kind (inputs, ports, updates, order)."""

    def __init__(self, layout: ModuleLayout, updates: str, show_saved: bool | None):
        self.layout, self.updates, self.show_saved = layout, updates, show_saved
        # The layout's maps, shared: literal and write-back nodes made here join them.
        self.picture, self.graph, self.modules = layout.picture, layout.graph, layout.modules
        self.id_of, self.shown, self.phase_of = layout.id_of, layout.shown, layout.phase_of
        self.edges: set[tuple[str, str, str]] = set()
        self.used: set[str] = set()                  # picture ids some edge starts or ends at
        self.saved: list[tuple[str, str]] = []       # forward value -> backward/update op, drawn at the end

    def add_all(self) -> None:
        """Every edge, in a fixed order (the DOT source, and so the figures, must not change)."""
        for n in self.layout.visible:
            if n.kind == OP:
                self._add_inputs(n)
        for nid, value in self.layout.graph_outputs:
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

    def _add_inputs(self, n: Node) -> None:
        head = self.id_of[n.name]
        chain = self.layout.chain_of.get(head)
        for k, x in enumerate(n.inputs):
            if isinstance(x, Node):
                self._route(x.name, head, chain)
            elif self.layout.node_options["literals"] == "node" and head not in self.shown:
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
        tail_chain = self.layout.chain_of.get(tail)
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
            if tail == head or (tail in self.layout.box_ops and tail[1:] == head[1:]):
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
            sink = self.picture.add_node(VNode(f"u{k}", [f"new {name}"], STATE_ROLES.get(target.state_kind, "BUFFER"),
                                               cluster=self.picture.nodes[tail].cluster, marks=("writeback",),
                                               tooltip=f"written back to %{target.name}"))
            self.phase_of[sink.id] = self.phase_of[tail]
            self._edge(tail, sink.id, "writeback")

    def _put_later_phases_below(self) -> None:
        """Backward and update nodes that no drawn edge ranks (their inputs are all saved forward values, or
        none, as the train-step counter) hang by an invisible edge from the graph's output (backward) or
        from the last backward node (update): the phases then stack top to bottom."""
        ranked = {e.head for e in self.picture.edges if e.role in ("data", "writeback")}
        anchors = [a for a in self.picture.anchors if a in self.picture.nodes]
        if not anchors:
            return
        after = {BACKWARD: anchors[0], OPTIMIZER: self.layout.last_backward or anchors[0]}
        for nid in list(self.picture.nodes):
            phase = self.phase_of.get(nid, FORWARD)
            if phase != FORWARD and nid not in ranked and after[phase] != nid:
                self._edge(after[phase], nid, "order")
