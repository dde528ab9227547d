"""Where the user's code called into toynet: the source line each traced op is labelled with."""

from __future__ import annotations

import linecache
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_source(max_frames: int = 1) -> str:
    """Where the user's code called into toynet: ``file.py:12 in forward: y = self.fc(x)``.

    Frames inside the toynet package are skipped, so the location is the user's line, not ours.
    """
    frame = sys._getframe(1)
    found = []
    while frame is not None and len(found) < max_frames:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep) and not filename.startswith("<frozen"):
            line = linecache.getline(filename, frame.f_lineno).strip()
            # A notebook cell's code lives in a temporary file named by a hash: call it what it is.
            where = "cell" if "ipykernel_" in filename else os.path.basename(filename)
            found.append(f"{where}:{frame.f_lineno} in {frame.f_code.co_name}: {line}")
        frame = frame.f_back
    return " <- ".join(found)
