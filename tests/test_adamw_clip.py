"""AdamW and gradient clipping (issue 20): PyTorch's numbers, Eager mode against nn.Graph on both paths, the
compiled plan guarded on the clipping settings, bad settings refused, and steps that apply whole or not at all."""

from __future__ import annotations

import math

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.optim import SGD, Adam, AdamW

RNG = np.random.default_rng(7)
W0 = RNG.standard_normal((3, 4)).astype(np.float32)
B0 = RNG.standard_normal(4).astype(np.float32)
XS = [RNG.standard_normal((5, 3)).astype(np.float32) * 2 for _ in range(6)]


@pytest.fixture(params=["lesson", "fast"])
def either_path(request):
    """Run a test on the lesson path and on the fast path, whatever the suite runs on."""
    with flow.set_fast_path(request.param == "fast"):
        yield request.param


def loss_of(w, b, x):
    return ((x @ w + b).tanh() ** 2).sum()


def train(lib, make_opt, steps, dtype=np.float32, clip=None, on_step=None):
    """``steps`` steps of ``loss_of`` in toynet or PyTorch; ``clip(params)`` runs between backward and step,
    ``on_step(optimizer, i)`` after step ``i``."""
    tensor = flow.tensor if lib is flow else lib.tensor
    w, b = (lib.nn.Parameter(tensor(a.astype(dtype))) for a in (W0, B0))
    opt = make_opt([w, b])
    history = []
    for i in range(steps):
        opt.zero_grad()
        loss_of(w, b, tensor(XS[i % len(XS)].astype(dtype))).backward()
        if clip is not None:
            clip([w, b])
        opt.step()
        if on_step is not None:
            on_step(opt, i)
        history.append([(p.detach() if lib is not flow else p).numpy().copy() for p in (w, b)])
    return history, opt, (w, b)


# ------------------------------------------------------------------------------------------------ AdamW

ADAMW_CONFIGS = [
    {},
    {"lr": 0.01},
    {"lr": 0.02, "weight_decay": 0.1},
    {"lr": 0.01, "weight_decay": 0.0},
    {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.3},
    {"lr": 0.01, "amsgrad": True, "weight_decay": 0.05},
]


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-12)], ids=["f32", "f64"])
@pytest.mark.parametrize("config", ADAMW_CONFIGS, ids=str)
def test_adamw_matches_pytorch(config, dtype, rtol):
    """In float64 the two agree to rounding: the same formula, decoupled decay included."""
    torch = pytest.importorskip("torch")
    ours, _, _ = train(flow, lambda p: AdamW(p, **config), 8, dtype=dtype)
    theirs, _, _ = train(torch, lambda p: torch.optim.AdamW(p, **config), 8, dtype=dtype)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for x, y in zip(a, b):
            assert x.dtype == dtype
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol / 10, err_msg=f"step {step}")


def test_adamw_decay_is_decoupled_and_defaults_are_pytorchs():
    opt = AdamW([nn.Parameter(flow.zeros(2))])
    assert opt.defaults == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2, "amsgrad": False}
    # With a zero gradient Adam's step is zero: only the decay moves the weights, by exactly lr * wd.
    p = nn.Parameter(flow.tensor([1.0, -2.0]))
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = flow.zeros(2)
    opt.step()
    np.testing.assert_allclose(p.numpy(), [0.95, -1.9], rtol=1e-6)
    q = nn.Parameter(flow.tensor([1.0, -2.0]))
    adam = Adam([q], lr=0.1, weight_decay=0.5)       # L2: the decay goes through the moments instead
    q.grad = flow.zeros(2)
    adam.step()
    assert not np.allclose(q.numpy(), [0.95, -1.9])


