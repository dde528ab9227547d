"""Array kernels behind the convolution ops (``toynet/ops/conv.py``): forward, grad_input, grad_weight.

A 2-d convolution of ``x`` (N, C, H, W) with ``w`` (O, C/groups, kh, kw) is, for every output pixel,
a dot product between the weights and the ``kh * kw`` input pixels under the kernel ("taps")::

    y[n, o, h, w] = sum_{c, i, j} w[o, c, i, j] * xpad[n, c, h*sh + i*dh, w*sw + j*dw]

Fast code on NumPy means few Python calls and few passes over memory, so there are three kernels:

* **dense** (any conv): *im2col*. Copy every tap's shifted slice of the input into one matrix
  ``cols`` of shape (C*kh*kw, N*Ho*Wo); the convolution is then one matrix product
  ``w.reshape(O, C*kh*kw) @ cols``, done by BLAS. ``cols`` is laid out *channel-major*: its columns run
  over (image, row, column), so the whole batch is one big product instead of N small ones, and
  grad_weight = ``g @ cols.T`` is one product too. grad_input multiplies back (``w.T @ g``) and
  *col2im* adds each tap's rows back into a padded buffer.
* **pointwise** (1x1 kernels, the bulk of MobileNetV2's work): the input already *is* ``cols``; with
  enough pixels per image a batched ``w @ x[n]`` needs no copy at all.
* **depthwise** (one input channel per group): a matrix product would be mostly zeros, so instead
  sum ``kh * kw`` shifted slices times per-channel weights. Done image-chunk by image-chunk in a
  channels-last (NHWC) buffer, so each NumPy call runs long contiguous loops over data in cache.

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


# ----------------------------------------------------------------------------------- dense (im2col)


def im2col(xp: Any, x: Any, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair, out_hw: Pair) -> Any:
    """cols[(c, i, j), (n, ho, wo)] = xpad[n, c, ho*sh + i*dh, wo*sw + j*dw], shape (C*kh*kw, N*Ho*Wo).

    The input is first padded into a channel-major buffer (C, N, Hp, Wp), so that every tap's slice
    has the same axis order as its destination in ``cols``: each copy then streams through memory.
    """
    n, c, h, w = x.shape
    (kh, kw), (ho, wo), (ph, pw) = kernel, out_hw, padding
    source = x.transpose(1, 0, 2, 3)
    if ph or pw:
        padded = xp.zeros((c, n, h + 2 * ph, w + 2 * pw), dtype=x.dtype)
        padded[:, :, ph:ph + h, pw:pw + w] = source
        source = padded
    cols = xp.empty((c, kh, kw, n, ho, wo), dtype=x.dtype)
    for i, j, rows, columns in taps(kernel, stride, dilation, out_hw):
        cols[:, i, j] = source[:, :, rows, columns]
    return cols.reshape(c * kh * kw, n * ho * wo)


def col2im(xp: Any, cols: Any, x_shape: tuple, kernel: Pair, stride: Pair, padding: Pair, dilation: Pair,
           out_hw: Pair) -> Any:
    """The adjoint of :func:`im2col`: add every tap's rows of ``cols`` back where they were read from."""
    n, c, h, w = x_shape
    (kh, kw), (ho, wo), (ph, pw) = kernel, out_hw, padding
    cols = cols.reshape(c, kh, kw, n, ho, wo)
    padded = xp.zeros((c, n, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for i, j, rows, columns in taps(kernel, stride, dilation, out_hw):
        padded[:, :, rows, columns] += cols[:, i, j]
    return xp.ascontiguousarray(padded[:, :, ph:ph + h, pw:pw + w].transpose(1, 0, 2, 3))


def dense_forward(xp, x, w, stride, padding, dilation, groups):
    kernel, (ho, wo) = geometry(x.shape, w.shape, stride, padding, dilation)
    cols = im2col(xp, x, kernel, stride, padding, dilation, (ho, wo))
    # Group g multiplies its own slice of output channels with its own rows of cols.
    y = xp.matmul(w.reshape(groups, w.shape[0] // groups, -1), cols.reshape(groups, -1, cols.shape[1]))
    return from_channel_major(xp, y.reshape(w.shape[0], -1), x.shape[0], ho, wo)


def dense_grad_input(xp, g, w, x_shape, stride, padding, dilation, groups):
    kernel, out_hw = geometry(x_shape, w.shape, stride, padding, dilation)
    w3 = w.reshape(groups, w.shape[0] // groups, -1)
    cols = xp.matmul(w3.transpose(0, 2, 1), channel_major(xp, g).reshape(groups, w3.shape[1], -1))
    return col2im(xp, cols, x_shape, kernel, stride, padding, dilation, out_hw)


def dense_grad_weight(xp, x, g, w_shape, stride, padding, dilation, groups):
    kernel, out_hw = geometry(x.shape, w_shape, stride, padding, dilation)
    cols = im2col(xp, x, kernel, stride, padding, dilation, out_hw)
    g3 = channel_major(xp, g).reshape(groups, w_shape[0] // groups, -1)
    dw = xp.matmul(g3, cols.reshape(groups, -1, cols.shape[1]).transpose(0, 2, 1))
    return dw.reshape(w_shape)


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


def depthwise_forward(xp, x, w, stride, padding, dilation):
    n, c, h, wd = x.shape
    kernel, (ho, wo) = geometry(x.shape, w.shape, stride, padding, dilation)
    (ph, pw), weights = padding, _tap_weights(xp, w)
    chunk = _chunk(n, (h + 2 * ph) * (wd + 2 * pw) * c)
    padded = xp.zeros((chunk, h + 2 * ph, wd + 2 * pw, c), dtype=x.dtype)  # borders stay zero
    total = xp.empty((chunk, ho, wo, c), dtype=x.dtype)
    term = xp.empty_like(total)
    y = xp.empty((n, c, ho, wo), dtype=x.dtype)
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        pad_k, total_k, term_k = padded[:k], total[:k], term[:k]
        pad_k[:, ph:ph + h, pw:pw + wd] = x[start:start + k].transpose(0, 2, 3, 1)
        for t, (i, j, rows, columns) in enumerate(taps(kernel, stride, dilation, (ho, wo))):
            if t == 0:
                xp.multiply(pad_k[:, rows, columns], weights[0], out=total_k)
            else:
                xp.multiply(pad_k[:, rows, columns], weights[t], out=term_k)
                total_k += term_k
        y[start:start + k] = total_k.transpose(0, 3, 1, 2)
    return y


def depthwise_grad_input(xp, g, w, x_shape, stride, padding, dilation):
    n, c, h, wd = x_shape
    kernel, (ho, wo) = geometry(x_shape, w.shape, stride, padding, dilation)
    (ph, pw), weights = padding, _tap_weights(xp, w)
    chunk = _chunk(n, (h + 2 * ph) * (wd + 2 * pw) * c)
    padded = xp.empty((chunk, h + 2 * ph, wd + 2 * pw, c), dtype=g.dtype)
    grad = xp.empty((chunk, ho, wo, c), dtype=g.dtype)
    term = xp.empty_like(grad)
    dx = xp.empty(x_shape, dtype=g.dtype)
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        pad_k, grad_k, term_k = padded[:k], grad[:k], term[:k]
        pad_k.fill(0)
        grad_k[...] = g[start:start + k].transpose(0, 2, 3, 1)
        for t, (i, j, rows, columns) in enumerate(taps(kernel, stride, dilation, (ho, wo))):
            xp.multiply(grad_k, weights[t], out=term_k)
            pad_k[:, rows, columns] += term_k
        dx[start:start + k] = pad_k[:, ph:ph + h, pw:pw + wd].transpose(0, 3, 1, 2)
    return dx


def depthwise_grad_weight(xp, x, g, w_shape, stride, padding, dilation):
    n, c, h, wd = x.shape
    kernel, (ho, wo) = geometry(x.shape, w_shape, stride, padding, dilation)
    ph, pw = padding
    chunk = _chunk(n, (h + 2 * ph) * (wd + 2 * pw) * c)
    padded = xp.zeros((chunk, h + 2 * ph, wd + 2 * pw, c), dtype=x.dtype)
    grad = xp.empty((chunk, ho, wo, c), dtype=x.dtype)
    term = xp.empty_like(grad)
    dw = xp.zeros((kernel[0] * kernel[1], c), dtype=x.dtype)
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        pad_k, grad_k, term_k = padded[:k], grad[:k], term[:k]
        pad_k[:, ph:ph + h, pw:pw + wd] = x[start:start + k].transpose(0, 2, 3, 1)
        grad_k[...] = g[start:start + k].transpose(0, 2, 3, 1)
        for t, (i, j, rows, columns) in enumerate(taps(kernel, stride, dilation, (ho, wo))):
            xp.multiply(pad_k[:, rows, columns], grad_k, out=term_k)
            dw[t] += term_k.reshape(-1, c).sum(axis=0)
    return xp.ascontiguousarray(dw.T).reshape(w_shape)


# ------------------------------------------------------------------------------------- dispatch


def conv2d(xp, x, w, stride, padding, dilation, groups):
    which = kind(x.shape, w.shape, padding, groups)
    if which == "pointwise":
        return pointwise_forward(xp, x, w, stride)
    if which == "depthwise":
        return depthwise_forward(xp, x, w, stride, padding, dilation)
    return dense_forward(xp, x, w, stride, padding, dilation, groups)


def conv2d_grad_input(xp, g, w, x_shape, stride, padding, dilation, groups):
    which = kind(x_shape, w.shape, padding, groups)
    if which == "pointwise":
        return pointwise_grad_input(xp, g, w, x_shape, stride)
    if which == "depthwise":
        return depthwise_grad_input(xp, g, w, x_shape, stride, padding, dilation)
    return dense_grad_input(xp, g, w, x_shape, stride, padding, dilation, groups)


def conv2d_grad_weight(xp, x, g, w_shape, stride, padding, dilation, groups):
    which = kind(x.shape, w_shape, padding, groups)
    if which == "pointwise":
        return pointwise_grad_weight(xp, x, g, w_shape, stride)
    if which == "depthwise":
        return depthwise_grad_weight(xp, x, g, w_shape, stride, padding, dilation)
    return dense_grad_weight(xp, x, g, w_shape, stride, padding, dilation, groups)
