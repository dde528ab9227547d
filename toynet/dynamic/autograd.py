"""Reverse-mode automatic differentiation over the graph Eager mode records as it runs.

Every op applied to a tensor that requires grad leaves a :class:`GradFn` on its result: the op, its
inputs and attributes. Those records form a DAG from the loss back to the leaves, and :func:`backward`
walks it **once, in reverse topological order, with an explicit stack**.

Why not the short recursive walk of the seed article (``p.grad += ...; p.backward()`` for each
parent)? Two reasons:

* **It double-counts.** When a tensor feeds two consumers (``z = y * y`` or a residual block), the
  recursive walk pushes the *partial* gradient of the first consumer further down before the second
  consumer has added its share, and then pushes again: everything below a shared node receives its
  gradient more than once. Walking in topological order first *finishes* the gradient of a node
  (sums the contributions of all its consumers) and only then propagates it, exactly once.
* **It overflows the stack.** Python allows about 1,000 nested calls; a 100,000-op chain (an RNN
  unrolled in time, a long loop) would crash. The walk here is iterative.

The same engine runs in Graph mode: there the tensors are lazy, so each ``vjp`` rule *records*
backward nodes instead of computing numbers. Symbolic differentiation is this engine run on lazy
tensors.

**In-place writes** (``x.mul_(2)``, ``x[0] = 1``) would silently change what a vjp reads. As in PyTorch,
each write is counted on the :class:`Version` of the tensor's memory, and backward refuses a vjp whose
saved tensors were written after its op ran. To keep the forward pass cheap, a record notes only one
global :data:`clock` of writes (``GradFn.epoch``); each write stamps the clock on its Version, and backward
checks a record only if the clock moved since its op ran.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .. import mode
# Grad mode lives in toynet.mode (every layer reads it); toynet.autograd.no_grad is kept as in PyTorch.
from ..mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .autograd_errors import mixed_float_error, modified_error, no_seed_error

clock = 0  # in-place writes so far, counted over all tensors (a GradFn's epoch is the clock when its op ran)
_records = itertools.count()  # numbers the records in the order their ops ran (GradFn.order)


@dataclass(slots=True, eq=False)
class GradFn:
    """The record of one op application, kept so that backward can run its vjp rule.

    ``inputs`` holds the input tensors (and Python numbers) exactly as the op received them. The output is
    held weakly (``output_ref``, and only by ops whose vjp reads it) so that no reference cycle tensor ->
    grad_fn -> tensor keeps activations alive. ``epoch`` is the write clock when the op ran: a saved tensor
    whose Version was stamped later has changed since (:func:`check_saved`). ``retains``: see
    ``Tensor.retain_grad``. ``order`` numbers the records in the order their ops ran. Records are compared and
    hashed by identity (backward keeps dicts of them).
    """

    op: Any
    inputs: tuple | None
    attrs: dict
    output_ref: Any
    epoch: int = field(default_factory=lambda: clock)
    retains: Any = None
    order: int = field(default_factory=_records.__next__)

    @property
    def name(self) -> str:
        return "".join(part.capitalize() for part in self.op.name.split("_")) + "Backward"

    @property
    def next_functions(self) -> tuple:
        """The grad_fns of this op's inputs (``None`` for leaves and numbers), as in PyTorch."""
        return tuple(getattr(x, "grad_fn", None) for x in self.inputs or ())

    def __repr__(self) -> str:
        return f"<{self.name}>"


# ------------------------------------------------------------------------------------------ backward


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Accumulate d(tensors)/d(leaf) into every leaf's ``.grad`` (what ``loss.backward()`` calls)."""
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    seeds = _seeds(tensors, grad_tensors, "backward")
    if any(t.node is not None for t in tensors):
        # Inside nn.Graph.build: the tracer runs this same engine on lazy tensors (symbolic autodiff).
        (mode.tracer or mode.current_tracer()).backward(tensors, seeds, retain_graph, create_graph)
        return
    run_backward(tensors, seeds, retain_graph=create_graph if retain_graph is None else retain_graph,
                 create_graph=create_graph)


