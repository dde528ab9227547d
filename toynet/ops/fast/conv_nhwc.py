"""Convolution kernels on channels-last (NHWC) arrays: what Graph mode runs inside a channels-last
region (see :mod:`toynet.static.passes.fast.layout`). Weights keep PyTorch's layout (O, C/groups, kh, kw).

In NHWC every pixel's channels are contiguous, so

* a **1x1** convolution over the whole batch is one matrix product ``(N*H*W, C) @ (C, O)``, and its two
  gradients are one product each: ``dx = g @ W`` and ``dW = g.T @ x``;
* a **depthwise** convolution multiplies shifted slices by a per-channel row of weights: NumPy's inner
  loops run along the channels, with no transposes (the NCHW kernels in :mod:`.conv_kernels` copy each
  chunk of images into this layout and back).

Every kernel writes into ``out`` when given one (the compiled plan's preallocated buffer).
"""

from __future__ import annotations

from typing import Any

from .. import conv_kernels as kernels


def activate(xp: Any, y: Any, activation: str | None) -> Any:
    """Apply ``activation`` to ``y`` in place."""
    if activation is not None:  # clip with two bounds: NumPy's fast path (see ops/piecewise.py)
        xp.clip(y, 0, 6 if activation == "relu6" else float("inf"), out=y)
    return y


def nchw(shape: tuple) -> tuple:
    return (shape[0], shape[3], shape[1], shape[2])


def nhwc(shape: tuple) -> tuple:
    return (shape[0], shape[2], shape[3], shape[1])


#: Elements of a depthwise convolution's output computed per chunk of images (2 MB of float32). Larger
#: than the NCHW kernel's chunks: with no transposes per chunk, fewer and longer NumPy calls won when
#: measured on MobileNetV2's shapes (batch 64, 32x32 down to 2x2 images).
DEPTHWISE_NHWC_CHUNK_ELEMENTS = 1 << 19


def _finish(xp: Any, y: Any, b: Any, activation: str | None) -> None:
    """Add the bias and apply the activation to ``y`` in place."""
    if b is not None:
        y += b
    activate(xp, y, activation)


def finish_into(xp: Any, target: Any, values: Any, b: Any, activation: str | None) -> Any:
    """``target = activation(values + b)``: the bias added as ``values`` are copied out of a kernel's own
    buffer (no extra pass for it), then the activation in place."""
    if b is not None:
        xp.add(values, b, out=target)
    else:
        target[...] = values
    return activate(xp, target, activation)


def pointwise_nhwc(xp: Any, x: Any, w: Any, b: Any, activation: str | None, stride: tuple, out: Any) -> Any:
    """1x1 convolution of NHWC ``x``: one matrix product over every pixel of every image. (Splitting it
    into cache-sized blocks of pixels, to add the bias and clip while a block is in cache, was slower
    when measured: BLAS blocks the product better than we can, and the clip is one fast pass.)"""
    if stride != (1, 1):
        x = xp.ascontiguousarray(x[:, ::stride[0], ::stride[1], :])
    n, h, wd, c = x.shape
    weights = w.reshape(w.shape[0], c).T                          # (C, O): a view, no copy
    xp.matmul(x.reshape(n * h * wd, c), weights, out=out.reshape(n * h * wd, w.shape[0]))
    _finish(xp, out, b, activation)
    return out


