"""Eager mode's backward walk, tuned for a step of a small model, where the walk's own Python costs more than
the arithmetic (the tutorial's poly fit): what the fast path runs instead of
:func:`toynet.dynamic.autograd.run_backward`, to the same gradients.

What it adds to the lesson's walk:

* **a stack of layers is a chain**: when no record has inputs made by two records (the usual model), the
  records below the loss, in the order they are found, *are* the reverse topological order: no stack and
  no seen-set (:func:`_chain_below`); other graphs take the depth-first walk written out for records;
* **leaf gradients adopted**: a leaf's first gradient, when it is a fresh array a vjp made for it alone, is
  kept as the leaf's ``.grad`` instead of copied (the lesson copies every first gradient);
* fewer calls per record: a record without attributes calls its vjp without ``**{}``, and the shapes and
  dtypes are compared on the arrays.
"""

from __future__ import annotations

from typing import Any, Sequence

from ... import backend, mode
from ...mode import fast_replacement
from .. import autograd
from ..autograd import GradFn
from ..autograd_errors import mixed_float_error as _mixed_float_error
from ..autograd import check_saved
from ..tensor import Tensor


def _order(roots: Sequence[GradFn]) -> list[GradFn]:
    """All grad_fns reachable from ``roots``, each before every grad_fn that makes one of its inputs:
    consumers before producers, the order backward needs: ``post_order(roots, <the grad_fns of a record's
    inputs>)`` reversed. Backward asks on every call, so it is found cheaply: a stack of layers is a chain,
    ordered as it is found (:func:`_chain_below`); other graphs take post_order's walk written out for
    records (no callback and no list per record; the records themselves, hashed by identity, in the
    seen-set instead of their ids)."""
    if len(roots) == 1:
        chain = _chain_below(roots[0])
        if chain is not None:
            return chain
    order: list[GradFn] = []
    seen: set[GradFn] = set()
    stack: list[tuple[GradFn, bool]] = [(fn, False) for fn in roots]
    while stack:
        fn, inputs_done = stack.pop()
        if inputs_done:
            order.append(fn)
        elif fn not in seen:
            seen.add(fn)
            stack.append((fn, True))
            for x in fn.inputs or ():
                child = getattr(x, "grad_fn", None)  # inputs may be Python numbers, hence getattr
                if child is not None and child not in seen:
                    stack.append((child, False))
    order.reverse()
    return order


def _chain_below(fn: GradFn) -> list[GradFn] | None:
    """``fn`` and the records below it, if none has inputs made by two different records (a stack of layers,
    the usual model): that chain is then the order, found without the walk's stack and seen-set. None if
    the graph branches."""
    chain = []
    while fn is not None:
        chain.append(fn)
        below = None
        for x in fn.inputs or ():
            child = getattr(x, "grad_fn", None)
            if child is not None and child is not below:
                if below is not None:
                    return None
                below = child
        fn = below
    return chain


