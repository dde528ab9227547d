"""An Eager optimizer step is all-or-nothing, also under Ctrl-C (issue 10, finding 6, Eager part).

``Optimizer.step`` computes every update first, then commits them inside
``toynet.utils.interrupts.defer_interrupts``: an error while computing leaves everything as it was, and a
SIGINT that arrives during the commit is delivered right after it. So after a ``KeyboardInterrupt`` the
parameters and the optimizer state are exactly those after k or k+1 whole steps, never in between.

Tested three ways: the helper itself; deterministic faults (an error half-way through the updates, a
SIGINT sent from inside the commit loop); and a child process that trains while this one sends SIGINTs at
random moments, comparing each interrupted state bitwise with a reference run.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.optim import SGD, Adam, lr_scheduler
from toynet.utils.interrupts import defer_interrupts, interrupts_deferred

ROOT = Path(__file__).resolve().parents[2]
OPTIMIZERS = {"sgd": lambda p: SGD(p, lr=0.05, momentum=0.9, dampening=0.1),
              "adam": lambda p: Adam(p, lr=0.01, amsgrad=True)}


# -------------------------------------------------------------------------------------- the helper


def test_a_sigint_inside_the_block_is_delivered_when_it_ends(sigint):
    done = []
    with pytest.raises(KeyboardInterrupt):
        with defer_interrupts():
            assert interrupts_deferred()
            signal.raise_signal(signal.SIGINT)
            done.append("after the signal")
            with defer_interrupts():  # nested: the outer block delivers
                done.append("inner")
            done.append("end of the block")
    assert done == ["after the signal", "inner", "end of the block"]
    assert not interrupts_deferred()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with defer_interrupts():  # nothing pending: nothing raised
        pass


def test_the_previous_handler_receives_it_and_an_error_in_the_block_is_its_context(sigint):
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    with defer_interrupts():
        signal.raise_signal(signal.SIGINT)
        assert received == []
    assert received == [signal.SIGINT]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt) as info:
        with defer_interrupts():
            signal.raise_signal(signal.SIGINT)
            raise ValueError("the block failed")
    assert isinstance(info.value.__context__, ValueError)


def test_ignored_sigint_and_other_threads_run_the_block_as_it_is(sigint):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with defer_interrupts():
        signal.raise_signal(signal.SIGINT)
        assert not interrupts_deferred()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seen = []

    def worker():
        with defer_interrupts():
            seen.append(interrupts_deferred())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [False] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --------------------------------------------------------------------------- deterministic faults


def make_params(cls=nn.Parameter, count=6):
    rng = np.random.default_rng(0)
    return [cls(flow.tensor(rng.standard_normal((3, 2)).astype(np.float32))) for _ in range(count)]


def backward(params, scale=1.0):
    sum(((p * scale) ** 2).sum() for p in params).backward()


def state_of(params, opt):
    return ([p.numpy().copy() for p in params],
            [{k: v.numpy().copy() for k, v in opt.state.get(p, {}).items()} for p in params])


def assert_same(a, b):
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(x, y)
    assert [sorted(s) for s in a[1]] == [sorted(s) for s in b[1]]
    for s, t in zip(a[1], b[1]):
        for k in s:
            np.testing.assert_array_equal(s[k], t[k])


def reference(kind, steps):
    params = make_params()
    opt = OPTIMIZERS[kind](params)
    for i in range(steps):
        opt.zero_grad()
        backward(params, 1.0 + i)
        opt.step()
    return state_of(params, opt)


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_an_error_half_way_through_the_updates_changes_nothing(kind, monkeypatch):
    params = make_params()
    opt = OPTIMIZERS[kind](params)
    backward(params)
    opt.step()
    before = state_of(params, opt)
    objects = [(p.array, dict(opt.state[p])) for p in params]
    opt.zero_grad()
    backward(params, 2.0)
    calls = []
    real_update = type(opt).update

    def failing_update(self, param, grad, state, group, lr):
        calls.append(param)
        if len(calls) == 4:
            raise MemoryError("out of memory while computing the 4th update")
        return real_update(self, param, grad, state, group, lr)

    monkeypatch.setattr(type(opt), "update", failing_update)
    with pytest.raises(MemoryError):
        opt.step()
    assert_same(state_of(params, opt), before)
    for p, (array, slots) in zip(params, objects):
        assert p.array is array and all(opt.state[p][k] is v for k, v in slots.items())
    monkeypatch.undo()
    opt.step()  # the same gradients, now without the fault: exactly the second reference step
    assert_same(state_of(params, opt), reference(kind, 2))


class Tripwire(nn.Parameter):
    """A parameter that sends this process a SIGINT when the optimizer reads its gradient, so the interrupt
    arrives while the step runs, at the parameter's turn."""

    __slots__ = ()
    armed: list = []

    @property
    def grad(self):
        if any(armed is self for armed in Tripwire.armed):
            Tripwire.armed.clear()
            os.kill(os.getpid(), signal.SIGINT)
        return nn.Parameter.grad.__get__(self)

    @grad.setter
    def grad(self, value):
        nn.Parameter.grad.__set__(self, value)


