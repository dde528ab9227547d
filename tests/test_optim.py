"""Optimizers: PyTorch's numbers step by step, a pure update rule, all-or-nothing steps, state dicts."""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.optim import SGD, Adam

RNG = np.random.default_rng(1)
W0 = RNG.standard_normal((3, 4)).astype(np.float32)
B0 = RNG.standard_normal(4).astype(np.float32)
XS = [RNG.standard_normal((5, 3)).astype(np.float32) for _ in range(6)]


def make_params(device="cpu", dtype=np.float32):
    return (nn.Parameter(flow.tensor(W0.astype(dtype), device=device)),
            nn.Parameter(flow.tensor(B0.astype(dtype), device=device)))


def loss_of(w, b, x):
    return ((x @ w + b).tanh() ** 2).sum()


def train_toynet(make_opt, steps, device="cpu", dtype=np.float32, on_step=None):
    w, b = make_params(device, dtype)
    opt = make_opt([w, b])
    history = []
    for i in range(steps):
        opt.zero_grad()
        loss_of(w, b, flow.tensor(XS[i % len(XS)].astype(dtype), device=device)).backward()
        opt.step()
        if on_step:
            on_step(opt, i)
        history.append((w.numpy().copy(), b.numpy().copy()))
    return history, opt, (w, b)


def train_torch(torch, make_opt, steps, on_step=None, dtype=np.float32):
    w = torch.nn.Parameter(torch.tensor(W0.astype(dtype)))
    b = torch.nn.Parameter(torch.tensor(B0.astype(dtype)))
    opt = make_opt([w, b])
    history = []
    for i in range(steps):
        opt.zero_grad()
        loss_of(w, b, torch.tensor(XS[i % len(XS)].astype(dtype))).backward()
        opt.step()
        if on_step:
            on_step(opt, i)
        history.append((w.detach().numpy().copy(), b.detach().numpy().copy()))
    return history


SGD_CONFIGS = [
    {"lr": 0.1},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.5},
    {"lr": 0.05, "momentum": 0.8, "nesterov": True},
    {"lr": 0.1, "weight_decay": 0.01},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.05},
    {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
]

ADAM_CONFIGS = [
    {},
    {"lr": 0.01},
    {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6},
    {"lr": 0.01, "weight_decay": 0.1},
    {"lr": 0.01, "amsgrad": True},
    {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.01, "amsgrad": True},
]


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)], ids=["f32", "f64"])
@pytest.mark.parametrize("config", SGD_CONFIGS, ids=str)
def test_sgd_matches_pytorch(config, dtype, rtol):
    """In float64 the two agree to rounding, so the formulas are the same, not merely close."""
    torch = pytest.importorskip("torch")
    ours, _, _ = train_toynet(lambda p: SGD(p, **config), 8, dtype=dtype)
    theirs = train_torch(torch, lambda p: torch.optim.SGD(p, **config), 8, dtype=dtype)
    for (w, b), (tw, tb) in zip(ours, theirs):
        assert w.dtype == dtype
        np.testing.assert_allclose(w, tw, rtol=rtol, atol=rtol / 10)
        np.testing.assert_allclose(b, tb, rtol=rtol, atol=rtol / 10)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)], ids=["f32", "f64"])
