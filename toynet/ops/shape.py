"""Ops that move elements around without arithmetic: reshape, permute, broadcast (indexing and concatenation
are in :mod:`.select`).

Their vjps move the gradient back the same way: reshape back, permute by the inverse permutation, sum over
broadcast dimensions.
"""

from __future__ import annotations

import math

from ._op import Op, ShapeError, apply, register, shape_of



@register
class Reshape(Op):
    """Same elements, new shape (a view when the layout allows)."""

    name = "reshape"
    may_alias_input = True

    def forward(self, xp, a, shape=()):
        return a.reshape(shape)

    def infer(self, a, shape=()):
        return resolve_reshape(shape_of(a), tuple(shape)), a.dtype

    def vjp(self, grad, inputs, output, shape=()):
        # The op itself: the input's shape needs none of Tensor.reshape's argument handling (a third of the cost).
        return (apply(self, grad, shape=tuple(inputs[0].shape)),)


@register
class Permute(Op):
    """Reorder dimensions (``transpose``, ``permute``, ``.T``)."""

    name = "permute"
    may_alias_input = True

    def forward(self, xp, a, dims=()):
        return xp.transpose(a, dims)

    def infer(self, a, dims=()):
        shape = shape_of(a)
        if sorted(dims) != list(range(len(shape))):
            raise ShapeError(f"permute: {dims} is not a permutation of the {len(shape)} dimensions of {shape}")
        return tuple(shape[d] for d in dims), a.dtype

    def vjp(self, grad, inputs, output, dims=()):
        return (grad.permute(*(dims.index(d) for d in range(len(dims)))),)  # the inverse permutation


@register
class BroadcastTo(Op):
    """Repeat along dimensions of size 1 (and new leading ones) without copying (``expand``)."""

    name = "broadcast_to"
    may_alias_input = True

    def forward(self, xp, a, shape=()):
        return xp.broadcast_to(a, shape)

    def infer(self, a, shape=()):
        src = shape_of(a)
        lead = len(shape) - len(src)
        if lead < 0 or any(s not in (1, d) for s, d in zip(src, shape[lead:])):
            raise ShapeError(f"expand: cannot broadcast shape {src} to {tuple(shape)}: each dimension must "
                             f"match or be 1")
        return tuple(shape), a.dtype

    def vjp(self, grad, inputs, output, shape=()):
        return (grad.sum_to(inputs[0].shape),)



# ------------------------------------------------------------------ reading the arguments users write
# Tensor methods (toynet/tensor_methods.py) turn what users write (``x.reshape(2, -1)``, ``x[0, 1:]``)
# into these ops' attributes with the helpers below, so each rule is written once, beside its op.


def shape_arg(args: tuple) -> tuple[int, ...]:
    """Accept both ``f(2, 3)`` and ``f((2, 3))``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


def resolve_reshape(old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
    """The shape ``new`` with its one ``-1`` worked out; an error unless it holds as many elements as ``old``."""
    total, known = math.prod(old), math.prod(d for d in new if d != -1)
    if new.count(-1) > 1:
        raise ShapeError(f"reshape: only one dimension can be -1, got {new}")
    if -1 in new:
        if known == 0 or total % known:
            raise ShapeError(f"reshape: cannot reshape a tensor of shape {old} ({total} elements) into {new}")
        new = tuple(total // known if d == -1 else d for d in new)
    elif known != total:
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {old} ({total} elements) into {new} "
                         f"({known} elements)")
    return new


