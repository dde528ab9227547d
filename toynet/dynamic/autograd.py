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
global clock of writes (``GradFn.epoch``); each write stamps the clock on its Version. That counting
lives in :mod:`toynet.dynamic.versions`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from .. import backend, mode
from . import versions
# Grad mode lives in toynet.mode (every layer reads it); toynet.autograd.no_grad is kept as in PyTorch.
from ..mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
# The counting of in-place writes lives in toynet.dynamic.versions; the names are kept here, where ops and tests use them.
from .versions import Version, check_saved, note_write, version_of  # noqa: F401


class GradFn:
    """The record of one op application, kept so that backward can run its vjp rule.

    ``inputs`` holds the input tensors (and Python numbers) exactly as the op received them.
    The output is held weakly (and only by ops whose vjp needs it) so that no reference cycle
    tensor -> grad_fn -> tensor keeps activations alive. ``epoch`` is the write clock when the op
    ran: a saved tensor whose Version was stamped later has changed since (see :func:`check_saved`).
    """

    __slots__ = ("op", "inputs", "attrs", "output_ref", "epoch", "retains")  # retains: see Tensor.retain_grad

    def __init__(self, op: Any, inputs: tuple, attrs: dict, output_ref: Any):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.output_ref = output_ref
        self.epoch = versions.clock
        self.retains = None

    @property
    def name(self) -> str:
        return "".join(part.capitalize() for part in self.op.name.split("_")) + "Backward"

    @property
    def next_functions(self) -> tuple:
        """The grad_fns of this op's inputs (``None`` for leaves and numbers), as in PyTorch."""
        if self.inputs is None:
            return ()
        return tuple(getattr(x, "grad_fn", None) for x in self.inputs)

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _mixed_float_error(fn: GradFn, leaf: Any, grad: Any, roots: Sequence[Any]) -> TypeError:
    """A float32 leaf was handed a float64 gradient: say where float64 came in and how to avoid it."""
    wanted, got = leaf.dtype.name, grad.dtype.name

    def foreign(record: GradFn) -> list:
        return [(i, x) for i, x in enumerate(record.inputs or ())
                if _is_tensor(x) and i not in record.op.nondifferentiable and x.dtype is not leaf.dtype]
    other = foreign(fn)
    # Follow the other dtype back to the op where it met this one's: there it came in with an input (data).
    while other and other[0][1].grad_fn is not None and foreign(other[0][1].grad_fn):
        fn = other[0][1].grad_fn
        other = [(i, x) for i, x in foreign(fn) if x.grad_fn is None] or foreign(fn)
    where = (f"{fn.op.name} received input {other[0][0]} of shape {tuple(other[0][1].shape)} and dtype "
             f"{other[0][1].dtype.name} with this {wanted} tensor, so its output and every gradient through it "
             f"are {got}" if other else f"{got} values came in after {fn.op.name} (the loss is "
             f"{roots[0].dtype.name}): a {got} tensor, such as data or a loss target made from a NumPy array, "
             f"was combined with {wanted} ones")
    what = f"{leaf.name!r}, " if leaf.name else ""
    fix = "x = x.float()" if wanted == "float32" else f"x = x.to(toynet.{wanted})"
    return TypeError(
        f"backward: the {wanted} leaf tensor ({what}shape {tuple(leaf.shape)}) would get a {got} gradient: "
        f"{where}. Convert the data (and targets) to the model's dtype before the call: {fix} (NumPy makes "
        f"float64 arrays by default); or compute in one dtype throughout (model.to(toynet.{got})).")


# ----------------------------------------------------------------------------------------- the walk


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
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for child in inputs_of(node):
            if id(child) not in visited:
                stack.append((child, False))
    return order


def reverse_topological_order(roots: Sequence[GradFn]) -> list[GradFn]:
    """Every record reachable from ``roots``, each before the records that made its inputs: consumers before
    producers, the order backward needs (``post_order`` of the records, reversed)."""
    order = post_order(roots, lambda fn: [x.grad_fn for x in fn.inputs or () if getattr(x, "grad_fn", None)])
    order.reverse()
    return order


