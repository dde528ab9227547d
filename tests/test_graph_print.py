"""What print(graph) and graph.debug(v_level) show, compared with the seed tutorials' printed output.

The tutorials print OneFlow on a GPU (their printed blocks are kept in tests/fixtures/*.printouts.md;
the seed documents themselves, shared/seeds/, are read instead when they sit beside the checkout): their
text is normalised
before comparing (``device='cuda:0', `` removed, ``oneflow.`` -> ``toynet.``, lines wrapped at 80
columns joined again, the MobileNetV2 batch of 64 -> the 2 images used here). The tagged lines (GRAPH,
CONFIG, MODULE, PARAMETER, BUFFER, INPUT, OUTPUT), their names and their nesting are the contract.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

import toynet as flow
from toynet import nn

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
TAGS = ("(MODULE:", "(INPUT:", "(PARAMETER:", "(BUFFER:", "(OUTPUT:")


# -------------------------------------------------------------------------------------- parsing


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def seed_blocks(filename: str) -> list[str]:
    """The tutorial's printed ```text blocks, in order."""
    path = SEEDS / filename
    if not path.exists():
        path = FIXTURES / filename.replace(".md", ".printouts.md")
    return re.findall(r"```text\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL)


def entries(text: str, batch: tuple[str, str] | None = None) -> list:
    """``(indent, normalised line)`` per entry; a wrapped line is joined to its entry; ``...`` stays."""
    result: list = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip(" "))
        if stripped == "..." or stripped[0] in "([)" or not result:
            result.append([indent, stripped])
        else:                                   # a wrapped continuation line
            result[-1][1] += " " + stripped
    out = []
    for indent, entry in result:
        entry = entry.replace("device='cuda:0', ", "").replace("oneflow.", "toynet.")
        if batch is not None:
            entry = entry.replace(f"size=({batch[0]},", f"size=({batch[1]},")
        out.append((indent, re.sub(r"\s+", " ", entry)))
    return out


def assert_segments_in_order(seed: list, ours: list) -> None:
    """Each run of seed entries between ``...`` lines appears contiguously in ours, runs in order."""
    segments, current = [], []
    for entry in seed:
        if entry[1] == "...":
            segments.append(current)
            current = []
        else:
            current.append(entry)
    segments.append(current)
    start = 0
    for segment in filter(None, segments):
        for i in range(start, len(ours) - len(segment) + 1):
            if ours[i:i + len(segment)] == segment:
                start = i + len(segment)
                break
        else:
            first = segment[0]
            near = [e for e in ours if e[1].split(":")[:2] == first[1].split(":")[:2]]
            raise AssertionError(f"seed lines starting with {first} not found in order;\nclosest: {near[:3]}")


def rename(text: str, graph, as_name: str) -> str:
    """The graph's name as the tutorial's first instance (other tests may have made instances before)."""
    return re.sub(rf"(?<![A-Za-z0-9]){re.escape(graph.name)}(?![0-9])", as_name, text)


# ------------------------------------------------------------------------------- MobileNetV2 (en)


def mobilenet_graph():
    from toynet.vision.models import mobilenet_v2

    flow.manual_seed(0)
    model = mobilenet_v2()
    model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))  # the tutorial's typo
    model.train()
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)

    class GraphMobileNetV2(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = nn.CrossEntropyLoss()
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    return GraphMobileNetV2()


def test_print_before_and_after_the_first_call_matches_the_english_tutorial():
    before_block, after_block = [b for b in seed_blocks("nn_graph_tutorial_en.md")
                                 if b.startswith("(GRAPH:GraphMobileNetV2_0:GraphMobileNetV2): (")]
    graph = mobilenet_graph()
    before = rename(repr(graph), graph, "GraphMobileNetV2_0")
    assert_segments_in_order(entries(before_block), entries(before))
    assert "is_lazy" not in before and "(INPUT:" not in before

    graph(flow.randn(2, 3, 32, 32), flow.tensor([3, 7], dtype=flow.int64))
    after = rename(repr(graph), graph, "GraphMobileNetV2_0")
    assert_segments_in_order(entries(after_block, batch=("64", "2")), entries(after))
    ours = entries(after)
    # The graph's own inputs are the caller's eager tensors; everything traced is lazy.
    graph_inputs = [e for e in ours if e[1].startswith("(INPUT:_GraphMobileNetV2_0-input_")]
    assert len(graph_inputs) == 2 and all("is_lazy" not in e[1] for e in graph_inputs)
    module_io = [e for e in ours if e[1].startswith(("(INPUT:_model", "(OUTPUT:"))]
    assert module_io and all("is_lazy='True'" in e[1] for e in module_io)
    loss_line = "(OUTPUT:_GraphMobileNetV2_0-output_0:tensor(..., is_lazy='True', size=(), dtype=toynet.float32))"
    assert ours[-2] == (2, loss_line)


# ----------------------------------------------------------------------------- LinearTrainGraph (zh)


def linear_train_graph(batch=20):
    x = flow.tensor(np.linspace(-math.pi, math.pi, batch), dtype=flow.float32)
    y = flow.tensor(np.sin(x), dtype=flow.float32)
    xx = flow.cat([x.unsqueeze(-1).pow(1), x.unsqueeze(-1).pow(2), x.unsqueeze(-1).pow(3)], dim=1)
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    loss_fn = nn.MSELoss(reduction="sum")
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-6)

    class LinearTrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            y_pred = self.model(x)
            loss = self.loss_fn(y_pred, y)
            loss.backward()
            return loss

    return LinearTrainGraph(), xx, y


