"""toynet.viz: the structure of drawn graphs (read back from the DOT source), names, options, size caps,
pass before/after pictures, recordings (frames, GIF, player), rendering and the missing-``dot`` error."""

from __future__ import annotations

import contextlib
import html
import io
import itertools
import linecache
import pathlib
import re
import shutil
import sys

import numpy as np
import pytest

import toynet as flow
from toynet import viz
from toynet.ops import OPS
from toynet.static.ir import Graph, Node
from toynet.viz import style

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")

# ------------------------------------------------------------------------------------- reading DOT

_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|<.*>|[^\s\]]+)')


def _attrs(text: str) -> dict[str, str]:
    return {k: v[1:-1] if v.startswith('"') else v for k, v in _ATTR.findall(text or "")}


def parse_dot(source: str) -> tuple[dict, list, dict]:
    """(nodes: id -> attrs incl. "cluster", edges: [(tail, head, attrs)], clusters: name -> attrs)."""
    nodes, edges, clusters, stack = {}, [], {}, []
    for line in source.splitlines():
        line = line.strip()
        if m := re.match(r"subgraph (\w+) \{$", line):
            stack.append(m.group(1))
            clusters[m.group(1)] = {}
        elif line == "}":
            if stack:
                stack.pop()
        elif m := re.match(r"(\S+) -> (\S+)(?: \[(.*)\])?$", line):
            edges.append((m.group(1), m.group(2), _attrs(m.group(3))))
        elif stack and re.match(r"\w+=", line):
            clusters[stack[-1]].update(_attrs(line))
        elif (m := re.match(r"(\w+) \[(.*)\]$", line)) and m.group(1) not in ("graph", "node", "edge"):
            nodes[m.group(1)] = dict(_attrs(m.group(2)), cluster=stack[-1] if stack else "")
    return nodes, edges, clusters


def label_lines(node: dict) -> list[str]:
    return node.get("label", "").split("\\n")


def by_name(nodes: dict, name: str) -> str:
    found = [nid for nid, a in nodes.items() if label_lines(a)[0] == name]
    assert len(found) == 1, f"expected one node named {name!r}, found {found}"
    return found[0]


def producer_op(edges: list, tensor_id: str) -> str:
    (op,) = [t for t, h, _ in edges if h == tensor_id and t.startswith("op")]
    return op


def seed_example():
    """The autograd example of the seeds: z = x @ w + b, l = sum(1/2 (z - y)^2)."""
    x = flow.ones(1, 5)
    w = flow.randn(5, 3, requires_grad=True)
    b = flow.randn(1, 3, requires_grad=True)
    z = flow.matmul(x, w) + b
    y = flow.zeros(1, 3)
    l = flow.sum(1 / 2 * (z - y) ** 2)
    return x, w, b, z, y, l


# ------------------------------------------------------------------------------------- eager graphs


def test_seed_autograd_graph_structure_and_names():
    x, w, b, z, y, l = seed_example()  # noqa: RUF059  (bound so that the drawing names them)
    drawing = viz.draw(l)
    assert isinstance(drawing, viz.Drawing) and drawing.source == drawing.source
    nodes, edges, clusters = parse_dot(drawing.source)
    ids = {name: by_name(nodes, name) for name in "xwbzyl"}
    # z = add(matmul(x, w), b)
    add = producer_op(edges, ids["z"])
    assert label_lines(nodes[add])[0] == "add"
    into_add = [t for t, h, _ in edges if h == add]
    assert ids["b"] in into_add
    (product,) = [t for t in into_add if t != ids["b"]]
    matmul = producer_op(edges, product)
    assert label_lines(nodes[matmul])[0] == "matmul"
    assert [t for t, h, _ in edges if h == matmul] == [ids["x"], ids["w"]]  # argument order kept
    # l = sum(mul(0.5, pow(sub(z, y), 2)))
    summed = producer_op(edges, ids["l"])
    assert label_lines(nodes[summed])[0].startswith("sum")
    ops = [label_lines(a)[0].split("[")[0] for nid, a in nodes.items() if nid.startswith("op") and "_" not in nid]
    assert sorted(ops) == sorted(["matmul", "add", "sub", "pow", "mul", "sum"])
    literals = sorted(label_lines(a)[0] for nid, a in nodes.items() if "_arg" in nid)
    assert literals == ["0.5", "2"]
    # shapes and dtypes, leaves told apart, the output marked
    assert label_lines(nodes[ids["w"]])[1] == "f32[5, 3]" and label_lines(nodes[ids["l"]])[1] == "f32[]"
    parameter, data = style.ROLES["parameter"][0]["fillcolor"], style.ROLES["input"][0]["fillcolor"]
    assert nodes[ids["w"]]["fillcolor"] == nodes[ids["b"]]["fillcolor"] == parameter
    assert nodes[ids["x"]]["fillcolor"] == nodes[ids["y"]]["fillcolor"] == data != parameter
    assert nodes[ids["l"]].get("peripheries") == "2" and nodes[ids["z"]].get("peripheries") is None
    assert "cluster_legend" in clusters and "parameter" in nodes["legend"]["label"]
    assert len(edges) == 6 + 9 + 2  # op -> result, tensor -> op (2+2+2+1+1+1), literal -> op


def test_drawing_is_deterministic_and_independent_of_object_ids():
    flow.manual_seed(3)
    loss = seed_example()[-1]
    first = viz.draw(loss, show_values=True).source
    assert viz.draw(loss, show_values=True).source == first
    flow.manual_seed(3)
    rebuilt = seed_example()[-1]  # new objects (other ids), same values
    assert viz.draw(rebuilt, show_values=True, names={"loss": rebuilt}).source == first
    assert "t9 [label=\"loss\\n" in first  # ids come from the traversal: the loss is the tenth tensor


def test_names_from_locals_explicit_names_tensor_name_and_modules():
    model = flow.nn.Linear(3, 2)
    inputs = flow.randn(4, 3)
    out = model(inputs).relu().sum()
    nodes, _, _ = parse_dot(viz.draw(out).source)
    names = {label_lines(a)[0] for a in nodes.values()}
    assert {"inputs", "out", "model.weight", "model.bias"} <= names
    inputs.name = "pixels"
    nodes, _, _ = parse_dot(viz.draw(out, names={"loss": out}).source)
    names = {label_lines(a)[0] for a in nodes.values()}
    assert {"pixels", "loss"} <= names and "out" not in names and "inputs" not in names
    with pytest.raises(TypeError, match="names="):
        viz.draw(out, names={out: "loss"})