def test_adamw_param_groups_and_a_changed_lr_match_pytorch():
    torch = pytest.importorskip("torch")

    def groups(params):
        return [{"params": params[:1], "weight_decay": 0.2}, {"params": params[1:], "lr": 0.05}]

    def halve(opt, i):
        if i == 2:
            for g in opt.param_groups:
                g["lr"] *= 0.5

    ours, _, _ = train(flow, lambda p: AdamW(groups(p), lr=0.02), 6, on_step=halve)
    theirs, _, _ = train(torch, lambda p: torch.optim.AdamW(groups(p), lr=0.02), 6, on_step=halve)
    for a, b in zip(ours, theirs):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_adamw_state_dict_is_adams_and_round_trips(tmp_path):
    straight, _, _ = train(flow, lambda p: AdamW(p, lr=0.01, amsgrad=True), 6)
    _, opt, (w, b) = train(flow, lambda p: AdamW(p, lr=0.01, amsgrad=True), 3)
    sd = opt.state_dict()
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    assert AdamW.slot_names == Adam.slot_names
    flow.save({"w": w, "b": b, "opt": sd}, tmp_path / "ckpt")
    saved = flow.load(tmp_path / "ckpt")
    w2, b2 = (nn.Parameter(flow.tensor(saved[k].numpy())) for k in ("w", "b"))
    opt2 = AdamW([w2, b2], lr=0.5, amsgrad=True)
    opt2.load_state_dict(saved["opt"])
    assert opt2.param_groups[0]["lr"] == 0.01
    for i in range(3, 6):
        opt2.zero_grad()
        loss_of(w2, b2, flow.tensor(XS[i % len(XS)])).backward()
        opt2.step()
    np.testing.assert_array_equal(w2.numpy(), straight[-1][0])
    np.testing.assert_array_equal(b2.numpy(), straight[-1][1])


def test_adamw_loads_pytorchs_state_dict():
    torch = pytest.importorskip("torch")
    _, topt, _ = train(torch, lambda p: torch.optim.AdamW(p, lr=0.01), 2)
    tsd = topt.state_dict()
    sd = {"state": {i: {k: v.numpy() for k, v in s.items()} for i, s in tsd["state"].items()},
          "param_groups": [{k: v for k, v in g.items() if k in ("lr", "betas", "eps", "weight_decay", "amsgrad",
                                                                "params")} for g in tsd["param_groups"]]}
    _, opt, _ = train(flow, lambda p: AdamW(p, lr=0.5), 1)
    opt.load_state_dict(sd)
    for p, slots in opt.state.items():
        index = 0 if p.shape == (3, 4) else 1
        np.testing.assert_array_equal(slots["exp_avg"].numpy(), tsd["state"][index]["exp_avg"].numpy())
        assert slots["step"].item() == 2


def test_adamw_update_is_pure_and_takes_a_tensor_lr():
    _, opt, (w, _) = train(flow, lambda p: AdamW(p, lr=0.01, weight_decay=0.1), 2)
    group, state = opt.param_groups[0], opt.state[w]
    before = {k: v.numpy().copy() for k, v in state.items()}
    grad = flow.tensor(RNG.standard_normal(w.shape).astype(np.float32))
    new_w, new_state = opt.update(w.detach(), grad, state, group, group["lr"])
    tensor_w, tensor_state = opt.update(w.detach(), grad, state, group, flow.tensor(group["lr"]))
    for k, v in state.items():
        np.testing.assert_array_equal(v.numpy(), before[k])
        np.testing.assert_allclose(tensor_state[k].numpy(), new_state[k].numpy(), rtol=1e-6)
    np.testing.assert_allclose(tensor_w.numpy(), new_w.numpy(), rtol=1e-6)


def test_a_failed_adamw_step_changes_no_parameter_and_no_state():
    _, opt, (w, b) = train(flow, lambda p: AdamW(p, lr=0.1), 2)
    before = [w.numpy().copy(), b.numpy().copy()]
    slots = {p: dict(s) for p, s in opt.state.items()}
    w.grad = flow.ones(3, 4)
    b.grad = flow.ones(5)
    with pytest.raises(ValueError, match="gradient of shape"):
        opt.step()
    np.testing.assert_array_equal(w.numpy(), before[0])
    np.testing.assert_array_equal(b.numpy(), before[1])
    assert all(opt.state[p][k] is v for p, s in slots.items() for k, v in s.items())


@pytest.mark.parametrize("build, error, message", [
    (lambda p: AdamW(p, weight_decay=-0.1), ValueError, "Invalid weight_decay value: -0.1"),
    (lambda p: AdamW(p, betas=(1.0, 0.9)), ValueError, "Invalid beta parameter at index 0"),
    (lambda p: AdamW(p, lr=float("nan")), ValueError, "Invalid learning rate"),
    (lambda p: AdamW(p, amsgrad=1), TypeError, "amsgrad must be True or False"),
])
def test_bad_adamw_settings_are_refused(build, error, message):
    with pytest.raises(error, match=message):
        build([nn.Parameter(flow.zeros(2))])


