"""Instance normalisation: each (sample, channel) plane of (N, C, H, W) scaled to mean 0, variance 1.

Batch normalisation shares statistics across the batch; instance normalisation gives every image its
own, which is what style transfer wants (an image's contrast is part of its style, not of the batch).
``instance_norm(x, eps)`` is ``(x - mean) / sqrt(var + eps)`` over each plane, with the biased variance
as PyTorch uses; the affine ``weight`` and ``bias`` are ordinary multiplications added by the layer.

The vjp is the usual normalisation gradient, ``(g - mean(g) - x_hat * mean(g * x_hat)) / sigma``,
written with toynet ops and recomputing ``x_hat`` from ``x`` so it is itself differentiable.
"""

from __future__ import annotations

from ._op import Op, ShapeError, register, require_float, shape_of

_PLANE = (2, 3)


@register
class InstanceNorm(Op):
    name = "instance_norm"

    def forward(self, xp, x, eps=1e-5):
        if len(x.shape) != 4 or x.shape[2] * x.shape[3] < 2:  # a single value would normalise to 0, silently
            self.infer(x, eps=eps)
        mean = x.mean(axis=_PLANE, keepdims=True)
        centred = x - mean
        var = (centred * centred).mean(axis=_PLANE, keepdims=True)
        return centred / xp.sqrt(var + x.dtype.type(eps))

    def infer(self, x, eps=1e-5):
        shape = shape_of(x)
        require_float(self.name, x)
        if len(shape) != 4:
            raise ShapeError(f"{self.name}: expected a 4-d input (N, C, H, W), got shape {shape}; add a batch "
                             f"dimension with x.unsqueeze(0)")
        if shape[2] * shape[3] < 2:
            raise ShapeError(f"{self.name}: each plane needs more than one value to normalise, got shape {shape}")
        return shape, x.dtype

    def vjp(self, grad, inputs, output, eps=1e-5):
        x = inputs[0]
        centred = x - x.mean(_PLANE, keepdim=True)
        inv_std = ((centred * centred).mean(_PLANE, keepdim=True) + eps).rsqrt()
        x_hat = centred * inv_std
        mean_g = grad.mean(_PLANE, keepdim=True)
        mean_gx = (grad * x_hat).mean(_PLANE, keepdim=True)
        return ((grad - mean_g - x_hat * mean_gx) * inv_std,)
