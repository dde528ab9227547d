"""``toynet.utils.global_view``: ``to_global`` and ``to_local`` for whole state dicts, as OneFlow has them.

``x.to_global(placement=, sbp=)`` converts one tensor. Saving and loading a large model in parts (OneFlow's
"Distributed Saving and Loading of Large Models" page) needs the same for a whole *structure*: a module's
state dict, an ``nn.Graph``'s (dicts inside a dict, with numbers among the tensors), any nesting of lists,
tuples and dicts::

    placement = toynet.placement("cpu", ranks=[0, 1])
    parts = {"weight": toynet.ones(3, 2), "bias": toynet.zeros(3)}        # this process's part of each
    whole = toynet.utils.global_view.to_global(parts, placement=placement, sbp=toynet.sbp.split(0))
    whole["weight"].shape                                                 # (6, 2): both processes' parts
    mine = toynet.utils.global_view.to_local(whole)                       # back to the parts

The structure comes back the same (a dict stays a dict, an ``OrderedDict`` an ``OrderedDict``, a tuple a
tuple); each tensor is converted as ``Tensor.to_global`` / ``Tensor.to_local`` convert it, and a tensor that
appears twice is converted once (it is still one tensor afterwards). Anything else in it (numbers, strings,
``None``, NumPy arrays) is kept as it is; a warning lists where, unless ``warn_on_non_tensor_leaf=False``.

``sbp`` may be a function, for the tensors that need a layout of their own: OneFlow calls it as
``sbp(input, tensor)`` with the *whole input* and one of its tensors, so it can recognise a tensor by
identity (``tensor is state_dict["System-Train-TrainStep"]``) and return, say, broadcast for it and
``split(0)`` for the rest.

Every process calls these functions together, with the same structure (its own parts in it): converting a
local tensor to a global one and boxing are collectives. ``to_global`` first compares the structures the
processes passed (one small collective), so a process that passed something else (``None``, a dict with
other keys) is an error naming both, not a hang. When ``placement`` holds some of the processes only (the
page's ``model_file_placement``), the others may pass anything, usually ``None``: as in OneFlow, the
placement's first rank sends them its structure, with empty tensors in place of its own, and they take part
in the conversion with that.

OneFlow's ``global_mode`` (a scope in which creation ops make global tensors) is not here: it changes how
every creation op and ``.device`` behave, not just these two functions.
"""

from __future__ import annotations

import copy as _copy
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from ..distributed import comm
from ..distributed import sbp as sbp_kinds
from .. import backend
from ..distributed.placement import placement as Placement
from ..dynamic.creation import zeros
from ..dynamic.tensor import Tensor

__all__ = ["to_global", "to_local"]

ROOT = "input"   # how paths in messages start: input['module']['weight']


