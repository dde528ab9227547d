"""The call interface of a graph: the one walk over nested call arguments, and what a compiled plan depends on.

``build`` may take and return any nesting of tuples, lists and dicts around tensors. A compiled plan
works on flat lists of arrays, so a call's arguments are flattened on the way in and ``build``'s result
is rebuilt from the plan's flat outputs on the way out. Everything that looks at nested arguments goes
through the one pair here::

    leaves, spec = flatten(((x, y), {"k": 2}))
    # leaves: [x, y, 2]                              every non-container value, in order
    # spec:   ("tuple", (("tuple", ("T", "T")), ("dict", (("k", ("V", 2)),))))
    unflatten(spec, iter([x2, y2]))                  # ((x2, y2), {"k": 2})

The spec is made of tuples only, so it can be hashed (a plan cache key, see :func:`signature`) and saved
with a deployed graph. It keeps every non-tensor value, ``("V", value)``, because a plan returns only
tensors: ``unflatten`` needs just the spec and the tensors.
"""

from __future__ import annotations

from typing import Any, Iterator

from ..tensor import Tensor

#: A tensor's place in a spec; :func:`unflatten` fills it with the next tensor it is given.
TENSOR = ("T",)


def flatten(value: Any) -> tuple[list, Any]:
    """Every leaf of a nesting of tuples, lists and dicts (tensors and other values, in order), and the
    spec that :func:`unflatten` rebuilds the nesting from."""
    leaves: list = []
    return leaves, _walk(value, leaves)


def _walk(value: Any, leaves: list) -> Any:
    # A plain recursive function and list comprehensions: flatten runs on every call of a graph whose
    # inputs are new tensors (a data loader's batches), so it is kept as cheap as Python allows.
    if isinstance(value, Tensor):
        leaves.append(value)
        return TENSOR
    if isinstance(value, tuple):
        return ("tuple", tuple([_walk(v, leaves) for v in value]))
    if isinstance(value, list):
        return ("list", tuple([_walk(v, leaves) for v in value]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, _walk(v, leaves)) for k, v in value.items()]))
    leaves.append(value)
    return ("V", value)


def unflatten(spec: Any, tensors: Iterator[Tensor]) -> Any:
    """The nesting :func:`flatten` described, with the next of ``tensors`` in each tensor's place.

    (A spec read back from a graph saved by an older toynet may hold lists where this one has tuples.)"""
    kind = spec[0]
    if kind == "T":
        return next(tensors)
    if kind == "V":
        return spec[1]
    if kind == "dict":
        return {k: unflatten(s, tensors) for k, s in spec[1]}
    items = [unflatten(s, tensors) for s in spec[1]]
    return tuple(items) if kind == "tuple" else items


def signature(leaves: list, spec: Any) -> Any:
    """What a compiled plan depends on: the nesting, every other value, and each tensor's shape, dtype and
    device. A call with the same signature reuses the plan; a new one compiles another."""
    key = (spec, tuple([(t.shape, t.dtype, t.device) for t in leaves if isinstance(t, Tensor)]))
    try:
        hash(key)
    except TypeError:  # an unhashable value among the arguments (a NumPy array, a set): compare its repr
        key = (repr(spec), key[1])
    return key
