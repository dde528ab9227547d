"""A tiny GPT, after Andrej Karpathy's nanoGPT, written only with OneFlow's API (``import oneflow as flow``
runs it unchanged), so the same module trains in Eager mode and, wrapped in an ``nn.Graph``, in Graph mode.

The model reads ``block_size`` token ids and predicts, at every position, the next token:

    ids -> token embedding + position embedding
        -> n_layer x Block:  x = x + attention(layer_norm(x));  x = x + mlp(layer_norm(x))
        -> layer_norm -> lm_head (sharing the token embedding's weight) -> logits over the vocabulary

Attention is written out (scores, causal mask, softmax, weighted sum) rather than called as one function,
so that notebook 09 can show its weights and Graph mode's passes can work across its pieces. Generation can
keep each layer's keys and values (a *key-value cache*): a new token then attends to the cached ones instead
of running the whole context through the model again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import nn
from ..dynamic.creation import arange, ones
from ..dynamic.functional import cat
from ..mode import no_grad
from ..nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 64     # the longest context the model reads
    vocab_size: int = 128
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True        # biases in the Linear layers and LayerNorms

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig: n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head}): "
                             "each head gets n_embd // n_head channels")
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"GPTConfig: {name} must be a positive int, got {getattr(self, name)!r}")


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position t only sees positions <= t."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)   # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        size = config.block_size
        # mask[t, s] is True where position t may look at position s (s <= t).
        self.register_buffer("mask", ones(size, size).tril().view(1, 1, size, size) > 0, persistent=False)
        self.keep_weights = False   # set True to keep the last attention weights in .weights (notebook 09)
        self.weights = None

    def forward(self, x, cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        # (B, T, C) -> (B, n_head, T, head size): every head attends on its own slice of the channels.
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        past = 0
        if cache is not None:   # generation: keys and values of the earlier tokens are kept, not recomputed
            if "k" in cache:
                past = cache["k"].shape[2]
                k, v = cat([cache["k"], k], dim=2), cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))          # (B, nh, T, past + T)
        scores = scores.masked_fill(~self.mask[:, :, past:past + T, :past + T], float("-inf"))
        att = F.softmax(scores, dim=-1)
        if self.keep_weights:
            self.weights = att.detach()
        y = self.attn_dropout(att) @ v                                              # (B, nh, T, head size)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                            # heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: widen 4x, GELU, narrow back."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """One transformer block (pre-norm): attention, then the MLP, each added to the residual stream."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """The language model: ``model(ids)`` gives logits (B, T, vocab); ``model(ids, targets)`` gives
    ``(logits, loss)``, the mean cross-entropy of predicting each next token."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight   # weight tying: one matrix reads and writes tokens
        self._init_weights()

    def _init_weights(self):
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the projections that feed the residual
        stream scaled down by sqrt(2 * n_layer), so that the stream's variance does not grow with depth."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None, cache=None):
        B, T = idx.size()
        past = cache[0]["k"].shape[2] if cache and "k" in cache[0] else 0
        if past + T > self.config.block_size:
            raise ValueError(f"GPT: a sequence of {past + T} tokens is longer than block_size = "
                             f"{self.config.block_size}; crop the context to its last {self.config.block_size} "
                             "tokens")
        positions = arange(past, past + T, dtype=idx.dtype, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
        for i, block in enumerate(self.transformer.h):
            x = block(x, None if cache is None else cache[i])
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True):
        """Append ``max_new_tokens`` sampled tokens to ``idx`` (B, T), one at a time (Eager mode).

        Without a cache, every new token runs the whole context (the last ``block_size`` tokens) through the
        model again. With ``use_cache`` each layer keeps the keys and values of the tokens it has read, so a new
        token costs one position; when the cache is full it starts again from the last ``block_size // 2``
        tokens (their positions counted from 0, as a cropped context is)."""
        size = self.config.block_size
        with no_grad():
            cache, held, fed = None, 0, 0       # the cache holds `held` positions: tokens idx[:, :fed]
            for _ in range(max_new_tokens):
                if cache is not None and held + idx.size(1) - fed <= size:
                    logits = self(idx[:, fed:], cache=cache)       # only the tokens the cache has not read
                else:
                    context = idx[:, -(size // 2 if cache is not None else size):]
                    cache = [{} for _ in self.transformer.h] if use_cache else None
                    logits = self(context, cache=cache)
                held, fed = (cache[0]["k"].shape[2] if cache else 0), idx.size(1)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    kth = logits.topk(min(top_k, logits.size(-1)))[0][:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                idx = cat([idx, F.softmax(logits, dim=-1).multinomial(num_samples=1)], dim=1)
        return idx
