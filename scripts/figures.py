"""The figures of the tutorials, drawn again by toynet from the very graphs it builds: ``imgs/``.

:func:`make_all` writes every figure the seed tutorials show, plus two for the docs; the main job
(examples/run_all.py) calls it as ``figures.make_all("imgs")``, and ``python scripts/figures.py [out_dir]``
runs it alone. It is a user of toynet's visualiser (``toynet.viz``), not part of the library:

==========================  ===================================================================
``compute_graph.png``       the autograd graph of the tutorial's example (x, w, b, z, l)
``01-wxb.png``, ``02-z.png``  the same graph as Eager mode builds it: after x, w, b; after z (each cropped
                            to what exists then, in the final graph's layout)
``dynamic_graph.gif``       the construction, one frame per step (the third step is the whole graph)
``static_graph.png``        the poly-fit ``LinearTrainGraph`` by module: forward, backward, optimizer
``graph_build.gif``         that graph as its first call traces it, module by module, beside the lines
                            ``graph.debug(1)`` prints for each step (900 x 620 frames, text at least 11 px)
``passes_scalars.png``      that graph before and after scalar reassociation (the learning rate joins the
                            loss gradient's factor 2)
``passes_fusion.png``       that graph, compiled without scalar reassociation, before and after the fusion pass
``poly_fit.png``            sin(x) and the cubic the Eager poly fit finds (matplotlib)
``mobilenetv2_graph.svg``   the tutorial's MobileNetV2 training graph, one box per block saying its layers
                            (forward; and ``.png``, legible at 100%)
``layers.svg``              the floors of the framework (``scripts/layers.py``, docs/how-it-works.md)
==========================  ===================================================================

Every file is the same, byte for byte, each time it is made: random tensors come from a fixed seed,
graph names from fresh counters, every figure is drawn on the lesson path whatever ``TOYNET_FAST`` says,
and the files carry no timestamps (Graphviz and Pillow write none; matplotlib is told to write no metadata;
PNG text chunks are dropped). The one plot of numbers that a CPU's BLAS kernels change in their last digits,
the poly fit, plots the coefficients its legend prints, rounded well above that noise. The random generator
and the graph-name counters are restored afterwards, so calling this changes nothing for the caller.

:func:`update` (what the main job and ``python scripts/figures.py`` run) draws them all again and replaces
only the files of ``imgs/`` whose picture changed: a file that decodes to the same pixels (or, for an SVG,
the same text) is kept as committed, so regenerating the figures leaves a clean clone even where another
zlib or Pillow compresses the same picture into other bytes. ``tests/test_figures.py`` checks that the
committed ``imgs/`` is what today's code draws.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import sys

ROOT = Path(__file__).resolve().parent.parent
IMGS = ROOT / "imgs"
sys.path.insert(0, str(ROOT))   # (run from anywhere: the toynet beside this script)
sys.path.insert(1, str(ROOT / "scripts"))   # layers.py, beside this script

from toynet import backend, nn  # noqa: E402
from toynet.dynamic import functional  # noqa: E402
from toynet.dynamic.creation import ones, randint, randn, tensor, zeros  # noqa: E402
from toynet.dynamic.tensor import Tensor  # noqa: E402
from toynet.mode import set_fast_path  # noqa: E402
from toynet.optim import SGD  # noqa: E402
from toynet.viz import draw, draw_pass, picture_of  # noqa: E402
from toynet.viz.dot import to_digraph  # noqa: E402
from toynet.viz.recording import Recorder, record  # noqa: E402
from toynet.viz.rendering import MIN_TEXT_PX, Drawing, extent, scale_for, to_png, to_svg  # noqa: E402
from toynet.vision.models import mobilenet_v2  # noqa: E402

#: Longest side of the graph PNGs, in pixels (dot's default 96 dpi otherwise; big graphs are scaled down).
MAX_PNG = 2400

#: The part of the tutorial's ``import toynet as flow`` that its autograd example uses. The dynamic-graph GIF
#: shows each recorded statement as its caption, so the statements must read as the tutorial writes them,
#: ``flow.ones(1, 5)``.
flow = SimpleNamespace(ones=ones, randn=randn, zeros=zeros, matmul=functional.matmul, sum=functional.sum)

#: Every file :func:`make_all` writes.
FILES = ("compute_graph.png", "01-wxb.png", "02-z.png", "dynamic_graph.gif", "static_graph.png",
         "graph_build.gif", "passes_scalars.png", "passes_fusion.png", "poly_fit.png", "mobilenetv2_graph.svg",
         "mobilenetv2_graph.png", "layers.svg")


def make_all(out_dir: str | Path) -> list[Path]:
    """Write every figure into ``out_dir`` (created if needed) and return their paths. Takes ~10 s."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with _repeatable():
        for maker in (construction_figures, static_graph_figures, graph_build_figure, poly_fit_figure,
                      mobilenet_figures, layers_figure):
            backend.manual_seed(0)  # each figure as if made alone
            written += maker(out)
    return written


