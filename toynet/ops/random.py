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
        return (None,) * len(inputs)


@register
class Multinomial(Op):
    """``num_samples`` category indices (int64) per row of ``probs`` ``(C,)`` or ``(N, C)``, drawn with
    probabilities proportional to the row (non-negative weights, not necessarily summing to 1).

    With ``replacement``, each draw is independent: a uniform number looked up in the row's cumulative sum.
    Without, the first draw is as with replacement and each later one excludes the categories already drawn,
    which is the order in which independent exponential clocks of rates ``p_i`` ring: the ``num_samples``
    smallest of ``E_i / p_i`` (``E_i`` standard exponential), one sort and no loop. Draws come from toynet's
    host generator, so ``toynet.manual_seed`` makes them reproducible on every device. No gradient.
    ``num_samples`` and ``replacement`` are inputs (Python numbers).
    """

    name = "multinomial"
    random = True
    nondifferentiable = (0, 1, 2)

    def forward(self, xp, probs, num_samples=1, replacement=False):
        module = backend.array_module_of_xp(xp)
        rows = module.to_numpy(probs).astype("float64").reshape(-1, probs.shape[-1])
        host, generator = backend.host, backend.generator()
        if not (host.isfinite(rows).all() and (rows >= 0).all()):
            raise ValueError("multinomial: probabilities must be finite and non-negative (got a negative, inf or nan "
                             "entry); pass softmax(logits) or other non-negative weights")
        totals = rows.sum(axis=1)
        if (totals <= 0).any():
            raise ValueError("multinomial: a row of probabilities sums to 0; each row needs at least one positive "
                             "weight")
        if replacement:
            cumulative = host.cumsum(rows, axis=1)
            draws = generator.random((rows.shape[0], num_samples)) * cumulative[:, -1:]
            samples = host.stack([host.searchsorted(c, d, side="right") for c, d in zip(cumulative, draws)])
            last_positive = rows.shape[1] - 1 - host.argmax(rows[:, ::-1] > 0, axis=1)
            samples = host.minimum(samples, last_positive[:, None])     # (a draw rounded up to the total)
        else:
            if ((rows > 0).sum(axis=1) < num_samples).any():
                raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from a row "
                                 f"with fewer than {num_samples} categories of positive probability; draw fewer, "
                                 "or pass replacement=True")
            with host.errstate(divide="ignore"):
                clocks = generator.standard_exponential(rows.shape) / rows
            samples = host.argsort(clocks, axis=1, kind="stable")[:, :num_samples]
        shape = (num_samples,) if probs.ndim == 1 else (probs.shape[0], num_samples)
        return backend.host_to_xp(xp, host.ascontiguousarray(samples, dtype=host.int64).reshape(shape))

    def infer(self, probs, num_samples=1, replacement=False):
        require_float(self.name, probs)
        shape = shape_of(probs)
        if len(shape) not in (1, 2):
            raise ShapeError(f"multinomial: probs must be 1-D (C,) or 2-D (N, C), got shape {shape}")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ShapeError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
        if not replacement and num_samples > shape[-1]:
            raise ShapeError(f"multinomial: cannot draw {num_samples} samples without replacement from {shape[-1]} "
                             f"categories; pass replacement=True or draw at most {shape[-1]}")
        return ((num_samples,) if len(shape) == 1 else (shape[0], num_samples)), backend.int64

    def vjp(self, grad, inputs, output, **attrs):
        return (None,) * len(inputs)
