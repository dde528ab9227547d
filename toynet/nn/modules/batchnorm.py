"""Batch normalisation layers: ``BatchNorm1d`` for ``(N, C)``/``(N, C, L)``, ``BatchNorm2d`` for images.

In training mode a layer normalises each channel with the batch's mean and variance and keeps
exponential moving averages of them (``running_mean``, ``running_var``: buffers, saved in the
state dict but not trained); in eval mode it normalises with those averages, so a single sample
gives the same answer whatever batch it comes in. The work is done by ``F.batch_norm`` (see
``toynet/ops/norm.py`` for the fused ops and the closed-form gradient).
"""

from __future__ import annotations

from ... import backend
from ...dynamic.creation import ones, tensor, zeros
from ...mode import call_with_grad_mode
from ...dynamic.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter


class _BatchNorm(Module):
    """Shared by the BatchNorm layers; subclasses say which input ranks they accept."""

    expected_ndims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=backend.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, x: Tensor) -> None:
        if x.ndim not in self.expected_ndims:
            wanted = " or ".join(f"{d}D" for d in self.expected_ndims)
            raise ValueError(f"{type(self).__name__}: expected {wanted} input (got {x.ndim}D input of shape "
                             f"{tuple(x.shape)})")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}): the input of shape {tuple(x.shape)} has "
                             f"{x.shape[1]} channels in dimension 1, expected {self.num_features}")

    def _count_batch(self) -> None:
        self.num_batches_tracked.copy_(self.num_batches_tracked + 1)

    def forward(self, x: Tensor) -> Tensor:
        self._check_input_dim(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            call_with_grad_mode(False, self._count_batch)
            if self.momentum is None:  # cumulative average: the k-th batch gets weight 1/k
                momentum = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        # Batch statistics in training, and also in eval when no running statistics are kept.
        use_batch_stats = self.training or self.running_mean is None
        keep_running = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if keep_running else None,
                            self.running_var if keep_running else None, self.weight, self.bias,
                            training=use_batch_stats, momentum=momentum, eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over ``(N, C)`` or ``(N, C, L)`` inputs, one mean and variance per channel ``C``."""

    expected_ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over ``(N, C, H, W)`` images, one mean and variance per channel ``C``.

    >>> bn = BatchNorm2d(32)
    >>> bn
    BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
    """

    expected_ndims = (4,)
