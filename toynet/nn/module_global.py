"""``module.to_global(placement, sbp)``: a module whose parameters and buffers are global tensors.

OneFlow's pages make a whole model global in one call, ``model.to_global(placement=P, sbp=flow.sbp.broadcast)``:
every parameter becomes a global tensor with that layout (a fresh leaf that requires grad, as the parameter
did), every buffer too. Make the optimizer after this call: it must hold the new parameters. A broadcast
model with split data is data parallelism; ``sbp=flow.sbp.split(0)`` on a weight is model parallelism.
``sbp`` may also be a function ``(name, tensor) -> sbp`` to lay out each parameter its own way.
"""

from __future__ import annotations

from typing import Any

from .. import mode
from ..distributed.global_tensor import GlobalTensor, make
from ..dynamic.tensor_methods import attach
from .module import Module
from .parameter import Parameter


class GlobalParameter(GlobalTensor, Parameter):
    """``nn.Parameter(x)`` of a global tensor ``x`` (``flow.randn(5, 8, placement=P, sbp=B)``): a parameter,
    held in parts by the processes of its placement, sharing ``x``'s part."""

    __slots__ = ()

    @classmethod
    def of(cls, data: GlobalTensor, requires_grad: bool = True) -> GlobalParameter:
        if data.is_lazy:
            raise RuntimeError("cannot make a Parameter from a lazy tensor inside nn.Graph.build()")
        return make(data.array, data.device, data._placement, data._sbp, data._logical, requires_grad, cls=cls)

    def __init__(self, data: Any = None, requires_grad: bool = True):
        pass   # (made whole by of(), which Parameter.__new__ calls)

    def __repr__(self) -> str:
        return GlobalTensor.__repr__(self)


Parameter.global_class = GlobalParameter


class GlobalModuleMethods:
    def to_global(self, placement: Any = None, sbp: Any = None) -> Module:
        """Make every parameter and buffer of this module (and its children) global; returns the module."""
        if placement is None or sbp is None:
            raise TypeError("module.to_global needs placement= and sbp=, e.g. model.to_global(placement="
                            "toynet.placement('cpu', ranks=[0, 1]), sbp=toynet.sbp.broadcast)")

        def made_global(name: str, t: Any, is_parameter: bool) -> Any:
            with mode.no_grad():
                g = t.to_global(placement=placement, sbp=sbp(name, t) if callable(sbp) else sbp)
            if is_parameter:
                return GlobalParameter.of(g, t.requires_grad)
            g = g.detach() if g is t else g   # (a fresh leaf even when the layout is unchanged)
            g.requires_grad = t.requires_grad
            return g
        return self._replace_states(made_global)

    def to_local(self) -> Module:
        """Each parameter and buffer back to this process's part of it (the inverse of ``to_global``)."""
        def made_local(name: str, t: Any, is_parameter: bool) -> Any:
            if not t.is_global:
                return t
            local = t.to_local().detach()
            return Parameter(local, t.requires_grad) if is_parameter else local.requires_grad_(t.requires_grad)
        return self._replace_states(made_local)

    def _replace_states(self, convert: Any) -> Module:
        """Each parameter and buffer of this module and its children replaced by ``convert(name, tensor,
        is_parameter)`` (``name``: its key in the state dict)."""
        for prefix, module in self.named_modules():
            for registry in (module._parameters, module._buffers):
                for key, t in list(registry.items()):
                    if t is not None:
                        registry[key] = convert(f"{prefix}.{key}".lstrip("."), t, registry is module._parameters)
        return self


attach(GlobalModuleMethods, Module)
