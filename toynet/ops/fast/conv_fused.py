"""Ops that only Graph mode's compiler writes: a convolution with its BatchNorm and activation folded
in, optionally working on channels-last (NHWC) images, and the two layout conversions.

Eager mode runs ``conv2d``, then ``batch_norm``, then ``relu6``: three passes over the activations, and
every intermediate is a tensor a user could look at, so each must exist in the standard NCHW layout.
A compiled inference graph sees the whole chain at once, and no one can look in between, so the passes
:mod:`toynet.static.passes.fast.fold_batch_norm` and :mod:`toynet.static.passes.fast.layout` rewrite it into:

``conv2d_fused(x, w[, b][, mean, var[, gamma, beta]])``
    In eval mode BatchNorm is an affine map per channel, ``y * s + t`` with ``s = gamma / sqrt(var +
    eps)`` and ``t = beta - mean * s``, and so is the convolution in its output channel: folding gives
    one convolution with weights ``w * s`` and bias ``b * s + t``. The fold is computed from the
    *current* BatchNorm statistics and weights on every call: it touches only the weights (kilobytes),
    never the activations, and can never be stale when a parameter changes. The activation (relu or
    relu6) then runs in place on the output, with no extra buffer.
``conv2d_nhwc_grad_input(g, w)`` / ``conv2d_nhwc_grad_weight(x, g)``
    the two gradients of a channels-last convolution, for training graphs (kernels in :mod:`.conv_nhwc`).
``to_channels_last(x)`` / ``to_channels_first(x)``
    NCHW <-> NHWC copies at the borders of a channels-last region. Inside one, a 1x1 convolution is a
    single matrix product ``(N*H*W, C) @ (C, O)`` and a depthwise one slides over contiguous channels,
    with no transposes in between (see ``channels_last=True`` below).

None of these has a vjp: the passes write them after differentiation.
"""

from __future__ import annotations

from typing import Any

from .. import conv_kernels as kernels
from .._op import Op, ShapeError, register, shape_of
from ..conv import check_conv, forward_kernel
from . import conv_matrix, conv_nhwc, conv_rows
from .conv_nhwc import activate, depthwise_nhwc, nchw, nhwc, pointwise_nhwc

#: The activations a fused convolution can apply in place.
ACTIVATIONS = (None, "relu", "relu6")
#: The ways a channels-last depthwise convolution can be computed (``algorithm``): per kernel tap over the
#: image (:func:`.conv_nhwc.depthwise_nhwc`), over whole padded rows (:mod:`.conv_rows`, stride 1), or as
#: one matrix per channel (:mod:`.conv_matrix`, small images); Graph mode's ChooseKernels pass times them
#: on the real shapes and keeps the fastest.
ALGORITHMS = ("taps", "rows", "matrix")


def depthwise_algorithms(x_shape_nchw: tuple, w_shape: tuple, stride, padding, dilation, groups,
                         gradient: str = "") -> list[str]:
    """The algorithms that can compute this convolution (or its ``gradient``: "input" or "weight"), the
    usual one first."""
    if kernel_for(x_shape_nchw, w_shape, padding, groups) != "depthwise":
        return []
    kernel = (w_shape[2], w_shape[3])
    found = ["taps"]
    if gradient != "weight" and conv_rows.applies(stride, padding, dilation, kernel, gradient == "input"):
        found.append("rows")
    if conv_matrix.applies(x_shape_nchw[2:], kernel, stride, padding, dilation):
        found.append("matrix")
    return found


def _check_algorithm(op: str, algorithm: str, possible: list[str]) -> None:
    if algorithm != "taps" and algorithm not in possible:
        raise ShapeError(f"{op}: algorithm {algorithm!r} cannot compute this convolution; it can use "
                         f"{possible or ['taps']} (rows: stride-1 depthwise convolutions only; matrix: depthwise "
                         f"convolutions of small images)")


