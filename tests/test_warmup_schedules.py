"""Warm-up schedules (issue 20): PyTorch's LinearLR and SequentialLR step for step, OneFlow's CosineDecayLR and
WarmupLR with OneFlow's numbers, a cosine with warm-up written both ways, state dicts of schedulers made of
schedulers, bad settings refused, and the schedules driving an nn.Graph."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.optim import SGD, AdamW, lr_scheduler

S = lr_scheduler


def groups(lib, lrs=(0.1, 0.03)):
    params = [lib.nn.Parameter(lib.zeros(2)) for _ in lrs]
    return lib.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)], lr=1.0, momentum=0.9)


def run(lib, make, epochs=25, lrs=(0.1, 0.03), on_epoch=None):
    """The learning rates of ``make(lib.optim.lr_scheduler, optimizer)`` epoch by epoch."""
    opt = groups(lib, lrs)
    scheduler = make(lib.optim.lr_scheduler, opt)
    seen = [scheduler.get_last_lr()]
    for epoch in range(epochs):
        opt.step()
        scheduler.step()
        seen.append(scheduler.get_last_lr())
        assert seen[-1] == [g["lr"] for g in opt.param_groups]
        if on_epoch:
            on_epoch(opt, epoch)
    return seen, scheduler


def same(ours, theirs, rel=1e-12):
    assert len(ours) == len(theirs)
    for epoch, (a, b) in enumerate(zip(ours, theirs)):
        assert a == pytest.approx(b, rel=rel, abs=1e-15), f"epoch {epoch}"


PYTORCH_SCHEDULES = {
    "linear_warmup": lambda L, o: L.LinearLR(o, start_factor=0.01, total_iters=6),
    "linear_defaults": lambda L, o: L.LinearLR(o),
    "linear_down": lambda L, o: L.LinearLR(o, start_factor=1.0, end_factor=0.2, total_iters=9),
    "warmup_then_cosine": lambda L, o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.1, total_iters=5), L.CosineAnnealingLR(o, T_max=8, eta_min=0.001)],
        milestones=[5]),
    "three_in_a_row": lambda L, o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.5, end_factor=0.5, total_iters=3), L.ExponentialLR(o, gamma=0.9),
            L.StepLR(o, step_size=3, gamma=0.5)], milestones=[3, 8]),
    "one_scheduler": lambda L, o: L.SequentialLR(o, [L.MultiStepLR(o, milestones=[2, 4])], milestones=[]),
    "milestone_zero": lambda L, o: L.SequentialLR(
        o, [L.ExponentialLR(o, gamma=0.5), L.StepLR(o, step_size=2, gamma=0.3)], milestones=[0]),
}


@pytest.mark.parametrize("name", sorted(PYTORCH_SCHEDULES))
def test_linear_and_sequential_match_pytorch(name):
    torch = pytest.importorskip("torch")
    ours, _ = run(flow, PYTORCH_SCHEDULES[name])
    theirs, _ = run(torch, PYTORCH_SCHEDULES[name])
    same(ours, theirs)


@pytest.mark.parametrize("name", sorted(PYTORCH_SCHEDULES))
def test_a_learning_rate_edited_by_hand_carries_on_as_in_pytorch(name):
    torch = pytest.importorskip("torch")

    def boost(opt, epoch):
        if epoch in (2, 6):
            opt.param_groups[0]["lr"] *= 3

    ours, _ = run(flow, PYTORCH_SCHEDULES[name], on_epoch=boost)
    theirs, _ = run(torch, PYTORCH_SCHEDULES[name], on_epoch=boost)
    same(ours, theirs)


@pytest.mark.parametrize("name", sorted(PYTORCH_SCHEDULES))
def test_closed_forms_match_the_steps(name):
    stepped, scheduler = run(flow, PYTORCH_SCHEDULES[name], epochs=15)
    for epoch, lrs in enumerate(stepped):
        assert scheduler.lr_at(epoch) == pytest.approx(lrs, rel=1e-12)


def test_linear_lr_step_with_an_epoch_jumps_as_pytorch():
    torch = pytest.importorskip("torch")
    ours, theirs = groups(flow), groups(torch)
    a = S.LinearLR(ours, start_factor=0.2, total_iters=6)
    b = torch.optim.lr_scheduler.LinearLR(theirs, start_factor=0.2, total_iters=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in (4, 1, 9):
            a.step(epoch)
            b.step(epoch)
            assert a.get_last_lr() == pytest.approx(b.get_last_lr(), rel=1e-12)


def test_sequential_step_with_an_epoch_jumps_and_carries_on():
    _, straight = run(flow, PYTORCH_SCHEDULES["warmup_then_cosine"], epochs=0)
    stepped, _ = run(flow, PYTORCH_SCHEDULES["warmup_then_cosine"], epochs=12)
    straight.step(7)
    assert straight.get_last_lr() == pytest.approx(stepped[7], rel=1e-12)
    for epoch in range(8, 13):
        straight.step()
        assert straight.get_last_lr() == pytest.approx(stepped[epoch], rel=1e-12)


# ----------------------------------------------------------------------------------------- OneFlow's


def oneflow_lrs(make, steps=7, lr=0.001):
    opt = groups(flow, (lr,))
    scheduler = make(opt)
    return [scheduler.get_last_lr()[0]] + [(scheduler.step(), scheduler.get_last_lr()[0])[1] for _ in range(steps - 1)]


def test_cosine_decay_follows_oneflows_formula_and_stays_at_alpha():
    lrs = oneflow_lrs(lambda o: S.CosineDecayLR(o, decay_steps=5, alpha=0.1), steps=9)
    expected = [0.001 * ((1 - 0.1) * 0.5 * (1 + math.cos(math.pi * min(t, 5) / 5)) + 0.1) for t in range(9)]
    assert lrs == pytest.approx(expected, rel=1e-12)
    assert lrs[5:] == pytest.approx([0.0001] * 4, rel=1e-12)


def test_cosine_decay_is_cosine_annealing_up_to_decay_steps():
    torch = pytest.importorskip("torch")
    ours, _ = run(flow, lambda L, o: L.CosineDecayLR(o, decay_steps=10, alpha=0.2), epochs=10, lrs=(0.1,))
    theirs, _ = run(torch, lambda L, o: L.CosineAnnealingLR(o, T_max=10, eta_min=0.02), epochs=10, lrs=(0.1,))
    same(ours, theirs, rel=1e-12)


def test_warmup_lr_gives_oneflows_documented_numbers():
    # OneFlow's examples: lr 0.001, warm-up factor 0.5 over 5 steps.
    assert oneflow_lrs(lambda o: S.WarmupLR(o, warmup_factor=0.5, warmup_iters=5, warmup_method="constant")) == \
        pytest.approx([0.0005] * 5 + [0.001] * 2, rel=1e-12)
    assert oneflow_lrs(lambda o: S.WarmupLR(o, warmup_factor=0.5, warmup_iters=5)) == \
        pytest.approx([0.0005, 0.0006, 0.0007, 0.0008, 0.0009, 0.001, 0.001], rel=1e-12)
    # Over a cosine decay, overlaid (warmup_prefix=False): the warm-up ends where the decay is at step 2.
    decay = [0.001 * (0.9 * 0.5 * (1 + math.cos(math.pi * t / 5)) + 0.1) for t in range(6)] + [0.0001]
    lrs = oneflow_lrs(lambda o: S.WarmupLR(S.CosineDecayLR(o, decay_steps=5, alpha=0.1), warmup_factor=0.5,
                                           warmup_iters=2))
    assert lrs == pytest.approx([0.0005, 0.0005 + (decay[2] - 0.0005) / 2] + decay[2:], rel=1e-12)
    assert lrs[2:4] == pytest.approx([0.000689, 0.000410], abs=1e-6)      # as OneFlow's docstring prints them


def test_warmup_prefix_puts_the_schedule_after_the_warmup():
    def inner(o):
        return S.StepLR(o, step_size=2, gamma=0.5)

    prefixed = oneflow_lrs(lambda o: S.WarmupLR(inner(o), warmup_factor=0.2, warmup_iters=3, warmup_prefix=True), 9)
    assert prefixed == pytest.approx([0.0002, 0.000466666666666, 0.000733333333333, 0.001, 0.001, 0.0005, 0.0005,
                                      0.00025, 0.00025], rel=1e-9)
    constant = oneflow_lrs(lambda o: S.WarmupLR(inner(o), warmup_factor=0.2, warmup_iters=3,
                                                warmup_method="constant"), 6)
    assert constant == pytest.approx([0.0002] * 3 + [0.0005, 0.00025, 0.00025], rel=1e-12)
    assert oneflow_lrs(lambda o: S.WarmupLR(inner(o), warmup_iters=0), 5) == \
        pytest.approx([0.001, 0.001, 0.0005, 0.0005, 0.00025], rel=1e-12)


def test_a_cosine_with_warmup_written_oneflows_way_and_pytorchs_way_agree():
    """The acceptance test of the issue: both spellings give PyTorch's numbers up to warm-up + decay."""
    torch = pytest.importorskip("torch")
    warmup, decay, lr, alpha = 4, 12, 0.1, 0.1

    def oneflow_way(L, o):
        return L.WarmupLR(L.CosineDecayLR(o, decay_steps=decay, alpha=alpha), warmup_factor=0.01,
                          warmup_iters=warmup, warmup_prefix=True)

    def pytorch_way(L, o):
        return L.SequentialLR(o, [L.LinearLR(o, start_factor=0.01, end_factor=1.0, total_iters=warmup),
                                  L.CosineAnnealingLR(o, T_max=decay, eta_min=alpha * lr)], milestones=[warmup])

    epochs = warmup + decay
    reference, _ = run(torch, pytorch_way, epochs, lrs=(lr,))
    ours_pytorch_way, _ = run(flow, pytorch_way, epochs, lrs=(lr,))
    ours_oneflow_way, _ = run(flow, oneflow_way, epochs, lrs=(lr,))
    same(ours_pytorch_way, reference)
    same(ours_oneflow_way, reference, rel=1e-12)
    assert reference[0] == [pytest.approx(0.001)] and reference[warmup] == [pytest.approx(lr)]
    after, _ = run(flow, oneflow_way, epochs + 3, lrs=(lr,))
    assert after[-3:] == [[pytest.approx(alpha * lr)]] * 3   # OneFlow's decay then stays at alpha * lr


