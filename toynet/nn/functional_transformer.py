"""A transformer's layers as functions: ``gelu``, ``layer_norm``, ``embedding`` (one op each, in
:mod:`toynet.ops.gelu`, :mod:`toynet.ops.layer_norm`, :mod:`toynet.ops.embedding`) and
``scaled_dot_product_attention``, written with plain toynet ops so that Eager mode, Graph mode and the ONNX
exporter all run it as it reads. ``toynet.nn.functional`` gives them all (``F.gelu``...).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ..dynamic import functional as functions
from ..dynamic.tensor import Tensor
from ..ops import ShapeError
from ..ops._op import broadcast_shapes
from .functional_vision import dropout

gelu = functions.gelu
layer_norm = functions.layer_norm
embedding = functions.embedding


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value`` over the last two dimensions (PyTorch's semantics).

    ``query`` ``(..., L, E)``, ``key`` ``(..., S, E)``, ``value`` ``(..., S, Ev)``; leading dimensions broadcast.
    ``scale`` defaults to ``1 / sqrt(E)``. ``attn_mask`` broadcasts to ``(..., L, S)``: a bool mask says where a
    query may attend (True) and where not, a float mask is added to the scores. ``is_causal`` lets query ``i``
    attend to keys ``0..i`` only. ``dropout_p`` drops attention weights (always, as PyTorch: pass 0.0 when
    evaluating). A mask becomes a bias of zeros and ``-inf`` added to the scores (one addition, cheaper than a
    ``where`` over them); a row with every key masked gives NaN, as in PyTorch.
    """
    _check_attention(query, key, value)
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass attn_mask or is_causal=True, not both (the causal "
                         "mask is made from is_causal; fold it into attn_mask yourself to combine them)")
    length, source = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = (query * scale) @ key.transpose(-2, -1)
    bias = None
    if is_causal:
        bias = causal_bias(length, source, query.dtype, query.device)
    elif attn_mask is not None:
        try:
            broadcast_shapes("scaled_dot_product_attention", tuple(attn_mask.shape), tuple(scores.shape))
        except ShapeError:
            raise ShapeError(f"scaled_dot_product_attention: attn_mask of shape {tuple(attn_mask.shape)} does not "
                             f"broadcast to the attention scores' shape {tuple(scores.shape)} (..., L, S)") from None
        bias = mask_bias(attn_mask, query.dtype)
    if bias is not None:
        scores = scores + bias
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ value


def mask_bias(mask: Tensor, dtype: Any) -> Tensor:
    """A mask as a bias to add to attention scores: a bool mask's True (attend) is 0, False is ``-inf``; a float
    mask is its own bias."""
    if mask.dtype.is_floating_point:
        return mask
    if mask.dtype.name != "bool":
        raise TypeError(f"an attention mask must be bool (True: attend) or float (added to the scores), got "
                        f"{mask.dtype}")
    return functions.where(mask, 0.0, float("-inf")).to(dtype)


@functools.lru_cache(maxsize=64)
def causal_bias(length: int, source: int, dtype: Any, device: Any) -> Tensor:
    """``(length, source)`` zeros on and below the diagonal and ``-inf`` above it: query ``i`` sees keys ``<= i``.
    Made once per size (a constant of any graph that reads it)."""
    return Tensor.wrap(device.xp.full((length, source), float("-inf"), dtype=dtype.array_dtype), device).triu(1)


def _check_attention(query: Tensor, key: Tensor, value: Tensor) -> None:
    shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise ShapeError(f"scaled_dot_product_attention: query, key and value need at least 2 dimensions "
                         f"(..., length, features), got {shapes}")
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(f"scaled_dot_product_attention: query and key must have the same feature size (last "
                         f"dimension) to be multiplied, got {shapes}")
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: key and value must have the same length (one value per "
                         f"key, dimension -2), got {shapes}")
