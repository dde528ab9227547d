"""Speed of toynet's convolution and pooling kernels against PyTorch's, on the CPU.

For representative layers of the two workloads the project cares about, a small conv net (batch 16,
3x32x32) and MobileNetV2 on CIFAR-sized images (batch 64, 3x32x32: 1x1 convs, depthwise 3x3 convs
with stride 1 and 2), it times each kernel on its own, with no autograd around it:

* toynet: the ops' ``forward`` on NumPy arrays (``conv2d``, ``conv2d_grad_input``,
  ``conv2d_grad_weight``; ``max_pool2d``, ``max_pool2d_grad``...);
* PyTorch: ``F.conv2d`` and ``aten.convolution_backward`` asked for one gradient at a time (and the
  pooling functions and their backward ops).

Then, with ``--steps``, whole training steps (forward, backward, SGD) of the small conv net and of
MobileNetV2, toynet Eager against PyTorch eager.

The machine is shared and noisy, so every contender runs in this one process, interleaved round by
round, and the report gives the median over rounds of the *ratio* toynet / PyTorch (1.0 = as fast;
lower is better) next to PyTorch's median time.

Threads: one by default (``--threads``), for NumPy's BLAS (``OPENBLAS_NUM_THREADS``, set before NumPy
loads) and for PyTorch (``torch.set_num_threads``): on a loaded machine extra threads spin and wait.
``--clock cpu`` times by the CPU time of this thread (``time.thread_time``), robust when other programs
share the machine. ``--tune-allocator`` calls ``tune_host_allocator()`` (benchmarks/allocator.py) first.

The networks are ``bench_mobilenet``'s (the small conv net and MobileNetV2), so the kernel shapes here
are those layers' and ``--steps`` times the same training steps.

Run: ``python benchmarks/bench_conv_kernels.py [--rounds 9] [--clock cpu] [--steps] [--only conv2]``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # thread counts must be set before NumPy and PyTorch start their pools
    from blas_threads import threads_from_argv, use_threads
    use_threads(threads_from_argv())

import argparse
import statistics
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_mobilenet  # the two networks and their training steps
from allocator import tune_host_allocator

from toynet.ops import OPS

# (label, x shape, out channels, kernel, stride, padding, groups)
CONVS = [
    ("small conv1 3->16", (16, 3, 32, 32), 16, 3, 1, 1, 1),
    ("small conv2 16->32", (16, 16, 32, 32), 32, 3, 1, 1, 1),
    ("mbv2 stem 3->32 s2", (64, 3, 32, 32), 32, 3, 2, 1, 1),
    ("mbv2 dw32 16x16", (64, 32, 16, 16), 32, 3, 1, 1, 32),
    ("mbv2 dw96 s2 16x16", (64, 96, 16, 16), 96, 3, 2, 1, 96),
    ("mbv2 dw144 8x8", (64, 144, 8, 8), 144, 3, 1, 1, 144),
    ("mbv2 dw192 4x4", (64, 192, 4, 4), 192, 3, 1, 1, 192),
    ("mbv2 dw384 2x2", (64, 384, 2, 2), 384, 3, 1, 1, 384),
    ("mbv2 dw960 1x1", (64, 960, 1, 1), 960, 3, 1, 1, 960),
    ("mbv2 pw 16->96 16x16", (64, 16, 16, 16), 96, 1, 1, 0, 1),
    ("mbv2 pw 144->24 8x8", (64, 144, 8, 8), 24, 1, 1, 0, 1),
    ("mbv2 pw 192->32 4x4", (64, 192, 4, 4), 32, 1, 1, 0, 1),
    ("mbv2 pw 384->64 2x2", (64, 384, 2, 2), 64, 1, 1, 0, 1),
    ("mbv2 pw 320->1280 1x1", (64, 320, 1, 1), 1280, 1, 1, 0, 1),
]
# (label, x shape, op, attrs)
POOLS = [
    ("small maxpool 2x2", (16, 32, 32, 32), "max", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
    ("maxpool 3x3 s2 p1", (16, 64, 32, 32), "max", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
    ("avgpool 2x2", (16, 64, 32, 32), "avg", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
    ("adaptive avg 1x1", (64, 1280, 2, 2), "adaptive", {"output_size": (1, 1)}),
]


#: perf_counter (wall time) by default; ``--clock cpu`` uses the calling thread's CPU time instead, which
#: ignores the time the process waits for a core on a busy machine (exact only with --threads 1).
CLOCK = time.perf_counter


def timed(fn) -> float:
    start = CLOCK()
    fn()
    return CLOCK() - start


def race(contenders: dict, reference: str, rounds: int) -> dict:
    """Run every contender once per round, in turn; return {name: (median seconds, median ratio)}."""
    for fn in contenders.values():
        fn()  # warm up (first-call allocations, BLAS thread start)
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
    ratios = {name: [t / r for t, r in zip(times[name], times[reference])] for name in contenders}
    return {name: (statistics.median(times[name]), statistics.median(ratios[name])) for name in contenders}


# --------------------------------------------------------------------------------------- kernels


def conv_contenders(torch, shape, out_channels, k, s, p, groups):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal((out_channels, shape[1] // groups, k, k), dtype=np.float32)
    attrs = {"stride": (s, s), "padding": (p, p), "dilation": (1, 1), "groups": groups}
    y = OPS["conv2d"].forward(np, x, w, **attrs)
    g = rng.standard_normal(y.shape, dtype=np.float32)
    tx, tw, tg = (torch.from_numpy(a) for a in (x, w, g))

    def torch_backward(mask):
        return lambda: torch.ops.aten.convolution_backward(tg, tx, tw, None, [s, s], [p, p], [1, 1], False,
                                                           [0, 0], groups, mask)
    return {
        "forward": (lambda: OPS["conv2d"].forward(np, x, w, **attrs),
                    lambda: torch.nn.functional.conv2d(tx, tw, None, s, p, 1, groups)),
        "grad_input": (lambda: OPS["conv2d_grad_input"].forward(np, g, w, input_shape=shape, **attrs),
                       torch_backward([True, False, False])),
        "grad_weight": (lambda: OPS["conv2d_grad_weight"].forward(np, x, g, weight_shape=w.shape, **attrs),
                        torch_backward([False, True, False])),
    }


def pool_contenders(torch, shape, kind, attrs):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    tx = torch.from_numpy(x)
    TF = torch.nn.functional
    if kind == "max":
        attrs = dict(attrs, dilation=(1, 1), ceil_mode=False)
        y = OPS["max_pool2d"].forward(np, x, **attrs)
        g = rng.standard_normal(y.shape, dtype=np.float32)
        tg = torch.from_numpy(g)
        _, indices = TF.max_pool2d(tx, attrs["kernel_size"], attrs["stride"], attrs["padding"], return_indices=True)
        return {"forward": (lambda: OPS["max_pool2d"].forward(np, x, **attrs),
                            lambda: TF.max_pool2d(tx, attrs["kernel_size"], attrs["stride"], attrs["padding"])),
                # PyTorch keeps the argmax from the forward; toynet recomputes it (no hidden state).
                "grad_input": (lambda: OPS["max_pool2d_grad"].forward(np, x, g, **attrs),
                               lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                                   tg, tx, attrs["kernel_size"], attrs["stride"], attrs["padding"], [1, 1],
                                   False, indices))}
    if kind == "avg":
        attrs = dict(attrs, ceil_mode=False, count_include_pad=True, divisor_override=None)
        y = OPS["avg_pool2d"].forward(np, x, **attrs)
        g = rng.standard_normal(y.shape, dtype=np.float32)
        tg = torch.from_numpy(g)
        return {"forward": (lambda: OPS["avg_pool2d"].forward(np, x, **attrs),
                            lambda: TF.avg_pool2d(tx, attrs["kernel_size"], attrs["stride"], attrs["padding"])),
                "grad_input": (lambda: OPS["avg_pool2d_grad"].forward(np, g, input_shape=shape, **attrs),
                               lambda: torch.ops.aten.avg_pool2d_backward(
                                   tg, tx, attrs["kernel_size"], attrs["stride"], attrs["padding"], False, True,
                                   None))}
    y = OPS["adaptive_avg_pool2d"].forward(np, x, **attrs)
    g = rng.standard_normal(y.shape, dtype=np.float32)
    tg = torch.from_numpy(g)
    return {"forward": (lambda: OPS["adaptive_avg_pool2d"].forward(np, x, **attrs),
                        lambda: TF.adaptive_avg_pool2d(tx, attrs["output_size"])),
            "grad_input": (lambda: OPS["adaptive_avg_pool2d_grad"].forward(np, g, input_shape=shape),
                           lambda: torch.ops.aten._adaptive_avg_pool2d_backward(tg, tx))}


def report_kernels(torch, rounds: int, only: str = "") -> None:
    print(f"{'kernel':24} {'pass':12} {'torch ms':>9} {'toynet ms':>10} {'ratio':>6}")
    totals = []
    cases = [(label, conv_contenders(torch, *rest)) for label, *rest in CONVS]
    cases += [(label, pool_contenders(torch, *rest)) for label, *rest in POOLS]
    cases += [(label, batch_norm_contenders(torch, shape)) for label, shape in BATCH_NORMS]
    for label, passes in cases:
        if only not in label:
            continue
        for name, (ours, theirs) in passes.items():
            result = race({"toynet": ours, "torch": theirs}, "torch", rounds)
            (t_ours, ratio), (t_torch, _) = result["toynet"], result["torch"]
            totals.append((t_ours, t_torch))
            print(f"{label:24} {name:12} {t_torch * 1e3:9.3f} {t_ours * 1e3:10.3f} {ratio:6.2f}", flush=True)
    ours, theirs = sum(t for t, _ in totals), sum(t for _, t in totals)
    print(f"{'sum of medians':37} {theirs * 1e3:9.2f} {ours * 1e3:10.2f} {ours / theirs:6.2f}\n")


# ------------------------------------------------------------------------------------ batch norm

BATCH_NORMS = [("small bn 16 32x32", (16, 16, 32, 32)), ("mbv2 bn 96 16x16", (64, 96, 16, 16)),
               ("mbv2 bn 144 8x8", (64, 144, 8, 8)), ("mbv2 bn 384 2x2", (64, 384, 2, 2))]


def batch_norm_contenders(torch, shape):
    """Training-mode batch norm, forward and backward: toynet's four ops against ATen's two."""
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal(shape, dtype=np.float32), rng.standard_normal(shape, dtype=np.float32)
    w, b = np.ones(shape[1], np.float32), np.zeros(shape[1], np.float32)
    tx, tg, tw, tb = (torch.from_numpy(a) for a in (x, g, w, b))
    running = (torch.zeros(shape[1]), torch.ones(shape[1]))

    def ours():
        mean, var = OPS["batch_norm_stats"].forward(np, x)
        OPS["batch_norm"].forward(np, x, mean, var, w, b)
        sums = OPS["batch_norm_grad_stats"].forward(np, g, x, mean)
        OPS["batch_norm_grad_input"].forward(np, g, x, mean, var, sums, w)

    def theirs():
        _, mean, invstd = torch.ops.aten.native_batch_norm(tx, tw, tb, *running, True, 0.1, 1e-5)
        torch.ops.aten.native_batch_norm_backward(tg, tx, tw, *running, mean, invstd, True, 1e-5, [True] * 3)
    return {"fwd+bwd": (ours, theirs)}


# ------------------------------------------------------------------------------------ train steps


def report_steps(torch, rounds: int) -> None:
    print(f"{'training step':32} {'torch ms':>9} {'toynet ms':>10} {'ratio':>6}")
    for workload, label in [("convnet", "small conv net, batch 16"), ("mobilenet", "MobileNetV2, batch 64")]:
        steps = {kind: bench_mobilenet.make_step(kind, workload) for kind in ("eager", "torch")}
        result = race({"toynet": steps["eager"], "torch": steps["torch"]}, "torch", rounds)
        (t_ours, ratio), (t_torch, _) = result["toynet"], result["torch"]
        print(f"{label:32} {t_torch * 1e3:9.1f} {t_ours * 1e3:10.1f} {ratio:6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", action="store_true", help="also time whole training steps")
    parser.add_argument("--no-kernels", action="store_true", help="skip the per-kernel table")
    parser.add_argument("--only", default="", help="time only the kernels whose label contains this text")
    parser.add_argument("--tune-allocator", action="store_true", help="call tune_host_allocator() first")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: time.thread_time, robust on a busy machine (exact with --threads 1, where "
                             "all work runs in this thread)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    if args.tune_allocator:
        print("tune_host_allocator:", tune_host_allocator())
    import torch
    torch.set_num_threads(args.threads)
    print(f"PyTorch {torch.__version__} with {torch.get_num_threads()} threads; NumPy {np.__version__} "
          f"(OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', f'unset: {os.cpu_count()} cores')}); "
          f"{args.rounds} rounds, {args.clock} clock, medians of per-round ratios toynet/torch\n")
    if not args.no_kernels:
        report_kernels(torch, args.rounds, args.only)
    if args.steps:
        report_steps(torch, args.rounds)


if __name__ == "__main__":
    main()