def fold_batch_norm(xp: Any, w: Any, b: Any, norm: tuple, eps: float) -> tuple[Any, Any]:
    """``(w * s, b * s + t)``: the weights and bias of the convolution with BatchNorm folded in."""
    mean, var, *affine = norm
    scale = 1.0 / xp.sqrt(var + eps)
    if affine:
        scale = scale * affine[0]
    shift = -mean * scale
    if affine:
        shift = shift + affine[1]
    if b is not None:
        shift = shift + b * scale
    return w * scale.reshape(-1, 1, 1, 1).astype(w.dtype, copy=False), shift.astype(w.dtype, copy=False)


def kernel_for(x_shape_nchw: tuple, w_shape: tuple, padding: tuple, groups: int) -> str:
    """The kernel a convolution runs ("pointwise", "depthwise" or "dense"); channels-last has the first two."""
    return kernels.kind(x_shape_nchw, w_shape, padding, groups)


# ------------------------------------------------------------------------------------------------ ops


def _split(params: tuple, bias: bool, norm: str | None) -> tuple[Any, tuple]:
    """The op's extra inputs as ``(bias or None, BatchNorm tensors)``."""
    b = params[0] if bias else None
    return b, tuple(params[1:] if bias else params)


@register
class Conv2dFused(Op):
    """``act(batch_norm(conv2d(x, w) + b))`` as one kernel; see the module docstring.

    Attributes (besides conv2d's): ``bias`` (a bias input follows ``w``), ``norm`` (None, ``"plain"``:
    mean and var follow, ``"affine"``: mean, var, gamma and beta follow), ``eps``, ``activation``
    (None, ``"relu"``, ``"relu6"``) and ``channels_last`` (``x`` and the output are NHWC).
    """

    name = "conv2d_fused"
    supports_out = True

    def forward(self, xp, x, w, *params, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, bias=False,
                norm=None, eps=1e-5, activation=None, channels_last=False, algorithm="taps", out=None):
        b, norm_inputs = _split(params, bias, norm)
        if norm is not None:
            w, b = fold_batch_norm(xp, w, b, norm_inputs, eps)
        if channels_last:
            if out is None:
                out = xp.empty(self._nhwc_out(x.shape, w.shape, stride, padding, dilation), dtype=x.dtype)
            if kernel_for(nchw(x.shape), w.shape, padding, groups) == "pointwise":
                return pointwise_nhwc(xp, x, w, b, activation, stride, out)
            if algorithm == "rows":
                return conv_rows.depthwise_rows(xp, x, w, b, activation, padding, dilation, out)
            if algorithm == "matrix":
                return conv_matrix.depthwise_matrix(xp, x, w, b, activation, stride, padding, dilation, out)
            return depthwise_nhwc(xp, x, w, b, activation, stride, padding, dilation, out)
        else:
            y = forward_kernel(xp, x, w, stride, padding, dilation, groups)
            if b is not None:
                y += b.reshape(1, -1, 1, 1)
            if out is None:
                out = y
            else:
                out[...] = y
        return activate(xp, out, activation)

    @staticmethod
    def _nhwc_out(x_shape, w_shape, stride, padding, dilation) -> tuple:
        _, (ho, wo) = kernels.geometry(nchw(x_shape), w_shape, stride, padding, dilation)
        return (x_shape[0], ho, wo, w_shape[0])

    def infer(self, x, w, *params, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, bias=False,
              norm=None, eps=1e-5, activation=None, channels_last=False, algorithm="taps"):
        if activation not in ACTIVATIONS:
            raise ShapeError(f"conv2d_fused: activation must be one of {ACTIVATIONS}, got {activation!r}")
        if norm not in (None, "plain", "affine"):
            raise ShapeError(f"conv2d_fused: norm must be None, 'plain' or 'affine', got {norm!r}")
        wanted = int(bias) + {None: 0, "plain": 2, "affine": 4}[norm]
        if len(params) != wanted:
            raise ShapeError(f"conv2d_fused: bias={bias}, norm={norm!r} take {wanted} inputs after the weight, "
                             f"got {len(params)}")
        x_shape = shape_of(x)
        if len(x_shape) != 4:
            raise ShapeError(f"conv2d_fused: expected a 4-d input, got shape {x_shape}")
        logical = nchw(x_shape) if channels_last else x_shape
        shape = check_conv(self.name, logical, shape_of(w), stride, padding, dilation, groups)
        for k, p in enumerate(params):
            if shape_of(p) != (shape[1],):
                raise ShapeError(f"conv2d_fused: input {k + 2} has shape {shape_of(p)}; bias and BatchNorm "
                                 f"tensors have one value per output channel: ({shape[1]},)")
        if channels_last and kernel_for(logical, shape_of(w), padding, groups) == "dense":
            raise ShapeError("conv2d_fused: channels_last=True serves 1x1 and depthwise convolutions only")
        _check_algorithm(self.name, algorithm, self.algorithms(x, w, stride=stride, padding=padding,
                                                                dilation=dilation, groups=groups,
                                                                channels_last=channels_last))
        return (nhwc(shape) if channels_last else shape), x.dtype

    def algorithms(self, x, w, *params, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                   channels_last=False, **attrs) -> list[str]:
        """For ChooseKernels: the ``algorithm`` values this node can use (see :data:`ALGORITHMS`)."""
        if not channels_last:
            return []
        return depthwise_algorithms(nchw(shape_of(x)), shape_of(w), stride, padding, dilation, groups)

    def describe(self, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, bias=False, norm=None, eps=1e-5,
                 activation=None, channels_last=False, algorithm="taps"):
        parts = ["conv2d"] + (["batch_norm"] if norm else []) + ([activation] if activation else [])
        settings = [f"stride={stride}"] if stride != (1, 1) else []
        settings += [f"groups={groups}"] if groups != 1 else []
        settings += ["NHWC"] if channels_last else []
        settings += [f"algorithm={algorithm}"] if algorithm != "taps" else []
        return "+".join(parts) + (f"[{', '.join(settings)}]" if settings else "")


