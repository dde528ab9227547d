"""The errors a checkpoint that cannot be loaded raises, and the limits that keep a hostile one small."""

from __future__ import annotations

import re


class CheckpointError(ValueError):
    """A checkpoint directory that is damaged, incomplete, hostile or not toynet's. The message names the
    file, the entry in it and what was expected there."""


class DeviceUnavailableError(CheckpointError, RuntimeError):
    """A well-formed checkpoint whose tensors were saved on a device this machine does not have (a
    ``RuntimeError`` as well, as PyTorch raises): pass ``map_location="cpu"`` to load it elsewhere."""


#: Names of arrays, nodes, states and files read from a checkpoint. Anything else is refused, so a name
#: cannot hold a line break, a quote or a path separator wherever it goes (plan.source, messages, paths).
NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")

MAX_DEPTH = 64                      # nested containers in a state dict, and in attribute values
MAX_DIMS = 32                       # dimensions of one array
MAX_ELEMENTS = 2**31                # elements of one array or value
MAX_STRUCTURE_BYTES = 64 * 2**20    # structure.json
MAX_MANIFEST_BYTES = 2**20          # manifest.json
MAX_NPY_HEADER = 10_000             # the header of one .npy member (NumPy's own limit)


def is_name(value: object) -> bool:
    return isinstance(value, str) and NAME.fullmatch(value) is not None


def shape_error(value: object) -> str | None:
    """What is wrong with ``value`` as a saved shape (a list of sizes), or None when it is one."""
    if not isinstance(value, list) or len(value) > MAX_DIMS:
        return f"a list of at most {MAX_DIMS} sizes"
    elements = 1
    for d in value:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_ELEMENTS:
            return f"a list of sizes from 0 to {MAX_ELEMENTS}"
        elements *= d
    if elements > MAX_ELEMENTS:
        return f"at most {MAX_ELEMENTS} elements"
    return None


def short(value: object, limit: int = 80) -> str:
    """``repr`` of a value read from a file, cut short for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
