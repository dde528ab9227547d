"""Activation checkpointing: ``module.to(nn.graph.GraphModule).activation_checkpointing = True``.

What must hold: the block's backward reads recomputed copies of its activations, not the values forward
kept (so the planned memory is smaller); the numbers of every step are the very numbers of the same
graph without checkpointing, and agree with Eager mode; random ops are never drawn twice; turning the
setting on or off compiles the graph again; wrong uses say what is wrong.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.static.ir import BACKWARD, FORWARD, OP
from toynet.static.passes.checkpoint import in_block, live_bytes


def make_models(seed=0, dropout=0.0, width=64, depth=3):
    flow.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    part1 = nn.Sequential(nn.Linear(32, width), nn.ReLU(), *layers)
    part2 = nn.Sequential(nn.Linear(width, 16), nn.ReLU(), nn.Linear(16, 10))
    return part1, part2


class TrainGraph(nn.Graph):
    def __init__(self, part1, part2, optimizer, checkpoint=(), old_spelling=False):
        super().__init__()
        self.part1, self.part2 = part1, part2
        self.loss_fn = nn.CrossEntropyLoss()
        for name in checkpoint:
            if old_spelling:
                getattr(self, name).config.activation_checkpointing = True
            else:
                getattr(self, name).to(nn.graph.GraphModule).activation_checkpointing = True
        self.add_optimizer(optimizer)

    def build(self, x, y):
        logits = self.part2(self.part1(x))
        loss = self.loss_fn(logits, y)
        loss.backward()
        return logits, loss


def data(steps=3, batch=24, seed=1):
    rng = np.random.default_rng(seed)
    return [(flow.tensor(rng.standard_normal((batch, 32)).astype(np.float32)),
             flow.tensor(rng.integers(0, 10, batch))) for _ in range(steps)]


def train(checkpoint=(), steps=3, dropout=0.0, old_spelling=False):
    part1, part2 = make_models(dropout=dropout)
    optimizer = flow.optim.SGD(list(part1.parameters()) + list(part2.parameters()), lr=0.1, momentum=0.9)
    graph = TrainGraph(part1, part2, optimizer, checkpoint, old_spelling)
    flow.manual_seed(7)
    losses = [graph(x, y)[1].numpy() for x, y in data(steps)]
    params = [p.numpy().copy() for p in list(part1.parameters()) + list(part2.parameters())]
    return graph, losses, params


def test_both_spellings_give_a_graph_module_view_of_the_module():
    block = nn.Linear(2, 2)
    view = block.to(nn.graph.GraphModule)
    assert isinstance(view, nn.graph.GraphModule) and view.origin is block
    assert view.activation_checkpointing is False
    block.config.activation_checkpointing = True
    assert view.activation_checkpointing is True and view.to(nn.graph.GraphModule) is view
    assert "activation_checkpointing=True" in repr(view)


def test_bad_settings_are_refused_with_the_fix():
    view = nn.Linear(2, 2).to(nn.graph.GraphModule)
    with pytest.raises(TypeError, match="True or False"):
        view.activation_checkpointing = 1
    with pytest.raises(AttributeError, match="activation_checkpointing"):
        view.activation_checkpoint = True   # a misspelt setting must not pass silently
    with pytest.raises(TypeError, match="origin"):
        view.to(flow.float64)


def test_checkpointing_changes_no_number_and_agrees_with_eager():
    _, plain_losses, plain_params = train()
    graph, losses, params = train(checkpoint=("part1", "part2"))
    # The recomputed values are computed by the same kernels from the same inputs: bitwise the same.
    for a, b in zip(plain_losses + plain_params, losses + params):
        np.testing.assert_array_equal(a, b)
    part1, part2 = make_models()
    optimizer = flow.optim.SGD(list(part1.parameters()) + list(part2.parameters()), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    eager = []
    for x, y in data():
        loss = loss_fn(part2(part1(x)), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        eager.append(loss.numpy())
    np.testing.assert_allclose(np.array(eager), np.array(losses), rtol=1e-5, atol=1e-6)
    for p, q in zip(list(part1.parameters()) + list(part2.parameters()), params):
        np.testing.assert_allclose(p.numpy(), q, rtol=1e-4, atol=1e-6)


def test_the_blocks_backward_reads_recomputed_values_only():
    graph, _, _ = train(checkpoint=("part1",), steps=1)
    ir = graph.ir
    forward = {id(n) for n in ir.nodes if n.kind == OP and n.phase == FORWARD and in_block(n.scope, "part1")}
    copies = [n for n in ir.nodes if n.name.endswith("-recompute")]
    assert copies and all(n.phase == BACKWARD and in_block(n.scope, "part1") for n in copies)
    for n in ir.nodes:
        if n.kind == OP and n.phase == BACKWARD and in_block(n.scope, "part1"):
            assert not any(id(x) in forward for x in n.input_nodes), n.name
    # part2 is not checkpointed: its backward still reads what forward kept.
    assert not any(in_block(n.scope, "part2") for n in copies)
    report = next(r for r in graph.passes if r.name == "CheckpointActivations")
    assert "part1: " in report.summary() and "recomputed in backward" in report.summary()


class Deep(nn.Module):
    """Four blocks of four Linear+ReLU layers: the shape checkpointing pays on (one block's activations
    at a time, plus the blocks' outputs)."""

    def __init__(self, width=64):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(width, width),
                                                                                      nn.ReLU())])
                                      for _ in range(4)])
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.blocks(x))


