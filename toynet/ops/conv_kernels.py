"""Array kernels behind the convolution ops (``toynet/ops/conv.py``): forward, grad_input, grad_weight.

A 2-d convolution of ``x`` (N, C, H, W) with ``w`` (O, C/groups, kh, kw) is, for every output pixel,
a dot product between the weights and the ``kh * kw`` input pixels under the kernel ("taps")::

    y[n, o, h, w] = sum_{c, i, j} w[o, c, i, j] * xpad[n, c, h*sh + i*dh, w*sw + j*dw]

Fast code on NumPy means few Python calls and few passes over memory, so there are three kernels:

* **dense** (any conv): *im2col*. Copy every tap's shifted view of the (zero-padded) input into a
  matrix ``cols`` of shape (C*kh*kw, Ho*Wo) per image; the convolution is then one matrix product
  ``w.reshape(O, C*kh*kw) @ cols``, done by BLAS. grad_weight = ``g @ cols.T`` (the same ``cols``,
  rebuilt), grad_input multiplies back (``w.T @ g``) and *col2im* adds each tap's rows back where
  they were read from. ``cols`` is built a few images at a time into one reused buffer that stays
  in the CPU cache (see :data:`DENSE_CHUNK_BYTES`), and stride-1 taps are read as shifts of the
  flattened image (see :class:`DenseLayout`), so every copy is one long contiguous run.
* **pointwise** (1x1 kernels, the bulk of MobileNetV2's work): the input already *is* ``cols``; with
  enough pixels per image a batched ``w @ x[n]`` needs no copy at all.
* **depthwise** (one input and one output channel per group): a matrix product would be mostly
  zeros, so instead sum ``kh * kw`` shifted slices times per-channel weights. Done image-chunk by
  image-chunk in a channels-last (NHWC) buffer, so that each NumPy call runs long contiguous loops
  (over channels) on data in cache, and each tap touches only the pixels it reads from the real
  image, never a zero-padded copy (on a 2x2 image most of a 3x3 tap's window is padding).

Why these layouts (measured with ``benchmarks/bench_conv_kernels.py``): a whole-batch ``cols`` is 9x
the input (10 MB for a 16x16x32x32 batch) and lives in main memory, so BLAS waits on it; built a
chunk at a time it is written and multiplied while in cache, which halved the small conv net's
forward. The same chunks are simply rebuilt for grad_weight rather than kept from the forward:
keeping them would hold the 9x copy alive from forward to backward, and rebuilding in cache costs
less than reading it back from memory. NCHW depthwise loops ran over rows only Wo long (2 to 16
elements in MobileNetV2), which made NumPy's per-loop overhead dominate.

Every kernel allocates with the input's dtype, so float32 stays float32.
"""

from __future__ import annotations

from typing import Any

Pair = tuple[int, int]

#: Below this many output pixels per image, one channel-major product beats N per-image products.
PER_IMAGE_MIN_PIXELS = 16
#: Dense kernels build the im2col matrix for this many bytes of images at a time (a chunk stays in
#: the CPU's cache between being written and being multiplied).
DENSE_CHUNK_BYTES = 1 << 19
#: Stride-1 dense kernels read taps as shifts of the whole padded plane when it holds at most this
#: many times the real outputs (32x32 images padded by 1: 1.13; 8x8: 1.56, which use windows).
SHIFT_MAX_WASTE = 1.5
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


# ----------------------------------------------------------------------------------- dense (im2col)