@fast_replacement(autograd, "run_backward")
def run_backward(roots: Sequence[Any], root_grads: Sequence[Any], *, retain_graph: bool, create_graph: bool,
                 leaves: Any = None, on_vjp: Any = None) -> None:
    """Propagate ``root_grads`` from ``roots`` to the leaves, as the lesson's walk does (same arguments)."""
    # The dicts are keyed by the GradFn records themselves (hashed by identity), tensors by id (== on
    # tensors compares values).
    grads: dict[GradFn, Any] = {}        # grad_fn -> gradient of that grad_fn's output
    # grad_fn -> its output tensor, for ops whose vjp reads the output (exp, softmax...). GradFn holds
    # the output only weakly, and the consumer that kept it alive may already have been freed below, so
    # hold it strongly here from the moment a gradient for it is known until its vjp has run.
    outputs: dict[GradFn, Any] = {}
    for root, g in zip(roots, root_grads):
        fn = root.grad_fn
        if fn is None:
            if leaves is not None:
                leaves(root, g, None)
            elif root.requires_grad:
                _accumulate_leaf(root, g, create_graph, adopted=None)  # the caller's tensor: always copied
            continue
        grads[fn] = g if fn not in grads else grads[fn] + g
        if fn.output_ref is not None:
            outputs[fn] = root

    adopted: set[int] = set()   # arrays handed to a leaf as its .grad in this pass

    previous_mode, mode.grad_enabled = mode.grad_enabled, create_graph
    try:
        for fn in _order([root.grad_fn for root in roots if root.grad_fn is not None]):
            grad = grads.pop(fn, None)
            if grad is None:
                continue  # no path from the roots carries a gradient here
            if fn.retains is not None:  # its output called retain_grad(): hand it the gradient
                fn.retains(grad)
            inputs = fn.inputs
            if inputs is None:
                raise RuntimeError(
                    "backward through a graph a second time: its saved tensors were freed after the "
                    "first backward. Pass retain_graph=True to the first backward() to keep them.")
            output = outputs.pop(fn, None) if fn.output_ref is not None else None
            if fn.epoch != autograd.clock:  # something was written in place since this op ran: was it saved here?
                check_saved(fn, output)
            if on_vjp is not None:
                on_vjp(fn)
            attrs = fn.attrs  # (a call with **{} costs as much as the check)
            input_grads = fn.op.vjp(grad, inputs, output, **attrs) if attrs else fn.op.vjp(grad, inputs, output)
            for x, g in zip(inputs, input_grads):
                if g is None or not getattr(x, "requires_grad", False):
                    continue
                if (g.array.shape != x.array.shape if g.node is None and x.node is None else g.shape != x.shape):
                    raise RuntimeError(f"internal error: the vjp of {fn.op.name} returned a gradient of "
                                       f"shape {tuple(g.shape)} for an input of shape {tuple(x.shape)}")
                producer = x.grad_fn
                if producer is not None:
                    total = grads.get(producer)
                    grads[producer] = g if total is None else total + g
                    if producer.output_ref is not None:
                        outputs[producer] = x
                elif leaves is not None:
                    leaves(x, g, fn)
                elif g.node is None and x.grad is None and g.grad_fn is None and g.array.dtype is x.array.dtype \
                        and g.array.flags.owndata and id(g.array) not in adopted:
                    # The usual first gradient of a leaf: a fresh array a vjp made (see _accumulate_leaf).
                    adopted.add(id(g.array))
                    x.grad = g
                else:
                    if g.node is None and g.array.dtype is not x.array.dtype and g.array.dtype != x.array.dtype:
                        raise _mixed_float_error(fn, x, g, roots)
                    _accumulate_leaf(x, g, create_graph, adopted)
            if not retain_graph:
                fn.inputs = None
                fn.output_ref = None
    finally:
        mode.grad_enabled = previous_mode


def _accumulate_leaf(leaf: Any, g: Any, create_graph: bool, adopted: set | None) -> None:
    if not create_graph and g.grad_fn is not None:
        g = g.detach()
    if leaf.grad is None:
        # A leaf owns its .grad, because users change it in place (zero_(), clipping). A fresh array a
        # vjp made is adopted as it is; a copy is made only when the gradient is a view (sum's vjp hands
        # back a read-only broadcast) or was already given to another leaf (a + b gives both the same).
        if g.node is not None:
            pass  # a lazy gradient (Graph mode) is a value in a graph, never written in place
        elif adopted is None or id(g.array) in adopted or not backend.owns_memory(g.array):
            g = g.clone()
        else:
            adopted.add(id(g.array))  # by array: detach() made a new Tensor around the same array
        leaf.grad = g
    else:
        leaf.grad = leaf.grad + g



_lesson_backward = autograd.backward


@fast_replacement(autograd, "backward")
def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """``loss.backward()`` on one eager loss, the usual call, with its seed made directly (a ones array like
    the loss); anything else goes the lesson's way, which checks the roots and seeds in general."""
    if grad_tensors is None and isinstance(tensors, Tensor) and tensors.node is None and tensors.grad_fn is not None \
            and tensors.array.size == 1:
        seed = Tensor.wrap(tensors.device.xp.ones_like(tensors.array), tensors.device)
        autograd.run_backward([tensors], [seed], retain_graph=create_graph if retain_graph is None else retain_graph,
                              create_graph=create_graph)
    else:
        _lesson_backward(tensors, grad_tensors, retain_graph, create_graph)
