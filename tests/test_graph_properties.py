"""Graph mode equals Eager mode on random small models (hypothesis).

Each example is a random *program*: a chain of steps drawn from toynet's op set (elementwise ops with
broadcasting parameters, skip connections that reuse earlier values, linear/matmul, reductions
broadcast back, reshape/transpose/getitem, cat, softmax/log_softmax) ending in a loss. The same
program runs as an eager module and inside an ``nn.Graph``:

* inference graphs must return the eager outputs (every returned value, intermediate ones included);
* training graphs (SGD with momentum) must leave the same parameters after two steps, which checks the
  symbolic gradients, the optimizer's traced update and the in-place state writes together;

with every optimisation pass on, and with each pass switched off in turn.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import backend, nn
from toynet.ops import OPS
from toynet.static.compile import Plan
from toynet.static.ir import CONSTANT, INPUT, OP, STATE, Graph, Node
from toynet.static.passes import PASSES, optimize

CONFIGS = [()] + [(name,) for name in PASSES]
SETTINGS = settings(max_examples=int(__import__("os").environ.get("GRAPH_EXAMPLES", 40)), deadline=None, suppress_health_check=[HealthCheck.too_slow])

UNARY = ["relu", "sigmoid", "tanh", "neg", "abs", "square", "scale", "shift", "exp_tanh", "sqrt_safe",
         "log_safe", "clamp"]
BINARY = ["add", "sub", "mul", "div_safe", "maximum"]
PARAM_SHAPES = ["row", "col", "full", "scalar"]
# A 0-d parameter makes 0-d fused chains (see test_graph_passes.py::test_zero_d_fused_chain_without_memory_plan).
SCALAR = ()


# ----------------------------------------------------------------------------------- programs


@st.composite
def programs(draw):
    """A plain-data program: batch size, input width, steps, which extra values to return, the loss."""
    batch = draw(st.integers(2, 4))
    width = draw(st.integers(1, 5))
    steps = []
    widths = [width]          # width after each step (value 0 is the input)
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "unary", "param", "param", "skip", "linear", "matmul",
                                     "reduce", "transpose", "roll", "softmax", "cat", "view_mix"]))
        current = widths[-1]
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY))))
        elif kind == "param":
            steps.append(("param", draw(st.sampled_from(BINARY)), draw(st.sampled_from(PARAM_SHAPES))))
        elif kind == "skip":
            same = [i for i, w in enumerate(widths) if w == current]
            steps.append(("skip", draw(st.sampled_from(BINARY)), draw(st.sampled_from(same))))
        elif kind in ("linear", "matmul"):
            current = draw(st.integers(1, 5))
            steps.append((kind, current))
        elif kind == "reduce":
            steps.append(("reduce", draw(st.sampled_from(["sum", "mean", "amax"])), draw(st.sampled_from([0, 1])),
                          draw(st.sampled_from(["sub", "mul"]))))
        elif kind == "transpose":
            steps.append(("transpose", draw(st.sampled_from(["reshape", "permute", "t"]))))
        elif kind == "roll":
            steps.append(("roll", draw(st.integers(0, current))))
        elif kind == "view_mix":
            views = ["reshape", "getitem"] + (["t"] if current == batch else [])
            steps.append(("view_mix", draw(st.sampled_from(views)), draw(st.sampled_from(UNARY))))
        elif kind == "softmax":
            steps.append(("softmax", draw(st.sampled_from(["softmax", "log_softmax"])), draw(st.sampled_from([0, 1]))))
        elif kind == "cat" and current <= 4:
            steps.append(("cat", draw(st.sampled_from(UNARY))))
            current = 2 * current
        else:  # a cat that would make the values too wide
            steps.append(("unary", draw(st.sampled_from(UNARY))))
        widths.append(current)
    returned = draw(st.lists(st.integers(0, len(widths) - 1), max_size=2, unique=True))
    loss = draw(st.sampled_from(["mse", "sum_sq", "cross_entropy", "mean_tanh"]))
    seed = draw(st.integers(0, 2**16))
    return {"batch": batch, "width": width, "steps": steps, "widths": widths, "returned": returned,
            "loss": loss, "seed": seed}


def unary(name: str, h):
    if name == "relu":
        return h.relu()
    if name == "sigmoid":
        return h.sigmoid()
    if name == "tanh":
        return flow.tanh(h)
    if name == "neg":
        return -h
    if name == "abs":
        return h.abs()
    if name == "square":
        return h ** 2
    if name == "scale":
        return h * 0.5
    if name == "shift":
        return 1.0 - h
    if name == "exp_tanh":
        return h.tanh().exp()
    if name == "sqrt_safe":
        return (h * h + 1.0).sqrt()
    if name == "log_safe":
        return (h * h + 1.0).log()
    if name == "clamp":
        return h.clamp(-0.5, 0.5)
    raise AssertionError(name)


def binary(name: str, a, b):
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div_safe":
        return a / (b * b + 1.0)
    if name == "maximum":
        return flow.maximum(a, b)
    raise AssertionError(name)


class Program(nn.Module):
    """The program as a module: its parameters are drawn from the program's seed."""

    def __init__(self, prog: dict):
        super().__init__()
        self.prog = prog
        rng = np.random.default_rng(prog["seed"])
        batch = prog["batch"]
        for i, step in enumerate(prog["steps"]):
            before = prog["widths"][i]
            shape = None
            if step[0] == "param":
                shape = {"row": (before,), "col": (batch, 1), "full": (batch, before), "scalar": SCALAR}[step[2]]
            elif step[0] == "linear":
                setattr(self, f"b{i}", nn.Parameter(flow.tensor(rng.uniform(-0.5, 0.5, step[1]).astype(np.float32))))
                shape = (step[1], before)
            elif step[0] == "matmul":
                shape = (before, step[1])
            if shape is not None:
                value = rng.uniform(-1, 1, shape).astype(np.float32)
                setattr(self, f"p{i}", nn.Parameter(flow.tensor(value)))

    def forward(self, x, target):
        values = [x]
        h = x
        for i, step in enumerate(self.prog["steps"]):
            kind = step[0]
            if kind == "unary":
                h = unary(step[1], h)
            elif kind == "param":
                h = binary(step[1], h, getattr(self, f"p{i}"))
            elif kind == "skip":
                h = binary(step[1], h, values[step[2]])
            elif kind == "linear":
                h = nn.functional.linear(h, getattr(self, f"p{i}"), getattr(self, f"b{i}"))
            elif kind == "matmul":
                h = flow.matmul(h, getattr(self, f"p{i}"))
            elif kind == "reduce":
                _, how, dim, combine = step
                r = h.amax(dim=dim, keepdim=True) if how == "amax" else getattr(h, how)(dim=dim, keepdim=True)
                h = h - r if combine == "sub" else h * r
            elif kind == "transpose":
                b, w = h.shape
                if step[1] == "reshape":
                    h = (h.reshape(w, b) * 2.0).reshape(b, w)
                elif step[1] == "permute":
                    h = h.permute(1, 0).tanh().permute(1, 0)
                else:
                    h = (h.t() + 1.0).t()
            elif kind == "view_mix":
                # An elementwise chain that also reads a view of its own input (in-place hazards).
                if step[1] == "reshape":
                    view = h.reshape(-1).reshape(*h.shape)
                elif step[1] == "getitem":
                    view = h[:, :]
                else:
                    view = h.t()
                h = unary(step[2], h + 1.0) * 2.0 + view
            elif kind == "roll":
                k = step[1]
                h = flow.cat([h[:, k:], h[:, :k]], dim=1)
            elif kind == "softmax":
                h = h.softmax(dim=step[2]) if step[1] == "softmax" else h.log_softmax(dim=step[2])
            elif kind == "cat":
                h = flow.cat([h, unary(step[1], h)], dim=1)
            values.append(h)
        how = self.prog["loss"]
        if how == "mse":
            loss = nn.functional.mse_loss(h, target)
        elif how == "sum_sq":
            loss = (h * h).sum()
        elif how == "cross_entropy":
            loss = nn.functional.cross_entropy(h, target)
        else:
            loss = h.tanh().mean()
        return loss, [values[i] for i in self.prog["returned"]]


