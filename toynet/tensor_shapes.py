"""The shape and indexing methods of :class:`~toynet.tensor.Tensor`: reshape, permute, expand, ``x[i]``...

Like :mod:`toynet.tensor_methods`, they read arguments the way PyTorch does and call one op; the rules
that check the arguments live beside the ops in :mod:`toynet.ops.shape`, so Eager mode and Graph mode
share them.
"""

from __future__ import annotations

from typing import Any

from . import backend, mode
from .ops import OPS, ShapeError
from .ops import _op as op_base
from .ops.shape import TENSOR_INDEX, resolve_reshape, shape_arg, split_index
from .tensor import Tensor, apply
from .tensor_methods import attach

_RESHAPE, _PERMUTE, _GETITEM = OPS["reshape"], OPS["permute"], OPS["getitem"]


class TensorShapeMethods:
    """Attached to :class:`~toynet.tensor.Tensor` below; never instantiated."""

    # -------------------------------------------------------------------------------- shapes

    def reshape(self, *shape: Any) -> "Tensor":
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        own = self.shape
        if shape == own:
            return self
        if -1 in shape:
            shape = resolve_reshape(tuple(own), tuple(shape))
        return apply(_RESHAPE, self, shape=tuple(int(d) for d in shape))

    view = reshape

    def view_as(self, other: "Tensor") -> "Tensor":
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        shape = tuple(self.shape)
        if not shape:
            return self.reshape(1)
        start = op_base.normalize_dim("flatten", start_dim, len(shape))
        end = op_base.normalize_dim("flatten", end_dim, len(shape))
        if start > end:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        merged = 1
        for d in shape[start:end + 1]:
            merged *= d
        return self.reshape(shape[:start] + (merged,) + shape[end + 1:])

    def unsqueeze(self, dim: int) -> "Tensor":
        shape = tuple(self.shape)
        d = op_base.normalize_dim("unsqueeze", dim, len(shape) + 1)
        return self.reshape(shape[:d] + (1,) + shape[d:])

    def squeeze(self, dim: Any = None) -> "Tensor":
        shape = tuple(self.shape)
        if dim is None:
            return self.reshape(tuple(s for s in shape if s != 1))
        d = op_base.normalize_dim("squeeze", dim, len(shape))
        if shape[d] != 1:
            return self
        return self.reshape(shape[:d] + shape[d + 1:])

    def permute(self, *dims: Any) -> "Tensor":
        if len(dims) == 1 and not isinstance(dims[0], int):
            dims = tuple(dims[0])
        ndim = len(self.shape)
        # Not a permutation? The permute op's shape rule says so (Eager mode runs it when NumPy refuses).
        return apply(_PERMUTE, self, dims=tuple(int(d) + ndim if d < 0 else int(d) for d in dims))

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        ndim = len(self.shape)
        a = op_base.normalize_dim("transpose", dim0, ndim)
        b = op_base.normalize_dim("transpose", dim1, ndim)
        if a == b:
            return self
        axes = list(range(ndim))
        axes[a], axes[b] = b, a
        return apply(_PERMUTE, self, dims=tuple(axes))

    def t(self) -> "Tensor":
        if self.ndim < 2:
            return self
        return self.transpose(0, 1)

    @property
    def T(self) -> "Tensor":
        return self.permute(*reversed(range(self.ndim)))

    def expand(self, *shape: Any) -> "Tensor":
        shape = shape_arg(shape)
        own = tuple(self.shape)
        offset = len(shape) - len(own)
        if offset < 0:
            raise ShapeError(f"expand: cannot expand shape {own} to fewer dimensions {shape}")
        target = tuple(own[i - offset] if (s == -1 and i >= offset) else s for i, s in enumerate(shape))
        if target == own:
            return self
        return apply(OPS["broadcast_to"], self, shape=target)

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(*other.shape)

    broadcast_to = expand

    def repeat(self, *sizes: Any) -> "Tensor":
        """Tile the tensor ``sizes[i]`` times along dimension ``i`` (built from reshape and expand)."""
        sizes = shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: got {len(sizes)} sizes for a tensor with {self.ndim} dimensions")
        t = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self.shape))
        interleaved, expanded, final = [], [], []
        for size, times in zip(t.shape, sizes):
            interleaved += [1, size]
            expanded += [times, size]
            final.append(size * times)
        return t.reshape(interleaved).expand(*expanded).reshape(final)

    def __getitem__(self, index: Any) -> "Tensor":
        spec, tensors = split_index(index, Tensor, self.device)
        return apply(_GETITEM, self, *tensors, index=spec)

    def __setitem__(self, index: Any, value: Any) -> None:
        """In-place assignment ``t[index] = value``; not differentiated, and only in Eager mode."""
        if self.is_lazy:
            raise RuntimeError("item assignment (t[i] = v) is not supported inside nn.Graph.build(); build "
                               "the value with toynet.where or toynet.cat instead")
        if self.requires_grad and mode.grad_enabled:
            raise RuntimeError("item assignment on a tensor that requires grad would break its gradient; do "
                               "it under toynet.no_grad() or on a detached tensor")
        spec, tensors = split_index(index, Tensor, self.device)
        arrays = iter(t.array for t in tensors)
        resolved = tuple(next(arrays) if item == TENSOR_INDEX else item for item in spec)
        self.array[resolved] = value.to(self.device).array if isinstance(value, Tensor) else \
            backend.as_device_value(value, self.device, self.dtype)

    def chunk(self, chunks: int, dim: int = 0) -> list["Tensor"]:
        if chunks < 1:
            raise ValueError(f"chunk: chunks must be at least 1, got {chunks}")
        size = self.shape[dim]
        step = -(-size // chunks)
        return self.split(step, dim)

    def split(self, split_size: Any, dim: int = 0) -> list["Tensor"]:
        d = op_base.normalize_dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size, int) and split_size < 1:
            raise ValueError(f"split: split_size must be at least 1, got {split_size}")
        sizes = [split_size] * (size // split_size) + ([size % split_size] if size % split_size else []) \
            if isinstance(split_size, int) else list(split_size)
        if sum(sizes) != size:
            raise ValueError(f"split: sizes {sizes} add up to {sum(sizes)}, but dimension {dim} has size {size}")
        pieces, start = [], 0
        for s in sizes:
            index = (slice(None),) * d + (slice(start, start + s),)
            pieces.append(self[index])
            start += s
        return pieces


attach(TensorShapeMethods, Tensor)
