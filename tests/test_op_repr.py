"""``graph.debug(1, op_repr_with_py_stack=True)``: print(graph) lists every traced op as an OPERATOR entry,
nested under the module that ran it, with the Python line that made it (OneFlow's ``location=(...)``).

* forward ops sit under their module, with this file's line numbers; backward ops under the module of the
  op they differentiate; the updates of a parameter under the module holding it; ops of build() itself
  under the graph;
* without the flag, or before the first call, print(graph) shows no OPERATOR entry (unchanged);
* the stack shown is ``max_py_stack_depth`` frames deep, of the user's code unless ``only_user_py_stack=False``
  adds toynet's own; bad settings are refused.
"""

from __future__ import annotations

import inspect
import re

import pytest

import toynet as flow

# The layers here are one fused linear op each on the fast path, which the expected names spell.
pytestmark = pytest.mark.usefixtures("fast_path")
from toynet import nn
from toynet.nn.graph_print import source_text, stack_text


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, v):
        h = self.fc(v)
        return h * 2  # LINE_SCALE


def _line(marker: str) -> int:
    lines, start = inspect.getsourcelines(Scaled)
    return start + next(i for i, text in enumerate(lines) if marker in text)


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, v):
        loss = self.model(v).sum()
        loss.backward()
        return loss


def _graph():
    model = Scaled()
    return TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))


def _block(text: str, header: str) -> list[str]:
    """The lines directly under ``header`` (one indentation level deeper), without nested blocks."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    indent = len(lines[start]) - len(lines[start].lstrip()) + 2
    body = []
    for line in lines[start + 1:]:
        depth = len(line) - len(line.lstrip())
        if depth < indent:
            break
        if depth == indent and line.strip() != ")":  # a nested block's closing bracket is not an entry
            body.append(line.strip())
    return body


def test_operators_nest_under_their_modules_with_locations():
    graph = _graph()
    graph.debug(1, op_repr_with_py_stack=True)
    before = repr(graph)
    assert "(OPERATOR:" not in before  # nothing traced yet
    graph(flow.ones(2, 4))
    text = repr(graph)
    fc = [line for line in _block(text, "(MODULE:model.fc:") if line.startswith("(OPERATOR:")]
    names = [re.match(r"\(OPERATOR: (\S+?)\(", line).group(1) for line in fc]
    assert names[0].startswith("model.fc-linear-"), names
    assert any("linear_grad_weight" in n for n in names), "the backward op belongs to the module it differentiates"
    assert any(n.startswith("model.fc.weight-") for n in names), "the weight's update sits under its module"
    forward = fc[0]
    assert "Python Stack[-1]: 'forward' at 'test_op_repr.py': line " in forward
    assert "-> (model.fc-linear-0/out_0:(size=(2, 3), dtype=(toynet.float32)))" in forward
    # OneFlow's order in a block: inputs, parameters, buffers, submodules, operators, outputs.
    tags = [line.split(":")[0] for line in _block(text, "(MODULE:model.fc:")]
    assert tags == sorted(tags, key=["(INPUT", "(PARAMETER", "(OPERATOR", "(OUTPUT"].index), tags
    tags = [line.split(":")[0] for line in _block(text, "(MODULE:model:Scaled())")]
    assert tags == ["(INPUT", "(MODULE", "(OPERATOR", "(OPERATOR", "(OUTPUT"], tags
    model_ops = [line for line in _block(text, "(MODULE:model:Scaled())") if line.startswith("(OPERATOR:")]
    assert any(f"'forward' at 'test_op_repr.py': line {_line('LINE_SCALE')};" in line for line in model_ops)
    backward = [line for line in fc if "linear_grad_weight" in line]
    assert backward[0].endswith("location=(grad of model.fc-linear-0))"), "a gradient op names the op it differentiates"
    graph_ops = [line for line in _block(text, "(GRAPH:") if line.startswith("(OPERATOR:")]
    assert any("'build' at 'test_op_repr.py'" in line and "sum" in line for line in graph_ops)
    # Every traced op is listed exactly once.
    assert text.count("(OPERATOR:") == len(graph.traced_ir.op_nodes)


def test_without_the_flag_print_is_unchanged():
    graph = _graph()
    graph.debug(1)
    graph(flow.ones(2, 4))
    assert "(OPERATOR:" not in repr(graph)
    graph.debug(1, op_repr_with_py_stack=True)
    # Asked for after the graph compiled: the stacks were not taken, each op shows the line that made it.
    assert re.search(r"location=\(Python Stack\[-1\]: 'forward' at 'test_op_repr.py': line \d+;\)\)$",
                     _forward_op(repr(graph)))
    graph.debug(-1)
    assert "(OPERATOR:" not in repr(graph)


def _forward_op(text: str) -> str:
    return next(line for line in text.split("\n") if "(OPERATOR: model.fc-linear-" in line)


def test_stack_depth_and_frames_of_toynet():
    graph = _graph()
    graph.debug(0, op_repr_with_py_stack=True)  # default depth 2: build, then forward
    graph(flow.ones(2, 4))
    where = re.search(r"location=\((.*)\)\)$", _forward_op(repr(graph))).group(1)
    assert re.fullmatch(r"Python Stack\[-2\]: 'build' at 'test_op_repr.py': line \d+; "
                        r"Python Stack\[-1\]: 'forward' at 'test_op_repr.py': line \d+;  ... more", where), where
    deeper = _graph()
    deeper.debug(0, op_repr_with_py_stack=True, max_py_stack_depth=3)
    deeper(flow.ones(2, 4))
    assert "Python Stack[-3]: 'test_stack_depth_and_frames_of_toynet' at 'test_op_repr.py'" in _forward_op(
        repr(deeper))
    inside = _graph()
    inside.debug(0, op_repr_with_py_stack=True, max_py_stack_depth=4, only_user_py_stack=False)
    inside(flow.ones(2, 4))
    line = _forward_op(repr(inside))
    assert "at 'toynet/" in line, "toynet's own frames are shown when only_user_py_stack=False"
    assert "Python Stack[-4]" in line and "Python Stack[-5]" not in line


def test_stack_text_and_bad_settings():
    frames = (("net.py", 12, "forward"), ("train.py", 40, "build"))
    assert stack_text(frames, True) == ("Python Stack[-2]: 'build' at 'train.py': line 40; "
                                        "Python Stack[-1]: 'forward' at 'net.py': line 12;  ... more")
    assert source_text("net.py:12 in forward: y = self.fc(x)") == "Python Stack[-1]: 'forward' at 'net.py': line 12;"
    assert source_text("grad of model-linear-0") == "grad of model-linear-0"
    graph = _graph()
    with pytest.raises(AssertionError, match="max is 3"):
        graph.debug(4)
    with pytest.raises(AssertionError, match="max_py_stack_depth"):
        graph.debug(1, max_py_stack_depth=0)
