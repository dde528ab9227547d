"""Loading a state dict is all-or-nothing (issue 10, finding 7), tried with random corruptions.

A valid state dict (graph, module, optimizer or scheduler) gets one random corruption: an entry deleted,
replaced by a string array of the right shape, an object, a number out of range, a tensor of another
shape, fractions for an integer buffer, another kind of scheduler's state, an unknown key... or a value
that is fine after all. Loading it must either work completely (every entry given is then what the
target holds) or raise a RuntimeError/ValueError/TypeError, after which every parameter, buffer,
optimizer slot, hyper-parameter, scheduler field and the train step is bitwise what it was, down to the
tensor objects. Any other exception (KeyError, AttributeError...) fails the test too.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn
from toynet.optim import SGD, Adam, lr_scheduler

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLEAN_ERRORS = (RuntimeError, ValueError, TypeError)
X = flow.tensor(np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32))
Y = flow.tensor(np.random.default_rng(1).standard_normal((6, 1)).astype(np.float32))


def make(kind="adam", scheduler="step", seed=0):
    flow.manual_seed(seed)
    first = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    second = nn.Linear(4, 1)
    params = list(first.parameters()) + list(second.parameters())
    if kind == "adam":
        opt = Adam(params, lr=0.01, amsgrad=True)
    else:
        opt = SGD(params, lr=0.1, momentum=0.9, dampening=0.1)
    sch = (lr_scheduler.StepLR(opt, step_size=2, gamma=0.5) if scheduler == "step"
           else lr_scheduler.ExponentialLR(opt, gamma=0.9))

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.first, self.second = first, second
            self.add_optimizer(opt, lr_sch=sch)

        def build(self, x, y):
            loss = ((self.second(self.first(x)) - y) ** 2).mean()
            loss.backward()
            return loss

    return Train(), opt, sch


def trained_state(kind, scheduler="step", steps=2, seed=0):
    graph, _, _ = make(kind, scheduler, seed)
    for _ in range(steps):
        graph(X, Y)
    return graph.state_dict()


def target(kind):
    """A graph whose every state differs from the fresh one: a valid state of another run is loaded."""
    graph, opt, sch = make(kind, seed=7)
    graph.load_state_dict(trained_state(kind, steps=1, seed=3))
    return graph, opt, sch


def snapshot(graph, opt, sch):
    """Everything a load may write, bitwise and by identity."""
    tensors = {}
    for name, module in graph._modules.items():
        for key, t in module.state_dict(keep_vars=True).items():
            tensors[f"{name}.{key}"] = (id(t), id(t.array), t.dtype, t.numpy().tobytes())
    slots = {id(p): {k: (id(t), t.dtype, t.numpy().tobytes()) for k, t in s.items()} for p, s in opt.state.items()}
    groups = [([id(p) for p in g["params"]], repr(sorted((k, v) for k, v in g.items() if k != "params")))
              for g in opt.param_groups]
    step = graph._train_step
    return (tensors, slots, groups, repr(sorted(sch.state_dict().items())),
            None if step is None else (id(step), step.numpy().tobytes()))


# ---------------------------------------------------------------------------------- corruptions


def leaves(tree, path=()):
    """Paths to every entry of a nested dict/list state."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield path + (key,)
            yield from leaves(value, path + (key,))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield path + (i,)
            yield from leaves(value, path + (i,))


def get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def bad_values(current):
    """Replacements for an entry: mostly wrong, some right (which must then load)."""
    shape = tuple(getattr(current, "shape", ()))
    options = [
        ("string array", np.full(shape, "a")), ("object array", np.full(shape, None, dtype=object)),
        ("complex", np.ones(shape, np.complex64)), ("fractions", np.full(shape, 0.5)),
        ("huge", np.full(shape, 1e39)), ("negative", np.full(shape, -3.0)), ("nan", np.full(shape, np.nan)),
        ("wrong shape", np.ones(shape + (2,), np.float32)), ("empty", np.ones((0,), np.float32)),
        ("scalar tensor", flow.tensor(2.0)), ("string", "fast"), ("none", None), ("bool", True), ("dict", {}),
        ("list", [1, "x"]), ("negative number", -1), ("nan number", float("nan")), ("inf", float("inf")),
        ("big int", 10 ** 30), ("ragged", [[1.0], [2.0, 3.0]]), ("int array", np.ones(shape, np.int64)),
        ("float64 copy", np.ones(shape, np.float64) * 0.25), ("same", current),
    ]
    if isinstance(current, flow.Tensor):
        options.append(("fine", flow.tensor(np.full(shape, 0.125, np.float32)).to(current.dtype)))
    return options


