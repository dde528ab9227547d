"""The main job: rerun the tutorials' programs with toynet and regenerate the figures in imgs/.

Each example runs in its own process, exactly as a user would run it, and its output is kept in
``out/<example>.txt`` so it can be compared with the tutorial's printed output. Then the figures the
tutorials show are drawn again by toynet's own code into ``imgs/``.

    python examples/run_all.py            # everything (MobileNetV2 runs a short training by default)
    python examples/run_all.py --quick    # smaller MobileNetV2 runs
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "out"


def examples(quick: bool) -> list[tuple[str, list[str]]]:
    """(name, command-line arguments) of every tutorial program, in the order the tutorials show them."""
    steps = "3" if quick else "20"
    runs = [
        ("graph_my_linear", []),
        ("poly_fit_eager", []),
        ("poly_fit_graph", []),
        ("fashion_mnist", ["--epochs", "1" if quick else "3"]),
    ]
    if (ROOT / "examples" / "mobilenet_eager.py").exists():
        runs.append(("mobilenet_eager", ["--max-batches", steps]))
    if (ROOT / "examples" / "mobilenet_graph.py").exists():
        runs.append(("mobilenet_graph", ["--max-batches", steps, "--out", str(OUT / "mobilenet_graph")]))
    return runs


def run_example(name: str, args: list[str]) -> bool:
    OUT.mkdir(exist_ok=True)
    log = OUT / f"{name}.txt"
    start = time.perf_counter()
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *args], cwd=ROOT, env=env,
                              stdout=f, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    last = log.read_text().strip().splitlines()[-1:] or [""]
    status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
    print(f"[main] {name:<18} {status:<8} {seconds:6.1f} s   {last[0][:90]}")
    return proc.returncode == 0


def make_figures() -> bool:
    """Regenerate imgs/ with toynet's visualiser (scripts/figures.py), if its tools are installed."""
    try:
        sys.path.insert(0, str(ROOT / "scripts"))
        import figures
    except ImportError as error:
        print(f"[main] figures skipped: {error}")
        return True
    start = time.perf_counter()
    written = figures.make_all(ROOT / "imgs")
    print(f"[main] figures: wrote {len(written)} files to imgs/ in {time.perf_counter() - start:.1f} s")
    # The floors of the framework itself (docs/how-it-works.md), read from toynet's own imports.
    command = [sys.executable, str(ROOT / "scripts" / "layers.py"), "--svg", str(ROOT / "imgs" / "layers.svg")]
    layers = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(f"[main] layers: {layers.stdout.strip().splitlines()[-1] if layers.returncode == 0 else layers.stderr}")
    return layers.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter MobileNetV2 runs")
    parser.add_argument("--only", nargs="*", help="run only these examples")
    args = parser.parse_args(argv)
    ok = True
    for name, extra in examples(args.quick):
        if args.only and name not in args.only:
            continue
        ok &= run_example(name, extra)
    if not args.only:
        ok &= make_figures()
    print(f"[main] outputs in {OUT.relative_to(ROOT)}/, figures in imgs/" if ok else "[main] some steps failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
