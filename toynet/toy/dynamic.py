"""A scalar dynamic graph (define-by-run) in about a hundred lines: the first design to read.

Every ``+``, ``-`` or ``*`` on a :class:`Tensor` computes its value *at once* and remembers two lists:
the tensors it was made from (``parents``) and, for each parent, a function that turns the gradient
of the result into that parent's share (``grad_fns``, the local derivatives). That record is the
whole graph; it is only read when ``backward`` runs.

Fitting ``y = w * x + b`` by gradient descent::

    x, y = Tensor(1, requires_grad=False), Tensor(2, requires_grad=False)
    w, b = Tensor(2), Tensor(1)
    for _ in range(100):
        y_hat = w * x + b
        z = (y_hat - y) * (y_hat - y)      # squared error
        z.backward()
        w.value -= 0.01 * w.grad
        b.value -= 0.01 * b.grad
        z.zero_grad()

Two ways to walk the graph backwards are here, side by side:

* :meth:`Tensor.backward`, the short recursive walk: each node adds its share to a parent and
  immediately asks that parent to propagate. It is **wrong when an inner node feeds two consumers**,
  as ``y_hat`` does in the loss above. Call ``e = y_hat - y``. The first factor of ``z`` gives
  ``y_hat`` the gradient ``e`` and ``y_hat`` passes ``e`` on at once (``b.grad = e``, ``w.grad = e*x``).
  The second factor adds another ``e``, so ``y_hat.grad = 2e`` (that total is right), but ``y_hat``
  then passes on its whole running total *again*: ``b`` ends with ``e + 2e = 3e`` and ``w`` with
  ``e*x + 3e*x = 4e*x`` (the node ``w*x`` also re-pushes its total), instead of the true ``2e`` and
  ``2e*x``. At the start (w=2, b=1, so e=1) that is grad_w=4, grad_b=3 instead of 2 and 2.
  The fit still converges because ``(4e*x, 3e)`` points downhill too (its dot product with the true
  gradient is ``8e²x² + 6e² > 0``), but it walks a different path and stops at a different point on
  the line of perfect fits ``w*x + b = y``: about w=1.43, b=0.57, where true gradient descent (which
  keeps ``w - b`` fixed when x=1) heads for w=1.5, b=0.5. A shared *leaf* (``w * w``) is harmless:
  leaves receive their shares but never pass them on.
* :meth:`Tensor.backward_topological`, the fix: order the nodes so that every node comes after all
  of its consumers, then let each node pass its gradient on exactly once, when it is complete.
  This is what toynet's real autograd (``toynet/autograd.py``) does, without recursion.
"""

from __future__ import annotations

from collections.abc import Callable


class Tensor:
    """A scalar that records the tensors it was computed from and how to differentiate through them."""

    def __init__(self, value: float, parents: list | None = None, grad_fns: list[Callable] | None = None,
                 requires_grad: bool = True):
        self.value = value
        self.grad = None              # d(final result)/d(self), filled in by backward
        self.parents = parents        # None for a leaf (an input or a weight)
        self.grad_fns = grad_fns      # grad_fns[i](grad of self) = share of parents[i]
        self.requires_grad = requires_grad

    def _result(self, other: Tensor, value: float, grad_self: Callable, grad_other: Callable) -> Tensor:
        other = other if isinstance(other, Tensor) else Tensor(other, requires_grad=False)
        return Tensor(value, [self, other], [grad_self, grad_other], self.requires_grad or other.requires_grad)

    # Each op saves the values it needs *now*, so a later weight update cannot change the derivative.
    def __add__(self, other: Tensor) -> Tensor:       # d(a+b)/da = 1, d(a+b)/db = 1
        return self._result(other, self.value + _value(other), lambda g: g, lambda g: g)

    def __sub__(self, other: Tensor) -> Tensor:       # d(a-b)/da = 1, d(a-b)/db = -1
        return self._result(other, self.value - _value(other), lambda g: g, lambda g: -g)

    def __mul__(self, other: Tensor) -> Tensor:       # d(a*b)/da = b, d(a*b)/db = a
        a, b = self.value, _value(other)
        return self._result(other, a * b, lambda g: g * b, lambda g: g * a)

    def backward(self) -> None:
        """The recursive walk: give each parent its share, then let that parent recurse at once.

        Correct on trees; on a graph where an inner node has several consumers it pushes that node's
        running total once per consumer and over-counts everything below it (see the module docstring).
        """
        if not self.requires_grad:    # inputs and frozen weights need no gradient
            return
        if self.grad is None:         # nobody gave us a gradient: we are the final result, dz/dz = 1
            self.grad = 1
        for parent, grad_fn in zip(self.parents or [], self.grad_fns or []):
            if parent.requires_grad:
                parent.grad = (parent.grad or 0) + grad_fn(self.grad)
                parent.backward()     # pushes parent's whole total so far, not just our share

    def backward_topological(self) -> None:
        """The fix: visit nodes so each one has heard from *all* its consumers before it passes on.

        A depth-first search lists every node after its parents; walking that list backwards meets
        each node after all of its consumers, when its gradient is complete.
        """
        order, seen = [], set()
        stack = [(self, False)]       # (node, parents already listed?): a DFS without recursion
        while stack:
            node, parents_done = stack.pop()
            if parents_done:
                order.append(node)
            elif node not in seen and node.requires_grad:
                seen.add(node)
                stack.append((node, True))
                stack.extend((p, False) for p in node.parents or [])
        if self.grad is None:
            self.grad = 1
        for node in reversed(order):  # consumers before the nodes they consume
            for parent, grad_fn in zip(node.parents or [], node.grad_fns or []):
                if parent.requires_grad:
                    parent.grad = (parent.grad or 0) + grad_fn(node.grad)

    def zero_grad(self) -> None:
        """Forget the gradients of this tensor and of everything it was computed from."""
        for parent in self.parents or []:
            parent.zero_grad()
        self.grad = None

    def __repr__(self) -> str:
        return f"Tensor(value={self.value}, grad={self.grad})"


def _value(x: Tensor | float) -> float:
    return x.value if isinstance(x, Tensor) else x
