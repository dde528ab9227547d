"""Learning-rate schedulers: PyTorch's learning rates epoch by epoch, closed form, state dicts."""

from __future__ import annotations

import warnings

import pytest

import toynet as flow
from toynet.optim import SGD, lr_scheduler


def groups(lib, lrs=(0.1, 0.03)):
    """One optimizer with a parameter group per learning rate, in toynet or PyTorch."""
    if lib is flow:
        params = [flow.nn.Parameter(flow.zeros(2)) for _ in lrs]
        return SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)], lr=1.0, momentum=0.9)
    params = [lib.nn.Parameter(lib.zeros(2)) for _ in lrs]
    return lib.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)], lr=1.0, momentum=0.9)


CONFIGS = {
    "StepLR": {"step_size": 3, "gamma": 0.5},
    "MultiStepLR": {"milestones": [2, 5, 5, 9], "gamma": 0.3},
    "ExponentialLR": {"gamma": 0.9},
    "CosineAnnealingLR": {"T_max": 5, "eta_min": 0.001},   # 20 epochs: past T_max it climbs back, twice
    "LambdaLR": {"lr_lambda": lambda epoch: 1.0 / (1 + epoch)},
}


def schedule(lib, name, epochs=20, on_epoch=None):
    opt = groups(lib)
    scheduler = getattr(lib.optim.lr_scheduler, name)(opt, **CONFIGS[name])
    seen = [scheduler.get_last_lr()]
    for epoch in range(epochs):
        opt.step()
        scheduler.step()
        seen.append(scheduler.get_last_lr())
        assert seen[-1] == [g["lr"] for g in opt.param_groups]
        if on_epoch:
            on_epoch(opt, epoch)
    return seen, scheduler


def flat(lrs_per_epoch):
    return [lr for lrs in lrs_per_epoch for lr in lrs]


@pytest.mark.parametrize("name", CONFIGS)
def test_learning_rates_match_pytorch(name):
    torch = pytest.importorskip("torch")
    ours, _ = schedule(flow, name)
    theirs, _ = schedule(torch, name)
    assert len(ours) == len(theirs) == 21
    for a, b in zip(ours, theirs):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name", CONFIGS)
def test_lr_edited_by_hand_carries_on_as_in_pytorch(name):
    """The chainable form continues from a learning rate changed between epochs."""
    torch = pytest.importorskip("torch")

    def boost(opt, epoch):
        if epoch == 6:
            opt.param_groups[0]["lr"] *= 4

    ours, _ = schedule(flow, name, on_epoch=boost)
    theirs, _ = schedule(torch, name, on_epoch=boost)
    for a, b in zip(ours, theirs):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name", CONFIGS)
