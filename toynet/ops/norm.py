"""Batch normalisation as a few fused ops, so a BatchNorm layer costs a handful of passes over its input.

For an input ``x`` of shape ``(N, C, *spatial)`` every channel ``c`` is normalised with a mean and a
variance taken over the ``M = N * prod(spatial)`` values of that channel, then scaled and shifted::

    xhat = (x - mean) / sqrt(var + eps)          y = weight * xhat + bias

In training mode ``mean`` and ``var`` are the batch's own (biased) statistics, so they depend on ``x``
and the gradient must flow through them too. Written with generic ops (mean, var, sub, mul...) that
costs about ten passes over the activation forward and backward; MobileNetV2 has ~50 such layers, so
toynet instead uses four ops that each read the activation once or twice:

``batch_norm_stats(x)``
    the per-channel ``[mean, var]`` as a ``(2, C)`` tensor (two passes: sum, then squares of the
    centred values, which is numerically stable where ``E[x^2] - E[x]^2`` is not);
``batch_norm(x, mean, var[, weight, bias])``
    ``y = x * scale + shift`` with per-channel ``scale = weight / sqrt(var + eps)`` and
    ``shift = bias - mean * scale``. With ``training=True``, ``mean`` and ``var`` must be the batch
    statistics of ``x``; the vjp then includes the path through them, in closed form::

        gx = weight * invstd / M * (M * g - sum(g) - xhat * sum(g * xhat))

    and ``mean``/``var`` themselves get no gradient. With ``training=False`` they are constants
    (the running statistics) and ``gx = g * weight * invstd``;
``batch_norm_grad_stats(g, x, mean)`` and ``batch_norm_grad_input(...)``
    the backward-only ops the vjp uses: the two per-channel sums, then ``gx``.

How the kernels lay the data out: ``x`` is viewed as ``(N, C*L)`` rows (``L`` = spatial size), and a
per-channel constant is repeated ``L`` times into one ``(C*L,)`` row. Every elementwise step is then
a broadcast along long contiguous rows, about twice as fast in NumPy as broadcasting a ``(C, 1)``
column against ``(N, C, L)``, whose inner loops are only ``L`` long (4 in MobileNetV2's last stages).
The rows are processed a chunk of samples at a time (:data:`CHUNK_BYTES`), every step for one chunk
while it is in the CPU cache, so that temporaries such as ``x - mean`` are never full-sized.
"""

from __future__ import annotations

from typing import Any

from .. import mode
from ._op import Op, ShapeError, apply, register, require_float, result_dtype, shape_of

#: The kernels go through the batch this many bytes of rows at a time, doing every step for one chunk
#: while it is in the CPU cache: each op then reads its inputs from main memory about once, instead
#: of once per NumPy call (measured: forward + backward of a (64, 96, 16, 16) batch 8.9 -> 7.0 ms).
CHUNK_BYTES = 1 << 18


def _rows(xp: Any, x: Any) -> Any:
    """View ``(N, C, *spatial)`` as ``(N, C*L)``: one row per sample, channel after channel."""
    return xp.reshape(x, (x.shape[0], -1))


