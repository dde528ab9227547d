"""Shared fixtures. ``device`` runs a test on every device type toynet can use here."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

import strict_xp
import toynet as flow

# Property tests draw the same examples on every run (a commit that passes keeps passing: a failure is the
# code's, not the draw's); HYPOTHESIS_PROFILE=random draws new ones, to look for bugs on demand.
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

# "strict" is a stand-in GPU (tests/strict_xp.py): NumPy underneath, but its arrays refuse implicit
# conversion to NumPy as CuPy's do, so a stray `numpy` call on device data fails here as on a GPU.
flow.backend.register_device_type("strict", strict_xp.array_module)

DEVICES = ["cpu", "strict"]

#: The order of the run (scripts/test.sh runs it on two workers with `--dist worksteal`: each starts on its half
#: of this order, and one that runs out takes over the other's queued tests from the end).
#:
#: First, the tests that send their own process a SIGINT: before any Hypothesis test has run in that worker.
#: Hypothesis then adds a garbage-collector callback to the process, and a KeyboardInterrupt raised while it
#: runs is lost ("Exception ignored in ... gc_callback"), which fails the test (a lost SIGINT).
SIGINT_TO_SELF = (
    "tests/hostile/test_grad_mode_interrupt.py",
    "tests/hostile/test_optimizer_step_atomic.py",
    "tests/hostile/test_graph_step_atomic.py::test_deferred_interrupt",
)
#: Last, the slow tests, by node-id prefix, with their rough seconds on a busy two-core machine
#: (`pytest --durations=40`), longest first: the progress moves through the quick tests, and the slow ones end
#: the run on both cores. A test matches its longest prefix; every other test keeps its place in between.
SLOW = {
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[09": 150,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[06": 110,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[05": 80,
    "tests/test_site_browser.py": 70,          # builds the site, then reads it in Chromium
    "tests/test_docs.py": 50,                  # builds the site
    "tests/test_figures.py": 45,               # draws every figure twice
    "tests/hostile/test_load_state_dict.py": 45,
    "tests/hostile/test_optimizer_step_atomic.py::test_random_sigints": 45,  # (to a child process)
    "tests/hostile/test_crash_consistency.py": 40,
    "tests/hostile/test_cifar_archive.py": 40,
    "tests/test_mobilenet.py": 40,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[08": 25,
    "tests/hostile/test_checkpoint_files.py": 20,
    "tests/test_graph_properties.py": 20,
    "tests/hostile/test_plan_cache.py": 15,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom": 10,
    "tests/test_recording_log.py": 10,
    "tests/hostile/test_inplace.py": 10,
    "tests/test_notebook_numbers.py": 10,
    "tests/hostile/test_graph_step_atomic.py::test_random_ctrl_c": 8,  # (to a child process)
    "tests/test_linked_view.py": 5,
    "tests/test_distributed.py": 35,           # starts two- and three-process runs
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[10": 15,
}


def _place(nodeid: str) -> tuple[int, int]:
    slow = [prefix for prefix in SLOW if nodeid.startswith(prefix)]
    if slow:
        return 2, -SLOW[max(slow, key=len)]
    return (0, 0) if nodeid.startswith(SIGINT_TO_SELF) else (1, 0)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The tests that interrupt themselves first, then the quick tests in their usual order, then the slow
    ones, longest first (a stable sort: the tests of one file stay together and in order)."""
    place = {item.nodeid: _place(item.nodeid) for item in items}
    items.sort(key=lambda item: place[item.nodeid])


@pytest.fixture(params=DEVICES)
def device(request):
    return flow.device(request.param)


@pytest.fixture(autouse=True)
def _seed():
    flow.manual_seed(0)


@pytest.fixture
def fast_path():
    """Run a test on the fast path (what TOYNET_FAST=1 selects), whatever the suite runs on."""
    with flow.set_fast_path(True):
        yield


@pytest.fixture
def lesson_path():
    """Run a test on the lesson path (what TOYNET_FAST=0 selects), whatever the suite runs on."""
    with flow.set_fast_path(False):
        yield