def test_closed_form_matches_the_steps_and_pytorch_step_with_epoch(name):
    torch = pytest.importorskip("torch")
    stepped, scheduler = schedule(flow, name, epochs=12)
    for epoch, lrs in enumerate(stepped):
        assert scheduler.lr_at(epoch) == pytest.approx(lrs, rel=1e-12)
    # step(epoch) jumps with the closed form, as PyTorch's deprecated form does.
    ours, theirs = groups(flow), groups(torch)
    ours_s = getattr(lr_scheduler, name)(ours, **CONFIGS[name])
    theirs_s = getattr(torch.optim.lr_scheduler, name)(theirs, **CONFIGS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in (7, 3, 11):
            ours_s.step(epoch)
            theirs_s.step(epoch)
            assert ours_s.get_last_lr() == pytest.approx(theirs_s.get_last_lr(), rel=1e-12)


@pytest.mark.parametrize("name", CONFIGS)
def test_state_dict_round_trip_resumes_identically(name, tmp_path):
    straight, _ = schedule(flow, name, epochs=12)

    opt = groups(flow)
    scheduler = getattr(lr_scheduler, name)(opt, **CONFIGS[name])
    for _ in range(5):
        opt.step()
        scheduler.step()
    flow.save({"opt": opt.state_dict(), "sched": scheduler.state_dict()}, tmp_path / "ckpt")
    saved = flow.load(tmp_path / "ckpt")

    opt2 = groups(flow, lrs=(7.0, 7.0))           # different lrs: the loaded state must win
    opt2.load_state_dict(saved["opt"])
    scheduler2 = getattr(lr_scheduler, name)(opt2, **CONFIGS[name])
    scheduler2.load_state_dict(saved["sched"])
    resumed = [scheduler2.get_last_lr()]
    for _ in range(7):
        opt2.step()
        scheduler2.step()
        resumed.append(scheduler2.get_last_lr())
    assert flat(resumed) == pytest.approx(flat(straight[5:]), rel=1e-12)
    assert scheduler2.last_epoch == 12


def test_resuming_with_last_epoch_needs_initial_lr():
    opt = groups(flow)
    with pytest.raises(KeyError, match="initial_lr"):
        lr_scheduler.StepLR(opt, step_size=2, last_epoch=4)
    lr_scheduler.StepLR(opt, step_size=2)              # records initial_lr
    resumed = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert resumed.last_epoch == 5 and resumed.base_lrs == [0.1, 0.03]


def test_lambda_is_not_saved_and_bad_state_is_rejected():
    opt = groups(flow)
    scheduler = lr_scheduler.LambdaLR(opt, [lambda e: 0.5 ** e, lambda e: 1.0])
    assert "lr_lambdas" not in scheduler.state_dict()
    other = lr_scheduler.StepLR(groups(flow), step_size=2)
    before = scheduler.state_dict()
    with pytest.raises(ValueError, match="unexpected keys"):
        scheduler.load_state_dict(other.state_dict())
    with pytest.raises(ValueError, match="parameter groups"):
        scheduler.load_state_dict({**before, "base_lrs": [0.1]})
    assert scheduler.state_dict() == before


@pytest.mark.parametrize("change, error, message", [
    (lambda sd: sd.pop("gamma"), ValueError, r"missing keys \['gamma'\] \(was it saved by another kind"),
    (lambda sd: sd.update(step_size=0), ValueError, "step_size must be a positive integer"),
    (lambda sd: sd.update(gamma="x"), TypeError, "gamma must be a number"),
    (lambda sd: sd.update(gamma=float("nan")), ValueError, "gamma must be finite"),
    (lambda sd: sd.update(last_epoch=-2), ValueError, "last_epoch must be an integer >= -1"),
    (lambda sd: sd.update(last_epoch=2.0), ValueError, "last_epoch must be an integer"),
    (lambda sd: sd.update(base_lrs=[0.1, -1.0]), ValueError, "Invalid learning rate: -1.0"),
    (lambda sd: sd.update(_last_lr=[0.1, "x"]), TypeError, "_last_lr must be a real number"),
    (lambda sd: sd.update(base_lrs=0.1), ValueError, "base_lrs has 0.1 entries"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_a_bad_scheduler_state_is_refused_whole(change, error, message):
    scheduler = lr_scheduler.StepLR(groups(flow), step_size=3, gamma=0.5)
    source = lr_scheduler.StepLR(groups(flow, lrs=(0.2, 0.4)), step_size=5, gamma=0.1)
    for _ in range(7):
        source.step()
    state = source.state_dict()
    change(state)
    before = scheduler.state_dict()
    with pytest.raises(error, match=message):
        scheduler.load_state_dict(state)
    assert scheduler.state_dict() == before


def test_milestones_are_checked_and_kept_sorted_when_loaded():
    scheduler = lr_scheduler.MultiStepLR(groups(flow), milestones=[2, 5])
    state = scheduler.state_dict()
    with pytest.raises(TypeError, match="milestones must be integers"):
        scheduler.load_state_dict({**state, "milestones": [1, 2.5]})
    scheduler.load_state_dict({**state, "milestones": (9, 3, 3)})
    assert scheduler.milestones == [3, 3, 9]


@pytest.mark.parametrize("build, error, message", [
    (lambda o: lr_scheduler.StepLR(o, step_size=0), ValueError, "step_size must be a positive integer"),
    (lambda o: lr_scheduler.StepLR(o, step_size=2.5), ValueError, "step_size"),
    (lambda o: lr_scheduler.StepLR(o, step_size=2, gamma="x"), TypeError, "gamma must be a number"),
    (lambda o: lr_scheduler.MultiStepLR(o, milestones=[1.5]), TypeError, "integers"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=0), ValueError, "T_max"),
    (lambda o: lr_scheduler.LambdaLR(o, [lambda e: 1.0]), ValueError, "expected 2 lr_lambdas"),
    (lambda o: lr_scheduler.LambdaLR(o, 0.5), TypeError, "function of the epoch"),
    (lambda o: lr_scheduler.ExponentialLR(o, gamma=0.9, last_epoch=-2), ValueError, "last_epoch"),
    (lambda o: lr_scheduler.ExponentialLR("sgd", gamma=0.9), TypeError, "needs a toynet optimizer"),
])
def test_bad_settings_are_rejected(build, error, message):
    with pytest.raises(error, match=message):
        build(groups(flow))