@pytest.mark.parametrize("config", ADAM_CONFIGS, ids=str)
def test_adam_matches_pytorch(config, dtype, rtol):
    """In float64 the two agree to rounding, so the formulas are the same, not merely close."""
    torch = pytest.importorskip("torch")
    ours, _, _ = train_toynet(lambda p: Adam(p, **config), 8, dtype=dtype)
    theirs = train_torch(torch, lambda p: torch.optim.Adam(p, **config), 8, dtype=dtype)
    for (w, b), (tw, tb) in zip(ours, theirs):
        assert w.dtype == dtype
        np.testing.assert_allclose(w, tw, rtol=rtol, atol=rtol / 10)
        np.testing.assert_allclose(b, tb, rtol=rtol, atol=rtol / 10)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_param_groups_and_editing_lr_match_pytorch(name):
    torch = pytest.importorskip("torch")
    extra = {"SGD": {"momentum": 0.9}, "Adam": {}}[name]

    def halve_lr_of_group_1(opt, i):
        if i == 2:
            opt.param_groups[1]["lr"] *= 0.5

    def groups(p):
        return [{"params": [p[0]]}, {"params": [p[1]], "lr": 0.02}]

    ours, _, _ = train_toynet(lambda p: getattr(flow.optim, name)(groups(p), lr=0.1, **extra), 6,
                              on_step=halve_lr_of_group_1)
    theirs = train_torch(torch, lambda p: getattr(torch.optim, name)(groups(p), lr=0.1, **extra), 6,
                         on_step=halve_lr_of_group_1)
    for (w, b), (tw, tb) in zip(ours, theirs):
        np.testing.assert_allclose(w, tw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, tb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make_opt", [lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.3),
                                      lambda p: Adam(p, lr=0.01, amsgrad=True)], ids=["sgd", "adam"])
def test_runs_on_every_device_and_keeps_float32(device, make_opt):
    history, opt, (w, b) = train_toynet(make_opt, 3, device=device)
    cpu_history, _, _ = train_toynet(make_opt, 3)
    np.testing.assert_allclose(history[-1][0], cpu_history[-1][0], rtol=1e-6)
    assert w.dtype is flow.float32 and b.dtype is flow.float32 and w.device == device
    for slots in opt.state.values():
        for value in slots.values():
            assert value.dtype is flow.float32 and value.device == device


def test_float64_parameters_stay_float64():
    _, opt, (w, _) = train_toynet(lambda p: Adam(p, lr=0.01), 2, dtype=np.float64)
    assert w.dtype is flow.float64
    assert opt.state[w]["exp_avg"].dtype is flow.float64
    assert opt.state[w]["step"].dtype is flow.float32  # the step count is float32, as in PyTorch


@pytest.mark.parametrize("make_opt", [lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.2),
                                      lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True),
                                      lambda p: Adam(p, lr=0.01, amsgrad=True, weight_decay=0.1)],
                         ids=["sgd-dampening", "sgd-nesterov", "adam-amsgrad"])
def test_update_is_pure_and_accepts_a_tensor_lr(make_opt):
    """Graph mode calls update() on lazy tensors with lr as a 0-d tensor; it must mutate nothing."""
    _, opt, (w, _) = train_toynet(make_opt, 2)
    group = opt.param_groups[0]
    grad = flow.tensor(RNG.standard_normal(w.shape).astype(np.float32))
    state = opt.state[w]
    before = {k: v.numpy().copy() for k, v in state.items()}
    w_before = w.numpy().copy()
    new_w, new_state = opt.update(w.detach(), grad, state, group, group["lr"])
    tensor_lr_w, tensor_lr_state = opt.update(w.detach(), grad, state, group, flow.tensor(group["lr"]))
    np.testing.assert_array_equal(w.numpy(), w_before)
    assert set(new_state) == set(state)
    for k, v in state.items():
        np.testing.assert_array_equal(v.numpy(), before[k])
        assert new_state[k] is not v
        np.testing.assert_allclose(tensor_lr_state[k].numpy(), new_state[k].numpy(), rtol=1e-6)
    assert not np.array_equal(new_w.numpy(), w_before)
    np.testing.assert_allclose(tensor_lr_w.numpy(), new_w.numpy(), rtol=1e-6)
    assert tensor_lr_w.dtype is flow.float32


def test_failed_step_changes_no_parameter_and_no_state():
    _, opt, (w, b) = train_toynet(lambda p: Adam(p, lr=0.1), 2)
    w_before, b_before = w.numpy().copy(), b.numpy().copy()
    state_before = {p: dict(slots) for p, slots in opt.state.items()}
    w.grad = flow.ones(3, 4)           # fine, and comes first: it must not be applied either
    b.grad = flow.ones(5)              # wrong shape
    with pytest.raises(ValueError, match=r"shape \(4,\).*gradient of shape \(5,\)"):
        opt.step()
    b.grad = flow.ones(4, dtype=flow.float64)
    with pytest.raises(TypeError, match="float64 gradient"):
        opt.step()
    np.testing.assert_array_equal(w.numpy(), w_before)
    np.testing.assert_array_equal(b.numpy(), b_before)
    for p, slots in opt.state.items():
        assert all(slots[k] is state_before[p][k] for k in slots)