def run_backward(roots: Sequence[Any], root_grads: Sequence[Any], *, retain_graph: bool, create_graph: bool,
                 leaves: Callable[[Any, Any, Any], None] | None = None, on_vjp: Any = None) -> None:
    """Propagate ``root_grads`` from ``roots`` to the leaves: one walk, each record's vjp run once, after
    every consumer of its output has added its share of the gradient.

    A leaf's gradient is accumulated into its ``.grad`` (``loss.backward()``), or handed to
    ``leaves(leaf, gradient, record)`` (``toynet.autograd.grad``). ``on_vjp(record)`` is told which record's
    vjp runs next (Graph mode names the backward nodes after it).
    """
    grads: dict[GradFn, Any] = {}      # record -> the gradient of its output, summed so far
    # record -> its output, for ops whose vjp reads it (exp, softmax...): a record holds its output only
    # weakly, so hold it here from the moment its gradient is known until its vjp has run.
    outputs: dict[GradFn, Any] = {}

    def receive(x: Any, g: Any, consumer: GradFn | None = None) -> None:
        """Gradient ``g`` reaches tensor ``x`` (from the vjp of ``consumer``): add it to what the record that
        made ``x`` has so far, or give it to the leaf."""
        fn = x.grad_fn
        if fn is not None:
            grads[fn] = g if fn not in grads else grads[fn] + g
            if fn.output_ref is not None:
                outputs[fn] = x
        elif leaves is not None:
            leaves(x, g, consumer)
        elif x.requires_grad:
            _accumulate_leaf(x, g, consumer, roots, create_graph)

    for root, g in zip(roots, root_grads):
        receive(root, g)
    previous, mode.grad_enabled = mode.grad_enabled, create_graph  # the vjps record only for create_graph
    try:
        for fn in reverse_topological_order([root.grad_fn for root in roots if root.grad_fn is not None]):
            grad = grads.pop(fn, None)
            if grad is None:
                continue  # no path from the roots carries a gradient here
            if fn.retains is not None:  # its output called retain_grad(): hand it the gradient
                fn.retains(grad)
            if fn.inputs is None:
                raise RuntimeError(
                    "backward through a graph a second time: its saved tensors were freed after the "
                    "first backward. Pass retain_graph=True to the first backward() to keep them.")
            output = outputs.pop(fn, None)
            if fn.epoch != clock:  # something was written in place since this op ran: was it saved here?
                check_saved(fn, output)
            if on_vjp is not None:
                on_vjp(fn)
            for x, g in zip(fn.inputs, fn.op.vjp(grad, fn.inputs, output, **fn.attrs)):
                if g is not None and getattr(x, "requires_grad", False):
                    receive(x, g, fn)
            if not retain_graph:
                fn.inputs = fn.output_ref = None
    finally:
        mode.grad_enabled = previous


def reverse_topological_order(roots: Sequence[GradFn]) -> list[GradFn]:
    """Every record reachable from ``roots``, each before the records that made its inputs: consumers before
    producers, the order backward needs. An op runs after the ops that made its inputs, so the records,
    numbered as their ops ran (``order``), are already in topological order: walk to find the ones reachable
    (with a stack, not recursion: a 100,000-op chain must not overflow Python's call stack), newest first."""
    seen, stack = set(roots), list(roots)
    while stack:
        for x in stack.pop().inputs or ():
            fn = getattr(x, "grad_fn", None)  # (inputs may be numbers)
            if fn is not None and fn not in seen:
                seen.add(fn)
                stack.append(fn)
    return sorted(seen, key=lambda fn: fn.order, reverse=True)


def post_order(roots: Iterable[Any], inputs_of: Callable[[Any], Iterable[Any]]) -> list[Any]:
    """Every node reachable from ``roots``, each one after all of its inputs (depth-first post order).

    Iterative, with an explicit stack, so a 100,000-op chain does not overflow Python's call stack.
    A node is appended once all its inputs are; the last root (and the last input) is explored first.
    The visualiser walks eager tensors with it too (toynet.viz.draw_eager).
    """
    order: list[Any] = []
    visited: set[int] = set()
    stack: list[tuple[Any, bool]] = [(node, False) for node in roots]
    while stack:
        node, inputs_done = stack.pop()
        if inputs_done:
            order.append(node)
        elif id(node) not in visited:
            visited.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in inputs_of(node) if id(child) not in visited)
    return order