def debug_output(capsys, level: int, batch=20) -> tuple[str, object]:
    graph, xx, y = linear_train_graph(batch)
    capsys.readouterr()
    graph.debug(level)
    graph(xx, y)
    graph(xx, y)                     # a second call compiles nothing and prints nothing
    return rename(capsys.readouterr().out, graph, "LinearTrainGraph_0"), graph


def test_debug_output_matches_the_chinese_tutorial_line_by_line(capsys):
    (block,) = [b for b in seed_blocks("nn_graph_tutorial_zh.md") if "(MODULE:model:Sequential())" in b]
    seed = [text for _, text in entries(block) if text.startswith(TAGS)]
    out, _ = debug_output(capsys, 1)
    ours = [text for _, text in entries(out) if text.startswith(TAGS)]
    assert len(seed) == 18
    assert ours == seed
    # toynet prints OneFlow v0.5's stage lines, in order, once.
    tag = "(GRAPH:LinearTrainGraph_0:LinearTrainGraph) "
    stages = [tag + s for s in ("start building graph.", "end building graph.",
                                "start compiling plan and init graph runtime.",
                                "end compiling plan and init graph rumtime.")]
    lines = out.splitlines()
    positions = [lines.index(s) for s in stages]
    assert positions == sorted(positions)
    assert all(lines.count(s) == 1 for s in stages)
    # The graph's inputs come first, right after the first stage line.
    assert lines[positions[0] + 1].startswith("(INPUT:_LinearTrainGraph_0-input_0:")


def test_print_after_the_call_nests_the_debug_lines(capsys):
    out, graph = debug_output(capsys, -1)
    assert out == ""                                     # debug is off by default
    text = rename(repr(graph), graph, "LinearTrainGraph_0")
    want = [
        (0, "(GRAPH:LinearTrainGraph_0:LinearTrainGraph): ("),
        (2, "(CONFIG:config:GraphConfig(training=True, ))"),
        (2, "(INPUT:_LinearTrainGraph_0-input_0:tensor(..., size=(20, 3), dtype=toynet.float32))"),
        (2, "(INPUT:_LinearTrainGraph_0-input_1:tensor(..., size=(20,), dtype=toynet.float32))"),
        (2, "(MODULE:model:Sequential()): ("),
        (4, "(INPUT:_model-input_0:tensor(..., is_lazy='True', size=(20, 3), dtype=toynet.float32))"),
        (4, "(MODULE:model.0:Linear(in_features=3, out_features=1, bias=True)): ("),
        (6, "(INPUT:_model.0-input_0:tensor(..., is_lazy='True', size=(20, 3), dtype=toynet.float32))"),
        (6, "(PARAMETER:model.0.weight:tensor(..., size=(1, 3), dtype=toynet.float32, requires_grad=True)): ()"),
        (6, "(PARAMETER:model.0.bias:tensor(..., size=(1,), dtype=toynet.float32, requires_grad=True)): ()"),
        (6, "(OUTPUT:_model.0-output_0:tensor(..., is_lazy='True', size=(20, 1), dtype=toynet.float32))"),
        (4, ")"),
        (4, "(MODULE:model.1:Flatten(start_dim=0, end_dim=1)): ("),
        (6, "(INPUT:_model.1-input_0:tensor(..., is_lazy='True', size=(20, 1), dtype=toynet.float32))"),
        (6, "(OUTPUT:_model.1-output_0:tensor(..., is_lazy='True', size=(20,), dtype=toynet.float32))"),
        (4, ")"),
        (4, "(OUTPUT:_model-output_0:tensor(..., is_lazy='True', size=(20,), dtype=toynet.float32))"),
        (2, ")"),
        (2, "(MODULE:loss_fn:MSELoss()): ("),
        (4, "(INPUT:_loss_fn-input_0:tensor(..., is_lazy='True', size=(20,), dtype=toynet.float32))"),
        (4, "(INPUT:_loss_fn-input_1:tensor(..., is_lazy='True', size=(20,), dtype=toynet.float32))"),
        (4, "(OUTPUT:_loss_fn-output_0:tensor(..., is_lazy='True', size=(), dtype=toynet.float32))"),
        (2, ")"),
        (2, "(OUTPUT:_LinearTrainGraph_0-output_0:tensor(..., is_lazy='True', size=(), dtype=toynet.float32))"),
        (0, ")"),
    ]
    assert entries(text) == want


