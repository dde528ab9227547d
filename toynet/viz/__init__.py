"""Pictures of both designs' graphs, with Graphviz.

``flow.viz.draw(obj, **options)`` returns a ``graphviz.Digraph`` (Jupyter shows it; ``.source`` is the
DOT text; ``.render("file", format="png")`` saves it):

* an **eager tensor**: its autograd graph, from the tensor back through ``grad_fn`` to the leaves::

      x = flow.ones(1, 5); w = flow.randn(5, 3, requires_grad=True); b = flow.randn(1, 3, requires_grad=True)
      z = flow.matmul(x, w) + b
      l = flow.sum(1/2 * (z - flow.zeros(1, 3)) ** 2)
      flow.viz.draw(l, show_values=True)      # x, w, b, z, l named after your variables

* a **static graph** (``toynet.static.Graph``: ``nn_graph.ir``, or ``nn_graph.traced_ir`` before the
  passes): forward, backward and optimizer clusters, state and its update edges::

      flow.viz.draw(linear_graph.ir, forward_only=True)

* a **global graph** (an nn.Graph on global tensors, its ``.ir``, or the lowered ``graph._last.traced``): the
  same pictures, with each value's SBP under its type ("S(0)", "B", "P"), the boxing nodes as hexagons
  ("boxing P->B" / "all_reduce") and the placement in the caption (:mod:`toynet.viz.draw_global_graph`).

* an **nn.Graph**, by module (:mod:`toynet.viz.draw_module`): the outline ``print(graph)`` shows
  (one cluster per MODULE, its PARAMETER, BUFFER, INPUT and OUTPUT entries as nodes) with the ops of
  ``graph.ir`` inside the module they were traced in; ``depth=2`` draws modules two levels deep as
  boxes. Small graphs are drawn whole; beyond ``max_nodes`` modules are folded as deep as fits (that is
  what a notebook shows for MobileNetV2)::

      flow.viz.draw(linear_graph)                     # after its first call; before it, modules only
      flow.viz.draw(mobilenet_graph, depth=3, forward_only=True, rankdir="LR")

  A folded module's box says the layers it runs ("conv 1x1 16->96, BN, ReLU6"). ``flow.viz.draw_module(graph)``
  draws one box per block of the network (``depth="blocks"``: below its biggest ``Sequential``), and
  ``draw_module(graph, depth=None)`` every op, expanded.

``flow.viz.draw_pass(before, after, removed=..., fused=...)`` or ``flow.viz.draw_pass(graph.passes[i])``
shows what an optimisation pass changed (``context=1``: only the changed nodes and their neighbours);
``flow.viz.linked(graph)`` links a compiled nn.Graph's picture to each op's source line, its lines in
``graph.plan.source`` and its debug-log line (:mod:`toynet.viz.linked`);
``with flow.viz.record() as rec:`` records a graph as your code builds it (``rec.to_gif("build.gif")``,
``rec.player()`` in a notebook; ``rec.gif()`` and ``rec.still(i)`` show the GIF or one of its frames in a
notebook, the debug lines beside the graph). ``flow.viz.show_gif(path_or_bytes)`` and
``flow.viz.side_by_side(*pictures, titles=...)`` show pictures without writing HTML, and
``flow.viz.show_source(cls, *methods)`` the code of a class or of some of its methods (:mod:`toynet.viz.display`).

Options (all drawings): ``rankdir="TB"`` or ``"LR"``; ``legend=True``; ``max_nodes`` (bigger graphs
are folded by module or cut, with a note saying so; ``None`` for no limit; by default 200, 120 for an
nn.Graph by module, and no limit when ``depth`` is given); ``title=""``;
``literals="node"`` or ``"inline"`` (where Python numbers such as the ``2`` of ``x ** 2`` go).
Eager only: ``show_values`` (tensors of at most 16 elements), ``show_grads`` (after
``backward(retain_graph=True)``), ``show_saved`` (what each op keeps for backward), ``show_attrs``,
``names={"x": x}`` (else ``tensor.name``, else your variable names). Static only: ``forward_only`` or
``phases=("forward", "backward")``, ``depth`` (fold ops by module), ``updates="edges"`` or ``"nodes"``
(state updates as edges back to the state, or as "new <state>" nodes; default ``"auto"``: edges up to
16 updates), ``show_names``, ``show_values`` (constants). nn.Graph also: ``ir="optimized"`` or
``"traced"``, ``show_saved`` (edges from forward values to the backward and update ops reading them;
default: drawn up to 24).

Rendering (``flow.viz.to_svg(d)``, ``flow.viz.to_png(d, max_size=1600)``, ``d.render(...)``, a notebook
display) needs Graphviz's ``dot`` program (``apt-get install graphviz`` / ``brew install graphviz`` /
``conda install graphviz``); without it drawing still works and rendering raises
:class:`GraphvizNotInstalled`, which says how to install it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..nn.graph import Graph as ModuleGraph
from ..static.ir import PHASES, Graph
from ..dynamic.tensor import Tensor
from . import gif, jupyter  # noqa: F401  (toynet.viz.gif.to_gif, toynet.viz.jupyter.enabled)
from .dot import to_digraph
from .draw_eager import eager_picture, walk_grad_fns
from .draw_global_graph import annotate as annotate_global
from .draw_module import blocks_depth, summary_module_picture
from .draw_pass import pass_picture, renamed_by_passes, report_fields
from .draw_static import summary_picture
from .model import Picture, limit
from .names import Namer, user_namespaces
from .display import show_gif, show_image, show_source, side_by_side
from .frames import Frame
from .linked import LinkedView, check_linkable
from .recording import Recorder, record
from .rendering import Drawing, GraphvizNotInstalled, render, to_png, to_svg

__all__ = [
    "Drawing",
    "Frame",
    "GraphvizNotInstalled",
    "LinkedView",
    "Recorder",
    "draw",
    "draw_module",
    "draw_pass",
    "linked",
    "record",
    "render",
    "show_gif",
    "show_image",
    "show_source",
    "side_by_side",
    "to_png",
    "to_svg",
]

#: Default node budget of a drawing; beyond it the picture is folded or cut, with a note.
MAX_NODES = 200
#: Default node budget of an nn.Graph drawn by module: MobileNetV2's training graph then shows its 19
#: blocks as boxes (depth=3, about 100 nodes); one level deeper (170 nodes) is twice as tall.
MODULE_MAX_NODES = 120


def draw(obj: Any, *, rankdir: str = "TB", legend: bool = True, max_nodes: int | str | None = "auto",
         title: str = "", **options: Any) -> Drawing:
    """Draw an eager tensor's autograd graph (or several tensors'), a static Graph or an nn.Graph by module;
    see the module doc."""
    picture = picture_of(obj, max_nodes=max_nodes, **options)
    return to_digraph(picture, rankdir=rankdir, legend=legend, title=title)


def draw_module(graph: Any, depth: int | str | None = "blocks", *, forward_only: bool = False,
                max_nodes: int | str | None = "auto", **options: Any) -> Drawing:
    """An ``nn.Graph`` by module (after its first call: with its ops), collapsed or expanded.

    ``depth="blocks"`` (the default): one box per block of the network, one level below its biggest
    ``Sequential`` or ``ModuleList`` (MobileNetV2: its 19 ``features``), each box saying the layers it runs
    ("conv 1x1 16->96, BN, ReLU6"); ``depth=k``: the modules ``k`` levels deep as boxes; ``depth=None``: every
    op, expanded (no node budget unless ``max_nodes`` is given). ``forward_only=True`` leaves backward and
    the optimizer out; ``module="model.features.2"`` draws only that module (say with ``depth=None``, to see
    inside one block). Other options as for :func:`draw` (``rankdir``, ``legend``, ``title``, ``ir``...).
    """
    if not _is_nn_graph(graph):
        raise TypeError(f"draw_module draws an nn.Graph by module, got {type(graph).__name__}; to draw a model, "
                        "put it in an nn.Graph (self.model = model; build returns self.model(x)) and call the graph "
                        "once, then draw_module(graph)")
    if depth is None and max_nodes == "auto":
        max_nodes = None
    return draw(graph, depth=depth, forward_only=forward_only, max_nodes=max_nodes, **options)


def linked(graph: ModuleGraph, forward_only: bool = False, **draw_options: Any) -> LinkedView:
    """The linked view of a compiled ``nn.Graph`` (:mod:`toynet.viz.linked`): its picture (``graph.ir`` drawn
    with ``draw_options``) beside each op's source line, plan lines and debug line; a notebook displays it."""
    check_linkable(graph)
    return LinkedView(graph, draw(graph.ir, forward_only=forward_only, **draw_options))


