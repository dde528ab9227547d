"""``softmax``'s backward as one op: ``s * (g - sum(g * s))`` in three passes over the scores, in place.

The lesson's vjp (:class:`toynet.ops.reduce_more.Softmax`) writes the formula with four tensor ops, each a new
array of the attention scores' size (a transformer's largest activation after its MLP). Here the product, the
subtraction and the final product share one array. Its own vjp (second derivatives) is written with plain ops.
"""

from __future__ import annotations

from ...mode import fast_replacement
from .._op import OPS, Op, apply, needs_grad, register, shape_of

_Softmax = type(OPS["softmax"])


@register
class SoftmaxGrad(Op):
    """``s * (g - sum(g * s, dim))``: the gradient of softmax's input from its output's gradient ``g`` and its
    output ``s``."""

    name = "softmax_grad"
    supports_out = True

    def forward(self, xp, g, s, dim=-1, out=None):
        result = xp.multiply(g, s, out=out)
        total = xp.sum(result, axis=dim, keepdims=True)
        xp.subtract(g, total, out=result)
        result *= s
        return result

    def infer(self, g, s, dim=-1):
        return shape_of(g), g.dtype

    def vjp(self, grad, inputs, output, dim=-1):
        g, s = inputs
        total = (g * s).sum(dim, keepdim=True)
        grad_g = apply(SoftmaxGrad, grad, s, dim=dim) if needs_grad(g) else None
        grad_s = grad * (g - total) - g * (grad * s).sum(dim, keepdim=True) if needs_grad(s) else None
        return grad_g, grad_s


@fast_replacement(_Softmax, "vjp")
def vjp(self, grad, inputs, output, dim=-1):
    return (apply(SoftmaxGrad, grad, output, dim=dim),)
