"""``Dropout``: zero random elements in training (scaling the others up), pass through in eval."""

from __future__ import annotations

from ...dynamic.tensor import Tensor
from .. import functional as F
from ..module import Module


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