def test_show_values_grads_saved_and_inline_literals():
    x, w, b, z, y, l = seed_example()  # noqa: RUF059  (bound so that the drawing names them)
    nodes, _, _ = parse_dot(viz.draw(l, show_values=True, show_saved=True).source)
    assert "[[1, 1, 1, 1, 1]]" in label_lines(nodes[by_name(nodes, "x")])
    assert f"{l.item():.4g}" in label_lines(nodes[by_name(nodes, "l")])
    matmul = next(a for a in nodes.values() if label_lines(a)[0] == "matmul")
    assert "saved: x, w" in label_lines(matmul)
    big = flow.randn(5, 4, requires_grad=True)
    nodes, _, _ = parse_dot(viz.draw((big * 2).exp().sum(), show_values=True, show_saved=True).source)
    assert len(label_lines(nodes[by_name(nodes, "big")])) == 2  # 20 elements: type only, no values
    exp = next(a for a in nodes.values() if label_lines(a)[0] == "exp")
    assert label_lines(exp)[1].endswith("output")  # exp keeps its output for backward

    l.backward(retain_graph=True)
    nodes, _, _ = parse_dot(viz.draw(l, show_grads=True, literals="inline").source)
    b_label = label_lines(nodes[by_name(nodes, "b")])
    grad = [float(v) for v in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", b_label[2])]
    np.testing.assert_allclose(grad, b.grad.numpy().ravel(), rtol=1e-3)
    assert not any("_arg" in nid for nid in nodes)
    assert any(label_lines(a)[0] == "pow(·, 2)" for a in nodes.values())
    assert any(label_lines(a)[0] == "mul(0.5, ·)" for a in nodes.values())


def test_several_roots_and_attributes_off():
    x, w, b, z, y, l = seed_example()  # noqa: RUF059  (bound so that the drawing names them)
    nodes, _, _ = parse_dot(viz.draw([z, l], show_attrs=False).source)
    assert {label_lines(a)[0] for a in nodes.values() if a.get("peripheries") == "2"} == {"z", "l"}
    assert "sum" in {label_lines(a)[0] for a in nodes.values()}  # not sum[dim=(0, 1), keepdim=False]


def test_graph_freed_by_backward_is_drawn_with_a_note():
    *_, l = seed_example()
    l.backward()
    source = viz.draw(l).source
    assert "retain_graph=True" in source and "inputs freed by backward" in source


def test_layout_options_and_errors():
    *_, l = seed_example()
    assert "rankdir=LR" in viz.draw(l, rankdir="LR").source
    assert "cluster_legend" not in viz.draw(l, legend=False).source
    assert "title: the seed" in viz.draw(l, title="title: the seed").source
    with pytest.raises(ValueError, match="rankdir"):
        viz.draw(l, rankdir="XY")
    with pytest.raises(TypeError, match="Tensor"):
        viz.draw(3.0)
    with pytest.raises(ValueError, match="literals"):
        viz.draw(l, literals="beside")
    with pytest.raises(TypeError, match="unknown option.*forward_only"):
        viz.draw(l, forward_only=True)


def test_size_cap_keeps_nodes_nearest_the_output_and_says_so():
    t = flow.randn(3, requires_grad=True)
    h = t
    for _ in range(150):
        h = h * 1.01
    nodes, edges, _ = parse_dot(viz.draw(h, max_nodes=40, legend=False).source)
    assert len(nodes) == 40
    (summary,) = [nid for nid, a in nodes.items() if "more nodes" in a["label"]]
    assert any(t_ == summary for t_, _, _ in edges)
    assert any(a.get("peripheries") == "2" for a in nodes.values())  # the output is kept
    assert "max_nodes=None" in viz.draw(h, max_nodes=40).source
    full, _, _ = parse_dot(viz.draw(h, max_nodes=None, legend=False).source)
    assert len(full) == 1 + 150 * 3  # leaf, then per op: op, literal, result


def test_eager_drawing_on_every_device(device):
    a = flow.randn(2, 2, device=device, requires_grad=True)
    out = (a * a).sum()
    nodes, _, _ = parse_dot(viz.draw(out, show_values=True, show_saved=True).source)
    assert by_name(nodes, "a") and by_name(nodes, "out")


# ------------------------------------------------------------------------------------- static graphs

F32, CPU = flow.float32, flow.device("cpu")


def _op(g: Graph, name: str, op: str, inputs: tuple, shape: tuple, phase: str = "forward", scope: str = "",
        **attrs) -> Node:
    return g.add(Node(name, "op", shape, F32, CPU, op=OPS[op], inputs=inputs, attrs=attrs, phase=phase,
                      scope=scope))


def tiny_training_graph() -> Graph:
    """One linear step with momentum SGD, a buffer and a constant, written by hand."""
    g = Graph("tiny")
    x = g.add(Node("x", "input", (1, 5), F32, CPU))
    g.inputs.append(x)
    w = g.add(Node("w", "state", (5, 3), F32, CPU, state_name="model.w", state_kind="parameter", requires_grad=True))
    m = g.add(Node("w-momentum", "state", (5, 3), F32, CPU, state_name="model.w-momentum", state_kind="optimizer"))
    step = g.add(Node("step", "state", (1,), flow.int64, CPU, state_name="step", state_kind="system"))
    mean = g.add(Node("mean", "state", (3,), F32, CPU, state_name="model.mean", state_kind="buffer"))
    c = g.add(Node("c", "constant", (1, 3), F32, CPU, value=flow.zeros(1, 3).array))
    z = _op(g, "model-matmul-0", "matmul", (x, w), (1, 3), scope="model")
    h = _op(g, "model-add-1", "add", (z, c), (1, 3), scope="model")
    loss = _op(g, "loss-sum-2", "sum", (h,), (), scope="loss", dim=(0, 1), keepdim=False)
    new_mean = _op(g, "model-mul-3", "mul", (mean, 0.9), (3,), scope="model")
    xt = _op(g, "model-permute-4", "permute", (x,), (5, 1), phase="backward", scope="model", dims=(1, 0))
    gw = _op(g, "model-matmul-5", "matmul", (xt, h), (5, 3), phase="backward", scope="model")
    m2 = _op(g, "opt-add-6", "add", (m, gw), (5, 3), phase="optimizer")
    w2 = _op(g, "opt-sub-7", "sub", (w, m2), (5, 3), phase="optimizer")
    step2 = _op(g, "opt-add-8", "add", (step, 1), (1,), phase="optimizer")
    g.outputs.append(loss)
    g.updates = {"model.w": w2, "model.w-momentum": m2, "step": step2, "model.mean": new_mean}
    return g


def test_static_graph_clusters_state_kinds_and_update_edges():
    g = tiny_training_graph()
    nodes, edges, clusters = parse_dot(viz.draw(g).source)
    assert {"cluster_forward", "cluster_backward", "cluster_optimizer"} <= set(clusters)
    cluster_of = {a.get("tooltip", "").split(" ")[0]: a["cluster"] for a in nodes.values()}
    assert cluster_of["%model-matmul-0"] == cluster_of["%model-add-1"] == "cluster_forward"
    assert cluster_of["%model-matmul-5"] == cluster_of["%model-permute-4"] == "cluster_backward"
    assert cluster_of["%opt-sub-7"] == cluster_of["%opt-add-6"] == "cluster_optimizer"
    assert cluster_of["%x"] == cluster_of["%w"] == cluster_of["%c"] == ""  # inputs, state, constants: outside
    fills = {name: nodes[by_name(nodes, name)]["fillcolor"]
             for name in ("x", "model.w", "model.w-momentum", "step", "model.mean", "c")}
    assert len(set(fills.values())) == 6, fills
    updates = [(t, h) for t, h, a in edges if a.get("label") == "update"]
    assert len(updates) == 4
    assert all(a.get("constraint") == "false" and a.get("style") == "dashed"
               for _, _, a in edges if a.get("label") == "update")
    assert (by_name(nodes, "sub"), by_name(nodes, "model.w")) in updates
    assert nodes[by_name(nodes, "sum[dim=(0, 1), keepdim=False]")].get("peripheries") == "2"
    assert sorted(label_lines(a)[0] for nid, a in nodes.items() if "_arg" in nid) == ["0.9", "1"]


def test_static_labels_names_values_and_inline_literals():
    g = tiny_training_graph()
    nodes, _, _ = parse_dot(viz.draw(g, show_names=True, show_values=True, literals="inline").source)
    labels = [label_lines(a) for a in nodes.values()]
    assert ["matmul", "%model-matmul-0", "f32[1, 3]"] in labels
    assert ["c", "f32[1, 3]", "[[0, 0, 0]]"] in labels  # a small constant shows its values
    assert ["mul(·, 0.9)", "%model-mul-3", "f32[3]"] in labels and not any("_arg" in n for n in nodes)


def test_static_updates_as_write_back_nodes():
    g = tiny_training_graph()
    nodes, edges, _ = parse_dot(viz.draw(g, updates="nodes").source)
    assert not [e for e in edges if e[2].get("label") == "update"]
    sinks = {label_lines(a)[0]: nid for nid, a in nodes.items() if label_lines(a)[0].startswith("new ")}
    assert set(sinks) == {"new model.w", "new model.w-momentum", "new step", "new model.mean"}
    (new_w,) = [nid for nid, a in nodes.items() if a.get("tooltip", "").startswith("%opt-sub-7 ")]
    assert (new_w, sinks["new model.w"]) in [(t, h) for t, h, _ in edges]
    assert nodes[sinks["new model.w"]]["fillcolor"] == nodes[by_name(nodes, "model.w")]["fillcolor"]
    with pytest.raises(ValueError, match="updates"):
        viz.draw(g, updates="arrows")
    many = Graph("many")  # more updates than MAX_UPDATE_EDGES: "auto" draws write-back nodes
    for i in range(viz.draw_static.MAX_UPDATE_EDGES + 1):
        p = many.add(Node(f"p{i}", "state", (2,), F32, CPU, state_name=f"p{i}", state_kind="parameter"))
        many.updates[f"p{i}"] = _op(many, f"sgd{i}", "mul", (p, 0.5), (2,), phase="optimizer")
    source = viz.draw(many).source
    assert "label=update" not in source and source.count("new p") == len(many.updates)
    assert viz.draw(many, updates="edges").source.count("label=update") == len(many.updates)


def test_static_forward_only_view_and_phase_errors():
    g = tiny_training_graph()
    nodes, edges, clusters = parse_dot(viz.draw(g, forward_only=True).source)
    assert "cluster_backward" not in clusters and "cluster_optimizer" not in clusters
    names = {label_lines(a)[0] for a in nodes.values()}
    assert "model.w-momentum" not in names and "step" not in names and "sub" not in names
    assert [a["label"] for _, _, a in edges if a.get("label")] == ["update"]  # the buffer's, made in forward
    assert viz.draw(g, phases=("forward",)).source == viz.draw(g, forward_only=True).source
    with pytest.raises(ValueError, match="phases"):
        viz.draw(g, phases=("sideways",))
    with pytest.raises(TypeError, match="unknown option"):
        viz.draw(g, show_grads=True)


def test_static_folding_by_module_and_summary_for_big_graphs():
    g = Graph("blocks")
    h = g.add(Node("x", "input", (4,), F32, CPU))
    g.inputs.append(h)
    for block in range(12):
        for k in range(10):
            h = _op(g, f"net.{block}-mul-{k}", "mul", (h, 2.0), (4,), scope=f"net.{block}.layer{k % 2}")
    g.outputs.append(h)
    nodes, _, _ = parse_dot(viz.draw(g, depth=3, legend=False).source)  # net . block . layer
    groups = [a for a in nodes.values() if a.get("shape") == "box3d"]
    assert len(groups) == 24 and "5 ops: mul x5" in groups[0]["label"]
    source = viz.draw(g, max_nodes=20).source
    nodes, _, _ = parse_dot(source)
    assert len(nodes) - 1 == 1 + 12 and "folded by module (depth=2)" in source  # x, one box per block
    assert len(parse_dot(viz.draw(g, max_nodes=None, legend=False).source)[0]) == 1 + 120 * 2


def test_draw_pass_marks_removed_fused_and_new_nodes():
    before = tiny_training_graph()
    after = before.copy()
    dead = _op(before, "model-relu-9", "relu", (before.nodes[0],), (1, 5), scope="model")
    assert dead.name not in {n.name for n in after.nodes}
    # fuse add+sub of the optimizer into one node named like the tail, drop the momentum add
    sub = next(n for n in after.nodes if n.name == "opt-sub-7")
    after.nodes = [n for n in after.nodes if n.name != "opt-add-6"]
    sub.inputs = (sub.inputs[0], next(n for n in after.nodes if n.name == "w-momentum"))
    after.updates["model.w-momentum"] = sub
    folded_const = after.add(Node("folded-0", "constant", (1,), F32, CPU, value=flow.ones(1).array))
    _op(after, "opt-mul-10", "mul", (folded_const, 1.0), (1,), phase="optimizer")

    drawing = viz.draw_pass(before, after, fused={"opt-sub-7": ["opt-add-6", "opt-sub-7"]})
    nodes, _, clusters = parse_dot(drawing.source)
    assert {"cluster_before", "cluster_after", "cluster_before_forward", "cluster_after_optimizer"} <= set(clusters)

    def marked(name: str, side: str) -> dict:
        (found,) = [a for nid, a in nodes.items() if nid.startswith(side) and f"%{name}" in label_lines(a)]
        return found

    assert marked("model-relu-9", "b_")["color"] == style.MARKS["removed"][0]["color"]  # inferred removal
    assert marked("opt-add-6", "b_")["color"] == style.MARKS["fused_away"][0]["color"]
    fused = marked("opt-sub-7", "a_")
    assert fused["fillcolor"] == style.MARKS["fused"][0]["fillcolor"] and "fused: %opt-add-6" in fused["label"]
    assert marked("opt-mul-10", "a_")["color"] == style.MARKS["new"][0]["color"]
    assert "color" not in marked("model-matmul-0", "a_")  # untouched
    assert "1 removed" in drawing.source and "2 fused into 1" in drawing.source
    with pytest.raises(ValueError, match="not nodes of the 'before' graph"):
        viz.draw_pass(before, after, removed=["no-such-node"])
    with pytest.raises(ValueError, match="not nodes of the 'after' graph"):
        viz.draw_pass(before, after, fused={"ghost": ["opt-add-6"]})


def test_draw_pass_context_keeps_changed_nodes_and_neighbours():
    before = tiny_training_graph()
    after = before.copy()
    after.nodes = [n for n in after.nodes if n.name != "model-mul-3"]
    del after.updates["model.mean"]
    nodes, _, _ = parse_dot(viz.draw_pass(before, after, context=1, legend=False).source)
    tooltips = sorted(a.get("tooltip", "").split(" ")[0] for a in nodes.values())
    assert tooltips == ["", "%mean", "%model-mul-3"]  # the removed op, its literal 0.9 and its input
    assert any(a.get("color") == style.MARKS["removed"][0]["color"] for a in nodes.values())
    source = viz.draw_pass(before, before.copy(), context=1).source
    assert "No node changed." in source and "%" not in source.split("label=")[-1]


class _Model(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = flow.nn.Linear(3, 4)
        self.fc2 = flow.nn.Linear(4, 1)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _train_graph():
    model = _Model()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    class TrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = flow.nn.MSELoss()
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    return TrainGraph()


def test_traced_nn_graph_and_its_passes():
    graph = _train_graph()
    graph(flow.randn(8, 3), flow.randn(8, 1))
    traced = graph.traced_ir
    nodes, edges, clusters = parse_dot(viz.draw(traced).source)
    assert {"cluster_forward", "cluster_backward", "cluster_optimizer"} <= set(clusters)
    assert len([e for e in edges if e[2].get("label") == "update"]) == len(traced.updates)
    kinds = {n.state_kind for n in traced.states}
    assert {"parameter", "optimizer", "system"} <= kinds
    assert {"model.fc1.weight", "model.fc2.bias"} <= {label_lines(a)[0] for a in nodes.values()}
    assert "cluster_forward_m" in viz.draw(graph).source  # an nn.Graph draws by module, its .ir by phase
    for report in graph.passes:
        source = viz.draw_pass(report).source
        assert f"before {report.name}" in source
        fused = style.MARKS["fused"][0]["fillcolor"]
        assert source.count(fused) == len(report.fused) + (1 if report.fused else 0)  # + the legend swatch


# ------------------------------------------------------------------------------ nn.Graph by module

TAG = re.compile(r"\((GRAPH|CONFIG|MODULE|PARAMETER|BUFFER|INPUT|OUTPUT):([^:]+):")


def printed_entries(graph) -> list[tuple[str, str]]:
    """(tag, name) of every entry print(graph) shows, in order."""
    return TAG.findall(repr(graph))


def drawn_entries(source: str) -> list[tuple[str, str]]:
    """(tag, name) of every outline entry a module drawing shows, in outline order: GRAPH and CONFIG from
    the caption; entry nodes and module boxes (ids e<index>) by their tooltip, the entry's header; module
    clusters (..._m<index>) by their title."""
    nodes, _, clusters = parse_dot(source)
    found = {}
    for nid, a in nodes.items():
        if m := re.fullmatch(r"e(\d+)", nid):
            found[int(m.group(1))] = TAG.match(a["tooltip"]).groups()
    for name, a in clusters.items():
        if m := re.search(r"_m(\d+)$", name):
            found[int(m.group(1))] = ("MODULE", a["label"].split(": ")[0])
    (caption,) = re.findall(r'^\tlabel="(.*)"$', source, re.MULTILINE)
    return TAG.findall(caption.split("\\l")[0]) + [found[i] for i in sorted(found)]


def entry_ids(graph) -> dict[str, str]:
    return {e.name: f"e{i}" for i, e in enumerate(graph.outline().walk())}


def test_nn_graph_by_module_draws_exactly_the_entries_print_shows():
    graph = _train_graph()
    source = viz.draw(graph).source  # before the first call: modules and their parameters
    assert "Not compiled yet" in source
    assert drawn_entries(source) == printed_entries(graph)
    graph(flow.randn(8, 3), flow.randn(8, 1))
    printed = printed_entries(graph)
    assert {"INPUT", "OUTPUT", "PARAMETER", "MODULE"} <= {tag for tag, _ in printed}
    assert drawn_entries(viz.draw(graph).source) == printed
    nodes, _, _ = parse_dot(viz.draw(graph).source)
    ids = entry_ids(graph)
    for name, tag in (("model.fc1.weight", "PARAMETER"), ("_model.fc2-input_0", "INPUT"),
                      ("_loss_fn-output_0", "OUTPUT")):
        drawn, look = nodes[ids[name]], style.ROLES[tag][0]
        assert (drawn["shape"], drawn["fillcolor"]) == (look["shape"], look["fillcolor"])
        assert tag in nodes["legend"]["label"]
    assert style.ROLES["PARAMETER"][0]["fillcolor"] == style.ROLES["state_parameter"][0]["fillcolor"]


def test_nn_graph_ops_sit_in_the_cluster_of_their_module():
    graph = _train_graph()
    graph(flow.randn(8, 3), flow.randn(8, 1))
    nodes, _, clusters = parse_dot(viz.draw(graph).source)
    index = {e.name: i for i, e in enumerate(graph.outline().walk()) if e.tag == "MODULE"}
    ir = {n.name: n for n in graph.ir.nodes}
    seen = set()
    for a in nodes.values():
        node = ir.get(a.get("tooltip", "").split(" ")[0][1:])
        if node is None or node.kind != "op":
            continue
        seen.add(node.phase)
        module = node.scope.rsplit(".", 1)[0] if node.phase == "optimizer" else node.scope
        if node.phase == "forward":
            assert a["cluster"].endswith(f"_m{index[module]}"), (node.name, a["cluster"])
        elif node.phase == "backward":
            assert a["cluster"].endswith(f"_b{index[module]}"), (node.name, a["cluster"])
            assert "(backward)" in clusters[a["cluster"]]["label"]
        else:
            assert a["cluster"] == "cluster_optimizer"
    assert seen == {"forward", "backward", "optimizer"}
    assert clusters["cluster_forward_m" + str(index["model"]) + "_m" + str(index["model.fc1"])]["label"] == \
        "model.fc1: Linear(in_features=3, out_features=4, bias=True)"


def test_nn_graph_edges_pass_through_module_inputs_and_outputs(fast_path):   # (one fused linear op a layer)
    graph = _train_graph()
    graph(flow.randn(8, 3), flow.randn(8, 1))
    nodes, edges, _ = parse_dot(viz.draw(graph).source)
    pairs = {(t, h) for t, h, _ in edges}
    ids = entry_ids(graph)
    (linear,) = [nid for nid, a in nodes.items() if a.get("tooltip", "").startswith("%model.fc1-linear-")]
    chain = [ids[f"_{graph.name}-input_0"], ids["_model-input_0"], ids["_model.fc1-input_0"], linear,
             ids["_model.fc1-output_0"]]
    assert all(step in pairs for step in itertools.pairwise(chain))
    assert (ids["model.fc1.weight"], linear) in pairs and (ids["model.fc1.bias"], linear) in pairs
    assert (ids["_model-output_0"], ids["_loss_fn-input_0"]) in pairs
    assert (ids["_loss_fn-output_0"], ids[f"_{graph.name}-output_0"]) in pairs
    assert nodes[ids[f"_{graph.name}-output_0"]].get("peripheries") == "2"  # the graph's output
    updated = {h for t, h, a in edges if a.get("label") == "update"}
    assert {ids[f"model.{fc}.{p}"] for fc in ("fc1", "fc2") for p in ("weight", "bias")} <= updated
    touched = {t for t, _ in pairs} | {h for _, h in pairs}
    assert all(nid in touched for nid in nodes if re.fullmatch(r"e\d+", nid))  # no entry floats alone
    saved = [a for _, _, a in edges if a.get("constraint") == "false" and a.get("label") != "update"]
    assert saved and all(a["color"] == style.EDGES["saved"]["color"] for a in saved)  # forward -> backward
    assert not any(a.get("constraint") == "false" and a.get("label") != "update"
                   for _, _, a in parse_dot(viz.draw(graph, show_saved=False).source)[1])


def test_nn_graph_depth_folds_modules_into_boxes():
    graph = _train_graph()
    graph(flow.randn(8, 3), flow.randn(8, 1))
    source = viz.draw(graph, depth=1).source
    nodes, _, clusters = parse_dot(source)
    assert drawn_entries(source) == [(t, n) for t, n in printed_entries(graph) if n.count(".") == 0
                                     and not n.startswith(("_model", "_loss_fn"))]
    ids = entry_ids(graph)
    box = label_lines(nodes[ids["model"]])
    forward_ops = [n for n in graph.ir.nodes if n.kind == "op" and n.phase == "forward" and n.scope.startswith("model")]
    # The box says its module and the layers it runs, read from its ops; the tooltip counts ops and state.
    assert box == ["model: _Model", "linear 3->4, ReLU", "linear 4->1"] and nodes[ids["model"]]["shape"] == "box3d"
    tooltip = nodes[ids["model"]]["tooltip"].split("\\n")
    assert tooltip[1].startswith(f"{len(forward_ops)} ops: ") and tooltip[2] == "4 parameters"
    assert {"model (backward)", "model (update)"} <= {label_lines(a)[0] for a in nodes.values()}
    assert not any(name.startswith("cluster_forward_m") for name in clusters)
    updated = {h for _, h, a in parse_dot(source)[1] if a.get("label") == "update"}
    assert ids["model"] not in updated and len(updated) == 1  # implied by the box names; the train step's stays
    assert "'(update)' box writes" in source
    with pytest.raises(ValueError, match="depth"):
        viz.draw(graph, depth=0)


def test_nn_graph_options_forward_only_traced_ir_and_layout():
    graph = _train_graph()
    graph(flow.randn(8, 3), flow.randn(8, 1))
    forward = viz.draw(graph, forward_only=True, rankdir="LR", legend=False).source
    _, _, clusters = parse_dot(forward)
    assert not {"cluster_forward", "cluster_backward", "cluster_optimizer"} & set(clusters)
    assert "rankdir=LR" in forward and "cluster_legend" not in forward
    assert drawn_entries(forward) == printed_entries(graph)  # every entry, whatever the phases
    optimized = {label_lines(a)[0] for a in parse_dot(viz.draw(graph).source)[0].values()}
    traced = {label_lines(a)[0] for a in parse_dot(viz.draw(graph, ir="traced").source)[0].values()}
    assert any(name.startswith("fused") for name in optimized) and not any(n.startswith("fused") for n in traced)
    nodes, edges, _ = parse_dot(viz.draw(graph, updates="nodes").source)
    sinks = {label_lines(a)[0] for a in nodes.values() if label_lines(a)[0].startswith("new ")}
    assert {"new weight", "new bias"} <= sinks and not any(a.get("label") == "update" for _, _, a in edges)
    with pytest.raises(ValueError, match="ir must be"):
        viz.draw(graph, ir="final")
    with pytest.raises(TypeError, match="names="):
        viz.draw(graph, names={})


def test_nn_graph_pass_through_and_never_called_modules():
    class Net(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.skip = flow.nn.Identity()
            self.fc = flow.nn.Linear(2, 2)
            self.unused = flow.nn.ReLU()

        def forward(self, x):
            return self.fc(self.skip(x))

    class Infer(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def build(self, x):
            return self.net(x)

    graph = Infer()
    graph(flow.randn(3, 2))
    source = viz.draw(graph).source
    nodes, edges, clusters = parse_dot(source)
    ids, pairs = entry_ids(graph), {(t, h) for t, h, _ in edges}
    assert (ids["_net.skip-input_0"], ids["_net.skip-output_0"]) in pairs  # the value passes through
    (note,) = [a for a in nodes.values() if a["label"] == "(not called)"]
    assert clusters[note["cluster"]]["label"] == "net.unused: ReLU()"
    assert "cluster_forward" not in clusters and drawn_entries(source) == printed_entries(graph)


def test_renamed_by_passes_follows_names_through_every_pass():
    from types import SimpleNamespace

    from toynet.viz.draw_pass import renamed_by_passes

    reports = [SimpleNamespace(removed=["dead"], merged={"dup": "a"}, fused={}),
               SimpleNamespace(removed=[], merged={}, fused={"f": ["a", "b", "f"]})]
    assert renamed_by_passes(reports) == {"dead": None, "dup": "f", "a": "f", "b": "f"}
    graph = _train_graph()
    graph(flow.randn(8, 3), flow.randn(8, 1))
    renamed, names = renamed_by_passes(graph.passes), {n.name for n in graph.ir.nodes}
    held = [e.node for e in graph.outline().walk() if e.node is not None]
    assert held and all(renamed.get(name, name) in names | {None} for name in held)


def test_the_module_drawing_docstring_example_runs():
    import doctest
    import importlib

    # (the module, not the function flow.viz.draw_module that shares its name, as draw_pass does)
    draw_module = importlib.import_module("toynet.viz.draw_module")
    assert doctest.testmod(draw_module).failed == 0


@pytest.fixture(scope="module")
def mobilenet_graph():
    from scripts_on_path import figures
    mobilenet_graph = figures.mobilenet_graph

    flow.manual_seed(0)
    return mobilenet_graph(batch=2)


def test_mobilenet_graph_is_folded_by_block_and_keeps_the_printed_entries(mobilenet_graph):
    full = viz.draw(mobilenet_graph, max_nodes=None, forward_only=True).source
    assert drawn_entries(full) == printed_entries(mobilenet_graph)  # 870 entries, BUFFERs included
    source = viz.draw(mobilenet_graph).source
    nodes, _, _ = parse_dot(source)
    assert len(nodes) - 1 <= viz.MODULE_MAX_NODES and "(depth=3)" in source
    labels = [label_lines(a) for a in nodes.values()]
    assert ["model.features.1: InvertedResidual", "dwconv 3x3 32, BN, ReLU6", "conv 1x1 32->16, BN"] in labels
    assert any(lines[0] == "model.features.1 (backward)" for lines in labels)
    assert "show_saved=True" in source  # the saved-value edges of a big graph are left out, and it says so


def test_module_boxes_say_the_layers_not_op_counts(mobilenet_graph):
    """MobileNetV2 collapsed to its blocks: each box says its convolutions, BatchNorms and activations (read from
    the ops and their attributes), not "reshape x291"; the op counts go to the tooltip."""
    source = viz.draw_module(mobilenet_graph, forward_only=True).source  # depth="blocks": model.features.*
    nodes, _, clusters = parse_dot(source)
    boxes = {label_lines(a)[0]: label_lines(a)[1:] for a in nodes.values() if a.get("shape") == "box3d"}
    assert len([b for b in boxes if b.startswith("model.features.")]) == 19
    assert boxes["model.features.0: ConvBNActivation"] == ["conv 3x3 s2 3->32, BN, ReLU6"]
    assert boxes["model.features.2: InvertedResidual"] == [
        "conv 1x1 16->96, BN, ReLU6", "dwconv 3x3 s2 96, BN, ReLU6", "conv 1x1 96->24, BN"]
    assert boxes["model.features.3: InvertedResidual"][-1] == "+ residual"  # x + conv(x): same shape, no stride
    assert boxes["model.features.18: ConvBNActivation"] == ["conv 1x1 320->1280, BN, ReLU6"]
    assert boxes["model.classifier.1: Linear"] == ["linear 1280->1000"]
    assert boxes["model.classifer.1: Linear"] == ["(not called)"]  # the tutorial's typo: a head never called
    text = "\n".join(line for lines in boxes.values() for line in lines)
    assert "conv 3x3" in text and not re.search(r"\b(reshape|getitem|batch_norm_stats) x\d", text)
    assert not re.search(r"\w x\d", text)  # no op counts at all in the labels...
    box = next(a for a in nodes.values() if label_lines(a)[0] == "model.features.2: InvertedResidual")
    assert re.search(r"\d+ ops: .*conv2d(_fused)? x3", box["tooltip"]) and "(MODULE:model.features.2:" in box["tooltip"]
    assert not any("backward" in a.get("label", "") for a in clusters.values())  # forward_only
    # depth="blocks" is one level below the biggest Sequential; depth=3 is the same picture
    assert viz.draw_module.__module__ == "toynet.viz" and viz.draw(mobilenet_graph, depth=3,
                                                                 forward_only=True).source == source
    features = label_lines(next(a for a in parse_dot(viz.draw(mobilenet_graph, depth=2, forward_only=True).source)[0]
                                .values() if label_lines(a)[0] == "model.features: Sequential"))
    assert features == ["model.features: Sequential", "149 layers:", "35 conv, 52 BN, 35 ReLU6, 17 dwconv,",
                        "10 residual"]  # 19 blocks in one box: their layers by kind
    from toynet.viz.draw_module import blocks_depth
    assert blocks_depth(mobilenet_graph.outline()) == 3 and blocks_depth(_train_graph().outline()) is None


def test_draw_module_expanded_one_module_and_errors(mobilenet_graph):
    block = viz.draw_module(mobilenet_graph, depth=None, forward_only=True, module="model.features.3").source
    nodes, _, clusters = parse_dot(block)
    names = [label_lines(a)[0] for a in nodes.values()]
    assert sum(n.startswith("conv2d") for n in names) == 3 and "add" in names  # (the fast path: conv2d_fused)
    assert any(n.startswith("conv2d") and "groups=144" in n for n in names)  # the depthwise one
    assert not any("model.features.4" in a.get("label", "") for a in clusters.values())
    assert "Only model.features.3" in block
    with pytest.raises(ValueError, match="drawn as a box"):
        viz.draw_module(mobilenet_graph, depth=3, module="model.features.3")
    with pytest.raises(ValueError, match="not a module"):
        viz.draw_module(mobilenet_graph, module="model.nothing")
    with pytest.raises(TypeError, match="put it in an nn.Graph"):
        viz.draw_module(mobilenet_graph.model)
    with pytest.raises(ValueError, match="blocks"):
        viz.draw(tiny_training_graph(), depth="blocks")


def test_layer_lines_of_convolutions_linear_maps_and_unknown_ops():
    from toynet.viz.module_summary import layer_lines

    class Net(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = flow.nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
            self.pool = flow.nn.MaxPool2d(2)
            self.fc = flow.nn.Linear(8, 5)

        def forward(self, x):
            y = self.pool(flow.sigmoid(self.conv(x)))
            return self.fc(y.reshape(y.shape[0], -1))

    class Infer(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def build(self, x):
            return self.net(x)

    graph = Infer()
    graph(flow.randn(2, 4, 4, 4))
    ops = [n for n in graph.ir.nodes if n.kind == "op" and n.phase == "forward"]
    assert layer_lines(ops) == ["conv 3x3 s2 g2 4->8, sigmoid", "maxpool 2x2 s2", "linear 8->5"]
    assert layer_lines([n for n in ops if n.op_name == "reshape"]) == ["reshape"]  # no layer: what the ops are
    conv, pool = ([n for n in ops if n.op_name == name] for name in ("conv2d", "max_pool2d"))
    assert layer_lines(conv * 9, max_lines=3) == ["conv 3x3 s2 g2 4->8  x9"]  # repeated lines are counted
    assert layer_lines((conv + pool) * 4, max_lines=3) == ["8 layers:", "4 conv, 4 maxpool"]  # too many: by kind


@needs_dot
def test_nn_graph_notebook_display(mobilenet_graph):
    graph = _train_graph()
    before = graph._repr_mimebundle_()
    assert "<svg" in before["image/svg+xml"] and before["text/plain"] == repr(graph)
    graph(flow.randn(8, 3), flow.randn(8, 1))
    assert "model.fc1" in graph._repr_mimebundle_()["image/svg+xml"]
    svg = mobilenet_graph._repr_mimebundle_(include=["image/svg+xml"])["image/svg+xml"]
    assert svg.count('class="node"') <= viz.jupyter.MODULE_MAX_NODES + 1 and "depth=3" in svg


# ------------------------------------------------------------------------------------------ recording


def _record_seed(**options):
    with viz.record(**options) as rec:
        x = flow.ones(1, 5)  # the input
        w = flow.randn(5, 3, requires_grad=True)
        b = flow.randn(1, 3, requires_grad=True)
        z = flow.matmul(x, w) + b

        y = flow.zeros(1, 3)  # the label
        l = flow.sum(1 / 2 * (z - y) ** 2)  # noqa: F841
    return rec


def test_record_groups_steps_by_statement_with_stable_layout():
    trace_before = sys.gettrace()
    rec = _record_seed()
    assert sys.gettrace() is trace_before and rec not in flow.mode.op_observers
    frames = rec.frames
    assert [f.source.splitlines()[0] for f in frames] == [
        "x = flow.ones(1, 5)  # the input", "z = flow.matmul(x, w) + b", "y = flow.zeros(1, 3)  # the label",
        "l = flow.sum(1 / 2 * (z - y) ** 2)"]  # tool comments (noqa) are left out
    assert len(frames[0].source.splitlines()) == 3  # x, w, b: tensor-creating statements merge
    for f in frames:
        assert linecache.getline(__file__, f.lineno).strip().startswith(f.source.splitlines()[0])
    parsed = [parse_dot(f.dot) for f in frames]
    assert all(set(p[0]) == set(parsed[0][0]) for p in parsed)  # every frame holds every node
    visible = [{nid for nid, a in p[0].items() if a.get("style") != "invis" and nid != "legend"} for p in parsed]
    assert [len(v) for v in visible] == [3, 3 + 4, 3 + 4 + 1, 3 + 4 + 1 + 10]
    assert all(a < b for a, b in itertools.pairwise(visible))
    names = [{label_lines(p[0][n])[0] for n in v} for p, v in zip(parsed, visible)]
    assert {"x", "w", "b"} <= names[0] and "z" in names[1] and "y" in names[2] and "l" in names[3]
    assert set(frames[1].added) == visible[1] - visible[0]
    highlight = style.MARKS["highlight"][0]["color"]
    assert all(parsed[1][0][n].get("color") == highlight for n in frames[1].added)


def test_record_options_op_steps_and_manual_groups():
    assert len(_record_seed(merge_creations=False).frames) == 6
    op_frames = _record_seed(group="op").frames
    assert len(op_frames) == 3 + 2 + 1 + 4  # x, w, b; matmul, add; y; sub, pow, mul, sum
    assert [f.label for f in op_frames[3:5]] == ["matmul in: z = flow.matmul(x, w) + b", "add in: z = flow.matmul(x, w) + b"]
    with viz.record() as rec:
        x = flow.ones(1, 5)
        w = flow.randn(5, 3, requires_grad=True)
        b = flow.randn(1, 3, requires_grad=True)
        rec.step("x, w, b")
        z = flow.matmul(x, w) + b
        rec.step()  # labelled with its source
        y = flow.zeros(1, 3)
        l = flow.sum(1 / 2 * (z - y) ** 2)
        rec.step("loss")
        l.backward()  # backward's own ops are not part of the recorded program
    assert [f.label for f in rec.frames] == ["x, w, b", "z = flow.matmul(x, w) + b", "loss"]
    whole, last = parse_dot(rec.drawing().source)[0], parse_dot(rec.frames[-1].dot)[0]
    assert set(whole) == set(last) and not any(a.get("style") == "invis" for a in whole.values())
    assert not any(a.get("color") == style.MARKS["highlight"][0]["color"] for a in whole.values())
    with viz.record(include_backward=True) as rec:
        l = flow.matmul(x, w).sum()
        l.backward()
    assert [f.source for f in rec.frames] == ["l = flow.matmul(x, w).sum()", "l.backward()"]
    with pytest.raises(ValueError, match="group"):
        viz.record(group="line")


def test_record_cleans_up_after_an_error():
    trace_before = sys.gettrace()
    observers = list(flow.mode.op_observers)
    with pytest.raises(ValueError, match="inside the block"), viz.record():
        a = flow.ones(2) * 2  # noqa: F841
        raise ValueError("an error inside the block")
    assert sys.gettrace() is trace_before
    assert flow.mode.op_observers == observers


def test_record_static_nodes_reported_by_hand_and_by_the_tracer():
    g = tiny_training_graph()
    with viz.record(updates="nodes") as rec:
        for node in g.nodes:
            rec.on_node(node, graph=g)
    frames = rec.frames
    assert [f.label for f in frames] == ["graph inputs: x", "forward model: matmul, add", "forward loss: sum",
                                         "forward model: mul", "backward model: permute, matmul",
                                         "optimizer (graph): add, sub, add"]
    ids = set(parse_dot(frames[0].dot)[0])
    assert all(set(parse_dot(f.dot)[0]) == ids for f in frames)
    last = parse_dot(frames[-1].dot)[0]
    assert all(a.get("style") != "invis" for a in last.values())

    graph = _train_graph()
    with viz.record() as rec:
        graph(flow.randn(8, 3), flow.randn(8, 1))
    labels = [f.label for f in rec.frames]
    assert labels[0].startswith("graph inputs")
    assert any(label.startswith("forward model.fc1") for label in labels)
    assert any(label.startswith("backward") for label in labels)
    assert any(label.startswith("optimizer") for label in labels)
    updates = [e for e in parse_dot(rec.frames[-1].dot)[1] if e[2].get("label") == "update"]
    assert len(updates) == len(graph.traced_ir.updates)  # the traced graph was found after the block


def _svg_text_px(svg):
    """The pixels a point of ``svg`` is shown at (its width over its viewBox) and its smallest text, in px."""
    width = float(re.search(r'<svg[^>]* width="([\d.]+)px"', svg)[1])
    box = float(re.search(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+)', svg)[1])
    sizes = [float(v) for v in re.findall(r'font-size="([\d.]+)"', svg)]
    return width / box, min(sizes) * width / box


@needs_dot
def test_frames_are_cropped_to_what_they_draw_in_one_layout():
    from PIL import Image

    frames = _record_seed().frames
    first, last = frames[0].extent, frames[-1].extent
    assert first.bb == last.bb  # one layout: invisible nodes keep their places
    assert set(first.nodes) < set(last.nodes) and all(last.nodes[n] == box for n, box in first.nodes.items())
    assert first.smallest_text == last.smallest_text == 9  # the legend's text
    assert set(frames[1].added) == set(frames[1].extent.nodes) - set(first.nodes)
    windows = [f.window() for f in frames]
    heights = [w[3] - w[1] for w in windows]
    assert heights == sorted(heights) and heights[0] < 0.4 * heights[-1]  # x, w, b: a third of the whole
    assert all(w[3] == windows[0][3] for w in windows)  # the top (legend, inputs) is the same in every step
    png = frames[0].to_png()
    size = Image.open(io.BytesIO(png)).size
    scale = frames[0].scale()
    assert scale == pytest.approx(96 / 72, abs=1e-3)  # dot's own 96 dpi: the 9 pt legend is 12 px
    assert size == pytest.approx(((windows[0][2] - windows[0][0]) * scale, heights[0] * scale), abs=1)
    assert first.smallest_text * size[1] / heights[0] >= 11
    shown = frames[0]._repr_mimebundle_()  # a notebook shows a frame as its still
    assert shown["text/plain"].startswith("<toynet.viz.Frame 1: x = flow.ones(1, 5)")
    assert _svg_text_px(shown["image/svg+xml"]) == pytest.approx((scale, 12), abs=0.01)
    assert set(frames[0]._repr_mimebundle_(include=["image/svg+xml"])) == {"image/svg+xml"}
    # shrunk to fit, but never under 11 px text: 9 pt at 11/9 px a point
    assert frames[-1].scale(max_px=300) == pytest.approx(11 / 9, abs=1e-3)
    assert frames[0].scale(max_px=560) == pytest.approx(560 / max(windows[0][2] - windows[0][0], heights[0]),
                                                        abs=1e-3)  # shrunk to fit where that is legible


def test_follow_keeps_the_new_nodes_in_a_window_that_fits():
    whole = (0.0, 0.0, 100.0, 1000.0)
    assert viz.frames.follow(whole, (100, 1000), (0, 0, 10, 10)) == whole  # it fits: no camera
    top = viz.frames.follow(whole, (100, 200), (40, 950, 60, 990))
    assert top == (0.0, 800.0, 100.0, 1000.0)  # kept inside the whole
    window = viz.frames.follow(whole, (100, 200), (40, 400, 60, 440))
    assert window[1] == 400 - viz.frames.MARGIN and window[3] - window[1] == 200  # new nodes at the bottom
    assert viz.frames.follow(whole, (100, 200), None, window) == window  # nothing new: stay
    lr = viz.frames.follow((0.0, 0.0, 1000.0, 50.0), (200, 50), (400, 0, 440, 50), rankdir="LR")
    assert lr[2] == 440 + viz.frames.MARGIN  # left to right: the new nodes at the right edge
    # New nodes longer than the window: where they start (their top; across the ranks, their left end)
    assert viz.frames.follow(whole, (100, 200), (40, 300, 60, 700)) == (0, 700 + viz.frames.MARGIN - 200, 100,
                                                                        700 + viz.frames.MARGIN)
    wide = viz.frames.follow((0.0, 0.0, 1000.0, 1000.0), (200, 1000), (100, 0, 900, 50))
    assert wide[0] == 100 - viz.frames.MARGIN and wide[2] - wide[0] == 200
    assert viz.frames.follow((0.0, 0.0, 1000.0, 50.0), (200, 50), (100, 0, 900, 50), rankdir="LR")[0] == 92


@needs_dot
def test_gif_has_one_frame_per_step(tmp_path):
    from PIL import Image

    rec = _record_seed()
    path = rec.to_gif(str(tmp_path / "build.gif"), fps=2)
    with Image.open(path) as gif:
        assert gif.n_frames == len(rec.frames) == 4
        sizes = set()
        for i in range(gif.n_frames):
            gif.seek(i)
            sizes.add(gif.size)
            assert gif.info["duration"] == 500
    assert len(sizes) == 1
    with pytest.raises(ValueError, match="nothing to animate"):
        viz.gif.to_gif([], str(tmp_path / "empty.gif"))


@needs_dot
def test_gif_text_is_legible_at_its_size(tmp_path):
    from PIL import Image

    rec = _record_seed()
    whole = rec.frames[-1].window()
    smallest = rec.frames[-1].extent.smallest_text
    for width, height in ((900, 620), (600, 400), (900, 2000)):
        shape = viz.gif.geometry(rec.frames, width, height)
        path = rec.to_gif(str(tmp_path / f"build{width}x{height}.gif"), width=width, height=height)
        with Image.open(path) as gif:
            sizes = set()
            for i in range(gif.n_frames):
                gif.seek(i)
                sizes.add(gif.size)
        assert sizes == {shape.size} and shape.size[0] <= width and shape.size[1] <= height
        assert smallest * shape.scale >= 11 * 0.995 and shape.text_px(900) >= 11 * 0.995  # text px = pt x px/pt
        assert shape.log is None and shape.graph[3] == shape.size[1]  # no log: the graph fills the frame
        views = viz.gif._views(rec.frames, shape)
        if height == 2000:  # room for all: the whole graph at dot's 96 dpi, no window to follow
            assert not shape.follows and shape.scale == pytest.approx(96 / 72, abs=1e-3)
            assert all(window == whole for _, window in views)
            assert shape.graph[3] - shape.graph[1] == pytest.approx((whole[3] - whole[1]) * shape.scale, abs=1)
        else:  # too tall at 11 px text: a window that follows the new nodes, the last step's at the bottom
            assert shape.follows and shape.scale == pytest.approx(11 / 9, abs=1e-3)
            assert views[0][1] != views[-1][1]
            focus, window = rec.frames[-1].focus(), views[-1][1]
            if focus[3] - focus[1] + 2 * viz.frames.MARGIN <= shape.window[1]:  # the new nodes fit: at the bottom
                loss = rec.frames[-1].extent.nodes[rec.frames[-1].added[-1]]
                assert window[1] == pytest.approx(whole[1]) and window[1] <= loss[1] and loss[3] <= window[3]
            else:  # they do not: where they start, joining what was there
                assert window[3] == pytest.approx(focus[3] + viz.frames.MARGIN, abs=1)
    with pytest.raises(ValueError, match="no room"):
        viz.gif.geometry(rec.frames, 300, 90)


def _record_graph_build(level=1):
    graph = _train_graph()
    graph.debug(level)
    with contextlib.redirect_stdout(io.StringIO()), viz.record() as rec:
        graph(flow.randn(8, 3), flow.randn(8, 1))
    return rec


@needs_dot
def test_graph_mode_gif_fits_a_laptop_with_the_log_beside_the_graph(tmp_path):
    """A Graph-mode build: 900 x 620 frames, every frame the same; the graph panel left, the log's right, side
    by side at the same height; every text at least 11 px when the GIF is shown 900 px wide (a docs column,
    a notebook output); the window follows the new nodes, and a map shows where it is."""
    from PIL import Image

    rec = _record_graph_build()
    shape = viz.gif.geometry(rec.frames)
    assert shape.size == (viz.gif.FRAME_WIDTH, viz.gif.FRAME_HEIGHT) == (900, 620) and shape.size[1] <= 700
    (gx0, gy0, gx1, gy1), (lx0, ly0, lx1, ly1) = shape.graph, shape.log
    assert gx0 == 0 and gx1 <= lx0 and lx1 <= shape.size[0] and (gy0, gy1) == (ly0, ly1) == (shape.caption[3], 620)
    assert lx1 - lx0 >= 360 and gx1 - gx0 >= 480  # room for 49 characters of log, and the graph
    assert shape.log_px == viz.gif.LOG_FONT_PX >= 11 and shape.caption_px >= 11
    assert rec.frames[-1].extent.smallest_text * shape.scale >= 11 * 0.995
    assert shape.text_px(900) >= 11 * 0.995 and shape.text_px(600) < 11  # legible at 900 px, not much less
    path = rec.to_gif(str(tmp_path / "build.gif"))
    with Image.open(path) as gif:
        assert gif.n_frames == len(rec.frames)
        for i in range(gif.n_frames):
            gif.seek(i)
            assert gif.size == shape.size
            if i == 1:
                frame2 = gif.convert("RGB")
    # The still of step 2 is that frame of the GIF, in full colour; the log is beside the graph in it too.
    still = rec.still(1)
    assert still.format == "png" and still._repr_png_() == still.data and still._repr_html_() is None
    picture = Image.open(io.BytesIO(still.data)).convert("RGB")
    assert picture.size == shape.size and "step 2/" in still.alt
    log_box = picture.crop(shape.log)
    parameter = tuple(int(style.ROLES["PARAMETER"][0]["fillcolor"][i:i + 2], 16) for i in (1, 3, 5))
    assert parameter in {c for _, c in log_box.getcolors(1 << 16)}  # model.fc1's PARAMETER lines, on their fill
    difference = [abs(a - b) for a, b in zip(picture.crop(shape.graph).tobytes(), frame2.crop(shape.graph).tobytes())]
    assert max(difference) <= 40 and sum(difference) / len(difference) < 2  # the GIF's palette, nothing more
    if shape.follows:  # the map: the whole graph as boxes, the window outlined
        window = tuple(int(viz.gif.MAP_COLOURS["window"][i:i + 2], 16) for i in (1, 3, 5))
        assert window in {c for _, c in picture.crop(shape.graph).getcolors(1 << 16)}
    plain = viz.gif.geometry(rec.frames, log=False)
    assert plain.log is None and plain.size[0] == shape.size[0] - viz.gif.LOG_PX and plain.scale == shape.scale
    # The notebook player: the log beside the picture too (one row that does not wrap), in 12 px text.
    widgets = pytest.importorskip("ipywidgets")
    player = rec.player()
    body = player.children[2]
    assert isinstance(body, widgets.HBox) and body.children == (player.picture, player.debug_log)
    assert body.layout.flex_flow in (None, "row") and "font:12px" in player.debug_log.value


@needs_dot
def test_notebook_display_helpers(tmp_path):
    rec = _record_seed()
    shown = rec.gif(fps=2, alt="the graph of l")
    assert shown.format == "gif" and shown.data.startswith(b"GIF8") and shown._repr_png_() is None
    html_ = shown._repr_html_()
    assert html_.startswith('<img src="data:image/gif;base64,') and 'alt="the graph of l"' in html_
    path = rec.to_gif(str(tmp_path / "l.gif"), fps=2)
    assert viz.show_gif(path).data == viz.show_gif(pathlib.Path(path).read_bytes()).data == shown.data
    with pytest.raises(ValueError, match="GIF"):
        viz.show_gif(rec.still(0).data)
    *_, l = seed_example()
    row = viz.side_by_side(viz.draw(l), rec.still(-1), shown, titles=("drawn", "still", "animated"))
    page = row._repr_html_()
    assert page.count("<div style='flex:0 0 auto'>") == 3 and "flex-wrap:nowrap" in page and "overflow-x:auto" in page
    assert ">matmul<" in page and "data:image/png;base64," in page and "data:image/gif;base64," in page
    assert [t in page for t in ("drawn", "still", "animated")] == [True] * 3 and "max-width:100%;" not in page
    assert viz.show_image(viz.draw(l))._repr_svg_().startswith("<svg")
    saved = rec.still(0).save(tmp_path / "still.png")
    assert pathlib.Path(saved).read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="titles"):
        viz.side_by_side(viz.draw(l), titles=("a", "b"))
    with pytest.raises(TypeError, match="cannot show"):
        viz.side_by_side(42)


def test_show_source_of_a_class_some_methods_and_a_function():
    from toynet.toy import dynamic, static
    from toynet.viz.display import Code

    whole = viz.show_source(static.Variable)
    assert isinstance(whole, Code) and str(whole).startswith("class Variable(Node):")
    picked = viz.show_source(dynamic.Tensor, "__add__", "backward")
    text = str(picked)
    assert text.startswith("class Tensor:\n    def __add__(") and "\n    def backward(self" in text
    assert "def __mul__" not in text and text.index("__add__") < text.index("def backward")
    page = picked._repr_html_()
    assert "<span style=" in page and "overflow-x:auto" in page                  # coloured by Pygments
    assert html.unescape(re.sub(r"<[^>]+>", "", page)).strip() == text.strip()     # the very same code
    assert repr(picked) == f"<toynet.viz.display.Code: {len(text.splitlines())} lines: Tensor: __add__, backward>"
    printed = io.StringIO()
    from IPython.lib.pretty import RepresentationPrinter

    printer = RepresentationPrinter(printed)
    printer.pretty(picked)
    printer.flush()
    assert printed.getvalue() == text.rstrip("\n")                                 # a saved notebook's text/plain
    assert str(viz.show_source(dynamic._value)).startswith("def _value(")          # a function, dedented
    with pytest.raises(AttributeError, match="defines no"):
        viz.show_source(static.Sub, "forward")                                      # not Sub's own method
    with pytest.raises(TypeError, match="methods of a class"):
        viz.show_source(dynamic._value, "x")


@needs_dot
def test_player_steps_through_frames():
    rec = _record_seed()
    player = rec.player(interval=300)
    assert player.slider.max == player.play.max == len(rec.frames) - 1 and player.play.interval == 300
    first_view, first_caption = player.view.value, player.caption.value
    assert first_view.startswith("<svg") and "step 1/4" in first_caption
    player.slider.value = 1
    assert player.view.value != first_view
    assert "step 2/4" in player.caption.value and "z = flow.matmul(x, w) + b" in player.caption.value
    player.slider.value = 3
    assert ">l<" in player.view.value  # the loss node's text appears in the last frame's SVG


@needs_dot
def test_player_fits_700_px_with_controls_above_and_legible_text():
    rec = _record_seed()
    player = rec.player()
    controls, caption, picture = player.children
    assert controls.children == (player.play, player.slider) and caption is player.caption
    assert picture.children == (player.view,) and picture.layout.overflow == "auto"  # a bigger picture scrolls
    px = [int((w.layout.max_height or w.layout.height).removesuffix("px")) for w in player.children]
    assert player.layout.max_height == "700px" and sum(px) + viz.player.GAPS <= 700
    assert px == [viz.player.CONTROLS, viz.player.CAPTION, player.view_height] and player.view_height >= 500
    svgs = []
    for step in range(len(rec.frames)):
        player.slider.value = step
        assert player.view.value.startswith("<svg") and player.caption.value.startswith(f"<b>step {step + 1}/")
        svgs.append(player.view.value)
    # The last step opens scrolled to the bottom, where its nodes are: the box's flex-flow starts there.
    assert picture.layout.flex_flow.endswith("wrap-reverse")
    assert viz.player.corner((0, 0, 100, 100), (80, 80, 90, 90)) == "row-reverse"  # new nodes top right
    scales, text_px = zip(*(_svg_text_px(svg) for svg in svgs))
    assert len({round(s, 3) for s in scales}) == 1  # one scale: nothing grows or shrinks between steps
    assert min(text_px) >= 11 * 0.995
    heights = [float(re.search(r'height="([\d.]+)px"', svg)[1]) for svg in svgs]
    assert heights[0] < 0.4 * heights[-1]  # the first step shows x, w and b, not the empty final frame
    # The final graph is taller than the view at 11 px text: it scrolls rather than shrinks.
    assert heights[-1] > player.view_height and player.scale == pytest.approx(11 / 9, abs=1e-3)
    small = rec.player(height=400)
    assert small.layout.max_height == "400px" and small.scale == player.scale
    with pytest.raises(ValueError, match="no room for the picture"):
        rec.player(height=150)


@needs_dot
def test_player_shows_the_source_line_of_graph_mode_steps():
    graph = _train_graph()
    with viz.record() as rec:
        graph(flow.randn(8, 3), flow.randn(8, 1))
    player = rec.player()
    steps = [i for i, f in enumerate(rec.frames) if f.label.startswith("forward model.fc1")]
    player.slider.value = steps[0]
    assert f"step {steps[0] + 1}/{len(rec.frames)}" in player.caption.value
    assert "test_viz.py:" in player.caption.value and "in forward: return self.fc2(self.fc1(x).relu())" in \
        html.unescape(player.caption.value)  # the user's line that traced the step


# ------------------------------------------------------------------------------------ rendering


@needs_dot
def test_svg_and_png_rendering():
    *_, l = seed_example()
    drawing = viz.draw(l)
    svg = viz.to_svg(drawing)
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and ">matmul<" in svg
    png = viz.to_png(drawing)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image
    assert Image.open(io.BytesIO(png)).size[0] > 100
    assert drawing.pipe(format="svg").startswith(b"<?xml")
    h = flow.randn(2, requires_grad=True)
    for _ in range(60):
        h = h * 2.0
    tall = viz.draw(h, legend=False)
    full, capped = (Image.open(io.BytesIO(viz.to_png(tall, max_size=m))).size for m in (None, 400))
    assert max(full) > 400 and max(capped) <= 400


def test_missing_dot_explains_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    *_, l = seed_example()
    drawing = viz.draw(l)
    assert "matmul" in drawing.source  # drawing works without dot
    for render in (lambda: viz.to_svg(drawing), lambda: drawing.pipe(format="png"),
                   lambda: drawing.render(str(tmp_path / "g"), format="png")):
        with pytest.raises(viz.GraphvizNotInstalled) as error:
            render()
        assert "apt-get install graphviz" in str(error.value) and "brew install graphviz" in str(error.value)
    monkeypatch.setattr(viz.jupyter, "_warned", False)
    with pytest.warns(UserWarning, match="apt-get install graphviz"):
        assert l._repr_mimebundle_() is None  # the notebook falls back to the text repr


# ------------------------------------------------------------------------------------ notebooks


NOTEBOOK_CELL = """
import toynet as flow
with flow.viz.record() as rec:
    x = flow.ones(1, 5)
    w = flow.randn(5, 3, requires_grad=True)
    z = flow.matmul(x, w)
steps = [(f.lineno, f.source) for f in rec.frames]
"""

IPYTHON_SCRIPT = """
import json, re
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
assert shell.run_cell(CELL).success
data, _ = shell.display_formatter.format(shell.user_ns["z"])
leaf, _ = shell.display_formatter.format(shell.user_ns["x"])
print(json.dumps({"steps": shell.user_ns["steps"], "formats": sorted(data), "leaf": sorted(leaf),
                  "names": re.findall(r">([xwz])<", data.get("image/svg+xml", ""))}))
"""


@needs_dot
def test_in_an_ipython_session():
    """Recording in a notebook cell (source from IPython's cache) and IPython's own display machinery."""
    import json
    import subprocess

    pytest.importorskip("IPython")
    script = f"CELL = {NOTEBOOK_CELL!r}\n" + IPYTHON_SCRIPT
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] == [[3, "x = flow.ones(1, 5)\nw = flow.randn(5, 3, requires_grad=True)"],
                               [5, "z = flow.matmul(x, w)"]]
    assert result["formats"] == ["image/svg+xml", "text/html", "text/plain"] and result["leaf"] == ["text/plain"]
    assert sorted(result["names"]) == ["w", "x", "z"]


@needs_dot
def test_notebook_display_of_tensors_and_graphs(monkeypatch):
    *_, l = seed_example()
    bundle = l._repr_mimebundle_()
    assert "<svg" in bundle["image/svg+xml"] and bundle["text/plain"] == repr(l)
    assert bundle["text/html"].startswith("<pre>tensor(")
    assert flow.ones(2)._repr_mimebundle_() is None  # no grad_fn: the plain repr
    assert set(l._repr_mimebundle_(include=["image/svg+xml"])) == {"image/svg+xml"}
    g = tiny_training_graph()
    assert "<svg" in g._repr_mimebundle_()["image/svg+xml"]
    monkeypatch.setattr(viz.jupyter, "enabled", False)
    assert l._repr_mimebundle_() is None and g._repr_mimebundle_() is None


@needs_dot
def test_notebook_display_caps_big_graphs():
    h = flow.randn(2, requires_grad=True)
    for _ in range(200):
        h = h + 1.0
    svg = h._repr_mimebundle_()["image/svg+xml"]
    assert "max_nodes=None" in svg
    assert svg.count('class="node"') <= viz.jupyter.MAX_NODES + 1  # + the legend
