"""toynet.viz.draw_global_graph: the picture of an nn.Graph on global tensors shows each value's SBP, the boxing
nodes the lowering inserted (in a role of their own, saying the conversion and its collective) and the placement.

One process is a placement too (ranks=[0]): data split(0), weights broadcast, one training step. The gradient of a
broadcast weight used on split data comes out a partial sum, so the lowering boxes it P->B (all_reduce) before the
update, even with one process; the tests check that the graph has those nodes and that every picture of it (the
nn.Graph by module, its optimised graph, the lowered graph ``_last.traced``, folded or not) draws them. A graph of
local tensors is drawn exactly as before.
"""

from __future__ import annotations

import re
import shutil

import pytest

import toynet as flow
from toynet import viz
from toynet.distributed.graph_lowering import GlobalGraph, Layout
from toynet.viz import draw_global_graph, style
from toynet.viz.model import Picture, VNode

S0, B, P = flow.sbp.split(0), flow.sbp.broadcast, flow.sbp.partial_sum
SBPS = {"S(0)", "S(1)", "B", "P"}


def _train_graph(place: bool = True):
    """A compiled training graph: Linear-Tanh-Linear, MSE, SGD; global (ranks=[0]) or local."""
    flow.manual_seed(0)
    model = flow.nn.Sequential(flow.nn.Linear(3, 8), flow.nn.Tanh(), flow.nn.Linear(8, 2))
    where = flow.placement("cpu", ranks=[0]) if place else None
    if place:
        model.to_global(placement=where, sbp=B)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1)

    class Train(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model, self.loss_fn = model, flow.nn.MSELoss()
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = Train()
    x, y = flow.randn(8, 3), flow.randn(8, 2)
    if place:
        x, y = (t.to_global(placement=where, sbp=B).to_global(placement=where, sbp=S0) for t in (x, y))
    graph(x, y)
    return graph


@pytest.fixture(scope="module")
def trained():
    return _train_graph()


def labels_of(source: str) -> dict[str, str]:
    """DOT node id -> its label text (lines joined by a literal backslash-n)."""
    return dict(re.findall(r'^\s*(\w+) \[label="((?:[^"\\]|\\.)*)"', source, re.MULTILINE))


def boxing_nodes(graph) -> list:
    return [n for n in graph.nodes if n.op_name == "boxing"]


def test_one_process_still_boxes_the_gradients_partial_sum_to_broadcast(trained):
    lowered = trained._last.traced
    assert isinstance(lowered, GlobalGraph)
    conversions = [(n.attrs["src"], n.attrs["dst"], n.phase) for n in boxing_nodes(lowered)]
    assert conversions.count((P, B, "optimizer")) == 4, conversions          # one per parameter: the all-reduce
    for n in boxing_nodes(lowered):
        if n.attrs["src"] == P:
            assert n.name.split("-boxing-")[0] in {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}


def test_the_nn_graph_picture_shows_sbps_boxing_and_placement(trained):
    source = viz.draw(trained).source
    assert "placement: cpu ranks [0]" in source
    assert "boxing nodes: 4 x P->B (all_reduce)" in source
    assert source.count('"boxing P->B\\nall_reduce') == 4
    found = labels_of(source)
    boxes = [i for i, text in found.items() if text.startswith("boxing ")]
    assert len(boxes) == 4
    for i in boxes:
        line = re.search(rf"^\s*{i} \[.*$", source, re.MULTILINE).group(0)
        assert "shape=hexagon" in line and style.ROLES["boxing"][0]["color"] in line
    lines = {text.split("\\n")[0]: text.split("\\n") for text in found.values()}
    assert lines["input_0"][-1] == "S(0)" and lines["input_1"][-1] == "S(0)"   # the data, split by rows
    assert lines["weight"][-1] == "B" and lines["bias"][-1] == "B"            # the weights, on every rank
    assert lines["output_0"][-1] == "P"                                      # the loss: a sum of each rank's part
    loss = "mean[dim=(0, 1), keepdim=False]" if not flow.mode.fast else "sum_squares"   # (the fast path's own op)
    assert lines[loss][-1] == "P"
    assert "boxing: converts the SBP of a value" in source                          # the legend says what a hexagon is


def test_every_value_of_the_lowered_graph_shows_its_sbp(trained):
    lowered = trained._last.traced
    picture = viz.picture_of(lowered, max_nodes=None)
    by_role: dict[str, list[VNode]] = {}
    for node in picture.nodes.values():
        by_role.setdefault(node.role, []).append(node)
    assert len(by_role["boxing"]) == len(boxing_nodes(lowered)) >= 4
    assert [tuple(n.label[:2]) for n in by_role["boxing"]].count(("boxing P->B", "all_reduce")) == 4
    values = [n for role, ns in by_role.items() if role not in ("literal", "boxing") for n in ns]
    assert values and all(n.label[-1] in SBPS for n in values), [n.label for n in values if n.label[-1] not in SBPS]
    assert picture.notes[0] == "placement: cpu ranks [0]"
    assert picture.notes[-1].startswith("boxing nodes: ") and "4 x P->B (all_reduce)" in picture.notes[-1]
    source = viz.draw(lowered).source
    assert source.count('"boxing P->B\\nall_reduce') == 4 and "placement: cpu ranks [0]" in source


def test_the_optimised_graph_the_traced_ir_and_a_folded_picture_show_them_too(trained):
    assert viz.draw(trained.ir).source.count('"boxing P->B\\nall_reduce') == 4
    traced = viz.draw(trained, ir="traced").source
    assert traced.count('"boxing P->B\\nall_reduce') == 4 and "placement: cpu ranks [0]" in traced
    folded = viz.draw(trained, depth=1).source                     # the model as one box: still the caption
    assert "placement: cpu ranks [0]" in folded and "boxing nodes: 4 x P->B (all_reduce)" in folded


def test_a_picture_of_local_tensors_is_drawn_as_before():
    local = _train_graph(place=False)
    assert not draw_global_graph.is_global(local.ir)
    source = viz.draw(local).source
    assert "placement:" not in source and "boxing" not in source and "hexagon" not in source
    picture = viz.picture_of(local.ir)
    before = [(n.id, list(n.label), n.role) for n in picture.nodes.values()], list(picture.notes)
    draw_global_graph.annotate(picture, local.ir)
    assert ([(n.id, list(n.label), n.role) for n in picture.nodes.values()], list(picture.notes)) == before


def test_sbp_text_gives_the_logical_shape_when_the_part_is_smaller():
    where = flow.placement("cpu", ranks=[0])
    assert draw_global_graph.sbp_text(Layout(where, S0, (8, 3)), (8, 3)) == "S(0)"
    assert draw_global_graph.sbp_text(Layout(where, S0, (8, 3)), (4, 3)) == "S(0) of [8, 3]"
    assert draw_global_graph.sbp_text(Layout(where, P, ())) == "P"


def test_a_picture_node_that_is_not_the_node_its_id_names_is_left_alone(trained):
    lowered = trained._last.traced
    picture = Picture()
    picture.add_node(VNode("n0", ["something else", "f32[1]"], "op_forward", tooltip="%another : f32[1]"))
    draw_global_graph.annotate(picture, lowered)
    assert picture.nodes["n0"].label == ["something else", "f32[1]"]


def test_a_global_graph_with_nothing_to_box_says_so():
    where = flow.placement("cpu", ranks=[0])
    flow.manual_seed(0)
    layer = flow.nn.Linear(3, 2).to_global(placement=where, sbp=B)

    class Infer(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def build(self, x):
            return self.layer(x)

    graph = Infer()
    graph(flow.randn(4, 3).to_global(placement=where, sbp=B))
    assert not boxing_nodes(graph._last.traced)
    source = viz.draw(graph).source
    assert "placement: cpu ranks [0]" in source and "no boxing: every op's inputs already have the SBP it needs" in source
    lines = {text.split("\\n")[0]: text for text in labels_of(source).values()}
    assert lines["input_0"].endswith("\\nB")                                 # the input, broadcast


def test_a_move_between_placements_is_drawn_as_a_boxing():
    from toynet.distributed.graph_lowering import MOVE
    from toynet.static.ir import OP, Node

    move = Node("model.1-move-3", OP, (5, 4), flow.float32, flow.device("cpu"), op=MOVE,
                attrs={"src": (0,), "src_sbp": B, "dst": (1,), "dst_sbp": S0, "shape": (5, 4), "dtype": None})
    assert draw_global_graph.is_boxing(move)
    assert draw_global_graph.boxing_lines(move) == ["move B->S(0)", "ranks [0] -> [1]"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_the_picture_renders(trained):
    svg = viz.to_svg(viz.draw(trained))
    assert svg.count(">boxing P&#45;&gt;B<") == 4 and ">all_reduce<" in svg and ">placement: cpu ranks [0]<" in svg
