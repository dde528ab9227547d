"""The small conv net's training step written by hand in NumPy, against toynet (Eager, Graph) and PyTorch.

The network is ``bench_mobilenet.small_convnet``: Conv2d(3, 16, 3, padding=1) - BatchNorm2d - ReLU -
Conv2d(16, 32, 3, padding=1) - MaxPool2d(2) - Flatten - Linear(8192, 10), cross-entropy, plain SGD,
batch 16 of 3x32x32. The hand-written step (:class:`HandConvNet`) is what a NumPy programmer would
write for exactly this net, layer by layer in (N, C, H, W) as a module-based framework must hand
tensors over:

* convolution by *im2col*: the nine taps of the padded input copied into one matrix ``cols``
  (C*9, N*H*W), then one matrix product; ``cols`` is kept from the forward for the weight gradient
  ``dW = dy @ cols.T``, and the input gradient is ``W.T @ dy`` added back tap by tap (*col2im*);
* batch norm with the batch statistics and its closed-form gradient, ReLU by a mask;
* 2x2 max pooling as the maximum of the four strided views ``z[:, :, i::2, j::2]``; the backward
  sends the gradient through the ``== max`` masks kept from the forward;
* cross-entropy from a max-shifted log-sum-exp; SGD ``p -= lr * g`` in place.

It is the yardstick the issue set for toynet's kernels (a framework whose ops are pure and whose
backward is built from ops should come close to it), and PyTorch's C++ kernels show what is left.
toynet now beats it: its kernels build im2col a few images at a time, in cache, while this
whole-batch ``cols`` (10 MB for the second convolution) lives in main memory and its fresh 10 MB
temporaries cost page faults on every step (``--tune-allocator`` shows how much: glibc then keeps
freed blocks for reuse).

**Timing.** One BLAS thread (``OPENBLAS_NUM_THREADS=1`` is set before NumPy loads) and
``torch.set_num_threads(1)``; every contender runs in this one process, interleaved round by round,
timed by the CPU time of this thread (``time.thread_time``: robust on a machine shared with other
programs, exact because all the work runs in this thread) and by the wall clock. Reported: medians
per step, and the median over rounds of each contender's time divided by PyTorch's in the same round.

**Memory.** The peak of NumPy arrays alive during one step (``tracemalloc``, which sees NumPy's
allocations) above what was alive before it, for the NumPy-based contenders.

**Breakdown** (``--breakdown``): CPU time per op for toynet Eager (each op's ``forward`` timed, the
rest of the step being Python: tensors, autograd, optimizer), per stage for the hand-written step,
and per ATen op for PyTorch (its profiler's self CPU time).

The hand-written step is checked first against toynet Eager (same weights, same batch: same loss and
gradients), so the yardstick computes the same thing.

Run: ``python benchmarks/bench_conv_numpy.py [--rounds 15] [--steps 5] [--breakdown] [--tune-allocator]``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # NumPy's BLAS reads its thread count when it loads
    from blas_threads import use_threads
    use_threads("1")

import argparse
import contextlib
import statistics
import time
import tracemalloc
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mobilenet  # the network, its data, and the toynet and PyTorch steps
from allocator import tune_host_allocator

import toynet as flow
from toynet.ops import OPS

LR = 1e-3  # bench_mobilenet's steps use SGD(lr=1e-3) without momentum
EPS = 1e-5


# ------------------------------------------------------------------------------------ the hand step


def im2col(x: np.ndarray) -> np.ndarray:
    """cols[(c, i, j), (n, h, w)] = xpad[n, c, h + i, w + j] for a 3x3 kernel, stride 1, padding 1."""
    n, c, h, w = x.shape
    padded = np.zeros((c, n, h + 2, w + 2), x.dtype)
    padded[:, :, 1:h + 1, 1:w + 1] = x.transpose(1, 0, 2, 3)
    cols = np.empty((c, 3, 3, n, h, w), x.dtype)
    for i in range(3):
        for j in range(3):
            cols[:, i, j] = padded[:, :, i:i + h, j:j + w]
    return cols.reshape(c * 9, n * h * w)


def col2im(cols: np.ndarray, shape: tuple) -> np.ndarray:
    """The adjoint of :func:`im2col`: add each tap's rows back where they were read from."""
    n, c, h, w = shape
    cols = cols.reshape(c, 3, 3, n, h, w)
    padded = np.zeros((c, n, h + 2, w + 2), cols.dtype)
    for i in range(3):
        for j in range(3):
            padded[:, :, i:i + h, j:j + w] += cols[:, i, j]
    return np.ascontiguousarray(padded[:, :, 1:h + 1, 1:w + 1].transpose(1, 0, 2, 3))


