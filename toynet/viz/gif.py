"""Animated GIFs of a recording: each frame rendered to PNG by ``dot``, captioned and joined by Pillow.

The frames of a recording share one layout (see :mod:`toynet.viz.recording`), so their PNGs have the same
size and every node stays put; the caption band under each picture says which step it is and which
source statement ran.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from typing import Any

from .rendering import to_png

CAPTION_LINES = 4
CAPTION_WIDTH = 90  # characters


def to_gif(frames: Sequence[Any], path: str, fps: float = 1.0, duration: float | None = None,
           captions: bool = True, loop: int = 0, max_size: int | None = 1600) -> str:
    """Write ``frames`` (:class:`~toynet.viz.recording.Frame` objects) to ``path`` as an animated GIF.

    ``fps`` frames per second, or ``duration`` seconds per frame; ``loop=0`` repeats forever.
    ``max_size``: pictures larger than this many pixels (longest side) are scaled down by ``dot``
    (rasterising a huge graph costs seconds a frame; ``None`` keeps full size). Returns ``path``.
    """
    from PIL import Image

    if not frames:
        raise ValueError("nothing to animate: the recording has no steps (the `with flow.viz.record()` block "
                         "created no tensors and ran no ops)")
    if duration is None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        duration = 1.0 / fps
    pictures = [Image.open(io.BytesIO(to_png(frame.drawing, max_size))).convert("RGB") for frame in frames]
    width = max(p.width for p in pictures)
    height = max(p.height for p in pictures)
    texts = [_caption(i, len(frames), frame.label) for i, frame in enumerate(frames)] if captions else []
    font, line_height = _font()
    band = (CAPTION_LINES * line_height + 12) if captions else 0
    canvases = []
    for i, picture in enumerate(pictures):
        canvas = Image.new("RGB", (max(width, 400 if captions else 1), height + band), "white")
        canvas.paste(picture, (0, 0))  # same layout in every frame: top-left anchoring keeps nodes put
        if captions:
            _write(canvas, texts[i], (8, height + 6), font, line_height)
        canvases.append(canvas)
    canvases[0].save(path, format="GIF", save_all=True, append_images=canvases[1:],
                     duration=round(duration * 1000), loop=loop)
    return path


def _caption(index: int, total: int, label: str) -> list[str]:
    lines = [f"step {index + 1}/{total}"]
    for line in label.splitlines():
        lines += textwrap.wrap(line, CAPTION_WIDTH, subsequent_indent="    ") or [""]
    if len(lines) > CAPTION_LINES:
        lines = lines[:CAPTION_LINES - 1] + [lines[CAPTION_LINES - 1] + " ..."]
    return lines


def _font() -> tuple[Any, int]:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=14), 18
    except TypeError:  # Pillow < 10.1: a fixed bitmap font
        return ImageFont.load_default(), 14


def _write(canvas: Any, lines: list[str], at: tuple[int, int], font: Any, line_height: int) -> None:
    from PIL import ImageDraw

    draw = ImageDraw.Draw(canvas)
    x, y = at
    for i, line in enumerate(lines):
        draw.text((x, y + i * line_height), line, fill=(33, 37, 41) if i else (214, 51, 108), font=font)
