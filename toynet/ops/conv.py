"""2-d convolution as three ops: ``conv2d`` and its two backward ops.

``conv2d(x, w[, b])`` slides the kernel ``w`` (O, C/groups, kh, kw) over the input ``x`` (N, C, H, W)::

    y[n, o, h, w] = b[o] + sum_{c, i, j} w[o, c, i, j] * xpad[n, c, h*sh + i*dh, w*sw + j*dw]

(``xpad`` is ``x`` with ``padding`` zeros around it; with ``groups`` > 1, output channel ``o`` only sees
the input channels of its own group). ``y`` is linear in ``x`` and linear in ``w``, so its two
gradients are the *adjoints* of those linear maps, and each is an op of its own:

* ``conv2d_grad_input(g, w)``: the ``x`` that ``<conv2d(x, w), g> = <x, conv2d_grad_input(g, w)>``
  for every ``x`` (a "transposed convolution");
* ``conv2d_grad_weight(x, g)``: likewise for ``w``: ``<conv2d(x, k), g> = <k, conv2d_grad_weight(x, g)>``.

Because they are ops, Graph mode can schedule them, and their own vjps follow from the same
identity read the other way round, in terms of the three conv ops again: gradients of gradients
(``create_graph=True``) work to any order. The array kernels live in :mod:`.conv_kernels`
(pointwise, depthwise) and :mod:`.conv_dense` (im2col).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from . import conv_dense as dense
from . import conv_kernels as kernels
from ._op import OPS, Op, ShapeError, apply, register, require_float, shape_of


def needs_grad(x: Any) -> bool:
    return getattr(x, "requires_grad", False)


def _apply(name: str, *inputs: Any, **attrs: Any) -> Any:
    """Apply an op by name (the ops defined later in this module are in the table by the time this runs)."""
    return apply(OPS[name], *inputs, **attrs)


# ------------------------------------------------------------------------------------ shape rules


def check_conv(op: str, x_shape: tuple, w_shape: tuple, stride, padding, dilation, groups) -> tuple:
    """Validate a convolution's shapes and settings; return the output shape (N, O, Ho, Wo)."""
    if len(x_shape) != 4:
        raise ShapeError(f"{op}: expected a 4-d input (N, C, H, W), got shape {x_shape}; add a batch "
                         f"dimension with x.unsqueeze(0) for a single image")
    if len(w_shape) != 4:
        raise ShapeError(f"{op}: expected a 4-d weight (out_channels, in_channels/groups, kh, kw), got "
                         f"shape {w_shape}")
    for name, value, low in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1)):
        if len(value) != 2 or any(v < low for v in value):
            raise ShapeError(f"{op}: {name} must be two integers >= {low}, got {value}")
    if groups < 1 or x_shape[1] % groups or w_shape[0] % groups:
        raise ShapeError(f"{op}: groups={groups} must divide both the input's {x_shape[1]} channels and "
                         f"the weight's {w_shape[0]} output channels")
    if x_shape[1] != w_shape[1] * groups:
        raise ShapeError(f"{op}: input of shape {x_shape} has {x_shape[1]} channels, but weight of shape "
                         f"{w_shape} with groups={groups} expects {w_shape[1] * groups} "
                         f"(= weight.shape[1] * groups); check in_channels")
    kernel, (ho, wo) = kernels.geometry(x_shape, w_shape, stride, padding, dilation)
    if ho < 1 or wo < 1:
        raise ShapeError(f"{op}: the kernel {kernel} (dilation {dilation}) does not fit the input of shape "
                         f"{x_shape} padded by {padding}: the output would be {ho}x{wo}; use a smaller "
                         f"kernel or more padding")
    return (x_shape[0], w_shape[0], ho, wo)


def _check_grad_shape(op: str, g_shape: tuple, expected: tuple) -> None:
    if tuple(g_shape) != tuple(expected):
        raise ShapeError(f"{op}: the output gradient has shape {tuple(g_shape)}, but the convolution's "
                         f"output has shape {expected}")


def _float_dtype(op: str, *inputs: Any) -> backend.DType:
    for x in inputs:
        require_float(op, x)
    return backend.promote(*(x.dtype for x in inputs))


# ---------------------------------------------------------------------- which kernel serves a conv
#
# 1x1 kernels and depthwise convolutions have kernels of their own (conv_kernels.py), the rest is
# im2col (conv_dense.py). A grouped convolution is `groups` independent convolutions, each on its
# own slice of the input and output channels: run them one by one and put the results together.


def forward_kernel(xp: Any, x: Any, w: Any, stride, padding, dilation, groups: int) -> Any:
    """The forward of ``conv2d`` (without bias), by whichever kernel fits."""
    which = kernels.kind(x.shape, w.shape, padding, groups)
    if which == "pointwise":
        return kernels.pointwise_forward(xp, x, w, stride)
    if which == "depthwise":
        return kernels.depthwise_forward(xp, x, w, stride, padding, dilation)
    if groups == 1:
        return dense.dense_forward(xp, x, w, stride, padding, dilation)
    parts = [dense.dense_forward(xp, _group(x, 1, k, groups), _group(w, 0, k, groups), stride, padding, dilation)
             for k in range(groups)]
    return xp.concatenate(parts, axis=1)


