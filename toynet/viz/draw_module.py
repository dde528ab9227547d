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

``depth=k`` draws each module ``k`` levels deep as one box that holds everything inside it, its backward
ops and its parameters' updates in boxes of their own: the way to read a big network by its blocks. A box
says its module's name and class and the layers it runs, read from its ops
(:mod:`~toynet.viz.module_summary`: "conv 1x1 16->96, BN, ReLU6" / "dwconv 3x3 s2 96, BN, ReLU6" /
"conv 1x1 96->24, BN"); its tooltip counts the ops by name. ``depth="blocks"`` (:func:`blocks_depth`) folds
one level below the biggest ``Sequential`` or ``ModuleList``: MobileNetV2's 19 blocks. Example::

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
    >>> box = flow.viz.draw(graph, depth=1).source      # the model as one box: its three layers
    >>> "linear 3->4, ReLU" in box and "linear 4->1" in box and "model.0:" not in box
    True

The picture is made in three steps, each in its own module: :mod:`~toynet.viz.module_layout` places the
clusters, boxes and nodes, :mod:`~toynet.viz.module_edges` connects them, then the layout writes into
each box what it folds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..nn.modules.containers import ModuleDict, ModuleList
from ..nn.modules.layers import Sequential
from ..static.ir import BACKWARD, PHASES, Graph
from .model import Picture, limit
from .module_edges import ModuleEdges
from .module_layout import ModuleLayout


def module_picture(outline: Any, graph: Graph | None, *, renamed: Mapping[str, str | None] | None = None,
                   phases: Iterable[str] = PHASES, depth: int | None = None, updates: str = "auto",
                   show_saved: bool | None = None, show_values: bool = False, show_names: bool = False,
                   literals: str = "node", module: str | None = None) -> Picture:
    """The picture of an ``nn.Graph`` by module (see the module docstring).

    ``outline`` is ``nn_graph.outline()``; ``graph`` the static graph to place in it (None before the
    first call: the modules, parameters and buffers only); ``renamed`` what :func:`renamed_by_passes`
    gives when ``graph`` is the optimised graph.

    ``show_saved``: draw the grey edges from forward values to the backward and update ops that read
    them (activations kept for backward, parameters read by their update). They run across the whole
    picture and cost dot most of its time (7 s against 0.3 s for MobileNetV2 by blocks), so the default
    (None) draws them only when there are at most
    :data:`~toynet.viz.module_edges.MAX_SAVED_EDGES`, and says so otherwise.

    ``module="model.features.2"``: only that module (its cluster, and its backward mirror), to look inside
    one block.
    """
    placed = placed_modules(outline, graph, renamed=renamed, phases=phases, depth=depth, updates=updates,
                            show_saved=show_saved, show_values=show_values, show_names=show_names,
                            literals=literals)
    return placed.picture if module is None else only_module(placed, module)


def only_module(placed: ModuleLayout, name: str) -> Picture:
    """The part of a placed module picture inside module ``name``'s cluster (and its backward mirror)."""
    module = placed.modules.get(name)
    if module is None:
        known = ", ".join(list(placed.modules)[:8])
        raise ValueError(f"module={name!r} is not a module of this graph; its modules: {known}, ...")
    if module.box is not None:
        raise ValueError(f"module={name!r} is drawn as a box at this depth; give depth=None (or a larger depth) "
                         "to see inside it")
    picture = placed.picture
    inside = [module.clusters, (BACKWARD,) + tuple(f"b{placed.modules[m].index}" for m in module.chain)]
    kept = {nid for nid, node in picture.nodes.items()
            if any(node.cluster[:len(path)] == path for path in inside)}
    result = picture.only(kept)
    result.notes.append(f"Only {name} ({module.entry.text}); pass module=None to see the whole graph.")
    return result


def placed_modules(outline: Any, graph: Graph | None, *, renamed: Mapping[str, str | None] | None = None,
                   phases: Iterable[str] = PHASES, depth: int | None = None, updates: str = "auto",
                   show_saved: bool | None = None, show_values: bool = False, show_names: bool = False,
                   literals: str = "node") -> ModuleLayout:
    """:func:`module_picture`'s finished layout: its ``.picture``, and the maps from graph nodes and module
    calls to picture nodes that an animation needs to show the picture part by part."""
    if depth is not None and depth < 1:
        raise ValueError(f"depth counts module levels and must be at least 1 (or None), got {depth}")
    if updates not in ("auto", "edges", "nodes"):
        raise ValueError(f"updates must be 'auto', 'edges' or 'nodes', got {updates!r}")
    if literals not in ("node", "inline"):
        raise ValueError(f"literals must be 'node' or 'inline', got {literals!r}")
    layout = ModuleLayout(outline, graph, dict(renamed or {}), tuple(phases), depth,
                          {"show_values": show_values, "show_names": show_names, "literals": literals})
    if graph is not None:
        ModuleEdges(layout, updates, show_saved).add_all()
    layout.finish()
    return layout


def blocks_depth(outline: Any) -> int | None:
    """The ``depth`` that draws a network's blocks as boxes: one level below the container (``Sequential``,
    ``ModuleList``, ``ModuleDict``) with the most modules in it, the shallowest if several tie (MobileNetV2:
    ``model.features``, 19 blocks, so depth 3). ``None`` if no container holds two modules or more."""
    best: tuple[int, int] | None = None  # (-children, depth)
    for entry in outline.walk():
        if entry.tag != "MODULE" or not isinstance(entry.module, (Sequential, ModuleList, ModuleDict)):
            continue
        children = sum(1 for c in entry.children if c.tag == "MODULE")
        if children >= 2:
            key = (-children, entry.name.count(".") + 1)
            best = key if best is None or key < best else best
    return None if best is None else best[1] + 1


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
    lowest = options["module"].count(".") + 2 if options.get("module") else 1  # module= stays open
    for depth in range(deepest, lowest - 1, -1):
        folded = module_picture(outline, graph, **dict(options, depth=depth))
        if len(folded.nodes) <= max_nodes:
            folded.notes.append(f"{total} nodes are more than max_nodes={max_nodes}: modules {depth} levels deep "
                                f"are drawn as boxes (depth={depth}); pass depth=... or max_nodes=None to see more.")
            return folded
        picture = folded
    return limit(picture, max_nodes)