def _per_element(xp: Any, v: Any, x: Any) -> Any:
    """Repeat a per-channel vector ``(C,)`` into a ``(C*L,)`` row that broadcasts against ``_rows(x)``."""
    return xp.repeat(v, _rows(xp, x).shape[1] // x.shape[1])


def _chunks(rows: Any) -> list:
    """Slices of the batch axis of ``rows`` (N, C*L), each about :data:`CHUNK_BYTES`."""
    n = rows.shape[0]
    k = max(1, min(n, CHUNK_BYTES // max(1, rows.shape[1] * rows.itemsize)))
    return [slice(start, min(n, start + k)) for start in range(0, n, k)]


def _channel_sum(xp: Any, channels: int, a: Any, b: Any = None, scratch: Any = None) -> Any:
    """Per-channel sum of ``a`` (or of ``a * b``), given as ``(k, C*L)`` rows: over the rows and every
    spatial position. Long rows never materialise ``a * b``; short ones write it into ``scratch`` (an
    array of ``a``'s shape the caller no longer needs, such as ``a`` itself), or a new array."""
    k, length = a.shape[0], a.shape[1] // channels
    if length >= 32:  # long spatial rows: einsum reduces (k, C, L) -> (C,) in one sweep
        a3 = xp.reshape(a, (k, channels, length))
        if b is None:
            return xp.einsum("ncl->c", a3)
        return xp.einsum("ncl,ncl->c", a3, xp.reshape(b, (k, channels, length)))
    # Short rows (late, small feature maps, or channels-last data seen as (N*H*W, C) rows): sum the
    # columns, then each channel's L of them.
    if b is not None:
        a = xp.multiply(a, b, out=scratch)
    return xp.sum(_column_sum(xp, a).reshape(channels, length), axis=1)


def _column_sum(xp: Any, a: Any) -> Any:
    """Sum of the rows of ``a``, as one BLAS product ``ones @ a``.

    A channels-last activation is a tall ``(N*H*W, C)`` matrix, and its per-channel sums are its column
    sums. NumPy's ``sum(axis=0)`` adds the rows one after the other with an inner loop only C elements
    long (32 in MobileNetV2's first layers), which made BatchNorm's statistics in Graph mode's
    channels-last region several times slower than the same sums in the NCHW layout. BLAS reads the
    matrix once, at memory speed, keeping several running totals per column: measured on a (16384, 32)
    activation, 54 us instead of 460 us, with a relative error of 1e-6 (NumPy's sum: 4e-6).
    """
    if a.ndim == 2 and a.dtype.kind == "f" and a.dtype.itemsize >= 4:
        return _ones(xp, a.shape[0], a.dtype) @ a
    return xp.sum(a, axis=0)  # float16, integers: NumPy accumulates in a wider type


_ONES: dict[tuple, Any] = {}


def _ones(xp: Any, n: int, dtype: Any) -> Any:
    """A vector of ``n`` ones (made once per module, length and dtype; read-only on NumPy)."""
    key = (xp.__name__, n, str(dtype))
    ones = _ONES.get(key)
    if ones is None:
        if len(_ONES) > 256:
            _ONES.clear()
        ones = _ONES[key] = xp.ones(n, dtype=dtype)
        if xp.__name__ == "numpy":
            ones.flags.writeable = False
    return ones


def _centered_sum(xp: Any, channels: int, rows: Any, mean_row: Any, weights: Any = None) -> Any:
    """Per-channel ``sum((x - mean) * w)`` (``w`` = ``x - mean`` itself when ``weights`` is None: the
    sum of squares), chunk by chunk: ``x - mean`` is only ever a chunk-sized array, in cache."""
    total = None
    buffer = None
    for part in _chunks(rows):
        if buffer is None:
            buffer = xp.empty((part.stop - part.start, rows.shape[1]), dtype=rows.dtype)
        centered = xp.subtract(rows[part], mean_row, out=buffer[:part.stop - part.start])
        term = _channel_sum(xp, channels, centered, centered if weights is None else weights[part],
                            scratch=centered)   # (centered is not read again)
        total = term if total is None else total + term
    return total


def _count(shape: tuple) -> int:
    """M: how many values each channel's statistics are taken over."""
    m = 1
    for i, d in enumerate(shape):
        if i != 1:
            m *= d
    return m


def _check_input(op: str, x: Any) -> tuple:
    shape = shape_of(x)
    require_float(op, x)
    if len(shape) < 2:
        raise ShapeError(f"{op}: expected an input of shape (N, C) or (N, C, *spatial), got shape {shape}")
    return shape


def _check_channel_vector(op: str, what: str, v: Any, channels: int, x_shape: tuple) -> None:
    if shape_of(v) != (channels,):
        raise ShapeError(f"{op}: {what} has shape {shape_of(v)} but the input {x_shape} has {channels} channels "
                         f"(dimension 1); {what} must have shape ({channels},)")


def _needs_grad(x: Any) -> bool:
    return getattr(x, "requires_grad", False)


def _reduce_dims(x: Any) -> tuple:
    """Every dimension but the channel dimension 1."""
    return (0,) + tuple(range(2, x.ndim))


def _keepdim_shape(x: Any) -> tuple:
    """``(1, C, 1, ...)``: how a per-channel tensor broadcasts against ``x`` in toynet ops."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


@register
class BatchNormStats(Op):
    """Per-channel batch statistics of ``x`` ``(N, C, *spatial)``: a ``(2, C)`` tensor holding the mean
    (row 0) and the biased variance ``mean((x - mean)^2)`` (row 1).

    vjp: d mean / dx = 1/M, d var / dx = 2 (x - mean) / M, per channel.
    """

    name = "batch_norm_stats"

    def forward(self, xp, x):
        m, rows = _count(x.shape), _rows(xp, x)
        mean = _channel_sum(xp, x.shape[1], rows) / m
        var = _centered_sum(xp, x.shape[1], rows, _per_element(xp, mean, x)) / m
        return xp.stack([mean, var])

    def infer(self, x):
        shape = _check_input(self.name, x)
        return (2, shape[1]), x.dtype

    def vjp(self, grad, inputs, output, **attrs):
        x = inputs[0]
        shape = _keepdim_shape(x)
        m = _count(x.shape)
        mean = x.mean(_reduce_dims(x)).reshape(shape)   # recomputed, so that it is differentiable too
        grad_mean, grad_var = grad[0].reshape(shape), grad[1].reshape(shape)
        return (grad_mean * (1.0 / m) + (x - mean) * grad_var * (2.0 / m),)


@register
class BatchNorm(Op):
    """``y = (x - mean) / sqrt(var + eps) * weight + bias`` per channel (dimension 1 of ``x``).

    Inputs: ``x`` ``(N, C, *spatial)``, ``mean`` and ``var`` ``(C,)``, then optionally ``weight`` and
    ``bias`` ``(C,)`` (both or neither). With ``training=True`` the vjp treats ``mean``/``var`` as the
    batch statistics of ``x`` (see the module docstring); with ``training=False`` as constants.
    """

    name = "batch_norm"
    nondifferentiable = (1, 2)

    def forward(self, xp, x, mean, var, weight=None, bias=None, eps=1e-5, training=True):
        scale = 1.0 / xp.sqrt(var + eps)
        if weight is not None:
            scale = scale * weight
        shift = -mean * scale
        if bias is not None:
            shift = shift + bias
        rows, scale, shift = _rows(xp, x), _per_element(xp, scale, x), _per_element(xp, shift, x)
        y = xp.empty(rows.shape, dtype=xp.result_type(rows, scale))
        for part in _chunks(rows):      # both passes over a chunk while it is in cache
            out = xp.multiply(rows[part], scale, out=y[part])
            out += shift
        return y.reshape(x.shape)

    def infer(self, x, mean, var, weight=None, bias=None, eps=1e-5, training=True):
        shape = _check_input(self.name, x)
        named = [("mean", mean), ("var", var)] + ([("weight", weight), ("bias", bias)] if weight is not None else [])
        for what, v in named:
            _check_channel_vector(self.name, what, v, shape[1], shape)
        return shape, result_dtype(*(v for _, v in named), x)

    def vjp(self, grad, inputs, output, eps=1e-5, training=True):

        x, mean, var, weight, bias = inputs if len(inputs) == 5 else (*inputs, None, None)
        if mode.grad_enabled:
            # create_graph=True: the gradient itself will be differentiated, so build it from
            # differentiable toynet ops (the readable version of the maths below).
            grads = _vjp_differentiable(grad, x, mean, var, weight, eps, training)
        else:
            grads = _vjp_fused(grad, x, mean, var, weight, bias, eps, training)
        grad_x, grad_w, grad_b = grads
        if weight is None:
            return grad_x, None, None
        return grad_x, None, None, grad_w, grad_b


def _vjp_fused(grad: Any, x: Any, mean: Any, var: Any, weight: Any, bias: Any, eps: float, training: bool) -> tuple:
    """The fast vjp: one op for the two per-channel sums, one op for ``gx`` (about 7 passes in all)."""

    want_x, want_affine = _needs_grad(x), weight is not None and (_needs_grad(weight) or _needs_grad(bias))
    sums = None
    if want_affine or (want_x and training):
        sums = apply(BatchNormGradStats, grad, x, mean)   # [sum(g), sum(g * (x - mean))]
    grad_x = grad_w = grad_b = None
    if want_x:
        if training:
            extra = (weight,) if weight is not None else ()
            grad_x = apply(BatchNormGradInput, grad, x, mean, var, sums, *extra, eps=eps)
        else:
            scale = (var + eps).rsqrt() if weight is None else (var + eps).rsqrt() * weight
            grad_x = grad * scale.reshape(_keepdim_shape(x))
    if want_affine:
        grad_w = sums[1] * (var + eps).rsqrt()              # sum(g * xhat)
        grad_b = sums[0]
    return grad_x, grad_w, grad_b


def _vjp_differentiable(grad: Any, x: Any, mean: Any, var: Any, weight: Any, eps: float, training: bool) -> tuple:
    """The same gradients written with generic toynet ops, so they can be differentiated again.

    In training mode the statistics are recomputed from ``x`` with a differentiable op: the saved
    ``mean``/``var`` inputs are constants to autograd, but their dependence on ``x`` matters for the
    second derivative.
    """

    shape, dims = _keepdim_shape(x), _reduce_dims(x)
    if training:
        stats = apply(BatchNormStats, x)
        mean, var = stats[0], stats[1]
    invstd = (var + eps).rsqrt().reshape(shape)
    xhat = (x - mean.reshape(shape)) * invstd
    grad_xhat = grad * weight.reshape(shape) if weight is not None else grad
    if training:
        grad_x = invstd * (grad_xhat - grad_xhat.mean(dims, keepdim=True)
                           - xhat * (grad_xhat * xhat).mean(dims, keepdim=True))
    else:
        grad_x = grad_xhat * invstd
    if weight is None:
        return grad_x, None, None
    return grad_x, (grad * xhat).sum(dims), grad.sum(dims)


@register
class BatchNormGradStats(Op):
    """Backward helper: the per-channel sums ``[sum(g), sum(g * (x - mean))]`` as a ``(2, C)`` tensor.

    The first is the bias gradient; the second, times ``invstd``, the weight gradient ``sum(g * xhat)``.
    """

    name = "batch_norm_grad_stats"
    nondifferentiable = (0, 1, 2)

    def forward(self, xp, grad, x, mean):
        channels, g_rows = x.shape[1], _rows(xp, grad)
        sum_g = _channel_sum(xp, channels, g_rows)
        sum_g_centered = _centered_sum(xp, channels, _rows(xp, x), _per_element(xp, mean, x), g_rows)
        return xp.stack([sum_g, sum_g_centered])

    def infer(self, grad, x, mean):
        shape = _check_input(self.name, x)
        return (2, shape[1]), result_dtype(grad, x, mean)

    def vjp(self, grad, inputs, output, **attrs):
        raise NotImplementedError("batch_norm_grad_stats is used only when the gradient is not itself "
                                  "differentiated; batch_norm's vjp uses generic ops under create_graph=True")


@register
class BatchNormGradInput(Op):
    """Backward helper: the training-mode input gradient of batch norm, in closed form::

        gx = k1 * (g - sum(g)/M - (x - mean) * invstd^2 * sum(g (x - mean))/M),  k1 = weight * invstd

    computed as ``g * k1 + x * k2 + k3`` with per-channel constants (four passes over the data).
    Inputs: ``grad, x, mean, var, sums`` (from ``batch_norm_grad_stats``) and optionally ``weight``.
    """

    name = "batch_norm_grad_input"
    nondifferentiable = (0, 1, 2, 3, 4, 5)

    def forward(self, xp, grad, x, mean, var, sums, weight=None, eps=1e-5):
        m = _count(x.shape)
        invstd = 1.0 / xp.sqrt(var + eps)
        k1 = invstd if weight is None else invstd * weight
        k2 = -k1 * invstd * invstd * sums[1] / m
        k3 = -k1 * sums[0] / m - k2 * mean
        g_rows, x_rows = _rows(xp, grad), _rows(xp, x)
        k1, k2, k3 = (_per_element(xp, k, x) for k in (k1, k2, k3))
        gx = xp.empty(g_rows.shape, dtype=xp.result_type(g_rows, x_rows, k1))
        term = None
        for part in _chunks(g_rows):    # four passes over a chunk while it is in cache
            if term is None:
                term = xp.empty((part.stop - part.start, gx.shape[1]), dtype=gx.dtype)
            out = xp.multiply(g_rows[part], k1, out=gx[part])
            out += xp.multiply(x_rows[part], k2, out=term[:part.stop - part.start])
            out += k3
        return gx.reshape(x.shape)

    def infer(self, grad, x, mean, var, sums, weight=None, eps=1e-5):
        shape = _check_input(self.name, x)
        return shape, result_dtype(grad, x, mean, var, *(() if weight is None else (weight,)))

    def vjp(self, grad, inputs, output, **attrs):
        raise NotImplementedError("batch_norm_grad_input is used only when the gradient is not itself "
                                  "differentiated; batch_norm's vjp uses generic ops under create_graph=True")