def to_nchw(y: np.ndarray, n: int, h: int, w: int) -> np.ndarray:
    """(O, N*H*W) channel-major product -> (N, O, H, W)."""
    return np.ascontiguousarray(y.reshape(-1, n, h, w).transpose(1, 0, 2, 3))


def channel_major(g: np.ndarray) -> np.ndarray:
    """(N, O, H, W) -> (O, N*H*W)."""
    return np.ascontiguousarray(g.transpose(1, 0, 2, 3)).reshape(g.shape[1], -1)


class HandConvNet:
    """The small conv net's parameters as NumPy arrays and its training step written out by hand."""

    def __init__(self, model: flow.nn.Module):
        conv1, bn, _, conv2, _, _, fc = model
        self.params = {name: p.numpy().copy() for name, p in [
            ("w1", conv1.weight), ("b1", conv1.bias), ("gamma", bn.weight), ("beta", bn.bias),
            ("w2", conv2.weight), ("b2", conv2.bias), ("wf", fc.weight), ("bf", fc.bias)]}
        self.running_mean = np.zeros(bn.num_features, np.float32)
        self.running_var = np.ones(bn.num_features, np.float32)
        self.timer = None  # set by the breakdown: a function (stage name) -> context manager

    def stage(self, name: str):
        return self.timer(name) if self.timer is not None else contextlib.nullcontext()

    def step(self, x: np.ndarray, target: np.ndarray) -> tuple[float, dict]:
        """One SGD step; returns the loss and the gradients (before the update)."""
        p, stage = self.params, self.stage
        n, _, h, w = x.shape
        # ---- forward
        with stage("conv1 forward"):
            cols1 = im2col(x)
            z1 = to_nchw(p["w1"].reshape(16, -1) @ cols1 + p["b1"][:, None], n, h, w)
        with stage("batch norm forward"):
            m = z1.size // z1.shape[1]
            mean = z1.mean(axis=(0, 2, 3))
            centered = z1 - mean[:, None, None]
            var = np.einsum("nchw,nchw->c", centered, centered) / m
            invstd = 1.0 / np.sqrt(var + EPS)
            xhat = centered * invstd[:, None, None]
            bn = xhat * p["gamma"][:, None, None] + p["beta"][:, None, None]
            self.running_mean = 0.9 * self.running_mean + 0.1 * mean
            self.running_var = 0.9 * self.running_var + 0.1 * var * (m / (m - 1))
        with stage("relu forward"):
            a1 = np.maximum(bn, 0)
        with stage("conv2 forward"):
            cols2 = im2col(a1)
            z2 = to_nchw(p["w2"].reshape(32, -1) @ cols2 + p["b2"][:, None], n, h, w)
        with stage("max pool forward"):
            # The four pixels of every 2x2 window are four strided views of z2.
            corners = [z2[:, :, i::2, j::2] for i in range(2) for j in range(2)]
            pooled = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
            # Where each maximum is (ties have probability zero on this data; PyTorch takes the first).
            masks = [corner == pooled for corner in corners]
        with stage("linear + loss forward"):
            flat = pooled.reshape(n, -1)
            logits = flat @ p["wf"].T + p["bf"]
            shifted = logits - logits.max(axis=1, keepdims=True)
            exp = np.exp(shifted)
            total = exp.sum(axis=1, keepdims=True)
            loss = float(np.mean(np.log(total[:, 0]) - shifted[np.arange(n), target]))
        # ---- backward
        grads = {}
        with stage("linear + loss backward"):
            dlogits = exp / total
            dlogits[np.arange(n), target] -= 1
            dlogits /= n
            grads["wf"] = dlogits.T @ flat
            grads["bf"] = dlogits.sum(axis=0)
            dpooled = (dlogits @ p["wf"]).reshape(pooled.shape)
        with stage("max pool backward"):
            dz2 = np.empty_like(z2)
            for (i, j), mask in zip([(0, 0), (0, 1), (1, 0), (1, 1)], masks):
                np.multiply(dpooled, mask, out=dz2[:, :, i::2, j::2])
        with stage("conv2 backward"):
            dy2 = channel_major(dz2)
            grads["w2"] = (dy2 @ cols2.T).reshape(p["w2"].shape)
            grads["b2"] = dy2.sum(axis=1)
            da1 = col2im(p["w2"].reshape(32, -1).T @ dy2, a1.shape)
        with stage("relu backward"):
            dbn = da1 * (bn > 0)
        with stage("batch norm backward"):
            grads["beta"] = dbn.sum(axis=(0, 2, 3))
            grads["gamma"] = np.einsum("nchw,nchw->c", dbn, xhat)
            dz1 = (p["gamma"] * invstd)[:, None, None] / m * (
                m * dbn - grads["beta"][:, None, None] - xhat * grads["gamma"][:, None, None])
        with stage("conv1 backward"):
            dy1 = channel_major(dz1)
            grads["w1"] = (dy1 @ cols1.T).reshape(p["w1"].shape)
            grads["b1"] = dy1.sum(axis=1)
        with stage("sgd"):
            for name, g in grads.items():
                p[name] -= LR * g
        return loss, grads


