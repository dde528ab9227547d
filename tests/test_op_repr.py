"""``graph.debug(1, op_repr_with_py_stack=True)``: print(graph) lists every traced op as an OPERATOR entry,
nested under the module that ran it, with the Python line that made it (OneFlow's ``location=(...)``).

* forward ops sit under their module, with this file's line numbers; backward ops under the module of the
  op they differentiate; the updates of a parameter under the module holding it; ops of build() itself
  under the graph;
* without the flag, or before the first call, print(graph) shows no OPERATOR entry (unchanged);
* the depth of the stack shown follows ``max_py_stack_depth``; bad settings are refused.
"""

from __future__ import annotations

import inspect
import re

import pytest

import toynet as flow
from toynet import nn
from toynet.nn.graph_debug import py_stack


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
    assert "location=(Python Stack[-1]: 'forward' at 'test_op_repr.py': line " in forward
    assert "-> (model.fc-linear-0/out_0:(size=(2, 3), dtype=(toynet.float32)))" in forward
    # OneFlow's order in a block: inputs, parameters, buffers, submodules, operators, outputs.
    tags = [line.split(":")[0] for line in _block(text, "(MODULE:model.fc:")]
    assert tags == sorted(tags, key=["(INPUT", "(PARAMETER", "(OPERATOR", "(OUTPUT"].index), tags
    tags = [line.split(":")[0] for line in _block(text, "(MODULE:model:Scaled())")]
    assert tags == ["(INPUT", "(MODULE", "(OPERATOR", "(OPERATOR", "(OUTPUT"], tags
    model_ops = [line for line in _block(text, "(MODULE:model:Scaled())") if line.startswith("(OPERATOR:")]
    assert any(f"'forward' at 'test_op_repr.py': line {_line('LINE_SCALE')};" in line for line in model_ops)
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
    assert "(OPERATOR:" in repr(graph)
    graph.debug(-1)
    assert "(OPERATOR:" not in repr(graph)


def test_py_stack_depth_and_bad_settings():
    source = "net.py:12 in forward: y = self.fc(x) <- train.py:40 in build: out = self.model(x)"
    assert py_stack(source, 1) == "Python Stack[-1]: 'forward' at 'net.py': line 12;  ... more"
    assert py_stack(source, 2) == ("Python Stack[-2]: 'build' at 'train.py': line 40; "
                                   "Python Stack[-1]: 'forward' at 'net.py': line 12;")
    assert py_stack("grad of model-linear-0") == "grad of model-linear-0"
    graph = _graph()
    with pytest.raises(AssertionError, match="max is 3"):
        graph.debug(4)
    with pytest.raises(AssertionError, match="max_py_stack_depth"):
        graph.debug(1, max_py_stack_depth=0)