def _accumulate_leaf(leaf: Any, g: Any, consumer: GradFn | None, roots: Sequence[Any], create_graph: bool) -> None:
    """Add ``g`` to the leaf's ``.grad``. A leaf owns its .grad, which users change in place (zero_(),
    clipping): a copy, never an array the vjp may have given to another leaf too (a + b gives both the same
    gradient). A lazy gradient (Graph mode) is a value in a graph, never written in place."""
    if consumer is not None and g.node is None and g.array.dtype != leaf.array.dtype:
        raise mixed_float_error(consumer, leaf, g, roots)
    g = g if create_graph else g.detach()
    leaf.grad = (g if g.node is not None else g.clone()) if leaf.grad is None else leaf.grad + g


def _seeds(tensors: Sequence[Any], grad_tensors: Any, what: str) -> list[Any]:
    """The gradient each root starts from: the one given, or 1 for a one-element tensor such as a loss.
    (This module sits below Tensor, so it never names the class: seeds are made by the tensors themselves,
    with ``new_full``/``new_tensor``: same dtype and device, and a lazy tensor's seed is a node in its graph.)"""
    given = grad_tensors if isinstance(grad_tensors, (list, tuple)) else [grad_tensors] * len(tensors)
    for i, (t, g) in enumerate(zip(tensors, given)):
        if not _is_tensor(t) or not t.requires_grad or (g is None and t.numel() != 1):
            raise no_seed_error(t, i, what)
    return [t.new_full(t.shape, 1) if g is None else _given(t, g, what) for t, g in zip(tensors, given)]


def _given(t: Any, g: Any, what: str) -> Any:
    """The gradient given for root ``t``, as a tensor like it."""
    g = g if _is_tensor(g) else t.new_tensor(g)
    if tuple(g.shape) != tuple(t.shape):
        raise RuntimeError(f"{what}: gradient of shape {tuple(g.shape)} given for a tensor of shape "
                           f"{tuple(t.shape)}; they must match")
    return g


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "grad_fn") and hasattr(x, "new_tensor")


def _keeping(results: list, i: int, then: Any) -> Callable[[Any], None]:
    """A record's ``retains`` hook that puts its gradient in ``results[i]``, then calls the hook it replaces."""
    def keep(g: Any) -> None:
        results[i] = g
        if then is not None:
            then(g)
    return keep


def _add(total: Any, g: Any) -> Any:
    return g if total is None else total + g



def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple:
    """Return d(outputs)/d(inputs) without touching any ``.grad``.

    With ``create_graph=True`` the returned gradients are themselves differentiable, because the vjp
    rules are written with toynet ops and were recorded like any other computation::

        x = toynet.tensor(2.0, requires_grad=True)
        y = x ** 3
        (dy,) = toynet.autograd.grad(y, x, create_graph=True)   # 3 x^2 = 12
        (d2y,) = toynet.autograd.grad(dy, x)                    # 6 x = 12
    """
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    root_grads = _seeds(outputs, grad_outputs, "autograd.grad")
    results: list[Any] = [None] * len(inputs)
    # An input that was computed gets the gradient its record receives (the hook retain_grad uses too);
    # a leaf input the gradient handed to leaves. No .grad is touched.
    hooks = {t.grad_fn: t.grad_fn.retains for t in inputs if t.grad_fn is not None}
    for i, t in enumerate(inputs):
        if t.grad_fn is not None:
            t.grad_fn.retains = _keeping(results, i, t.grad_fn.retains)
    leaf_index = {id(t): i for i, t in enumerate(inputs) if t.grad_fn is None}

    def collect(leaf: Any, g: Any, consumer: Any) -> None:
        if id(leaf) in leaf_index:
            results[leaf_index[id(leaf)]] = _add(results[leaf_index[id(leaf)]], g)
    try:
        run_backward(outputs, root_grads, retain_graph=create_graph if retain_graph is None else retain_graph,
                     create_graph=create_graph, leaves=collect)
    finally:
        for fn, hook in hooks.items():
            fn.retains = hook
    for i, r in enumerate(results):
        if r is None and not allow_unused:
            raise RuntimeError(f"autograd.grad: input {i} (shape {tuple(inputs[i].shape)}) was not used to "
                               "compute the outputs; pass allow_unused=True to get None for it")
    return tuple(results)


