"""Changing how values are stored, not what they are: another dtype, a copy, another device."""

from __future__ import annotations

from .. import backend
from ._op import Elementwise, Op, register, shape_of


@register
class Cast(Elementwise):
    """Convert to another dtype; the gradient is converted back."""

    name = "cast"

    def forward(self, xp, a, out=None, dtype=None):
        if out is None:
            return a.astype(dtype.array_dtype)
        out[...] = a
        return out

    def infer(self, a, dtype=None):
        return shape_of(a), dtype

    def vjp(self, grad, inputs, output, dtype=None):
        a = inputs[0]
        return (grad.to(a.dtype) if a.dtype.is_floating_point else None,)


@register
class Identity(Elementwise):
    """A copy of ``a`` (``tensor.clone()``)."""

    name = "identity"

    def forward(self, xp, a, out=None):
        if out is None:
            return a.copy()
        out[...] = a
        return out

    def infer(self, a, **attrs):
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, **attrs):
        return (grad,)


@register
class ToDevice(Op):
    """Copy to another device (``tensor.to("cuda")``); the gradient is copied back."""

    name = "to_device"
    changes_device = True

    def forward(self, xp, a, device=None, source=None):
        return backend.to_device(a, source, device)

    def infer(self, a, device=None, source=None):
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, device=None, source=None):
        return (grad.to(source),)
