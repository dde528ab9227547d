"""toynet.viz.figures: the tutorials' figures, drawn by toynet: every file made, the same bytes each time,
the construction steps in one layout, and files free of timestamps."""

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image, PngImagePlugin

import toynet as flow
from toynet.viz import figures

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


def test_construction_steps_share_one_layout_and_the_gif_has_one_frame_per_step(made_twice):
    paths = {p.name: p for p in made_twice[0]}
    with Image.open(paths["01-wxb.png"]) as step1, Image.open(paths["02-z.png"]) as step2:
        assert step1.size == step2.size  # every node laid out in every step, later ones invisible
    with Image.open(paths["dynamic_graph.gif"]) as gif:
        assert gif.n_frames == 3  # x, w, b; z; y and the loss
        sizes = set()
        for i in range(gif.n_frames):
            gif.seek(i)
            sizes.add(gif.size)
        assert len(sizes) == 1


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
