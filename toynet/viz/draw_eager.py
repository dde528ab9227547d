"""Eager mode's graph as a picture: from a result back through ``grad_fn`` records to the leaves.

Eager mode has no graph object; the graph *is* the chain of :class:`~toynet.dynamic.autograd.GradFn` records
each op leaves on its result (the op, its inputs, its attributes). Walking them from the loss gives
every op application; the picture then shows two kinds of node, as the autograd figures do:

* **data** (ellipses): each tensor, with its name, type and optionally its values and gradient;
  leaves that require grad (parameters) and leaves that don't (inputs, constants) look different;
* **ops** (boxes): each op application with its attributes and, optionally, what it keeps for backward.

Python numbers an op was given (the ``2`` of ``x ** 2``) are small literal nodes, or part of the op's
label with ``literals="inline"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..dynamic.autograd import post_order
from ..dynamic.tensor import Tensor
from . import labels
from .model import Picture, VNode


@dataclass
class Application:
    """One op applied once: ``output = op(*inputs, **attrs)``. ``inputs`` is None once backward freed it."""

    op: Any
    inputs: tuple | None
    attrs: dict
    output: Tensor


def walk_grad_fns(roots: Sequence[Tensor]) -> tuple[list[Tensor], dict[int, Application]]:
    """Every tensor the roots were computed from, inputs before results (an iterative post-order walk),
    and the application that made each non-leaf, keyed by ``id(tensor)``."""
    def inputs_of(tensor: Tensor) -> list[Tensor]:  # reversed: the first input is explored first
        fn = tensor.grad_fn
        return [] if fn is None else [x for x in reversed(fn.inputs or ()) if isinstance(x, Tensor)]

    order = post_order(list(reversed(roots)), inputs_of)
    made_by = {id(t): Application(t.grad_fn.op, t.grad_fn.inputs, t.grad_fn.attrs, t)
               for t in order if t.grad_fn is not None}
    return order, made_by


def eager_picture(order: Sequence[Tensor], made_by: dict[int, Application], name_of: Callable[[Any], str],
                  roots: Sequence[Tensor] = (), *, show_values: bool = False, show_grads: bool = False,
                  show_saved: bool = False, show_attrs: bool = True, literals: str = "node",
                  origin: dict[str, int] | None = None) -> Picture:
    """The picture of ``order`` (tensors, inputs first) and the applications that made them.

    ``origin``, if given, is filled with ``picture node id -> index in order`` of the tensor each node
    belongs to (an op and its literals belong to the op's result), which is what an animation needs
    to show the picture tensor by tensor.
    """
    if literals not in ("node", "inline"):
        raise ValueError(f"literals must be 'node' (small nodes) or 'inline' (in the op's label), got {literals!r}")
    picture = Picture()
    tensor_ids: dict[int, str] = {}
    root_ids = {id(r) for r in roots}
    freed = False
    for index, tensor in enumerate(order):
        tid = f"t{index}"
        made = [tid]  # the picture nodes that belong to this tensor
        app = made_by.get(id(tensor))
        if app is not None:
            freed |= app.inputs is None
            op_id = f"op{index}"
            made.append(op_id)
            picture.add_node(_op_node(op_id, app, tensor_ids, name_of, show_attrs, show_saved, literals))
            for j, x in enumerate(app.inputs or ()):
                if isinstance(x, Tensor):
                    picture.add_edge(tensor_ids[id(x)], op_id)
                elif literals == "node":
                    lit_id = f"{op_id}_arg{j}"
                    made.append(lit_id)
                    picture.add_node(VNode(lit_id, [labels.number_text(x)], "literal"))
                    picture.add_edge(lit_id, op_id)
        tensor_ids[id(tensor)] = tid
        picture.add_node(_data_node(tid, tensor, app is not None, name_of(tensor), show_values, show_grads))
        if app is not None:
            picture.add_edge(f"op{index}", tid)
        if id(tensor) in root_ids:
            picture.add_mark(tid, "output")
            picture.anchors.append(tid)
        if origin is not None:
            origin.update((node_id, index) for node_id in made)
    if freed:
        picture.notes.append("backward() freed what the ops kept, so the graph ends here; call "
                             "loss.backward(retain_graph=True) to draw it after backward.")
    return picture


def _data_node(tid: str, tensor: Tensor, computed: bool, name: str, show_values: bool,
               show_grads: bool) -> VNode:
    lines = ([name] if name else []) + [labels.type_text(tensor.shape, tensor.dtype)]
    if show_values:
        lines += labels.tensor_values(tensor) or []
    grad = tensor.grad if show_grads else None
    if grad is not None:
        small = grad.numel() <= labels.MAX_VALUES
        lines += labels.values_lines(grad.tolist(), "grad ") if small else [
            "grad " + labels.type_text(grad.shape, grad.dtype)]
    role = "value" if computed else ("parameter" if tensor.requires_grad else "input")
    tooltip = "nn.Parameter" if type(tensor).__name__ == "Parameter" else ""
    return VNode(tid, lines, role, tooltip=tooltip)


def _op_node(op_id: str, app: Application, tensor_ids: dict[int, str], name_of: Callable[[Any], str],
             show_attrs: bool, show_saved: bool, literals: str) -> VNode:
    head = app.op.describe(**app.attrs) if show_attrs else app.op.name
    inputs = app.inputs
    if literals == "inline" and inputs and any(not isinstance(x, Tensor) for x in inputs):
        head += "(" + ", ".join("·" if isinstance(x, Tensor) else labels.number_text(x) for x in inputs) + ")"
    lines = [head]
    marks: tuple[str, ...] = ()
    if inputs is None:
        lines.append("(inputs freed by backward)")
        marks = ("freed",)
    elif show_saved:
        kept = [name_of(x) or labels.type_text(x.shape, x.dtype) for x in inputs if isinstance(x, Tensor)]
        if app.op.saves_output:
            kept.append("output")
        lines.append("saved: " + (", ".join(kept) if kept else "nothing"))
    grad_fn = "".join(part.capitalize() for part in app.op.name.split("_")) + "Backward"
    return VNode(op_id, lines, "op", marks=marks, tooltip=f"grad_fn: {grad_fn}")
