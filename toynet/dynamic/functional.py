"""The ``toynet.*`` functions (``toynet.matmul``, ``toynet.cat``, ``toynet.sum``...).

Most simply call the tensor method of the same name; the ones that take several tensors
(``cat``, ``stack``, ``where``, ``bmm``) build their op call here, and so do the transformer's ops that have no
method (``gelu``, ``layer_norm``, ``embedding``: ``toynet.nn.functional`` gives them under their usual names).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..ops import OPS, ShapeError
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


# ---------------------------------------------------------------- a transformer's pieces (also as methods)


def masked_fill(a: Tensor, mask: Tensor, value: Any) -> Tensor:
    return a.masked_fill(mask, value)


def tril(a: Tensor, diagonal: int = 0) -> Tensor:
    return a.tril(diagonal)


def triu(a: Tensor, diagonal: int = 0) -> Tensor:
    return a.triu(diagonal)


def split(a: Tensor, split_size_or_sections: Any, dim: int = 0) -> list:
    return a.split(split_size_or_sections, dim)


def chunk(a: Tensor, chunks: int, dim: int = 0) -> list:
    return a.chunk(chunks, dim)


def topk(a: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    return a.topk(k, dim, largest, sorted)


def gather(a: Tensor, dim: int, index: Tensor) -> Tensor:
    return a.gather(dim, index)


def multinomial(a: Tensor, num_samples: int, replacement: bool = False) -> Tensor:
    return a.multinomial(num_samples, replacement)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matrix product of ``(B, n, m)`` and ``(B, m, p)``: ``B`` products of ``(n, m) @ (m, p)``."""
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"bmm: both tensors must be 3-D (batch, rows, columns), got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}; use toynet.matmul (or @) for other shapes, which broadcasts")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ShapeError(f"bmm: shapes {tuple(a.shape)} and {tuple(b.shape)} do not fit: the batch sizes must be "
                         f"equal and the first's columns ({a.shape[2]}) must equal the second's rows ({b.shape[1]})")
    return apply(OPS["matmul"], a, b)


def gelu(a: Tensor, approximate: str = "none") -> Tensor:
    """``a * Phi(a)`` (``Phi`` the standard normal's CDF; ``approximate="tanh"``: GPT-2's tanh form)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return apply(OPS["gelu" if approximate == "none" else "gelu_tanh"], a)


def layer_norm(a: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise over the last ``len(normalized_shape)`` dimensions, then ``* weight + bias`` (both optional)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or tuple(a.shape[a.ndim - len(shape):]) != shape or len(shape) > a.ndim:
        raise ShapeError(f"layer_norm: normalized_shape {shape} must be the last dimension(s) of the input, whose "
                         f"shape is {tuple(a.shape)} (e.g. normalized_shape={tuple(a.shape[-1:])})")
    if bias is not None and weight is None:   # the op takes a weight before a bias
        weight = Tensor.wrap(a.device.xp.ones(shape, dtype=bias.dtype.array_dtype), a.device)
    params = [p for p in (weight, bias) if p is not None]
    return apply(OPS["layer_norm"], a, *params, dim=tuple(range(a.ndim - len(shape), a.ndim)), eps=float(eps))


def embedding(indices: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """The rows of ``weight`` ``(num_embeddings, embedding_dim)`` picked by integer ``indices`` of any shape."""
    indices = _t(indices)
    if weight.ndim != 2:
        raise ShapeError(f"embedding: the weight must be a matrix (num_embeddings, embedding_dim), got shape "
                         f"{tuple(weight.shape)}")
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise ValueError(f"embedding: padding_idx {padding_idx} must be within num_embeddings "
                             f"({weight.shape[0]}): in [{-weight.shape[0]}, {weight.shape[0]})")
        return apply(OPS["embedding"], weight, indices, ignore_index=padding_idx % weight.shape[0])
    return apply(OPS["embedding"], weight, indices)