# ---------------------------------------------------------------------------------- clip_grad_norm_


def with_grads(lib, grads, dtype=np.float32):
    tensor = flow.tensor if lib is flow else lib.tensor
    params = []
    for g in grads:
        p = lib.nn.Parameter(tensor(np.zeros(g.shape, dtype)))
        p.grad = tensor(g.astype(dtype))
        params.append(p)
    return params


GRADS = [RNG.standard_normal((3, 4)).astype(np.float32) * 3, RNG.standard_normal(5).astype(np.float32)]


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.0, 0.5, math.inf, "inf"], ids=str)
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_pytorch(norm_type, max_norm):
    torch = pytest.importorskip("torch")
    ours, theirs = with_grads(flow, GRADS), with_grads(torch, GRADS)
    kept = [p.grad for p in ours]
    norm = flow.nn.utils.clip_grad_norm_(ours, max_norm, norm_type)
    tnorm = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(norm, flow.Tensor) and norm.shape == () and norm.dtype is flow.float32
    assert norm.item() == pytest.approx(tnorm.item(), rel=1e-6)
    for p, q, g in zip(ours, theirs, kept):
        assert p.grad is g                      # clipped in place, as PyTorch's
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_skips_missing_grads_and_takes_one_tensor_and_float64():
    torch = pytest.importorskip("torch")
    p, q = with_grads(flow, GRADS, np.float64)
    q.grad = None
    norm = flow.nn.utils.clip_grad_norm_(p, 1.0)
    assert norm.dtype is flow.float64 and q.grad is None
    tp = with_grads(torch, GRADS[:1], np.float64)[0]
    torch.nn.utils.clip_grad_norm_(tp, 1.0)
    np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12)
    none = nn.Parameter(flow.zeros(2))
    assert flow.nn.utils.clip_grad_norm_([none], 1.0).item() == 0.0


def test_clip_grad_norm_inf_max_norm_only_measures():
    params = with_grads(flow, GRADS)
    norm = flow.nn.utils.clip_grad_norm_(params, float("inf"))
    assert norm.item() == pytest.approx(math.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in GRADS)), rel=1e-6)
    for p, g in zip(params, GRADS):
        np.testing.assert_array_equal(p.grad.numpy(), g)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_non_finite_norm_raises_and_changes_nothing_or_scales_as_pytorch(bad):
    torch = pytest.importorskip("torch")
    grads = [GRADS[0], GRADS[1].copy()]
    grads[1][2] = bad
    params = with_grads(flow, grads)
    with pytest.raises(RuntimeError, match="non-finite.*no gradient was changed.*error_if_nonfinite=False"):
        flow.nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)
    theirs = with_grads(torch, grads)
    with np.errstate(invalid="ignore"):
        norm = flow.nn.utils.clip_grad_norm_(params, 1.0)
    tnorm = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert np.isnan(norm.item()) == np.isnan(tnorm.item())
    for p, q in zip(params, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_clip_grad_value_matches_pytorch():
    torch = pytest.importorskip("torch")
    ours, theirs = with_grads(flow, GRADS), with_grads(torch, GRADS)
    kept = [p.grad for p in ours]
    assert flow.nn.utils.clip_grad_value_(ours, 0.7) is None
    torch.nn.utils.clip_grad_value_(theirs, 0.7)
    for p, q, g in zip(ours, theirs, kept):
        assert p.grad is g
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


@pytest.mark.parametrize("call, error, message", [
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, -1.0), ValueError, "max_norm must be a number >= 0"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, float("nan")), ValueError, "max_norm must be a number >= 0"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, "1"), TypeError, "max_norm must be a real number"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, 1.0, 0), ValueError, "norm_type must be a positive number or inf"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, 1.0, -2.0), ValueError, "positive number or inf"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, 1.0, "two"), ValueError, "positive number or 'inf'"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, 1.0, True), TypeError, "norm_type must be a real number"),
    (lambda ps: flow.nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=1), TypeError, "True or False"),
    (lambda ps: flow.nn.utils.clip_grad_norm_([ps[0], 3.0], 1.0), TypeError, "parameters must be tensors"),
    (lambda ps: flow.nn.utils.clip_grad_value_(ps, -0.5), ValueError, "clip_value must be a number >= 0"),
])
def test_bad_clipping_arguments_are_refused_before_anything_changes(call, error, message):
    params = with_grads(flow, GRADS)
    with pytest.raises(error, match=message):
        call(params)
    for p, g in zip(params, GRADS):
        np.testing.assert_array_equal(p.grad.numpy(), g)


