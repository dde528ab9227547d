"""Animated GIFs and stills of a recording: each frame rendered to PNG by ``dot``, composed by Pillow.

Every frame of a GIF has one size, at most :data:`FRAME_WIDTH` x :data:`FRAME_HEIGHT` pixels (900 x 620:
shown whole on a laptop screen and in a 900-pixel column, at 100%), cut into fixed panels
(:class:`Geometry`):

* the **caption** on top: which step it is and what ran;
* the **graph** below it, at one scale for the whole recording: the whole graph if it fits, never so small
  that text is under :data:`~toynet.viz.rendering.MIN_TEXT_PX` pixels. A graph too big for its panel at
  that scale is shown through a window that follows the nodes each step adds
  (:func:`~toynet.viz.frames.follow`), and a small map in the panel's corner shows the whole graph as
  boxes (what exists so far dark, this step's nodes in the highlight colour, what is still to come pale) with
  the window outlined: the reader always sees where the window is;
* the **log**, beside the graph, when a Graph-mode recording made with ``graph.debug(level)`` carries the
  lines the graph printed (``frame.log``): as a terminal shows them, the lines of earlier steps dimmed
  above and this step's on the colours of the nodes they name (:mod:`~toynet.viz.log_lines`).

:func:`to_gif` writes the frames as a GIF; :func:`still` gives one frame as a PNG, the same pixels (a
notebook shows it to readers without widgets).
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..backend import host  # pixels are host data (NumPy)

from .frames import follow
from .log_lines import EARLIER, GRAPH_FILL, fill_of, phase_of
from .rendering import MIN_TEXT_PX, SCREEN, Box
from .style import MARKS, ROLES

FRAME_WIDTH = 900   # pixels: the most a frame is wide (a docs column, a notebook's output)
FRAME_HEIGHT = 620  # pixels: the most a frame is high (a laptop screen, with the browser's bars)
CAPTION_LINES = 4   # the most lines a caption has (a step's label is cut after them)
CAPTION_PX = 14     # the caption's font size
MIN_WIDTH = 400     # pixels: room for a caption over a narrow graph
MAX_COVERAGE = 1    # Pillow's Image.Quantize.MAXCOVERAGE: exact white and fills, 2x as fast as median cut
LOG_PX = 380        # the log's column, GAP included: 49 characters of LOG_FONT_PX
LOG_FONT_PX = 12    # its font size (monospaced, as a terminal shows the lines)
LOG_MIN_HEIGHT = 300
MAP_PX = (110, 150)  # the most the map of the whole graph takes, in the graph panel's corner
GAP = 8             # pixels between the graph and the log's box

#: The map's colours: nodes not there yet, there, added in this step, and the window's outline.
MAP_COLOURS = {"later": "#e9ecef", "present": "#868e96", "added": MARKS["highlight"][0]["color"],
               "window": "#1c7ed6", "border": "#adb5bd"}

PixelBox = tuple[int, int, int, int]


@dataclass(frozen=True)
class Geometry:
    """Where everything of a recording's frames is, in pixels of the frame (``(x0, y0, x1, y1)``, y down).

    ``scale`` is the graph's pixels per point and ``window`` the size, in points, of the part of the layout
    the graph panel shows; ``graph_text_px`` the smallest text of the graph at the frame's own size.
    """

    size: tuple[int, int]
    caption: PixelBox | None
    graph: PixelBox
    log: PixelBox | None
    scale: float
    window: tuple[float, float]
    follows: bool                  # the graph is bigger than its panel: the window follows the new nodes
    graph_text_px: float
    caption_px: int = CAPTION_PX
    log_px: int = LOG_FONT_PX

    def text_px(self, display_width: float | None = None) -> float:
        """The smallest text of a frame shown ``display_width`` pixels wide (a page shrinks a wider image to
        its column, never enlarges it): the graph's, the caption's or the log's, whichever is smallest."""
        shrink = 1.0 if display_width is None else min(1.0, display_width / self.size[0])
        sizes = [self.graph_text_px] + ([self.caption_px] if self.caption else []) + ([self.log_px] if self.log else [])
        return min(sizes) * shrink


