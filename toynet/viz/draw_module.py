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
    >>> box = flow.viz.draw(graph, depth=1).source      # the model as one box: "model: ... 6 ops"
    >>> " ops" in box and "model.0:" not in box
    True

The picture is made in three steps, each in its own module: :mod:`~toynet.viz.module_layout` places the
clusters, boxes and nodes, :mod:`~toynet.viz.module_edges` connects them, then the layout writes into
each box what it folds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..static.ir import PHASES, Graph
from .model import Picture, limit
from .module_edges import ModuleEdges
from .module_layout import ModuleLayout


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
    (None) draws them only when there are at most
    :data:`~toynet.viz.module_edges.MAX_SAVED_EDGES`, and says so otherwise.
    """
    return placed_modules(outline, graph, renamed=renamed, phases=phases, depth=depth, updates=updates,
                          show_saved=show_saved, show_values=show_values, show_names=show_names,
                          literals=literals).picture


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
