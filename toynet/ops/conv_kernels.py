"""Array kernels behind the convolution ops (``toynet/ops/conv.py``): shapes, pointwise and depthwise.

A 2-d convolution of ``x`` (N, C, H, W) with ``w`` (O, C/groups, kh, kw) is, for every output pixel,
a dot product between the weights and the ``kh * kw`` input pixels under the kernel ("taps")::

    y[n, o, h, w] = sum_{c, i, j} w[o, c, i, j] * xpad[n, c, h*sh + i*dh, w*sw + j*dw]

Fast code on NumPy means few Python calls and few passes over memory, so there are three kernels:

* **dense** (any other conv): *im2col* and one matrix product per chunk of images, in
  :mod:`.conv_dense`. A grouped convolution runs as one dense convolution per group.
* **pointwise** (1x1 kernels, the bulk of MobileNetV2's work): the input already *is* ``cols``; with
  enough pixels per image a batched ``w @ x[n]`` needs no copy at all.
* **depthwise** (one input and one output channel per group): a matrix product would be mostly
  zeros, so instead sum ``kh * kw`` shifted slices times per-channel weights. Done image-chunk by
  image-chunk in a channels-last (NHWC) buffer, so that each NumPy call runs long contiguous loops
  (over channels) on data in cache, and each tap touches only the pixels it reads from the real
  image, never a zero-padded copy (on a 2x2 image most of a 3x3 tap's window is padding).

Why these layouts (measured with ``benchmarks/bench_conv_kernels.py``): NCHW depthwise loops ran over
rows only Wo long (2 to 16 elements in MobileNetV2), which made NumPy's per-loop overhead dominate.

Every kernel allocates with the input's dtype, so float32 stays float32.
"""

from __future__ import annotations

from typing import Any

Pair = tuple[int, int]

#: Below this many output pixels per image, one channel-major product beats N per-image products.
PER_IMAGE_MIN_PIXELS = 16
#: Depthwise kernels work on this many elements per chunk (a few hundred KB: fits in L2 cache).
DEPTHWISE_CHUNK_ELEMENTS = 1 << 16


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a sliding window: the PyTorch formula."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def window(start: int, stride: int, count: int) -> slice:
    """The slice of a padded axis that tap ``start`` reads for ``count`` outputs of step ``stride``."""
    return slice(start, start + stride * (count - 1) + 1, stride)


def taps(kernel: Pair, stride: Pair, dilation: Pair, out_hw: Pair):
    """Yield ``(i, j, rows, cols)`` for every kernel tap: the slices of the padded input it reads."""
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            yield i, j, window(i * dilation[0], stride[0], out_hw[0]), window(j * dilation[1], stride[1], out_hw[1])


def geometry(x_shape: tuple, w_shape: tuple, stride: Pair, padding: Pair, dilation: Pair) -> tuple:
    """``(kernel, out_hw)``: the kernel size and the output's (Ho, Wo)."""
    kh, kw = w_shape[2], w_shape[3]
    return (kh, kw), (out_size(x_shape[2], kh, stride[0], padding[0], dilation[0]),
                      out_size(x_shape[3], kw, stride[1], padding[1], dilation[1]))


def kind(x_shape: tuple, w_shape: tuple, padding: Pair, groups: int) -> str:
    """Which kernel serves this convolution: "pointwise", "depthwise" or "dense"."""
    if groups < 1 or x_shape[1] != w_shape[1] * groups or w_shape[0] % groups:
        # Eager mode runs kernels without the shape rule; on failure the op's rule explains (conv.py).
        raise ValueError(f"channels of input {x_shape} and weight {w_shape} do not fit groups={groups}")
    if w_shape[2:] == (1, 1) and padding == (0, 0) and groups == 1:
        return "pointwise"
    if groups == x_shape[1] == w_shape[0] and w_shape[1] == 1:
        return "depthwise"
    return "dense"


