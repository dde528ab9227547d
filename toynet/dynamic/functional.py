"""The ``toynet.*`` functions (``toynet.matmul``, ``toynet.cat``, ``toynet.sum``...).

Most simply call the tensor method of the same name; the ones that take several tensors
(``cat``, ``stack``, ``where``) build their op call here.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..ops import OPS
from ..ops._op import normalize_dim
from .tensor import Tensor, apply


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor.from_data(x)


def add(a: Any, b: Any) -> Tensor:
    return apply(OPS["add"], a, b)


def sub(a: Any, b: Any) -> Tensor:
    return apply(OPS["sub"], a, b)


def mul(a: Any, b: Any) -> Tensor:
    return apply(OPS["mul"], a, b)


def div(a: Any, b: Any) -> Tensor:
    return apply(OPS["div"], a, b)


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001  (mirrors toynet.pow / torch.pow)
    return apply(OPS["pow"], a, b)


def matmul(a: Any, b: Any) -> Tensor:
    return apply(OPS["matmul"], a, b)


def neg(a: Tensor) -> Tensor:
    return -a


def exp(a: Tensor) -> Tensor:
    return a.exp()


def log(a: Tensor) -> Tensor:
    return a.log()


def sqrt(a: Tensor) -> Tensor:
    return a.sqrt()


def rsqrt(a: Tensor) -> Tensor:
    return a.rsqrt()


def tanh(a: Tensor) -> Tensor:
    return a.tanh()


def sigmoid(a: Tensor) -> Tensor:
    return a.sigmoid()


def relu(a: Tensor) -> Tensor:
    return a.relu()


def abs(a: Tensor) -> Tensor:  # noqa: A001
    return a.abs()


def clamp(a: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    return a.clamp(min, max)


clip = clamp


def maximum(a: Tensor, b: Any) -> Tensor:
    return a.maximum(b)


def minimum(a: Tensor, b: Any) -> Tensor:
    return a.minimum(b)


def where(condition: Tensor, a: Any, b: Any) -> Tensor:
    """``a`` where ``condition`` is true, else ``b`` (either may be a number)."""
    return apply(OPS["where"], condition, a, b)


def sum(a: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return a.sum(dim, keepdim)


def mean(a: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return a.mean(dim, keepdim)


def var(a: Tensor, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> Tensor:
    return a.var(dim, unbiased, keepdim)


def max(a: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001
    return a.max(dim, keepdim)


def min(a: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001
    return a.min(dim, keepdim)


def argmax(a: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return a.argmax(dim, keepdim)


def softmax(a: Tensor, dim: int = -1) -> Tensor:
    return a.softmax(dim)


def log_softmax(a: Tensor, dim: int = -1) -> Tensor:
    return a.log_softmax(dim)


def reshape(a: Tensor, shape: Sequence[int]) -> Tensor:
    return a.reshape(shape)


def flatten(a: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    return a.flatten(start_dim, end_dim)


def squeeze(a: Tensor, dim: Any = None) -> Tensor:
    return a.squeeze(dim)


def unsqueeze(a: Tensor, dim: int) -> Tensor:
    return a.unsqueeze(dim)


def transpose(a: Tensor, dim0: int, dim1: int) -> Tensor:
    return a.transpose(dim0, dim1)


def permute(a: Tensor, *dims: Any) -> Tensor:
    return a.permute(*dims)


def broadcast_to(a: Tensor, shape: Sequence[int]) -> Tensor:
    return a.expand(*shape)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dimension."""
    tensors = [_t(t) for t in tensors]
    if not tensors:
        raise ValueError("cat: needs at least one tensor")
    return apply(OPS["cat"], *tensors, dim=normalize_dim("cat", dim, tensors[0].ndim))


concat = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along a new dimension: ``cat`` of the tensors each unsqueezed at ``dim``."""
    tensors = [_t(t) for t in tensors]
    if not tensors:
        raise ValueError("stack: needs at least one tensor")
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ValueError(f"stack: all tensors must have the same shape, got {sorted(shapes)}")
    d = normalize_dim("stack", dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], dim=d)