# ------------------------------------------------------------------------- OneFlow's per-group clipping


def clip_groups(params, norm_type=2.0, second=None):
    """Two groups: the first clipped to 0.5 in ``norm_type``, the second as ``second`` says (or not)."""
    return [{"params": params[:1], "clip_grad_max_norm": 0.5, "clip_grad_norm_type": norm_type},
            {"params": params[1:], **(second or {})}]


def test_optimizer_clip_grad_clips_each_group_as_clip_grad_norm_does():
    params = with_grads(flow, GRADS)
    opt = SGD(clip_groups(params, math.inf, {"clip_grad_max_norm": 0.1}), lr=0.1)
    assert opt.param_groups[1]["clip_grad_norm_type"] == 2.0        # the Euclidean norm unless given
    opt.clip_grad()
    expected = with_grads(flow, GRADS)
    flow.nn.utils.clip_grad_norm_(expected[:1], 0.5, math.inf)
    flow.nn.utils.clip_grad_norm_(expected[1:], 0.1)
    for p, q in zip(params, expected):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_clip_grad_without_clipping_groups_warns_and_changes_nothing():
    params = with_grads(flow, GRADS)
    opt = SGD(params, lr=0.1)
    with pytest.warns(UserWarning, match="clipped nothing: no parameter group has clip_grad_max_norm"):
        opt.clip_grad()
    for p, g in zip(params, GRADS):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_clip_grad_with_a_non_finite_norm_raises_and_changes_no_group():
    grads = [GRADS[0], GRADS[1].copy()]
    grads[1][0] = np.inf
    params = with_grads(flow, grads)
    opt = SGD(clip_groups(params, 2.0, {"clip_grad_max_norm": 1.0}), lr=0.1)
    with pytest.raises(RuntimeError, match="of parameter group 1 is non-finite"):
        opt.clip_grad()
    for p, g in zip(params, grads):       # group 0 was fine, and is not clipped either
        np.testing.assert_array_equal(p.grad.numpy(), g)
    with np.errstate(invalid="ignore"):
        opt.clip_grad(error_if_nonfinite=False)
    assert not np.array_equal(params[0].grad.numpy(), grads[0])


@pytest.mark.parametrize("group, error, message", [
    ({"clip_grad_max_norm": 0.0}, ValueError, "clip_grad_max_norm must be a positive finite number, got 0.0"),
    ({"clip_grad_max_norm": -1}, ValueError, "positive finite"),
    ({"clip_grad_max_norm": math.inf}, ValueError, "positive finite"),
    ({"clip_grad_max_norm": math.nan}, ValueError, "positive finite"),
    ({"clip_grad_max_norm": "1"}, TypeError, "clip_grad_max_norm must be a real number"),
    ({"clip_grad_max_norm": True}, TypeError, "clip_grad_max_norm must be a real number"),
    ({"clip_grad_max_norm": 1.0, "clip_grad_norm_type": 0}, ValueError,
     "clip_grad_norm_type must be a positive number or inf"),
    ({"clip_grad_max_norm": 1.0, "clip_grad_norm_type": "inf"}, TypeError, "clip_grad_norm_type must be a real"),
    ({"clip_grad_max_norm": 1.0, "clip_grad_norm_type": None}, TypeError, "clip_grad_norm_type must be a real"),
    ({"clip_grad_norm_type": 2.0}, ValueError, "clip_grad_norm_type but no clip_grad_max_norm"),
])
def test_bad_clipping_keys_are_refused(group, error, message):
    params = with_grads(flow, GRADS)
    with pytest.raises(error, match=message):
        AdamW([{"params": params, **group}])
    opt = AdamW([{"params": params[:1]}])
    with pytest.raises(error, match=message):
        opt.add_param_group({"params": params[1:], **group})
    assert len(opt.param_groups) == 1
    good = AdamW([{"params": params[:1], "clip_grad_max_norm": 1.0}])
    sd = good.state_dict()
    saved = {"state": {}, "param_groups": [{**sd["param_groups"][0], **group}]}
    if "clip_grad_max_norm" not in group:
        del saved["param_groups"][0]["clip_grad_max_norm"]
        good.param_groups[0].pop("clip_grad_max_norm")
    with pytest.raises(ValueError, match="loaded parameter group 0"):
        good.load_state_dict(saved)


