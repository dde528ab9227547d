"""toynet.viz.record around an nn.Graph's first call: the frames carry what graph.debug(level) printed,
each line in the frame of the nodes it names, the graph drawn by module; the GIF and the player show
the log beside the picture."""

from __future__ import annotations

import contextlib
import io
import re
import shutil

import pytest

import toynet as flow
from toynet import viz
from scripts_on_path import figures
from toynet.viz import log_lines, style

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")


def record_first_call(level: int, **options):
    """A fresh LinearTrainGraph at debug ``level``, its first call recorded; returns (recorder, printed, graph)."""
    flow.manual_seed(0)
    _, y, xx = figures.poly_fit_data()
    graph = figures.LinearTrainGraph(*figures.poly_fit_model())
    graph.debug(level)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), viz.record(**options) as rec:
        graph(xx, y)
    return rec, printed.getvalue(), graph


@pytest.fixture(scope="module")
def recorded():
    return {level: record_first_call(level) for level in (-1, 0, 1, 2, 3)}


def labels(rec) -> list[str]:
    """The frames' labels, without the graph's name (each graph has its own number: LinearTrainGraph_3)."""
    return [re.sub(r"LinearTrainGraph_\d+", "LinearTrainGraph_k", f.label) for f in rec.frames]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_the_frames_lines_joined_are_exactly_what_debug_printed(recorded, level):
    rec, printed, _ = recorded[level]
    joined = "".join(line + "\n" for frame in rec.frames for line in frame.log)
    assert printed and joined == printed
    # The debug level chooses how many lines, not how the build is cut into frames.
    assert labels(rec) == labels(recorded[0][0])
    assert [f.added for f in rec.frames] == [f.added for f in recorded[0][0].frames]


def test_a_silent_graph_gives_frames_without_lines(recorded):
    rec, printed, _ = recorded[-1]
    assert printed == "" and all(f.log == () for f in rec.frames)
    # The same build steps, less the compile step that only prints.
    assert labels(rec) == labels(recorded[0][0])[:-1]


def test_each_line_is_in_the_frame_of_the_nodes_it_names(recorded):
    rec, _, graph = recorded[2]
    frames = rec.frames
    nodes = {n.name: n for n in graph.traced_ir.nodes}
    seen = 0
    for frame in frames:
        for line in frame.log:
            if line.startswith("(OPERATOR: "):
                node = nodes[re.match(r"\(OPERATOR: ([^(]+)\(", line)[1]]
                # label: "<phase> <module>: <ops>"; the op is drawn, new, in this very frame
                assert frame.label.startswith(f"{node.phase} {node.scope}:"), (line, frame.label)
                seen += 1
            elif line.startswith("(MODULE:"):
                path = line.split(":")[1]
                assert frame.label.startswith(f"forward {path}"), (line, frame.label)
    assert seen == sum(1 for n in graph.traced_ir.nodes if n.kind == "op")
    assert frames[0].label.startswith("graph inputs") and frames[0].log[0].endswith("start building graph.")
    assert any(line.startswith(f"(INPUT:_{graph.name}-input_0") for line in frames[0].log)
    compile_step = frames[-1]
    assert compile_step.label.startswith("compile") and compile_step.added == ()
    assert compile_step.log[0].endswith("end building graph.")
    assert any("pass_cnt_0-EliminateDeadCode" in line for line in compile_step.log)
    assert not any(line.startswith("(OPERATOR:") for line in compile_step.log)


def test_manual_steps_keep_their_lines():
    flow.manual_seed(0)
    _, y, xx = figures.poly_fit_data()
    graph = figures.LinearTrainGraph(*figures.poly_fit_model())
    graph.debug(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), viz.record() as rec:
        graph(xx, y)
        rec.step("the whole first call")
    assert [f.label for f in rec.frames] == ["the whole first call"]
    assert "".join(line + "\n" for line in rec.frames[0].log) == printed.getvalue()


def _clusters(dot: str, names: dict | None = None) -> dict[str, str]:
    """cluster title -> its style, from a frame's DOT source (and title -> cluster name into ``names``)."""
    found = {}
    for name, attrs in re.findall(r"subgraph (cluster_\w+) \{\n(.*?)\n", dot):
        title = re.search(r'label="([^"]*)"', attrs)
        if title:
            found[title[1]] = re.search(r'style="?([\w,]+)', attrs)[1]
            if names is not None:
                names[title[1]] = name
    return found


@needs_dot
def test_traced_frames_nest_nodes_in_module_clusters_as_print_graph_does(recorded):
    rec, _, graph = recorded[1]
    frames = rec.frames
    titles = [f"{e.name}: {e.text}" for e in graph.outline().walk() if e.tag == "MODULE"]
    assert titles == ["model: Sequential()", "model.0: Linear(in_features=3, out_features=1, bias=True)",
                      "model.1: Flatten(start_dim=0, end_dim=1)", "loss_fn: MSELoss()"]
    first, linear, last = _clusters(frames[0].dot), _clusters(frames[1].dot), _clusters(frames[-1].dot)
    for title in titles:
        assert first[title] == "invis" and last[title] != "invis"  # a module appears when it is called
    assert linear[titles[1]] != "invis" and linear[titles[2]] == "invis"
    # print(graph)'s nesting: model.0's and model.1's clusters sit inside model's (nested names), loss_fn's not.
    names: dict[str, str] = {}
    _clusters(frames[-1].dot, names)
    model, linear, flatten, loss = (names[t] for t in titles)
    assert linear.startswith(model + "_") and flatten.startswith(model + "_") and not loss.startswith(model + "_")
    plain, _, _ = record_first_call(1, by_module=False)
    assert "model: Sequential()" not in plain.frames[-1].dot and "forward" in plain.frames[-1].dot


