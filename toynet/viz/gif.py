"""Animated GIFs of a recording: each frame rendered to PNG by ``dot``, captioned and joined by Pillow.

The frames of a recording share one layout (see :mod:`toynet.viz.recording`), and every frame of the
GIF shows the same part of it at the same scale, so every node stays put; the caption band under each
picture says which step it is and which source statement ran. The scale comes from the layout: the
smallest text is at least :data:`~toynet.viz.rendering.MIN_TEXT_PX` pixels high.

A Graph-mode recording made with ``graph.debug(level)`` set also has the lines the graph printed
(``frame.log``): they are shown in a panel beside the picture, as a terminal would show them, the lines
of earlier steps dimmed above and this step's on the colours of the nodes they name
(:mod:`~toynet.viz.log_lines`).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from typing import Any

from .frames import follow
from .log_lines import EARLIER, fill_of, phase_of
from .rendering import MIN_TEXT_PX, Box, scale_for

CAPTION_LINES = 4
CAPTION_PX = 14   # the caption's font size
MIN_WIDTH = 400   # pixels: room for a caption under a narrow graph
MAX_COVERAGE = 1  # Pillow's Image.Quantize.MAXCOVERAGE: exact white and fills, 2x as fast as median cut
LOG_PX = 600      # the log panel's width
LOG_FONT_PX = 12  # its font size (monospaced, as a terminal shows the lines)
LOG_MIN_HEIGHT = 300


def to_gif(frames: Sequence[Any], path: str, fps: float = 1.0, duration: float | None = None,
           captions: bool = True, loop: int = 0, max_size: int | None = 1600,
           min_text_px: float = MIN_TEXT_PX, log: bool = True) -> str:
    """Write ``frames`` (:class:`~toynet.viz.recording.Frame` objects) to ``path`` as an animated GIF.

    ``fps`` frames per second, or ``duration`` seconds per frame; ``loop=0`` repeats forever.
    Every frame shows what the last one draws (the whole graph), at dot's 96 dpi, or smaller if its
    longest side would pass ``max_size`` pixels, but never so small that text is under ``min_text_px``
    pixels. A graph still bigger than ``max_size`` at that scale is shown through a ``max_size`` window
    that follows the nodes each step adds (``None``: the whole graph, however big; rasterising a huge
    graph costs seconds a frame). ``log``: show the frames' debug lines (if they carry any) in a panel
    :data:`LOG_PX` pixels wide beside the picture. Returns ``path``.
    """
    from PIL import Image, ImageDraw, ImageFont

    if not frames:
        raise ValueError("nothing to animate: the recording has no steps (the `with flow.viz.record()` block "
                         "created no tensors and ran no ops)")
    if duration is None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        duration = 1.0 / fps
    pictures = [Image.open(io.BytesIO(frame.to_png(scale, window))).convert("RGB")
                for frame, window, scale in _views(frames, max_size, min_text_px)]
    width = max(max(p.width for p in pictures), MIN_WIDTH if captions else 1)
    height = max(p.height for p in pictures)
    font, line_height = _font(ImageFont)
    band = (CAPTION_LINES * line_height + 12) if captions else 0
    panel = LOG_PX if log and any(f.log for f in frames) else 0
    if panel:
        height = max(height, LOG_MIN_HEIGHT)
        mono = _mono_font(ImageFont)
    canvases = []
    for i, picture in enumerate(pictures):
        canvas = Image.new("RGB", (width + panel, height + band), "white")
        canvas.paste(picture, (0, 0))  # same window and scale in every frame: the nodes stay put
        if panel:
            _draw_log(ImageDraw.Draw(canvas), frames, i, (width, 0, width + panel, height), mono)
        if captions:
            lines = _caption(i, len(frames), frames[i].label,
                             lambda text: font.getlength(text) <= width + panel - 16)
            _write(ImageDraw.Draw(canvas), lines, (8, height + 6), font, line_height)
        canvases.append(canvas.quantize(256, method=MAX_COVERAGE))
    canvases[0].save(path, format="GIF", save_all=True, append_images=canvases[1:],
                     duration=round(duration * 1000), loop=loop)
    return path


def _views(frames: Sequence[Any], max_size: int | None, min_text_px: float) -> list[tuple[Any, Box, float]]:
    """Each frame with the window it shows and the scale: the last frame's window (everything) if it
    fits in ``max_size`` at a legible scale, else a ``max_size`` window following each step's new nodes
    (:func:`~toynet.viz.frames.follow`)."""
    last = frames[-1].extent  # the layout is the same in every frame; the last draws every node
    whole = frames[-1].window()
    size = (whole[2] - whole[0], whole[3] - whole[1])
    scale = scale_for(size, last.smallest_text, max_size, min_text_px)
    most = size if max_size is None else (max_size // scale, max_size // scale)  # whole points, as the windows
    shown = (min(size[0], most[0]), min(size[1], most[1]))
    views, window = [], None
    for frame in frames:
        window = follow(whole, shown, frame.focus(last), window, frame.drawing.graph_attr.get("rankdir", "TB"))
        views.append((frame, window, scale))
    return views


def _caption(index: int, total: int, label: str, fits: Any) -> list[str]:
    """The caption's lines, each wrapped so that ``fits(line)``, the last cut with " ..." if too many."""
    lines = [f"step {index + 1}/{total}"]
    for line in label.splitlines():
        wrapped, width = [line], len(line)
        while width > 20 and not all(fits(w) for w in wrapped):
            width -= 5
            wrapped = textwrap.wrap(line, width, subsequent_indent="    ")
        lines += wrapped or [""]
    if len(lines) > CAPTION_LINES:
        lines = lines[:CAPTION_LINES - 1] + [lines[CAPTION_LINES - 1] + " ..."]
    return lines


