"""Shared fixtures. ``device`` runs a test on every device type toynet can use here."""

from __future__ import annotations

import pytest

import toynet as flow

DEVICES = ["cpu"]


@pytest.fixture(params=DEVICES)
def device(request):
    return flow.device(request.param)


@pytest.fixture(autouse=True)
def _seed():
    flow.manual_seed(0)