def to_global(input: Any, placement: Any = None, sbp: Any = None, warn_on_non_tensor_leaf: bool = True, *,
              copy: bool = False, check_meta: bool = True, grad_sbp: Any = None) -> Any:
    """Convert the tensor(s) in ``input`` (a tensor, ``None``, or lists, tuples and dicts nesting them, such
    as a state dict) to global tensors; return the same structure.

    * A local tensor becomes this process's part of a global tensor laid out as ``sbp`` over ``placement``
      (both are needed). A global tensor is boxed to ``sbp`` (one of ``placement``/``sbp`` is needed).
      The tensors in ``input`` must be all local or all global.
    * ``sbp``: an SBP (``toynet.sbp.split(0)``), a tuple of one, or a function ``sbp(input, tensor)``
      returning one for each tensor (``input`` is the whole structure passed in).
    * Non-tensor leaves stay as they are; ``warn_on_non_tensor_leaf`` says whether to warn about them.
    * ``copy=True``: a local tensor's data is copied, so the global tensor shares no memory with it.
      ``check_meta`` is accepted for OneFlow's code: toynet always checks the parts' shapes.
    """
    if grad_sbp is not None:
        raise NotImplementedError("to_global(grad_sbp=...) is not supported by toynet: the gradient of a global "
                                  "tensor is laid out as the tensor is; leave grad_sbp out")
    _check_arguments(placement, sbp)
    _check_tensors(input, placement, sbp)
    if comm.world_size() > 1 and (placement is not None or sbp is not None):
        agreed = _agree(input, placement)
        if agreed is not input:        # a process outside the placement: it took the first rank's structure
            input = agreed
            _check_tensors(input, placement, sbp)

    converted: dict[int, Tensor] = {}   # id(tensor) -> its global tensor: a tensor there twice stays one tensor

    def convert(t: Tensor, path: str) -> Tensor:
        if id(t) not in converted:
            layout = sbp
            if callable(sbp):
                layout = sbp(input, t)
                try:
                    sbp_kinds.one(layout)
                except (TypeError, NotImplementedError) as error:
                    raise type(error)(f"to_global: the sbp function {_name(sbp)} returned {layout!r} for {path} "
                                      f"({_shape(t)}): {error}") from None
            source = t.clone() if copy and not t.is_global else t
            try:
                converted[id(t)] = source.to_global(placement=placement, sbp=layout)
            except (TypeError, ValueError, RuntimeError, NotImplementedError) as error:
                hint = "" if callable(sbp) or not isinstance(error, ValueError) or path == ROOT else (
                    "; give some tensors a layout of their own with sbp=a function (input, tensor) -> SBP")
                raise _with_path(error, f"to_global of {path} ({_shape(t)}, sbp {layout!r})", hint) from error
        return converted[id(t)]

    out, others = _map(input, convert)
    if others and warn_on_non_tensor_leaf:
        _warn("to_global", others)
    return out


def to_local(input: Any, *, copy: bool = False, warn_on_non_tensor_leaf: bool = True) -> Any:
    """This process's part of each global tensor in ``input`` (a tensor, or lists, tuples and dicts nesting
    them, such as a state dict of global tensors); returns the same structure. ``copy=True`` copies each part
    (otherwise it shares memory with the global tensor, as ``Tensor.to_local`` does). Local tensors are
    kept, with a warning; other leaves are kept too, with a warning unless ``warn_on_non_tensor_leaf=False``.
    No communication: each process may call it on its own."""
    converted: dict[int, Tensor] = {}
    local: list[str] = []

    def convert(t: Tensor, path: str) -> Tensor:
        if not t.is_global:
            local.append(path)
            return t
        if id(t) not in converted:
            part = t.to_local()
            converted[id(t)] = part.clone() if copy else part
        return converted[id(t)]

    out, others = _map(input, convert)
    if local:
        warnings.warn(f"to_local: {_listed(local)} {'is a local tensor' if len(local) == 1 else 'are local tensors'}"
                      " already, kept as it is (to_local takes the parts of global tensors)", UserWarning,
                      stacklevel=2)
    if others and warn_on_non_tensor_leaf:
        _warn("to_local", others)
    return out


# ------------------------------------------------------------------------------------------ arguments


def _check_arguments(placement: Any, sbp: Any) -> None:
    """Before any communication: the same checks on every process, so all raise or none does."""
    if placement is not None and not isinstance(placement, Placement):
        raise TypeError(f"to_global: placement must be a toynet.placement, e.g. toynet.placement('cpu', "
                        f"ranks=[0, 1]); got {placement!r}")
    if sbp is None or callable(sbp):
        return
    if isinstance(sbp, (tuple, list)) and any(callable(s) for s in sbp):
        raise TypeError(f"to_global: sbp={sbp!r}: a function goes alone, sbp=get_sbp, not in a tuple")
    try:
        sbp_kinds.one(sbp)
    except TypeError:
        raise TypeError(f"to_global: sbp must be an SBP (toynet.sbp.split(0), toynet.sbp.broadcast, "
                        f"toynet.sbp.partial_sum), a tuple of one, or a function (input, tensor) -> SBP; got "
                        f"{sbp!r}") from None


