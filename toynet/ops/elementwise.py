"""What an elementwise op is: the output's element ``i`` depends only on element ``i`` of each input.

Inputs broadcast as in NumPy; every vjp sums its gradient back to the input's own shape
(``grad.sum_to(x.shape)``), because an input that was broadcast contributed to many outputs.
Each ``forward`` takes ``out=``: Graph mode's compiled plan writes into preallocated buffers, and a
chain of these ops can be fused into one kernel that works in place.

The ops themselves are grouped by theme: :mod:`.arithmetic` (``+ - * / **``), :mod:`.maths` (exp,
log, square roots, tanh, sigmoid), :mod:`.piecewise` (relu, clamp, abs...), :mod:`.comparison`
(``< == &``, maximum, where) and :mod:`.conversion` (dtype, copies, devices).
"""

from __future__ import annotations

from typing import Any

from ._op import Op, broadcast_shapes, result_dtype, shape_of


def needs_grad(x: Any) -> bool:
    """Only tensors that require grad get a gradient; skipping the rest saves work (and is exact)."""
    return getattr(x, "requires_grad", False)


def as_array(xp: Any, value: Any) -> Any:
    """NumPy ufuncs return a scalar, not a 0-d array, for 0-d inputs; the in-place steps that follow
    (and ``out=``) need an array."""
    return xp.asarray(value)


def unbroadcast(grad: Any, x: Any) -> Any:
    """The gradient for input ``x``: ``grad`` summed over the dimensions ``x`` was broadcast along."""
    return grad.sum_to(x.shape) if needs_grad(x) else None


class Elementwise(Op):
    """The base of elementwise ops: the output has the inputs' broadcast shape and promoted dtype."""

    elementwise = True

    def infer(self, *inputs: Any, **attrs: Any) -> tuple:
        shape = broadcast_shapes(self.name, *(shape_of(x) for x in inputs))
        return shape, result_dtype(*inputs)

