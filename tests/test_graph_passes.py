"""The optimisation passes, one at a time, on hand-built graphs and on graphs traced from modules.

Hand-built graphs say exactly what each pass must do to a given shape of program; a small reference
interpreter (every node computed in order with its op's forward) says what the program means, so a
compiled plan can be checked against it. Traced graphs check the passes on what nn.Graph really makes,
and that turning any pass off (``graph.config.enable_pass(name, False)``) changes no number.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import toynet as flow
from toynet import backend, nn
from toynet.ops import OPS
from toynet.static.compile import Plan
from toynet.static.ir import CONSTANT, INPUT, OP, STATE, Graph, Node
from toynet.static.passes import PASSES, optimize
from toynet.static.passes.simplify import eliminate_common_subexpressions
from toynet.static.passes.simplify import eliminate_dead_code
from toynet.static.passes.simplify import fold_constants
from toynet.static.passes.fuse import FusedElementwise, fuse_elementwise, reads_of_input, step_args
from toynet.static.passes.memory import END, plan_memory

CPU = backend.CPU
RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------ hand-built graphs


class Builder:
    """Writes a static graph node by node, as the tracer would."""

    def __init__(self, name: str = "hand"):
        self.graph = Graph(name)
        self.values: dict[str, np.ndarray] = {}   # state name -> initial value

    def input(self, name, shape, dtype=flow.float32):
        node = self.graph.add(Node(name, INPUT, shape, dtype, CPU))
        self.graph.inputs.append(node)
        return node

    def state(self, name, value, kind="parameter"):
        value = np.asarray(value, dtype=np.float32)
        self.values[name] = value
        return self.graph.add(Node(name, STATE, value.shape, flow.float32, CPU, state_name=name, state_kind=kind))

    def constant(self, name, value):
        value = np.asarray(value)
        return self.graph.add(Node(name, CONSTANT, value.shape, backend.dtype_of(value), CPU, value=value))

    def op(self, op_name, *inputs, name=None, **attrs):
        op = OPS[op_name]
        shape, dtype = op.infer(*inputs, **attrs)
        return self.graph.add(Node(name or op_name, OP, shape, dtype, CPU, op=op, inputs=inputs, attrs=attrs))

    def returns(self, *nodes):
        self.graph.outputs = list(nodes)
        return self

    def update(self, state, node):
        self.graph.updates[state.state_name] = node
        return self


def interpret(graph: Graph, inputs: list, states: dict) -> tuple[list, dict]:
    """What the graph means: every node computed in order, fresh arrays everywhere."""
    env = {}
    for n in graph.nodes:
        if n.kind == INPUT:
            env[id(n)] = inputs[graph.inputs.index(n)]
        elif n.kind == STATE:
            env[id(n)] = states[n.state_name]
        elif n.kind == CONSTANT:
            env[id(n)] = n.value
        else:
            args = [env[id(x)] if isinstance(x, Node) else x for x in n.inputs]
            env[id(n)] = np.asarray(n.op.forward(np, *args, **n.attrs))
    outputs = [np.array(env[id(n)]) for n in graph.outputs]
    updates = {name: np.array(env[id(n)]) for name, n in graph.updates.items()}
    return outputs, updates


def run_plan(graph: Graph, inputs: list, states: dict, calls: int = 1) -> tuple[list, dict]:
    """Compile ``graph`` as it is and call the plan; states are updated in place, as in nn.Graph."""
    plan = Plan(graph)
    arrays = {k: np.array(v) for k, v in states.items()}
    for _ in range(calls):
        outputs = plan.run(inputs, [arrays[name] for name in plan.state_names])
    return [np.asarray(o) for o in outputs], arrays


def assert_same_program(before: Graph, after: Graph, inputs: list, states: dict) -> None:
    """The optimised graph, compiled, computes what the original graph means (outputs and new state)."""
    want_out, want_updates = interpret(before, inputs, states)
    got_out, got_states = run_plan(after, inputs, states)
    for got, want in zip(got_out, want_out):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for name, want in want_updates.items():
        np.testing.assert_allclose(got_states[name], want, rtol=1e-6, atol=1e-6, err_msg=name)


def names(graph: Graph, kind: str | None = None) -> list[str]:
    return [n.name for n in graph.nodes if kind is None or n.kind == kind]


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------- DCE


def test_dce_removes_unused_ops_and_constants_but_keeps_inputs_and_state():
    b = Builder()
    x, _unused_input = b.input("x", (3, 4)), b.input("y", (3, 4))
    w, _unused_state = b.state("w", f32(4)), b.state("u", f32(4))
    c = b.constant("c", np.float32(2.0))
    kept = b.op("mul", b.op("add", x, w, name="xw"), 2.0, name="kept")
    b.op("exp", b.op("mul", x, c, name="dead_mul"), name="dead_exp")   # computed, never used
    b.constant("dead_const", np.ones(3, np.float32))
    b.returns(kept)
    before = len(b.graph)
    graph, report = eliminate_dead_code(b.graph)

    assert names(graph, OP) == ["xw", "kept"]
    assert names(graph, INPUT) == ["x", "y"] and names(graph, STATE) == ["w", "u"]
    assert names(graph, CONSTANT) == []
    assert sorted(report.removed) == ["c", "dead_const", "dead_exp", "dead_mul"]
    assert report.ops_before == 4 and report.ops_after == 2
    assert len(b.graph) == before, "a pass must not modify its input graph"
    assert graph.inputs == [n for n in graph.nodes if n.name in ("x", "y")]
    assert_same_program(b.graph, graph, [f32(3, 4), f32(3, 4)], b.values)


def test_dce_keeps_what_state_updates_need():
    b = Builder()
    x = b.input("x", (4,))
    w = b.state("w", f32(4))
    new_w = b.op("sub", w, b.op("mul", x, 0.1, name="step"), name="new_w")
    b.returns(b.op("sum", x, name="out"))
    b.update(w, new_w)
    graph, report = eliminate_dead_code(b.graph)
    assert "new_w" in names(graph) and "step" in names(graph)
    assert report.removed == []


# ---------------------------------------------------------------------------------- folding


def test_fold_computes_constant_only_subgraphs():
    b = Builder()
    x = b.input("x", (3,))
    c1, c2 = b.constant("c1", np.array([1, 2, 3], np.float32)), b.constant("c2", np.float32(0.5))
    scaled = b.op("exp", b.op("mul", c1, c2, name="c1c2"), name="exp_c")     # both foldable
    out = b.op("add", x, scaled, name="out")                                  # reads an input
    b.returns(out)
    graph, report = fold_constants(b.graph)

    assert report.folded == ["c1c2", "exp_c"]
    folded = {n.name: n for n in graph.nodes}["exp_c"]
    assert folded.kind == CONSTANT
    np.testing.assert_allclose(folded.value, np.exp(np.array([1, 2, 3], np.float32) * 0.5), rtol=1e-6)
    assert folded.value.dtype == np.float32
    assert {n.name: n for n in graph.nodes}["out"].kind == OP
    assert_same_program(b.graph, graph, [f32(3)], b.values)


def test_fold_never_folds_random_ops_or_state_reads():
    b = Builder()
    x = b.input("x", (1000,))
    w = b.state("w", f32(1000))
    c = b.constant("c", np.ones(1000, np.float32))
    mask = b.op("dropout_mask", c, p=0.5, name="mask")    # random: must draw anew on every call
    reads_state = b.op("mul", w, c, name="reads_state")   # state may change between calls
    b.returns(b.op("add", b.op("mul", x, mask, name="xm"), reads_state, name="out"))
    graph, report = fold_constants(b.graph)
    assert report.folded == []
    assert {n.name: n.kind for n in graph.nodes}["mask"] == OP
    assert {n.name: n.kind for n in graph.nodes}["reads_state"] == OP

    # And the compiled graph does draw a new mask each call.
    plan = Plan(graph)
    ones = np.ones(1000, np.float32)
    first = np.asarray(plan.run([ones], [np.zeros(1000, np.float32)])[0]).copy()
    second = np.asarray(plan.run([ones], [np.zeros(1000, np.float32)])[0])
    assert set(np.unique(first)) <= {0.0, 2.0} and not np.array_equal(first, second)


# -------------------------------------------------------------------------------------- CSE


def test_cse_merges_identical_ops_and_rewires_readers():
    b = Builder()
    x = b.input("x", (3, 4))
    w = b.state("w", f32(4))
    first, second = b.op("add", x, w, name="first"), b.op("add", x, w, name="second")
    third = b.op("add", x, w, name="third")
    s0, s1 = b.op("sum", first, dim=(0,), name="sum0"), b.op("sum", second, dim=(1,), name="sum1")  # attrs differ
    b.returns(b.op("mul", first, second, name="prod"), s0, s1, third)
    graph, report = eliminate_common_subexpressions(b.graph)

    assert report.merged == {"second": "first", "third": "first"}
    prod = {n.name: n for n in graph.nodes}["prod"]
    assert prod.inputs[0] is prod.inputs[1]
    assert "sum0" in names(graph) and "sum1" in names(graph)
    assert graph.outputs[3].name == "first"
    assert_same_program(b.graph, graph, [f32(3, 4)], b.values)


def test_cse_never_merges_random_ops():
    b = Builder()
    x = b.input("x", (100,))
    m1, m2 = b.op("dropout_mask", x, p=0.5, name="m1"), b.op("dropout_mask", x, p=0.5, name="m2")
    b.returns(b.op("sub", m1, m2, name="diff"))
    graph, report = eliminate_common_subexpressions(b.graph)
    assert report.merged == {}
    diff = np.asarray(Plan(graph).run([np.ones(100, np.float32)], [])[0])
    assert np.any(diff != 0), "two dropout masks were computed once"


# ------------------------------------------------------------------------------------- fusion


def fused_nodes(graph):
    return [n for n in graph.nodes if n.kind == OP and n.op is FusedElementwise]


def test_fuse_turns_a_chain_into_one_kernel_named_after_its_tail():
    b = Builder()
    x = b.input("x", (3, 4))
    w = b.state("w", f32(4))
    out = b.op("add", b.op("mul", b.op("relu", x, name="r"), w, name="m"), 1.0, name="tail")
    b.returns(b.op("sum", out, name="total"))
    graph, report = fuse_elementwise(b.graph)
    (fused,) = fused_nodes(graph)
    assert fused.name == "tail"
    assert [s["op"] for s in fused.attrs["program"]] == ["relu", "mul", "add"]
    assert report.fused == {"tail": ["r", "m", "tail"]}
    assert report.ops_before == 4 and report.ops_after == 2
    assert fused.op.describe(**fused.attrs) == "fused[relu > mul > add]"
    assert_same_program(b.graph, graph, [f32(3, 4)], b.values)


def test_fuse_respects_multiple_readers_shape_and_dtype_changes_and_outputs():
    b = Builder()
    x = b.input("x", (3, 1))
    y = b.input("y", (3, 4))
    shared = b.op("exp", x, name="shared")                       # read twice: must stay its own node
    a = b.op("neg", shared, name="a")
    c = b.op("sigmoid", shared, name="c")
    broadcast = b.op("add", a, y, name="broadcast")              # a is (3, 1), broadcast is (3, 4)
    wide = b.op("cast", broadcast, dtype=flow.float64, name="wide")  # dtype changes
    doubled = b.op("mul", wide, 2.0, name="doubled")
    returned = b.op("tanh", y, name="returned")                  # a graph output
    after = b.op("mul", returned, 3.0, name="after")
    compare = b.op("gt", y, 0.0, name="compare")                 # bool: not a float chain
    b.returns(b.op("sum", doubled, name="s1"), c, returned, after, b.op("logical_not", compare, name="notc"))
    graph, report = fuse_elementwise(b.graph)

    groups = sorted(sorted(v) for v in report.fused.values())
    assert groups == [["doubled", "wide"]], report.fused
    kept = names(graph, OP)
    for name in ("shared", "a", "c", "broadcast", "returned", "after", "compare", "notc"):
        assert name in kept
    assert_same_program(b.graph, graph, [f32(3, 1), f32(3, 4)], b.values)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_the_fused_kernel_computes_its_steps_with_and_without_buffers(shape):
    program = [{"op": "add", "args": [["in", 0], ["in", 1]], "attrs": {}},
               {"op": "mul", "args": [["prev"], ["lit", 2.0]], "attrs": {}},
               {"op": "sub", "args": [["in", 1], ["prev"]], "attrs": {}}]
    a, b = np.asarray(RNG.standard_normal(shape), np.float32), np.asarray(RNG.standard_normal(shape), np.float32)
    want = b - (a + b) * 2.0
    fused = OPS["fused_elementwise"]
    plain = fused.forward(np, a, b, program=program)
    assert isinstance(plain, np.ndarray) and plain.dtype == np.float32
    np.testing.assert_allclose(plain, want, rtol=1e-6)
    out, scratch = np.empty(shape, np.float32), np.empty(shape, np.float32)
    assert fused.forward(np, a, b, program=program, out=out, scratch=scratch) is out
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert fused.infer(Node("a", INPUT, shape, flow.float32, CPU), Node("b", INPUT, shape, flow.float32, CPU),
                       program=program) == (shape, flow.float32)


def test_one_decoder_reads_the_fused_program_for_the_kernel_the_shape_rule_and_the_compiler():
    step = {"op": "sub", "args": [["in", 1], ["prev"], ["lit", float("inf")]], "attrs": {}}
    assert step_args(step, ["a", "b"], "p") == ["b", "p", float("inf")]
    assert step_args(step, ["v_in0", "v_in1"], "v3_t", literal=repr) == ["v_in1", "v3_t", "inf"]
    assert reads_of_input([step, {"op": "neg", "args": [["in", 1]], "attrs": {}}], 1) == [0, 1]


# -------------------------------------------------------------------------------- memory planning


def test_memory_reuses_buffers_along_a_long_chain():
    b = Builder()
    h = b.input("x", (8, 8))
    weights = [b.state(f"w{i}", f32(8, 8) / 3) for i in range(12)]
    for i, w in enumerate(weights):
        h = b.op("matmul", h, w, name=f"mm{i}")
        h = b.op("tanh", h, name=f"t{i}")
    b.returns(b.op("sum", h, name="total"))
    graph, report = plan_memory(b.graph)
    plan = graph.memory
    assert len(plan.buffer_of) == 24             # every value but the output has a buffer...
    assert plan.arena_bytes <= 2 * 8 * 8 * 4     # ...but the memory of two arrays is enough for all of them
    assert plan.bytes_pooled == plan.arena_bytes < plan.bytes_without_reuse / 10
    assert f"buffers for 24 values in {plan.arena_bytes} B," in report.summary()
    # Buffers alive at the same time never overlap in the arena (and one in place shares its input's).
    life = {name: (k, plan.last_use[name]) for k, name in enumerate(plan.buffer_of)}
    for a, slot_a in plan.buffer_of.items():
        for b_, slot_b in plan.buffer_of.items():
            if slot_a != slot_b and life[a][0] <= life[b_][1] and life[b_][0] <= life[a][1]:
                ends = (plan.offsets[slot_a] + plan.buffers[slot_a], plan.offsets[slot_b] + plan.buffers[slot_b])
                assert ends[0] <= plan.offsets[slot_b] or ends[1] <= plan.offsets[slot_a], (a, b_)
    assert_same_program(b.graph, graph, [f32(8, 8)], b.values)
    # Reused buffers on a second call give the same answer.
    once, _ = run_plan(graph, [np.eye(8, dtype=np.float32)], b.values, calls=1)
    twice, _ = run_plan(graph, [np.eye(8, dtype=np.float32)], b.values, calls=2)
    np.testing.assert_array_equal(once[0], twice[0])


def test_memory_works_in_place_only_over_values_that_die():
    b = Builder()
    x = b.input("x", (4, 4))
    w = b.state("w", f32(4, 4))
    h = b.op("matmul", x, w, name="h")
    dies = b.op("relu", h, name="relu_h")          # h is read again below: not in place
    g = b.op("matmul", dies, w, name="g")
    last = b.op("exp", g, name="exp_g")           # g dies here: in place
    b.returns(b.op("sum", b.op("add", last, h, name="sum_h"), name="total"))
    graph, _ = plan_memory(b.graph)
    inplace = graph.memory.inplace
    assert "relu_h" not in inplace
    assert inplace.get("exp_g") == "g"
    assert_same_program(b.graph, graph, [f32(4, 4)], b.values)


def test_memory_never_writes_in_place_over_a_value_the_op_also_reads_through_a_view():
    b = Builder()
    x = b.input("x", (3, 3))
    w = b.state("w", f32(3, 3))
    h = b.op("matmul", x, w, name="h")
    view = b.op("permute", h, dims=(1, 0), name="h_t")
    mixed = b.op("add", b.op("mul", b.op("add", h, 1.0, name="h1"), 2.0, name="h2"), view, name="mixed")
    b.returns(b.op("matmul", mixed, w, name="out"))
    graph, _ = fuse_elementwise(b.graph)
    graph, _ = plan_memory(graph)
    assert "mixed" not in graph.memory.inplace
    assert_same_program(b.graph, graph, [f32(3, 3)], b.values)


def test_memory_stages_every_state_update_and_commits_them_together_at_the_end():
    b = Builder()
    x = b.input("x", (4,))
    w = b.state("w", f32(4))
    v = b.state("v", f32(4))
    new_w = b.op("sub", w, x, name="new_w")           # nothing reads w afterwards: still staged
    new_v = b.op("add", v, x, name="new_v")
    late_read = b.op("mul", v, 3.0, name="late")      # reads the OLD v after new_v is computed
    b.returns(b.op("add", late_read, new_w, name="out"))
    b.update(w, new_w).update(v, new_v)
    graph, report = plan_memory(b.graph)
    plan = graph.memory
    assert plan.commits == {"w": "new_w", "v": "new_v"}
    assert plan.buffer_of["new_w"] != plan.buffer_of["new_v"]      # both live to the end
    assert plan.last_use["new_w"] == plan.last_use["new_v"] == END
    assert "2 state updates staged" in report.summary()
    assert_same_program(b.graph, graph, [f32(4)], b.values)
    # No op writes a state's array: only the commit, the last statement before the return.
    source = Plan(graph).source
    body = [line.strip() for line in source.splitlines() if line.startswith("    ") and "#" not in line]
    assert not any("out=s" in line or line.startswith("s") and "] =" in line for line in body), source
    assert body[-2:] == ["commit((s0, s1), (v0, v1))", "return (xp.asarray(v3),)"], source


def test_memory_does_not_overwrite_a_state_another_state_copies():
    """``prev.copy_(cur); cur.copy_(cur * 2)``: cur's old value is read when prev is committed."""
    b = Builder()
    x = b.input("x", (3,))
    prev, cur = b.state("prev", np.zeros(3), kind="buffer"), b.state("cur", np.ones(3), kind="buffer")
    new_cur = b.op("add", b.op("mul", cur, 2.0, name="twice"), x, name="new_cur")
    b.returns(b.op("neg", x, name="out"))
    b.update(prev, cur).update(cur, new_cur)
    graph, _ = plan_memory(b.graph)
    assert graph.memory.commits == {"prev": "cur", "cur": "new_cur"}
    assert "s0_old = s0.copy()" in Plan(graph).source or "s1_old = s1.copy()" in Plan(graph).source
    assert_same_program(b.graph, graph, [np.ones(3, np.float32)], b.values)
    # Swapped: each state's new value is the other's old one. No order of two copies does that.
    b = Builder()
    x = b.input("x", (3,))
    a, c = b.state("a", np.zeros(3), kind="buffer"), b.state("c", np.ones(3), kind="buffer")
    b.returns(b.op("neg", x, name="out"))
    b.update(a, c).update(c, a)
    graph, _ = plan_memory(b.graph)
    assert_same_program(b.graph, graph, [np.ones(3, np.float32)], b.values)
    assert_same_program(b.graph, b.graph, [np.ones(3, np.float32)], b.values)   # no memory plan