def _font(image_font: Any) -> tuple[Any, int]:
    try:
        return image_font.load_default(size=CAPTION_PX), CAPTION_PX + 4
    except TypeError:  # Pillow < 10.1: a fixed bitmap font
        return image_font.load_default(), 14


def _write(draw: Any, lines: list[str], at: tuple[int, int], font: Any, line_height: int) -> None:
    x, y = at
    for i, line in enumerate(lines):
        draw.text((x, y + i * line_height), line, fill=(33, 37, 41) if i else (214, 51, 108), font=font)


def _mono_font(image_font: Any) -> Any:
    try:
        return image_font.truetype("DejaVuSansMono.ttf", LOG_FONT_PX)
    except OSError:  # no DejaVu on this system: Pillow's own font (proportional, still legible)
        return _font(image_font)[0]


def _draw_log(draw: Any, frames: Sequence[Any], index: int, box: tuple[int, int, int, int], font: Any) -> None:
    """The log panel of frame ``index`` in ``box``: a title, then the lines printed so far, the newest at
    the bottom, as a terminal scrolls. This step's lines are on their tags' fills; if they do not all fit,
    their start is shown and the rest counted."""
    x0, y0, x1, y1 = box
    row = LOG_FONT_PX + 4
    draw.fontmode = "1"  # crisp, not smoothed: a terminal font reads as well and the GIF is much smaller
    draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill="#fcfcfd", outline="#dee2e6")
    draw.text((x0 + 8, y0 + 6), f"printed by graph.debug(), step {index + 1}/{len(frames)}",
              fill=(214, 51, 108), font=font)
    chars = max(20, int((x1 - x0 - 16) // font.getlength("M")))
    phase = phase_of(frames[index].label)
    now = [(text, fill_of(line, phase)) for line in frames[index].log for text in _wrap(line, chars)]
    earlier = [(text, None) for f in frames[:index] for line in f.log for text in _wrap(line, chars)]
    rows = max(1, (y1 - y0 - row - 12) // row)
    if len(now) > rows:
        now = now[:rows - 1] + [(f"... {len(now) - rows + 1} more lines", None)]
    shown = earlier[max(0, len(earlier) - (rows - len(now))):] if rows > len(now) else []
    y = y0 + row + 10
    for text, _ in shown:
        draw.text((x0 + 8, y), text, fill=EARLIER, font=font)
        y += row
    for text, fill in now:
        if fill:
            draw.rectangle((x0 + 4, y - 1, x1 - 5, y + row - 2), fill=fill)
        draw.text((x0 + 8, y), text, fill=(33, 37, 41), font=font)
        y += row


def _wrap(line: str, chars: int) -> list[str]:
    """``line`` cut into rows of at most ``chars`` characters, the later ones indented (a blank line stays)."""
    return textwrap.wrap(line, chars, subsequent_indent="    ", break_on_hyphens=False) or [""]
