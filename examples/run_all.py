"""The main job: rerun the tutorials' programs with toynet and regenerate the figures in imgs/.

Each example runs in its own process, exactly as a user would run it, and its output is kept in
``out/<example>.txt`` so it can be compared with the tutorial's printed output; what the programs write
goes to ``out/`` (and the stand-in data sets they make to ``data/``, both ignored by git). Then the figures the tutorials show are drawn again by toynet's own code, and a
file of ``imgs/`` is replaced only when its picture changed (scripts/figures.py): on an unchanged clone
the main job leaves ``git status`` clean.

    python examples/run_all.py            # everything (MobileNetV2 runs a short training by default)
    python examples/run_all.py --quick    # smaller MobileNetV2 runs
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
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
    say(f"{name:<18} {status:<8} {seconds:6.1f} s   ", last[0].split("\r")[-1].strip())
    return proc.returncode == 0


def say(head: str, text: str = "") -> None:
    """One summary line, ``[main] head text``; a long text goes on over more lines, indented under its start,
    broken between words only."""
    head = f"[main] {head}"
    width = max(shutil.get_terminal_size((120, 24)).columns, len(head) + 40)
    lines = textwrap.wrap(text, width=width, initial_indent=head, subsequent_indent=" " * len(head),
                          break_long_words=False, break_on_hyphens=False) if text else [head.rstrip()]
    print("\n".join(lines), flush=True)


def make_figures() -> bool:
    """Regenerate imgs/ with toynet's visualiser (scripts/figures.py), if its tools are installed: only the
    files whose picture changed are written."""
    try:
        sys.path.insert(0, str(ROOT / "scripts"))
        import figures
    except ImportError as error:
        say("figures skipped: ", str(error))
        return True
    start = time.perf_counter()
    redrawn, kept = figures.update(ROOT / "imgs")
    say(f"figures: {len(redrawn) + len(kept)} drawn in {time.perf_counter() - start:.1f} s; ",
        f"{len(kept)} unchanged in imgs/, redrawn: {', '.join(p.name for p in redrawn) or 'none'}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter MobileNetV2 runs")
    parser.add_argument("--only", nargs="*", help="run only these examples")
    args = parser.parse_args(argv)
    ok = True
    runs = [(name, extra) for name, extra in examples(args.quick) if not args.only or name in args.only]
    say(f"running {len(runs)} tutorial programs, each in its own process (output in out/<name>.txt)"
        + ("" if args.only else ", then the figures of imgs/"))
    for name, extra in runs:
        ok &= run_example(name, extra)
    if not args.only:
        ok &= make_figures()
    say(f"outputs in {OUT.relative_to(ROOT)}/, figures in imgs/" if ok else "some steps failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
