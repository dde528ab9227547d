"""What a learner reads to follow one training step stays small (issue 19), and the fast path stays apart.

``scripts/lesson_path.py`` traces the toynet lines one poly-fit step runs. On the lesson path
(``TOYNET_FAST=0``): an Eager step runs at most 200 distinct lines in at most 14 files; the first call of an
``nn.Graph`` (trace, differentiate, optimise, compile, run) at most 800 lines in at most 22 files; the files
that run hold at most 5,000 lines, none of them a giant; and no line under a ``fast/`` folder runs. On the
fast path the fast code does run. Each measure runs in a fresh interpreter, as a learner's would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "lesson_path.py"


def measure(fast: bool) -> dict:
    env = {**os.environ, "TOYNET_FAST": "1" if fast else "0"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300, check=True)
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def lesson() -> dict:
    return measure(fast=False)


def test_an_eager_step_reads_in_a_sitting(lesson):
    step = lesson["eager_step"]
    assert not lesson["fast"]
    assert step["lines"] <= 200 and step["files"] <= 14, step


def test_the_first_graph_call_reads_in_a_sitting(lesson):
    step = lesson["graph_first_call"]
    assert step["lines"] <= 800 and step["files"] <= 22, step


def test_the_files_that_run_are_small_and_none_is_a_giant(lesson):
    sizes = lesson["sizes"]
    assert sum(sizes.values()) == lesson["files_that_run"]["lines_in_them"] <= 5000, sorted(sizes.items(),
                                                                                         key=lambda kv: -kv[1])
    assert max(sizes.values()) <= 500


def test_the_lesson_path_runs_no_fast_code(lesson):
    assert lesson["fast_lines_run"] == 0
    assert not any("/fast/" in path for path in lesson["sizes"])


def test_a_later_graph_call_runs_the_plan_not_the_compiler(lesson):
    later = lesson["graph_later_call"]
    assert later["lines"] < lesson["graph_first_call"]["lines"] / 4, later
    # trace.py runs for the call's signature and compile.py for the plan's commit; nothing is traced again,
    # optimised or compiled.
    ran = lesson["details"]["graph_later_call"]
    assert not any(path.endswith(("passes/simplify.py", "passes/memory.py", "passes/__init__.py")) for path in ran)
    assert ran.get("toynet/static/compile.py", 0) <= 2, ran


def test_the_fast_path_runs_its_own_code():
    fast = measure(fast=True)
    assert fast["fast"] and fast["fast_lines_run"] > 0
    assert any("/fast/" in path for path in fast["sizes"])