class _Conv2dNhwcGrad(Op):
    """Shared by the two backward ops of a channels-last convolution (1x1 or depthwise only)."""

    def check(self, x_shape: tuple, w_shape: tuple, g_shape: tuple, stride, padding, dilation, groups) -> None:
        expected = check_conv(self.name, nchw(x_shape), w_shape, stride, padding, dilation, groups)
        if tuple(g_shape) != nhwc(expected):
            raise ShapeError(f"{self.name}: the output gradient has shape {tuple(g_shape)}, but the "
                             f"convolution's (NHWC) output has shape {nhwc(expected)}")
        if kernel_for(nchw(x_shape), w_shape, padding, groups) == "dense":
            raise ShapeError(f"{self.name}: serves 1x1 and depthwise convolutions only")


@register
class Conv2dNhwcGradInput(_Conv2dNhwcGrad):
    """``dL/dx`` (NHWC) of a channels-last convolution, from the NHWC output gradient and the weight."""

    name = "conv2d_nhwc_grad_input"
    supports_out = True

    def forward(self, xp, g, w, input_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                algorithm="taps", out=None):
        x_shape = tuple(input_shape)
        if kernel_for(nchw(x_shape), w.shape, padding, groups) == "pointwise":
            return conv_nhwc.pointwise_grad_input_nhwc(xp, g, w, x_shape, stride, out)
        if algorithm == "rows":
            return conv_rows.depthwise_rows_grad_input(xp, g, w, x_shape, padding, dilation, out)
        if algorithm == "matrix":
            return conv_matrix.depthwise_matrix_grad_input(xp, g, w, x_shape, stride, padding, dilation, out)
        return conv_nhwc.depthwise_grad_input_nhwc(xp, g, w, x_shape, stride, padding, dilation, out)

    def infer(self, g, w, input_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, algorithm="taps"):
        self.check(tuple(input_shape), shape_of(w), shape_of(g), stride, padding, dilation, groups)
        _check_algorithm(self.name, algorithm, self.algorithms(g, w, input_shape, stride, padding, dilation, groups))
        return tuple(input_shape), g.dtype

    def algorithms(self, g, w, input_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                   **attrs) -> list[str]:
        """For ChooseKernels: the ``algorithm`` values this node can use (see :data:`ALGORITHMS`)."""
        return depthwise_algorithms(nchw(tuple(input_shape)), shape_of(w), stride, padding, dilation, groups,
                                    gradient="input")

    def describe(self, input_shape=(), stride=(1, 1), groups=1, algorithm="taps", **attrs):
        return "conv2d_grad_input[NHWC" + (f", stride={stride}" if stride != (1, 1) else "") + (
            f", groups={groups}" if groups != 1 else "") + (f", algorithm={algorithm}]" if algorithm != "taps" else "]")