def test_parameters_without_grad_are_skipped_and_closure_is_returned():
    w, b = make_params()
    opt = SGD([w, b], lr=0.1, momentum=0.9)
    b_before = b.numpy().copy()

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == pytest.approx(float((W0 * W0).sum()), rel=1e-5)
    np.testing.assert_allclose(w.numpy(), W0 - 0.1 * 2 * W0, rtol=1e-6)
    np.testing.assert_array_equal(b.numpy(), b_before)
    assert b not in opt.state


def test_zero_grad():
    _, opt, (w, b) = train_toynet(lambda p: SGD(p, lr=0.1), 1)
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and not w.grad.numpy().any() and w.grad.dtype is flow.float32
    opt.zero_grad()
    assert w.grad is None and b.grad is None


@pytest.mark.parametrize("make_opt", [lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.2),
                                      lambda p: SGD(p, lr=0.1),
                                      lambda p: Adam(p, lr=0.01, amsgrad=True)],
                         ids=["sgd-momentum", "sgd-plain", "adam"])
def test_state_dict_round_trip_resumes_identically(make_opt, tmp_path):
    straight, _, _ = train_toynet(make_opt, 6)

    _first, opt, (w, b) = train_toynet(make_opt, 3)
    flow.save({"w": w, "b": b, "opt": opt.state_dict()}, tmp_path / "ckpt")
    saved = flow.load(tmp_path / "ckpt")

    w2, b2 = make_params()
    w2.copy_(saved["w"])
    b2.copy_(saved["b"])
    opt2 = make_opt([w2, b2])
    opt2.load_state_dict(saved["opt"])
    for i in range(3, 6):
        opt2.zero_grad()
        loss_of(w2, b2, flow.tensor(XS[i % len(XS)])).backward()
        opt2.step()
    np.testing.assert_array_equal(w2.numpy(), straight[-1][0])
    np.testing.assert_array_equal(b2.numpy(), straight[-1][1])


def test_state_dict_has_pytorch_layout():
    torch = pytest.importorskip("torch")
    _, opt, _ = train_toynet(lambda p: Adam([{"params": p[:1]}, {"params": p[1:], "lr": 0.5}]), 1)
    sd = opt.state_dict()
    tw = torch.nn.Parameter(torch.tensor(W0))
    tb = torch.nn.Parameter(torch.tensor(B0))
    topt = torch.optim.Adam([{"params": [tw]}, {"params": [tb], "lr": 0.5}])
    loss_of(tw, tb, torch.tensor(XS[0])).backward()
    topt.step()
    tsd = topt.state_dict()
    assert set(sd) == set(tsd)
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in tsd["param_groups"]] == [[0], [1]]
    assert [g["lr"] for g in sd["param_groups"]] == [0.001, 0.5]
    assert set(sd["state"]) == set(tsd["state"])
    for index, slots in tsd["state"].items():
        assert set(sd["state"][index]) == set(slots)
        for name, value in slots.items():
            np.testing.assert_allclose(sd["state"][index][name].numpy(), value.numpy(), rtol=1e-5, atol=1e-7)