def picture_of(obj: Any, *, max_nodes: int | str | None = "auto", names: Mapping[str, Any] | None = None,
               namespaces: Iterable[Mapping[str, Any]] | None = None, **options: Any) -> Picture:
    """The :class:`~toynet.viz.model.Picture` that :func:`draw` writes as DOT."""
    if options.get("depth") == "blocks":
        if not _is_nn_graph(obj):
            raise ValueError("depth='blocks' folds an nn.Graph's blocks (its modules); give a number of levels")
        options["depth"] = blocks_depth(obj.outline())  # None (no container of blocks): folded to fit
    if max_nodes == "auto":  # an explicit depth= is drawn whole; otherwise a budget by kind of drawing
        max_nodes = None if options.get("depth") is not None else (
            MODULE_MAX_NODES if _is_nn_graph(obj) else MAX_NODES)
    if _is_nn_graph(obj):
        if names is not None:
            raise TypeError("names= is for eager tensors; an nn.Graph's entries and nodes already have names")
        return nn_graph_picture(obj, max_nodes, **options)
    graph = _as_graph(obj)
    if graph is not None:
        if names is not None:
            raise TypeError("names= is for eager tensors; a static graph's nodes already have names")
        return annotate_global(summary_picture(graph, max_nodes, **_static_options(options)), graph)
    roots = _as_tensors(obj)
    unknown = set(options) - {"show_values", "show_grads", "show_saved", "show_attrs", "literals"}
    if unknown:
        raise TypeError(f"unknown option(s) {sorted(unknown)} for drawing an eager tensor; known: show_values, "
                        "show_grads, show_saved, show_attrs, literals, names, rankdir, legend, max_nodes, title")
    if namespaces is None:
        namespaces = user_namespaces()
    order, made_by = walk_grad_fns(roots)
    picture = eager_picture(order, made_by, Namer(names, namespaces), roots, **options)
    return limit(picture, max_nodes)


