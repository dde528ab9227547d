"""Reflection padding of the last two axes of (N, C, H, W), as style-transfer networks pad before a conv.

``reflection_pad2d`` mirrors the border without repeating the edge pixel: the row ``[a, b, c, d]``
padded by 2 on the left reads ``[c, b, a, b, c, d]``. PyTorch and OneFlow give the padding as
``(left, right, top, bottom)`` (the op's attribute ``sides``); each must be smaller than the axis it pads
(else there is nothing to mirror).

The gradient op folds the padded gradient back: the centre is the input's own gradient and each
border strip, flipped, adds onto the pixels it mirrored. It is linear in the gradient and adjoint to
the forward, so each op is the other's vjp.
"""

from __future__ import annotations

from typing import Any

from ._op import OPS, Op, ShapeError, apply, register, require_float, shape_of


def _check(op: str, shape: tuple, padding: tuple) -> None:
    if len(shape) != 4:
        raise ShapeError(f"{op}: expected a 4-d input (N, C, H, W), got shape {shape}; add a batch dimension "
                         f"with x.unsqueeze(0)")
    if len(padding) != 4 or any(not isinstance(p, int) or p < 0 for p in padding):
        raise ShapeError(f"{op}: padding must be four integers >= 0 (left, right, top, bottom), got {padding}")
    left, right, top, bottom = padding
    h, w = shape[2:]
    if max(left, right) >= w or max(top, bottom) >= h:
        raise ShapeError(f"{op}: reflection padding {padding} must be smaller than the padded axes (H={h}, W={w}): "
                         f"pad by at most {w - 1} left/right and {h - 1} top/bottom")


def _mirror_index(xp: Any, size: int, before: int, after: int) -> Any:
    """For each position of the padded axis, the input position it shows."""
    positions = xp.arange(-before, size + after)
    positions = xp.abs(positions)                                          # left border: mirror at 0
    return xp.where(positions > size - 1, 2 * (size - 1) - positions, positions)  # right border


@register
class ReflectionPad2d(Op):
    name = "reflection_pad2d"

    def forward(self, xp, x, sides=(0, 0, 0, 0)):
        _check(self.name, x.shape, sides)  # Eager mode too: too wide a border would index out of the input
        left, right, top, bottom = sides
        h, w = x.shape[2:]
        rows = _mirror_index(xp, h, top, bottom)
        cols = _mirror_index(xp, w, left, right)
        return x[:, :, rows[:, None], cols[None, :]]

    def infer(self, x, sides=(0, 0, 0, 0)):
        shape = shape_of(x)
        _check(self.name, shape, sides)
        left, right, top, bottom = sides
        return (shape[0], shape[1], shape[2] + top + bottom, shape[3] + left + right), x.dtype

    def vjp(self, grad, inputs, output, sides=(0, 0, 0, 0)):
        return (apply(OPS["reflection_pad2d_grad"], grad, sides=sides),)


@register
class ReflectionPad2dGrad(Op):
    """``dL/dx`` of reflection padding: the centre of ``g`` plus each border strip folded back."""

    name = "reflection_pad2d_grad"

    def forward(self, xp, g, sides=(0, 0, 0, 0)):
        left, right, top, bottom = sides
        g = _fold(g, 3, left, right)
        return _fold(g, 2, top, bottom)

    def infer(self, g, sides=(0, 0, 0, 0)):
        shape = shape_of(g)
        require_float(self.name, g)
        left, right, top, bottom = sides
        if len(shape) != 4:
            raise ShapeError(f"{self.name}: expected a 4-d gradient, got shape {shape}")
        out = (shape[0], shape[1], shape[2] - top - bottom, shape[3] - left - right)
        _check(self.name, out, sides)
        return out, g.dtype

    def vjp(self, grad, inputs, output, sides=(0, 0, 0, 0)):
        return (apply(OPS["reflection_pad2d"], grad, sides=sides),)


def _fold(g: Any, axis: int, before: int, after: int) -> Any:
    """Sum the mirrored strips of ``g`` along ``axis`` back onto the positions they copied."""
    size = g.shape[axis] - before - after

    def cut(start: int, stop: int) -> tuple:
        index = [slice(None)] * g.ndim
        index[axis] = slice(start, stop)
        return tuple(index)

    def flipped(start: int, stop: int) -> Any:
        index = [slice(None)] * g.ndim
        index[axis] = slice(stop - 1, start - 1 if start > 0 else None, -1)
        return g[tuple(index)]

    out = g[cut(before, before + size)].copy()
    if before:  # padded positions 0..before-1 showed input positions before..1
        out[cut(1, before + 1)] += flipped(0, before)
    if after:   # padded positions after the centre showed input positions size-2 down to size-1-after
        out[cut(size - 1 - after, size - 1)] += flipped(before + size, before + size + after)
    return out
