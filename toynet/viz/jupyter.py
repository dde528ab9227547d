"""Notebook display: a tensor with a ``grad_fn``, a static Graph and an ``nn.Graph`` show themselves as pictures.

Jupyter asks an object for ``_repr_mimebundle_``. The classes themselves know nothing of pictures (they
sit below the visualiser): importing :mod:`toynet.viz`, which the package does last, *registers* the
functions here as that method of ``Tensor``, the static ``Graph`` and ``nn.Graph`` (:func:`register_display`).

Big graphs are folded or cut to :data:`MAX_NODES` nodes (an ``nn.Graph``: folded by module to
:data:`MODULE_MAX_NODES`), with a note, so displaying a model stays fast.
If ``dot`` is missing, a notebook falls back to the plain text repr, after one warning that says how
to install it. Set ``toynet.viz.jupyter.enabled = False`` to get plain text reprs only.
"""

from __future__ import annotations

import html
import warnings
from collections.abc import Iterable
from typing import Any, Callable

from ..nn.graph import Graph as ModuleGraph
from ..static.ir import Graph
from ..dynamic.tensor import Tensor
from .names import notebook_namespaces
from .rendering import INSTALL_HELP, GraphvizNotInstalled, to_svg

#: Show pictures in notebooks at all.
enabled = True
#: Node budget of an automatic display (``draw(..., max_nodes=None)`` draws everything).
MAX_NODES = 60
#: Node budget of an ``nn.Graph``'s display, drawn by module (toynet.viz.MODULE_MAX_NODES): MobileNetV2's
#: training graph shows its blocks as boxes (depth=3), in about 0.2 s of dot.
MODULE_MAX_NODES = 120

_warned = False
_draw: Callable[..., Any] | None = None  # toynet.viz.draw, handed over by register_display


def register_display(draw: Callable[..., Any]) -> None:
    """Make tensors, static graphs and nn.Graphs show themselves as pictures in a notebook."""
    global _draw
    _draw = draw
    Tensor._repr_mimebundle_ = tensor_mimebundle
    Graph._repr_mimebundle_ = graph_mimebundle
    ModuleGraph._repr_mimebundle_ = nn_graph_mimebundle


def tensor_mimebundle(tensor: Any, include: Iterable[str] | None = None,
                      exclude: Iterable[str] | None = None) -> dict | None:
    """The tensor's text plus a picture of its autograd graph; None (plain repr) without a grad_fn."""
    if not enabled or tensor.grad_fn is None or tensor.is_lazy:
        return None
    drawing = _draw(tensor, max_nodes=MAX_NODES, show_values=True, namespaces=notebook_namespaces())
    svg = _svg(drawing)
    if svg is None:
        return None
    text = repr(tensor)
    bundle = {"text/plain": text, "text/html": f"<pre>{html.escape(text)}</pre>\n{svg}", "image/svg+xml": svg}
    return _filter(bundle, include, exclude)


def graph_mimebundle(graph: Any, include: Iterable[str] | None = None,
                     exclude: Iterable[str] | None = None) -> dict | None:
    """A static graph as a picture (folded by module when big)."""
    if not enabled:
        return None
    svg = _svg(_draw(graph, max_nodes=MAX_NODES))
    if svg is None:
        return None
    return _filter({"text/plain": repr(graph), "image/svg+xml": svg}, include, exclude)


def nn_graph_mimebundle(graph: Any, include: Iterable[str] | None = None,
                        exclude: Iterable[str] | None = None) -> dict | None:
    """An ``nn.Graph`` by module (its modules only, before the first call), folded by module when big."""
    if not enabled:
        return None
    svg = _svg(_draw(graph, max_nodes=MODULE_MAX_NODES))
    if svg is None:
        return None
    return _filter({"text/plain": repr(graph), "image/svg+xml": svg}, include, exclude)


def _svg(drawing: Any) -> str | None:
    global _warned
    try:
        svg = to_svg(drawing)
    except GraphvizNotInstalled:
        if not _warned:
            _warned = True
            warnings.warn(INSTALL_HELP, stacklevel=3)
        return None
    return svg[svg.find("<svg"):]


def _filter(bundle: dict, include: Iterable[str] | None, exclude: Iterable[str] | None) -> dict:
    if include:
        bundle = {k: v for k, v in bundle.items() if k in set(include)}
    if exclude:
        bundle = {k: v for k, v in bundle.items() if k not in set(exclude)}
    return bundle