def grad_input_kernel(xp: Any, g: Any, w: Any, x_shape: tuple, stride, padding, dilation, groups: int) -> Any:
    """``dL/dx`` of ``conv2d`` from the output gradient ``g``."""
    which = kernels.kind(x_shape, w.shape, padding, groups)
    if which == "pointwise":
        return kernels.pointwise_grad_input(xp, g, w, x_shape, stride)
    if which == "depthwise":
        return kernels.depthwise_grad_input(xp, g, w, x_shape, stride, padding, dilation)
    if groups == 1:
        return dense.dense_grad_input(xp, g, w, x_shape, stride, padding, dilation)
    shape = (x_shape[0], x_shape[1] // groups) + tuple(x_shape[2:])
    parts = [dense.dense_grad_input(xp, _group(g, 1, k, groups), _group(w, 0, k, groups), shape, stride, padding,
                                    dilation) for k in range(groups)]
    return xp.concatenate(parts, axis=1)


def grad_weight_kernel(xp: Any, x: Any, g: Any, w_shape: tuple, stride, padding, dilation, groups: int) -> Any:
    """``dL/dw`` of ``conv2d`` from the input ``x`` and the output gradient ``g``."""
    which = kernels.kind(x.shape, w_shape, padding, groups)
    if which == "pointwise":
        return kernels.pointwise_grad_weight(xp, x, g, w_shape, stride)
    if which == "depthwise":
        return kernels.depthwise_grad_weight(xp, x, g, w_shape, stride, padding, dilation)
    if groups == 1:
        return dense.dense_grad_weight(xp, x, g, w_shape, stride, padding, dilation)
    shape = (w_shape[0] // groups,) + tuple(w_shape[1:])
    parts = [dense.dense_grad_weight(xp, _group(x, 1, k, groups), _group(g, 1, k, groups), shape, stride, padding,
                                     dilation) for k in range(groups)]
    return xp.concatenate(parts, axis=0)


def _group(a: Any, axis: int, group: int, groups: int) -> Any:
    """The channels of ``a`` along ``axis`` (0 or 1) that belong to ``group``."""
    size = a.shape[axis] // groups
    part = slice(group * size, (group + 1) * size)
    return a[part] if axis == 0 else a[:, part]


# ---------------------------------------------------------------------------------------- the ops


@register
class Conv2d(Op):
    """``y = conv2d(x, w) + b``; gradients by ``conv2d_grad_input``, ``conv2d_grad_weight`` and, for the
    bias, the sum of the output gradient over batch and pixels."""

    name = "conv2d"

    def forward(self, xp, x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        y = forward_kernel(xp, x, w, stride, padding, dilation, groups)
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        return y

    def infer(self, x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        shape = check_conv(self.name, shape_of(x), shape_of(w), stride, padding, dilation, groups)
        if b is not None and shape_of(b) != (shape[1],):
            raise ShapeError(f"conv2d: bias of shape {shape_of(b)} should have shape ({shape[1]},), one "
                             f"value per output channel")
        return shape, _float_dtype(self.name, x, w, *([b] if b is not None else []))

    def vjp(self, grad, inputs, output, **attrs):
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) == 3 else None
        grad_x = _apply("conv2d_grad_input", grad, w, input_shape=tuple(x.shape), **attrs) \
            if needs_grad(x) else None
        grad_w = _apply("conv2d_grad_weight", x, grad, weight_shape=tuple(w.shape), **attrs) \
            if needs_grad(w) else None
        grad_b = grad.sum((0, 2, 3)) if needs_grad(b) else None
        return (grad_x, grad_w) if b is None else (grad_x, grad_w, grad_b)


@register
class Conv2dGradInput(Op):
    """``dL/dx`` of a convolution from the output gradient ``g`` and the weight ``w`` (col2im).

    It is linear in ``g`` and in ``w``; from ``<gi(g, w), h> = <conv2d(h, w), g>``:
    d/dg = conv2d(h, w) and d/dw = conv2d_grad_weight(h, g).
    """

    name = "conv2d_grad_input"

    def forward(self, xp, g, w, input_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        return grad_input_kernel(xp, g, w, tuple(input_shape), stride, padding, dilation, groups)

    def infer(self, g, w, input_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        expected = check_conv(self.name, tuple(input_shape), shape_of(w), stride, padding, dilation, groups)
        _check_grad_shape(self.name, shape_of(g), expected)
        return tuple(input_shape), _float_dtype(self.name, g, w)

    def vjp(self, grad, inputs, output, input_shape=(), **attrs):
        g, w = inputs
        return (_apply("conv2d", grad, w, **attrs) if needs_grad(g) else None,
                _apply("conv2d_grad_weight", grad, g, weight_shape=tuple(w.shape), **attrs)
                if needs_grad(w) else None)


@register
class Conv2dGradWeight(Op):
    """``dL/dw`` of a convolution from its input ``x`` and the output gradient ``g`` (im2col, one GEMM).

    Linear in ``x`` and in ``g``; from ``<gw(x, g), k> = <conv2d(x, k), g>``:
    d/dx = conv2d_grad_input(g, k) and d/dg = conv2d(x, k).
    """

    name = "conv2d_grad_weight"

    def forward(self, xp, x, g, weight_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        return grad_weight_kernel(xp, x, g, tuple(weight_shape), stride, padding, dilation, groups)

    def infer(self, x, g, weight_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        expected = check_conv(self.name, shape_of(x), tuple(weight_shape), stride, padding, dilation, groups)
        _check_grad_shape(self.name, shape_of(g), expected)
        return tuple(weight_shape), _float_dtype(self.name, x, g)

    def vjp(self, grad, inputs, output, weight_shape=(), **attrs):
        x, g = inputs
        return (_apply("conv2d_grad_input", g, grad, input_shape=tuple(x.shape), **attrs)
                if needs_grad(x) else None,
                _apply("conv2d", x, grad, **attrs) if needs_grad(g) else None)
