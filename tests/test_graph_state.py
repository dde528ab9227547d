"""graph.state_dict() / load_state_dict(): the modules' state plus everything training adds (train step,
optimizer slots, hyper-parameters, scheduler), saved with flow.save and resumed exactly."""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn

RNG = np.random.default_rng(5)
BATCHES = [(flow.tensor(RNG.standard_normal((8, 3)).astype(np.float32)),
            flow.tensor(RNG.standard_normal((8, 1)).astype(np.float32))) for _ in range(6)]


def make_model():
    flow.manual_seed(21)
    return nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 1))


def make_optimizer(kind, model):
    if kind == "sgd":
        return flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if kind == "adam":
        return flow.optim.Adam(model.parameters(), lr=0.01)
    return flow.optim.SGD(model.parameters(), lr=0.1)


def make_graph(kind="sgd", scheduler=False):
    model = make_model()
    optimizer = make_optimizer(kind, model)
    lr_sch = flow.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5) if scheduler else None

    class TrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = nn.MSELoss()
            self.add_optimizer(optimizer, lr_sch=lr_sch)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    return TrainGraph(), model, optimizer, lr_sch


def run(graph, batches):
    return [graph(x, y).numpy().item() for x, y in batches]


# ---------------------------------------------------------------------------------- contents


def test_state_dict_has_module_keys_then_the_train_step_and_momentum_slots():
    graph, model, optimizer, _ = make_graph("sgd")
    run(graph, BATCHES[:3])
    state = graph.state_dict()
    keys = list(state)
    assert keys[:2] == ["model", "loss_fn"]
    assert list(state["model"]) == list(model.state_dict())
    np.testing.assert_array_equal(state["model"]["0.weight"].numpy(), model[0].weight.numpy())
    step = state["System-Train-TrainStep"]
    assert step.dtype == flow.int64 and step.shape == (1,) and step.numpy().tolist() == [3]
    slots = sorted(k for k in keys if k.endswith("-momentum"))
    assert slots == sorted(f"model.{name}-momentum" for name, _ in model.named_parameters())
    assert keys[2:] == sorted(keys[2:]), "the extra entries are sorted, as OneFlow's clone should"
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(state[f"model.{name}-momentum"].numpy(),
                                      optimizer.state[p]["momentum_buffer"].numpy())
    assert state["System-Train-Optimizer-0"]["param_groups"][0]["lr"] == 0.1
    assert "params" not in state["System-Train-Optimizer-0"]["param_groups"][0]


def test_momentum_slots_hold_the_eager_optimizers_buffers():
    graph, _, _, _ = make_graph("sgd")
    run(graph, BATCHES[:2])
    eager = make_model()
    eager_opt = make_optimizer("sgd", eager)
    loss_fn = nn.MSELoss()
    for x, y in BATCHES[:2]:
        loss = loss_fn(eager(x), y)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
    state = graph.state_dict()
    for name, p in eager.named_parameters():
        np.testing.assert_allclose(state[f"model.{name}-momentum"].numpy(),
                                   eager_opt.state[p]["momentum_buffer"].numpy(), rtol=1e-5, atol=1e-7)


def test_adam_slots_and_scheduler_state():
    graph, model, _, lr_sch = make_graph("adam", scheduler=True)
    run(graph, BATCHES[:5])
    state = graph.state_dict()
    for name, p in model.named_parameters():
        assert state[f"model.{name}-m"].shape == p.shape
        assert state[f"model.{name}-v"].shape == p.shape
        assert np.all(state[f"model.{name}-v"].numpy() >= 0)
        assert state[f"model.{name}-step"].numpy().item() == 5
    assert state["System-Train-TrainStep"].numpy().tolist() == [5]
    scheduler = state["System-Train-LRScheduler-0"]
    assert scheduler["last_epoch"] == 5 == lr_sch.last_epoch
    assert state["System-Train-Optimizer-0"]["param_groups"][0]["lr"] == pytest.approx(0.01 * 0.5 ** 2)


