"""Fixtures shared by the hostile tests."""

from __future__ import annotations

import signal
import threading

import pytest


@pytest.fixture
def sigint():
    """Python's default SIGINT handler for the test (a background test run may have SIGINT ignored)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be set in the main thread")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
