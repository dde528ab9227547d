"""Showing pictures in a notebook without writing HTML: an animated GIF, a still, pictures side by side.

A teaching cell should say what it shows, not how a browser shows it::

    rec.gif(fps=0.8)                                    # the recording as an animated GIF, in the notebook
    flow.viz.show_gif("build.gif")                      # a GIF file (or its bytes)
    rec.still(1)                                        # one step as the GIF shows it, log beside the graph
    flow.viz.side_by_side(flow.viz.draw(a), flow.viz.draw(b), titles=("before", "after"))
    flow.viz.show_source(Tensor, "backward")            # the code of a class's methods, coloured

Each picture returns an object that Jupyter displays (``_repr_html_``; a PNG by ``_repr_png_``, an SVG by
``_repr_svg_``, so that a saved notebook holds it once); ``.html()`` is the HTML, ``.data`` the file's bytes
and ``.save(path)`` writes them. The pictures keep their own size: a notebook shrinks
a picture wider than its column, never enlarges it, so text drawn at 11 pixels stays legible on a
900-pixel column; pictures side by side that are too wide together scroll sideways rather than shrink.

:func:`show_source` reads code with :mod:`inspect`, so what a notebook shows is the code that runs and cannot
drift from it; its :class:`Code` is coloured HTML (by Pygments, which Jupyter installs; plain without it) and,
as text (``str(code)``, and the plain-text form a saved notebook keeps), the code itself.
"""

from __future__ import annotations

import base64
import html
import inspect
import os
import textwrap
from collections.abc import Sequence
from typing import Any

from .rendering import to_svg

_MAGIC = {b"\x89PNG": "png", b"GIF8": "gif", b"\xff\xd8\xff": "jpeg"}
_MIME = {"png": "image/png", "gif": "image/gif", "jpeg": "image/jpeg", "svg": "image/svg+xml"}


