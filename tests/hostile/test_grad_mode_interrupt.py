"""A Ctrl-C never leaves grad mode switched off (found while testing atomic optimizer steps).

toynet switches grad mode off inside every optimizer step and every BatchNorm forward in training. With
``with no_grad():`` an interrupt that lands on the first instruction of ``__exit__`` skips the restore, and
every later ``backward()`` fails with "does not require grad". toynet's own code switches through
``mode.call_with_grad_mode``, whose restore no interrupt can skip. Here SIGINTs are sent at many moments
into loops of those calls, and after each one grad mode must be on again.
"""

from __future__ import annotations

import os
import signal
import time
import threading

import numpy as np

import toynet as flow
from toynet import mode, nn
from toynet.optim import SGD


def interrupted_many_times(loop_body, trials=150):
    """Run ``loop_body`` in a loop until a SIGINT from a timer stops it, ``trials`` times with delays
    spread over a few loop iterations; return how many interrupts left grad mode off."""
    left_off = 0
    for trial in range(trials):
        timer = threading.Timer(0.0002 + (trial % 13) * 0.00005, os.kill, (os.getpid(), signal.SIGINT))
        deadline = time.monotonic() + 10   # a lost SIGINT fails the test instead of hanging the run
        try:
            timer.start()  # inside the try: the signal may arrive before start() returns
            while time.monotonic() < deadline:
                loop_body()
            raise AssertionError(f"trial {trial}: no KeyboardInterrupt reached the loop within 10 s of the SIGINT")
        except KeyboardInterrupt:
            pass
        timer.join()
        if not mode.grad_enabled:
            left_off += 1
            mode.grad_enabled = True
    return left_off


def test_optimizer_steps(sigint):
    p = nn.Parameter(flow.tensor(np.ones(3, dtype=np.float32)))
    p.grad = flow.ones(3)
    opt = SGD([p], lr=1e-6)
    assert interrupted_many_times(opt.step) == 0


def test_batch_norm_in_training(sigint):
    bn = nn.BatchNorm1d(2)
    x = flow.randn(4, 2)
    assert interrupted_many_times(lambda: bn(x)) == 0


def test_the_no_grad_decorator(sigint):
    @flow.no_grad()
    def evaluate():
        return flow.ones(2) * 2

    assert interrupted_many_times(evaluate) == 0
    assert evaluate().requires_grad is False and mode.grad_enabled