def test_load_state_dict_validates_everything_first():
    _, opt, (w, b) = train_toynet(lambda p: SGD(p, lr=0.1, momentum=0.9), 2)
    good = opt.state_dict()
    state_before = {p: dict(s) for p, s in opt.state.items()}

    def broken(change):
        sd = {"state": {k: dict(v) for k, v in good["state"].items()},
              "param_groups": [dict(g) for g in good["param_groups"]]}
        change(sd)
        return sd

    cases = [
        (lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0])), "2 parameter groups"),
        (lambda sd: sd["param_groups"][0].update(params=[0]), "has 1 parameters"),
        (lambda sd: sd["param_groups"][0].update(lr=-1.0), "Invalid learning rate: -1.0"),
        (lambda sd: sd["state"][1].update(momentum_buffer=flow.zeros(3)), r"shape \(3,\)"),
        (lambda sd: sd["state"][1].pop("momentum_buffer"), "expected slots"),
        (lambda sd: sd["state"].update({7: {}}), "parameter 7"),
        (lambda sd: sd.pop("state"), "exactly the keys"),
    ]
    for change, message in cases:
        # The group edit comes before the bad state entry in each case: it must not stick either.
        sd = broken(change)
        sd["param_groups"][0]["momentum"] = 0.5 if "momentum" in sd["param_groups"][0] else 0.9
        with pytest.raises(ValueError, match=message):
            opt.load_state_dict(sd)
        assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.9
        assert opt.param_groups[0]["params"] == [w, b] or opt.param_groups[0]["params"][0] is w
        assert all(opt.state[p][k] is state_before[p][k] for p in state_before for k in state_before[p])


def test_load_state_dict_moves_state_to_the_parameter_device(device):
    _, opt, _ = train_toynet(lambda p: Adam(p, lr=0.01), 2)
    sd = opt.state_dict()
    w, b = make_params(device)
    opt2 = Adam([w, b], lr=0.01)
    opt2.load_state_dict(sd)
    assert opt2.state[w]["exp_avg"].device == device
    np.testing.assert_array_equal(opt2.state[w]["exp_avg"].numpy(), sd["state"][0]["exp_avg"].numpy())