def test_memory_keeps_a_buffer_alive_while_a_view_of_it_is_read():
    b = Builder()
    x = b.input("x", (4, 6))
    w1, w2 = b.state("w1", f32(6, 6)), b.state("w2", f32(6, 6))
    a = b.op("matmul", x, w1, name="a")                      # a pooled buffer...
    view = b.op("reshape", a, shape=(6, 4), name="view")     # ...seen through a view
    later = b.op("matmul", x, w2, name="later")              # same shape as a: would love a's buffer
    back = b.op("reshape", view, shape=(4, 6), name="back")
    b.returns(b.op("sum", b.op("add", back, later, name="mix"), name="total"))
    graph, _ = plan_memory(b.graph)
    plan = graph.memory
    assert plan.buffer_of["later"] != plan.buffer_of["a"]
    assert plan.last_use["a"] >= plan.last_use["back"]
    assert_same_program(b.graph, graph, [f32(4, 6)], b.values)


def test_zero_d_fused_chain_without_memory_plan():
    b = Builder()
    x = b.input("x", (3,))
    total = b.op("sum", x, dim=(0,), name="total")
    b.returns(b.op("mul", b.op("add", total, 1.0, name="plus"), 2.0, name="times"))
    graph, _ = fuse_elementwise(b.graph)
    out, _ = run_plan(graph, [np.ones(3, np.float32)], {})
    assert isinstance(out[0], np.ndarray) and out[0] == 8.0