def update(imgs: str | Path = IMGS) -> tuple[list[Path], list[Path]]:
    """Draw every figure again and put into ``imgs`` those whose picture changed (or that are missing):
    returns (the files redrawn, the files kept because they already hold the same picture)."""
    imgs = Path(imgs)
    imgs.mkdir(parents=True, exist_ok=True)
    redrawn, kept = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for made in make_all(tmp):
            path = imgs / made.name
            if path.is_file() and same_picture(path, made):
                kept.append(path)
            else:
                shutil.copyfile(made, path)
                redrawn.append(path)
    return redrawn, kept


def same_picture(a: Path, b: Path) -> bool:
    """Whether two figure files show the same thing: the same bytes; or PNGs and GIFs that decode to the same
    pixels, frame by frame, for the same times; or SVGs whose text differs at most in Graphviz's version."""
    a, b = Path(a), Path(b)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    if data_a == data_b:
        return True
    if a.suffix == ".svg":
        def text(data: bytes) -> str:
            return re.sub(r"<!-- Generated by graphviz version [^>]*-->", "", data.decode("utf-8"))
        return text(data_a) == text(data_b)
    from PIL import Image, ImageSequence

    try:
        with Image.open(io.BytesIO(data_a)) as image_a, Image.open(io.BytesIO(data_b)) as image_b:
            if image_a.format != image_b.format or image_a.size != image_b.size:
                return False
            frames_a, frames_b = list(ImageSequence.Iterator(image_a)), list(ImageSequence.Iterator(image_b))
            if len(frames_a) != len(frames_b):
                return False
            for frame_a, frame_b in zip(frames_a, frames_b):
                if frame_a.info.get("duration") != frame_b.info.get("duration") \
                        or frame_a.convert("RGBA").tobytes() != frame_b.convert("RGBA").tobytes():
                    return False
    except OSError:  # not a picture Pillow reads: the bytes decided
        return False
    return True


# --------------------------------------------------------------------------------- Eager mode


def loss(y_pred: Tensor, y: Tensor) -> Tensor:
    """The tutorial's loss: half the summed squared error."""
    return flow.sum(1 / 2 * (y_pred - y) ** 2)


def construction_recording() -> Recorder:
    """The tutorial's autograd example, recorded as Eager mode builds it, in three steps."""
    with record() as rec:
        x = flow.ones(1, 5)  # the input
        w = flow.randn(5, 3, requires_grad=True)
        b = flow.randn(1, 3, requires_grad=True)
        rec.step()
        z = flow.matmul(x, w) + b
        rec.step()
        y = flow.zeros(1, 3)  # the label
        l = loss(z, y)  # noqa: F841  (l names the loss in the drawing)
        rec.step()
    return rec


def construction_figures(out: Path) -> list[Path]:
    """The whole graph, its first two steps as stills, and the GIF of the three steps."""
    rec = construction_recording()
    frames = rec.frames
    paths = [_write_png(out / "compute_graph.png", to_png(rec.drawing(), MAX_PNG)),
             _write_png(out / "01-wxb.png", frames[0].to_png(max_px=MAX_PNG)),  # cropped, not laid out again
             _write_png(out / "02-z.png", frames[1].to_png(max_px=MAX_PNG))]
    paths.append(Path(rec.to_gif(str(out / "dynamic_graph.gif"), duration=1.5)))
    return paths


def poly_fit_data() -> tuple[Tensor, Tensor, Tensor]:
    """The tutorial's data: x in [-pi, pi], y = sin x, and the features (x, x^2, x^3)."""
    host = backend.host.linspace(-math.pi, math.pi, 2000)
    x = tensor(host, dtype=backend.float32)
    y = tensor(backend.host.sin(host), dtype=backend.float32)
    xx = functional.cat([x.unsqueeze(-1).pow(1), x.unsqueeze(-1).pow(2), x.unsqueeze(-1).pow(3)], dim=1)
    return x, y, xx


def poly_fit_model() -> tuple[nn.Module, nn.Module, SGD]:
    """The tutorial's cubic (a Linear(3, 1) on the features), its summed squared error and plain SGD:
    the same for the Eager fit and the Graph one."""
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    return model, nn.MSELoss(reduction="sum"), SGD(model.parameters(), lr=1e-6)