def run_backward(roots: Sequence[Any], root_grads: Sequence[Any], *, retain_graph: bool,
                 create_graph: bool, capture: Sequence[Any] | None = None,
                 on_vjp: Any = None) -> list[Any] | None:
    """Propagate ``root_grads`` from ``roots`` to the leaves: one walk, each record's vjp run once, after
    every consumer of its output has added its share of the gradient.

    Without ``capture``, gradients are accumulated into the ``.grad`` of every leaf that requires grad
    (``loss.backward()``). With ``capture`` (a list of tensors), nothing is accumulated; the gradient
    reaching each captured tensor is returned instead (``toynet.autograd.grad``). ``on_vjp(fn)`` is told
    which record's vjp runs next (Graph mode names the backward nodes after it).
    """
    grads: dict[GradFn, Any] = {}      # record -> the gradient of its output, summed so far
    leaf_grads: dict[int, Any] = {}    # id(leaf) -> its gradient, when capturing (tensors compare by value)
    # record -> its output, for ops whose vjp reads it (exp, softmax...): a record holds its output only
    # weakly, so hold it here from the moment its gradient is known until its vjp has run.
    outputs: dict[GradFn, Any] = {}

    def receive(x: Any, g: Any, consumer: GradFn | None = None) -> None:
        """Gradient ``g`` reaches tensor ``x`` (from the vjp of ``consumer``): add it to what the record that
        made ``x`` has so far, or give it to the leaf."""
        fn = x.grad_fn
        if fn is not None:
            grads[fn] = _add(grads.get(fn), g)
            if fn.output_ref is not None:
                outputs[fn] = x
        elif capture is not None:
            leaf_grads[id(x)] = _add(leaf_grads.get(id(x)), g)
        elif x.requires_grad:
            if consumer is not None and not g.is_lazy and g.dtype is not x.dtype:
                raise _mixed_float_error(consumer, x, g, roots)
            _accumulate_leaf(x, g, create_graph)

    for root, g in zip(roots, root_grads):
        receive(root, g)
    captured = {t.grad_fn: i for i, t in enumerate(capture) if t.grad_fn is not None} if capture else {}
    results: list[Any] = [None] * len(capture or ())

    previous_mode, mode.grad_enabled = mode.grad_enabled, create_graph
    try:
        for fn in reverse_topological_order([root.grad_fn for root in roots if root.grad_fn is not None]):
            grad = grads.pop(fn, None)
            if grad is None:
                continue  # no path from the roots carries a gradient here
            if fn in captured:
                results[captured[fn]] = grad
            if fn.retains is not None:  # its output called retain_grad(): hand it the gradient
                fn.retains(grad)
            if fn.inputs is None:
                raise RuntimeError(
                    "backward through a graph a second time: its saved tensors were freed after the "
                    "first backward. Pass retain_graph=True to the first backward() to keep them.")
            output = outputs.pop(fn, None)
            if fn.epoch != versions.clock:  # something was written in place since this op ran: was it saved here?
                check_saved(fn, output)
            if on_vjp is not None:
                on_vjp(fn)
            for x, g in zip(fn.inputs, fn.op.vjp(grad, fn.inputs, output, **fn.attrs)):
                if g is not None and getattr(x, "requires_grad", False):
                    if g.shape != x.shape:
                        raise RuntimeError(f"internal error: the vjp of {fn.op.name} returned a gradient of shape "
                                           f"{tuple(g.shape)} for an input of shape {tuple(x.shape)}")
                    receive(x, g, fn)
            if not retain_graph:
                fn.inputs = None
                fn.output_ref = None
    finally:
        mode.grad_enabled = previous_mode

    if capture is None:
        return None
    for i, t in enumerate(capture):
        if t.grad_fn is None:
            results[i] = leaf_grads.get(id(t))
    return results


def _accumulate_leaf(leaf: Any, g: Any, create_graph: bool) -> None:
    if not create_graph:
        g = g.detach()
    if leaf.grad is None:
        # A leaf owns its .grad, which users change in place (zero_(), clipping): a copy, never an array
        # the vjp may have given to another leaf too (a + b gives both the same gradient). A lazy gradient
        # (Graph mode) is a value in a graph, never written in place.
        leaf.grad = g if g.is_lazy else g.clone()
    else:
        leaf.grad = leaf.grad + g


def _add(total: Any, g: Any) -> Any:
    return g if total is None else total + g


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "grad_fn") and hasattr(x, "new_tensor")


def _root_grads(tensors: Sequence[Any], grad_tensors: Sequence[Any] | None, what: str) -> list[Any]:
    # This module sits below Tensor, so it never names the class: seeds are made by the tensors themselves
    # (t.new_full / t.new_tensor: same dtype and device, and a lazy tensor's seed is a node in its graph).
    grads = []
    for i, t in enumerate(tensors):
        g = None if grad_tensors is None else grad_tensors[i]
        if not _is_tensor(t):
            raise TypeError(f"{what}: expected tensors, got {type(t).__name__}")
        if not t.requires_grad:
            raise RuntimeError(
                f"{what}: tensor {i} of shape {tuple(t.shape)} does not require grad and has no grad_fn, "
                "so there is nothing to differentiate. Create the leaves with requires_grad=True "
                "(or use nn.Parameter), and don't compute the loss under toynet.no_grad().")
        shape = t.shape
        if g is None:
            if shape and shape.numel() != 1:
                raise RuntimeError(
                    f"{what}: the tensor has shape {tuple(shape)}; without a gradient argument "
                    "backward() needs a one-element tensor such as a loss. Reduce it first "
                    "(t.sum() or t.mean()) or pass gradient=toynet.ones_like(t).")
            grads.append(t.new_full(shape, 1))  # a seed of the root's own shape: nothing to check
            continue
        g = g if _is_tensor(g) else t.new_tensor(g)
        if tuple(g.shape) != tuple(shape):
            raise RuntimeError(f"{what}: gradient of shape {tuple(g.shape)} given for a tensor of shape "
                               f"{tuple(shape)}; they must match")
        grads.append(g)
    return grads


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Accumulate d(tensors)/d(leaf) into every leaf's ``.grad`` (what ``loss.backward()`` calls)."""
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if grad_tensors is not None and not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = [grad_tensors]
    root_grads = _root_grads(tensors, grad_tensors, "backward")
    if tensors[0].node is not None or any(t.node is not None for t in tensors[1:]):  # a lazy tensor
        # Inside nn.Graph.build: the tracer runs this same engine on lazy tensors (symbolic autodiff).
        mode.current_tracer().backward(tensors, root_grads, retain_graph, create_graph)
        return
    run_backward(tensors, root_grads, retain_graph=create_graph if retain_graph is None else retain_graph,
                 create_graph=create_graph)


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
    single = not isinstance(inputs, (list, tuple))
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is not None and not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs]
    root_grads = _root_grads(outputs, grad_outputs, "autograd.grad")
    results = run_backward(outputs, root_grads,
                           retain_graph=create_graph if retain_graph is None else retain_graph,
                           create_graph=create_graph, capture=inputs)
    for i, r in enumerate(results):
        if r is None and not allow_unused:
            raise RuntimeError(f"autograd.grad: input {i} (shape {tuple(inputs[i].shape)}) was not used to "
                               "compute the outputs; pass allow_unused=True to get None for it")
    return tuple(results)