def test_zero_d_outputs_hold_arrays():
    class Doubled(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(3, 1)

        def build(self, x):
            return self.model(x).sum() * 2

    out = Doubled()(flow.randn(4, 3))
    assert type(out.array) is np.ndarray and out.shape == ()


# ------------------------------------------------------------------------------------ code generation


# ------------------------------------------------------------------------------- traced graphs


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.25), nn.Linear(4 * 3 * 3, 3))

    def forward(self, x):
        return self.head(self.features(x))


def conv_data():
    rng = np.random.default_rng(3)
    x = flow.tensor(rng.standard_normal((5, 2, 6, 6)).astype(np.float32))
    y = flow.tensor(np.array([0, 1, 2, 1, 0]), dtype=flow.int64)
    return x, y


def train_conv(graph_mode: bool, steps: int, disabled=()):
    flow.manual_seed(11)
    model = ConvNet()
    opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x, y = conv_data()
    flow.manual_seed(12)   # the dropout masks: the same draws in both modes
    if graph_mode:
        class Train(nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model
                self.loss_fn = loss_fn
                self.add_optimizer(opt)

            def build(self, x, y):
                loss = self.loss_fn(self.model(x), y)
                loss.backward()
                return loss

        graph = Train()
        for name in disabled:
            graph.config.enable_pass(name, False)
        losses = [graph(x, y).numpy().copy() for _ in range(steps)]
        return model, losses, graph
    losses = []
    for _ in range(steps):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.numpy().copy())
    return model, losses, None