def test_last_step_is_oneflows_name_for_last_epoch():
    opt = groups(flow)
    scheduler = S.CosineDecayLR(opt, decay_steps=4)
    scheduler.step()
    assert scheduler.last_step == scheduler.last_epoch == 1
    resumed = S.CosineDecayLR(opt, decay_steps=4, last_step=2)
    assert resumed.last_step == 3


# --------------------------------------------------------------------------------------- state dicts

NESTED = {
    "LinearLR": lambda L, o: L.LinearLR(o, start_factor=0.25, total_iters=5),
    "SequentialLR": PYTORCH_SCHEDULES["warmup_then_cosine"],
    "CosineDecayLR": lambda L, o: L.CosineDecayLR(o, decay_steps=6, alpha=0.05),
    "WarmupLR_over_cosine": lambda L, o: L.WarmupLR(L.CosineDecayLR(o, decay_steps=6), warmup_factor=0.1,
                                                    warmup_iters=3),
    "WarmupLR_alone": lambda L, o: L.WarmupLR(o, warmup_factor=0.1, warmup_iters=4, warmup_method="constant"),
    "WarmupLR_over_sequence": lambda L, o: L.WarmupLR(PYTORCH_SCHEDULES["three_in_a_row"](L, o), warmup_iters=2,
                                                      warmup_prefix=True),
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_state_dict_round_trip_resumes_identically(name, tmp_path):
    straight, _ = run(flow, NESTED[name], epochs=14)
    opt = groups(flow)
    scheduler = NESTED[name](lr_scheduler, opt)
    for _ in range(6):
        opt.step()
        scheduler.step()
    flow.save({"opt": opt.state_dict(), "sched": scheduler.state_dict()}, tmp_path / "ckpt")
    saved = flow.load(tmp_path / "ckpt")
    opt2 = groups(flow, lrs=(7.0, 7.0))           # other lrs: the loaded state must win
    scheduler2 = NESTED[name](lr_scheduler, opt2)   # (made before the optimizer loads: a LinearLR scales the lr)
    opt2.load_state_dict(saved["opt"])
    scheduler2.load_state_dict(saved["sched"])
    resumed = [scheduler2.get_last_lr()]
    for _ in range(8):
        opt2.step()
        scheduler2.step()
        resumed.append(scheduler2.get_last_lr())
    same(resumed, straight[6:])
    assert scheduler2.last_epoch == 14


def test_nested_state_dicts_hold_the_inner_schedulers():
    opt = groups(flow)
    seq = PYTORCH_SCHEDULES["three_in_a_row"](lr_scheduler, opt)
    state = seq.state_dict()
    assert [set(s) >= {"last_epoch", "base_lrs"} for s in state["_schedulers"]] == [True] * 3
    assert state["_milestones"] == [3, 8]
    warm = S.WarmupLR(S.CosineDecayLR(groups(flow), decay_steps=3))
    assert warm.state_dict()["scheduler"]["decay_steps"] == 3
    assert S.WarmupLR(groups(flow)).state_dict()["scheduler"] is None


def _bad_inner(state):
    state["_schedulers"][1]["T_max"] = 0


@pytest.mark.parametrize("change, error, message", [
    (lambda sd: sd.pop("_milestones"), ValueError, r"missing keys \['_milestones'\]"),
    (lambda sd: sd.update(_milestones=[5, 6]), ValueError, "one milestone fewer than schedulers"),
    (lambda sd: sd.update(_milestones=[2.5]), TypeError, "milestones must be whole numbers"),
    (lambda sd: sd["_schedulers"].pop(), ValueError, "holds 1 scheduler states, this one is made of 2"),
    (_bad_inner, ValueError, "T_max must be a positive integer"),
    (lambda sd: sd["_schedulers"][0].update(start_factor=0.0), ValueError, "greater than 0 and less or equal to 1"),
    (lambda sd: sd["_schedulers"].__setitem__(0, {"step_size": 3}), ValueError, "another kind of scheduler"),
    (lambda sd: sd.update(_schedulers={"a": 1}), ValueError, "scheduler states"),
])
def test_a_bad_sequential_state_is_refused_whole(change, error, message):
    opt = groups(flow)
    scheduler = PYTORCH_SCHEDULES["warmup_then_cosine"](lr_scheduler, opt)
    source = PYTORCH_SCHEDULES["warmup_then_cosine"](lr_scheduler, groups(flow, (0.5, 0.2)))
    for _ in range(7):
        source.step()
    state = source.state_dict()
    change(state)
    before = scheduler.state_dict()
    with pytest.raises(error, match=message):
        scheduler.load_state_dict(state)
    assert scheduler.state_dict() == before


@pytest.mark.parametrize("change, error, message", [
    (lambda sd: sd.update(warmup_method="cosine"), ValueError, "warmup_method must be 'linear' or 'constant'"),
    (lambda sd: sd.update(warmup_iters=-1), ValueError, "warmup_iters must be an integer >= 0"),
    (lambda sd: sd.update(warmup_prefix=1), TypeError, "warmup_prefix must be True or False"),
    (lambda sd: sd.update(warmup_factor=1.5), ValueError, "between 0 and 1"),
    (lambda sd: sd["scheduler"].update(alpha=-0.5), ValueError, "alpha must be >= 0"),
    (lambda sd: sd.update(scheduler=None), ValueError, "holds 0 scheduler states, this one is made of 1"),
])
def test_a_bad_warmup_state_is_refused_whole(change, error, message):
    make = NESTED["WarmupLR_over_cosine"]
    scheduler = make(lr_scheduler, groups(flow))
    source = make(lr_scheduler, groups(flow))
    for _ in range(4):
        source.step()
    state = source.state_dict()
    change(state)
    before = scheduler.state_dict()
    with pytest.raises(error, match=message):
        scheduler.load_state_dict(state)
    assert scheduler.state_dict() == before


# --------------------------------------------------------------------------------------- bad settings


class NoClosedForm(lr_scheduler.LRScheduler):
    def get_lr(self):
        return self._current_lrs()


@pytest.mark.parametrize("build, error, message", [
    (lambda o: S.LinearLR(o, start_factor=0.0), ValueError, "greater than 0 and less or equal to 1"),
    (lambda o: S.LinearLR(o, start_factor=1.5), ValueError, "greater than 0 and less or equal to 1"),
    (lambda o: S.LinearLR(o, end_factor=-0.1), ValueError, "between 0 and 1"),
    (lambda o: S.LinearLR(o, total_iters=0), ValueError, "total_iters must be a positive integer"),
    (lambda o: S.LinearLR(o, start_factor="x"), TypeError, "start_factor must be a number"),
    (lambda o: S.SequentialLR(o, [], milestones=[]), ValueError, "at least one scheduler"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2)], milestones=[3]), ValueError, "one milestone fewer"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.StepLR(o, 3), S.StepLR(o, 4)], milestones=[5, 2]), ValueError,
     "increasing order"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.StepLR(o, 3)], milestones=[1.5]), TypeError, "whole numbers"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.StepLR(groups(flow), 3)], milestones=[2]), ValueError,
     "same optimizer"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), "step"], milestones=[2]), TypeError, "not a scheduler"),
    (lambda o: S.SequentialLR("sgd", [S.StepLR(o, 2)], milestones=[]), TypeError, "needs a toynet optimizer"),
    (lambda o: S.CosineDecayLR(o, decay_steps=0), ValueError, "decay_steps must be a positive integer"),
    (lambda o: S.CosineDecayLR(o, decay_steps=5, alpha=-0.1), ValueError, "alpha must be >= 0"),
    (lambda o: S.WarmupLR(o, warmup_method="cosine"), ValueError, "'linear' or 'constant'"),
    (lambda o: S.WarmupLR(o, warmup_iters=0), ValueError, "warmup_iters can't be 0"),
    (lambda o: S.WarmupLR(o, warmup_iters=2.0), ValueError, "warmup_iters must be an integer"),
    (lambda o: S.WarmupLR(o, warmup_factor=2.0), ValueError, "between 0 and 1"),
    (lambda o: S.WarmupLR(o, warmup_prefix="yes"), TypeError, "warmup_prefix must be True or False"),
    (lambda o: S.WarmupLR(NoClosedForm(o)), TypeError, "needs schedulers with a closed form"),
    (lambda o: S.WarmupLR("adam"), TypeError, "must be a toynet scheduler or optimizer"),
])
def test_bad_settings_are_refused(build, error, message):
    opt = groups(flow)
    with pytest.raises(error, match=message):
        build(opt)


