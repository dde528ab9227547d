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
