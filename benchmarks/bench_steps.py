"""Speed of one training step, toynet Eager and Graph mode against hand-written NumPy (and PyTorch).

Two workloads:

* **poly fit** (the tutorial's): Linear(3, 1) on 2000 points, sum-of-squares loss, SGD. Tiny arrays, so
  the time is per-op overhead: Python calls, Tensor objects, autograd records.
* **MLP step**: 784 -> 1024 -> 1024 -> 10 with ReLU, cross-entropy, SGD with momentum, batch 128. Big
  matrix products, so the time is compute: the overhead should vanish into it.

Every contender runs in this one process, interleaved round by round (the machine is noisy; ratios
measured side by side are what can be trusted), and the report gives each one's median time per step
and its ratio to hand-written NumPy. Peak memory of a step is measured with tracemalloc, which sees
NumPy's allocations.

Run: ``python benchmarks/bench_steps.py [--rounds 7] [--quick] [--threads 1]``.

BLAS runs on one thread by default (``--threads`` changes it, for NumPy and PyTorch alike): with other
work on a 2-core machine, a multi-threaded BLAS spins and waits, and timings swing by 10x.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import tracemalloc

if __name__ == "__main__":  # must happen before NumPy loads its BLAS
    from blas_threads import threads_from_argv, use_threads
    use_threads(threads_from_argv())

import numpy as np  # noqa: E402

import toynet as flow  # noqa: E402


# ------------------------------------------------------------------------------------------ poly fit


def poly_data():
    x = np.linspace(-math.pi, math.pi, 2000).astype(np.float32)
    y = np.sin(x).astype(np.float32)
    xx = np.stack([x, x ** 2, x ** 3], axis=1).astype(np.float32)
    return xx, y


def numpy_poly(xx, y, lr=1e-6):
    """The poly-fit step written by hand: forward, gradients, update, all in NumPy."""
    rng = np.random.default_rng(0)
    w = rng.uniform(-0.5, 0.5, 3).astype(np.float32)
    b = np.zeros(1, np.float32)

    def step():
        pred = xx @ w + b
        diff = pred - y
        loss = np.dot(diff, diff)
        grad = 2.0 * diff
        w[...] -= lr * (grad @ xx)
        b[...] -= lr * grad.sum()
        return loss
    return step


def toynet_poly_model():
    flow.manual_seed(0)
    model = flow.nn.Sequential(flow.nn.Linear(3, 1), flow.nn.Flatten(0, 1))
    loss_fn = flow.nn.MSELoss(reduction="sum")
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-6)
    return model, loss_fn, optimizer


def eager_step(model, loss_fn, optimizer, x, y):
    """One training step, written as in the tutorials; PyTorch's objects fit it too."""
    def step():
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss
    return step


def graph_step(model, loss_fn, optimizer, x, y, disabled_passes=()):
    class TrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss
    graph = TrainGraph()
    graph.config.enable_pass("ChooseKernels")   # kernel timing is opt-in (a fast-path pass; the lesson has none)
    for name in disabled_passes:
        graph.config.enable_pass(name, False)
    graph(x, y)  # compile outside the timing

    def step():
        return graph(x, y)
    return step


def torch_poly(xx, y):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
    loss_fn = torch.nn.MSELoss(reduction="sum")
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    return eager_step(model, loss_fn, opt, torch.from_numpy(xx), torch.from_numpy(y))  # the same loop


# ------------------------------------------------------------------------------------------- MLP


SIZES = (784, 1024, 1024, 10)
BATCH = 128


def mlp_data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    t = rng.integers(0, SIZES[-1], BATCH).astype(np.int64)
    return x, t


def numpy_mlp(x, t, lr=0.01, momentum=0.9):
    """Forward, backward and SGD-with-momentum of the MLP, by hand, with in-place updates."""
    rng = np.random.default_rng(0)
    ws = [rng.uniform(-1 / math.sqrt(i), 1 / math.sqrt(i), (o, i)).astype(np.float32)
          for i, o in zip(SIZES[:-1], SIZES[1:])]
    bs = [np.zeros(o, np.float32) for o in SIZES[1:]]
    vel = [np.zeros_like(p) for p in ws + bs]
    onehot = np.zeros((BATCH, SIZES[-1]), np.float32)
    onehot[np.arange(BATCH), t] = 1

    def step():
        acts = [x]
        h = x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = h @ w.T + b
            if i < len(ws) - 1:
                np.maximum(h, 0, out=h)
            acts.append(h)
        shifted = h - h.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        p = e / e.sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(BATCH), t]).mean()
        g = (p - onehot) / BATCH
        grads_w, grads_b = [], []
        for i in reversed(range(len(ws))):
            grads_w.append(g.T @ acts[i])
            grads_b.append(g.sum(axis=0))
            if i > 0:
                g = g @ ws[i]
                g *= acts[i] > 0
        grads = grads_w[::-1] + grads_b[::-1]
        for param, grad, v in zip(ws + bs, grads, vel):
            v *= momentum
            v += grad
            param -= lr * v
        return loss
    return step


def mlp_model(lib):
    """The MLP of ``SIZES`` (ReLU between the layers), cross-entropy and SGD with momentum, built from
    ``lib``: toynet and PyTorch share the API, so this one function builds both contenders."""
    layers = []
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        layers.append(lib.nn.Linear(a, b))
        if i < len(SIZES) - 2:
            layers.append(lib.nn.ReLU())
    model = lib.nn.Sequential(*layers)
    return model, lib.nn.CrossEntropyLoss(), lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def toynet_mlp_model():
    flow.manual_seed(0)
    return mlp_model(flow)


