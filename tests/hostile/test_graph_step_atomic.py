"""A Graph training step is all or nothing (issue 10, finding 6): an error or a Ctrl-C during the call
leaves every parameter, optimizer slot, the step counter and the scheduler as they were, or (a Ctrl-C
that lands in the final commit) applies the step whole, never half of it."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toynet as flow
from toynet import nn


class Train(nn.Graph):
    def __init__(self, model, optimizer, scheduler=None):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer, lr_sch=scheduler)

    def build(self, x, s):
        loss = (self.model(x) * s).sum()
        loss.backward()
        return loss


def everything(model, optimizer, graph, scheduler=None):
    """Every value a step changes, copied (bitwise comparisons)."""
    values = {f"param {name}": p.numpy().copy() for name, p in model.named_parameters()}
    for name, p in model.named_parameters():
        for slot, t in (optimizer.state.get(p) or {}).items():
            values[f"{name} {slot}"] = t.numpy().copy()
    if graph._train_step is not None:
        values["TrainStep"] = graph._train_step.numpy().copy()
    values["lr"] = np.array(optimizer.param_groups[0]["lr"])
    if scheduler is not None:
        values["scheduler"] = np.array(scheduler.last_epoch)
    return values


def assert_bitwise_equal(before, after):
    """``after`` holds what ``before`` did; anything new (state a first compilation made) is fresh: zeros."""
    assert set(before) <= set(after)
    for key in after:
        np.testing.assert_array_equal(after[key], before.get(key, np.zeros_like(after[key])), err_msg=key)


#: optimizer -> (how to make it, the learning rate and the scale of the loss of the failing step). With
#: inputs of 1e-30 the forward and backward stay finite, and so does the weight's update, while the bias's
#: overflows float32: in the optimizer part of the step, after the new values of the step counter and
#: the weight (and its slots) were computed.
OPTIMIZERS = {
    "SGD": (lambda params: flow.optim.SGD(params, lr=1e-3, momentum=0.9), 1e30, 1e9),
    "Adam": (lambda params: flow.optim.Adam(params, lr=1e-3), 1e-3, 1e19),
    "Adam, amsgrad, weight decay": (lambda params: flow.optim.Adam(params, lr=1e-3, weight_decay=0.1, amsgrad=True),
                                    1e-3, 1e19),
}


@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(sorted(OPTIMIZERS)), good_steps=st.integers(0, 3), scheduled=st.booleans())
def test_an_overflow_midway_through_the_optimizer_changes_nothing(kind, good_steps, scheduled):
    make, fail_lr, fail_scale = OPTIMIZERS[kind]
    flow.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = make(model.parameters())
    scheduler = flow.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5) if scheduled else None
    graph = Train(model, optimizer, scheduler)
    x, one = flow.full((4, 3), 1e-30), flow.tensor(1.0)
    with np.errstate(over="raise"):
        for _ in range(good_steps):
            graph(x, one)
    lr = optimizer.param_groups[0]["lr"]
    optimizer.param_groups[0]["lr"] = fail_lr
    before = everything(model, optimizer, graph, scheduler)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        graph(x, flow.tensor(fail_scale))
    assert_bitwise_equal(before, everything(model, optimizer, graph, scheduler))
    # Eager mode refuses the same step the same way (its step is all or nothing too).
    eager = nn.Linear(3, 1)
    eager.load_state_dict(model.state_dict())
    eager_opt = make(eager.parameters())
    eager_opt.param_groups[0]["lr"] = fail_lr
    loss = (eager(x) * flow.tensor(fail_scale)).sum()
    loss.backward()
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        eager_opt.step()
    # The graph goes on from where it was.
    optimizer.param_groups[0]["lr"] = lr
    with np.errstate(over="raise"):
        graph(x, one)
    assert int(graph._train_step.numpy()[0]) == good_steps + 1


def test_a_failed_step_in_a_bigger_model_leaves_batch_norm_statistics_alone():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = flow.optim.Adam(model.parameters(), lr=1e-3)
    graph = Train(model, optimizer)
    x = flow.randn(16, 3)
    graph(x, flow.tensor(1.0))
    before = everything(model, optimizer, graph)
    before.update({f"buffer {n}": b.numpy().copy() for n, b in model.named_buffers()})
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        graph(x, flow.tensor(3e38))
    after = everything(model, optimizer, graph)
    after.update({f"buffer {n}": b.numpy().copy() for n, b in model.named_buffers()})
    assert_bitwise_equal(before, after)


# ----------------------------------------------------------------------------------- random Ctrl-C's

CHILD = textwrap.dedent('''
    import json, sys
    import numpy as np
    import toynet as flow
    from toynet import nn

    mode, kind, scheduled, out = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    extra = json.loads(sys.argv[5])

    class Train(nn.Graph):
        def __init__(self, model, optimizer, scheduler):
            super().__init__()
            self.model = model
            self.loss_fn = nn.MSELoss()
            self.add_optimizer(optimizer, lr_sch=scheduler)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(),
                          nn.Linear(32, 1))
    if kind == "SGD":
        optimizer = flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        optimizer = flow.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = flow.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.99) if scheduled else None
    graph = Train(model, optimizer, scheduler)
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((64, 8)).astype(np.float32))
    y = flow.tensor(rng.standard_normal((64, 1)).astype(np.float32))

    def snapshot():
        values = [p.numpy().ravel() for p in model.parameters()]
        values += [b.numpy().ravel().astype(np.float32) for b in model.buffers()]
        values += [t.numpy().ravel() for p in model.parameters() for _, t in sorted(optimizer.state[p].items())]
        lr = optimizer.param_groups[0]["lr"]
        epoch = scheduler.last_epoch if scheduler is not None else 0
        return int(graph._train_step.numpy()[0]), np.concatenate(values), lr, epoch

    results = []
    if mode == "reference":
        wanted, done = set(extra), 0
        graph(x, y)
        done = 1
        while done <= max(wanted):
            if done in wanted:
                results.append(snapshot())
            graph(x, y)
            done += 1
    else:
        graph(x, y)
        print("ready", flush=True)
        handled = 0
        while handled < extra:
            try:
                print(f"ack {handled}", flush=True)
                while True:  # (this loop's back edge, where Python runs signal handlers, is inside the try)
                    graph(x, y)
            except KeyboardInterrupt:
                results.append(snapshot())
                handled += 1
        print(f"ack {handled}", flush=True)
    np.savez(out, steps=np.array([r[0] for r in results]), values=np.stack([r[1] for r in results]),
             lrs=np.array([r[2] for r in results]), epochs=np.array([r[3] for r in results]))
''')


def run_child(tmp_path, *args, stdout=None):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(flow.__file__).resolve().parents[1]),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], stdout=stdout, env=env, text=True)


@pytest.mark.parametrize(("kind", "scheduled"), [("SGD", False), ("Adam", True)])
def test_random_ctrl_c_during_training_never_leaves_a_half_applied_step(tmp_path, kind, scheduled):
    signals = 60
    child = run_child(tmp_path, "interrupted", kind, int(scheduled), tmp_path / "hit.npz", signals,
                      stdout=subprocess.PIPE)
    rng = random.Random(0)
    try:
        assert child.stdout.readline().strip() == "ready"
        sent = 0
        for line in child.stdout:
            if line.strip() != f"ack {sent}":
                continue                                   # (an ack printed twice: one signal each)
            if sent == signals:
                break
            # Mostly inside graph(x, y): a step takes ~0.1 ms, so any moment of it gets hit.
            end = time.perf_counter() + rng.uniform(0, 0.002)
            while time.perf_counter() < end:
                pass
            os.kill(child.pid, signal.SIGINT)
            sent += 1
        assert child.wait(timeout=60) == 0
    finally:
        child.kill()
    hit = np.load(tmp_path / "hit.npz")
    assert len(hit["steps"]) == signals
    reference = run_child(tmp_path, "reference", kind, int(scheduled), tmp_path / "ref.npz",
                          sorted(set(int(s) for s in hit["steps"])))
    assert reference.wait(timeout=120) == 0
    ref = np.load(tmp_path / "ref.npz")
    by_step = {int(s): (v, lr, e) for s, v, lr, e in zip(ref["steps"], ref["values"], ref["lrs"], ref["epochs"])}
    half_applied = []
    for step, values, lr, epoch in zip(hit["steps"], hit["values"], hit["lrs"], hit["epochs"]):
        want_values, want_lr, want_epoch = by_step[int(step)]
        if not (np.array_equal(values, want_values) and lr == want_lr and epoch == want_epoch):
            half_applied.append(int(step))
    assert not half_applied, f"{len(half_applied)} of {signals} Ctrl-C's left a half-applied step: {half_applied}"


def test_deferred_interrupt_holds_ctrl_c_until_the_block_ends():
    from toynet.utils.interrupts import defer_interrupts
    order = []
    with pytest.raises(KeyboardInterrupt):
        with defer_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):   # bytecodes run: the handler would have fired here
                pass
            order.append("block ended")
    assert order == ["block ended"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
