"""SBP signatures: for each op, how the SBP of its inputs gives the SBP of its output.

An op of :mod:`toynet.ops` has a forward, a vjp and a shape rule; for global tensors it needs one more rule:
which layouts of its inputs let each process compute *its part of the output from its parts of the inputs*,
with no communication, and what layout the output then has. That pair is the op's **SBP signature**. The
rules live here, in one table (:data:`RULES`, by op name, plus the elementwise ops by their flag), so the op
classes stay as they are. When the inputs do not fit a signature, the interpreter boxes them first
(:mod:`toynet.distributed.boxing`); :func:`signature` picks the signature that needs the least of that.

==================  =====================================  =====================================================
op                  inputs -> output                       why
==================  =====================================  =====================================================
elementwise         S(d), S(d) -> S(d)                     element i of the output needs element i of each input
                    B with S(d) -> S(d)                    the B input is sliced locally (or broadcast along d)
                    B, B -> B                              everybody computes everything
add, sub            P, P -> P                              a sum of sums is a sum
mul, div, neg       P with B (or numbers) -> P             linear in the P input: (a1 + a2) * b = a1 b + a2 b
matmul              S(0) x B -> S(0)                       rows of x give rows of y (data parallelism)
                    S(batch) x B -> S(batch)               each matrix of a batch on its own
                    B x S(1) -> S(1)                       columns of w give columns of y (model parallelism)
                    S(1) x S(0) -> P                       each process adds up its share of the k products
                    B x B -> B, P x B -> P, B x P -> P
sum, mean           S(d) over d -> P                       each process sums its piece; the pieces add up
                    S(d) over other dims -> S(d')          (d' counts the dims that remain)
                    B -> B, P -> P                         (a sum, or a mean, of sums is a sum)
sum_to              as sum, over the dims it sums          the vjp of every broadcast
permute             S(d) -> S(where d goes)
reshape             S(d) -> S(d) when dims 0..d stay       the rows keep their place
broadcast_to        S(d) -> S(d + new leading dims)
anything else       B, ... -> B                            the fallback: box every input to B, compute it all
==================  =====================================  =====================================================

A rule returns a :class:`Signature`, or ``None`` when it has nothing better than the fallback. Its ``attrs``
are the op's attributes for the *local* computation when they hold sizes (reshape's shape on a split
dimension is the local size); its ``forward``, if any, replaces the op's forward locally (a mean over a split
dimension divides each piece's sum by the *whole* count).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..ops._op import broadcast_shapes, shape_of
from ..ops.reduce import count, summed_axes
from . import comm
from .sbp import broadcast as B
from .sbp import partial_sum as P
from .sbp import sbp, split


@dataclass(frozen=True)
class Signature:
    inputs: tuple                      # the SBP each input must have (None for a Python number)
    output: sbp
    rule: str                          # which rule chose it, in words (error messages, printouts)
    attrs: dict | None = None          # the op's attributes for the local computation (None: as given)
    forward: Callable | None = field(default=None, compare=False)  # a local computation replacing op.forward


def signature(op: Any, inputs: tuple, attrs: dict) -> Signature:
    """The signature op runs with on these global inputs (and Python numbers)."""
    if any(isinstance(sbp_of(x), tuple) for x in inputs):
        return signature_2d(op, inputs, attrs)
    rule = RULES.get(op.name) or (elementwise if op.elementwise else None)
    found = rule(op, inputs, attrs) if rule is not None else None
    return found if found is not None else fallback(op, inputs, attrs)


class _Axis:
    """One input seen along one axis of a 2-D grid: its logical shape and its SBP on that axis."""

    __slots__ = ("_placement", "_sbp", "ndim", "shape")

    def __init__(self, x: Any, s: sbp):
        self.shape, self.ndim, self._sbp, self._placement = tuple(x.shape), x.ndim, s, x._placement


def signature_2d(op: Any, inputs: tuple, attrs: dict) -> Signature:
    """2-D SBP: the 1-D rules applied to each axis of the grid on its own, as OneFlow derives 2-D signatures
    ((B, S(0)) x (S(1), B) -> (S(1), S(0)) for matmul). A rule that needs local sizes or its own local
    computation (reshape, sum_to, mean over a split) is not split by axis: every input becomes (B, B)."""
    axes = []
    for k in range(2):
        seen = tuple(_Axis(x, x._sbp[k]) if isinstance(sbp_of(x), tuple) else x for x in inputs)
        sig = signature(op, seen, attrs)
        if sig.attrs is not None or sig.forward is not None:
            break
        axes.append(sig)
    else:
        needs = tuple(None if sbp_of(x) is None else (axes[0].inputs[i], axes[1].inputs[i])
                      for i, x in enumerate(inputs))
        return Signature(needs, (axes[0].output, axes[1].output), f"{axes[0].rule}; {axes[1].rule}")
    return Signature(tuple(None if sbp_of(x) is None else (B, B) for x in inputs), (B, B),
                     f"{op.name}: 2-D, every input made (B, B)")


def sbp_of(x: Any) -> sbp | None:
    return getattr(x, "_sbp", None)


def _dim(s: sbp | None) -> int | None:
    return s.dim if isinstance(s, split) else None


def _local(n: int, x: Any) -> int:
    """The size of this process's piece of a length ``n`` cut over the processes of ``x``'s placement (0 for a
    process outside it)."""
    ranks = x._placement.flat_ranks()
    return comm.shard_sizes(n, len(ranks))[ranks.index(comm.rank())] if comm.rank() in ranks else 0


def fallback(op: Any, inputs: tuple, attrs: dict) -> Signature:
    return Signature(tuple(B if sbp_of(x) is not None else None for x in inputs), B,
                     f"{op.name}: no SBP rule, so every process computes the whole op on broadcast inputs")


# ------------------------------------------------------------------------------------------ elementwise

_LINEAR = {"add", "sub", "neg", "identity"}   # all tensor inputs P -> P (with no numbers added in)


def elementwise(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    sbps = [sbp_of(x) for x in inputs]
    tensors = [s for s in sbps if s is not None]
    if all(s == B for s in tensors):
        return Signature(tuple(sbps), B, f"{op.name}: B everywhere -> B")
    if P in tensors:
        partial = _partial(op, inputs, sbps)
        if partial is not None:
            return partial
    out = broadcast_shapes(op.name, *(shape_of(x) for x in inputs))
    for x, s in zip(inputs, sbps):       # the first input split along a dimension it does not broadcast
        d = _dim(s)
        if d is not None and x.shape[d] != 1:
            D = d + len(out) - x.ndim
            break
    else:
        return Signature(tuple(None if s is None else B for s in sbps), B,
                         f"{op.name}: P cannot pass through it, so the inputs are made B")
    needs = []
    for x, s in zip(inputs, sbps):
        if s is None:
            needs.append(None)
            continue
        d = D - (len(out) - x.ndim)
        needs.append(split(d) if d >= 0 and x.shape[d] != 1 else B)  # broadcast along D: everybody needs it all
    return Signature(tuple(needs), split(D), f"{op.name}: split inputs -> S({D}), B inputs sliced")


def _partial(op: Any, inputs: tuple, sbps: list) -> Signature | None:
    others = [s for s in sbps if s != P]
    if op.name in _LINEAR and not others:
        return Signature(tuple(sbps), P, f"{op.name}: P everywhere -> P (a sum of sums)")
    linear = op.name == "mul" or (op.name == "div" and sbps[0] == P)
    if linear and sbps.count(P) == 1 and all(s in (None, B) for s in others):
        return Signature(tuple(sbps), P, f"{op.name}: P with B -> P (linear in the P input)")
    return None


# ------------------------------------------------------------------------------------------ matmul


def matmul(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    a, b = inputs
    if a.ndim < 2 or b.ndim < 2:
        return None
    out_ndim = max(a.ndim, b.ndim)
    row, k_a, k_b, col = split(a.ndim - 2), split(a.ndim - 1), split(b.ndim - 2), split(b.ndim - 1)
    sa, sb = sbp_of(a), sbp_of(b)
    if isinstance(sa, split) and sa.dim < a.ndim - 2 and b.ndim == 2:   # a batch of matrices, one weight
        return Signature((sa, B), split(sa.dim + out_ndim - a.ndim), "matmul: S(batch) x B -> S(batch)")
    if sa == row:
        return Signature((row, B), split(out_ndim - 2), "matmul: S(rows) x B -> S(rows)")
    if sb == col:
        return Signature((B, col), split(out_ndim - 1), "matmul: B x S(cols) -> S(cols)")
    if sa == k_a or sb == k_b:
        return Signature((k_a, k_b), P, "matmul: S(k) x S(k) -> P (each process adds its share of the products)")
    if sa == P or sb == P:
        return Signature((sa, B) if sa == P else (B, sb), P, "matmul: P x B -> P, B x P -> P (linear in each)")
    return Signature((B, B), B, "matmul: B x B -> B")


def linear(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    """The fast path's fused ``x @ w^T + b`` (toynet.ops.fast): matmul's rules, with w transposed."""
    x, w, *rest = inputs
    sx, sw, last = sbp_of(x), sbp_of(w), x.ndim - 1

    def bias(need: sbp) -> tuple:   # what the bias, if any, must be (None for a Python number)
        return tuple(None if sbp_of(b) is None else need for b in rest)
    if isinstance(sx, split) and sx.dim < last and sw in (B, None):
        return Signature((sx, B) + bias(B), split(sx.dim), "linear: S(rows) x B -> S(rows)")
    if sw == split(0):
        return Signature((B, split(0)) + bias(split(0)), split(last), "linear: B x S(out features) -> S(cols)")
    if sx == split(last) or sw == split(1):
        return Signature((split(last), split(1)) + bias(P), P, "linear: S(in features) x S(in features) -> P")
    return None


def linear_grad_weight(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    """The fast path's weight gradient ``g^T @ x`` summed over the leading dimensions."""
    g, x = inputs
    sg, sx = sbp_of(g), sbp_of(x)
    if isinstance(sg, split) and sg.dim < g.ndim - 1:
        return Signature((sg, split(sg.dim)), P, "linear_grad_weight: S(rows) x S(rows) -> P")
    if sg == split(g.ndim - 1):
        return Signature((sg, B), split(0), "linear_grad_weight: S(out features) x B -> S(0)")
    if sx == split(x.ndim - 1):
        return Signature((B, sx), split(1), "linear_grad_weight: B x S(in features) -> S(1)")
    return None