def inputs_for(prog: dict):
    rng = np.random.default_rng(prog["seed"] + 1)
    x = flow.tensor(rng.uniform(-1, 1, (prog["batch"], prog["width"])).astype(np.float32))
    if prog["loss"] == "cross_entropy":
        target = flow.tensor(rng.integers(0, prog["widths"][-1], prog["batch"]), dtype=flow.int64)
    else:
        target = flow.tensor(rng.uniform(-1, 1, (prog["batch"], prog["widths"][-1])).astype(np.float32))
    return x, target


class InferenceGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x, target):
        loss, extra = self.model(x, target)
        return loss, extra


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, target):
        loss, _ = self.model(x, target)
        loss.backward()
        return loss


def assert_close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=what)


def describe(prog, disabled):
    return f"program {prog['steps']} loss={prog['loss']} returned={prog['returned']}, passes off: {disabled}"


# --------------------------------------------------------------------------------------- tests


@SETTINGS
@given(programs())
def test_inference_graph_equals_eager(prog):
    x, target = inputs_for(prog)
    model = Program(prog)
    with flow.no_grad():
        loss, extra = model(x, target)
    for disabled in CONFIGS:
        graph = InferenceGraph(model)
        for name in disabled:
            graph.config.enable_pass(name, False)
        for call in range(2):   # the second call runs on reused buffers
            g_loss, g_extra = graph(x, target)
            what = describe(prog, disabled) + f", call {call}"
            assert g_loss.shape == loss.shape and g_loss.dtype == loss.dtype
            assert_close(g_loss.numpy(), loss.numpy(), what)
            assert len(g_extra) == len(extra)
            for got, want in zip(g_extra, extra):
                assert tuple(got.shape) == tuple(want.shape)
                assert_close(got.numpy(), want.numpy(), what)