# ----------------------------------------------------------------------------------- the contenders


def contenders(kinds: list[str]) -> dict:
    """name -> a function running one training step, all on the same weights and batch."""
    x, target = bench_mobilenet.data("convnet")
    steps = {}
    for kind in kinds:
        if kind == "numpy":
            hand = HandConvNet(bench_mobilenet.build_model("convnet"))
            steps[kind] = lambda hand=hand: hand.step(x, target)
        else:
            steps[kind] = bench_mobilenet.make_step(kind, "convnet")
    return steps


def check_hand_step() -> None:
    """The hand-written step must compute what toynet computes: same loss, same gradients."""
    x, target = bench_mobilenet.data("convnet")
    model = bench_mobilenet.build_model("convnet")
    hand = HandConvNet(model)
    loss = flow.nn.CrossEntropyLoss()(model(flow.tensor(x)), flow.tensor(target))
    loss.backward()
    hand_loss, grads = hand.step(x, target)
    np.testing.assert_allclose(hand_loss, loss.item(), rtol=1e-5)
    ours = dict(zip(["w1", "b1", "gamma", "beta", "w2", "b2", "wf", "bf"], model.parameters()))
    for name, g in grads.items():
        np.testing.assert_allclose(g, ours[name].grad.numpy(), rtol=2e-3, atol=1e-5, err_msg=name)


