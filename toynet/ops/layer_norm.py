"""Layer normalisation as one op forward and one op backward.

Each *row* of ``x`` (its last ``k`` dimensions, ``normalized_shape``, flattened: ``D`` values) is normalised
with its own mean and (biased) variance, then scaled and shifted element by element::

    xhat = (x - mean) / sqrt(var + eps)          y = xhat * weight + bias

Unlike batch norm, the statistics are per row, not per channel: nothing is shared across the batch, and
training and evaluation compute the same thing. Written with generic ops that is about ten passes over the
activation forward and twenty backward, each a NumPy call; a transformer has two of these layers a block.
Here

``layer_norm(x[, weight[, bias]])``
    computes ``y`` row chunk by row chunk (statistics, then ``y``, while the chunk is in the CPU cache);
``layer_norm_grad(g, x[, weight])``
    the vjp's op: it recomputes each row's statistics and returns, in one ``(R + 2, D)`` array, the input's
    gradient (the first ``R`` rows, one per row of ``x``), then the weight's and the bias's::

        gx = invstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat)),    gxhat = g * weight
        gweight = sum over rows of g * xhat,      gbias = sum over rows of g

Under ``create_graph=True`` the vjp is written with plain, differentiable ops instead (the readable version
of the same maths).
"""

from __future__ import annotations

import math
from typing import Any

from .. import mode
from ._op import Op, ShapeError, apply, needs_grad, register, require_float, result_dtype, shape_of

#: Rows are processed this many bytes at a time, every step for one chunk while it is in the CPU cache.
CHUNK_BYTES = 1 << 18


def _rows(xp: Any, x: Any, dim: tuple) -> Any:
    """``x`` seen as ``(R, D)``: one row per normalised group (``dim``: the trailing axes normalised over)."""
    return xp.reshape(x, (-1, math.prod(x.shape[x.ndim - len(dim):])))