def train_eager(prog, steps):
    x, target = inputs_for(prog)
    model = Program(prog)
    opt = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss, _ = model(x, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.numpy().copy())
    return model, losses


def train_graph(prog, steps, disabled):
    x, target = inputs_for(prog)
    model = Program(prog)
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    for name in disabled:
        graph.config.enable_pass(name, False)
    losses = [graph(x, target).numpy().copy() for _ in range(steps)]
    return model, losses


@SETTINGS
@given(programs().filter(lambda p: any(s[0] in ("param", "linear", "matmul") for s in p["steps"])))
def test_training_graph_equals_eager(prog):
    eager_model, eager_losses = train_eager(prog, 2)
    for disabled in CONFIGS:
        model, losses = train_graph(prog, 2, disabled)
        what = describe(prog, disabled)
        assert_close(np.array(losses), np.array(eager_losses), what + " (losses)")
        for (name, p), (_, q) in zip(model.named_parameters(), eager_model.named_parameters()):
            assert_close(p.numpy(), q.numpy(), what + f" (parameter {name})")


@pytest.mark.parametrize("disabled", [(), PASSES])
def test_training_graph_with_every_step_kind(disabled):
    """One fixed program that uses every kind of step at least once (hypothesis may not draw all)."""
    steps = [("linear", 4), ("unary", "tanh"), ("param", "add", "row"), ("skip", "mul", 1),
             ("reduce", "mean", 1, "sub"), ("transpose", "permute"), ("roll", 1), ("softmax", "softmax", 1),
             ("cat", "sigmoid"), ("matmul", 3), ("param", "div_safe", "col"), ("transpose", "reshape"),
             ("reduce", "amax", 0, "mul"), ("unary", "exp_tanh")]
    widths = [3, 4, 4, 4, 4, 4, 4, 4, 4, 8, 3, 3, 3, 3, 3]
    prog = {"batch": 4, "width": 3, "steps": steps, "widths": widths, "returned": [2, 9],
            "loss": "cross_entropy", "seed": 7}
    eager_model, eager_losses = train_eager(prog, 3)
    model, losses = train_graph(prog, 3, disabled)
    assert_close(np.array(losses), np.array(eager_losses), "losses")
    for p, q in zip(model.parameters(), eager_model.parameters()):
        assert_close(p.numpy(), q.numpy(), "parameters")
    # The parameters did move: the comparison is not between two untouched models.
    assert not np.allclose(model.p0.numpy(), Program(prog).p0.numpy())


# ------------------------------------------------------------------------ random graphs, written directly

# Programs that nn.Modules rarely write but the passes must still get right: values read by many ops,
# views of views, views of state, outputs that are inputs, state or views, state updates that are
# other states' old values, constants everywhere. Built node by node as the tracer would.

A, AT, ROW, FLAT, SQUARE = (3, 4), (4, 3), (4,), (12,), (4, 4)


