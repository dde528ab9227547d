"""Where Graph mode earns its keep on a transformer: notebook 09's tiny GPT, one AdamW training step with gradient
clipping, toynet Eager against toynet Graph against PyTorch eager, measured side by side in one process.

Rows (ratios, so that a noisy machine slows every contender alike):

* **GPT training step, Graph / Eager time.** Goal <= 0.85.
* **GPT training peak RSS, Graph / Eager**: the peak resident memory of building the step and running it twice,
  above what the model already holds, each mode in a fresh child process (as ``bench_mobilenet.py`` measures
  MobileNetV2). Goal <= 0.85.
* **GPT training step, toynet Eager / PyTorch eager time**, one thread each. Goal <= 1.5.

The step is the one notebook 09 trains: ``logits, loss = model(x, y)``, ``loss.backward()``, clipping the
gradients' norm to 1, ``AdamW.step()``. In Graph mode the clipping is OneFlow's per-group option
(``clip_grad_max_norm`` in the optimizer's parameter group); in Eager mode (toynet and PyTorch) it is
``nn.utils.clip_grad_norm_``. Times are this thread's CPU time with one BLAS thread; contenders alternate round
by round and each ratio is the median over rounds of the ratio within a round.

Run: ``python benchmarks/bench_gpt.py [--rounds 7] [--quick] [--json out.json]`` (``TOYNET_FAST=0`` measures
the lesson path; the default is the fast path, as for ``bench_graph_wins.py``).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TOYNET_FAST", "1")
if __name__ == "__main__":  # one BLAS thread, set before NumPy and PyTorch start their pools
    from blas_threads import use_threads
    use_threads("1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402

import numpy as np  # noqa: E402

import toynet as flow  # noqa: E402
from bench_mobilenet import peak_memory  # noqa: E402
from bench_steps import interleaved, ratio, report  # noqa: E402
from toynet import nn  # noqa: E402
from toynet.text import GPT, GPTConfig  # noqa: E402

#: Notebook 09's model and batch: the Python reference's 103 characters, a context of 64.
CONFIG = dict(block_size=64, vocab_size=103, n_layer=4, n_head=4, n_embd=128)
BATCH, LR, MAX_NORM = 16, 1e-3, 1.0

GOALS = {
    "GPT training step, Graph / Eager time": (0.85, True),
    "GPT training peak RSS, Graph / Eager": (0.85, True),
    "GPT training step, toynet Eager / PyTorch eager time": (1.5, True),
}


def data():
    rng = np.random.default_rng(0)
    shape = (BATCH, CONFIG["block_size"])
    return rng.integers(0, CONFIG["vocab_size"], shape), rng.integers(0, CONFIG["vocab_size"], shape)


def model():
    flow.manual_seed(0)
    return GPT(GPTConfig(**CONFIG))


class TrainGPT(nn.Graph):
    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt
        self.add_optimizer(flow.optim.AdamW([{"params": gpt.parameters(), "clip_grad_max_norm": MAX_NORM,
                                              "clip_grad_norm_type": 2.0}], lr=LR))

    def build(self, x, y):
        _, loss = self.gpt(x, y)
        loss.backward()
        return loss


def make_step(kind: str, gpt=None):
    """One training step of ``kind`` (eager, graph or torch) as a function."""
    gpt = gpt if gpt is not None else model()
    x, y = data()
    if kind == "torch":
        import torch
        from torch_gpt import twin_of
        twin = twin_of(gpt)
        opt = torch.optim.AdamW(twin.parameters(), lr=LR)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)

        def torch_step():
            _, loss = twin(tx, ty)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(twin.parameters(), MAX_NORM)
            opt.step()
            return loss
        return torch_step
    fx, fy = flow.tensor(x), flow.tensor(y)
    if kind == "graph":
        graph = TrainGPT(gpt)
        graph.config.enable_pass("ChooseKernels")   # kernel timing is opt-in, as for MobileNetV2's rows
        return lambda: graph(fx, fy)
    opt = flow.optim.AdamW(gpt.parameters(), lr=LR)

    def eager_step():
        _, loss = gpt(fx, fy)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(gpt.parameters(), MAX_NORM)
        opt.step()
        return loss
    return eager_step


def memory_here(kind: str) -> dict:
    """In a fresh process: the peak resident memory of building ``kind``'s step and running it twice."""
    return peak_memory(lambda gpt: make_step(kind, gpt), model)


def memory_of(kind: str) -> dict | None:
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-of", kind],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rows(rounds: int, quick: bool) -> dict:
    kinds = ["eager", "graph"]
    try:
        import torch
        torch.set_num_threads(1)
        kinds.append("torch")
    except ImportError:
        print("(PyTorch is not installed: no Eager / PyTorch row)", file=sys.stderr)
    times = interleaved({kind: make_step(kind) for kind in kinds}, rounds, 1 if quick else 3, progress=True)
    result = {"GPT training step, Graph / Eager time": ratio(times, "graph", "eager")}
    if "torch" in kinds:
        result["GPT training step, toynet Eager / PyTorch eager time"] = ratio(times, "eager", "torch")
    result["(medians, ms: " + " / ".join(kinds) + ")"] = [round(statistics.median(times[k]) * 1e3, 1) for k in kinds]
    peaks = {kind: memory_of(kind) for kind in ("eager", "graph")}
    if None not in peaks.values():
        result["GPT training peak RSS, Graph / Eager"] = peaks["graph"]["rss_peak"] / peaks["eager"]["rss_peak"]
        result["(peak RSS above the model, MB: eager / graph)"] = [round(peaks[k]["rss_peak"] / 1e6, 1)
                                                                   for k in ("eager", "graph")]
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 1 step")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_of:   # the child process of memory_of
        print(json.dumps(memory_here(args.memory_of)))
        return {}
    path = "fast path" if flow.is_fast_path() else "lesson path"
    result = rows(3 if args.quick else args.rounds, args.quick)
    report(f"tiny GPT {CONFIG}, batch {BATCH} ({path}, one thread)", result, GOALS)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
