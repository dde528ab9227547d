"""Random ops: their output depends on toynet's random generator, not only on their inputs.

They set ``random = True`` so Graph mode never constant-folds them or merges two of them, and a
compiled graph draws fresh numbers on every run. The numbers come from the one host generator in
:mod:`toynet.backend`, so ``toynet.manual_seed`` makes them reproducible on every device.
"""

from __future__ import annotations

from .. import backend
from ._op import Op, ShapeError, register, require_float, shape_of


@register
class DropoutMask(Op):
    """A dropout mask shaped like ``x``: each element is ``1 / (1 - p)`` with probability ``1 - p``, else 0.

    Dropout is then ``x * mask``: the kept elements are scaled up so the expected value of every
    element is unchanged, and the gradient is simply the multiplication's (``g * mask``).
    ``x`` supplies only the shape and dtype, so the mask carries no gradient.
    """

    name = "dropout_mask"
    random = True
    nondifferentiable = (0,)

    def forward(self, xp, x, p=0.5):
        dtype = backend.dtype_of(x)
        if not dtype.is_floating_point:  # 1 / (1 - p) has no integer form; say so rather than round it
            raise ShapeError(f"dropout_mask: needs a floating-point tensor, got {dtype}; convert it with "
                             ".to(toynet.float32)")
        if p >= 1.0:  # keep nothing: 1 / (1 - p) would divide by zero
            return xp.zeros(x.shape, dtype=dtype.array_dtype)
        return backend.bernoulli_mask(xp, tuple(x.shape), 1.0 - p, dtype)

    def infer(self, x, p=0.5):
        require_float(self.name, x)
        if not 0.0 <= p <= 1.0:
            raise ShapeError(f"dropout_mask: the drop probability p must be between 0 and 1, got {p}")
        return shape_of(x), x.dtype

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)