@register
class Conv2dNhwcGradWeight(_Conv2dNhwcGrad):
    """``dL/dw`` (in the weight's own layout) of a channels-last convolution, from NHWC ``x`` and ``g``."""

    name = "conv2d_nhwc_grad_weight"

    def forward(self, xp, x, g, weight_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                algorithm="taps"):
        w_shape = tuple(weight_shape)
        if kernel_for(nchw(x.shape), w_shape, padding, groups) == "pointwise":
            return conv_nhwc.pointwise_grad_weight_nhwc(xp, x, g, w_shape, stride)
        if algorithm == "matrix":
            return conv_matrix.depthwise_matrix_grad_weight(xp, x, g, w_shape, stride, padding, dilation)
        return conv_nhwc.depthwise_grad_weight_nhwc(xp, x, g, w_shape, stride, padding, dilation)

    def infer(self, x, g, weight_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
              algorithm="taps"):
        self.check(shape_of(x), tuple(weight_shape), shape_of(g), stride, padding, dilation, groups)
        _check_algorithm(self.name, algorithm, self.algorithms(x, g, weight_shape, stride, padding, dilation, groups))
        return tuple(weight_shape), x.dtype

    def algorithms(self, x, g, weight_shape=(), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                   **attrs) -> list[str]:
        """For ChooseKernels: the ``algorithm`` values this node can use (see :data:`ALGORITHMS`)."""
        return depthwise_algorithms(nchw(shape_of(x)), tuple(weight_shape), stride, padding, dilation, groups,
                                    gradient="weight")

    def describe(self, weight_shape=(), stride=(1, 1), groups=1, algorithm="taps", **attrs):
        return "conv2d_grad_weight[NHWC" + (f", stride={stride}" if stride != (1, 1) else "") + (
            f", groups={groups}" if groups != 1 else "") + (f", algorithm={algorithm}]" if algorithm != "taps" else "]")


class _Transpose4d(Op):
    """A layout conversion: a contiguous copy of a 4-d array with its axes permuted."""

    supports_out = True
    axes: tuple = ()

    def forward(self, xp, x, out=None):
        if out is None:
            return xp.ascontiguousarray(x.transpose(self.axes))
        out[...] = x.transpose(self.axes)
        return out

    def infer(self, x):
        shape = shape_of(x)
        if len(shape) != 4:
            raise ShapeError(f"{self.name}: expected a 4-d tensor, got shape {shape}")
        return tuple(shape[a] for a in self.axes), x.dtype


@register
class ToChannelsLast(_Transpose4d):
    """(N, C, H, W) -> (N, H, W, C)."""

    name = "to_channels_last"
    axes = (0, 2, 3, 1)


@register
class ToChannelsFirst(_Transpose4d):
    """(N, H, W, C) -> (N, C, H, W)."""

    name = "to_channels_first"
    axes = (0, 3, 1, 2)