@pytest.fixture(scope="module")
def eager_conv():
    model, losses, _ = train_conv(False, 3)
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}, losses


LESSON_PASSES = ["EliminateDeadCode", "FoldConstants", "EliminateCommonSubexpressions", "FuseElementwise", "PlanMemory"]


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
@pytest.mark.parametrize("pass_name", LESSON_PASSES)
def test_each_pass_on_or_off_gives_eager_results(pass_name, enabled, eager_conv, lesson_path):
    eager_state, eager_losses = eager_conv
    model, losses, graph = train_conv(True, 3, () if enabled else (pass_name,))
    ran = [r.name for r in graph.passes]
    assert (pass_name in ran) == enabled
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for key, value in model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), eager_state[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_graph_passes_lists_the_pipeline_and_what_each_pass_did(lesson_path):
    _, _, graph = train_conv(True, 1)
    reports = graph.passes
    assert [r.name for r in reports] == ["EliminateDeadCode", "FoldConstants", "EliminateCommonSubexpressions",
                                         "EliminateDeadCode", "FuseElementwise", "PlanMemory"]
    by_name = {r.name: r for r in reports}
    assert by_name["FuseElementwise"].fused
    for r in reports:
        assert r.summary().startswith(f"{r.name}: {r.ops_before} -> {r.ops_after} ops")
    fuse = by_name["FuseElementwise"]
    first_fused = next(iter(fuse.fused))
    assert f"  fused    %{first_fused} <- " in fuse.details()
    assert reports[-1].after is graph.ir
    assert reports[0].before is graph.traced_ir
    assert graph.ir.count_ops() < graph.traced_ir.count_ops()
    with pytest.raises(ValueError, match="unknown pass"):
        graph.config.enable_pass("Inline", False)


def test_traced_graph_passes_remove_fold_and_merge_what_the_build_wrote():
    class Messy(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(3, 3)

        def build(self, x):
            h = self.model(x)
            _unused = h.exp() * 5                    # dead code
            scale = flow.ones(3) * 2 + 1              # constants only
            return (h + 1) * (h + 1) * scale          # a common subexpression

    graph = Messy()
    x = flow.randn(2, 3)
    out = graph(x)
    with flow.no_grad():
        h = graph.model(x)
        want = (h + 1) * (h + 1) * 3
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-6)
    # (the fast path puts a pass of its own between the simplifying ones: find them by name)
    dce, dce_again = [r for r in graph.passes if r.name == "EliminateDeadCode"][:2]
    fold, cse = (next(r for r in graph.passes if r.name == name) for name in ("FoldConstants",
                                                                              "EliminateCommonSubexpressions"))
    traced_ops = names(graph.traced_ir, OP)
    exp_op = next(n for n in traced_ops if "exp" in n)
    assert exp_op in dce.removed and exp_op not in names(graph.ir)
    assert len(fold.folded) == 2                     # ones * 2, then + 1
    assert len(cse.merged) == 1                      # the second h + 1
    assert any("FreeEagerTensor" in n for n in dce_again.removed)   # the folded constant's input


def test_the_plan_creates_no_tensors_per_op(lesson_path):
    _, _, graph = train_conv(True, 1)
    source = graph.plan.source
    header, _, body = source.partition("\ndef run(inputs, states, commit=commit_all):\n")
    assert body, source
    for forbidden in ("Tensor", "apply(", "grad_fn", "OPS["):
        assert forbidden not in body
    # One line per op of the optimised graph, under a comment naming it.
    calls = [line for line in body.splitlines() if re.match(r"    v\d+ = \w+\(xp", line)]
    assert len(calls) == graph.ir.count_ops(), body
    # The loss is computed and returned; every state is read from `states`, and written only by the commit.
    assert "    return (" in body and "states[" in body
    assert "out=s" not in body and "    commit((s" in body


def test_the_plan_source_reads_as_a_lesson(lesson_path):
    _, _, graph = train_conv(True, 1)
    source = graph.plan.source
    header, _, body = source.partition("\ndef run(inputs, states, commit=commit_all):\n")
    # A header of comments explains every kind of name the code uses.
    assert all(line.startswith("#") for line in header.splitlines())
    for name in re.findall(r"\b(v_in|s|c|lit|b|v)\d+", body):
        assert f"#   {name}0..." in header, name
    assert "the state arrays" in header and "memory plan" in header
    # Each phase is titled, and each optimizer op names the parameter update it belongs to, not the
    # user's call of the graph.
    assert [line for line in body.splitlines() if line.startswith("    # ---- ")] == [
        "    # ---- forward: what build() computes from the inputs",
        "    # ---- backward: the gradients, each op's vjp rule",
        "    # ---- optimizer: the update of each parameter and its optimizer state",
        "    # ---- commit: every state update at once, none written before (a failed step changes nothing)"]
    optimizer = type(graph._optimizers[0].optimizer).__name__
    for n in graph.ir.op_nodes:
        if n.phase == "optimizer":
            rule = "step counter" if n.scope == "System-Train-TrainStep" else f"{optimizer}.update"
            assert f"    # {n.name}: {n.op.describe(**n.attrs)}    ({rule} of {n.scope})\n" in body
    assert "model.features.0.weight" in {n.scope for n in graph.ir.op_nodes if n.phase == "optimizer"}
    # Each op is one call of its forward: the op's name, its attributes bound (sum_3), xp and the inputs.
    assert re.search(r"\n    v\d+ = conv2d_\d+\(xp, v_in0, s\d+", body), body
    assert ")[" not in body and ", )" not in body
    last = body.splitlines()[-1]
    assert last.startswith("    return (xp.asarray(v") and last.endswith("),)")   # the loss, a 0-d array


def test_names_in_comments_of_the_plan_stay_comments():
    b = Builder("a\nb")
    x = b.input("x", (3,))
    b.returns(b.op("neg", x, name="neg\nraise SystemExit"))
    plan = Plan(b.graph)
    assert "\nraise SystemExit" not in plan.source and "# neg raise SystemExit" in plan.source
    np.testing.assert_array_equal(plan.run([np.ones(3, np.float32)], [])[0], -np.ones(3))


def test_optimize_leaves_its_input_untouched_and_rejects_unknown_passes(lesson_path):
    _, _, graph = train_conv(True, 1)
    traced = graph.traced_ir
    text_before = traced.format()
    optimized, reports = optimize(traced, disabled={"PlanMemory"})
    assert traced.format() == text_before
    assert [r.name for r in reports][-1] == "FuseElementwise" and optimized.memory is None
    with pytest.raises(ValueError, match="unknown pass"):
        optimize(traced, disabled={"NoSuchPass"})