@st.composite
def corruptions(draw, state):
    """(description, corrupted copy of ``state``)."""
    state = copy.deepcopy(state)
    paths = list(leaves(state))
    kind = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add", "swap", "scheduler"]))
    path = draw(st.sampled_from(paths))
    parent = get(state, path[:-1])
    if kind == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif kind == "add":
        container = get(state, path) if isinstance(get(state, path), dict) else state
        container[draw(st.sampled_from(["extra", "System-Train-Optimizer-5", 3, "model.x-m"]))] = flow.zeros(1)
    elif kind == "swap":
        other = draw(st.sampled_from(paths))
        parent[path[-1]] = copy.deepcopy(get(state, other))
    elif kind == "scheduler":
        state["System-Train-LRScheduler-0"] = draw(st.sampled_from([
            lr_scheduler.ExponentialLR(SGD([nn.Parameter(flow.zeros(1))], lr=0.1), gamma=0.9).state_dict(),
            {"step_size": 0, "gamma": 0.5, "base_lrs": [0.01], "last_epoch": 2, "_last_lr": [0.01]},
            {"step_size": 2, "gamma": "x", "base_lrs": [0.01], "last_epoch": 2, "_last_lr": [0.01]},
            {"step_size": 2, "gamma": 0.5, "base_lrs": [-0.01], "last_epoch": 2, "_last_lr": [0.01]},
            {"step_size": 2, "gamma": 0.5, "base_lrs": [0.01], "last_epoch": -5, "_last_lr": [0.01]},
            {"step_size": 2, "gamma": 0.5, "base_lrs": [0.01], "last_epoch": 4, "_last_lr": [0.01]},  # fine
        ]))
    else:
        name, value = draw(st.sampled_from(bad_values(get(state, path))))
        parent[path[-1]] = value
        kind = f"replace by {name}"
    return f"{kind} at {path}", state


def host(value):
    return np.asarray(value.numpy() if isinstance(value, flow.Tensor) else value)


def assert_loaded(graph, opt, sch, state):
    """After a load that worked: what the state dict gave is what the graph holds."""
    for name, module in graph._modules.items():
        own = module.state_dict()
        for key, value in state.get(name, {}).items():
            if key in own:
                np.testing.assert_array_equal(own[key].numpy(), host(value).astype(own[key].numpy().dtype), err_msg=key)
    saved = graph.state_dict()
    for key, value in state.items():
        if key in saved and not isinstance(value, dict):
            np.testing.assert_array_equal(saved[key].numpy(), host(value).astype(saved[key].numpy().dtype), key)
    for group, loaded in zip(opt.param_groups, state.get("System-Train-Optimizer-0", {}).get("param_groups", [])):
        for key, value in loaded.items():
            assert group[key] == value or (key == "betas" and tuple(group[key]) == tuple(value)), key
    for key, value in state.get("System-Train-LRScheduler-0", {}).items():
        assert getattr(sch, key) == value, key


@pytest.mark.parametrize("kind", ["adam", "sgd"])
@given(data=st.data(), strict=st.booleans())
@SETTINGS
def test_graph_load_is_all_or_nothing(kind, data, strict):
    source = trained_state(kind)
    what, state = data.draw(corruptions(source))
    graph, opt, sch = target(kind)
    before = snapshot(graph, opt, sch)
    try:
        graph.load_state_dict(state, strict=strict)
    except CLEAN_ERRORS as error:
        event("refused")
        assert snapshot(graph, opt, sch) == before, f"{what}: a failed load changed the graph ({error})"
        assert "Error(s) in loading state_dict" in str(error) or isinstance(error, TypeError), what
        return
    event("loaded")
    assert_loaded(graph, opt, sch, state)


@given(data=st.data(), strict=st.booleans())
@SETTINGS
def test_module_load_is_all_or_nothing(data, strict):
    source, _, _ = make(seed=1)
    state = {"first": source.first.state_dict()}
    what, state = data.draw(corruptions(state))
    graph, opt, sch = target("adam")
    module = graph.first
    before = snapshot(graph, opt, sch)
    try:
        module.load_state_dict(state.get("first", state), strict=strict)
    except CLEAN_ERRORS:
        event("refused")
        assert snapshot(graph, opt, sch) == before, what
        return
    event("loaded")
    for key, t in module.state_dict().items():
        value = state.get("first", state).get(key)
        if value is not None:
            np.testing.assert_array_equal(t.numpy(), host(value).astype(t.numpy().dtype), err_msg=f"{what}: {key}")


@pytest.mark.parametrize("kind", ["adam", "sgd"])
@given(data=st.data())
@SETTINGS
def test_optimizer_load_is_all_or_nothing(kind, data):
    graph, opt, sch = make(kind, seed=2)
    for _ in range(2):
        opt.zero_grad()
        ((graph.second(graph.first(X)) - Y) ** 2).mean().backward()
        opt.step()
    good = opt.state_dict()
    what, state = data.draw(corruptions(good))
    graph, opt, sch = target(kind)
    before = snapshot(graph, opt, sch)
    try:
        opt.load_state_dict(state)
    except CLEAN_ERRORS:
        event("refused")
        assert snapshot(graph, opt, sch) == before, what
        return
    event("loaded")
    for index, slots in state["state"].items():
        p = [q for g in opt.param_groups for q in g["params"]][int(index)]
        for name, value in slots.items():
            np.testing.assert_array_equal(opt.state[p][name].numpy(), host(value).astype(np.float32), err_msg=what)