@st.composite
def ir_programs(draw):
    """A list of node recipes (plain data) over values of a few related shapes."""
    shapes = [A]                                     # value index -> shape
    recipe = [("input", A)]
    if draw(st.booleans()):
        recipe.append(("input", ROW))
        shapes.append(ROW)
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from([A, ROW, AT, SQUARE]))
        recipe.append(("state", shape))
        shapes.append(shape)
    for _ in range(draw(st.integers(0, 2))):
        shape = draw(st.sampled_from([A, ROW]))
        recipe.append(("constant", shape))
        shapes.append(shape)

    def pick(allowed):
        choices = [i for i, s in enumerate(shapes) if s in allowed]
        return draw(st.sampled_from(choices)) if choices else None

    for _ in range(draw(st.integers(2, 14))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "view", "matmul", "sum", "view_chain"]))
        if kind == "view_chain":                 # f(x) op view(x): a chain that reads x twice
            i = pick([A, SQUARE])
            recipe.append(("unary", draw(st.sampled_from(["relu", "neg", "tanh"])), i, None))
            shapes.append(shapes[i])
            f_of_x = len(shapes) - 1
            if shapes[i] == SQUARE:
                recipe.append(("permute", i))
                shapes.append(SQUARE)
            else:
                recipe += [("reshape", i, FLAT), ("reshape", len(shapes), A)]
                shapes += [FLAT, A]
            recipe.append(("binary", draw(st.sampled_from(["add", "sub", "mul"])), f_of_x, len(shapes) - 1))
            shapes.append(shapes[i])
        elif kind == "unary":
            i = pick([A, AT, ROW, FLAT, SQUARE])
            recipe.append(("unary", draw(st.sampled_from(["relu", "neg", "tanh", "sigmoid", "abs"])), i,
                           draw(st.sampled_from([None, 0.5, -2.0]))))
            shapes.append(shapes[i])
        elif kind == "binary":
            i = pick([A, AT, ROW, FLAT, SQUARE])
            partners = [j for j, s in enumerate(shapes) if s == shapes[i] or (shapes[i] == A and s == ROW)]
            j = draw(st.sampled_from(partners))
            if draw(st.booleans()):
                i, j = j, i
            recipe.append(("binary", draw(st.sampled_from(["add", "sub", "mul", "maximum"])), i, j))
            shapes.append(A if A in (shapes[i], shapes[j]) else shapes[i])
        elif kind == "view":
            i = pick([A, AT, FLAT, SQUARE])
            target = draw(st.sampled_from({A: [AT, FLAT, "T", "roundtrip"], AT: [A, FLAT, "T", "roundtrip"],
                                           FLAT: [A, AT], SQUARE: ["T"]}[shapes[i]]))
            if target == "T":
                recipe.append(("permute", i))
                shapes.append(tuple(reversed(shapes[i])))
            elif target == "roundtrip":          # a view with its base's own shape: x + view(x) is possible
                recipe.append(("reshape", i, FLAT))
                shapes.append(FLAT)
                recipe.append(("reshape", len(shapes) - 1, shapes[i]))
                shapes.append(shapes[i])
            else:
                recipe.append(("reshape", i, target))
                shapes.append(target)
        elif kind == "matmul":
            i, w = pick([A]), pick([SQUARE])
            if w is None:
                continue
            recipe.append(("matmul", i, w))
            shapes.append(A)
        else:
            i = pick([A])
            recipe.append(("sum", i))
            shapes.append(ROW)
    n = len(shapes)
    outputs = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    updates = {}
    for k, step in enumerate(recipe):
        if step[0] == "state" and draw(st.booleans()):
            same = [i for i, s in enumerate(shapes) if s == step[1] and i != k]
            other_states = [i for i in same if recipe[i][0] == "state"]
            # Often another state's old value (prev.copy_(cur)), else any value of the right shape.
            pool = other_states if other_states and draw(st.booleans()) else same
            updates[k] = draw(st.sampled_from(pool)) if pool else k
    return {"recipe": recipe, "outputs": outputs, "updates": updates, "seed": draw(st.integers(0, 999))}