def race(steps: dict, rounds: int, per_round: int) -> dict:
    """Interleaved rounds; per contender: median CPU and wall seconds per step, median CPU ratio to torch."""
    for step in steps.values():
        step()
        step()  # warm up (Graph mode compiles on its first call)
    cpu = {k: [] for k in steps}
    wall = {k: [] for k in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(per_round):
                step()
            cpu[name].append((time.thread_time() - c0) / per_round)
            wall[name].append((time.perf_counter() - w0) / per_round)
    base = "torch" if "torch" in steps else "numpy"
    return {k: {"cpu": statistics.median(cpu[k]), "wall": statistics.median(wall[k]),
                "ratio": statistics.median(c / b for c, b in zip(cpu[k], cpu[base])), "base": base}
            for k in steps}


def array_peak(step) -> int:
    """Peak bytes of NumPy arrays allocated during one step, above what was alive before it."""
    step()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    step()
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    return peak


# -------------------------------------------------------------------------------------- breakdown


@contextlib.contextmanager
def timing_toynet_ops(totals: dict):
    """Time every op's ``forward`` (by CPU time) while the block runs; ``totals[op name] += seconds``."""
    def timed(op):
        original = op.forward

        def forward(*args, **kwargs):
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                totals[op.name] += time.thread_time() - start
        return forward

    for op in OPS.values():
        op.forward = timed(op)  # an instance attribute shadows the class's method
    try:
        yield
    finally:
        for op in OPS.values():
            del op.forward


def breakdown(rounds: int) -> None:
    x, target = bench_mobilenet.data("convnet")
    eager = bench_mobilenet.make_step("eager", "convnet")
    eager()
    per_op: dict = defaultdict(float)
    start = time.thread_time()
    with timing_toynet_ops(per_op):
        for _ in range(rounds):
            eager()
    total = (time.thread_time() - start) / rounds
    print(f"\ntoynet Eager, CPU ms per step by op ({total * 1e3:.1f} ms in all):")
    for name, t in sorted(per_op.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28} {t / rounds * 1e3:7.2f}")
    print(f"  {'(Python: tensors, autograd, optimizer)':40} {(total - sum(per_op.values()) / rounds) * 1e3:7.2f}")

    hand = HandConvNet(bench_mobilenet.build_model("convnet"))
    stages: dict = defaultdict(float)

    @contextlib.contextmanager
    def timer(name):
        t0 = time.thread_time()
        yield
        stages[name] += time.thread_time() - t0
    hand.step(x, target)
    hand.timer = timer
    for _ in range(rounds):
        hand.step(x, target)
    print(f"\nhand-written NumPy, CPU ms per step by stage ({sum(stages.values()) / rounds * 1e3:.1f} ms in all):")
    for name, t in stages.items():
        print(f"  {name:28} {t / rounds * 1e3:7.2f}")

    try:
        import torch
    except ImportError:
        return
    step = bench_mobilenet.make_step("torch", "convnet")
    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(rounds):
            step()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    print("\nPyTorch, self CPU ms per step by ATen op (profiler overhead included):")
    for e in events[:16]:
        print(f"  {e.key:40} {e.self_cpu_time_total / rounds / 1e3:7.2f}")


# -------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5, help="steps per contender per round")
    parser.add_argument("--breakdown", action="store_true", help="also time each op / stage")
    parser.add_argument("--tune-allocator", action="store_true",
                        help="call tune_host_allocator() first (glibc keeps freed blocks)")
    args = parser.parse_args(argv)
    if args.tune_allocator:
        print("tune_host_allocator:", tune_host_allocator())
    kinds = ["eager", "graph", "numpy"]
    try:
        import torch
        torch.set_num_threads(1)
        kinds.append("torch")
    except ImportError:
        print("PyTorch is not installed: ratios are to the hand-written NumPy step")
    check_hand_step()
    steps = contenders(kinds)
    results = race(steps, args.rounds, args.steps)
    print(f"small conv net training step (batch 16, 3x32x32), 1 thread, {args.rounds} rounds of {args.steps} steps")
    print(f"  {'':8} {'CPU ms':>8} {'wall ms':>8} {'ratio':>7}   peak NumPy arrays")
    for kind, r in results.items():
        memory = f"{array_peak(steps[kind]) / 1e6:7.1f} MB" if kind != "torch" else "      -"
        print(f"  {kind:8} {r['cpu'] * 1e3:8.1f} {r['wall'] * 1e3:8.1f} {r['ratio']:6.2f}x   {memory}")
    print(f"  (ratio: median over rounds of CPU time / {results[kind]['base']}'s CPU time in the same round)")
    if args.breakdown:
        breakdown(args.rounds)
    return results


if __name__ == "__main__":
    main()
