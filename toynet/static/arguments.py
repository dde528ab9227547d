"""The call interface of a graph: what a compiled plan depends on, and the shape of its inputs and outputs.

``build`` may take and return any nesting of tuples, lists and dicts around tensors. A compiled plan
works on flat lists of arrays, so calls are flattened on the way in and outputs rebuilt on the way out;
and the *signature* of a call (every tensor's shape, dtype and device, every other value) says which
compiled plan fits it, so a call with new shapes compiles a new plan instead of failing.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor


def signature(args: tuple, kwargs: dict) -> Any:
    """What a compiled plan depends on: every tensor's shape, dtype and device, every other value."""
    if not kwargs and all(type(a) is Tensor and a.node is None for a in args):
        # The common call, graph(x, y): cheap enough to run on every call.
        return tuple((a.array.shape, a.array.dtype, a.device) for a in args)

    def sig(v: Any) -> Any:
        if isinstance(v, Tensor):
            return ("T", tuple(v.shape), v.dtype.name, str(v.device))
        if isinstance(v, (tuple, list)):
            return (type(v).__name__,) + tuple(sig(x) for x in v)
        if isinstance(v, dict):
            return ("dict",) + tuple((k, sig(x)) for k, x in v.items())
        try:
            hash(v)
            return ("V", v)
        except TypeError:
            return ("V", repr(v))
    return sig((args, kwargs))


def tensors_in(value: Any) -> list[Tensor]:
    """Every tensor in a nesting of tuples, lists and dicts, in order (a call's graph inputs)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def flatten_output(value: Any) -> tuple[list[Tensor], Any]:
    """Tensors of build()'s return value, and a structure to rebuild it from the outputs."""
    tensors: list[Tensor] = []

    def walk(v: Any) -> Any:
        if isinstance(v, Tensor):
            tensors.append(v)
            return ("T",)
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, [walk(x) for x in v])
        if isinstance(v, dict):
            return ("dict", [(k, walk(x)) for k, x in v.items()])
        return ("V", v)
    return tensors, walk(value)


def rebuild_output(structure: Any, tensors: Any) -> Any:
    """build()'s return value again, from :func:`flatten_output`'s structure and an iterator of tensors."""
    kind = structure[0]
    if kind == "T":
        return next(tensors)
    if kind == "V":
        return structure[1]
    if kind == "dict":
        return {k: rebuild_output(s, tensors) for k, s in structure[1]}
    items = [rebuild_output(s, tensors) for s in structure[1]]
    return tuple(items) if kind == "tuple" else items