def sum_squares(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    """The fast path's sum of squares (its MSE loss): each process adds up its own piece's squares."""
    s = sbp_of(inputs[0])
    if isinstance(s, split):
        return Signature((s,), P, f"sum_squares: S({s.dim}) -> P")
    return Signature((B,), B, "sum_squares: B -> B") if s == B else None


def mse_loss_grad(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    """The fast path's MSE gradient ``2 (a - b) g / n``: on split a and b, each piece, with the whole n."""
    g, a, b = inputs
    sa = sbp_of(a)
    if not isinstance(sa, split) or sbp_of(g) not in (B, None) or tuple(g.shape):
        return None
    scale = 2.0 / count(tuple(a.shape), tuple(range(a.ndim))) if attrs.get("reduction", "mean") == "mean" else 2.0

    def local_grad(xp: Any, grad: Any, x: Any, y: Any) -> Any:
        return xp.asarray((x - y) * (grad * scale)).astype(x.dtype)
    return Signature((None if sbp_of(g) is None else B, sa, sa), sa, f"mse_loss_grad: S({sa.dim}) -> S({sa.dim})",
                     forward=local_grad)


# ------------------------------------------------------------------------------------------ reductions


def reduction(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    (x,) = inputs
    s, dims, keepdim = sbp_of(x), tuple(attrs.get("dim", ())), attrs.get("keepdim", False)
    if s == B or s == P:
        return Signature((s,), s, f"{op.name}: {s.short} -> {s.short}")
    d = s.dim
    if d not in dims:
        out = d if keepdim else d - sum(1 for r in dims if r < d)
        return Signature((s,), split(out), f"{op.name}: S({d}) over other dims -> S({out})")
    if op.name == "sum":
        return Signature((s,), P, f"sum: S({d}) summed over {d} -> P")
    n = count(x.shape, dims)   # mean: each piece's sum over the whole count, so that the pieces add up

    def local_mean(xp: Any, a: Any) -> Any:
        return xp.asarray(xp.sum(a, axis=dims, keepdims=keepdim) / n).astype(a.dtype)
    return Signature((s,), P, f"mean: S({d}) averaged over {d} -> P (local sums / {n})", forward=local_mean)


def sum_to(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    (x,) = inputs
    s, shape = sbp_of(x), tuple(attrs["shape"])
    if s == B or s == P:
        return Signature((s,), s, f"sum_to: {s.short} -> {s.short}")
    lead = x.ndim - len(shape)
    if s.dim in summed_axes(tuple(x.shape), shape):
        return Signature((s,), P, f"sum_to: S({s.dim}) summed away -> P")
    out = list(shape)
    out[s.dim - lead] = _local(shape[s.dim - lead], x)
    return Signature((s,), split(s.dim - lead), f"sum_to: S({s.dim}) kept -> S({s.dim - lead})",
                     attrs={"shape": tuple(out)})


# ------------------------------------------------------------------------------------------ shapes


def permute(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    (x,) = inputs
    s = sbp_of(x)
    if not isinstance(s, split):
        return Signature((s,), s, f"permute: {s.short} -> {s.short}")
    out = tuple(attrs["dims"]).index(s.dim)
    return Signature((s,), split(out), f"permute: S({s.dim}) -> S({out})")


def reshape(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    (x,) = inputs
    s, shape = sbp_of(x), tuple(attrs["shape"])
    if not isinstance(s, split):
        return Signature((s,), s, f"reshape: {s.short} -> {s.short}")
    d = s.dim
    if tuple(x.shape[:d + 1]) != shape[:d + 1]:
        return None
    local = shape[:d] + (_local(shape[d], x),) + shape[d + 1:]
    return Signature((s,), s, f"reshape: S({d}) keeps dims 0..{d} -> S({d})", attrs={"shape": local})


def broadcast_to(op: Any, inputs: tuple, attrs: dict) -> Signature | None:
    (x,) = inputs
    s, shape = sbp_of(x), tuple(attrs["shape"])
    if not isinstance(s, split):
        return Signature((s,), s, f"broadcast_to: {s.short} -> {s.short}")
    if x.shape[s.dim] == 1:
        return None
    D = s.dim + len(shape) - x.ndim
    local = shape[:D] + (_local(shape[D], x),) + shape[D + 1:]
    return Signature((s,), split(D), f"broadcast_to: S({s.dim}) -> S({D})", attrs={"shape": local})


#: The rules by op name; elementwise ops (``op.elementwise``) use :func:`elementwise`, the rest :func:`fallback`.
RULES: dict[str, Callable] = {"matmul": matmul, "sum": reduction, "mean": reduction, "sum_to": sum_to,
                              "permute": permute, "reshape": reshape, "broadcast_to": broadcast_to,
                              # the fast path's fused ops
                              "linear": linear, "linear_grad_weight": linear_grad_weight, "sum_squares": sum_squares,
                              "mse_loss_grad": mse_loss_grad}