@given(data=st.data())
@SETTINGS
def test_scheduler_load_is_all_or_nothing(data):
    _, _, source = make(seed=2)
    for _ in range(3):
        source.step()
    what, state = data.draw(corruptions(source.state_dict()))
    graph, opt, sch = target("adam")
    before = snapshot(graph, opt, sch)
    try:
        sch.load_state_dict(state)
    except CLEAN_ERRORS:
        event("refused")
        assert snapshot(graph, opt, sch) == before, what
        return
    event("loaded")
    assert sch.state_dict() == {k: (list(v) if isinstance(v, tuple) else v) for k, v in state.items()}


# ------------------------------------------------------------------------- the issue's own cases


def test_another_kind_of_scheduler_changes_nothing():
    state = trained_state("sgd", scheduler="exponential")
    graph, opt, sch = target("sgd")
    before = snapshot(graph, opt, sch)
    with pytest.raises(RuntimeError, match=r"LRScheduler-0.*missing keys \['step_size'\].*another kind"):
        graph.load_state_dict(state)
    assert snapshot(graph, opt, sch) == before


def test_a_string_array_in_the_second_module_changes_the_first_neither():
    state = trained_state("adam")
    state["second"]["weight"] = np.full((1, 4), "w")
    graph, opt, sch = target("adam")
    before = snapshot(graph, opt, sch)
    with pytest.raises(RuntimeError, match=r"in 'second': 'weight' holds strings"):
        graph.load_state_dict(state)
    assert snapshot(graph, opt, sch) == before


@pytest.mark.parametrize("key, value, message", [
    ("lr", -1, "Invalid learning rate: -1"),
    ("momentum", "fast", "momentum must be a real number .int or float., got str 'fast'"),
    ("nesterov", 1, "nesterov must be True or False"),
    ("dampening", float("nan"), "Invalid dampening value: nan"),
    ("initial_lr", -0.5, "Invalid initial learning rate: -0.5"),
    ("hook", object(), "unknown entry 'hook' holds a object"),
])
def test_bad_hyper_parameters_in_a_graph_state_dict_are_refused(key, value, message):
    state = trained_state("sgd")
    state["System-Train-Optimizer-0"]["param_groups"][0][key] = value
    graph, opt, sch = target("sgd")
    before = snapshot(graph, opt, sch)
    with pytest.raises(RuntimeError, match=message):
        graph.load_state_dict(state)
    assert snapshot(graph, opt, sch) == before


def test_problems_are_listed_together_and_fractions_do_not_go_into_an_integer_buffer():
    state = trained_state("adam")
    state["first"]["1.num_batches_tracked"] = flow.tensor(2.5)
    state["first.0.weight-v"] = -state["first.0.weight-v"] - 1
    state["System-Train-TrainStep"] = flow.tensor([-1])
    graph, opt, sch = target("adam")
    before = snapshot(graph, opt, sch)
    with pytest.raises(RuntimeError) as info:
        graph.load_state_dict(state)
    text = str(info.value)
    assert "'1.num_batches_tracked' holds fractional" in text
    assert "'first.0.weight-v'" in text and "negative" in text
    assert "System-Train-TrainStep" in text and "is negative" in text
    assert snapshot(graph, opt, sch) == before


def test_a_valid_load_is_exact_and_keeps_the_tensor_objects():
    state = trained_state("adam", steps=3)
    graph, opt, sch = target("adam")
    weight, slot = graph.first[0].weight, opt.state[graph.first[0].weight]["exp_avg"]
    graph.load_state_dict(state)
    assert graph.first[0].weight is weight and opt.state[weight]["exp_avg"] is slot
    for key, value in graph.state_dict().items():
        if isinstance(value, flow.Tensor):
            np.testing.assert_array_equal(value.numpy(), state[key].numpy(), err_msg=key)
    assert sch.last_epoch == 3 and graph._train_step.numpy().tolist() == [3]


def test_values_that_are_views_of_the_targets_are_read_before_any_is_written():
    layer = nn.Linear(3, 3)
    w = layer.weight.numpy().copy()
    # Both values are views of layer.weight's array: the bias must get row 0 of the *old* weight.
    state = {"weight": layer.weight.detach().transpose(0, 1), "bias": layer.weight.detach()[0]}
    assert np.shares_memory(state["bias"].numpy(), layer.weight.numpy())
    layer.load_state_dict(state)
    np.testing.assert_array_equal(layer.weight.numpy(), w.T)
    np.testing.assert_array_equal(layer.bias.numpy(), w[0])


def test_slots_the_loaded_settings_do_not_use_are_dropped_not_left_stale():
    """A state dict that switches SGD's momentum off (strict=False): the momentum buffers the graph had would
    otherwise stay in graph.state_dict() with values neither the file nor any step gave (found by the fuzzer
    above with a random draw)."""
    source = trained_state("sgd")
    source["System-Train-Optimizer-0"]["param_groups"][0]["momentum"] = 0.0
    graph, opt, sch = target("sgd")
    assert any(k.endswith("-momentum") for k in graph.state_dict())
    graph.load_state_dict(source, strict=False)
    assert opt.param_groups[0]["momentum"] == 0.0
    assert not [k for k in graph.state_dict() if k.endswith(("-momentum", "-step"))]
    assert_loaded(graph, opt, sch, source)