def poly_fit_figure(out: Path, steps: int = 2000) -> list[Path]:
    """Run the tutorial's Eager poly fit, then plot sin x against the cubic it found (matplotlib)."""
    from matplotlib.figure import Figure  # a bare Figure: no pyplot state, no GUI backend

    x, y, xx = poly_fit_data()
    model, loss_fn, optimizer = poly_fit_model()
    for _ in range(steps):
        fit_loss = loss_fn(model(xx), y)
        optimizer.zero_grad()
        fit_loss.backward()
        optimizer.step()
    # Another CPU's BLAS kernels sum the 2000 samples in another order, which moves the float32 weights in
    # their 7th digit; plotted as they are, that shifts the curve by a fraction of a pixel and changes the
    # file. The curve is the cubic the legend prints, its coefficients rounded far above that noise (they
    # sit at least 3e-5 from a rounding boundary), evaluated in float64 with IEEE products and sums only.
    w = [round(float(v), digits) for v, digits in zip(model[0].weight.numpy()[0], (3, 4, 4))]
    b = round(float(model[0].bias.numpy()[0]), 3)
    host_x = x.numpy().astype("float64")
    fitted = b + w[0] * host_x + w[1] * (host_x * host_x) + w[2] * (host_x * host_x * host_x)
    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    ax = figure.subplots()
    ax.plot(host_x, y.numpy(), label="y = sin(x)")
    ax.plot(host_x, fitted, label=f"y = {b:.3f} + {w[0]:.3f} x + {w[1]:.4f} x^2 + {w[2]:.4f} x^3")
    ax.set_xlabel("x")
    ax.set_title(f"Eager poly fit, {steps} SGD steps (final loss {fit_loss.item():.2f})")
    ax.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    path = out / "poly_fit.png"
    figure.savefig(path, format="png", metadata={"Software": None})
    return [_write_png(path, path.read_bytes())]


# --------------------------------------------------------------------------------- Graph mode


class TrainGraph(nn.Graph):
    """The tutorials' training step in Graph mode: the model, the loss, backward, the optimizer's update.

    The poly-fit and MobileNetV2 tutorials each write this class, under the two names below (which the
    drawings show, as ``LinearTrainGraph_0`` and ``GraphMobileNetV2_0``).
    """

    def __init__(self, model: nn.Module, loss_fn: nn.Module, optimizer: SGD):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        y_pred = self.model(x)
        loss = self.loss_fn(y_pred, y)
        loss.backward()
        return loss


class LinearTrainGraph(TrainGraph):
    """The poly-fit tutorial's name for :class:`TrainGraph`."""


class GraphMobileNetV2(TrainGraph):
    """The MobileNetV2 tutorial's name for :class:`TrainGraph`."""


def linear_train_graph(*disabled_passes: str) -> nn.Graph:
    """The tutorial's ``LinearTrainGraph`` (poly fit in Graph mode), called once so that it is compiled."""
    _, y, xx = poly_fit_data()
    graph = LinearTrainGraph(*poly_fit_model())
    for name in disabled_passes:
        graph.config.enable_pass(name, False)
    graph(xx, y)
    return graph


def static_graph_figures(out: Path) -> list[Path]:
    """The poly-fit training graph by module and what fusion did to it (the lesson path), and what the fast
    path's scalar reassociation does to the same step."""
    graph = linear_train_graph()
    paths = [_write_png(out / "static_graph.png", _legible_png(draw(graph)))]
    fusion = next(r for r in graph.passes if r.name == "FuseElementwise")
    # The caption's second line, which draw_pass writes, says what changed: "FuseElementwise: 19 -> 16 ops, ...".
    drawing = draw_pass(fusion, title="the loss gradient's two products, each update's mul and sub: one kernel each")
    paths.append(_write_png(out / "passes_fusion.png", _legible_png(drawing)))
    nn.Graph._child_init_cnt.pop(LinearTrainGraph.__name__, None)  # LinearTrainGraph_0 again, as the tutorial
    with set_fast_path(True):
        scalars = next(r for r in linear_train_graph().passes if r.name == "ReassociateScalars")
    drawing = draw_pass(scalars, title="the fast path: 2 * lr once; each update one subtraction")
    paths.append(_write_png(out / "passes_scalars.png", _legible_png(drawing)))
    return paths


def graph_build_recording() -> Recorder:
    """The tutorial's ``LinearTrainGraph`` at ``debug(1)``, its first call recorded: one frame per module
    call, backward op group and parameter update, then compiling; each frame with the lines it printed."""
    _, y, xx = poly_fit_data()
    graph = LinearTrainGraph(*poly_fit_model())
    graph.debug(1)
    with contextlib.redirect_stdout(io.StringIO()), record() as rec:  # the lines go into the frames
        graph(xx, y)
    for frame in rec.frames:
        # The stages' timings ("Cost time: 0.01s") change from run to run, and a step's source line is the
        # line that called make_all (the model's code is toynet's own); the file must depend on neither.
        frame.log = tuple(re.sub(r"Cost time: [\d.]+s", "Cost time: ...s", line) for line in frame.log)
        frame.label = frame.label.splitlines()[0]
    return rec