def draw_pass(before: Any, after: Graph | None = None, removed: Iterable[str] | None = None,
              fused: Mapping[str, Iterable[str]] | None = None, *, folded: Iterable[str] = (),
              merged: Mapping[str, str] | None = None, titles: tuple[str, str] | None = None,
              context: int | None = None, rankdir: str = "TB", legend: bool = True, title: str = "",
              **options: Any) -> Drawing:
    """Two graphs side by side, marking what a pass removed, fused, folded or merged.

    ``draw_pass(before, after, removed=[names], fused={new: [old names]})``, or ``draw_pass(report)``
    with a pass report (``nn_graph.passes[i]``). Names not reported are inferred: only in *before* means
    removed, only in *after* means new. The caption says once what changed ("FuseElementwise: 19 -> 16
    ops, 6 fused into 3"), under ``title`` if one is given. ``context=1`` shows only the changed nodes and their neighbours
    (for big graphs). Other options as for a static :func:`draw` (``forward_only``...).
    """
    if after is None:
        if not (hasattr(before, "before") and hasattr(before, "after")):
            raise TypeError("draw_pass needs two graphs (before, after) or one pass report with .before/.after")
        fields = report_fields(before)
        name = getattr(before, "name", "the pass")
        titles = titles or (f"before {name}", f"after {name}")
        summary = {"pass_name": name, "notes": list(getattr(before, "notes", ()) or ())}  # said once, in the caption
        before, after = fields.pop("before"), fields.pop("after")
        removed, fused, folded, merged = fields["removed"], fields["fused"], fields["folded"], fields["merged"]
    else:
        summary = {}
    picture = pass_picture(_as_graph(before, strict=True), _as_graph(after, strict=True), removed, fused, folded,
                           merged, titles=titles or ("before", "after"), context=context, **summary,
                           **_static_options(options))
    return to_digraph(picture, rankdir=rankdir, legend=legend, title=title)


