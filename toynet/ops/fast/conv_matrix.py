"""The *matrix* depthwise kernel: on small images, a depthwise convolution as one matrix per channel.

On a 2x2 image a 3x3 kernel with padding 1 reaches every pixel from every output pixel, and on 4x4 most of
them: the taps kernel (:func:`toynet.ops.fast.conv_nhwc.depthwise_nhwc`) then makes up to 18 NumPy calls on
slices of two or four pixels each, and NumPy spends its time starting loops, not computing. Seen per
channel, the convolution maps the ``P = H * W`` input pixels to the ``Q = Ho * Wo`` output pixels linearly::

    y[n, q, c] = sum over p of  M[q, p, c] * x[n, p, c]      M[q, p, c] = w[c, tap(q, p)], or 0

where ``tap(q, p)`` is the kernel position that carries input pixel ``p`` to output pixel ``q`` (none: 0).
``M`` is made from the weights with one gather, through an index map that depends only on the geometry,
and the whole convolution is one ``einsum`` over the batch: measured on MobileNetV2's 2x2 layers, three
times faster than the taps. On larger images ``M`` is mostly zeros (9 taps among 64 pixels on 8x8) and
the taps win; Graph mode times both when it compiles (:mod:`toynet.static.passes.fast.kernels`).

The two gradients are the same matrix read the other way: ``dx = M^T g`` per channel, and ``dw[tap, c]``
the sum of ``g[n, q, c] * x[n, p, c]`` over the images and over the pixel pairs joined by that tap.
"""

from __future__ import annotations

import functools
from typing import Any

from ... import backend
from ..conv_kernels import geometry
from .conv_nhwc import finish_into

#: The matrix kernel is offered only where a channel's matrix has at most this many entries (Q * P).
MAX_ENTRIES = 1024


@functools.lru_cache(maxsize=256)
def _index_map(h: int, w: int, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> Any:
    """``(Q, P)`` host array: for each output and input pixel, the tap joining them, or ``kh * kw`` (none)."""
    host = backend.CPU.xp
    (kh, kw), (ho, wo) = geometry((1, 1, h, w), (1, 1) + tuple(kernel), stride, padding, dilation)
    taps = kh * kw
    index = host.full((ho * wo, h * w), taps, dtype=host.intp)
    for r in range(ho):
        for c in range(wo):
            for i in range(kh):
                u = r * stride[0] + i * dilation[0] - padding[0]
                if not 0 <= u < h:
                    continue
                for j in range(kw):
                    v = c * stride[1] + j * dilation[1] - padding[1]
                    if 0 <= v < w:
                        index[r * wo + c, u * w + v] = i * kw + j
    index.flags.writeable = False
    return index


def applies(x_hw: tuple, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> bool:
    """Is a channel's matrix small enough for this geometry?"""
    _, (ho, wo) = geometry((1, 1) + tuple(x_hw), (1, 1) + tuple(kernel), stride, padding, dilation)
    return ho * wo * x_hw[0] * x_hw[1] <= MAX_ENTRIES


def _matrix(xp: Any, w: Any, h: int, wd: int, stride: tuple, padding: tuple, dilation: tuple) -> Any:
    """``M`` (Q, P, C) of the weights ``w`` (C, 1, kh, kw): one gather from the taps and a row of zeros."""
    c, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    index = _index_map(h, wd, (kh, kw), tuple(stride), tuple(padding), tuple(dilation))
    taps = xp.concatenate([w.reshape(c, kh * kw).T, xp.zeros((1, c), dtype=w.dtype)])
    return taps[xp.asarray(index)]


def depthwise_matrix(xp: Any, x: Any, w: Any, b: Any, activation: str | None, stride: tuple, padding: tuple,
                     dilation: tuple, out: Any) -> Any:
    """Depthwise convolution of NHWC ``x`` into NHWC ``out`` as ``y = M x`` per channel (bias, activation)."""
    n, h, wd, c = x.shape
    m = _matrix(xp, w, h, wd, stride, padding, dilation)
    product = xp.einsum("npc,qpc->nqc", x.reshape(n, h * wd, c), m)
    finish_into(xp, out.reshape(n, -1, c), product, b, activation)
    return out


def depthwise_matrix_grad_input(xp: Any, g: Any, w: Any, x_shape: tuple, stride: tuple, padding: tuple,
                                dilation: tuple, out: Any = None) -> Any:
    """``dL/dx`` (NHWC): ``dx = M^T g`` per channel."""
    n, h, wd, c = x_shape
    m = _matrix(xp, w, h, wd, stride, padding, dilation)
    dx = xp.einsum("nqc,qpc->npc", g.reshape(n, -1, c), m)
    if out is None:
        return dx.reshape(x_shape)
    out.reshape(n, h * wd, c)[...] = dx
    return out


def depthwise_matrix_grad_weight(xp: Any, x: Any, g: Any, w_shape: tuple, stride: tuple, padding: tuple,
                                 dilation: tuple) -> Any:
    """``dL/dw``: the per-pixel-pair sums ``sum_n g[n, q, c] x[n, p, c]``, added up by the tap joining q and p."""
    n, h, wd, c = x.shape
    kh, kw = w_shape[2], w_shape[3]
    index = _index_map(h, wd, (kh, kw), tuple(stride), tuple(padding), tuple(dilation))
    pairs = xp.einsum("nqc,npc->qpc", g.reshape(n, -1, c), x.reshape(n, h * wd, c))
    # one row per tap (and one for "no tap"), a 1 where a pixel pair is joined by that tap: a BLAS product
    host = backend.CPU.xp
    joins = (index.reshape(1, -1) == host.arange(kh * kw + 1).reshape(-1, 1)).astype(pairs.dtype)
    dw = xp.asarray(joins)[:kh * kw] @ pairs.reshape(-1, c)            # (taps, C)
    return xp.ascontiguousarray(dw.T).reshape(w_shape)
