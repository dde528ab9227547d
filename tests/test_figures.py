"""scripts/figures.py: the tutorials' figures, drawn by toynet: every file made, the same bytes each time,
the construction steps in one layout, and files free of timestamps."""

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image, PngImagePlugin

import toynet as flow
from toynet import viz
from scripts_on_path import figures

pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")


@pytest.fixture(scope="module")
def made_twice(tmp_path_factory):
    first, second = tmp_path_factory.mktemp("imgs"), tmp_path_factory.mktemp("again")
    return figures.make_all(first), figures.make_all(second / "nested")  # a missing folder is created


def test_make_all_writes_every_figure(made_twice):
    paths, _ = made_twice
    assert sorted(p.name for p in paths) == sorted(figures.FILES)
    for path in paths:
        assert path.is_file() and path.stat().st_size > 1000
        if path.suffix in (".png", ".gif"):
            with Image.open(path) as image:
                image.verify()
    svg = next(p for p in paths if p.suffix == ".svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "model.features.1" in svg and "InvertedResidual()" in svg


def test_figures_are_the_same_bytes_every_time(made_twice):
    first, second = made_twice
    for a, b in zip(sorted(first), sorted(second)):
        assert a.name == b.name and a.read_bytes() == b.read_bytes(), a.name


def test_construction_stills_are_cropped_legible_and_share_one_layout(made_twice):
    paths = {p.name: p for p in made_twice[0]}
    frames = figures.construction_recording().frames
    with Image.open(paths["01-wxb.png"]) as step1, Image.open(paths["02-z.png"]) as step2, \
            Image.open(paths["compute_graph.png"]) as whole:
        # Cropped to what exists after each step: x, w, b (and the legend) take a third of the final height.
        assert step1.height < 0.4 * whole.height and step1.height < step2.height < whole.height
        assert step1.width == step2.width  # the legend, top right, fixes the width of every step
        for frame, still in ((frames[0], step1), (frames[1], step2)):
            x0, y0, x1, y1 = frame.window()
            scale = still.height / (y1 - y0)  # pixels a point, measured on the file
            assert still.size == pytest.approx(((x1 - x0) * scale, (y1 - y0) * scale), abs=1)
            assert frame.extent.smallest_text * scale >= 11  # 9 pt legend at 96 dpi: 12 px
        # One layout, cropped: the top of both stills (x, w and the legend, drawn alike) is the same pixels.
        band = (step1.width // 2, 0, step1.width, step1.height // 2)
        assert step1.convert("RGB").crop(band).tobytes() == step2.convert("RGB").crop(band).tobytes()
    with Image.open(paths["dynamic_graph.gif"]) as gif:
        assert gif.n_frames == 3  # x, w, b; z; y and the loss
        sizes = set()
        for i in range(gif.n_frames):
            gif.seek(i)
            sizes.add(gif.size)
        assert len(sizes) == 1
        whole = frames[-1].window()
        picture = gif.size[1] - (viz.gif.CAPTION_LINES * (viz.gif.CAPTION_PX + 4) + 12)  # less the caption
        assert frames[-1].extent.smallest_text * picture / (whole[3] - whole[1]) >= 11  # the whole graph, legible


def test_figures_leave_the_random_stream_and_graph_names_alone(tmp_path):
    flow.manual_seed(123)
    expected = flow.randn(3).numpy()
    flow.manual_seed(123)
    counters = dict(flow.nn.Graph._child_init_cnt)
    with figures._repeatable():  # what make_all wraps around every figure
        flow.manual_seed(0)
        figures.static_graph_figures(tmp_path)  # draws random weights and makes an nn.Graph
    assert (flow.randn(3).numpy() == expected).all()
    assert flow.nn.Graph._child_init_cnt == counters


def test_png_text_and_time_chunks_are_dropped(tmp_path):
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "something with a version")
    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), "white").save(buffer, format="PNG", pnginfo=info)
    assert b"tEXt" in buffer.getvalue()
    path = figures._write_png(tmp_path / "clean.png", buffer.getvalue())
    data = path.read_bytes()
    assert b"tEXt" not in data and b"IDAT" in data
    with Image.open(path) as image:
        assert image.size == (4, 3)