def deep_graph(checkpoint):
    flow.manual_seed(0)
    model = Deep()
    graph = TrainGraph(model, nn.Identity(), flow.optim.SGD(model.parameters(), lr=0.1))
    for block in model.blocks:
        block.to(nn.graph.GraphModule).activation_checkpointing = checkpoint
    x = flow.randn(512, 32 * 2)
    graph(x, flow.ones(512, dtype=flow.int64))
    return graph


def test_live_bytes_counts_each_value_from_its_op_to_its_last_reader():
    graph, _, _ = train(steps=1)
    profile = live_bytes(graph.ir)
    assert len(profile) == graph.ir.count_ops()
    biggest = max(n.shape[0] * n.shape[1] * 4 for n in graph.ir.op_nodes if len(n.shape) == 2)
    assert max(profile) >= biggest and min(profile) > 0


def test_checkpointing_lowers_the_peak_of_live_values():
    plain, checkpointed = deep_graph(False), deep_graph(True)
    before, after = max(live_bytes(plain.ir)), max(live_bytes(checkpointed.ir))
    # relu's backward reads its own output, which the next Linear reads too: without checkpointing each
    # layer keeps one activation, so keeping one block's instead of four blocks' is a bit under half.
    assert after < 0.6 * before, (before, after)
    report = next(r for r in checkpointed.passes if r.name == "CheckpointActivations")
    shown = re.search(r"peak of live values ([\d.]+) MB -> ([\d.]+) MB", report.summary())
    assert shown and float(shown.group(2)) < 0.6 * float(shown.group(1))
    # ...and costs ops: the recomputed forward.
    assert checkpointed.traced_ir.count_ops() == plain.traced_ir.count_ops()
    assert checkpointed.ir.count_ops() > plain.ir.count_ops()


def test_a_dropout_mask_is_kept_not_drawn_again():
    _, plain_losses, plain_params = train(dropout=0.3)
    graph, losses, params = train(checkpoint=("part1",), dropout=0.3)
    for a, b in zip(plain_losses + plain_params, losses + params):
        np.testing.assert_array_equal(a, b)
    copies = [n for n in graph.ir.nodes if n.name.endswith("-recompute")]
    assert copies and not any(n.op.random for n in copies)
    report = next(r for r in graph.passes if r.name == "CheckpointActivations")
    assert re.search(r"\d+ random values? kept", report.summary())


def test_the_old_config_spelling_and_a_nested_block():
    graph, _, _ = train(checkpoint=("part1",), steps=1, old_spelling=True)
    graph.part1[0].config.activation_checkpointing = True   # inside part1: covered already
    graph(*data(1)[0])
    report = next(r for r in graph.passes if r.name == "CheckpointActivations")
    assert report.summary().count("recomputed in backward") == 1


def test_toggling_compiles_again():
    graph, _, _ = train(steps=1)
    assert all(r.name != "CheckpointActivations" for r in graph.passes)
    x, y = data(1)[0]
    graph(x, y)
    compiled = graph._compiled.latest
    graph.part2.to(nn.graph.GraphModule).activation_checkpointing = True
    graph(x, y)
    assert graph._compiled.latest is not compiled
    assert any(r.name == "CheckpointActivations" for r in graph.passes)
    graph.part2.to(nn.graph.GraphModule).activation_checkpointing = False
    graph(x, y)   # the first plan fits again: it runs, no recompute in it
    assert graph._last is compiled and not any(n.name.endswith("-recompute") for n in graph.ir.nodes)


def test_the_cookbook_pattern_runs_with_a_column_of_targets():
    """Two checkpointed parts set through ``.config``, SGD with two groups, targets of shape (N, 1) as the
    activation-checkpointing page passes them: the same losses as with (N,) targets."""
    losses = {}
    for column in (False, True):
        part1, part2 = make_models()
        optimizer = flow.optim.SGD([{"params": part1.parameters()}, {"params": part2.parameters()}], lr=1e-3)
        graph = TrainGraph(part1, part2, optimizer, ("part1", "part2"), old_spelling=True)
        losses[column] = [graph(x, y.reshape(-1, 1) if column else y)[1].numpy() for x, y in data()]
    np.testing.assert_array_equal(losses[False], losses[True])