def test_a_group_edited_by_hand_is_checked_when_it_clips():
    params = with_grads(flow, GRADS)
    opt = SGD(clip_groups(params), lr=0.1)
    opt.param_groups[0]["clip_grad_max_norm"] = -3.0
    with pytest.raises(ValueError, match="positive finite"):
        opt.clip_grad()
    for p, g in zip(params, GRADS):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_clipping_keys_survive_a_state_dict_round_trip(tmp_path):
    params = with_grads(flow, GRADS)
    opt = AdamW(clip_groups(params, math.inf), lr=0.01)
    opt.step()
    flow.save(opt.state_dict(), tmp_path / "opt")
    other = AdamW([{"params": params[:1]}, {"params": params[1:]}], lr=0.5)
    other.load_state_dict(flow.load(tmp_path / "opt"))
    assert other.param_groups[0]["clip_grad_max_norm"] == 0.5
    assert other.param_groups[0]["clip_grad_norm_type"] == math.inf
    assert "clip_grad_max_norm" not in other.param_groups[1]


# ------------------------------------------------------------------------------------------ Graph mode


def mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def batches(n=5, scale=3.0):
    rng = np.random.default_rng(0)
    return [(flow.tensor(rng.standard_normal((6, 4)).astype(np.float32) * scale),
             flow.tensor(rng.standard_normal((6, 2)).astype(np.float32))) for _ in range(n)]


class TrainGraph(nn.Graph):
    def __init__(self, model, optimizer, scheduler=None):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss


def eager_step(model, opt, x, y, clip="groups"):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    if clip == "groups":
        opt.clip_grad()
    elif clip is not None:
        clip(model)
    opt.step()
    return loss.item()


GRAPH_CONFIGS = {
    "adamw_two_groups": lambda m: AdamW(
        [{"params": m[0].parameters(), "clip_grad_max_norm": 0.1, "clip_grad_norm_type": 2.0},
         {"params": m[2].parameters(), "clip_grad_max_norm": 0.05, "clip_grad_norm_type": math.inf}],
        lr=0.01, weight_decay=0.1),
    "sgd_one_group_clipped": lambda m: SGD(
        [{"params": m[0].parameters(), "clip_grad_max_norm": 0.2, "clip_grad_norm_type": 1.0},
         {"params": m[2].parameters()}], lr=0.1, momentum=0.9),
    "adamw_amsgrad_all": lambda m: AdamW([{"params": m.parameters(), "clip_grad_max_norm": 0.3}], lr=0.02,
                                         amsgrad=True),
    "adamw_no_clipping": lambda m: AdamW(m.parameters(), lr=0.02),
}


@pytest.mark.parametrize("config", sorted(GRAPH_CONFIGS))
def test_a_graph_with_clipping_trains_as_eager_clip_grad_then_step(config, either_path):
    eager, lazy = mlp(), mlp()
    eager_opt, lazy_opt = GRAPH_CONFIGS[config](eager), GRAPH_CONFIGS[config](lazy)
    graph = TrainGraph(lazy, lazy_opt)
    clips = any("clip_grad_max_norm" in g for g in eager_opt.param_groups)
    for x, y in batches():
        expected = eager_step(eager, eager_opt, x, y, "groups" if clips else None)
        assert graph(x, y).item() == pytest.approx(expected, rel=1e-6)
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)
    assert len(graph._compiled) == 1
    if clips:
        assert any("System-Train-ClipGrad" in node.name for node in graph._compiled.latest.traced.nodes)


