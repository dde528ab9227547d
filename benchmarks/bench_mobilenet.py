"""Speed and memory of convolutional training steps: toynet Eager and Graph mode against PyTorch (CPU).

Two workloads, each one SGD step (forward, cross-entropy, backward, update) on random data:

* **small conv net**, batch 16 of 3x32x32: Conv2d(3, 16, 3) - BatchNorm2d - ReLU - Conv2d(16, 32, 3) -
  MaxPool2d(2) - Linear(8192, 10). Target: toynet Eager within 1.5x of PyTorch.
* **MobileNetV2**, batch 64 of 3x32x32, 10 classes (the tutorial's step). Target: within 3x of PyTorch,
  Graph mode no slower than Eager and lower in peak memory.

PyTorch runs the very same network: every toynet layer is mirrored by its ``torch.nn`` counterpart
(torchvision's MobileNetV2 has the same structure) and the weights are copied over.

**Time.** All contenders live in this one process and run interleaved, round by round (other programs
load the machine; ratios measured side by side are what can be trusted). Reported: each contender's
median time per step, and the median over rounds of its time divided by PyTorch's in the same round.

**Memory.** Peak resident memory of building the step (for Graph mode: compiling it) and running it
twice, above the memory held before (the model's weights, and what a framework sets up once per
process, which a throwaway first step loads, are not counted), measured in a fresh child process per
contender so that no allocator cache from another contender hides or adds anything: Linux's ``VmHWM``
high-water mark, reset through ``/proc/self/clear_refs``. For toynet, NumPy's own count of the arrays
alive at the peak (tracemalloc) is shown too.

**Threads.** One thread each by default (``--threads``): NumPy's BLAS and PyTorch's intra-op pool would
otherwise use every core and, on a loaded machine, spin against other programs.

Run: ``python benchmarks/bench_mobilenet.py [--rounds 5] [--quick] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":  # thread counts must be set before NumPy and PyTorch start their pools
    from blas_threads import threads_from_argv, use_threads
    use_threads(threads_from_argv())

import gc
import json
import statistics
import subprocess
import time
import tracemalloc

import numpy as np

import toynet as flow
from bench_steps import eager_step, graph_step  # the same Eager and Graph training steps as there
from toynet import nn
from toynet.vision.models import InvertedResidual, MobileNetV2, mobilenet_v2

WORKLOADS = {"convnet": 16, "mobilenet": 64}  # name -> batch size


# ------------------------------------------------------------------------------------- the networks


def small_convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 16 * 16, 10),
    )


def build_model(workload: str) -> nn.Module:
    flow.manual_seed(0)
    return small_convnet() if workload == "convnet" else mobilenet_v2(num_classes=10)


def data(workload: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    batch = WORKLOADS[workload]
    return rng.random((batch, 3, 32, 32), dtype=np.float32), rng.integers(0, 10, batch)


def to_torch(module: nn.Module):
    """The same network in PyTorch, layer for layer, with the same weights."""
    import torch

    class Residual(torch.nn.Module):  # torchvision's InvertedResidual: names `conv`, `use_res_connect`
        def __init__(self, conv, use_res_connect):
            super().__init__()
            self.conv, self.use_res_connect = conv, use_res_connect

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class TorchMobileNetV2(torch.nn.Module):
        def __init__(self, features, pool, classifier):
            super().__init__()
            self.features, self.adaptive_avg_pool2d, self.classifier = features, pool, classifier

        def forward(self, x):
            return self.classifier(torch.flatten(self.adaptive_avg_pool2d(self.features(x)), 1))

    def mirror(m):
        if isinstance(m, nn.Conv2d):
            return torch.nn.Conv2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
                                   m.groups, bias=m.bias is not None)
        if isinstance(m, nn.BatchNorm2d):
            return torch.nn.BatchNorm2d(m.num_features, m.eps, m.momentum)
        if isinstance(m, nn.ReLU6):
            return torch.nn.ReLU6(inplace=True)
        if isinstance(m, nn.ReLU):
            return torch.nn.ReLU(inplace=True)
        if isinstance(m, nn.Dropout):
            return torch.nn.Dropout(m.p)
        if isinstance(m, nn.Linear):
            return torch.nn.Linear(m.in_features, m.out_features, bias=m.bias is not None)
        if isinstance(m, nn.MaxPool2d):
            return torch.nn.MaxPool2d(m.kernel_size, m.stride, m.padding)
        if isinstance(m, nn.AdaptiveAvgPool2d):
            return torch.nn.AdaptiveAvgPool2d(m.output_size)
        if isinstance(m, nn.Flatten):
            return torch.nn.Flatten(m.start_dim, m.end_dim)
        if isinstance(m, nn.Sequential):
            return torch.nn.Sequential(*[mirror(c) for c in m])
        if isinstance(m, InvertedResidual):
            return Residual(mirror(m.conv), m.use_res_connect)
        if isinstance(m, MobileNetV2):
            return TorchMobileNetV2(mirror(m.features), mirror(m.adaptive_avg_pool2d), mirror(m.classifier))
        raise TypeError(f"no PyTorch mirror for {type(m).__name__}")

    twin = mirror(module)
    twin.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in module.state_dict().items()})
    return twin


# --------------------------------------------------------------------------------------- the steps


def make_model(kind: str, workload: str):
    """The network for ``kind``: toynet's, or its PyTorch twin with the same weights."""
    model = build_model(workload)
    return to_torch(model) if kind == "torch" else model