def channel_major(xp: Any, a: Any) -> Any:
    """(N, C, H, W) -> a contiguous (C, N*H*W) copy: one row per channel."""
    n, c, h, w = a.shape
    return xp.ascontiguousarray(a.transpose(1, 0, 2, 3)).reshape(c, n * h * w)


def from_channel_major(xp: Any, a: Any, n: int, h: int, w: int) -> Any:
    """(C, N*H*W) -> a contiguous (N, C, H, W) array."""
    return xp.ascontiguousarray(a.reshape(-1, n, h, w).transpose(1, 0, 2, 3))


# ------------------------------------------------------------------------------- pointwise (1x1)


def pointwise_forward(xp, x, w, stride):
    x = x[:, :, ::stride[0], ::stride[1]] if stride != (1, 1) else x
    n, c, h, wd = x.shape
    w2 = w.reshape(w.shape[0], c)
    if h * wd >= PER_IMAGE_MIN_PIXELS:  # y[n] = W @ x[n]: no copies at all
        return xp.matmul(w2, x.reshape(n, c, h * wd)).reshape(n, -1, h, wd)
    return from_channel_major(xp, w2 @ channel_major(xp, x), n, h, wd)


def pointwise_grad_input(xp, g, w, x_shape, stride):
    n, o, h, wd = g.shape
    w2t = w.reshape(o, x_shape[1]).T
    if h * wd >= PER_IMAGE_MIN_PIXELS:
        dx = xp.matmul(w2t, g.reshape(n, o, h * wd)).reshape(n, -1, h, wd)
    else:
        dx = from_channel_major(xp, w2t @ channel_major(xp, g), n, h, wd)
    if stride == (1, 1):
        return dx
    full = xp.zeros(x_shape, dtype=g.dtype)  # a strided 1x1 conv reads only every s-th pixel
    full[:, :, ::stride[0], ::stride[1]] = dx
    return full


def pointwise_grad_weight(xp, x, g, w_shape, stride):
    x = x[:, :, ::stride[0], ::stride[1]] if stride != (1, 1) else x
    return (channel_major(xp, g) @ channel_major(xp, x).T).reshape(w_shape)


# ------------------------------------------------------------------------------------- depthwise