def build_ir(prog):
    graph = Graph("fuzz")
    rng = np.random.default_rng(prog["seed"])
    nodes, states, inputs = [], {}, []
    for k, step in enumerate(prog["recipe"]):
        kind = step[0]
        f32 = flow.float32
        if kind == "input":
            node = graph.add(Node(f"in{k}", INPUT, step[1], f32, backend.CPU))
            graph.inputs.append(node)
            inputs.append(rng.uniform(-1, 1, step[1]).astype(np.float32))
        elif kind == "state":
            node = graph.add(Node(f"s{k}", STATE, step[1], f32, backend.CPU, state_name=f"s{k}", state_kind="buffer"))
            states[f"s{k}"] = rng.uniform(-1, 1, step[1]).astype(np.float32)
        elif kind == "constant":
            value = rng.uniform(-1, 1, step[1]).astype(np.float32)
            node = graph.add(Node(f"c{k}", CONSTANT, step[1], f32, backend.CPU, value=value))
        else:
            if kind == "unary":
                op, args, attrs = step[1], [nodes[step[2]]], {}
                if step[3] is not None:
                    op, args = "mul", [nodes[step[2]], step[3]]
            elif kind == "binary":
                op, args, attrs = step[1], [nodes[step[2]], nodes[step[3]]], {}
            elif kind == "reshape":
                op, args, attrs = "reshape", [nodes[step[1]]], {"shape": step[2]}
            elif kind == "permute":
                op, args, attrs = "permute", [nodes[step[1]]], {"dims": (1, 0)}
            elif kind == "matmul":
                op, args, attrs = "matmul", [nodes[step[1]], nodes[step[2]]], {}
            else:
                op, args, attrs = "sum", [nodes[step[1]]], {"dim": (0,), "keepdim": False}
            if step[0] == "unary" and step[3] is None:
                attrs = {}
            shape, dtype = OPS[op].infer(*args, **attrs)
            node = graph.add(Node(f"{op}{k}", OP, shape, dtype, backend.CPU, op=OPS[op], inputs=tuple(args),
                                  attrs=attrs))
        nodes.append(node)
    graph.outputs = [nodes[i] for i in prog["outputs"]]
    graph.updates = {f"s{k}": nodes[i] for k, i in prog["updates"].items()}
    return graph, inputs, states


def interpret_ir(graph, inputs, states):
    """Eager semantics, aliasing included: views of state arrays are views, state updates are written
    into the state arrays in order after every op, then outputs are copied (as Eager mode's tensors
    would show them after the step)."""
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
    for name, n in graph.updates.items():
        if env[id(n)] is not states[name]:
            states[name][...] = env[id(n)]
    return [np.array(env[id(n)]) for n in graph.outputs]


def aliased_state(prog, index):
    """The state that value ``index`` is (or is a view of), if any."""
    recipe = prog["recipe"]
    while recipe[index][0] in ("reshape", "permute"):
        index = recipe[index][1]
    return index if recipe[index][0] == "state" else None


def order_updates(prog):
    """Tracing never makes a state's new value another state's old value *after* that state was updated
    (reads after an update see the new value), so those updates come first; cycles cannot be traced."""
    updates = prog["updates"]
    readers = {k: aliased_state(prog, v) for k, v in updates.items()}
    readers = {k: j for k, j in readers.items() if j is not None and j != k}
    if any(j in readers for j in readers.values()):
        return None
    first = {k: v for k, v in updates.items() if k in readers}
    first.update({k: v for k, v in updates.items() if k not in readers})
    return dict(prog, updates=first)


@SETTINGS
@given(ir_programs())
def test_optimised_random_graphs_compute_what_they_mean(prog):
    prog = order_updates(prog)
    assume(prog is not None)
    graph, inputs, states = build_ir(prog)
    for disabled in CONFIGS:
        optimized, _ = optimize(graph, disabled)
        plan = Plan(optimized)
        arrays = {k: v.copy() for k, v in states.items()}
        want_states = {k: v.copy() for k, v in states.items()}
        for call in range(2):
            want = interpret_ir(graph, inputs, want_states)
            got = plan.run([x.copy() for x in inputs], [arrays[name] for name in plan.state_names])
            what = f"{prog}, passes off: {disabled}, call {call}"
            for g, w in zip(got, want):
                np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6, err_msg=what)
            for name, w in want_states.items():
                np.testing.assert_allclose(arrays[name], w, rtol=1e-6, atol=1e-6, err_msg=what + f" state {name}")
        # The plan never writes into the caller's input arrays.
        kept = [x.copy() for x in inputs]
        plan.run(inputs, [arrays[name] for name in plan.state_names])
        for x, k in zip(inputs, kept):
            np.testing.assert_array_equal(x, k)