def _check_tensors(input: Any, placement: Any, sbp: Any) -> None:
    """The tensors in ``input`` are all local (then placement and sbp are both given) or all global (then one
    of them is)."""
    leaves = list(_tensor_leaves(input))
    kinds = {t.is_global for _, t in leaves}
    if len(kinds) > 1:
        local = next(p for p, t in leaves if not t.is_global)
        glob = next(p for p, t in leaves if t.is_global)
        raise ValueError(f"to_global: the tensors in the input must be all local or all global, but {local} is "
                         f"local and {glob} is global; convert them in two calls")
    if leaves and kinds == {False} and (placement is None or sbp is None):
        raise TypeError(f"to_global: the input holds local tensors ({leaves[0][0]}...): making them global needs "
                        f"both placement= and sbp=, e.g. to_global(state_dict, placement=toynet.placement('cpu', "
                        f"ranks=[0, 1]), sbp=toynet.sbp.split(0))")
    if leaves and kinds == {True} and placement is None and sbp is None:
        raise TypeError("to_global: the input holds global tensors; say what to change: placement=, sbp= or both")


def _shape(t: Tensor) -> str:
    return f"{'shape' if t.is_global else 'local shape'} {tuple(t.shape)}"


def _name(f: Callable) -> str:
    return getattr(f, "__qualname__", None) or repr(f)


def _with_path(error: Exception, where: str, hint: str = "") -> Exception:
    """``error`` again, its message prefixed with where it happened (same type, so callers catch it alike)."""
    try:
        return type(error)(f"{where}: {error}{hint}")
    except TypeError:        # an exception class with another constructor: keep it, say where in a note
        error.add_note(where + hint)
        return error


# ------------------------------------------------------------------------------------------ walking


def _key(key: Any) -> str:
    return f"[{key!r}]"


def _children(value: Any) -> Iterator[tuple[Any, Any]] | None:
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple)):
        return iter(enumerate(value))
    return None


def _tensor_leaves(value: Any, path: str = ROOT, open_: set | None = None) -> Iterator[tuple[str, Tensor]]:
    if isinstance(value, Tensor):
        yield path, value
        return
    children = _children(value)
    if children is None:
        return
    open_ = set() if open_ is None else open_
    if id(value) in open_:
        raise ValueError(f"to_global/to_local: {path} contains itself; the input must be a tree of lists, tuples "
                         f"and dicts")
    open_.add(id(value))
    for key, child in children:
        yield from _tensor_leaves(child, path + _key(key), open_)
    open_.discard(id(value))


def _map(value: Any, convert: Callable[[Any, str], Any], leaf: type = Tensor) -> tuple[Any, list[tuple[str, str]]]:
    """``value`` with ``convert(tensor, path)`` applied to each tensor (each ``leaf``), the containers rebuilt
    with their types; and the (path, type name) of the other leaves."""
    others: list[tuple[str, str]] = []
    open_: set[int] = set()

    def walk(v: Any, path: str) -> Any:
        if isinstance(v, leaf):
            return convert(v, path)
        children = _children(v)
        if children is None:
            others.append((path, type(v).__name__))
            return v
        if id(v) in open_:
            raise ValueError(f"to_global/to_local: {path} contains itself; the input must be a tree of lists, "
                             f"tuples and dicts")
        open_.add(id(v))
        items = [(k, walk(child, path + _key(k))) for k, child in children]
        open_.discard(id(v))
        return _rebuilt(v, items)

    return walk(value, ROOT), others


def _rebuilt(original: Any, items: list[tuple[Any, Any]]) -> Any:
    """A container like ``original`` holding ``items``."""
    if isinstance(original, dict):
        if type(original) in (dict, OrderedDict):
            return type(original)(items)
        out = _copy.copy(original)      # a dict subclass (defaultdict...): keep its type and settings
        out.clear()
        out.update(items)
        return out
    values = [v for _, v in items]
    if isinstance(original, tuple):
        if hasattr(original, "_fields"):            # a namedtuple
            return type(original)(*values)
        return tuple(values) if type(original) is tuple else type(original)(values)
    return values if type(original) is list else type(original)(values)