def test_lines_are_coloured_like_the_nodes_they_name():
    fills = {tag: style.ROLES[tag][0]["fillcolor"] for tag in ("INPUT", "OUTPUT", "PARAMETER", "BUFFER")}
    for tag, fill in fills.items():
        assert log_lines.fill_of(f"({tag}:x:tensor(...))") == fill
    assert log_lines.fill_of("(OPERATOR: m-mul-4(...))", "backward") == style.ROLES["op_backward"][0]["fillcolor"]
    assert log_lines.fill_of("(OPERATOR: m-sub-4(...))", "optimizer") == style.ROLES["op_optimizer"][0]["fillcolor"]
    assert log_lines.fill_of("(OPERATOR: m-linear-0(...))", "forward") == style.ROLES["op"][0]["fillcolor"]
    assert log_lines.fill_of("(MODULE:model:Sequential())") == style.ROLES["module"][0]["fillcolor"]
    assert log_lines.fill_of("(GRAPH:g:G) start building graph.") == log_lines.GRAPH_FILL
    assert log_lines.fill_of("g start compiling with pass pass_cnt_0-EliminateDeadCode") is None
    assert log_lines.phase_of("backward loss_fn: mul, mul") == "backward" and log_lines.phase_of("compile") is None


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


@needs_dot
def test_gif_shows_the_log_beside_the_graph(recorded, tmp_path):
    from PIL import Image

    rec, _, _ = recorded[1]
    with_log, without = rec.to_gif(str(tmp_path / "log.gif")), rec.to_gif(str(tmp_path / "no.gif"), log=False)
    with Image.open(with_log) as gif, Image.open(without) as plain:
        assert gif.n_frames == len(rec.frames) and gif.width == plain.width + viz.gif.LOG_PX
        assert viz.gif.LOG_FONT_PX >= 11
        panels = []
        for i in range(gif.n_frames):
            gif.seek(i)
            panel = gif.convert("RGB").crop((plain.width, 0, gif.width, plain.height - 100))
            panels.append({colour for _, colour in panel.getcolors(1 << 16)})
    parameter, input_, module = (_rgb(style.ROLES[r][0]["fillcolor"]) for r in ("PARAMETER", "INPUT", "module"))

    def shows(colours, colour):  # the GIF's 256-colour palette may move a fill by a unit or two
        return any(max(abs(a - b) for a, b in zip(c, colour)) <= 3 for c in colours)

    assert shows(panels[0], input_) and not shows(panels[0], parameter)  # the graph's inputs, nothing else yet
    assert all(shows(panels[1], c) for c in (parameter, module, input_))  # model.0 is called: its parameters
    assert not shows(panels[-1], parameter)                               # compiling: untagged pass lines


@needs_dot
def test_player_scrolls_the_log_with_the_slider(recorded):
    pytest.importorskip("ipywidgets")
    rec, _, _ = recorded[1]
    player = rec.player()
    controls, caption, body = player.children
    assert body.children == (player.picture, player.debug_log)
    first = player.debug_log.value
    assert "column-reverse" in first and f"height:{player.view_height - 2}px" in first
    assert "start building graph." in first and "(MODULE:model.0" not in first
    player.slider.value = 1
    assert "(MODULE:model.0:Linear" in player.debug_log.value
    assert style.ROLES["PARAMETER"][0]["fillcolor"] in player.debug_log.value
    player.slider.value = len(rec.frames) - 1
    last = player.debug_log.value
    # every line printed so far, earlier steps dimmed: all of them by the last step
    printed = recorded[1][1].rstrip("\n").split("\n")
    assert all(viz.log_lines.html.escape(line) in last for line in printed if line)
    assert last.count(f"color:{log_lines.EARLIER}") == sum(len(f.log) for f in rec.frames[:-1])
    silent = recorded[-1][0].player()
    assert silent.debug_log is None and silent.children[2] is silent.picture


@needs_dot
def test_the_graph_build_figure_is_the_tutorial_graph_at_debug_1_without_timings():
    rec = figures.graph_build_recording()
    lines = [line for frame in rec.frames for line in frame.log]
    assert any(line.startswith("(MODULE:model.0:Linear") for line in lines)
    assert not any(line.startswith("(OPERATOR:") for line in lines)  # level 1: no op lines
    costs = [line for line in lines if "Cost time" in line]
    assert len(costs) == 2 and all(line.endswith("Cost time: ...s.") for line in costs)
    assert "graph_build.gif" in figures.FILES