@pytest.mark.parametrize("kind", OPTIMIZERS)
@pytest.mark.parametrize("which", [0, 1, 5])
def test_a_sigint_while_the_step_runs_leaves_it_whole_or_not_at_all(kind, which, sigint):
    params = make_params(Tripwire)
    opt = OPTIMIZERS[kind](params)
    backward(params)
    opt.step()
    opt.zero_grad()
    backward(params, 2.0)
    Tripwire.armed[:] = [params[which]]
    with pytest.raises(KeyboardInterrupt):
        opt.step()
    assert Tripwire.armed == []
    # The updates are all computed before any is written, and the writes are one call of C code: the
    # interrupt, raised while computing, leaves the first step's values, never some of the second's.
    assert_same(state_of(params, opt), reference(kind, 1))


def test_a_scheduler_step_is_all_or_nothing():
    params = make_params(count=2)
    opt = SGD([{"params": params[:1]}, {"params": params[1:], "lr": 0.5}], lr=0.1)
    sch = lr_scheduler.LambdaLR(opt, [lambda e: 0.5 ** e, lambda e: 1 / (3 - e)])
    sch.step()
    sch.step()
    with pytest.raises(ZeroDivisionError):
        sch.step()  # the second group's formula fails at epoch 3
    assert sch.last_epoch == 2 and [g["lr"] for g in opt.param_groups] == [0.025, 0.5]


# ----------------------------------------------------------------------- random Ctrl-C's, in a child

CHILD = textwrap.dedent('''
    import signal, sys, time
    import numpy as np
    import toynet as flow
    from toynet import nn
    from toynet.optim import SGD, Adam

    signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background parent may ignore SIGINT)
    KIND, STEPS = sys.argv[1], 6
    X = [flow.tensor(np.random.default_rng(i).standard_normal((1, 2)).astype(np.float32)) for i in range(STEPS)]


    class Slow(nn.Parameter):
        """A parameter whose gradient takes tens of microseconds of Python to read: the magnifying glass that
        makes the step's work between the first update and the commit long, so that many random interrupts
        land in it (the commit itself is one call of C code, see toynet.optim.optimizer.commit)."""

        __slots__ = ()

        @property
        def grad(self):
            for _ in range(2000):
                pass
            return nn.Parameter.grad.__get__(self)

        @grad.setter
        def grad(self, value):
            nn.Parameter.grad.__set__(self, value)


    def build():
        rng = np.random.default_rng(0)
        params = [Slow(flow.tensor(rng.standard_normal((2,)).astype(np.float32))) for _ in range(40)]
        opt = (SGD(params, lr=0.05, momentum=0.9, dampening=0.1) if KIND == "sgd"
               else Adam(params, lr=0.01, amsgrad=True))
        return params, opt

    def step(params, opt, i):
        opt.zero_grad()
        flow.cat([p * X[i] for p in params]).sum().backward()
        opt.step()

    def snapshot(params, opt):
        return b"".join(p.numpy().tobytes() + b"".join(v.numpy().tobytes() for _, v in
                        sorted(opt.state.get(p, {}).items())) for p in params)

    params, opt = build()
    states = [snapshot(params, opt)]
    start = time.perf_counter()
    for i in range(STEPS):
        step(params, opt, i)
        states.append(snapshot(params, opt))
    print("ready", (time.perf_counter() - start) / STEPS, flush=True)
    for line in sys.stdin:
        params, opt = build()
        done = 0
        try:
            print("go", flush=True)
            for i in range(STEPS):
                step(params, opt, i)
                done += 1
            while True:
                time.sleep(1)  # all steps done: wait for the interrupt
        except KeyboardInterrupt:
            now = snapshot(params, opt)
            verdict = ("ok" if now in (states[done], states[min(done + 1, STEPS)]) else
                       "HALF-APPLIED" if now not in states else "WRONG-STEP")
            print(verdict, done, flush=True)
''')


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_random_sigints_never_leave_a_half_applied_step(kind, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, str(script), kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(240, child.kill)
    watchdog.start()
    rng = random.Random(kind)
    verdicts = []
    try:
        ready = child.stdout.readline().split()
        assert ready and ready[0] == "ready", child.stderr.read()
        step_time = float(ready[1])
        for _ in range(150):
            child.stdin.write("trial\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "go", child.stderr.read()
            # Anywhere in the 6 steps (rarely after them), many times in a commit loop of 40 parameters.
            threading.Event().wait(rng.uniform(0, 6.5 * step_time))
            child.send_signal(signal.SIGINT)
            verdicts.append(child.stdout.readline().split())
    finally:
        watchdog.cancel()
        child.kill()
        child.wait()
    bad = [v for v in verdicts if not v or v[0] != "ok"]
    assert not bad, f"{len(bad)} of {len(verdicts)} interrupted steps were not whole: {bad[:5]}"
    assert len({int(v[1]) for v in verdicts}) >= 4, "the interrupts should land in many different steps"
