"""How long toynet.viz takes to draw and render big graphs, and where the time goes.

For eager autograd graphs and static graphs of about 250, 500 and 1,000 picture nodes it times

* **draw**: toynet's Python side, ``viz.draw(...)`` (walk the graph, build the picture, write DOT);
* **svg** / **png**: Graphviz's ``dot`` laying out and rendering that DOT (a subprocess); PNGs of tall
  graphs are huge bitmaps, so also **png<=1600px** (``to_png(d, max_size=1600)``);

and, for the size cap, drawing and rendering the same 1,000-node graphs with the default
``max_nodes`` (folded by module or cut). Then a recording: a 40-statement construction recorded,
its frames built, and the GIF written.

Then an ``nn.Graph`` by module: the tutorial's MobileNetV2 training graph (batch 2, CIFAR-sized),
drawn as a notebook shows it (folded by block, depth=3), one level deeper, forward only, and forward
only with every op (once: dot needs ~15 s for its 1,600 nodes; the whole training graph's 2,500 nodes
took 310 s in one measurement, which is why big graphs are folded by default).

Every case runs ``--rounds`` times interleaved and the report gives the median; the machine is shared
and noisy, so the ratio of toynet's share (draw) to dot's share (svg) is the number to compare
across machines.

Run: ``python benchmarks/bench_viz.py [--rounds 3] [--every-op]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import statistics
import tempfile
import time

import toynet as flow
from toynet import viz
from toynet.ops import OPS
from toynet.static.ir import Graph, Node


def eager_graph(layers: int) -> flow.Tensor:
    """An MLP-like chain: each layer is matmul, add (bias) and relu, 9 picture nodes a layer."""
    h = flow.randn(4, 8)
    for _ in range(layers):
        w = flow.randn(8, 8, requires_grad=True)
        b = flow.randn(8, requires_grad=True)
        h = (h @ w + b).relu()
    return h.sum()


def static_graph(blocks: int) -> Graph:
    """A hand-built training-like graph: per block a parameter, two forward ops, a backward op and
    an optimizer update, with module scopes (so the size cap can fold it by module)."""
    f32, cpu = flow.float32, flow.device("cpu")
    g = Graph("bench")
    h = g.add(Node("x", "input", (4, 8), f32, cpu))
    g.inputs.append(h)
    grads = []
    for i in range(blocks):
        scope = f"net.{i // 8}.{i % 8}"
        w = g.add(Node(f"{scope}.w", "state", (8, 8), f32, cpu, state_name=f"{scope}.w", state_kind="parameter"))
        z = g.add(Node(f"{scope}-matmul", "op", (4, 8), f32, cpu, op=OPS["matmul"], inputs=(h, w), scope=scope))
        h = g.add(Node(f"{scope}-relu", "op", (4, 8), f32, cpu, op=OPS["relu"], inputs=(z,), scope=scope))
        grads.append((scope, w, z))
    g.outputs.append(h)
    for scope, w, z in reversed(grads):
        gw = g.add(Node(f"{scope}-grad", "op", (8, 8), f32, cpu, op=OPS["mul"], inputs=(w, z), phase="backward",
                        scope=scope))
        new = g.add(Node(f"{scope}-sgd", "op", (8, 8), f32, cpu, op=OPS["sub"], inputs=(w, gw), phase="optimizer",
                         scope=scope))
        g.updates[w.state_name] = new
    return g


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def node_count(drawing: viz.Drawing) -> int:
    return sum(1 for line in drawing.source.splitlines() if " [label=" in line) - 1  # minus the legend


def bench_graphs(rounds: int) -> None:
    cases = []
    for target in (250, 500, 1000):
        cases.append((f"eager ~{target}", eager_graph(target // 9), {"max_nodes": None}))
        cases.append((f"static ~{target}", static_graph(target // 5), {"max_nodes": None}))
    cases.append(("eager ~1000, default cap", eager_graph(1000 // 9), {}))
    cases.append(("static ~1000, default cap", static_graph(1000 // 5), {}))
    times: dict[str, dict[str, list[float]]] = {name: {"draw": [], "svg": [], "png": [], "png1600": []}
                                                for name, _, _ in cases}
    nodes = {}
    for _ in range(rounds):
        for name, obj, options in cases:
            seconds, drawing = timed(viz.draw, obj, **options)
            times[name]["draw"].append(seconds)
            nodes[name] = node_count(drawing)
            times[name]["svg"].append(timed(viz.to_svg, drawing)[0])
            times[name]["png"].append(timed(viz.to_png, drawing)[0])
            times[name]["png1600"].append(timed(viz.to_png, drawing, max_size=1600)[0])
    print(f"{'graph':28s} {'nodes':>6s} {'draw s':>8s} {'svg s':>8s} {'png s':>8s} {'png<=1600px s':>14s} "
          f"{'draw/svg':>9s}")
    for name, _, _ in cases:
        m = {k: statistics.median(v) for k, v in times[name].items()}
        print(f"{name:28s} {nodes[name]:6d} {m['draw']:8.3f} {m['svg']:8.3f} {m['png']:8.3f} {m['png1600']:14.3f} "
              f"{m['draw'] / m['svg']:9.3f}")


def bench_recording(rounds: int) -> None:
    results: dict[str, list[float]] = {"record": [], "frames": [], "gif": []}
    steps = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            def run() -> viz.Recorder:
                with viz.record() as rec:
                    h = flow.randn(2, 4, requires_grad=True)
                    for _ in range(40):
                        h = h * 0.5 + 1.0
                return rec
            seconds, rec = timed(run)
            results["record"].append(seconds)
            seconds, frames = timed(getattr, rec, "frames")
            results["frames"].append(seconds)
            steps = len(frames)
            results["gif"].append(timed(rec.to_gif, os.path.join(tmp, "r.gif"), fps=4)[0])
    m = {k: statistics.median(v) for k, v in results.items()}
    print(f"\nrecording of {steps} steps: record {m['record']:.3f} s, build frames {m['frames']:.3f} s, "
          f"GIF {m['gif']:.2f} s ({m['gif'] / steps * 1000:.0f} ms a frame)")


def bench_nn_graph_by_module(rounds: int, every_op: bool) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from figures import mobilenet_graph

    seconds, graph = timed(mobilenet_graph, 2)
    print(f"\nMobileNetV2 training nn.Graph: traced, compiled and run once in {seconds:.2f} s "
          f"({len(graph.ir.nodes)} graph nodes, {sum(1 for _ in graph.outline().walk())} outline entries)")
    cases = [("notebook default (depth=3)", {}), ("depth=4", {"depth": 4}),
             ("forward only, depth=5", {"forward_only": True, "depth": 5})]
    times: dict[str, dict[str, list[float]]] = {name: {"draw": [], "svg": [], "png": []} for name, _ in cases}
    nodes = {}
    for _ in range(rounds):
        for name, options in cases:
            seconds, drawing = timed(viz.draw, graph, **options)
            times[name]["draw"].append(seconds)
            nodes[name] = node_count(drawing)
            times[name]["svg"].append(timed(viz.to_svg, drawing)[0])
            times[name]["png"].append(timed(viz.to_png, drawing, max_size=2400)[0])
    display = statistics.median(timed(graph._repr_mimebundle_)[0] for _ in range(rounds))
    print(f"{'view':28s} {'nodes':>6s} {'draw s':>8s} {'svg s':>8s} {'png<=2400px s':>14s}")
    for name, _ in cases:
        m = {k: statistics.median(v) for k, v in times[name].items()}
        print(f"{name:28s} {nodes[name]:6d} {m['draw']:8.3f} {m['svg']:8.3f} {m['png']:14.3f}")
    print(f"notebook display (draw + svg): {display:.2f} s")
    if every_op:
        seconds, drawing = timed(viz.draw, graph, forward_only=True, max_nodes=None)
        print(f"{'forward only, every op (once)':28s} {node_count(drawing):6d} {seconds:8.3f} "
              f"{timed(viz.to_svg, drawing)[0]:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every-op", action="store_true", help="also draw MobileNetV2's forward unfolded (~15 s)")
    args = parser.parse_args()
    flow.manual_seed(0)
    bench_graphs(args.rounds)
    bench_recording(args.rounds)
    bench_nn_graph_by_module(args.rounds, args.every_op)


if __name__ == "__main__":
    main()