def test_a_failed_sequential_step_changes_nothing(monkeypatch):
    opt = groups(flow)
    scheduler = PYTORCH_SCHEDULES["warmup_then_cosine"](lr_scheduler, opt)
    for _ in range(2):
        scheduler.step()
    before, lrs = scheduler.state_dict(), [g["lr"] for g in opt.param_groups]

    def broken(self):
        raise ArithmeticError("broken formula")
    monkeypatch.setattr(S.LinearLR, "get_lr", broken)
    with pytest.raises(ArithmeticError):
        scheduler.step()
    assert scheduler.state_dict() == before and [g["lr"] for g in opt.param_groups] == lrs


# --------------------------------------------------------------------------------------------- nn.Graph


@pytest.fixture(params=["lesson", "fast"])
def either_path(request):
    with flow.set_fast_path(request.param == "fast"):
        yield request.param


def mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer, scheduler):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss


GRAPH_SCHEDULES = {
    "oneflow_way": lambda o: S.WarmupLR(S.CosineDecayLR(o, decay_steps=5, alpha=0.1), warmup_factor=0.1,
                                        warmup_iters=3, warmup_prefix=True),
    "pytorch_way": lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=3),
                                                S.CosineAnnealingLR(o, T_max=5, eta_min=0.002)], milestones=[3]),
}