def test_print_before_the_first_call_shows_the_module_tree():
    graph, _, _ = linear_train_graph()
    text = rename(repr(graph), graph, "LinearTrainGraph_0")
    assert entries(text) == [
        (0, "(GRAPH:LinearTrainGraph_0:LinearTrainGraph): ("),
        (2, "(CONFIG:config:GraphConfig(training=True, ))"),
        (2, "(MODULE:model:Sequential()): ("),
        (4, "(MODULE:model.0:Linear(in_features=3, out_features=1, bias=True)): ("),
        (6, "(PARAMETER:model.0.weight:tensor(..., size=(1, 3), dtype=toynet.float32, requires_grad=True)): ()"),
        (6, "(PARAMETER:model.0.bias:tensor(..., size=(1,), dtype=toynet.float32, requires_grad=True)): ()"),
        (4, ")"),
        (4, "(MODULE:model.1:Flatten(start_dim=0, end_dim=1)): ()"),
        (2, ")"),
        (2, "(MODULE:loss_fn:MSELoss()): ()"),
        (0, ")"),
    ]


def test_buffers_and_inference_config():
    class Inference(nn.Graph):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def build(self, x):
            return self.bn(x)

    graph = Inference()
    lines = [text for _, text in entries(rename(repr(graph), graph, "Inference_0"))]
    assert "(CONFIG:config:GraphConfig(training=False, ))" in lines
    assert "(BUFFER:bn.running_mean:tensor(..., size=(3,), dtype=toynet.float32)): ()" in lines
    assert "(BUFFER:bn.num_batches_tracked:tensor(..., size=(), dtype=toynet.int64)): ()" in lines
    assert lines.index("(PARAMETER:bn.bias:tensor(..., size=(3,), dtype=toynet.float32, requires_grad=True)): ()") \
        < lines.index("(BUFFER:bn.running_mean:tensor(..., size=(3,), dtype=toynet.float32)): ()")


def test_a_module_called_twice_gets_two_sets_of_lines():
    class Twice(nn.Graph):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

        def build(self, x):
            return self.layer(self.layer(x))

    graph = Twice()
    graph(flow.randn(3, 2))
    lines = [text for _, text in entries(repr(graph))]
    assert sum(line.startswith("(INPUT:_layer-input_0:") for line in lines) == 2
    assert sum(line.startswith("(OUTPUT:_layer-output_0:") for line in lines) == 2


# ------------------------------------------------------------------------------------ debug levels


def without_timings(text: str) -> list[str]:
    text = re.sub(r"Cost time: [0-9.]+s", "Cost time: Ts", text)
    return [re.sub(r"\([0-9.]+ ms\)", "(T ms)", line) for line in text.splitlines()]


