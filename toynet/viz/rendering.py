"""Running Graphviz's ``dot`` program, and saying exactly what to install when it is missing.

Drawing (building DOT source) needs only the ``graphviz`` Python package; turning DOT into pictures
needs the ``dot`` program from Graphviz itself, which pip cannot install. So :func:`toynet.viz.draw`
always works and returns a :class:`Drawing` whose ``.source`` is the DOT text; only rendering (SVG,
PNG, a notebook display, a GIF) raises :class:`GraphvizNotInstalled`, whose message says how to get
``dot`` on each platform.
"""

from __future__ import annotations

from typing import Any

import graphviz

INSTALL_HELP = (
    "Rendering a toynet drawing needs Graphviz's `dot` program, which was not found on PATH "
    "(the `graphviz` Python package only writes DOT text; pip cannot install `dot`). Install it with\n"
    "  Debian/Ubuntu:  sudo apt-get install graphviz\n"
    "  macOS:          brew install graphviz\n"
    "  conda:          conda install -c conda-forge graphviz\n"
    "  Windows:        winget install graphviz  (then reopen the terminal)\n"
    "The drawing itself still works without it: `toynet.viz.draw(...).source` is the DOT text, which "
    "you can paste into any Graphviz viewer.")


class GraphvizNotInstalled(RuntimeError):
    """The ``dot`` program is missing; the message says how to install it."""


class Drawing(graphviz.Digraph):
    """A ``graphviz.Digraph`` whose rendering methods explain a missing ``dot`` in plain words.

    Everything else is the ordinary graphviz API: ``.source``, ``.render(...)``, ``.pipe(...)``, and
    Jupyter shows it as SVG.
    """

    def pipe(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().pipe(*args, **kwargs)
        except graphviz.ExecutableNotFound as error:
            raise GraphvizNotInstalled(INSTALL_HELP) from error

    def render(self, *args: Any, **kwargs: Any) -> str:
        try:
            return super().render(*args, **kwargs)
        except graphviz.ExecutableNotFound as error:
            raise GraphvizNotInstalled(INSTALL_HELP) from error


def render(source: Any, format: str = "svg", max_size: int | None = None) -> Any:
    """Lay out and render a drawing (or DOT text): ``"svg"`` gives text, ``"png"`` gives bytes.

    ``max_size``: scale the picture down to at most this many pixels on its longest side (bitmaps of
    tall graphs are otherwise huge: rasterising a 900-node chain at full size takes ~30 s).
    """
    dot = source.source if isinstance(source, graphviz.Digraph) else str(source)
    if max_size is not None:
        inches = max_size / 96  # dot's default bitmap resolution; "size" without "!" only shrinks
        dot = dot.replace("{", f"{{\n\tsize=\"{inches:.2f},{inches:.2f}\"", 1)
    try:
        data = graphviz.Source(dot).pipe(format=format)
    except graphviz.ExecutableNotFound as error:
        raise GraphvizNotInstalled(INSTALL_HELP) from error
    return data.decode("utf-8") if format == "svg" else data


def to_svg(source: Any) -> str:
    return render(source, "svg")


def to_png(source: Any, max_size: int | None = None) -> bytes:
    return render(source, "png", max_size)
