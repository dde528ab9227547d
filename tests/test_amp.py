"""Mixed precision: ``graph.config.enable_amp(True)``, ``flow.amp.GradScaler`` and ``set_grad_scaler``.

What must hold: matrix products run in float16 while parameters, gradients and the optimizer stay
float32; the loss scale follows PyTorch's GradScaler step for step (growth after ``growth_interval``
good steps, backoff and a skipped step on inf/NaN); a skipped step changes no state; scaling rescues
gradients that float16 would flush to zero; Eager mode's scaler applies the same rule; changing any
of it compiles again; wrong arguments say what is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.static.passes.amp import FLOAT16_OPS

PATTERN = [0, 0, 1, 0, 0, 0, 1, 1, 0, 0]   # 1: this step's gradients overflow


class AmpGraph(nn.Graph):
    def __init__(self, model, optimizer, amp=True, scaler=None):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)
        self.config.enable_amp(amp)
        if scaler is not None:
            self.set_grad_scaler(scaler)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def make(seed=0, momentum=0.9):
    flow.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, flow.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)


def batches(pattern, seed=1):
    rng = np.random.default_rng(seed)
    for bad in pattern:
        x = rng.standard_normal((8, 16)).astype(np.float32)
        if bad:
            x[0, 0] = 1e30   # float16 overflows: the first product is inf, so are the gradients
        yield flow.tensor(x), flow.tensor(rng.integers(0, 4, 8))


def torch_scales(pattern, **settings):
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **settings)
    scales = []
    for bad in pattern:
        optimizer.zero_grad()
        scaler.scale((p * 2).sum()).backward()
        if bad:
            p.grad[0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


SETTINGS = dict(init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)


def test_the_graph_scale_follows_torch_and_skips_exactly_the_overflowing_steps():
    model, optimizer = make()
    scaler = flow.amp.GradScaler(**SETTINGS)
    graph = AmpGraph(model, optimizer, scaler=scaler)
    scales, changed = [], []
    with np.errstate(over="ignore", invalid="ignore"):   # the overflow is the point of the bad steps
        for x, y in batches(PATTERN):
            before = [p.numpy().copy() for p in model.parameters()]
            momentum = [s["momentum_buffer"].numpy().copy() for s in optimizer.state.values()] or None
            graph(x, y)
            scales.append(scaler.get_scale())
            after = [p.numpy() for p in model.parameters()]
            changed.append(any(not np.array_equal(a, b) for a, b in zip(before, after)))
            if momentum is not None and not changed[-1]:
                for old, s in zip(momentum, optimizer.state.values()):
                    np.testing.assert_array_equal(old, s["momentum_buffer"].numpy())
            assert all(np.isfinite(a).all() for a in after)
    assert scales == torch_scales(PATTERN, **SETTINGS)
    assert changed == [not bad for bad in PATTERN]
    assert len(graph._compiled) == 1   # one plan: the scale is a state, not a constant


def test_eager_grad_scaler_follows_torch_too():
    model, optimizer = make(momentum=0.0)
    scaler = flow.amp.GradScaler(**SETTINGS)
    loss_fn = nn.CrossEntropyLoss()
    scales, applied = [], []
    with np.errstate(over="ignore", invalid="ignore"):
        for x, y in batches(PATTERN):
            x = x * 1e10 if float(x.abs().max().numpy()) > 1e20 else x   # float32 overflow in Eager mode
            optimizer.zero_grad()
            scaler.scale(loss_fn(model(x), y)).backward()
            applied.append(scaler.step(optimizer))
            scaler.update()
            scales.append(scaler.get_scale())
    assert scales == torch_scales(PATTERN, **SETTINGS)
    assert applied == [not bad for bad in PATTERN]


def test_float16_compute_with_float32_master_weights_stays_close_to_float32():
    losses = {}
    for amp in (False, True):
        model, optimizer = make()
        graph = AmpGraph(model, optimizer, amp=amp, scaler=flow.amp.GradScaler(init_scale=1024.0))
        losses[amp] = [float(graph(x, y).numpy()) for x, y in batches([0] * 5)]
        if amp:
            ir = graph.ir
            half = {n.op.name for n in ir.op_nodes if n.dtype is flow.float16 and n.op.name != "cast"}
            # The fast path's fused linear and its weight gradient, or the lesson's plain products.
            assert half == ({"linear", "linear_grad_weight", "matmul"} if flow.is_fast_path() else {"matmul"})
            assert half <= FLOAT16_OPS
            for n in ir.op_nodes:
                if n.op.name in ("softmax", "cross_entropy") or n.phase == "optimizer":
                    assert n.dtype is not flow.float16, n.name
            assert all(p.dtype is flow.float32 for p in model.parameters())
            report = next(r for r in graph.passes if r.name == "AutoMixedPrecision")
            assert "ops in float16" in report.summary() and "kept float32" in report.summary()
    np.testing.assert_allclose(losses[True], losses[False], rtol=5e-3)
    assert losses[True] != losses[False]   # float16 really ran


def test_loss_scaling_keeps_tiny_gradients_that_float16_flushes_to_zero():
    class Tiny(nn.Graph):
        def __init__(self, model, optimizer, scaler):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)
            self.config.enable_amp(True)
            if scaler is not None:
                self.set_grad_scaler(scaler)

        def build(self, x):
            loss = self.model(x).sum() * 1e-8   # d loss / d output = 1e-8, below float16's smallest number
            loss.backward()
            return loss

    moved = {}
    for scaled in (False, True):
        flow.manual_seed(0)
        model = nn.Linear(4, 3)
        before = model.weight.numpy().copy()
        graph = Tiny(model, flow.optim.SGD(model.parameters(), lr=1e6),
                     flow.amp.GradScaler(init_scale=2.0 ** 16) if scaled else None)
        graph(flow.ones(2, 4))
        moved[scaled] = float(np.abs(model.weight.numpy() - before).max())
    assert moved[False] == 0.0               # every gradient was flushed to zero in float16
    assert moved[True] == pytest.approx(2e-2, rel=1e-2)   # lr 1e6 * 2 rows * 1e-8, as float32 would give


def test_a_static_scaler_scales_and_never_changes():
    model, optimizer = make()
    scaler = flow.amp.StaticGradScaler(128.0)
    graph = AmpGraph(model, optimizer, scaler=scaler)
    scaled = [float(graph(x, y).numpy()) for x, y in batches([0] * 3)]
    assert scaler.get_scale() == 128.0
    model, optimizer = make()
    graph = AmpGraph(model, optimizer)
    plain = [float(graph(x, y).numpy()) for x, y in batches([0] * 3)]
    np.testing.assert_allclose(scaled, plain, rtol=2e-3)


def test_changing_amp_or_the_scaler_compiles_again():
    model, optimizer = make()
    graph = AmpGraph(model, optimizer, amp=False)
    x, y = next(batches([0]))
    graph(x, y)
    first = graph._last
    graph.config.enable_amp(True)
    graph(x, y)
    assert graph._last is not first and any(r.name == "AutoMixedPrecision" for r in graph.passes)
    with_amp = graph._last
    graph.set_grad_scaler(flow.amp.GradScaler(growth_interval=3))
    graph(x, y)
    assert graph._last is not with_amp and "System-Train-LossScale" in graph._last.states


def test_wrong_arguments_say_what_is_wrong():
    with pytest.raises(ValueError, match="backoff_factor must be < 1"):
        flow.amp.GradScaler(backoff_factor=2.0)
    with pytest.raises(ValueError, match="growth_interval must be a whole number"):
        flow.amp.GradScaler(growth_interval=0.5)
    with pytest.raises(ValueError, match="init_scale must be a positive number"):
        flow.amp.GradScaler(init_scale=-1)
    model, optimizer = make()
    graph = AmpGraph(model, optimizer)
    with pytest.raises(TypeError, match="GradScaler or StaticGradScaler"):
        graph.set_grad_scaler(object())
    with pytest.raises(TypeError, match="True or False"):
        graph.config.enable_amp("yes")
    scaler = flow.amp.GradScaler()
    with pytest.raises(RuntimeError, match="needs a step first"):
        scaler.update()


def test_a_resumed_graph_continues_with_the_same_loss_scale(tmp_path):
    def run(state=None, steps=PATTERN):
        model, optimizer = make()
        graph = AmpGraph(model, optimizer, scaler=flow.amp.GradScaler(**SETTINGS))
        if state is not None:
            graph.load_state_dict(state)
        with np.errstate(over="ignore", invalid="ignore"):
            losses = [float(graph(x, y).numpy()) for x, y in steps]
        return graph, losses

    data = list(batches(PATTERN))
    whole, losses = run(steps=data)
    half, _ = run(steps=data[:5])
    flow.save(half.state_dict(), tmp_path / "half")
    state = flow.load(tmp_path / "half")
    assert state["System-Train-GradScaler"] == {"scale": 16.0, "growth_tracker": 0}   # grew again at step 4
    resumed, rest = run(state, data[5:])
    np.testing.assert_array_equal(rest, losses[5:])   # (NaN where a step overflowed, in both)
    assert resumed._grad_scaler.get_scale() == whole._grad_scaler.get_scale()
    state["System-Train-GradScaler"] = {"scale": -1.0, "growth_tracker": 0}
    model, optimizer = make()
    with pytest.raises(RuntimeError, match="scale should be a positive finite number"):
        AmpGraph(model, optimizer, scaler=flow.amp.GradScaler()).load_state_dict(state)
    with pytest.raises(RuntimeError, match="the graph has none"):
        AmpGraph(*make()).load_state_dict(state)
