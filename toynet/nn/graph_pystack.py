"""The Python stack behind each traced op, as ``graph.debug(op_repr_with_py_stack=True)`` shows it.

While an ``nn.Graph`` traces, the stack at the moment an op is recorded *is* the user's code that made
it: ``build`` calling a module's ``forward`` calling ``self.fc(x)``. :func:`capture` keeps the innermost
frames of it (skipping toynet's own unless asked), and :func:`stack_text` writes them as OneFlow does,
outermost first::

    Python Stack[-2]: 'build' at 'train.py': line 40; Python Stack[-1]: 'forward' at 'net.py': line 12;  ... more

Ops made by toynet rather than by a line of user code (the gradient of an op, an optimizer's update)
keep the tracer's own label ("grad of model-linear-0"): their stack would only show ``loss.backward()``.
"""

from __future__ import annotations

import os
import re
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Frame = tuple[str, int, str]  # where, line, function


def _where(filename: str) -> tuple[str, bool]:
    """A frame's file as shown (toynet's own relative to the package, others by name), and whether it is
    toynet's."""
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep):
        return os.path.relpath(path, os.path.dirname(_PACKAGE_DIR)), True
    return ("cell" if "ipykernel_" in filename else os.path.basename(filename)), False


def capture(depth: int, only_user: bool = True) -> tuple[tuple[Frame, ...], bool]:
    """The ``depth`` innermost frames of the stack that called the caller (the debug hook asking is no part
    of the story), only the user's when ``only_user`` (toynet's own skipped), innermost first, and whether
    more frames lie beyond them."""
    frames: list[Frame] = []
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<frozen"):
            where, ours = _where(filename)
            if not (ours and only_user):
                if len(frames) == depth:
                    return tuple(frames), True
                frames.append((where, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(frames), False


def stack_text(frames: tuple[Frame, ...], more: bool) -> str:
    shown = [f"Python Stack[-{k + 1}]: '{function}' at '{where}': line {line}"
             for k, (where, line, function) in enumerate(frames)]
    return "; ".join(reversed(shown)) + ";" + ("  ... more" if more else "")


_SOURCE_FRAME = re.compile(r"^(.+):(\d+) in ([^:]+): ")


def source_text(source: str) -> str:
    """The tracer's one-frame label of an op (``"net.py:12 in forward: y = self.fc(x)"``) as a stack, for
    ops traced before the stacks were asked for; any other label as it is."""
    match = _SOURCE_FRAME.match(source)
    if match is None:
        return source
    where, line, function = match.groups()
    return stack_text(((where, int(line), function),), False)