def nn_graph_picture(nn_graph: Any, max_nodes: int | None = None, *, ir: str = "optimized",
                     **options: Any) -> Picture:
    """An ``nn.Graph`` by module (see :mod:`toynet.viz.draw_module`), folded by module beyond ``max_nodes``.

    ``ir="optimized"`` places the ops of ``graph.ir`` (what runs), ``"traced"`` those of
    ``graph.traced_ir`` (what ``build`` wrote, before the passes). Before the first call there are no
    ops yet: the picture shows the modules, parameters and buffers.
    """
    if ir not in ("optimized", "traced"):
        raise ValueError(f"ir must be 'optimized' (graph.ir) or 'traced' (graph.traced_ir), got {ir!r}")
    show_saved, module = options.pop("show_saved", None), options.pop("module", None)
    options = dict(_static_options(options), show_saved=show_saved, module=module)
    graph, renamed, outline = None, {}, nn_graph.outline()
    if nn_graph.is_compiled:
        graph = nn_graph.ir if ir == "optimized" else nn_graph.traced_ir
        renamed = renamed_by_passes(nn_graph.passes) if ir == "optimized" else {}
    picture = summary_module_picture(outline, graph, max_nodes, renamed=renamed, **options)
    return annotate_global(picture, graph, outline, renamed)  # a global graph: SBPs, boxing, placement


def _is_nn_graph(obj: Any) -> bool:
    return isinstance(obj, ModuleGraph)


def _static_options(options: dict) -> dict:
    options = dict(options)
    if options.pop("forward_only", False):
        if "phases" in options:
            raise TypeError("give forward_only=True or phases=(...), not both")
        options["phases"] = ("forward",)
    unknown = set(options) - {"phases", "show_values", "show_names", "literals", "depth", "updates"}
    if unknown:
        raise TypeError(f"unknown option(s) {sorted(unknown)} for drawing a static graph; known: forward_only, "
                        "phases, depth, updates, show_names, show_values, literals, rankdir, legend, max_nodes, title "
                        "(and ir for an nn.Graph)")
    phases = options.get("phases", PHASES)
    bad = [p for p in phases if p not in PHASES]
    if bad or isinstance(phases, str):
        raise ValueError(f"phases must be a tuple drawn from {PHASES}, got {phases!r}")
    return options


def _as_graph(obj: Any, strict: bool = False) -> Graph | None:
    """A static Graph from a Graph, or from an ``nn.Graph`` (its optimised graph, ``.ir``)."""
    if isinstance(obj, Graph):
        return obj
    if not isinstance(obj, Tensor) and isinstance(getattr(type(obj), "ir", None), property):
        held = obj.ir  # raises "has not been compiled yet; call the graph once" before the first call
        if isinstance(held, Graph):
            return held
    if strict:
        raise TypeError(f"expected a toynet.static.Graph, got {type(obj).__name__}")
    return None


def _as_tensors(obj: Any) -> list[Tensor]:
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    if not items or not all(isinstance(t, Tensor) for t in items):
        raise TypeError("toynet.viz.draw expects a Tensor, a list of Tensors or a toynet.static.Graph, got "
                        f"{type(obj).__name__}")
    return items


jupyter.register_display(draw)  # notebooks show tensors and graphs as pictures from now on