def graph_build_figure(out: Path) -> list[Path]:
    """Graph mode's construction, as the tutorial tells it: the trace adds each module's ops, and the
    debug printout says what it is doing, side by side."""
    nn.Graph._child_init_cnt.pop(LinearTrainGraph.__name__, None)  # LinearTrainGraph_0, as the tutorial prints
    return [Path(graph_build_recording().to_gif(str(out / "graph_build.gif"), duration=2.0))]


def mobilenet_graph(batch: int = 2) -> nn.Graph:
    """The tutorial's MobileNetV2 training graph (CIFAR-10 sized inputs), called once on random data.

    As in the tutorial, the new head goes to ``model.classifer`` (sic): it is never called, and the
    picture says so.
    """
    model = mobilenet_v2()
    model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
    graph = GraphMobileNetV2(model, nn.CrossEntropyLoss(), SGD(model.parameters(), lr=1e-3))
    graph(randn(batch, 3, 32, 32), randint(0, 10, (batch,)))
    return graph


def mobilenet_figures(out: Path) -> list[Path]:
    """MobileNetV2's training graph collapsed to its blocks (``flow.viz.draw_module(graph, forward_only=True)``):
    one box per block, saying its layers ("conv 1x1 16->96, BN, ReLU6"), legible at 100% (backward and the
    optimizer mirror it block by block; the notebooks draw them)."""
    picture = picture_of(mobilenet_graph(), depth="blocks", forward_only=True)  # model.features.*: depth 3
    for node in picture.nodes.values():
        # The SVG's tooltips name each op's source line; here that is the line that called make_all
        # (the model's code is toynet's own), which would make the file depend on its caller.
        node.tooltip = node.tooltip.split("  (")[0]
    drawing = to_digraph(picture, legend=False)  # no legend: 843 px wide at 11 px text, a docs column's width
    svg = out / "mobilenetv2_graph.svg"
    svg.write_text(to_svg(drawing), encoding="utf-8")
    return [svg, _write_png(out / "mobilenetv2_graph.png", _legible_png(drawing))]


def _legible_png(drawing: Drawing) -> bytes:
    """A drawing as a PNG whose text is at least 11 pixels at 100%: dot's 96 dpi, less to keep its longest side
    within MAX_PNG pixels, but never so little that the smallest text is under 11 pixels (so a wide picture may
    pass MAX_PNG: better wide than unreadable)."""
    measured = extent(drawing)
    x0, y0, x1, y1 = measured.bb
    return to_png(drawing, scale=scale_for((x1 - x0, y1 - y0), measured.smallest_text, MAX_PNG, MIN_TEXT_PX))


def layers_figure(out: Path) -> list[Path]:
    """The floors of the framework and the imports between them, read from toynet's code (scripts/layers.py,
    the picture on docs/how-it-works.md)."""
    import layers

    svg = subprocess.run(["dot", "-Tsvg"], input=layers.dot_source(layers.read_house()), capture_output=True,
                         text=True, check=True).stdout
    path = out / "layers.svg"
    path.write_text(svg)
    return [path]


# --------------------------------------------------------------------------------- repeatable files


@contextlib.contextmanager
def _repeatable() -> Iterator[None]:
    """Fresh nn.Graph name counters (``LinearTrainGraph_0`` each time), the lesson path, and the caller's random
    state and path back."""
    counters = nn.Graph._child_init_cnt
    saved_counters, saved_rng = dict(counters), backend.get_rng_state()
    counters.clear()
    try:
        with set_fast_path(False):  # the lesson path's graphs, whatever TOYNET_FAST says
            yield
    finally:
        counters.clear()
        counters.update(saved_counters)
        backend.set_rng_state(saved_rng)


def _write_png(path: Path, data: bytes) -> Path:
    """Write a PNG without its text and time chunks (tEXt, zTXt, iTXt, tIME), the bytes that may vary."""
    signature, chunks, at = data[:8], [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind = data[at + 4:at + 8]
        if kind not in (b"tEXt", b"zTXt", b"iTXt", b"tIME"):
            chunks.append(data[at:at + 12 + length])
        at += 12 + length
    path.write_bytes(signature + b"".join(chunks))
    return path


if __name__ == "__main__":
    # python scripts/figures.py [dir]: bring imgs/ (or dir) up to date, keeping the files whose picture is the same
    changed, same = update(sys.argv[1] if len(sys.argv) > 1 else IMGS)
    for path in changed:
        print(f"redrawn   {path}")
    print(f"{len(changed)} figures redrawn, {len(same)} unchanged")
