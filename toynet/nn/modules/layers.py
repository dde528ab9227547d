"""The layers of a plain fully connected network, and the container that chains them.

``Linear``, ``Flatten`` and the losses are each a thin module around :mod:`toynet.nn.functional` (or a
tensor method), whose ``forward`` calls it with the layer's settings; the maths is there and in the op
table. ``Sequential`` calls its children one after the other. The activations and ``Dropout`` are in
:mod:`.activation`, ``ModuleList`` and ``ModuleDict`` in :mod:`.containers`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Iterator

from ... import backend
from ...dynamic.creation import zeros
from ...dynamic.tensor import Tensor
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter


# ----------------------------------------------------------- the fully connected layer, and Flatten


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape (out_features, in_features).

    Initialised as in PyTorch: weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a=sqrt(5)),
    bias likewise.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
        self.weight = Parameter(zeros(out_features, in_features, dtype=dtype, device=device))
        self.bias = Parameter(zeros(out_features, dtype=dtype, device=device)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Flatten(Module):
    """Merge dimensions ``start_dim``..``end_dim`` into one (default: all but the batch dimension)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


# ------------------------------------------------------------------------------------------- losses


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction


class MSELoss(_Loss):
    """Mean (or summed) squared error between prediction and target of the same shape."""

    def forward(self, prediction: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(prediction, target, reduction=self.reduction)


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits ``(N, C)`` (or ``(N, C, ...)``) against class indices ``(N, ...)``."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        if weight is not None:
            raise NotImplementedError("CrossEntropyLoss: class weights are not supported")
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, self.reduction, self.ignore_index, self.label_smoothing)


# ------------------------------------------------------------------------------------------ containers


class Sequential(Module):
    """Children called one after the other; ``model[0]`` is the first, ``model[1:]`` a new Sequential."""

    def __init__(self, *modules: Any):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, index: Any) -> Any:
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(items[index]))
        if not -len(items) <= index < len(items):
            raise IndexError(f"index {index} is out of range for a Sequential of {len(items)} modules")
        return items[index][1]

    def __setitem__(self, index: int, module: Module) -> None:
        name = list(self._modules)[index]
        self.add_module(name, module)

    def __delitem__(self, index: Any) -> None:
        _delete_and_renumber(self, index)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self


def _delete_and_renumber(container: Module, index: Any) -> None:
    """``del container[i]`` (or a slice); the remaining modules are renamed 0, 1, 2... as in PyTorch."""
    names = list(container._modules)
    for name in (names[index] if isinstance(index, slice) else [names[index]]):
        del container._modules[name]
    modules = list(container._modules.values())
    container._modules.clear()
    for i, m in enumerate(modules):
        container._modules[str(i)] = m