def _listed(paths: list[str], most: int = 5) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _warn(function: str, others: list[tuple[str, str]]) -> None:
    described = [f"{path} ({kind})" if path != ROOT else f"the input ({kind})" for path, kind in others]
    warnings.warn(f"{function}: {len(others)} non-tensor leaf(s) kept as they are: {_listed(described)} "
                  f"(pass warn_on_non_tensor_leaf=False to silence this)", UserWarning, stacklevel=3)


# ------------------------------------------------------------------------------------------ agreeing


class _Slot:
    """Where a tensor sits in the structure the first rank of a placement sends to the processes outside it."""

    __slots__ = ("dtype", "ndim")

    def __init__(self, dtype: str, ndim: int):
        self.dtype, self.ndim = dtype, ndim


def _signature(value: Any) -> tuple:
    """What must be the same on every process: where the tensors are, and whether they are global."""
    if value is None:
        return ("None",)
    return tuple((path, "global" if t.is_global else "local") for path, t in _tensor_leaves(value))


def _skeleton(value: Any) -> Any:
    """``value`` with each tensor replaced by a :class:`_Slot` (what a process outside the placement gets)."""
    out, _ = _map(value, lambda t, path: _Slot(t.dtype.name, t.ndim))
    return out


def _filled(skeleton: Any) -> Any:
    """The skeleton with an empty tensor in each slot, of the same dtype and number of dimensions (as OneFlow
    does: every process has a tensor object there, so an ``sbp`` function that compares tensors by identity
    works everywhere, and ``split(-1)`` means the same dimension everywhere)."""
    out, _ = _map(skeleton, lambda slot, path: zeros(*([0] * slot.ndim), dtype=backend.to_dtype(slot.dtype)), _Slot)
    return out


def _agree(input: Any, placement: Any) -> Any:
    """One collective before converting: every process's structure, compared; and for a placement on some
    of the processes only, the structure of its first rank for the others (who take it as their input)."""
    rank, size = comm.rank(), comm.world_size()
    subset = placement is not None and placement.flat_ranks() != tuple(range(size))
    src = placement.flat_ranks()[0] if subset else None
    mine = _signature(input)
    sending = subset and rank == src and mine != ("None",) and all(kind == "local" for _, kind in mine)
    gathered = comm.all_gather_object((mine, _skeleton(input) if sending else None))
    keep = range(size)
    if subset:
        src_signature, skeleton = gathered[src]
        if skeleton is not None or src_signature == ("None",):   # the first rank's input is local: others take it
            keep = [r for r in range(size) if r in placement.flat_ranks()]
            if rank not in keep:
                input = _filled(skeleton)
    first = keep[0]
    for r in keep:
        if gathered[r][0] != gathered[first][0]:
            raise ValueError("to_global: every process must pass the same structure (the same keys, with a tensor "
                             "at the same places: each its own part of it), but "
                             + _difference(first, gathered[first][0], r, gathered[r][0])
                             + ("" if subset else "; a process may pass None only when the placement leaves it out"))
    return input


def _difference(a: int, sig_a: tuple, b: int, sig_b: tuple) -> str:
    def said(r: int, sig: tuple) -> str:
        return f"rank {r} passed None" if sig == ("None",) else f"rank {r} has {len(sig)} tensor(s)"

    if ("None",) in (sig_a, sig_b):
        return f"{said(a, sig_a)} and {said(b, sig_b)}"
    def at(r: int, kind: str | None) -> str:
        return f"rank {r} has {'a ' + kind + ' tensor' if kind else 'no tensor'} there"

    where_a, where_b = dict(sig_a), dict(sig_b)
    for path in list(where_a) + list(where_b):
        if where_a.get(path) != where_b.get(path):
            return f"at {path} {at(a, where_a.get(path))} and {at(b, where_b.get(path))}"
    return f"{said(a, sig_a)} and {said(b, sig_b)}, in another order"