@pytest.mark.parametrize("name", sorted(GRAPH_SCHEDULES))
def test_a_graph_steps_the_schedule_as_eager_does(name, either_path):
    eager, lazy = mlp(), mlp()

    def make(model):
        opt = AdamW([{"params": model.parameters(), "clip_grad_max_norm": 0.5}], lr=0.02)
        return opt, GRAPH_SCHEDULES[name](opt)

    eager_opt, eager_sched = make(eager)
    lazy_opt, lazy_sched = make(lazy)
    graph = TrainGraph(lazy, lazy_opt, lazy_sched)
    rng = np.random.default_rng(0)
    for _ in range(9):
        x = flow.tensor(rng.standard_normal((6, 4)).astype(np.float32))
        y = flow.tensor(rng.standard_normal((6, 2)).astype(np.float32))
        loss = ((eager(x) - y) ** 2).mean()
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.clip_grad()
        eager_opt.step()
        eager_sched.step()
        assert graph(x, y).item() == pytest.approx(loss.item(), rel=1e-6)
        assert lazy_opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"]
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)
    assert len(graph._compiled) == 1     # the learning rate is fed in: a new one compiles nothing
    assert lazy_sched.last_epoch == 9


def test_add_optimizer_refuses_a_schedule_of_another_optimizer():
    model = mlp()
    opt = SGD(model.parameters(), lr=0.1)
    other = SGD(mlp().parameters(), lr=0.1)
    with pytest.raises(AssertionError, match="same optimizer"):
        TrainGraph(model, opt, S.WarmupLR(other))
