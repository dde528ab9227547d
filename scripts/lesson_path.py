"""What a learner reads to follow one training step: the toynet lines that run, counted.

Runs the tutorial's polynomial fit (examples/poly_fit_*.py, shortened to its set-up and one step) and
records, with ``sys.settrace``, every line of the ``toynet`` package that executes:

* **Eager step**: one ``model(x)``, loss, ``zero_grad``, ``backward``, ``step``, after one warm-up step;
* **first Graph call**: ``graph(x, y)`` once, which traces, differentiates, optimises, compiles and runs;
* **later Graph call**: the same call again (the guard's check, then the plan).

For each it prints the distinct lines, the files they are in and the functions, then the size of every
file that ran in any of them, and whether a line under a ``fast/`` folder ran. ``TOYNET_FAST`` picks the
path as everywhere else (``TOYNET_FAST=1 python scripts/lesson_path.py`` counts the fast path).

    python scripts/lesson_path.py            # the table
    python scripts/lesson_path.py --files    # and the files, with the lines of each that ran
    python scripts/lesson_path.py --json     # the numbers as JSON (tests/test_lesson_path.py reads them)
    python scripts/lesson_path.py --read eager_step   # the lines themselves, file by file: what to read
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import toynet as flow  # noqa: E402

PACKAGE = str(ROOT / "toynet") + os.sep


class LineRecorder:
    """Collects (file, line) and (file, function) pairs of the toynet package while it is active."""

    def __init__(self):
        self.lines: set[tuple[str, int]] = set()
        self.functions: set[tuple[str, str]] = set()

    def _trace(self, frame, event, arg):
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE):
            return None  # neither this frame's lines nor its callees' are traced from here
        if event == "call":
            self.functions.add((filename, frame.f_code.co_name))
        return self._local

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines.add((frame.f_code.co_filename, frame.f_lineno))
        return self._local

    def __enter__(self):
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)

    def files(self) -> set[str]:
        return {filename for filename, _ in self.lines}

    def summary(self) -> dict:
        return {"lines": len(self.lines), "files": len(self.files()), "functions": len(self.functions)}


def poly_fit_setup():
    """The tutorial's data, model, loss and optimizer (examples/poly_fit_eager.py)."""
    flow.manual_seed(0)
    x = flow.tensor(np.linspace(-math.pi, math.pi, 2000), dtype=flow.float32)
    y = flow.tensor(np.sin(x), dtype=flow.float32)
    xx = flow.cat([x.unsqueeze(-1).pow(1), x.unsqueeze(-1).pow(2), x.unsqueeze(-1).pow(3)], dim=1)
    model = flow.nn.Sequential(flow.nn.Linear(3, 1), flow.nn.Flatten(0, 1))
    loss_fn = flow.nn.MSELoss(reduction="sum")
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-6)
    return xx, y, model, loss_fn, optimizer


def eager_step(xx, y, model, loss_fn, optimizer):
    loss = loss_fn(model(xx), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def graph_for(model, loss_fn, optimizer):
    class LinearTrainGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    return LinearTrainGraph()


def measure() -> dict:
    """Record the three steps; return their summaries, the files' sizes and the lines run under fast/."""
    xx, y, model, loss_fn, optimizer = poly_fit_setup()
    eager_step(xx, y, model, loss_fn, optimizer)  # warm-up: first-call caches, lazy imports
    with LineRecorder() as eager:
        eager_step(xx, y, model, loss_fn, optimizer)

    xx, y, model, loss_fn, optimizer = poly_fit_setup()
    graph = graph_for(model, loss_fn, optimizer)
    with LineRecorder() as first:
        graph(xx, y)
    with LineRecorder() as later:
        graph(xx, y)

    recorders = {"eager_step": eager, "graph_first_call": first, "graph_later_call": later}
    every_file = set().union(*(r.files() for r in recorders.values()))
    sizes = {_relative(f): _line_count(f) for f in sorted(every_file)}
    fast_lines = sum(1 for r in recorders.values() for f, _ in r.lines if f"{os.sep}fast{os.sep}" in f)
    result = {name: r.summary() for name, r in recorders.items()}
    result["files_that_run"] = {"files": len(sizes), "lines_in_them": sum(sizes.values()),
                                "largest": max(sizes.items(), key=lambda kv: kv[1]) if sizes else None}
    result["fast_lines_run"] = fast_lines
    result["fast"] = flow.is_fast_path()
    result["details"] = {name: _per_file(r) for name, r in recorders.items()}
    result["sizes"] = sizes
    result["lines_run"] = {name: sorted((_relative(f), n) for f, n in r.lines) for name, r in recorders.items()}
    return result


def _per_file(recorder: LineRecorder) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for filename, _ in recorder.lines:
        counts[_relative(filename)] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _relative(filename: str) -> str:
    return str(Path(filename).relative_to(ROOT))


def _line_count(filename: str) -> int:
    with open(filename, encoding="utf-8") as f:
        return sum(1 for _ in f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", action="store_true", help="list the files of each step and their lines run")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--read", choices=["eager_step", "graph_first_call", "graph_later_call"],
                        help="print the lines that run in this step, file by file")
    options = parser.parse_args()
    result = measure()
    if options.json:
        print(json.dumps({k: v for k, v in result.items() if k != "lines_run"}, indent=1))
        return
    if options.read:
        current = None
        for path, number in result["lines_run"][options.read]:
            if path != current:
                current = path
                print(f"\n{path}")
                source = (ROOT / path).read_text(encoding="utf-8").splitlines()
            print(f"{number:5}  {source[number - 1]}")
        return
    print(f"toynet's lines that run in one poly-fit training step ({'fast' if result['fast'] else 'lesson'} path, "
          f"TOYNET_FAST={int(result['fast'])})\n")
    print(f"{'':22} {'lines':>6} {'files':>6} {'functions':>10}")
    for name, label in (("eager_step", "Eager step"), ("graph_first_call", "first Graph call"),
                        ("graph_later_call", "later Graph call")):
        s = result[name]
        print(f"{label:22} {s['lines']:>6} {s['files']:>6} {s['functions']:>10}")
    run = result["files_that_run"]
    print(f"\nthe {run['files']} files that run hold {run['lines_in_them']} lines "
          f"(largest: {run['largest'][0]}, {run['largest'][1]} lines)")
    print(f"lines run under a fast/ folder: {result['fast_lines_run']}")
    if options.files:
        for name, counts in result["details"].items():
            print(f"\n{name}:")
            for path, n in counts.items():
                print(f"  {n:5} of {result['sizes'][path]:5}  {path}")


if __name__ == "__main__":
    main()