def depthwise_nhwc(xp: Any, x: Any, w: Any, b: Any, activation: str | None, stride: tuple, padding: tuple,
                   dilation: tuple, out: Any) -> Any:
    """Depthwise convolution of NHWC ``x`` into NHWC ``out``: per tap, a shifted slice times per-channel
    weights, added into the output chunk by chunk of images (so the chunk stays in cache). A tap that
    reads a real pixel for every output (the centre one, usually) starts the sum, instead of zeros."""
    n, h, wd, c = x.shape
    kernel, (ho, wo) = kernels.geometry((n, c, h, wd), w.shape, stride, padding, dilation)
    weights = xp.ascontiguousarray(w.reshape(c, -1).T)            # (taps, C)
    chunk = max(1, min(n, DEPTHWISE_NHWC_CHUNK_ELEMENTS // max(max(h * wd, ho * wo) * c, 1)))
    term = xp.empty((chunk, ho, wo, c), dtype=out.dtype)
    taps = list(kernels.depthwise_taps((h, wd), (ho, wo), kernel, stride, padding, dilation))
    full = [tap for tap in taps if tap[1] == slice(0, ho) and tap[2] == slice(0, wo)]
    first = full[0] if full else None
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        x_k, y_k, term_k = x[start:start + k], out[start:start + k], term[:k]
        if first is None:
            y_k.fill(0)
        else:
            xp.multiply(x_k[:, first[3], first[4]], weights[first[0]], out=y_k)
        for tap in taps:
            if tap is first:
                continue
            t, out_r, out_c, in_r, in_c = tap
            part = term_k[:, out_r, out_c]
            xp.multiply(x_k[:, in_r, in_c], weights[t], out=part)
            y_k[:, out_r, out_c] += part
        _finish(xp, y_k, b, activation)
    return out


def pointwise_grad_input_nhwc(xp: Any, g: Any, w: Any, x_shape: tuple, stride: tuple, out: Any = None) -> Any:
    """``dx = g @ W`` for every pixel; a strided 1x1 convolution read only every s-th pixel."""
    n, ho, wo, o = g.shape
    c = x_shape[3]
    rows = g.reshape(n * ho * wo, o)
    if stride == (1, 1):
        out = xp.empty(x_shape, dtype=g.dtype) if out is None else out
        xp.matmul(rows, w.reshape(o, c), out=out.reshape(n * ho * wo, c))
        return out
    if out is None:
        out = xp.zeros(x_shape, dtype=g.dtype)
    else:
        out.fill(0)
    out[:, ::stride[0], ::stride[1], :] = (rows @ w.reshape(o, c)).reshape(n, ho, wo, c)
    return out


def pointwise_grad_weight_nhwc(xp: Any, x: Any, g: Any, w_shape: tuple, stride: tuple) -> Any:
    """``dW = g.T @ x`` over every pixel of every image."""
    if stride != (1, 1):
        x = xp.ascontiguousarray(x[:, ::stride[0], ::stride[1], :])
    o, c = w_shape[0], w_shape[1]
    return (g.reshape(-1, o).T @ x.reshape(-1, c)).reshape(w_shape)


def depthwise_grad_input_nhwc(xp: Any, g: Any, w: Any, x_shape: tuple, stride: tuple, padding: tuple,
                              dilation: tuple, out: Any = None) -> Any:
    """``dx``: each tap's ``g * w[tap]`` added back where that tap read from, chunk by chunk of images."""
    n, h, wd, c = x_shape
    _, ho, wo, _ = g.shape
    kernel = (w.shape[2], w.shape[3])
    weights = xp.ascontiguousarray(w.reshape(c, -1).T)            # (taps, C)
    out = xp.empty(x_shape, dtype=g.dtype) if out is None else out
    chunk = max(1, min(n, DEPTHWISE_NHWC_CHUNK_ELEMENTS // max(max(h * wd, ho * wo) * c, 1)))
    term = xp.empty((chunk, ho, wo, c), dtype=g.dtype)
    taps = list(kernels.depthwise_taps((h, wd), (ho, wo), kernel, stride, padding, dilation))
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        g_k, dx_k, term_k = g[start:start + k], out[start:start + k], term[:k]
        dx_k.fill(0)
        for t, out_r, out_c, in_r, in_c in taps:
            part = term_k[:, out_r, out_c]
            xp.multiply(g_k[:, out_r, out_c], weights[t], out=part)
            dx_k[:, in_r, in_c] += part
    return out


def depthwise_grad_weight_nhwc(xp: Any, x: Any, g: Any, w_shape: tuple, stride: tuple, padding: tuple,
                               dilation: tuple) -> Any:
    """``dw[c, tap]``: the sum over images and pixels of ``g`` times the input that tap read (one einsum
    per tap, which multiplies and sums in one pass, without a temporary)."""
    n, h, wd, c = x.shape
    _, ho, wo, _ = g.shape
    kernel = (w_shape[2], w_shape[3])
    dw = xp.zeros((kernel[0] * kernel[1], c), dtype=x.dtype)
    for t, out_r, out_c, in_r, in_c in kernels.depthwise_taps((h, wd), (ho, wo), kernel, stride, padding, dilation):
        dw[t] = xp.einsum("nhwc,nhwc->c", x[:, in_r, in_c], g[:, out_r, out_c])
    return xp.ascontiguousarray(dw.T).reshape(w_shape)