class DenseLayout:
    """Where every tap of a dense convolution (``groups=1``) reads its input, and how images are chunked.

    A chunk of ``k`` images is copied into a zero-bordered buffer ``padded`` (k, C, Hp, Wp). Tap
    (i, j) of output pixel (h, w) reads ``padded[n, c, h*sh + i*dh, w*sw + j*dw]``, so a tap's values
    for all output pixels are a *view* of ``padded``, in one of two ways:

    * **shift** (stride 1, images not tiny): read each image as one flat row of numbers, channel
      plane after channel plane. Output (c, h, w) of tap (i, j) is then flat position
      ``c*Hp*Wp + h*Wp + w + (i*dh*Wp + j*dw)``: the whole image *shifted* by one offset per tap. So
      each tap is ONE contiguous run of C*Hp*Wp numbers, which NumPy copies and adds in long fast
      loops (measured 4x faster than C*Ho rows of Wo). The price: outputs are computed on the whole
      Hp x Wp plane instead of Ho x Wo; the extra "junk" positions read values wrapped around from
      the next row or plane, are cut off at the end, and are set to zero in output gradients so that
      they add nothing. A spare plane after the last channel keeps the last run inside the buffer.
      Used when the plane holds at most :data:`SHIFT_MAX_WASTE` times the real outputs.
    * **window** (any stride): tap (i, j) is the strided window ``padded[:, :, i*dh::sh, j*dw::sw]``
      cut to Ho x Wo: no junk, but Ho rows of Wo numbers per channel.

    ``cols`` rows are ordered (tap, channel): tap t fills rows t*C..(t+1)*C, one block, so a tap is
    one copy; the weights are reordered to match (:func:`tap_major`).
    """

    def __init__(self, x_shape: tuple, w_shape: tuple, stride: Pair, padding: Pair, dilation: Pair):
        self.kernel, (self.ho, self.wo) = geometry(x_shape, w_shape, stride, padding, dilation)
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.channels, (self.h, self.w) = x_shape[1], x_shape[2:]
        self.hp, self.wp = self.h + 2 * padding[0], self.w + 2 * padding[1]
        self.shift = stride == (1, 1) and self.hp * self.wp <= SHIFT_MAX_WASTE * self.ho * self.wo
        self.plane = (self.hp, self.wp) if self.shift else (self.ho, self.wo)  # outputs computed per channel
        self.positions = self.plane[0] * self.plane[1]
        self.taps = self.kernel[0] * self.kernel[1]
        # The shape of one tap's view of one image (what ``tap_views`` yields, after the chunk axis).
        self.tap_shape = (self.channels * self.positions,) if self.shift else (self.channels, self.ho, self.wo)

    def chunk(self, n: int, itemsize: int) -> int:
        """How many images' im2col matrices fit in :data:`DENSE_CHUNK_BYTES`."""
        return max(1, min(n, DENSE_CHUNK_BYTES // (self.taps * self.channels * self.positions * itemsize)))

    def padded_buffer(self, xp: Any, k: int, dtype: Any) -> Any:
        """A zeroed (k, C [+1 spare], Hp, Wp) buffer; chunks write only the interior: the border stays 0."""
        return xp.zeros((k, self.channels + (1 if self.shift else 0), self.hp, self.wp), dtype=dtype)

    def interior(self, padded: Any) -> Any:
        """The view of ``padded`` where the images themselves go."""
        ph, pw = self.padding
        return padded[:, :self.channels, ph:ph + self.h, pw:pw + self.w]

    def tap_views(self, padded: Any):
        """Every tap's view of ``padded``, in tap order: (k, *tap_shape) each."""
        (kh, kw), (dh, dw) = self.kernel, self.dilation
        if self.shift:
            flat, run = padded.reshape(padded.shape[0], -1), self.tap_shape[0]  # contiguous: a view
            for i in range(kh):
                for j in range(kw):
                    offset = i * dh * self.wp + j * dw
                    yield flat[:, offset:offset + run]
        else:
            for _, _, rows, columns in taps(self.kernel, self.stride, self.dilation, (self.ho, self.wo)):
                yield padded[:, :, rows, columns]

    def output_view(self, product: Any) -> Any:
        """(k, O, positions) products -> a (k, O, Ho, Wo) view without the junk."""
        return product.reshape((product.shape[0], -1) + self.plane)[:, :, :self.ho, :self.wo]


def tap_major(xp: Any, w: Any) -> Any:
    """(O, C, kh, kw) weights -> (O, kh*kw*C): columns in the (tap, channel) order of ``cols``' rows."""
    return xp.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(w.shape[0], -1)


class Im2col:
    """Builds ``cols`` for chunks of images, in two buffers reused from chunk to chunk::

        cols[n, (t, c), p] = tap t of channel c of image n, at output position p    (k, T*C, positions)

    so that a chunk's convolution is one batched matrix product ``tap_major(w) @ cols``. The buffers
    are small enough to stay in the CPU cache from being written to being multiplied, which is what
    makes this faster than one whole-batch ``cols`` (9x the input for a 3x3 kernel).
    """

    def __init__(self, xp: Any, layout: DenseLayout, k: int, dtype: Any):
        self.layout = layout
        self.padded = layout.padded_buffer(xp, k, dtype)
        self.cols = xp.empty((k, layout.taps) + layout.tap_shape, dtype=dtype)

    def __call__(self, images: Any) -> Any:
        k = images.shape[0]
        padded, cols = self.padded[:k], self.cols[:k]
        self.layout.interior(padded)[...] = images
        for t, view in enumerate(self.layout.tap_views(padded)):
            cols[:, t] = view
        return cols.reshape(k, self.layout.taps * self.layout.channels, self.layout.positions)


class WideGrad:
    """Output gradients (k, O, Ho, Wo) as (k, O, positions), zero at the junk positions."""

    def __init__(self, xp: Any, layout: DenseLayout, k: int, channels: int, dtype: Any):
        self.layout = layout
        # Only [:, :, :Ho, :Wo] is ever written, so the junk stays zero from here on.
        self.buffer = xp.zeros((k, channels) + layout.plane, dtype=dtype) if layout.shift else None

    def __call__(self, g: Any) -> Any:
        k, o = g.shape[:2]
        if self.buffer is None:                          # no junk: g as it is
            return g.reshape(k, o, self.layout.positions)
        wide = self.buffer[:k]
        wide[:, :, :self.layout.ho, :self.layout.wo] = g
        return wide.reshape(k, o, self.layout.positions)


def dense_forward(xp, x, w, stride, padding, dilation):
    """y[n] = w @ cols[n], a chunk of images at a time."""
    layout = DenseLayout(x.shape, w.shape, stride, padding, dilation)
    n, k = x.shape[0], layout.chunk(x.shape[0], x.itemsize)
    im2col, w2 = Im2col(xp, layout, k, x.dtype), tap_major(xp, w)
    y = xp.empty((n, w.shape[0], layout.ho, layout.wo), dtype=x.dtype)
    product = xp.empty((k, w.shape[0], layout.positions), dtype=x.dtype)
    for start in range(0, n, k):
        stop = min(n, start + k)
        y[start:stop] = layout.output_view(xp.matmul(w2, im2col(x[start:stop]), out=product[:stop - start]))
    return y


def dense_grad_weight(xp, x, g, w_shape, stride, padding, dilation):
    """dw = sum over images of g[n] @ cols[n]^T, with the same im2col chunks as the forward.

    Computed transposed, as ``cols[n] @ g[n]^T`` (T*C, O): the same numbers, but OpenBLAS runs this
    orientation of the product about 20% faster here (measured).
    """
    layout = DenseLayout(x.shape, w_shape, stride, padding, dilation)
    n, k = x.shape[0], layout.chunk(x.shape[0], x.itemsize)
    im2col, widen = Im2col(xp, layout, k, x.dtype), WideGrad(xp, layout, k, w_shape[0], g.dtype)
    dw_t = xp.zeros((layout.taps * layout.channels, w_shape[0]), dtype=g.dtype)
    for start in range(0, n, k):
        stop = min(n, start + k)
        dw_t += xp.matmul(im2col(x[start:stop]), widen(g[start:stop]).transpose(0, 2, 1)).sum(axis=0)
    # rows (i, j, c), columns o  ->  (o, c, i, j)
    return xp.ascontiguousarray(dw_t.reshape(w_shape[2], w_shape[3], w_shape[1], w_shape[0]).transpose(3, 2, 0, 1))


def dense_grad_input(xp, g, w, x_shape, stride, padding, dilation):
    """dcols[n] = w^T @ g[n], then *col2im*: each tap's block added back where the tap read from."""
    layout = DenseLayout(x_shape, w.shape, stride, padding, dilation)
    n, k = x_shape[0], layout.chunk(x_shape[0], g.itemsize)
    widen, w_t = WideGrad(xp, layout, k, w.shape[0], g.dtype), tap_major(xp, w).T  # (T*C, O)
    dcols = xp.empty((k, w_t.shape[0], layout.positions), dtype=g.dtype)
    padded = layout.padded_buffer(xp, k, g.dtype)
    dx = xp.empty(x_shape, dtype=g.dtype)
    for start in range(0, n, k):
        stop = min(n, start + k)
        part = xp.matmul(w_t, widen(g[start:stop]), out=dcols[:stop - start])
        part = part.reshape((stop - start, layout.taps) + layout.tap_shape)
        chunk = padded[:stop - start]
        chunk.fill(0)
        for t, view in enumerate(layout.tap_views(chunk)):
            view += part[:, t]
        dx[start:stop] = layout.interior(chunk)
    return dx


def group_slice(a: Any, axis: int, group: int, groups: int) -> Any:
    """The part of ``a`` along ``axis`` (0 or 1) that belongs to ``group``: a grouped convolution is
    ``groups`` independent convolutions, each on its own slice of the input and output channels."""
    size = a.shape[axis] // groups
    part = slice(group * size, (group + 1) * size)
    return a[part] if axis == 0 else a[:, part]


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


# ------------------------------------------------------------------------------------- dispatch


def conv2d(xp: Any, x: Any, w: Any, stride: Pair, padding: Pair, dilation: Pair, groups: int) -> Any:
    """The forward of ``conv2d`` (without bias), by whichever kernel fits."""
    which = kind(x.shape, w.shape, padding, groups)
    if which == "pointwise":
        return pointwise_forward(xp, x, w, stride)
    if which == "depthwise":
        return depthwise_forward(xp, x, w, stride, padding, dilation)
    if groups == 1:
        return dense_forward(xp, x, w, stride, padding, dilation)
    return xp.concatenate([dense_forward(xp, group_slice(x, 1, k, groups), group_slice(w, 0, k, groups), stride,
                                         padding, dilation) for k in range(groups)], axis=1)


def conv2d_grad_input(xp: Any, g: Any, w: Any, x_shape: tuple, stride: Pair, padding: Pair, dilation: Pair,
                      groups: int) -> Any:
    """``dL/dx`` of ``conv2d`` from the output gradient ``g``."""
    which = kind(x_shape, w.shape, padding, groups)
    if which == "pointwise":
        return pointwise_grad_input(xp, g, w, x_shape, stride)
    if which == "depthwise":
        return depthwise_grad_input(xp, g, w, x_shape, stride, padding, dilation)
    if groups == 1:
        return dense_grad_input(xp, g, w, x_shape, stride, padding, dilation)
    group_shape = (x_shape[0], x_shape[1] // groups) + tuple(x_shape[2:])
    return xp.concatenate([dense_grad_input(xp, group_slice(g, 1, k, groups), group_slice(w, 0, k, groups),
                                            group_shape, stride, padding, dilation) for k in range(groups)], axis=1)


def conv2d_grad_weight(xp: Any, x: Any, g: Any, w_shape: tuple, stride: Pair, padding: Pair, dilation: Pair,
                       groups: int) -> Any:
    """``dL/dw`` of ``conv2d`` from the input ``x`` and the output gradient ``g``."""
    which = kind(x.shape, w_shape, padding, groups)
    if which == "pointwise":
        return pointwise_grad_weight(xp, x, g, w_shape, stride)
    if which == "depthwise":
        return depthwise_grad_weight(xp, x, g, w_shape, stride, padding, dilation)
    if groups == 1:
        return dense_grad_weight(xp, x, g, w_shape, stride, padding, dilation)
    group_shape = (w_shape[0] // groups,) + tuple(w_shape[1:])
    return xp.concatenate([dense_grad_weight(xp, group_slice(x, 1, k, groups), group_slice(g, 1, k, groups),
                                             group_shape, stride, padding, dilation) for k in range(groups)], axis=0)