def geometry(frames: Sequence[Any], width: int = FRAME_WIDTH, height: int = FRAME_HEIGHT, captions: bool = True,
             log: bool = True, min_text_px: float = MIN_TEXT_PX) -> Geometry:
    """The panels of ``frames``' pictures (see the module docstring), the same for every frame.

    The graph panel is at most ``width`` pixels wide, less the log's column (:data:`LOG_PX`) if the frames
    carry debug lines (with ``log=False`` the frame is that much narrower: the graph looks the same either way).
    """
    if not frames:
        raise ValueError("nothing to animate: the recording has no steps (the `with flow.viz.record()` block "
                         "created no tensors and ran no ops)")
    has_log = any(f.log for f in frames)
    lines = max(len(_caption(i, len(frames), f.label, lambda text: True)) for i, f in enumerate(frames))
    band = min(lines, CAPTION_LINES) * (CAPTION_PX + 4) + 10 if captions else 0
    room = (width - (LOG_PX if has_log else 0), height - band)
    if room[0] < 100 or room[1] < 100:
        raise ValueError(f"a {width} x {height} frame leaves no room for the graph; give at least "
                         f"{100 + (LOG_PX if has_log else 0)} x {100 + band} pixels")
    whole = frames[-1].window()  # the layout is the same in every frame; the last draws every node
    size = (whole[2] - whole[0], whole[3] - whole[1])
    smallest = frames[-1].extent.smallest_text
    scale = min(SCREEN, room[0] / size[0], room[1] / size[1])  # dot's 96 dpi, or less to fit the panel...
    if smallest:
        scale = max(scale, min_text_px / smallest)  # ...but never less than legible text allows
    scale = math.ceil(scale * 7200) / 7200  # a whole hundredth of a dpi, so that dot is told exactly it
    shown = (min(size[0], room[0] // scale), min(size[1], room[1] // scale))  # whole points, as the windows
    panel = (math.ceil(shown[0] * scale), math.ceil(shown[1] * scale))
    log_box = None
    if has_log and log:
        panel = (room[0], room[1])
        log_box = (room[0] + GAP, band, room[0] + LOG_PX, band + room[1])
    frame_size = (max(panel[0] + (LOG_PX if log_box else 0), MIN_WIDTH if captions else 1), band + panel[1])
    if has_log and not log:  # the same graph panel as with the log
        frame_size = (room[0], band + room[1])
        panel = room
    return Geometry(frame_size, (0, 0, frame_size[0], band) if captions else None,
                    (0, band, panel[0], band + panel[1]), log_box, scale, shown,
                    shown != size, (smallest or 0) * scale if smallest else math.inf)


def to_gif(frames: Sequence[Any], path: Any, fps: float = 1.0, duration: float | None = None,
           captions: bool = True, loop: int = 0, width: int = FRAME_WIDTH, height: int = FRAME_HEIGHT,
           min_text_px: float = MIN_TEXT_PX, log: bool = True, max_size: int | None = None) -> str:
    """Write ``frames`` (:class:`~toynet.viz.frames.Frame` objects) to ``path`` (or a binary file object) as an
    animated GIF.

    ``fps`` frames per second, or ``duration`` seconds per frame; ``loop=0`` repeats forever. Every frame
    is at most ``width`` x ``height`` pixels, its graph's text at least ``min_text_px`` pixels high, the debug
    lines (if the frames carry any and ``log``) beside it: see :func:`geometry`. ``max_size`` (an older
    spelling) sets both ``width`` and ``height``. Returns ``path``.
    """
    if duration is None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        duration = 1.0 / fps
    if max_size is not None:
        width = height = max_size
    shape = geometry(frames, width, height, captions, log, min_text_px)
    canvases = [_quantize(canvas) for canvas in compose(frames, shape)]
    canvases[0].save(path, format="GIF", save_all=True, append_images=canvases[1:],
                     duration=round(duration * 1000), loop=loop)
    return path


def _quantize(canvas: Any) -> Any:
    """A GIF frame's 256 colours: the picture's own (:data:`MAX_COVERAGE`) and, exactly, the fills of
    :mod:`~toynet.viz.style` and the log's, so that a log line and its node have the very same colour. Each
    pixel takes the nearest of them, at full precision (Pillow's own palette mapping rounds colours, and
    would merge white with the log's background)."""
    from PIL import Image

    np = host
    exact = _exact_colours()
    base = canvas.quantize(256 - len(exact), method=MAX_COVERAGE)
    used = len(base.getcolors(256) or ())  # the palette holds at most this many colours the frame uses
    palette = np.array(base.getpalette()[:3 * used] + [v for colour in exact for v in colour],
                       dtype=np.int32).reshape(-1, 3)
    pixels = np.asarray(canvas, dtype=np.int32).reshape(-1, 3)
    codes, inverse = np.unique(pixels[:, 0] << 16 | pixels[:, 1] << 8 | pixels[:, 2], return_inverse=True)
    colours = np.stack([codes >> 16, (codes >> 8) & 255, codes & 255], axis=1)
    nearest = np.empty(len(colours), dtype=np.uint8)
    for start in range(0, len(colours), 4096):  # the distances of a few thousand colours at a time
        chunk = colours[start:start + 4096, None, :] - palette[None, :, :]
        nearest[start:start + 4096] = np.argmin((chunk * chunk).sum(axis=2), axis=1)
    frame = Image.frombytes("P", canvas.size, nearest[inverse.reshape(-1)].tobytes())
    frame.putpalette([int(v) for v in palette.reshape(-1)])
    return frame


def _exact_colours() -> list[tuple[int, int, int]]:
    colours = {attrs[key] for table in (ROLES, MARKS) for attrs, _ in table.values()
               for key in ("fillcolor", "color") if key in attrs}
    colours |= {GRAPH_FILL, EARLIER, "#ffffff", "#212529", "#d6336c", "#fcfcfd", "#dee2e6"}
    colours |= set(MAP_COLOURS.values())
    return sorted(tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in colours if len(c) == 7)


def still(frames: Sequence[Any], index: int = -1, width: int = FRAME_WIDTH, height: int = FRAME_HEIGHT,
          captions: bool = True, log: bool = True, min_text_px: float = MIN_TEXT_PX) -> bytes:
    """Frame ``index`` of the GIF :func:`to_gif` would write, as PNG bytes (the same pixels, all colours)."""
    index = range(len(frames))[index]
    shape = geometry(frames, width, height, captions, log, min_text_px)
    (canvas,) = compose(frames, shape, only=index)
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def compose(frames: Sequence[Any], shape: Geometry, only: int | None = None) -> list[Any]:
    """The frames as Pillow RGB images laid out as ``shape`` says (``only``: just that frame)."""
    from PIL import Image, ImageDraw, ImageFont

    font, line_height = _font(ImageFont)
    mono = _mono_font(ImageFont) if shape.log else None
    views = _views(frames, shape)
    corner = _map_corner(frames, views, shape) if shape.follows else None
    canvases = []
    for i, (frame, window) in enumerate(views):
        if only is not None and i != only:
            continue
        canvas = Image.new("RGB", shape.size, "white")
        x0, y0, x1, y1 = shape.graph
        picture = Image.open(io.BytesIO(frame.to_png(shape.scale, window))).convert("RGB")
        picture = picture.crop((0, 0, min(picture.width, x1 - x0), min(picture.height, y1 - y0)))
        canvas.paste(picture, (x0 + (x1 - x0 - picture.width) // 2, y0))  # one window size: nodes stay put
        draw = ImageDraw.Draw(canvas)
        if shape.follows:
            _draw_map(draw, frames, i, window, shape, corner)
        if shape.log:
            _draw_log(draw, frames, i, shape.log, mono)
        if shape.caption:
            lines = _caption(i, len(frames), frame.label, lambda text: font.getlength(text) <= shape.size[0] - 16)
            _write(draw, lines, (8, 5), font, line_height)
        canvases.append(canvas)
    return canvases


def _views(frames: Sequence[Any], shape: Geometry) -> list[tuple[Any, Box]]:
    """Each frame with the part of the layout it shows: the whole graph if it fits, else a window of
    ``shape.window`` points following each step's new nodes (:func:`~toynet.viz.frames.follow`)."""
    last = frames[-1].extent  # the layout is the same in every frame; the last draws every node
    whole = frames[-1].window()
    views, window = [], None
    for frame in frames:
        window = follow(whole, shape.window, frame.focus(last), window, frame.drawing.graph_attr.get("rankdir", "TB"))
        views.append((frame, window))
    return views


def _map_size(frames: Sequence[Any]) -> tuple[float, int, int]:
    """The map's points-to-pixels factor and its size in pixels (the whole graph within :data:`MAP_PX`)."""
    whole = frames[-1].window()
    width, height = whole[2] - whole[0], whole[3] - whole[1]
    s = min(MAP_PX[0] / width, MAP_PX[1] / height)
    return s, math.ceil(width * s), math.ceil(height * s)


def _map_corner(frames: Sequence[Any], views: list[tuple[Any, Box]], shape: Geometry) -> tuple[bool, bool]:
    """(right, top): the corner of the graph panel where the map hides the least of what the frames draw,
    summed over every frame (one corner for the whole recording: a map that jumps would distract)."""
    _, w, h = _map_size(frames)
    gx0, gy0, gx1, gy1 = shape.graph
    nodes = frames[-1].extent.nodes
    costs = {}
    for corner in ((True, True), (True, False), (False, True), (False, False)):  # ties: top right first
        right, top = corner
        px0, py0 = (gx1 - gx0 - w - 18, 0) if right else (0, 0)
        py0 = 0 if top else gy1 - gy0 - h - 18
        cost = 0.0
        present: set[str] = set()
        for frame, window in views:
            present |= set(frame.added)
            # the map's pixels as a box of the layout this frame shows (y up)
            box = (window[0] + px0 / shape.scale, window[3] - (py0 + h + 18) / shape.scale,
                   window[0] + (px0 + w + 18) / shape.scale, window[3] - py0 / shape.scale)
            for name in present | {"legend"}:
                if name in nodes:
                    b = nodes[name]
                    cost += max(0.0, min(b[2], box[2]) - max(b[0], box[0])) * max(0.0, min(b[3], box[3]) - max(b[1], box[1]))
        costs[corner] = cost
    return min(costs, key=lambda c: costs[c])


def _draw_map(draw: Any, frames: Sequence[Any], index: int, window: Box, shape: Geometry,
              corner: tuple[bool, bool]) -> None:
    """The whole graph as boxes in a corner of the graph panel, with the part shown outlined: nodes that
    exist dark, this step's in the highlight colour, later ones pale."""
    nodes = frames[-1].extent.nodes
    whole = frames[-1].window()
    s, w, h = _map_size(frames)
    gx0, gy0, gx1, gy1 = shape.graph
    right, top = corner
    ox = gx1 - w - 10 if right else gx0 + 10
    oy = gy0 + 10 if top else gy1 - h - 10

    def box(b: Box) -> PixelBox:  # layout points (y up) -> map pixels (y down)
        return (round(ox + (b[0] - whole[0]) * s), round(oy + (whole[3] - b[3]) * s),
                round(ox + (b[2] - whole[0]) * s), round(oy + (whole[3] - b[1]) * s))

    present = {n for f in frames[:index + 1] for n in f.added}
    draw.rectangle((ox - 5, oy - 5, ox + w + 5, oy + h + 5), fill="white", outline=MAP_COLOURS["border"])
    for name, b in nodes.items():
        colour = MAP_COLOURS["added" if name in frames[index].added else "present" if name in present else "later"]
        x0, y0, x1, y1 = box(b)
        draw.rectangle((x0, y0, max(x0, x1 - 1), max(y0, y1 - 1)), fill=colour)
    x0, y0, x1, y1 = box(window)
    draw.rectangle((x0, y0, x1, y1), outline=MAP_COLOURS["window"], width=2)


def _caption(index: int, total: int, label: str, fits: Any) -> list[str]:
    """The caption's lines, "step i/n" and the label, each wrapped so that ``fits(line)``, the last cut
    with " ..." if too many."""
    lines = []
    for k, line in enumerate(label.splitlines() or [""]):
        line = f"step {index + 1}/{total}   {line}" if k == 0 else line
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
    """The caption: "step i/n" in the highlight colour, the rest dark."""
    x, y = at
    for i, line in enumerate(lines):
        if i == 0 and line.startswith("step "):
            step, _, rest = line.partition("   ")
            draw.text((x, y), step, fill=(214, 51, 108), font=font)
            draw.text((x + font.getlength(step + "   "), y), rest, fill=(33, 37, 41), font=font)
        else:
            draw.text((x, y + i * line_height), line, fill=(33, 37, 41), font=font)


def _mono_font(image_font: Any) -> Any:
    try:
        return image_font.truetype("DejaVuSansMono.ttf", LOG_FONT_PX)
    except OSError:  # no DejaVu on this system: Pillow's own font (proportional, still legible)
        try:
            return image_font.load_default(size=LOG_FONT_PX)
        except TypeError:
            return image_font.load_default()


def _draw_log(draw: Any, frames: Sequence[Any], index: int, box: tuple[int, int, int, int], font: Any) -> None:
    """The log panel of frame ``index`` in ``box``: a title, then the lines printed so far, the newest at
    the bottom, as a terminal scrolls. This step's lines are on their tags' fills; if they do not all fit,
    the newest are shown and the others counted."""
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
        now = [(f"... {len(now) - rows + 1} lines above", None)] + now[len(now) - rows + 1:]
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
    draw.fontmode = "L"


def _wrap(line: str, chars: int) -> list[str]:
    """``line`` cut into rows of at most ``chars`` characters, the later ones indented (a blank line stays)."""
    return textwrap.wrap(line, chars, subsequent_indent="    ", break_on_hyphens=False) or [""]