def test_graph_clipping_matches_clip_grad_norm_and_pytorch():
    torch = pytest.importorskip("torch")
    lazy = mlp()
    graph = TrainGraph(lazy, AdamW([{"params": lazy.parameters(), "clip_grad_max_norm": 0.25}], lr=0.01))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        for p, q in zip(reference.parameters(), mlp().parameters()):
            p.copy_(torch.tensor(q.numpy()))
    topt = torch.optim.AdamW(reference.parameters(), lr=0.01)
    for x, y in batches():
        graph(x, y)
        topt.zero_grad()
        ((reference(torch.tensor(x.numpy())) - torch.tensor(y.numpy())) ** 2).mean().backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.25)
        topt.step()
    for p, q in zip(lazy.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_changing_the_max_norm_recompiles_and_never_runs_stale_code(either_path):
    eager, lazy = mlp(), mlp()
    config = GRAPH_CONFIGS["adamw_two_groups"]
    eager_opt, lazy_opt = config(eager), config(lazy)
    graph = TrainGraph(lazy, lazy_opt)
    settings = [(0.1, 2.0), (0.1, 2.0), (0.02, 2.0), (0.02, 1.0), (0.02, 1.0), (0.5, math.inf)]
    for (max_norm, norm_type), (x, y) in zip(settings, batches(len(settings))):
        for opt in (eager_opt, lazy_opt):
            opt.param_groups[0]["clip_grad_max_norm"] = max_norm
            opt.param_groups[0]["clip_grad_norm_type"] = norm_type
        expected = eager_step(eager, eager_opt, x, y)
        assert graph(x, y).item() == pytest.approx(expected, rel=1e-6)
        for p, q in zip(lazy.parameters(), eager.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)
    assert len(graph._compiled) == 4   # one plan per setting: each holds its numbers as constants


def test_removing_a_groups_clipping_recompiles_without_it(either_path):
    eager, lazy = mlp(), mlp()
    config = GRAPH_CONFIGS["sgd_one_group_clipped"]
    eager_opt, lazy_opt = config(eager), config(lazy)
    graph = TrainGraph(lazy, lazy_opt)
    data = batches(3)
    x, y = data[0]
    eager_step(eager, eager_opt, x, y)
    graph(x, y)
    for opt in (eager_opt, lazy_opt):
        del opt.param_groups[0]["clip_grad_max_norm"], opt.param_groups[0]["clip_grad_norm_type"]
    for x, y in data[1:]:
        expected = eager_step(eager, eager_opt, x, y, clip=None)
        assert graph(x, y).item() == pytest.approx(expected, rel=1e-6)
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)
    assert len(graph._compiled) == 2


def test_a_bad_max_norm_set_by_hand_fails_the_step_and_changes_nothing(either_path, capsys):
    lazy = mlp()
    opt = GRAPH_CONFIGS["adamw_two_groups"](lazy)
    graph = TrainGraph(lazy, opt)
    (x, y), (x2, y2) = batches(2)
    graph(x, y)
    params = [p.numpy().copy() for p in lazy.parameters()]
    slots = {p: {k: v.numpy().copy() for k, v in s.items()} for p, s in opt.state.items()}
    opt.param_groups[1]["clip_grad_max_norm"] = -1.0
    with pytest.raises(ValueError, match="clip_grad_max_norm must be a positive finite number"):
        graph(x2, y2)
    for p, before in zip(lazy.parameters(), params):
        np.testing.assert_array_equal(p.numpy(), before)
    for p, s in opt.state.items():
        for k, v in s.items():
            np.testing.assert_array_equal(v.numpy(), slots[p][k])
    opt.param_groups[1]["clip_grad_max_norm"] = 0.05      # fixed: the step runs
    graph(x2, y2)
    assert not np.array_equal(next(iter(lazy.parameters())).numpy(), params[0])


