"""The fast path (TOYNET_FAST=1): the switch, and everything it swaps in computing what the lesson path computes.

The lesson path is the plain engine the notebooks teach; the fast path replaces some of its functions by the
ones kept in the ``fast/`` folders (fused ops, a tuned backward walk, speed passes, a compiler with emit tables
and chosen kernels, a generated guard and repeat call). Each replacement is tested here against the lesson
function it replaces: the same values, the same gradients, the same training.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_graph_passes import Builder, assert_same_program, f32, train_conv

import toynet as flow
from toynet import nn
from toynet.nn import functional as F
from toynet.ops.fast.emit import EMIT, UFUNCS
from toynet.static.fast.compile import FastPlan
from toynet.static.ir import PASSES, Graph
from toynet.static.passes.memory import plan_memory

ROOT = Path(__file__).resolve().parent.parent


# -------------------------------------------------------------------------------------------- the switch


@pytest.mark.parametrize(("value", "fast"), [("0", False), ("1", True), ("", False)])
def test_the_environment_variable_picks_the_path(value, fast):
    env = {**os.environ, "TOYNET_FAST": value}
    out = subprocess.run([sys.executable, "-c", "import toynet; print(toynet.is_fast_path())"], env=env,
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == str(fast)


def test_a_wrong_value_of_the_variable_says_what_it_takes():
    env = {**os.environ, "TOYNET_FAST": "yes"}
    result = subprocess.run([sys.executable, "-c", "import toynet"], env=env, capture_output=True, text=True,
                            cwd=ROOT)
    assert result.returncode != 0
    assert "TOYNET_FAST must be 0 (the lesson path, the default) or 1 (the fast path), got 'yes'" in result.stderr


def test_set_fast_path_swaps_every_replacement_and_switches_back():
    replaced = flow.fast_replacements()
    assert {(r.owner.__name__, r.name) for r in replaced} >= {
        ("toynet.nn.functional", "linear"), ("toynet.nn.functional", "mse_loss"), ("SGD", "update"),
        ("toynet.dynamic.autograd", "run_backward"), ("toynet.static.passes", "default_pipeline"),
        ("toynet.static.compile", "compile_graph"), ("toynet.nn.graph_plans", "guard_graph"), ("Graph", "__call__")}
    assert all("fast" in r.fast.__module__.split(".") for r in replaced)   # fast code lives in fast/ folders
    before = flow.is_fast_path()
    with flow.set_fast_path(not before):
        assert flow.is_fast_path() is (not before)
        for r in replaced:
            now = r.owner.__dict__[r.name] if isinstance(r.owner, type) else getattr(r.owner, r.name)
            assert now is (r.lesson if before else r.fast)
    assert flow.is_fast_path() is before
    with pytest.raises(TypeError, match="True or False"):
        flow.set_fast_path(1)
    assert all(str(r).count("  ->  ") == 1 for r in replaced)


# ----------------------------------------------------------------------- Eager mode: the same maths


def _both(fn):
    """``fn()`` on the lesson path and on the fast path."""
    with flow.set_fast_path(False):
        lesson = fn()
    with flow.set_fast_path(True):
        fast = fn()
    return lesson, fast


def _grads(loss_of):
    def run():
        flow.manual_seed(0)
        leaves = [flow.randn(4, 3, requires_grad=True), flow.randn(2, 3, requires_grad=True),
                  flow.randn(2, requires_grad=True), flow.randn(4, 2)]
        loss = loss_of(*leaves)
        loss.backward()
        return [loss.numpy().copy()] + [t.grad.numpy().copy() for t in leaves[:3]]
    return run


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_fused_linear_and_mse_loss_give_the_lesson_values_and_gradients(reduction):
    lesson, fast = _both(_grads(lambda x, w, b, y: F.mse_loss(F.linear(x, w, b), y, reduction=reduction)))
    for a, b in zip(lesson, fast):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_the_fast_path_really_runs_fused_ops():
    def made_by():
        x, w = flow.randn(4, 3), flow.randn(2, 3, requires_grad=True)
        y = F.linear(x, w)
        return y.grad_fn.op.name, F.mse_loss(y, flow.zeros(4, 2)).grad_fn.op.name
    assert _both(made_by) == (("matmul", "mean"), ("linear", "mse_loss"))


def test_the_tuned_backward_walk_gives_the_lesson_gradients_on_branches_and_reuse():
    def loss_of(x, w, b, y):
        h = F.linear(x, w, b)
        h.retain_grad()
        z = (h * h).sum() + (h.exp() * y).mean() + (w * 2).sum()   # h read three times, w twice
        return z
    lesson, fast = _both(_grads(loss_of))
    for a, b in zip(lesson, fast):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def _poly_eager(steps, momentum):
    flow.manual_seed(0)
    x = flow.tensor(np.linspace(-1, 1, 60, dtype=np.float32).reshape(20, 3))
    y = flow.tensor(np.linspace(0, 1, 20, dtype=np.float32))
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    opt = flow.optim.SGD(model.parameters(), lr=0.05, momentum=momentum, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        loss = nn.MSELoss(reduction="sum")(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, [p.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_eager_training_is_the_same_on_both_paths(momentum):
    (lesson_losses, lesson_params), (fast_losses, fast_params) = _both(lambda: _poly_eager(30, momentum))
    np.testing.assert_allclose(lesson_losses, fast_losses, rtol=1e-5)
    for a, b in zip(lesson_params, fast_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------- Graph mode: the same steps


class PolyTrain(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = nn.MSELoss(reduction="sum")
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def _poly_graph(steps):
    flow.manual_seed(0)
    x = flow.tensor(np.linspace(-1, 1, 60, dtype=np.float32).reshape(20, 3))
    y = flow.tensor(np.linspace(0, 1, 20, dtype=np.float32))
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    graph = PolyTrain(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    losses = [float(graph(x, y)) for _ in range(steps)]
    return losses, graph


def test_graph_training_is_the_same_on_both_paths_and_matches_eager():
    (lesson_losses, lesson), (fast_losses, fast) = _both(lambda: _poly_graph(20))
    np.testing.assert_allclose(lesson_losses, fast_losses, rtol=1e-5)
    eager, _ = _poly_eager_momentum(20)
    np.testing.assert_allclose(lesson_losses, eager, rtol=1e-5)
    assert type(lesson.plan).__name__ == "Plan" and type(fast.plan).__name__ == "FastPlan"
    assert "linear" in {n.op.name for n in fast.ir.op_nodes}                # fused: one node
    assert {"matmul", "permute"} <= {n.op.name for n in lesson.ir.op_nodes}  # plain: x @ w.t() + b


def _poly_eager_momentum(steps):
    flow.manual_seed(0)
    x = flow.tensor(np.linspace(-1, 1, 60, dtype=np.float32).reshape(20, 3))
    y = flow.tensor(np.linspace(0, 1, 20, dtype=np.float32))
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    opt = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = nn.MSELoss(reduction="sum")(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, model


def test_a_graph_compiles_a_plan_for_each_path_and_never_runs_the_other_ones():
    with flow.set_fast_path(False):
        losses, graph = _poly_graph(2)
        lesson_plan = graph.plan
    x = flow.tensor(np.linspace(-1, 1, 60, dtype=np.float32).reshape(20, 3))
    y = flow.tensor(np.linspace(0, 1, 20, dtype=np.float32))
    with flow.set_fast_path(True):
        graph(x, y)
        assert type(graph.plan).__name__ == "FastPlan" and graph.plan is not lesson_plan
        graph(x, y)                                   # the repeat call
    with flow.set_fast_path(False):
        graph(x, y)
        assert graph.plan is lesson_plan              # its own plan again, kept in the cache
    assert len(graph._compiled) == 2


def test_the_lesson_step_runs_exactly_the_plan_source(lesson_path):
    """A lesson training step runs the function plan.source defines: its lines are the ones that run."""
    _, graph = _poly_graph(1)
    ran = []

    def trace(frame, event, arg):
        if frame.f_code.co_filename.startswith("<toynet plan"):
            if event == "line":
                ran.append(frame.f_lineno)
            return trace
        return trace if event == "call" else None
    x = flow.tensor(np.linspace(-1, 1, 60, dtype=np.float32).reshape(20, 3))
    y = flow.tensor(np.linspace(0, 1, 20, dtype=np.float32))
    sys.settrace(trace)
    try:
        graph(x, y)
    finally:
        sys.settrace(None)
    lines = graph.plan.source.splitlines()
    code = [n for n, line in enumerate(lines, 1) if line.startswith("    ") and not line.strip().startswith("#")]
    assert sorted(set(ran)) == code


# ------------------------------------------------------------------------------- the fast compiler


def emitted(graph: Graph) -> list[str]:
    """The generated lines that compute values (no comments, reads or returns)."""
    return [line.strip() for line in FastPlan(graph).source.splitlines()
            if line.startswith("    v") and " = " in line and "inputs[" not in line]


# (op, input shapes, attrs, what the plan's line should contain: the emit rule's code, or the kernel call
# of forward where the rule does not apply)
EMIT_CASES = [
    ("reshape", [(4, 6)], {"shape": (6, 4)}, ".reshape((6, 4))"),
    ("permute", [(2, 3, 4)], {"dims": (2, 0, 1)}, ".transpose((2, 0, 1))"),
    ("broadcast_to", [(3, 1)], {"shape": (2, 3, 5)}, "xp.broadcast_to("),
    ("matmul", [(4, 3), (3, 5)], {}, "xp.matmul("),
    ("linear", [(4, 3), (5, 3)], {}, "xp.matmul("),
    ("linear", [(4, 3), (5, 3), (5,)], {}, "xp.add(xp.matmul("),
    ("linear_grad_weight", [(4, 5), (4, 3)], {}, "xp.matmul(v_in0.T, v_in1"),
    ("linear_grad_weight", [(2, 4, 5), (2, 4, 3)], {}, "k_0(xp, "),       # batch dims: forward folds them
    ("sum_squares", [(7,)], {}, "xp.dot(v_in0, v_in0)"),
    ("sum_squares", [(2, 3)], {}, "xp.dot(v_in0.reshape(-1), v_in0.reshape(-1))"),
    ("sum_to", [(5, 4)], {"shape": (4,)}, "v_in0.sum(axis=(0,), out=b"),     # leading axes only
    ("sum_to", [(3,)], {"shape": ()}, "v_in0.sum(axis=(0,), out=b"),          # down to a 0-d array
    ("sum_to", [(6, 5, 4)], {"shape": (5, 1)}, "keepdims=True"),              # a kept axis too
    ("sum_to", [(5, 4)], {"shape": (5, 4)}, "k_0(xp, "),                      # nothing to sum
]


@pytest.mark.parametrize(("op_name", "shapes", "attrs", "code"), EMIT_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in EMIT_CASES])
def test_emit_rules_compute_what_forward_computes(op_name, shapes, attrs, code):
    b = Builder()
    inputs = [b.input(f"x{i}", shape) for i, shape in enumerate(shapes)]
    value = b.op(op_name, *inputs, name="value", **attrs)
    b.returns(b.op("mul", value, 2.0, name="twice"))   # not an output itself: the memory plan may pool it
    graph, _ = plan_memory(b.graph)
    assert any(code in line for line in emitted(graph)), FastPlan(graph).source
    assert_same_program(b.graph, graph, [f32(*shape) for shape in shapes], b.values)
    assert_same_program(b.graph, b.graph, [f32(*shape) for shape in shapes], b.values)   # no buffers


def test_sum_to_emits_into_a_staged_buffer_also_through_a_view_of_another_shape():
    b = Builder()
    x = b.input("x", (5, 4))
    total, kept = b.state("total", f32(4)), b.state("kept", f32(1, 4))
    b.update(total, b.op("sum_to", x, shape=(4,), name="new_total"))     # a pooled buffer: fine as out=
    b.update(kept, b.op("sum_to", x, shape=(1, 4), name="new_kept"))     # a view of one: reshaped once
    b.returns(b.op("neg", x, name="out"))
    graph, _ = plan_memory(b.graph)
    assert graph.memory.commits == {"total": "new_total", "kept": "new_kept"}
    lines = emitted(graph)
    assert any(line.startswith("v0 = v_in0.sum(axis=(0,), out=b") for line in lines), lines
    assert any(line.startswith("v1 = v_in0.sum(axis=(0,), keepdims=True, out=b") for line in lines), lines
    assert_same_program(b.graph, graph, [f32(5, 4)], b.values)


def test_emit_rules_paste_attributes_through_repr():
    assert EMIT["reshape"](["v0"], (), shape=[2, -1]) == "v0.reshape((2, -1))"
    assert EMIT["permute"](["v0"], (), dims=(1, 0)) == "v0.transpose((1, 0))"
    assert "add" not in EMIT and UFUNCS["add"] == "add"   # ufuncs need no rule: the plan calls xp.add




# ------------------------------------------------------------------------------------ the fast passes


FAST_PIPELINE = ["EliminateDeadCode", "FoldConstants", "EliminateCommonSubexpressions", "EliminateDeadCode",
                 "ReassociateScalars", "FoldBatchNorm", "RecomputeActivations", "ChannelsLast", "MergeSliceGradients",
                 "FuseElementwise", "PlanMemory"]   # (and ChooseKernels before PlanMemory, when a graph opts in)


def test_the_fast_pipeline_adds_the_speed_passes(fast_path):
    _, _, graph = train_conv(True, 1)
    assert [r.name for r in graph.passes] == FAST_PIPELINE
    assert set(FAST_PIPELINE) <= set(PASSES)


@pytest.fixture(scope="module")
def eager_conv():
    model, losses, _ = train_conv(False, 3)
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}, losses


@pytest.mark.parametrize("pass_name", sorted(set(FAST_PIPELINE)))
def test_each_fast_pipeline_pass_off_still_gives_eager_results(pass_name, eager_conv, fast_path):
    eager_state, eager_losses = eager_conv
    model, losses, graph = train_conv(True, 3, (pass_name,))
    assert pass_name not in [r.name for r in graph.passes]
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for key, value in model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), eager_state[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_the_fast_plan_source_explains_its_names(fast_path):
    _, _, graph = train_conv(True, 1)
    source = graph.plan.source
    header, _, body = source.partition("\ndef run(inputs, states, commit=None):\n")
    assert body, source
    assert all(line.startswith("#") for line in header.splitlines())
    for name in ("v_in0", "s0", "c0", "b2_5", "k_", "v0", "v9_t"):
        assert name in header, name
    assert ("lit0..." in header) == bool(re.search(r"\blit\d+\b", body))
    optimizer = type(graph._optimizers[0].optimizer).__name__
    for n in graph.ir.op_nodes:
        if n.phase == "optimizer":
            rule = "step counter" if n.scope == "System-Train-TrainStep" else f"{optimizer}.update"
            assert f"    # {n.name}    ({rule} of {n.scope})\n" in body
    assert ")[" not in body and ", )" not in body


def test_a_stack_of_rows_times_a_matrix_is_one_product_with_the_lesson_result():
    """ops/fast/matmul.py folds (B, T, C) @ (C, N) into one (B*T, C) @ (C, N) product: the same numbers as the
    lesson's stacked matmul, with and without an output buffer, in Eager and in a compiled plan."""
    import numpy as np
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5, 4)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    with flow.set_fast_path(False):
        lesson = (flow.tensor(a) @ flow.tensor(b)).numpy()
        lesson_linear = flow.nn.functional.linear(flow.tensor(a), flow.tensor(w)).numpy()
    with flow.set_fast_path(True):
        np.testing.assert_allclose((flow.tensor(a) @ flow.tensor(b)).numpy(), lesson, rtol=1e-6)
        np.testing.assert_allclose(flow.nn.functional.linear(flow.tensor(a), flow.tensor(w)).numpy(), lesson_linear,
                                   rtol=1e-6)
        out = np.empty((3, 5, 6), np.float32)
        assert type(flow.ops.OPS["matmul"]).forward(flow.ops.OPS["matmul"], np, a, b, out=out) is out
        np.testing.assert_allclose(out, lesson, rtol=1e-6)