def test_debug_levels_print_progressively_more(capsys):
    outputs = {level: debug_output(capsys, level)[0] for level in (-1, 0, 1, 2, 3)}
    assert outputs[-1] == ""
    lines = {level: without_timings(text) for level, text in outputs.items()}
    for lower, higher in ((0, 1), (1, 2), (2, 3)):
        assert len(lines[higher]) > len(lines[lower])
        missing = [line for line in lines[lower] if line not in lines[higher]
                   and not line.startswith("(OPERATOR:")]       # level 3 extends OPERATOR lines
        assert not missing, f"level {higher} lacks lines level {lower} prints: {missing[:3]}"

    level0 = outputs[0]
    assert "(GRAPH:LinearTrainGraph_0:LinearTrainGraph) building graph Done! Cost time: " in level0
    assert "(GRAPH:LinearTrainGraph_0:LinearTrainGraph) compiling plan Done! Cost time: " in level0
    assert "(INPUT:" not in level0 and "(MODULE:" not in level0

    level1 = outputs[1]
    assert "LinearTrainGraph_0 start compiling with pass pass_cnt_0-EliminateDeadCode" in level1
    assert re.search(r"LinearTrainGraph_0 finish compiling with pass pass_cnt_\d+-FuseElementwise", level1)
    assert "(OPERATOR:" not in level1
    arena = re.search(r"LinearTrainGraph_0 finish compiling with pass pass_cnt_\d+-PlanMemory: an arena of "
                      r"([\d.]+ k?B) for (\d+) values \(([\d.]+ k?B) with", level1)
    in_bytes = {"B": 1, "kB": 1e3}

    def size(text):
        number, unit = text.split()
        return float(number) * in_bytes[unit]
    assert arena and 0 < size(arena.group(1)) <= size(arena.group(3)) and int(arena.group(2)) > 0

    # Level 2: every op as it is traced, forward, backward and optimizer, with its inputs, shapes, device.
    operators = [line for line in outputs[2].splitlines() if line.startswith("(OPERATOR: ")]
    first = operators[0]
    if flow.is_fast_path():   # the layer as one fused op
        assert first == ("(OPERATOR: model.0-linear-0(_LinearTrainGraph_0-input_0/out:(size=(20, 3), "
                         "dtype=(toynet.float32)), model.0.weight/out:(size=(1, 3), dtype=(toynet.float32)), "
                         "model.0.bias/out:(size=(1,), dtype=(toynet.float32))) -> (model.0-linear-0/out_0:"
                         "(size=(20, 1), dtype=(toynet.float32))), device=(cpu:0))")
    else:                     # the lesson's x @ w.t() + b: the transposed weight first
        assert first == ("(OPERATOR: model.0-permute-0(model.0.weight/out:(size=(1, 3), dtype=(toynet.float32))) "
                         "-> (model.0-permute-0/out_0:(size=(3, 1), dtype=(toynet.float32))), device=(cpu:0))")
    loss_op = "loss_fn-sum_squares" if flow.is_fast_path() else "loss_fn-square"   # mse: fused, or plain
    assert any(line.startswith(f"(OPERATOR: {loss_op}") for line in operators)
    assert any(line.startswith("(OPERATOR: model.0.weight-") for line in operators)      # the update
    assert any(line.startswith("(OPERATOR: System-Train-TrainStep-") for line in operators)
    # each pass's summary: on the lesson path FuseElementwise makes each update one kernel; on the fast path
    # the learning rate meets the loss's factor 2 first (ReassociateScalars), leaving one subtraction each
    if flow.is_fast_path():
        assert "ReassociateScalars: " in outputs[2] and " ops, removed 2" in outputs[2]
        assert "FuseElementwise: " in outputs[2]
    else:
        assert re.search(r"FuseElementwise: \d+ -> \d+ ops, fused \d+ ops into \d+ kernels", outputs[2])

    # Level 3: where each op came from, and every pass's graph before and after.
    level3 = outputs[3]
    linear = next(line for line in level3.splitlines() if line.startswith("(OPERATOR: model.0-"))
    assert re.search(r"location=\(test_graph_print.py:\d+ in build: y_pred = self.model\(x\)\)\)$", linear)
    assert "--- before FuseElementwise ---" in level3 and "--- after FuseElementwise ---" in level3
    assert "graph LinearTrainGraph_0(%_LinearTrainGraph_0-input_0: f32[20, 3]" in level3
    assert "# test_graph_print.py:" in level3


def test_graph_names_count_instances_per_class():
    class CountedGraph(nn.Graph):
        def build(self, x):
            return x

    class OtherCountedGraph(nn.Graph):
        def build(self, x):
            return x

    first, second, other = CountedGraph(), CountedGraph(), OtherCountedGraph()
    assert (first.name, second.name, other.name) == ("CountedGraph_0", "CountedGraph_1", "OtherCountedGraph_0")
    assert repr(second).startswith("(GRAPH:CountedGraph_1:CountedGraph): (")
