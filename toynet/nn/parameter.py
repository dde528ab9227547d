"""``nn.Parameter``: a tensor that a module trains. Assigning one to a module attribute registers it."""

from __future__ import annotations

from typing import Any

from .. import serialization
from ..dynamic.printing import tensor_repr
from ..dynamic.tensor import Tensor


class Parameter(Tensor):
    """A leaf tensor with ``requires_grad=True`` that ``Module.parameters()`` finds.

    ``nn.Parameter(toynet.randn(3, 4))`` shares the array of the tensor it wraps.
    """

    __slots__ = ()
    #: The class of a parameter made from a global tensor (toynet.nn.module_global sets it).
    global_class: Any = None

    def __new__(cls, data: Any = None, requires_grad: bool = True) -> "Parameter":
        if cls is Parameter and getattr(data, "is_global", False) is True and Parameter.global_class is not None:
            return Parameter.global_class.of(data, requires_grad)   # a global tensor makes a global parameter
        return super().__new__(cls)

    def __init__(self, data: Any = None, requires_grad: bool = True):
        if data is None:
            raise TypeError("Parameter() needs a tensor, e.g. nn.Parameter(toynet.zeros(3))")
        if not isinstance(data, Tensor):
            data = Tensor.from_data(data)
        if data.is_lazy:
            raise RuntimeError("cannot make a Parameter from a lazy tensor inside nn.Graph.build(); create "
                               "parameters in the module's __init__")
        self.array = data.array
        # It shares the wrapped tensor's memory, so it shares its count of writes (see toynet.dynamic.autograd.Version).
        self._version = data
        self.node = None
        self.device = data.device
        self.grad = None
        self.grad_fn = None
        self.name = None
        self.requires_grad = False
        self.requires_grad_(requires_grad)

    def __repr__(self) -> str:
        # OneFlow prints a parameter as the tensor it is, its grad_fn being the node that accumulates
        # each backward's gradient into .grad (PyTorch writes "Parameter containing:" above instead).
        return tensor_repr(self, leaf_grad_fn="accumulate_grad")


# toynet.save marks parameters ("parameter": true) and toynet.load makes them Parameters again.
serialization.register_tensor_class("parameter", Parameter)
