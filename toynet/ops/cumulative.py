"""Running totals along one dimension: ``cumsum`` (ONNX's ``CumSum``).

``out[i] = a[0] + a[1] + ... + a[i]`` along ``dim``. Each input element ``a[j]`` is added into every
output from ``j`` on, so its gradient is the sum of the output gradients from ``j`` to the end: the
running total of the gradient taken backwards, ``flip(cumsum(flip(grad)))``. The flips are slices with
step -1, an op (``getitem``) that already has its own vjp, so gradients of gradients work too.
"""

from __future__ import annotations

from ._op import Op, ShapeError, apply, register, shape_of


def _flip(t, dim: int):
    """``t`` reversed along ``dim`` (a view through ``getitem``, differentiable)."""
    return t[(slice(None),) * dim + (slice(None, None, -1),)]


@register
class Cumsum(Op):
    """``out[..., i, ...] = sum of a[..., :i + 1, ...]`` along ``dim``; same shape and dtype as ``a``."""

    name = "cumsum"
    supports_out = True

    def forward(self, xp, a, dim=0, out=None):
        return xp.cumsum(a, axis=dim, dtype=a.dtype, out=out)

    def infer(self, a, dim=0):
        shape = shape_of(a)
        if type(dim) is not int or not -len(shape) <= dim < max(len(shape), 1):
            raise ShapeError(f"cumsum: dim {dim!r} is out of range for shape {shape}; pass an int from "
                             f"{-len(shape)} to {len(shape) - 1}")
        return shape, a.dtype

    def vjp(self, grad, inputs, output, dim=0):
        dim = dim % max(len(grad.shape), 1)
        return (_flip(apply(self, _flip(grad, dim), dim=dim), dim),)