def test_a_graph_without_an_optimizer_or_before_its_first_call_has_only_module_keys():
    class Inference(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    graph = Inference(make_model())
    graph(BATCHES[0][0])
    assert list(graph.state_dict()) == ["model"]
    untrained, _, _, _ = make_graph("plain")
    assert list(untrained.state_dict()) == ["model", "loss_fn", "System-Train-Optimizer-0"]


def test_plain_sgd_has_no_slots_but_counts_steps():
    graph, _, _, _ = make_graph("plain")
    run(graph, BATCHES[:4])
    state = graph.state_dict()
    assert not [k for k in state if k.startswith("model.")]
    assert state["System-Train-TrainStep"].numpy().tolist() == [4]


# ------------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_save_load_and_continue_matches_an_uninterrupted_run(kind, tmp_path):
    straight, straight_model, _, _ = make_graph(kind, scheduler=True)
    straight_losses = run(straight, BATCHES)

    first, _, _, _ = make_graph(kind, scheduler=True)
    first_losses = run(first, BATCHES[:3])
    flow.save(first.state_dict(), tmp_path / "checkpoint")

    resumed, resumed_model, resumed_opt, resumed_sch = make_graph(kind, scheduler=True)
    resumed.load_state_dict(flow.load(tmp_path / "checkpoint"))
    assert resumed_sch.last_epoch == 3
    assert resumed_opt.param_groups[0]["lr"] == first.state_dict()["System-Train-Optimizer-0"]["param_groups"][0]["lr"]
    resumed_losses = run(resumed, BATCHES[3:])

    np.testing.assert_array_equal(first_losses + resumed_losses, straight_losses)
    for (key, value), other in zip(resumed_model.state_dict().items(), straight_model.state_dict().values()):
        np.testing.assert_array_equal(value.numpy(), other.numpy(), err_msg=key)
    assert resumed.state_dict()["System-Train-TrainStep"].numpy().tolist() == [6]
    for key, value in straight.state_dict().items():
        if isinstance(value, flow.Tensor):
            np.testing.assert_array_equal(resumed.state_dict()[key].numpy(), value.numpy(), err_msg=key)


def test_load_state_dict_after_the_first_call_is_refused():
    graph, _, _, _ = make_graph("sgd")
    state = graph.state_dict()
    graph(*BATCHES[0])
    with pytest.raises(AssertionError, match="nn.Graph's state dict can only be loaded before the first call"):
        graph.load_state_dict(state)


def snapshot(graph, model, optimizer):
    return ({k: v.numpy().copy() for k, v in model.state_dict().items()},
            {id(p): {k: v.numpy().copy() for k, v in s.items()} for p, s in optimizer.state.items()},
            None if graph._train_step is None else graph._train_step.numpy().copy(),
            [dict(g, params=None) for g in optimizer.param_groups])


def bad_weight(state):
    state["model"]["0.weight"] = flow.zeros(7, 3)


def bad_momentum(state):
    state["model.0.weight-momentum"] = flow.zeros(2)


def bad_step(state):
    state["System-Train-TrainStep"] = flow.tensor([1, 2], dtype=flow.int64)


def bad_groups(state):
    state["System-Train-Optimizer-0"] = {"param_groups": []}


def unexpected_key(state):
    state["model"]["extra"] = flow.zeros(1)


def missing_module(state):
    del state["loss_fn"]


@pytest.mark.parametrize("spoil", [bad_weight, bad_momentum, bad_step, bad_groups, unexpected_key, missing_module])
def test_a_bad_state_dict_raises_and_changes_nothing(spoil):
    source, _, _, _ = make_graph("sgd")
    run(source, BATCHES[:2])
    state = source.state_dict()
    state["model"] = dict(state["model"])
    spoil(state)
    # Make every good entry different from the target's, so a half-done load would show.
    state["model"]["3.bias"] = state["model"]["3.bias"] + 1 if "3.bias" in state["model"] else None

    target, model, optimizer, _ = make_graph("sgd")
    before = snapshot(target, model, optimizer)
    with pytest.raises(RuntimeError, match="Error\\(s\\) in loading state_dict for nn.Graph"):
        target.load_state_dict(state)
    after = snapshot(target, model, optimizer)
    for key in before[0]:
        np.testing.assert_array_equal(after[0][key], before[0][key], err_msg=key)
    assert after[1] == before[1] == {}
    assert after[2] is None and after[3] == before[3]


def test_non_strict_load_ignores_unknown_keys_and_missing_modules():
    source, _, _, _ = make_graph("sgd")
    run(source, BATCHES[:2])
    state = source.state_dict()
    del state["loss_fn"]
    state["something-else"] = flow.zeros(1)
    target, model, _, _ = make_graph("sgd")
    target.load_state_dict(state, strict=False)
    np.testing.assert_array_equal(model[0].weight.numpy(), source.model[0].weight.numpy())
    assert target.state_dict()["System-Train-TrainStep"].numpy().tolist() == [2]


def graph_with(optimizer_of):
    model = make_model()
    optimizer = optimizer_of(model)

    class TrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = nn.MSELoss()(self.model(x), y)
            loss.backward()
            return loss

    return TrainGraph(), model, optimizer


def test_the_slots_follow_the_hyper_parameters_being_loaded():
    source, _, _ = graph_with(lambda m: flow.optim.Adam(m.parameters(), lr=0.01, amsgrad=True))
    run(source, BATCHES[:2])
    state = source.state_dict()
    target, model, optimizer = graph_with(lambda m: flow.optim.Adam(m.parameters(), lr=0.01))
    target.load_state_dict(state)  # amsgrad comes with the groups, so the max_v slots are expected
    assert optimizer.param_groups[0]["amsgrad"] is True
    weight = model[0].weight
    assert set(optimizer.state[weight]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    np.testing.assert_array_equal(optimizer.state[weight]["max_exp_avg_sq"].numpy(),
                                  state["model.0.weight-max_v"].numpy())
    np.testing.assert_array_equal(run(target, BATCHES[2:4]), run(source, BATCHES[2:4]))


def test_a_parameters_slots_come_together_unless_not_strict():
    source, _, _ = graph_with(lambda m: flow.optim.Adam(m.parameters(), lr=0.01))
    run(source, BATCHES[:2])
    state = source.state_dict()
    del state["model.0.weight-v"]
    target, model, optimizer = graph_with(lambda m: flow.optim.Adam(m.parameters(), lr=0.01))
    with pytest.raises(RuntimeError, match=r"missing key\(s\) \['model.0.weight-v'\]"):
        target.load_state_dict(state)
    assert optimizer.state == {}
    target.load_state_dict(state, strict=False)
    weight = model[0].weight
    np.testing.assert_array_equal(optimizer.state[weight]["exp_avg"].numpy(), state["model.0.weight-m"].numpy())
    assert not optimizer.state[weight]["exp_avg_sq"].numpy().any()  # (not given: a fresh slot)

