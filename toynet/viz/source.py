"""Which *statement* a source line belongs to, so that a recording can make one step per statement.

Python reports progress line by line, but a statement can span several lines (and CPython 3.11+ may
report a line of a multi-line call more than once), and one line can run several ops. Parsing the
file once with :mod:`ast` gives every statement's line range; the innermost statement containing a
line is the one running. A compound statement (``for``, ``if``, ``with``) counts only its header, so
the statements in its body stay separate steps.
"""

from __future__ import annotations

import ast
import linecache
import re
import textwrap


class StatementIndex:
    """The statements of one source file (or notebook cell), parsed once."""

    def __init__(self, filename: str):
        self.lines = linecache.getlines(filename)
        self.spans: list[tuple[int, int]] = []
        self._found: dict[int, tuple[int, int]] = {}
        try:
            tree = ast.parse("".join(self.lines))
        except (SyntaxError, ValueError):
            return  # unknown source: every line is its own statement
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                end = node.end_lineno or node.lineno
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    decorators = getattr(body[0], "decorator_list", [])
                    first = min([body[0].lineno] + [d.lineno for d in decorators])
                    end = max(node.lineno, first - 1)  # a compound statement is its header
                self.spans.append((node.lineno, end))

    def span(self, lineno: int) -> tuple[int, int]:
        """``(first line, last line)`` of the innermost statement that contains ``lineno``."""
        if lineno not in self._found:
            best, best_size = (lineno, lineno), None
            for start, end in self.spans:
                if start <= lineno <= end and (best_size is None or end - start < best_size):
                    best, best_size = (start, end), end - start
            self._found[lineno] = best
        return self._found[lineno]

    def text(self, span: tuple[int, int]) -> str:
        """The source text of the lines in ``span``, dedented, without a trailing newline, and without
        comments meant for tools (``# noqa``, ``# type: ignore``, ``# pragma``): noise in a caption."""
        lines = [_PRAGMA.sub("", line.rstrip("\n")) for line in self.lines[span[0] - 1:span[1]]]
        return textwrap.dedent("\n".join(lines)).strip()


_PRAGMA = re.compile(r"\s*#\s*(?:noqa|type:\s*ignore|pragma)\b.*$")