# -------------------------------------------------------------------------- in-place writes and backward


class Version:
    """How often a tensor's memory has been written in place: PyTorch's version counter.

    One Version counts the writes into one memory, whichever tensor they go through. ``Tensor._version``
    is ``None`` until the first write or check (an op result costs nothing), or, for a view (reshape,
    slicing, ``detach()``...), the tensor it views. The class attributes are the defaults (cheap to make).
    """

    n = 0            # writes so far: the tensor "is at version n"
    stamps = ()      # the write clock at the last few writes, oldest first (for backward's check)
    writer = ""      # the in-place method that wrote last, for error messages
    rebased = 0      # the stamp of the last write that gave the tensor a new history (``a.mul_(w)``)


_KEPT_STAMPS = 16


def version_of(tensor: Any) -> Version:
    """The Version of ``tensor``'s memory, made on first use (following a view to the tensor it views)."""
    base = tensor
    while type(getattr(base, "_version", None)) not in (Version, type(None)):  # (nn.Parameter: the slot unset)
        base = base._version  # a view: the tensor it views
    if base is not tensor:
        tensor._version = base   # one step next time, however long the chain of views was
    if getattr(base, "_version", None) is None:
        base._version = Version()
    return base._version


def note_write(tensor: Any, writer: str, rebased: bool = False) -> None:
    """Count one in-place write into ``tensor``'s memory, made by ``writer``. ``rebased``: it gave the tensor
    a new ``grad_fn``; the ops that used the tensor before would follow it, so they are differentiated no more."""
    global clock
    clock += 1
    version = version_of(tensor)
    version.n, version.stamps, version.writer = version.n + 1, version.stamps[1 - _KEPT_STAMPS:] + (clock,), writer
    if rebased:
        version.rebased = clock


# Ops whose vjp reads only the shapes and dtypes of its inputs before position N (N here): a write into
# them changes nothing backward computes (PyTorch does not save them). Other ops read all their inputs.
_UNREAD_INPUTS = {**dict.fromkeys(("add", "sub", "neg", "identity", "cast", "to_device", "reshape", "permute",
                                   "broadcast_to", "sum", "sum_to", "mean", "cat"), 1 << 30),
                  "getitem": 1,      # getitem reads only its index tensors
                  "sub_scaled": 1}   # a - scale * b reads b and scale only


def check_saved(fn: Any, output: Any) -> None:
    """Refuse to run ``fn``'s vjp if a tensor it uses was written in place after the op ran (backward calls
    it only if the write clock moved since then); ``output``: the op's output, if its vjp reads it."""
    unread = _UNREAD_INPUTS.get(fn.op.name, 0)
    for i, x in enumerate(fn.inputs):
        if _written_since(x, fn.epoch) and (version_of(x).rebased > fn.epoch or i >= unread and _read_by_vjp(fn, i)):
            raise modified_error(fn, x, f"input {i}", version_of(x))
    if output is not None and _written_since(output, fn.epoch):
        raise modified_error(fn, output, "output", version_of(output))


def _read_by_vjp(fn: Any, i: int) -> bool:
    """mul's vjp reads one factor only for the other's gradient (so does div its numerator): ``y * 2``
    needs no value of ``y``. Every other op (past _UNREAD_INPUTS) is taken to read all its inputs."""
    name = fn.op.name
    if name == "mul" or (name == "div" and i == 0):
        return getattr(fn.inputs[1 - i], "requires_grad", False)
    return True


def _written_since(x: Any, epoch: int) -> bool:
    if getattr(x, "_version", None) is None:   # a number, or a tensor never written nor viewing another
        return False
    version = version_of(x)
    return version.n > 0 and version.stamps[-1] > epoch