@pytest.mark.parametrize("build, error, message", [
    (lambda p: SGD(p, lr=-0.1), ValueError, "^Invalid learning rate: -0.1$"),
    (lambda p: SGD(p, lr=-1), ValueError, "^Invalid learning rate: -1$"),
    (lambda p: SGD(p, lr=float("nan")), ValueError, "^Invalid learning rate: nan$"),
    (lambda p: SGD(p, lr=float("inf")), ValueError, "^Invalid learning rate: inf$"),
    (lambda p: SGD(p, lr="fast"), TypeError, "lr must be a real number .int or float., got str 'fast'"),
    (lambda p: SGD(p, lr=True), TypeError, "lr must be a real number"),
    (lambda p: SGD(p, lr=None), TypeError, "lr must be a real number"),
    (lambda p: SGD(p, lr=0.1, momentum="fast"), TypeError, "momentum must be a real number"),
    (lambda p: SGD(p, lr=0.1, momentum=-0.5), ValueError, "^Invalid momentum value: -0.5$"),
    (lambda p: SGD(p, lr=0.1, dampening=-0.5), ValueError, "^Invalid dampening value: -0.5$"),
    (lambda p: SGD(p, lr=0.1, weight_decay=-1), ValueError, "^Invalid weight_decay value: -1$"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov="yes"), TypeError, "nesterov must be True or False"),
    (lambda p: SGD(p, lr=0.1, nesterov=True), ValueError, "Nesterov momentum requires a momentum and zero"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), ValueError, "Nesterov"),
    (lambda p: Adam(p, lr=-1), ValueError, "^Invalid learning rate: -1$"),
    (lambda p: Adam(p, betas=(1.0, 0.999)), ValueError, "^Invalid beta parameter at index 0: 1.0$"),
    (lambda p: Adam(p, betas=(0.9, -0.1)), ValueError, "^Invalid beta parameter at index 1: -0.1$"),
    (lambda p: Adam(p, betas=(0.9, "x")), TypeError, "betas must be a real number"),
    (lambda p: Adam(p, betas=0.9), ValueError, "betas must be a pair"),
    (lambda p: Adam(p, betas=(0.9, 0.99, 0.9)), ValueError, "betas must be a pair"),
    (lambda p: Adam(p, eps=-1e-8), ValueError, "^Invalid epsilon value: -1e-08$"),
    (lambda p: Adam(p, weight_decay=-0.1), ValueError, "^Invalid weight_decay value: -0.1$"),
    (lambda p: Adam(p, amsgrad=1), TypeError, "amsgrad must be True or False"),
    (lambda p: Adam([{"params": p[:1], "lr": -2.0}, {"params": p[1:]}]), ValueError, "Invalid learning rate"),
    (lambda p: SGD([], lr=0.1), ValueError, "empty parameter list"),
    (lambda p: SGD(p[0], lr=0.1), TypeError, "single Tensor"),
    (lambda p: SGD([p[0], p[0]], lr=0.1), ValueError, "twice"),
    (lambda p: SGD([{"params": [p[0]]}, {"params": [p[0]]}], lr=0.1), ValueError, "more than one"),
    (lambda p: SGD([p[0] * 2], lr=0.1), ValueError, "non-leaf"),
    (lambda p: SGD([flow.arange(3)], lr=0.1), TypeError, "floating-point"),
    (lambda p: SGD([3.0], lr=0.1), TypeError, "only optimize tensors"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_bad_hyper_parameters_are_rejected(build, error, message):
    with pytest.raises(error, match=message):
        build(make_params())


def test_add_param_group_and_repr():
    w, b = make_params()
    opt = SGD([w], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert opt.param_groups[1]["momentum"] == 0.9 and opt.param_groups[1]["lr"] == 0.01
    assert opt.group_of(b) is opt.param_groups[1]
    text = repr(opt)
    assert text.startswith("SGD (") and "Parameter Group 1" in text and "lr: 0.01" in text


def test_sgd_state_slots_follow_the_settings():
    w, _ = make_params()
    assert SGD([w], lr=0.1).init_state(w) == {}
    assert set(SGD([w], lr=0.1, momentum=0.9).init_state(w)) == {"momentum_buffer"}
    assert set(SGD([w], lr=0.1, momentum=0.9, dampening=0.5).init_state(w)) == {"momentum_buffer", "step"}
    assert set(Adam([w], amsgrad=True).init_state(w)) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    for opt in (SGD([w], lr=0.1, momentum=0.9, dampening=0.5), Adam([w], amsgrad=True)):
        assert set(opt.init_state(w)) <= set(opt.slot_names)
    assert SGD.slot_names["momentum_buffer"] == "momentum"
    assert (Adam.slot_names["exp_avg"], Adam.slot_names["exp_avg_sq"]) == ("m", "v")


def test_switching_momentum_on_later_matches_pytorch():
    torch = pytest.importorskip("torch")

    def momentum_on(opt, i):
        if i == 1:
            opt.param_groups[0]["momentum"] = 0.9
            opt.param_groups[0]["dampening"] = 0.3

    ours, _, _ = train_toynet(lambda p: SGD(p, lr=0.1), 5, on_step=momentum_on)
    theirs = train_torch(torch, lambda p: torch.optim.SGD(p, lr=0.1), 5, on_step=momentum_on)
    for (w, b), (tw, tb) in zip(ours, theirs):
        np.testing.assert_allclose(w, tw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, tb, rtol=1e-5, atol=1e-6)


def test_dampening_switched_on_after_the_first_step_saves_and_loads_without_a_step_slot():
    def dampening_on(opt, i):
        if i == 0:
            opt.param_groups[0]["dampening"] = 0.5

    straight, _, _ = train_toynet(lambda p: SGD(p, lr=0.1, momentum=0.9), 4, on_step=dampening_on)
    _, opt, (w, b) = train_toynet(lambda p: SGD(p, lr=0.1, momentum=0.9), 2, on_step=dampening_on)
    assert all(set(s) == {"momentum_buffer"} for s in opt.state.values())  # the rule does without "step"
    w2, b2 = make_params()
    w2.copy_(w)
    b2.copy_(b)
    resumed = SGD([w2, b2], lr=0.1, momentum=0.9, dampening=0.5)
    resumed.load_state_dict(opt.state_dict())  # a slot set without the optional "step" loads
    assert all(set(s) == {"momentum_buffer"} for s in resumed.state.values())
    for i in range(2, 4):
        resumed.zero_grad()
        loss_of(w2, b2, flow.tensor(XS[i])).backward()
        resumed.step()
    np.testing.assert_array_equal(w2.numpy(), straight[-1][0])
