"""A transformer's layers: ``Embedding``, ``LayerNorm`` and ``MultiheadAttention``, with PyTorch's parameter
names, initialisation and printout, so that a PyTorch model's ``state_dict`` loads into the toynet one.

``Embedding`` and ``LayerNorm`` are thin modules around :mod:`toynet.nn.functional`; ``MultiheadAttention``
projects its inputs, splits the heads, computes the attention of ``scaled_dot_product_attention`` with
PyTorch's masks (True there means *masked*, the reverse of ``scaled_dot_product_attention``'s bool mask)
and projects the heads back.
"""

from __future__ import annotations

import math
from typing import Any

from ... import backend
from ...dynamic.creation import ones, zeros
from ...dynamic.tensor import Tensor
from ...ops import ShapeError
from .. import functional as F
from .. import init
from ..functional_transformer import mask_bias
from ..module import Module
from ..parameter import Parameter
from .layers import Linear


def _dtype(dtype: Any) -> backend.DType:
    return backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT


class Embedding(Module):
    """A lookup table: ``weight[indices]``, ``weight`` of shape ``(num_embeddings, embedding_dim)``, N(0, 1) at
    first. Row ``padding_idx`` (if given) starts at zero and receives no gradient. ``max_norm`` and sparse
    gradients are not supported."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse are not supported by "
                                      "toynet; leave them at their defaults")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within num_embeddings "
                                 f"({num_embeddings}): in [{-num_embeddings}, {num_embeddings})")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = max_norm, norm_type, False, False
        if _weight is None:
            self.weight = Parameter(zeros(num_embeddings, embedding_dim, dtype=_dtype(dtype), device=device),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {tuple(_weight.shape)}, expected "
                                 f"({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.array[self.padding_idx] = 0

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None,
                        **kwargs: Any) -> Embedding:
        """An Embedding whose weight is (a copy of the memory of) ``embeddings``; frozen unless ``freeze=False``."""
        if embeddings.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got shape {tuple(embeddings.shape)}")
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        text += f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return text + (f", norm_type={self.norm_type}" if self.norm_type != 2 else "")


class LayerNorm(Module):
    """Normalise each sample over its last ``len(normalized_shape)`` dimensions (mean 0, variance 1), then
    ``* weight + bias`` (ones and zeros at first; ``elementwise_affine=False``: neither, ``bias=False``: no bias)."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape or any(not isinstance(d, int) or d < 1 for d in shape):
            raise ValueError(f"LayerNorm: normalized_shape must be a positive int or a tuple of them, got "
                             f"{normalized_shape!r}")
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        dtype = _dtype(dtype)
        self.weight = Parameter(ones(*shape, dtype=dtype, device=device)) if elementwise_affine else None
        self.bias = Parameter(zeros(*shape, dtype=dtype, device=device)) if elementwise_affine and bias else None

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class NonDynamicallyQuantizableLinear(Linear):
    """``MultiheadAttention.out_proj``: a ``Linear`` under PyTorch's class name, so that printouts match."""


