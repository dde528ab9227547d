"""A compiled nn.Graph must never run stale code: whatever tracing baked into its plan is guarded, and a
change recompiles (issue 10, findings 8 and 10). Each test changes one thing after the first call and
compares Graph mode with Eager mode, which always sees the module as it is now: the same result or
the same error."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn


class Forward(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


class Train(nn.Graph):
    def __init__(self, model, optimizer, loss_fn=None):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn or nn.MSELoss()
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def eager_step(model, optimizer, x, y, loss_fn=None):
    loss = (loss_fn or nn.MSELoss())(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def twins(make_model, make_optimizer):
    """Two identical models and optimizers: one for Eager mode, one for a graph."""
    flow.manual_seed(0)
    eager = make_model()
    graph_model = copy.deepcopy(eager)
    return (eager, make_optimizer(eager)), (graph_model, make_optimizer(graph_model))


def assert_same_parameters(a, b, rtol=1e-5, atol=1e-6):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=rtol, atol=atol, err_msg=name)


def mlp():
    return nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))


# ------------------------------------------------------------------------------------ module changes


def test_a_parameter_replaced_on_the_module_is_used(capsys):
    model = mlp()
    graph = Forward(model)
    x = flow.randn(4, 3)
    graph(x)
    model[0].weight = nn.Parameter(flow.randn(8, 3))
    graph.debug(1)
    out = graph(x)
    with flow.no_grad():
        np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-6)
    printed = capsys.readouterr().out
    assert "a guard failed: model.0.weight is a tensor of shape (8, 3), not the parameter the plan was compiled" \
           in printed


def test_a_submodule_replaced_or_deleted_is_seen():
    model = mlp()
    graph = Forward(model)
    x = flow.randn(4, 3)
    graph(x)
    model[1] = nn.Tanh()
    with flow.no_grad():
        np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-6)
    del model[1]   # the container renumbers its dict by hand, without Module's methods
    model[0] = nn.Linear(3, 8)
    with flow.no_grad():
        np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_eval_turns_dropout_off_and_train_turns_it_back_on_with_the_first_plan(capsys):
    model = nn.Sequential(nn.Linear(3, 64), nn.Dropout(0.5))
    graph = Forward(model)
    x = flow.randn(16, 3)
    graph(x)
    model.eval()
    graph.debug(1)
    out = graph(x)                      # the very same tensor: the fast path must see the change too
    with flow.no_grad():
        np.testing.assert_array_equal(out.numpy(), model(x).numpy())
    assert "model.training is False, the plan was compiled for True" in capsys.readouterr().out
    model.train()
    out = graph(x)
    assert (out.numpy() == 0).mean() > 0.2          # dropout again...
    assert "start building graph" not in capsys.readouterr().out   # ...from the plan compiled first
    assert len(graph._compiled) == 2


def test_a_changed_module_setting_recompiles():
    model = nn.Sequential(nn.Linear(3, 4), nn.Softmax(dim=1))
    graph = Forward(model)
    x = flow.randn(8, 3)
    graph(x)
    model[1].dim = 0
    with flow.no_grad():
        np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_reshaped_data_recompiles_and_says_what_does_not_fit(capsys):
    model = nn.Linear(3, 2)
    graph = Forward(model)
    x = flow.randn(4, 3)
    graph(x)
    model.weight.data = model.weight.data.reshape(3, 2)
    with pytest.raises(flow.ops.ShapeError) as eager_error:
        model(x)
    graph.debug(1)
    with pytest.raises(flow.ops.ShapeError) as graph_error:
        graph(x)
    # Not NumPy's gufunc message from inside the plan: the op, both shapes and where.
    assert "does not fit weight of shape (3, 2)" in str(graph_error.value)
    assert str(eager_error.value) in str(graph_error.value) and "while tracing nn.Graph" in str(graph_error.value)
    assert re.search(r"model.weight has shape \(3, 2\), .*; the plan was compiled for shape \(2, 3\)",
                     capsys.readouterr().out)


def test_a_model_cast_to_float64_recompiles():
    model = nn.Linear(3, 2)
    graph = Forward(model)
    graph(flow.randn(4, 3))
    model.double()
    x = flow.randn(4, 3, dtype=flow.float64)
    out = graph(x)
    assert out.dtype == flow.float64
    with flow.no_grad():
        np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-12)


# ------------------------------------------------------------------------------------ training state


def test_a_changed_weight_decay_or_momentum_is_used_as_in_eager_mode():
    (e_model, e_opt), (g_model, g_opt) = twins(mlp, lambda m: flow.optim.SGD(m.parameters(), lr=0.05))
    graph = Train(g_model, g_opt)
    x, y = flow.randn(16, 3), flow.randn(16, 2)
    for step in range(6):
        if step == 2:
            for opt in (e_opt, g_opt):
                opt.param_groups[0]["weight_decay"] = 0.5
        if step == 4:
            for opt in (e_opt, g_opt):
                opt.param_groups[0]["momentum"] = 0.9
        eager_step(e_model, e_opt, x, y)
        graph(x, y)
    assert_same_parameters(e_model, g_model)


HYPER = {
    "SGD": (lambda m: flow.optim.SGD(m.parameters(), lr=0.05),
            {"weight_decay": st.sampled_from([0.0, 0.1]), "momentum": st.sampled_from([0.0, 0.5, 0.9]),
             "dampening": st.sampled_from([0.0, 0.3])}),
    "Adam": (lambda m: flow.optim.Adam(m.parameters(), lr=0.01),
             {"weight_decay": st.sampled_from([0.0, 0.1]), "eps": st.sampled_from([1e-8, 1e-3]),
              "betas": st.sampled_from([(0.9, 0.999), (0.5, 0.9)]), "amsgrad": st.booleans()}),
}


@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(sorted(HYPER)), data=st.data())
def test_graph_and_eager_agree_under_random_hyper_parameter_changes(kind, data):
    make_opt, choices = HYPER[kind]
    (e_model, e_opt), (g_model, g_opt) = twins(mlp, make_opt)
    graph = Train(g_model, g_opt)
    graph.config.cache_limit = 64
    x, y = flow.randn(8, 3), flow.randn(8, 2)
    for _ in range(4):
        changes = data.draw(st.fixed_dictionaries({}, optional=choices))
        for opt in (e_opt, g_opt):
            opt.param_groups[0].update(changes)
        try:
            eager_step(e_model, e_opt, x, y)
        except Exception as error:   # (Adam cannot switch amsgrad on after a step: both modes refuse)
            with pytest.raises(type(error)):
                graph(x, y)
        else:
            graph(x, y)
        assert_same_parameters(e_model, g_model, rtol=1e-4, atol=1e-5)


def test_a_frozen_parameter_is_not_updated_after_compiling():
    (e_model, e_opt), (g_model, g_opt) = twins(mlp, lambda m: flow.optim.SGD(m.parameters(), lr=0.1))
    graph = Train(g_model, g_opt)
    x, y = flow.randn(16, 3), flow.randn(16, 2)
    eager_step(e_model, e_opt, x, y)
    graph(x, y)
    e_model[0].weight.requires_grad_(False)
    g_model[0].weight.requires_grad_(False)
    e_opt.zero_grad()
    frozen = g_model[0].weight.numpy().copy()
    for _ in range(2):
        eager_step(e_model, e_opt, x, y)
        graph(x, y)
    np.testing.assert_array_equal(g_model[0].weight.numpy(), frozen)
    assert_same_parameters(e_model, g_model)


def test_an_optimizer_state_loaded_after_compiling_is_the_one_trained():
    (e_model, e_opt), (g_model, g_opt) = twins(mlp, lambda m: flow.optim.Adam(m.parameters(), lr=0.01))
    graph = Train(g_model, g_opt)
    x, y = flow.randn(16, 3), flow.randn(16, 2)
    eager_step(e_model, e_opt, x, y)
    graph(x, y)
    saved = copy.deepcopy(e_opt.state_dict())
    e_opt.load_state_dict(saved)
    g_opt.load_state_dict(copy.deepcopy(saved))    # new state tensors: the old plan would train the old ones
    for _ in range(2):
        eager_step(e_model, e_opt, x, y)
        graph(x, y)
    assert_same_parameters(e_model, g_model)
    for p, q in zip(e_model.parameters(), g_model.parameters()):
        np.testing.assert_allclose(e_opt.state[p]["exp_avg"].numpy(), g_opt.state[q]["exp_avg"].numpy(),
                                   rtol=1e-5, atol=1e-7)


def test_an_eager_step_between_graph_steps_is_seen():
    (e_model, e_opt), (g_model, g_opt) = twins(mlp, lambda m: flow.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    graph = Train(g_model, g_opt)
    x, y = flow.randn(16, 3), flow.randn(16, 2)
    for step in range(4):
        eager_step(e_model, e_opt, x, y)
        if step == 1:
            eager_step(g_model, g_opt, x, y)   # replaces the parameters' arrays
        else:
            graph(x, y)
    assert_same_parameters(e_model, g_model)


def test_a_replaced_trained_parameter_says_the_optimizer_still_holds_the_old_one():
    model = mlp()
    graph = Train(model, flow.optim.SGD(model.parameters(), lr=0.1))
    x, y = flow.randn(16, 3), flow.randn(16, 2)
    graph(x, y)
    model[0].bias = nn.Parameter(flow.zeros(8))
    with pytest.raises(ValueError, match="leaves the optimizer with the old one"):
        graph(x, y)


def test_float64_data_into_a_float32_model_fails_as_in_eager_mode_and_changes_nothing():
    (e_model, e_opt), (g_model, g_opt) = twins(mlp, lambda m: flow.optim.SGD(m.parameters(), lr=0.1))
    graph = Train(g_model, g_opt)
    x, y = flow.randn(16, 3, dtype=flow.float64), flow.randn(16, 2, dtype=flow.float64)
    before = [p.numpy().copy() for p in g_model.parameters()]
    with pytest.raises(TypeError) as eager_error:
        eager_step(e_model, e_opt, x, y)
    with pytest.raises(TypeError) as graph_error:
        graph(x, y)
    message = str(graph_error.value)
    assert "model.0.weight is float32 but its gradient is float64" in message
    assert "(16, 3) float64" in message and "x.float()" in message      # the call's inputs, and the fix
    assert type(eager_error.value) is type(graph_error.value)
    for p, b in zip(g_model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)
    assert graph._train_step is None or int(graph._train_step.numpy()[0]) == 0
    # The same data in float32 trains as in Eager mode.
    eager_step(e_model, e_opt, x.float(), y.float())
    graph(x.float(), y.float())
    assert_same_parameters(e_model, g_model)


# ------------------------------------------------------------------------------------ call arguments


def test_a_numpy_array_argument_is_an_input_of_the_graph():
    model = mlp()
    graph = Forward(model)
    for batch in (4, 4, 5):
        data = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
        out = graph(data)
        with flow.no_grad():
            np.testing.assert_allclose(out.numpy(), model(flow.from_numpy(data)).numpy(), rtol=1e-6)
    assert len(graph._compiled) == 2   # one per shape, not per value


def test_an_array_a_graph_cannot_take_says_which_and_why():
    graph = Forward(mlp())
    with pytest.raises(TypeError, match=r"NumPy array of shape \(2,\) and dtype object"):
        graph(np.array(["a", None], dtype=object))


def test_the_guard_check_is_cheap_on_the_hot_path(fast_path):
    """On the fast path the guard's hot path tests a few terms (stamps stand for the rest); the full check
    stays complete."""
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(20)])
    graph = Train(model, flow.optim.SGD(model.parameters(), lr=0.1))
    graph(flow.randn(2, 4), flow.randn(2, 4))
    guard = graph._last.guard
    assert len(guard) > 300
    # No module setting, registry entry or array fact on the hot path: the stamps stand for them.
    hot = set(guard.hot_terms())
    assert not any(guard.term(c) in hot for c in guard.conditions if c.about in ("module", "graph", "state"))
    assert sum("_arrays[" in term for term in hot) == len(graph._last.plan.state_names)
    stamped = sum(c.about in ("module", "graph", "state") for c in guard.conditions)
    assert stamped > 150 and len(hot) <= len(guard) - stamped + len(graph._last.plan.state_names) + 1
    assert guard.check() and guard._recheck()   # (the full check, which a failed stamp runs)


def test_the_lesson_guard_is_a_list_of_conditions_read_as_data(lesson_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    graph = Train(model, flow.optim.SGD(model.parameters(), lr=0.1))
    graph(flow.randn(2, 4), flow.randn(2, 4))
    guard = graph._last.guard
    assert guard.check() and guard.failures() == []
    training = [c for c in guard.conditions if c.root is model[0].__dict__ and c.path == (("key", "training"),)]
    assert len(training) == 1 and training[0].expected is True and training[0].holds()
    model.eval()
    assert not training[0].holds() and not guard.check()
    assert "model.0.training is False, the plan was compiled for True (model.train()/eval() changed it)" \
        in guard.failures()


class _CodeInRepr(str):
    """A module name whose repr is code: generated code must never paste it."""
    ran = []

    def __repr__(self):
        _CodeInRepr.ran.append(True)
        return "__import__('sys').modules['builtins'].print('INJECTED')"


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("make_name", [lambda s: np.str_(s), _CodeInRepr], ids=["numpy.str_", "str subclass"])
def test_module_names_of_other_str_types_compile_once_and_never_reach_code(fast, make_name):
    """Issue 21: a numpy.str_ key compiled the graph again on every call, and a str subclass's repr could reach
    the guard's generated source. Names are plain str once registered."""
    _CodeInRepr.ran.clear()
    with flow.set_fast_path(fast):
        model = nn.Module()
        model.add_module(make_name("fc"), nn.Linear(3, 2))
        setattr(model, make_name("head"), nn.Linear(2, 1))

        class Net(nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model

            def build(self, x):
                return self.model.head(self.model.fc(x))

        graph, x = Net(), flow.randn(4, 3)
        for _ in range(4):
            graph(x)
        assert len(graph._compiled) == 1
        assert all(type(k) is str for k in model._modules) and all(type(k) is str for k in model.state_dict())
        assert not _CodeInRepr.ran


@pytest.mark.parametrize("fast", [False, True])
def test_a_parameter_whose_data_changes_dtype_recompiles(fast):
    """Issue 21's audit: a guard that ignored a state's dtype ran the plan compiled for float32 weights on
    float64 ones. The next call must compile for the new dtype and give Eager mode's result."""
    with flow.set_fast_path(fast):
        model = nn.Linear(3, 2)

        class Net(nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model

            def build(self, x):
                return self.model(x)

        graph, x = Net(), flow.randn(4, 3, dtype=flow.float64)
        graph(x)
        model.weight.data, model.bias.data = model.weight.data.double(), model.bias.data.double()
        out = graph(x)
        assert len(graph._compiled) == 2 and out.dtype == flow.float64
        np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-12)
