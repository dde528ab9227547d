"""The activations (``ReLU``, ``Tanh``, ``Softmax``...) and ``Dropout``: each a thin module whose ``forward``
calls :mod:`toynet.nn.functional` (or a tensor method) with the layer's settings."""

from __future__ import annotations


from ...dynamic.tensor import Tensor
from .. import functional as F
from ..module import Module


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


class GELU(Module):
    """``x * Phi(x)``, ``Phi`` the standard normal's CDF (``approximate="tanh"``: GPT-2's tanh form of it)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"
