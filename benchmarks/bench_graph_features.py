"""What activation checkpointing and AMP cost and save in one nn.Graph training step.

The workload is a deep MLP: four blocks of four Linear(width, width)+ReLU layers, a Linear head,
cross-entropy, SGD with momentum. Three graphs train it side by side in this one process, interleaved
round by round (ratios measured side by side are what a noisy machine lets us trust):

* **float32**: the plain graph;
* **checkpointed**: each block with ``activation_checkpointing = True`` (its activations recomputed
  in backward);
* **AMP**: ``config.enable_amp(True)`` and a ``flow.amp.GradScaler`` (float16 matrix products).

For each: the median time of a step, and three measures of memory, each as a ratio to float32:

* *peak live*: the most bytes of op results alive at once (from the op that makes a value to its last
  reader), what the step needs whatever the planner does (``toynet.static.passes.checkpoint.live_bytes``);
* *arena*: the bytes of the buffers the memory planner allocates for the plan (``graph.ir.memory``);
* *tracemalloc*: the peak NumPy allocation of a step, parameters and optimizer state included.

Honest expectations: NumPy has no fast float16 matrix product on a CPU (it converts element by element
and does not use BLAS), so AMP is *slower* here, by a lot; on a GPU it is the other way round.
Checkpointing costs one extra forward of each block (about a third more compute).

Run: ``python benchmarks/bench_graph_features.py [--rounds 5] [--quick] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

if __name__ == "__main__":  # must happen before NumPy loads its BLAS
    from blas_threads import threads_from_argv, use_threads
    use_threads(threads_from_argv())

import numpy as np  # noqa: E402

import toynet as flow  # noqa: E402
from bench_steps import peak_memory  # noqa: E402
from toynet import nn  # noqa: E402
from toynet.static.passes.checkpoint import live_bytes  # noqa: E402

CONFIGS = ("float32", "checkpointed", "AMP")


class DeepMLP(nn.Module):
    def __init__(self, width: int, blocks: int = 4, depth: int = 4):
        super().__init__()
        self.blocks = nn.Sequential(*[
            nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())])
            for _ in range(blocks)])
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.blocks(x))


class TrainGraph(nn.Graph):
    def __init__(self, model: DeepMLP, config: str):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
        if config == "checkpointed":
            for block in self.model.blocks:
                block.to(nn.graph.GraphModule).activation_checkpointing = True
        elif config == "AMP":
            self.config.enable_amp(True)
            self.set_grad_scaler(flow.amp.GradScaler(init_scale=1024.0, growth_interval=100))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def make_step(config: str, width: int, batch: int):
    """A fresh graph of ``config`` and a function running one step of it on fixed data."""
    flow.manual_seed(0)
    graph = TrainGraph(DeepMLP(width), config)
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((batch, width)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 10, batch))
    return graph, lambda: graph(x, y)


def tracemalloc_peak(config: str, width: int, batch: int) -> int:
    """Peak bytes NumPy allocates, from building the graph through a second step."""
    return peak_memory(lambda: make_step(config, width, batch)[1])


def measure(width: int = 64, batch: int = 1024, rounds: int = 5, steps: int = 5) -> dict:
    """{config: {"seconds", "peak_live", "arena", "tracemalloc"}}, every config measured side by side."""
    graphs, steps_of = {}, {}
    for config in CONFIGS:
        graphs[config], steps_of[config] = make_step(config, width, batch)
        steps_of[config]()  # compile
    times: dict[str, list[float]] = {c: [] for c in CONFIGS}
    for _ in range(rounds):
        for config in CONFIGS:
            start = time.perf_counter()
            for _ in range(steps):
                steps_of[config]()
            times[config].append((time.perf_counter() - start) / steps)
    return {c: {"seconds": statistics.median(times[c]),
                "peak_live": max(live_bytes(graphs[c].ir)),
                "arena": graphs[c].ir.memory.bytes_pooled,
                "tracemalloc": tracemalloc_peak(c, width, batch)} for c in CONFIGS}


def report(results: dict) -> str:
    base = results["float32"]
    lines = [f"  {'':<13} {'ms/step':>9} {'time':>6}   {'peak live MB':>12} {'':>6}   {'arena MB':>9} {'':>6}"
             f"   {'tracemalloc MB':>14} {'':>6}"]
    for config, r in results.items():
        lines.append(f"  {config:<13} {r['seconds'] * 1e3:9.1f} {r['seconds'] / base['seconds']:5.2f}x"
                     f"   {r['peak_live'] / 1e6:12.2f} {r['peak_live'] / base['peak_live']:5.2f}x"
                     f"   {r['arena'] / 1e6:9.2f} {r['arena'] / base['arena']:5.2f}x"
                     f"   {r['tracemalloc'] / 1e6:14.2f} {r['tracemalloc'] / base['tracemalloc']:5.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a small model and few steps (a smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads for NumPy")
    args = parser.parse_args(argv)
    # A batch much larger than the width, as in training: activations (batch x width each) then outweigh
    # the weights, their gradients and the staged new values (width x width each), which checkpointing
    # cannot touch. (At width 128, batch 256 those set the peak, and checkpointing saves 8%.)
    width, batch, steps = (32, 512, 2) if args.quick else (64, 1024, 3)
    results = measure(width, batch, args.rounds, steps)
    print(f"deep MLP, 4 blocks x 4 Linear({width}, {width})+ReLU, batch {batch}; median of {args.rounds} rounds "
          f"x {steps} steps; ratios to float32")
    print(report(results))
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
