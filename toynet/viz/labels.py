"""Short texts for node labels: types (``f32[1, 3]``), small tensors' values, Python numbers."""

from __future__ import annotations

from typing import Any

from .. import backend
from ..static.ir import short_dtype

#: Tensors with at most this many elements may show their values.
MAX_VALUES = 16


def type_text(shape: Any, dtype: Any) -> str:
    """``f32[1, 3]``: the same spelling as the static graph's text form."""
    return f"{short_dtype(dtype)}[{', '.join(str(d) for d in shape)}]"


def number_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return repr(value)


def values_lines(host_values: Any, prefix: str = "") -> list[str]:
    """A nested list as lines, one matrix row a line: ``[[1, 0.5, -2],`` / `` [3, 4, 5]]``."""
    if not isinstance(host_values, list):
        return [prefix + number_text(host_values)]
    pad = " " * len(prefix)
    return [(prefix if i == 0 else pad) + row for i, row in enumerate(_rows(host_values))]


def _flat(values: list) -> str:
    return "[" + ", ".join(_flat(v) if isinstance(v, list) else number_text(v) for v in values) + "]"


def _rows(values: list) -> list[str]:
    """Split the outermost list so that each innermost row sits on its own line."""
    if not values or not isinstance(values[0], list):
        return [_flat(values)]
    inner = [_rows(v) for v in values]
    lines = []
    for i, block in enumerate(inner):
        for j, line in enumerate(block):
            lead = "[" if (i == 0 and j == 0) else " "
            tail = "]" if (i == len(inner) - 1 and j == len(block) - 1) else ("," if j == len(block) - 1 else "")
            lines.append(lead + line + tail)
    return lines


def tensor_values(tensor: Any, limit: int = MAX_VALUES) -> list[str] | None:
    """Lines showing an eager tensor's values, or None if it is lazy or has more than ``limit`` elements."""
    if tensor is None or getattr(tensor, "array", None) is None or tensor.numel() > limit:
        return None
    return values_lines(tensor.tolist())


def array_values(array: Any, device: Any, limit: int = MAX_VALUES) -> list[str] | None:
    """The same for a raw array (a static graph's constant)."""
    if array is None or getattr(array, "size", limit + 1) > limit:
        return None
    return values_lines(backend.to_numpy(array, device).tolist())