class Image:
    """A picture for a notebook: ``data`` (bytes; SVG as text) in ``format`` ("png", "gif", "jpeg", "svg").

    A notebook shows it at its own size (narrower if the column is narrower); ``alt`` is its text for
    readers who cannot see it, and its plain-text repr.
    """

    def __init__(self, data: bytes | str, format: str, alt: str = ""):
        if format not in _MIME:
            raise ValueError(f"format must be one of {sorted(_MIME)}, got {format!r}")
        self.data, self.format, self.alt = data, format, alt

    def html(self) -> str:
        """The picture as HTML: an ``<img>`` holding the file (base64), or the SVG itself."""
        if self.format == "svg":
            svg = self.data if isinstance(self.data, str) else self.data.decode("utf-8")
            svg = svg[svg.find("<svg"):]
            return f'<div role="img" aria-label="{html.escape(self.alt)}" style="max-width:100%;overflow:auto">{svg}</div>'
        encoded = base64.b64encode(self.data).decode("ascii")
        return (f'<img src="data:{_MIME[self.format]};base64,{encoded}" alt="{html.escape(self.alt)}" '
                'style="max-width:100%;height:auto">')

    # One form each, so that a saved notebook holds the picture once: a PNG as a PNG, an SVG as SVG, a GIF
    # (which not every notebook viewer shows from image/gif) as an <img> in HTML.
    def _repr_html_(self) -> str | None:
        return self.html() if self.format in ("gif", "jpeg") else None

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format == "png" else None

    def _repr_svg_(self) -> str | None:
        if self.format != "svg":
            return None
        svg = self.data if isinstance(self.data, str) else self.data.decode("utf-8")
        return svg[svg.find("<svg"):]

    def save(self, path: str | os.PathLike) -> str:
        """Write the picture's file (``.png``, ``.gif``, ``.svg``...) and return its path."""
        mode = "w" if isinstance(self.data, str) else "wb"
        with open(path, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            f.write(self.data)
        return os.fspath(path)

    def __repr__(self) -> str:
        return f"<toynet.viz.display.Image {self.format}, {len(self.data)} bytes: {self.alt}>"


class Row:
    """Pictures side by side, each under its title (what :func:`side_by_side` returns)."""

    def __init__(self, pictures: Sequence[Image], titles: Sequence[str], gap: int = 16):
        self.pictures, self.titles, self.gap = list(pictures), list(titles), gap

    def html(self) -> str:
        cells = []
        for picture, title in zip(self.pictures, self.titles):
            head = (f"<div style='font-weight:bold;margin-bottom:4px'>{html.escape(title)}</div>" if title else "")
            body = picture.html().replace("max-width:100%;", "max-width:none;", 1)  # its own size, in the row
            cells.append(f"<div style='flex:0 0 auto'>{head}{body}</div>")
        return (f"<div style='display:flex;flex-wrap:nowrap;gap:{self.gap}px;align-items:flex-start;"
                f"overflow-x:auto;max-width:100%'>{''.join(cells)}</div>")

    def _repr_html_(self) -> str:
        return self.html()

    def __repr__(self) -> str:
        return f"<toynet.viz.display.Row of {len(self.pictures)}: {', '.join(t or '-' for t in self.titles)}>"


class Code:
    """Source code for a notebook: ``text``, shown coloured (``_repr_html_``), and as itself in plain text."""

    def __init__(self, text: str, title: str = ""):
        self.text, self.title = text, title

    def html(self) -> str:
        """The code as HTML: coloured by Pygments if it is installed, else escaped in a ``<pre>``; it scrolls
        sideways rather than wraps."""
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:
            return f'<pre style="overflow-x:auto">{html.escape(self.text)}</pre>'
        return highlight(self.text, PythonLexer(), HtmlFormatter(noclasses=True, cssstyles="overflow-x:auto"))

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's plain text: the code
        printer.text(self.text.rstrip("\n"))

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<toynet.viz.display.Code: {len(self.text.splitlines())} lines{': ' + self.title if self.title else ''}>"


def show_source(obj: Any, *methods: str) -> Code:
    """The source of ``obj`` (a class, function, method or module) as a notebook shows it, coloured; with
    ``methods`` (names), only those methods of the class ``obj``, in the order given, under its class line::

        show_source(static.Node)                          # the whole class
        show_source(dynamic.Tensor, "__init__", "__add__") # class Tensor:, then those two methods
    """
    if not methods:
        return Code(textwrap.dedent(inspect.getsource(obj)), getattr(obj, "__qualname__", getattr(obj, "__name__", "")))
    if not inspect.isclass(obj):
        raise TypeError(f"show_source(obj, *methods) takes the methods of a class, got {type(obj).__name__}")
    missing = [name for name in methods if name not in vars(obj)]
    if missing:
        raise AttributeError(f"{obj.__name__} defines no {', '.join(missing)} of its own (show_source shows the "
                             "class's own methods; give the class that defines them)")
    bases = [base.__name__ for base in obj.__bases__ if base is not object]
    header = f"class {obj.__name__}" + (f"({', '.join(bases)})" if bases else "") + ":\n"
    body = "\n".join(inspect.getsource(_function_of(vars(obj)[name])) for name in methods)
    return Code(header + body, f"{obj.__name__}: {', '.join(methods)}")


def _function_of(member: Any) -> Any:
    """The function behind a class member: a staticmethod's or classmethod's, a property's getter."""
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    return member.fget if isinstance(member, property) else member


def show_gif(gif: str | os.PathLike | bytes, alt: str = "an animation") -> Image:
    """An animated GIF (a file's path, or its bytes) as a notebook shows it: embedded, so that it plays
    without a kernel and in the notebook's saved copy."""
    data = gif if isinstance(gif, bytes) else _read(gif)
    if not data.startswith(b"GIF8"):
        raise ValueError("show_gif needs a GIF file or its bytes (they start with b'GIF8')")
    return Image(data, "gif", alt)


def show_image(picture: Any, alt: str = "") -> Image:
    """Anything :func:`side_by_side` takes, as one :class:`Image`."""
    return as_image(picture, alt)


def side_by_side(*pictures: Any, titles: Sequence[str] | None = None, gap: int = 16) -> Row:
    """Pictures in one row, each at its own size under its title; a row wider than the notebook scrolls
    sideways (shrinking would make the text too small to read).

    A picture may be a drawing (``flow.viz.draw(...)``, any ``graphviz`` graph: shown as SVG), a
    :class:`Image` (``rec.still(i)``, ``rec.gif()``), a recording's frame, a matplotlib figure, the bytes
    of a PNG, GIF or JPEG file, or such a file's path.
    """
    if not pictures:
        raise ValueError("side_by_side needs at least one picture")
    titles = list(titles) if titles is not None else [""] * len(pictures)
    if len(titles) != len(pictures):
        raise ValueError(f"{len(pictures)} pictures but {len(titles)} titles")
    return Row([as_image(p, t) for p, t in zip(pictures, titles)], titles, gap)


def as_image(picture: Any, alt: str = "") -> Image:
    """A picture (see :func:`side_by_side`) as an :class:`Image`."""
    if isinstance(picture, Image):
        return picture
    if isinstance(picture, bytes):
        return Image(picture, _format_of(picture), alt)
    if isinstance(picture, (str, os.PathLike)):
        path = os.fspath(picture)
        if path.lower().endswith(".svg"):
            with open(path, encoding="utf-8") as f:
                return Image(f.read(), "svg", alt or os.path.basename(path))
        return Image(_read(path), _format_of(_read(path)), alt or os.path.basename(path))
    if hasattr(picture, "pipe") and hasattr(picture, "source"):  # a graphviz drawing
        return Image(to_svg(picture), "svg", alt)
    if hasattr(picture, "to_svg") and hasattr(picture, "drawing"):  # a recording's Frame
        return Image(picture.to_svg(), "svg", alt or (picture.label.splitlines() or [""])[0])
    if hasattr(picture, "savefig"):  # a matplotlib figure
        import io

        buffer = io.BytesIO()
        picture.savefig(buffer, format="png", bbox_inches="tight")
        return Image(buffer.getvalue(), "png", alt)
    raise TypeError(f"cannot show a {type(picture).__name__}: give a drawing, a toynet.viz Image or Frame, a "
                    "matplotlib figure, PNG/GIF/JPEG bytes or a file path")


def _format_of(data: bytes) -> str:
    for magic, format in _MAGIC.items():
        if data.startswith(magic):
            return format
    if data.lstrip()[:5] in (b"<?xml", b"<svg "):
        return "svg"
    raise ValueError("not a PNG, GIF, JPEG or SVG file")


def _read(path: str | os.PathLike) -> bytes:
    with open(path, "rb") as f:
        return f.read()