class MultiheadAttention(Module):
    """Attention with ``num_heads`` heads, each on ``embed_dim / num_heads`` features (PyTorch's module).

    Parameters as in PyTorch: ``in_proj_weight`` ``(3 E, E)`` stacks the query, key and value projections
    (``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight`` instead when ``kdim`` or ``vdim`` differ from
    ``embed_dim``), ``in_proj_bias`` ``(3 E,)``, and ``out_proj``, a Linear. Inputs are ``(L, N, E)`` (``(N, L, E)``
    with ``batch_first``, ``(L, E)`` unbatched). ``forward`` returns ``(output, weights)``, ``weights`` the
    attention weights averaged over heads ``(N, L, S)`` (per head ``(N, H, L, S)`` with
    ``average_attn_weights=False``; ``None`` with ``need_weights=False``).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim and num_heads must be positive, got {embed_dim} and "
                             f"{num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads}): each head gets embed_dim / num_heads features")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.head_dim = embed_dim // num_heads
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        dtype = _dtype(dtype)
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(zeros(3 * embed_dim, embed_dim, dtype=dtype, device=device))
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = Parameter(zeros(embed_dim, embed_dim, dtype=dtype, device=device))
            self.k_proj_weight = Parameter(zeros(embed_dim, self.kdim, dtype=dtype, device=device))
            self.v_proj_weight = Parameter(zeros(embed_dim, self.vdim, dtype=dtype, device=device))
        self.in_proj_bias = Parameter(zeros(3 * embed_dim, dtype=dtype, device=device)) if bias else None
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's: Xavier-uniform projections, zero biases (``out_proj.weight`` keeps Linear's init)."""
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        batched = self._check_inputs(query, key, value)
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: is_causal=True is a hint that attn_mask is the causal mask, so "
                               "it needs attn_mask (as in PyTorch); pass attn_mask=toynet.ones(L, L).triu(1).bool()")
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        length, batch, embed = query.shape
        source, heads = key.shape[0], self.num_heads
        q, k, v = self._project(query, key, value)
        # (L, N, E) -> (N, H, L, head_dim): every head is a batch of its own
        q, k, v = (t.reshape(t.shape[0], batch, heads, self.head_dim).permute(1, 2, 0, 3) for t in (q, k, v))
        scores = (q * (1.0 / math.sqrt(self.head_dim))) @ k.transpose(-2, -1)          # (N, H, L, S)
        bias = self._mask_bias(attn_mask, key_padding_mask, batch, length, source, query.dtype)
        if bias is not None:
            scores = scores + bias
        weights = scores.softmax(-1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout, training=True)
        out = (weights @ v).permute(2, 0, 1, 3).reshape(length, batch, embed)
        out = self.out_proj(out)
        if not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, (weights if batched else weights.squeeze(0))

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        """The query, key and value projections; self-attention's three in one product, as PyTorch does."""
        e = self.embed_dim
        b = self.in_proj_bias
        biases = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            if query is key and key is value:
                return tuple(F.linear(query, self.in_proj_weight, b).split(e, -1))
            w = self.in_proj_weight
            weights = (w[:e], w[e:2 * e], w[2 * e:])
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        return tuple(F.linear(x, w, bias) for x, w, bias in zip((query, key, value), weights, biases))

    def _mask_bias(self, attn_mask: Any, key_padding_mask: Any, batch: int, length: int, source: int,
                   dtype: Any) -> Tensor | None:
        """PyTorch's two masks (True: do *not* attend; a float mask is added) as one bias to add to the
        ``(N, H, L, S)`` scores."""
        bias = None
        if attn_mask is not None:
            expected = [(length, source), (batch * self.num_heads, length, source)]
            if tuple(attn_mask.shape) not in expected:
                raise ShapeError(f"MultiheadAttention: attn_mask has shape {tuple(attn_mask.shape)}, expected "
                                 f"{expected[0]} or {expected[1]} (L, S or N * num_heads, L, S)")
            bias = _masked_bias(attn_mask, dtype)
            if bias.ndim == 3:
                bias = bias.reshape(batch, self.num_heads, length, source)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (batch, source):
                raise ShapeError(f"MultiheadAttention: key_padding_mask has shape {tuple(key_padding_mask.shape)}, "
                                 f"expected {(batch, source)} (N, S): True marks the keys to ignore")
            padding = _masked_bias(key_padding_mask, dtype).reshape(batch, 1, 1, source)
            bias = padding if bias is None else bias + padding
        return bias

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> bool:
        shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"MultiheadAttention: query, key and value must all be 3-D (batched) or all 2-D "
                             f"(unbatched), got {shapes}")
        sizes = (query.shape[-1], key.shape[-1], value.shape[-1])
        if sizes != (self.embed_dim, self.kdim, self.vdim):
            raise ShapeError(f"MultiheadAttention: the feature sizes (last dimensions) must be embed_dim={self.embed_dim}"
                             f", kdim={self.kdim}, vdim={self.vdim}, got {shapes}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ShapeError(f"MultiheadAttention: key and value must have the same length and batch, got {shapes}")
        batch_dim = 0 if self.batch_first else 1
        if query.ndim == 3 and query.shape[batch_dim] != key.shape[batch_dim]:
            raise ShapeError(f"MultiheadAttention: query and key have different batch sizes (dimension "
                             f"{batch_dim}{', batch_first' if self.batch_first else ''}), got {shapes}")
        return query.ndim == 3


def _masked_bias(mask: Tensor, dtype: Any) -> Tensor:
    """PyTorch's module masks are the reverse of ``scaled_dot_product_attention``'s: True means *masked*."""
    return mask_bias(~mask, dtype) if mask.dtype is backend.bool_ else mask_bias(mask, dtype)