def _chunks(rows: int, width: int, itemsize: int) -> list:
    step = max(1, CHUNK_BYTES // max(1, width * itemsize))
    return [slice(start, min(rows, start + step)) for start in range(0, rows, step)]


def _row_means(xp: Any, rows: Any) -> Any:
    """Each row's mean, as a column: one matrix-vector product with ``(1/D, ..., 1/D)``, a single BLAS call for
    all the rows (several times faster than NumPy's ``mean`` along rows as short as a transformer's)."""
    width = rows.shape[1]
    return (rows @ xp.full(width, 1.0 / width, dtype=rows.dtype))[:, None]


def _statistics(xp: Any, chunk: Any, eps: float, centered: Any) -> Any:
    """Write ``chunk - mean`` (per row) into ``centered``; return ``1 / sqrt(var + eps)`` as a column."""
    width = chunk.shape[1]
    xp.subtract(chunk, _row_means(xp, chunk), out=centered)
    var = xp.einsum("ij,ij->i", centered, centered) / width
    var += eps
    return (1.0 / xp.sqrt(var))[:, None]


def _compute_dtype(dtype: Any) -> str:
    """float16 is normalised in float32 (its sums of squares would lose most of their digits)."""
    return "float64" if dtype.itemsize == 8 else "float32"


def _check(op: str, x: Any, dim: tuple, eps: float, params: tuple) -> tuple:
    shape = shape_of(x)
    require_float(op, x)
    trailing = tuple(range(len(shape) - len(dim), len(shape)))
    if not dim or any(not isinstance(d, int) or not -len(shape) <= d < len(shape) for d in dim) or \
            tuple(d % len(shape) for d in dim) != trailing:
        raise ShapeError(f"{op}: cannot normalise over dimensions {dim} of an input of shape {shape}: they must be "
                         f"its last ones (normalized_shape must be a trailing part of the input's shape)")
    if not eps > 0:
        raise ShapeError(f"{op}: eps must be positive (it keeps 1 / sqrt(var + eps) finite), got {eps}")
    row = shape[len(shape) - len(dim):]
    for what, p in zip(("weight", "bias"), params):
        if shape_of(p) != row:
            raise ShapeError(f"{op}: {what} has shape {shape_of(p)} but the normalised shape is {row} (the last "
                             f"{len(dim)} dimension(s) of the input {shape}); {what} must have shape {row}")
    return shape


@register
class LayerNorm(Op):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the axes ``dim``, the last ones (see the module doc).

    Inputs: ``x``, then optionally ``weight``, then optionally ``bias`` (both of the normalised shape).
    """

    name = "layer_norm"
    supports_out = True

    def forward(self, xp, x, weight=None, bias=None, dim=(-1,), eps=1e-5, out=None):
        if x.dtype.kind != "f":
            raise ShapeError(f"layer_norm: needs a floating-point tensor, got {x.dtype}; convert it with "
                             ".to(toynet.float32)")
        rows = _rows(xp, x, dim)
        dtype = xp.result_type(x, *(p for p in (weight, bias) if p is not None))
        y = xp.empty(rows.shape, dtype=dtype) if out is None else out.reshape(rows.shape)
        compute = _compute_dtype(dtype)
        w, b = (None if p is None else p.reshape(-1).astype(compute, copy=False) for p in (weight, bias))
        for part in _chunks(rows.shape[0], rows.shape[1], 4):
            target = y[part] if y.dtype == compute else xp.empty((part.stop - part.start, rows.shape[1]), compute)
            invstd = _statistics(xp, rows[part].astype(compute, copy=False), eps, target)
            target *= invstd
            if w is not None:
                target *= w
            if b is not None:
                target += b
            if target.dtype != y.dtype:
                y[part] = target
        return y.reshape(x.shape) if out is None else out

    def infer(self, x, weight=None, bias=None, dim=(-1,), eps=1e-5):
        shape = _check(self.name, x, dim, eps, tuple(p for p in (weight, bias) if p is not None))
        return shape, result_dtype(x, *(p for p in (weight, bias) if p is not None))

    def vjp(self, grad, inputs, output, dim=(-1,), eps=1e-5):
        x, weight, bias = (tuple(inputs) + (None, None))[:3]
        if mode.grad_enabled:
            # create_graph=True: the gradient will itself be differentiated, so build it from plain ops.
            return layer_norm_vjp(grad, x, weight, bias, dim, eps)
        want_params = any(needs_grad(p) for p in (weight, bias) if p is not None)
        extra = () if weight is None else (weight,)
        packed = apply(LayerNormGrad, grad, x, *extra, dim=dim, eps=eps, params=want_params)
        rows = packed.shape[0] - (2 if want_params else 0)
        grad_x = (packed[:rows] if want_params else packed).reshape(x.shape) if needs_grad(x) else None
        grads = [grad_x]
        for k, p in enumerate((weight, bias)):
            if p is not None:
                grads.append(packed[rows + k].reshape(p.shape) if needs_grad(p) else None)
        return tuple(grads)


def layer_norm_vjp(grad: Any, x: Any, weight: Any, bias: Any, dim: tuple, eps: float) -> tuple:
    """The gradients of ``layer_norm`` written with generic, differentiable toynet ops."""
    axes = tuple(dim)
    centered = x - x.mean(axes, keepdim=True)
    invstd = ((centered * centered).mean(axes, keepdim=True) + eps).rsqrt()
    xhat = centered * invstd
    grad_xhat = grad * weight if weight is not None else grad
    grad_x = invstd * (grad_xhat - grad_xhat.mean(axes, keepdim=True)
                       - xhat * (grad_xhat * xhat).mean(axes, keepdim=True))
    grads = [grad_x if needs_grad(x) else None]
    if weight is not None:
        grads.append((grad * xhat).sum_to(weight.shape) if needs_grad(weight) else None)
    if bias is not None:
        grads.append(grad.sum_to(bias.shape) if needs_grad(bias) else None)
    return tuple(grads)


@register
class LayerNormGrad(Op):
    """Backward helper: ``layer_norm``'s gradients as one ``(R + 2, D)`` array (``(R, D)`` with
    ``params=False``): the input's, row by row, then the weight's and the bias's (see the module doc).
    Inputs: ``grad``, ``x`` and, if the layer has one, ``weight``."""

    name = "layer_norm_grad"
    nondifferentiable = (0, 1, 2)

    def forward(self, xp, grad, x, weight=None, dim=(-1,), eps=1e-5, params=True):
        rows, g_rows = _rows(xp, x, dim), _rows(xp, grad, dim)
        count, width = rows.shape
        dtype = xp.result_type(grad, x, *(() if weight is None else (weight,)))
        compute = _compute_dtype(dtype)
        packed = xp.empty((count + (2 if params else 0), width), dtype=dtype)
        w = None if weight is None else weight.reshape(-1).astype(compute, copy=False)
        xhat = grad_xhat = None
        for part in _chunks(count, width, 4):
            n = part.stop - part.start
            if xhat is None or xhat.shape[0] != n:
                xhat, grad_xhat = xp.empty((n, width), dtype=compute), xp.empty((n, width), dtype=compute)
            g = g_rows[part].astype(compute, copy=False)
            invstd = _statistics(xp, rows[part].astype(compute, copy=False), eps, xhat)
            xhat *= invstd
            if params:   # summed over the rows: the weight's (sum g * xhat) and the bias's (sum g)
                ones = xp.ones(n, dtype=compute)
                sums = xp.stack([ones @ xp.multiply(g, xhat, out=grad_xhat), ones @ g])
                if part.start == 0:
                    packed[count:] = sums
                else:
                    packed[count:] += sums
            if w is not None:
                xp.multiply(g, w, out=grad_xhat)
            else:
                grad_xhat[...] = g
            mean_g = _row_means(xp, grad_xhat)
            mean_gx = (xp.einsum("ij,ij->i", grad_xhat, xhat) / width)[:, None]
            gx = xp.multiply(xhat, mean_gx, out=packed[part] if packed.dtype == compute else xhat)
            xp.subtract(grad_xhat, gx, out=gx)
            gx -= mean_g
            gx *= invstd
            if gx.dtype != packed.dtype:
                packed[part] = gx
        return packed

    def infer(self, grad, x, weight=None, dim=(-1,), eps=1e-5, params=True):
        shape = _check(self.name, x, dim, eps, () if weight is None else (weight,))
        if shape_of(grad) != shape:
            raise ShapeError(f"{self.name}: the gradient has shape {shape_of(grad)} but the input has {shape}")
        width = math.prod(shape[len(shape) - len(dim):])
        return (math.prod(shape) // max(1, width) + (2 if params else 0), width), \
            result_dtype(grad, x, *(() if weight is None else (weight,)))

    def vjp(self, grad, inputs, output, **attrs):
        raise NotImplementedError("layer_norm_grad is used only when the gradient is not itself differentiated; "
                                  "layer_norm's vjp uses plain ops under create_graph=True")
