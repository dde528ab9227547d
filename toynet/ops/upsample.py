"""Nearest-neighbour upsampling of (N, C, H, W) by whole-number factors.

``upsample_nearest2d`` repeats each pixel ``scale`` times along each axis (a 2x2 block per pixel for a
factor of 2), the upsampling the style-transfer network uses instead of a transposed convolution. Its
gradient sums each block back into the pixel that filled it; the two are adjoint, so each is the
other's vjp. Factors that are not whole numbers would make the blocks uneven: they are refused.
"""

from __future__ import annotations

from ._op import OPS, Op, ShapeError, apply, register, shape_of


def _check_scale(op: str, scale: tuple) -> None:
    if len(scale) != 2 or any(not isinstance(s, int) or s < 1 for s in scale):
        raise ShapeError(f"{op}: scale must be two whole numbers >= 1 (height, width), got {scale}; toynet "
                         f"upsamples by integer factors only (e.g. scale_factor=2)")


@register
class UpsampleNearest2d(Op):
    name = "upsample_nearest2d"

    def forward(self, xp, x, scale=(1, 1)):
        n, c, h, w = x.shape
        sh, sw = scale
        out = xp.empty((n, c, h, sh, w, sw), dtype=x.dtype)
        out[...] = x[:, :, :, None, :, None]  # one broadcast write fills every block
        return out.reshape(n, c, h * sh, w * sw)

    def infer(self, x, scale=(1, 1)):
        shape = shape_of(x)
        if len(shape) != 4:
            raise ShapeError(f"{self.name}: expected a 4-d input (N, C, H, W), got shape {shape}; add a batch "
                             f"dimension with x.unsqueeze(0)")
        _check_scale(self.name, scale)
        return (shape[0], shape[1], shape[2] * scale[0], shape[3] * scale[1]), x.dtype

    def vjp(self, grad, inputs, output, scale=(1, 1)):
        return (apply(OPS["upsample_nearest2d_grad"], grad, scale=scale),)


@register
class UpsampleNearest2dGrad(Op):
    """``dL/dx`` of nearest upsampling: the sum of each ``scale`` block."""

    name = "upsample_nearest2d_grad"

    def forward(self, xp, g, scale=(1, 1)):
        n, c, h, w = g.shape
        sh, sw = scale
        return g.reshape(n, c, h // sh, sh, w // sw, sw).sum(axis=(3, 5))

    def infer(self, g, scale=(1, 1)):
        shape = shape_of(g)
        _check_scale(self.name, scale)
        if len(shape) != 4 or shape[2] % scale[0] or shape[3] % scale[1]:
            raise ShapeError(f"{self.name}: gradient of shape {shape} is not made of {scale} blocks")
        return (shape[0], shape[1], shape[2] // scale[0], shape[3] // scale[1]), g.dtype

    def vjp(self, grad, inputs, output, scale=(1, 1)):
        return (apply(OPS["upsample_nearest2d"], grad, scale=scale),)