def _split_graph(pieces):
    """A training graph whose loss reads the pieces of x (16 columns) taken by ``pieces(x)``."""
    weight = flow.nn.Parameter(flow.randn(4, 16))

    class Holder(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = weight

    holder = Holder()

    class Step(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.holder = holder
            self.add_optimizer(flow.optim.SGD(holder.parameters(), lr=0.1))

        def build(self, x):
            h = x @ self.holder.weight
            loss = sum(((k + 1) * p).square().sum() for k, p in enumerate(pieces(h)))
            loss.backward()
            return loss
    return Step(), holder


@pytest.mark.parametrize("pieces, merges", [
    (lambda h: h.split(4, dim=1), 1),                       # 4 slices tile the columns: one cat
    (lambda h: h.split([3, 5, 8], dim=1), 1),
    (lambda h: (h[:, :4], h[:, 8:]), 0),                    # a gap: zeros are needed, nothing to merge
    (lambda h: (h[:, :8], h[:, 4:]), 0),                    # an overlap: the gradients must add
    (lambda h: (h[:2], h[2:]), 1),                          # along the rows
])
def test_merge_slice_gradients_writes_a_split_s_gradient_as_one_cat_with_the_same_numbers(pieces, merges):
    x = flow.randn(4, 4)
    flow.manual_seed(0)
    with flow.set_fast_path(True):
        step, holder = _split_graph(pieces)
        loss = step(x)
        report = next(r for r in step.passes if r.name == "MergeSliceGradients")
        assert len(report.fused) == merges
        fast_weight = holder.weight.numpy()
    flow.manual_seed(0)
    with flow.set_fast_path(False):
        step, holder = _split_graph(pieces)
        np.testing.assert_allclose(step(x).numpy(), loss.numpy(), rtol=1e-6)
        np.testing.assert_allclose(holder.weight.numpy(), fast_weight, rtol=1e-5, atol=1e-6)


def test_a_pass_that_changes_nothing_reports_the_graph_it_was_given(fast_path):
    """static/fast/shared_reports.py: no copy is kept for a pass that found nothing to do; a pass that changed
    the graph keeps its own copy, and the graph it was given is untouched."""
    _, _, graph = train_conv(True, 1)
    reports = {r.name: r for r in graph.passes}
    assert reports["FoldBatchNorm"].before is reports["FoldBatchNorm"].after      # (a training graph: nothing)
    fuse = reports["FuseElementwise"]
    assert fuse.before is not fuse.after and fuse.ops_after < fuse.ops_before
    from toynet.static.fast.shared_reports import same_graph
    assert same_graph(fuse.before, fuse.before.copy()) and not same_graph(fuse.before, fuse.after)


def test_softmax_backward_as_one_op_gives_the_lesson_gradients_and_second_derivatives():
    """ops/fast/softmax.py: softmax's vjp is one softmax_grad op on the fast path; first and second derivatives
    equal the lesson's four-op formula."""
    import numpy as np
    rng = np.random.default_rng(0)
    data, weights = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    results = {}
    for fast in (False, True):
        with flow.set_fast_path(fast):
            x = flow.tensor(data, requires_grad=True)
            y = (x.softmax(-1) * flow.tensor(weights)).square().sum()
            (g,) = flow.autograd.grad(y, [x], create_graph=True)
            (gg,) = flow.autograd.grad(g.sin().sum(), [x])
            results[fast] = g.numpy(), gg.numpy()
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-10)
    np.testing.assert_allclose(results[True][1], results[False][1], rtol=1e-9, atol=1e-12)