def _chunk(n_images: int, per_image: int) -> int:
    return max(1, min(n_images, DEPTHWISE_CHUNK_ELEMENTS // max(per_image, 1)))


def _tap_weights(xp, w):
    """(C, 1, kh, kw) -> contiguous (kh*kw, C): one row of per-channel weights per tap."""
    return xp.ascontiguousarray(w.reshape(w.shape[0], -1).T)


def _overlap(size_in: int, size_out: int, offset: int, stride: int) -> tuple[slice, slice] | None:
    """The outputs ``o`` whose input ``o * stride + offset`` is a real pixel (not padding), as a pair
    (output slice, input slice), or None when a tap reads only padding.

    Depthwise taps use these instead of a zero-padded copy: no padding is ever built or read, and
    on small images (4x4, 2x2, 1x1) most of a tap's window is padding, so the work shrinks too.
    """
    first = max(0, -(offset // stride))                        # ceil(-offset / stride)
    stop = min(size_out, (size_in - 1 - offset) // stride + 1)
    if stop <= first:
        return None
    start = first * stride + offset
    return slice(first, stop), slice(start, start + stride * (stop - first - 1) + 1, stride)


def depthwise_taps(x_hw: Pair, out_hw: Pair, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair):
    """Yield ``(t, out_rows, out_cols, in_rows, in_cols)`` for every tap ``t`` that touches real pixels."""
    for i in range(kernel[0]):
        rows = _overlap(x_hw[0], out_hw[0], i * dilation[0] - padding[0], stride[0])
        for j in range(kernel[1]):
            cols = _overlap(x_hw[1], out_hw[1], j * dilation[1] - padding[1], stride[1])
            if rows is not None and cols is not None:
                yield i * kernel[1] + j, rows[0], cols[0], rows[1], cols[1]


def _channels_last(xp, a, start, count, buffer):
    """Copy images start..start+count of (N, C, H, W) ``a`` into ``buffer`` as (count, H, W, C)."""
    out = buffer[:count]
    out[...] = a[start:start + count].transpose(0, 2, 3, 1)
    return out


def depthwise_forward(xp, x, w, stride, padding, dilation):
    """y[n, c] = sum over taps t of w[c, t] * (x[n, c] shifted by tap t), channels-last, chunk by chunk."""
    n, c, h, wd = x.shape
    kernel, (ho, wo) = geometry(x.shape, w.shape, stride, padding, dilation)
    weights, chunk = _tap_weights(xp, w), _chunk(n, max(h * wd, ho * wo) * c)
    source = xp.empty((chunk, h, wd, c), dtype=x.dtype)
    total = xp.empty((chunk, ho, wo, c), dtype=x.dtype)
    term = xp.empty_like(total)
    y = xp.empty((n, c, ho, wo), dtype=x.dtype)
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        x_k, total_k, term_k = _channels_last(xp, x, start, k, source), total[:k], term[:k]
        total_k.fill(0)
        for t, out_r, out_c, in_r, in_c in depthwise_taps((h, wd), (ho, wo), kernel, stride, padding, dilation):
            part = term_k[:, out_r, out_c]
            xp.multiply(x_k[:, in_r, in_c], weights[t], out=part)
            total_k[:, out_r, out_c] += part
        y[start:start + k] = total_k.transpose(0, 3, 1, 2)
    return y


def depthwise_grad_input(xp, g, w, x_shape, stride, padding, dilation):
    """dx[n, c] = sum over taps of w[c, t] * g[n, c], added back where tap t read from."""
    n, c, h, wd = x_shape
    kernel, (ho, wo) = geometry(x_shape, w.shape, stride, padding, dilation)
    weights, chunk = _tap_weights(xp, w), _chunk(n, max(h * wd, ho * wo) * c)
    grad = xp.empty((chunk, ho, wo, c), dtype=g.dtype)
    term = xp.empty_like(grad)
    total = xp.empty((chunk, h, wd, c), dtype=g.dtype)
    dx = xp.empty(x_shape, dtype=g.dtype)
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        g_k, term_k, total_k = _channels_last(xp, g, start, k, grad), term[:k], total[:k]
        total_k.fill(0)
        for t, out_r, out_c, in_r, in_c in depthwise_taps((h, wd), (ho, wo), kernel, stride, padding, dilation):
            part = term_k[:, out_r, out_c]
            xp.multiply(g_k[:, out_r, out_c], weights[t], out=part)
            total_k[:, in_r, in_c] += part
        dx[start:start + k] = total_k.transpose(0, 3, 1, 2)
    return dx


def depthwise_grad_weight(xp, x, g, w_shape, stride, padding, dilation):
    """dw[c, t] = sum over images and pixels of g[n, c] * (x[n, c] shifted by tap t)."""
    n, c, h, wd = x.shape
    kernel, (ho, wo) = geometry(x.shape, w_shape, stride, padding, dilation)
    chunk = _chunk(n, max(h * wd, ho * wo) * c)
    source = xp.empty((chunk, h, wd, c), dtype=x.dtype)
    grad = xp.empty((chunk, ho, wo, c), dtype=x.dtype)
    dw = xp.zeros((kernel[0] * kernel[1], c), dtype=x.dtype)
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        x_k, g_k = _channels_last(xp, x, start, k, source), _channels_last(xp, g, start, k, grad)
        for t, out_r, out_c, in_r, in_c in depthwise_taps((h, wd), (ho, wo), kernel, stride, padding, dilation):
            # einsum multiplies and sums in one pass, with no temporary array
            dw[t] += xp.einsum("nhwc,nhwc->c", x_k[:, in_r, in_c], g_k[:, out_r, out_c])
    return xp.ascontiguousarray(dw.T).reshape(w_shape)