def test_graph_clipping_with_a_scheduler_and_a_state_dict(either_path):
    eager, lazy = mlp(), mlp()
    config = GRAPH_CONFIGS["adamw_two_groups"]
    eager_opt, lazy_opt = config(eager), config(lazy)
    def sched(o):
        return flow.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)

    eager_sched = sched(eager_opt)
    graph = TrainGraph(lazy, lazy_opt, sched(lazy_opt))
    for x, y in batches(4):
        expected = eager_step(eager, eager_opt, x, y)
        eager_sched.step()
        assert graph(x, y).item() == pytest.approx(expected, rel=1e-6)
    assert lazy_opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"] == 0.0025
    state = graph.state_dict()
    assert "model.0.weight-m" in state and "model.0.weight-v" in state   # Adam's slot names, OneFlow's style
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)


def test_clipping_after_loss_scaling_skips_an_overflowing_step_whole(either_path):
    """With a grad scaler the gradients are unscaled, then clipped; a step with an inf gradient keeps every
    parameter (its NaN clipping coefficient never reaches them)."""
    model = mlp()
    opt = AdamW([{"params": model.parameters(), "clip_grad_max_norm": 0.5}], lr=0.01)

    class Scaled(TrainGraph):
        def __init__(self):
            super().__init__(model, opt)
            self.set_grad_scaler(flow.amp.GradScaler(init_scale=8.0, growth_interval=2))

    graph = Scaled()
    rng = np.random.default_rng(0)
    for bad in (False, True, False):
        x = rng.standard_normal((6, 4)).astype(np.float32)
        x[0, 0] = np.inf if bad else x[0, 0]
        before = [p.numpy().copy() for p in model.parameters()]
        with np.errstate(all="ignore"):
            graph(flow.tensor(x), flow.tensor(rng.standard_normal((6, 2)).astype(np.float32)))
        changed = any(not np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters()))
        assert changed is not bad
        assert all(np.isfinite(p.numpy()).all() for p in model.parameters())


def test_clipping_and_adamw_on_every_device(device):
    """On the strict stand-in GPU a stray NumPy call in the clipping or the update would fail."""
    params = [nn.Parameter(flow.tensor(np.zeros(g.shape, np.float32), device=device)) for g in GRADS]
    for p, g in zip(params, GRADS):
        p.grad = flow.tensor(g, device=device)
    norm = flow.nn.utils.clip_grad_norm_(params, 0.5, error_if_nonfinite=True)
    assert norm.device == device
    cpu = with_grads(flow, GRADS)
    flow.nn.utils.clip_grad_norm_(cpu, 0.5)
    for p, q in zip(params, cpu):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)
    eager, lazy = mlp().to(device), mlp().to(device)
    eager_opt = GRAPH_CONFIGS["adamw_two_groups"](eager)
    graph = TrainGraph(lazy, GRAPH_CONFIGS["adamw_two_groups"](lazy))
    for x, y in batches(3):
        x, y = x.to(device), y.to(device)
        expected = eager_step(eager, eager_opt, x, y)
        assert graph(x, y).item() == pytest.approx(expected, rel=1e-6)
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)


def test_a_loaded_max_norm_without_a_norm_type_gets_the_euclidean_one():
    params = with_grads(flow, GRADS)
    opt = SGD(params, lr=0.1)
    saved = opt.state_dict()
    saved["param_groups"][0]["clip_grad_max_norm"] = 0.5
    opt.load_state_dict(saved)
    assert opt.param_groups[0]["clip_grad_norm_type"] == 2.0


@pytest.mark.parametrize("fast", [False, True])
def test_clipping_added_to_a_group_after_compiling_recompiles(fast):
    """The guard compares a group's set of settings too: a clip_grad_max_norm added after the first call must
    reach the compiled step (the old plan, without clipping, would take a step 1000 times larger)."""
    with flow.set_fast_path(fast):
        flow.manual_seed(0)
        model = flow.nn.Linear(4, 1)
        opt = flow.optim.SGD(model.parameters(), lr=0.1)

        class Step(flow.nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model
                self.add_optimizer(opt)

            def build(self, x):
                loss = (self.model(x) * 100).sum()
                loss.backward()
                return loss

        step, x = Step(), flow.randn(8, 4)
        step(x)
        before = model.weight.numpy().copy()
        opt.param_groups[0]["clip_grad_max_norm"] = 1e-3
        step(x)
        moved = np.abs(model.weight.numpy() - before).max()
        assert 0 < moved <= 0.1 * 1e-3 + 1e-9, f"the step moved a weight by {moved}: clipping was not applied"