def make_step(kind: str, workload: str, model=None):
    """A function running one training step of ``workload`` with ``kind`` (eager, graph or torch)."""
    model = make_model(kind, workload) if model is None else model
    x, y = data(workload)
    if kind == "torch":  # PyTorch's objects run through the same eager_step as toynet's
        import torch
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        return eager_step(model, torch.nn.CrossEntropyLoss(), optimizer, torch.from_numpy(x), torch.from_numpy(y))

    fx, fy = flow.tensor(x), flow.tensor(y)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)
    if kind == "eager":
        return eager_step(model, loss_fn, optimizer, fx, fy)
    return graph_step(model, loss_fn, optimizer, fx, fy)


# ------------------------------------------------------------------------------------------- timing


def compare_times(workload: str, kinds: list[str], rounds: int, steps: int) -> dict:
    contenders = {kind: make_step(kind, workload) for kind in kinds}
    for step in contenders.values():
        step()  # warm up (and compile the graph) outside the timing
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(rounds):
        for kind, step in contenders.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[kind].append((time.perf_counter() - start) / steps)
        print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {times[k][-1]:.3f}s" for k in kinds),
              file=sys.stderr, flush=True)
    base = "torch" if "torch" in kinds else kinds[0]
    return {kind: {"median_s": statistics.median(ts),
                   "ratio": statistics.median(t / b for t, b in zip(ts, times[base]))}
            for kind, ts in times.items()}


# ------------------------------------------------------------------------------------------- memory


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _return_free_memory_to_the_os() -> None:
    """glibc's malloc keeps freed blocks (raising its mmap threshold as it sees large frees), so pages a
    previous step touched stay resident and a later step would reuse them unseen: release them."""
    import ctypes
    import ctypes.util
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory(make_step, make_model, trace_numpy: bool = False) -> dict:
    """Run in a fresh process: peak memory of building a step (``make_step(model)``) and running it twice, above
    what is held before it (the model, from ``make_model()``). ``trace_numpy``: also NumPy's own count of the
    arrays alive at the peak (tracemalloc)."""
    # A throwaway step first, so that what a framework sets up once per process (libraries loaded on
    # first use, kernel caches) is not counted; and the model is made before the baseline: its
    # weights are the same for everyone and not the step's memory.
    warm = make_step(None)
    warm()
    del warm
    model = make_model()
    gc.collect()
    _return_free_memory_to_the_os()
    if trace_numpy:
        tracemalloc.start()
    base = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM, the peak resident size, to the current size
    step = make_step(model)
    step()
    step()
    result = {"rss_peak": _status("VmHWM") - base}
    if trace_numpy:
        result["tracemalloc_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result


def measure_memory_here(kind: str, workload: str) -> dict:
    """Run in a fresh process: peak memory of building ``kind``'s step of ``workload`` and running it twice."""
    return peak_memory(lambda model: make_step(kind, workload, model), lambda: make_model(kind, workload),
                       trace_numpy=kind != "torch")


def measure_memory(kind: str, workload: str, threads: str) -> dict | None:
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--threads", threads,
                           "--memory-of", kind, workload], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------- main


def report(title: str, times: dict, memory: dict) -> None:
    print(f"\n{title}")
    for kind, t in times.items():
        line = f"  {kind:<6} {t['median_s'] * 1e3:9.1f} ms/step  {t['ratio']:5.2f}x PyTorch"
        m = memory.get(kind)
        if m:
            line += f"   peak RSS {m['rss_peak'] / 1e6:7.1f} MB"
            if "tracemalloc_peak" in m:
                line += f" (NumPy arrays {m['tracemalloc_peak'] / 1e6:7.1f} MB)"
        print(line)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds, MobileNetV2 at 1 step per round")
    parser.add_argument("--threads", default="1", help="threads for NumPy's BLAS and PyTorch (default 1)")
    parser.add_argument("--memory-of", nargs=2, metavar=("KIND", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_of:  # the child process of measure_memory
        print(json.dumps(measure_memory_here(*args.memory_of)))
        return {}
    kinds = ["eager", "graph"]
    try:
        import torch
        torch.set_num_threads(int(args.threads))
        kinds.append("torch")
    except ImportError:
        print("PyTorch is not installed: toynet's Eager and Graph modes only, ratios to Eager")
    rounds = 2 if args.quick else args.rounds
    results = {}
    for workload, title, steps in (("convnet", "small conv net step (batch 16, 3x32x32)", 5),
                                   ("mobilenet", "MobileNetV2 step (batch 64, 3x32x32, 10 classes)", 1)):
        print(f"{title}: timing {rounds} rounds of {steps} step(s)...", file=sys.stderr, flush=True)
        times = compare_times(workload, kinds, rounds, steps)
        memory = {kind: measure_memory(kind, workload, args.threads) for kind in kinds}
        report(title, times, memory)
        results[workload] = {"times": times, "memory": memory}
    print(f"\nthreads: {args.threads} for NumPy's BLAS and for PyTorch; time ratios are medians over rounds of "
          "time / PyTorch's time in the same round")
    return results


if __name__ == "__main__":
    main()
