"""The layers that are one function each: ``Linear`` and ``Flatten``, the losses, the activations and
``Dropout``. Each is a thin module around :mod:`toynet.nn.functional` (or a tensor method), whose
``forward`` calls it with the layer's settings; the maths is there and in the op table.
"""

from __future__ import annotations

import math

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
        if weight is not None or label_smoothing:
            raise NotImplementedError("CrossEntropyLoss: class weights and label smoothing are not supported")
        self.ignore_index = ignore_index

    def forward(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits, target, reduction=self.reduction, ignore_index=self.ignore_index)


# -------------------------------------------------------------------------------------- activations


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace  # accepted for PyTorch compatibility; toynet never overwrites inputs

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU6(ReLU):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu6()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x.softmax(self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x: Tensor) -> Tensor:
        return x.log_softmax(self.dim)


# ------------------------------------------------------------------------------------------ dropout


class Dropout(Module):
    """Each element is zeroed with probability ``p`` and the survivors are multiplied by ``1 / (1 - p)``,
    so the expected output equals the input; in eval mode (``model.eval()``) the layer is the identity.

    Masks come from toynet's random generator: ``toynet.manual_seed`` makes them reproducible.
    ``inplace`` is accepted for PyTorch compatibility; toynet never overwrites its input.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
