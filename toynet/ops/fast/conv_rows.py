"""The *shifted rows* depthwise kernel: a stride-1 depthwise convolution of a channels-last (NHWC) batch as
one long NumPy call per kernel tap.

The taps kernel (:func:`toynet.ops.fast.conv_nhwc.depthwise_nhwc`) multiplies, for each tap, the slice of the
image that tap reads by a per-channel row of weights. Every such slice is a 4-d strided view whose
rows are only ``W * C`` long (a 16-pixel image row of 32 channels: 512 numbers), so NumPy spends much of
its time starting inner loops. Here the batch is first copied into a zero-padded buffer ``(H + 2p, W +
2p, C)`` per image. In that buffer every image row, padding included, is one contiguous run of ``(W +
2p) * C`` numbers, and shifting a tap by ``j`` pixels is shifting the run by ``j * C`` numbers: so each
tap reads one 3-d view whose inner dimension spans a whole padded row *and* continues into the next
rows of the image. The output is computed on the padded width (the ``2p`` extra columns per row are
wasted work, thrown away when the result is copied out) and the weights are tiled along one padded row
once, so that they have the same contiguous layout as the data.

Which kernel is faster depends on the shape: on MobileNetV2's 16x16 and 8x8 images the rows kernel
takes a half to two thirds of the taps kernel's time; on 4x4 and smaller images the wasted columns
(half the work and more) make it slower. Graph mode times both on the real shapes when it compiles and
keeps the faster (:mod:`toynet.static.passes.fast.kernels`, like cuDNN's benchmark mode); the choice is the
node's ``algorithm`` attribute.

The backward pass to the input of a stride-1 convolution is itself a stride-1 convolution, of the output
gradient with the kernel flipped and padding ``d * (k - 1) - p``, so :func:`depthwise_rows_grad_input`
is the same loop.
"""

from __future__ import annotations

from typing import Any

from ..conv_kernels import geometry
from .conv_nhwc import finish_into

#: Elements of the padded-width output computed per chunk of images (512 KB of float32): measured on
#: MobileNetV2's shapes, long enough that NumPy's per-call cost fades, short enough to stay in cache.
CHUNK_ELEMENTS = 1 << 17


def applies(stride: tuple, padding: tuple, dilation: tuple, kernel: tuple, grad_input: bool = False) -> bool:
    """Can the rows kernel compute this depthwise convolution (or, with ``grad_input``, its input gradient)?"""
    if tuple(stride) != (1, 1):
        return False
    if grad_input:  # the gradient's padding d * (k - 1) - p must not be negative
        return all(d * (k - 1) >= p for d, k, p in zip(dilation, kernel, padding))
    return True


def depthwise_rows(xp: Any, x: Any, w: Any, b: Any, activation: str | None, padding: tuple, dilation: tuple,
                   out: Any, flip: bool = False) -> Any:
    """Stride-1 depthwise convolution of NHWC ``x`` with ``w`` (C, 1, kh, kw) into NHWC ``out``; ``b``
    and ``activation`` applied as the result is copied out of the padded-width buffer. ``flip``: use the
    kernel rotated by 180 degrees (the input gradient's convolution)."""
    n, h, wd, c = x.shape
    (kh, kw), (ho, wo) = geometry((n, c, h, wd), w.shape, (1, 1), padding, dilation)
    ph, pw = padding
    width = wd + 2 * pw                                   # the padded width, which the output is computed on
    row = width * c
    image = (h + 2 * ph) * row
    per_image = ho * row
    chunk = max(1, min(n, CHUNK_ELEMENTS // max(per_image, 1)))
    tail = ((kh - 1) * dilation[0] * width + (kw - 1) * dilation[1]) * c   # the last tap reads past the end
    padded = xp.zeros(chunk * image + tail, dtype=x.dtype)
    interior = padded[:chunk * image].reshape(chunk, h + 2 * ph, width, c)[:, ph:ph + h, pw:pw + wd]
    acc = xp.empty((chunk, ho, row), dtype=out.dtype)
    term = xp.empty_like(acc)
    weights = w.reshape(c, kh * kw).T                     # (taps, C)
    if flip:
        weights = weights[::-1]
    tiles = xp.ascontiguousarray(xp.broadcast_to(weights[:, None, :], (kh * kw, width, c))).reshape(kh * kw, row)
    step = x.itemsize
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        interior[:k] = x[start:start + k]
        total, part = acc[:k], term[:k]
        for t in range(kh * kw):
            i, j = divmod(t, kw)
            offset = i * dilation[0] * row + j * dilation[1] * c
            # tap t for every output row of every image in the chunk: a (k, ho, row) view of the padded buffer
            shifted = xp.lib.stride_tricks.as_strided(padded[offset:], (k, ho, row),
                                                      (image * step, row * step, step))
            if t == 0:
                xp.multiply(shifted, tiles[t], out=total)
            else:
                xp.multiply(shifted, tiles[t], out=part)
                total += part
        finish_into(xp, out[start:start + k], total.reshape(k, ho, width, c)[:, :, :wo], b, activation)
    return out


def depthwise_rows_grad_input(xp: Any, g: Any, w: Any, x_shape: tuple, padding: tuple, dilation: tuple,
                              out: Any = None) -> Any:
    """``dL/dx`` (NHWC) of a stride-1 depthwise convolution: the output gradient convolved with the
    flipped kernel, padded by ``d * (k - 1) - p``."""
    kh, kw = w.shape[2], w.shape[3]
    grad_padding = (dilation[0] * (kh - 1) - padding[0], dilation[1] * (kw - 1) - padding[1])
    out = xp.empty(tuple(x_shape), dtype=g.dtype) if out is None else out
    return depthwise_rows(xp, g, w, None, None, grad_padding, dilation, out, flip=True)
