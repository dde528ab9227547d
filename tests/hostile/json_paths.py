"""Where a fuzz test can cut into a parsed JSON file: every path of keys and indices down its tree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def paths_of(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """``()`` for the whole value, then ``(key,)``, ``(key, index)``... for every dict entry and list item."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths_of(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths_of(v, prefix + (i,))
