"""The dense convolution kernels (``groups=1``, any kernel, stride, padding, dilation): *im2col*.

Every output pixel of a convolution is a dot product of the weights with the pixels under the
kernel, so with the right matrix ``cols`` the whole convolution is ONE matrix product that BLAS
does fast::

    cols[(i, j, c), (h, w)] = xpad[c, h*sh + i*dh, w*sw + j*dw]       (kh*kw*C, Ho*Wo) per image
    y = w @ cols          with w reordered to (O, kh*kw*C)                      (O, Ho*Wo)

and the two gradients are products with the same matrices::

    dw = g @ cols.T                  (the same cols, rebuilt from x)
    dcols = w.T @ g, then col2im:    each tap's block of dcols added back where it was read from

What makes it fast in NumPy (measured on the small conv net's 16x16x32x32 layer, one thread):

* **chunks in cache**: ``cols`` is 9x the input (10 MB for that layer). Built for the whole batch it
  lives in main memory and BLAS waits on it; built a few images at a time in one reused buffer
  (:data:`DENSE_CHUNK_BYTES`), it is written and multiplied while in the CPU cache: the forward
  ran twice as fast. Every other temporary is chunk-sized too; only the result is full-sized.
* **rebuilt, not kept**: grad_weight builds the chunks again instead of keeping the forward's
  ``cols`` until the backward (as an ``im2col`` op feeding a ``matmul`` would). Kept, the small
  net's training step ran 25-30% slower and its peak memory went from 10 to 24-28 MB.
* **shifts**: with stride 1, each tap is one contiguous run of the flattened image
  (:class:`DenseLayout`), so each copy and each col2im addition is one long loop; col2im's
  additions ran 4x faster than Ho rows of Wo numbers per channel.

Every array is allocated with the input's dtype, so float32 stays float32.
"""

from __future__ import annotations

from typing import Any

from .conv_kernels import Pair, geometry, taps

#: Dense kernels build the im2col matrix for this many bytes of images at a time (a chunk stays in
#: the CPU's cache between being written and being multiplied).
DENSE_CHUNK_BYTES = 1 << 19
#: Stride-1 dense kernels read taps as shifts of the whole padded plane when it holds at most this
#: many times the real outputs (32x32 images padded by 1: 1.13; 8x8: 1.56, which use windows).
SHIFT_MAX_WASTE = 1.5


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
