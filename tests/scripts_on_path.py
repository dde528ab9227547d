"""The project's scripts (``scripts/figures.py``...) as modules for the tests: they are programs beside the
library, not part of it, so they are loaded from the scripts folder by path."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import figures  # noqa: E402,F401