def torch_mlp(x, t):
    import torch
    return eager_step(*mlp_model(torch), torch.from_numpy(x), torch.from_numpy(t))


# ---------------------------------------------------------------------------------------- harness


# With one BLAS thread every contender runs on this thread alone, so its CPU time is what it costs,
# whatever else the machine is doing; with more threads, fall back to wall-clock time.
CLOCK = time.thread_time


def time_per_step(step, n: int) -> float:
    start = CLOCK()
    for _ in range(n):
        step()
    return (CLOCK() - start) / n


def peak_memory(make_step) -> int:
    """Peak bytes allocated while a training step runs, counting everything the contender holds from
    the moment it is built: parameters, optimizer state, a compiled plan's preallocated buffers, the
    step's temporaries. (tracemalloc sees NumPy's arrays, not PyTorch's, so PyTorch is left out.)"""
    tracemalloc.start()
    step = make_step()
    step()
    tracemalloc.reset_peak()
    step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def compare(title: str, contenders: dict, steps_per_round: int, rounds: int, memory: dict | None = None) -> dict:
    """Time every contender round by round; print medians and ratios to the first (NumPy).

    ``memory``, if given, maps contender names to functions that build a fresh contender, whose step's
    peak memory is then measured from scratch (see :func:`peak_memory`).
    """
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for step in contenders.values():
        time_per_step(step, max(1, steps_per_round // 10))  # warm up
    for _ in range(rounds):
        for name, step in contenders.items():
            times[name].append(time_per_step(step, steps_per_round))
    baseline = statistics.median(times[next(iter(contenders))])
    print(f"\n{title}  (median of {rounds} rounds x {steps_per_round} steps)")
    result = {}
    peaks = {name: peak_memory(make) for name, make in memory.items()} if memory else {}
    base_peak = peaks.get(next(iter(contenders)))
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = med / baseline
        result[name] = ratio
        line = f"  {name:<22} {med * 1e6:9.1f} us/step   {ratio:5.2f}x NumPy"
        if name in peaks:
            line += f"   peak {peaks[name] / 1e6:7.2f} MB ({peaks[name] / base_peak:4.2f}x)"
        print(line)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="fewer steps per round (a smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads for NumPy and PyTorch")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.thread_time if args.threads == 1 else time.perf_counter
    try:
        import torch
        torch.set_num_threads(args.threads)
        have_torch = True
    except ImportError:
        have_torch = False
    results = {}

    xx, y = poly_data()
    fx, fy = flow.tensor(xx), flow.tensor(y)
    poly = {"hand-written NumPy": numpy_poly(xx, y),
            "toynet Eager": eager_step(*toynet_poly_model(), fx, fy),
            "toynet Graph": graph_step(*toynet_poly_model(), fx, fy)}
    if have_torch:
        poly["PyTorch eager"] = torch_poly(xx, y)
    results["poly"] = compare("poly fit step", poly, 50 if args.quick else 400, args.rounds)

    x, t = mlp_data()
    fx, ft = flow.tensor(x), flow.tensor(t)
    mlp_builders = {"hand-written NumPy": lambda: numpy_mlp(x, t),
                    "toynet Eager": lambda: eager_step(*toynet_mlp_model(), fx, ft),
                    "toynet Graph": lambda: graph_step(*toynet_mlp_model(), fx, ft)}
    mlp = {name: make() for name, make in mlp_builders.items()}
    if have_torch:
        mlp["PyTorch eager"] = torch_mlp(x, t)
    results["mlp"] = compare("MLP step (784-1024-1024-10, batch 128)", mlp, 3 if args.quick else 20,
                             args.rounds, memory=mlp_builders)
    print(f"\nthreads: {args.threads} for NumPy's BLAS" + (" and PyTorch" if have_torch else "")
          + ("; times are this thread's CPU time" if args.threads == 1 else "; times are wall-clock"))
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)


# ------------------------------------------------------------------ timing side by side, and the report


def interleaved(contenders: dict, rounds: int, steps: int, clock=time.thread_time,
                progress: bool = False) -> dict[str, list[float]]:
    """Seconds per step of each contender, round by round (each round runs every contender once, so a noisy
    machine slows them alike); ``progress`` prints each round's times to stderr."""
    for step in contenders.values():
        step()  # warm up: compile, first-touch the buffers
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name, step in contenders.items():
            start = clock()
            for _ in range(steps):
                step()
            times[name].append((clock() - start) / steps)
        if progress:
            print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {times[k][-1] * 1e3:.1f} ms" for k in times),
                  file=sys.stderr, flush=True)
    return times


def ratio(times: dict, top: str, bottom: str) -> float:
    """The median over rounds of ``top``'s time divided by ``bottom``'s in the same round."""
    return statistics.median(a / b for a, b in zip(times[top], times[bottom]))


def report(title: str, rows: dict, goals: dict) -> None:
    """Print ``rows``; those in ``goals`` (row -> (goal, whether lower is better)) say whether they meet it."""
    print(f"\n{title}")
    for name, value in rows.items():
        if name in goals:
            goal, lower = goals[name]
            met = value <= goal if lower else value >= goal
            print(f"  {name:<55} {value:6.2f}   goal {'<=' if lower else '>='} {goal:<5} "
                  f"{'met' if met else 'NOT met'}")
        else:
            print(f"  {name} {value}")
