"""``nn.parallel.DistributedDataParallel``: data parallelism in Eager mode, with local tensors.

Every process holds the whole model and trains it on its own part of each batch. Two things keep the
copies one model:

1. **They start equal**: wrapping the module broadcasts every parameter and buffer from rank 0.
2. **They take equal steps**: after ``loss.backward()``, each parameter's gradient is the *average* over the
   processes of their gradients, so every optimizer applies the same update. With the processes' batches
   of equal size and a mean loss, that average is exactly the gradient of the whole batch on one process.

Where does the averaging happen, with no hook in toynet's autograd? In the graph autograd records: during
the wrapped forward, each parameter is used through an identity op, :data:`SYNC`, placed in front of it.
Backward adds up every use of the parameter into the gradient of that op (the walk in topological order
finishes a gradient before passing it on), then runs its vjp, which all-reduces the gradient (one
``all_reduce(op="mean")``) before it reaches ``.grad``. The all-reduce of one layer runs while backward goes
on with the layers below, as PyTorch's and OneFlow's buckets do, one parameter at a time.

As in OneFlow, ``DistributedDataParallel(module)`` returns ``module`` itself, ready to train: its attributes,
``parameters()`` and ``state_dict()`` are as before. Every process must use the same parameters in every
step (the all-reduces must match); the run's guard stops it with an error otherwise, rather than hang.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .. import mode
from ..distributed import comm
from ..distributed.interpreter import GlobalInterpreter
from ..dynamic.tensor import Tensor, apply
from ..ops._op import Op
from .module import Module


class _AverageOverProcesses(Op):
    """The gradients' all-reduce: forward averages an array over the processes; so does its vjp (the
    average is linear and the same on every process: its adjoint is itself)."""

    name = "all_reduce_mean"

    def forward(self, xp: Any, a: Any) -> Any:
        return xp.asarray(comm.all_reduce(a, op="mean"))

    def vjp(self, grad: Any, inputs: tuple, output: Any) -> tuple:
        return (apply(self, grad),)


class _SyncGradient(Op):
    """Identity on a parameter; its vjp averages the parameter's whole gradient over the processes."""

    name = "ddp_sync_gradient"
    may_alias_input = True

    def forward(self, xp: Any, a: Any) -> Any:
        return a

    def vjp(self, grad: Any, inputs: tuple, output: Any) -> tuple:
        return (apply(AVERAGE, grad),)


AVERAGE, SYNC = _AverageOverProcesses(), _SyncGradient()


def DistributedDataParallel(module: Module, *, broadcast_buffers: bool = True) -> Module:
    """Make ``module`` train the same on every process (see the module docstring). Returns ``module``."""
    if not isinstance(module, Module):
        raise TypeError(f"DistributedDataParallel wraps an nn.Module, got {type(module).__name__}")
    if module.__dict__.get("_ddp_forward") is not None:
        return module  # already wrapped
    states = list(module.parameters()) + (list(module.buffers()) if broadcast_buffers else [])
    if comm.world_size() > 1:
        for t in states:  # every process starts from rank 0's values
            mode.call_with_grad_mode(False, t.copy_, Tensor.wrap(t.device.xp.asarray(comm.broadcast(t.array, 0)),
                                                                 t.device))
    forward = module.forward

    def synced_forward(*args: Any, **kwargs: Any) -> Any:
        if not mode.grad_enabled or comm.world_size() == 1:
            return forward(*args, **kwargs)
        if mode.tracer is not None and not isinstance(mode.tracer, GlobalInterpreter):
            raise NotImplementedError("DistributedDataParallel trains in Eager mode; inside nn.Graph.build() toynet "
                                      "has no distributed training yet (OneFlow's graphs use SBP for it)")
        with _synced_parameters(module):
            return forward(*args, **kwargs)

    synced_forward.__doc__ = forward.__doc__
    object.__setattr__(module, "_ddp_forward", forward)
    object.__setattr__(module, "forward", synced_forward)
    return module


@contextlib.contextmanager
def _synced_parameters(module: Module) -> Iterator[None]:
    """While the forward runs, each parameter that requires grad is seen through :data:`SYNC`."""
    views: dict[int, Tensor] = {}
    replaced: list[tuple[dict, str, Any]] = []
    for m in module.modules():
        params = m.__dict__["_parameters"]
        for name, p in params.items():
            if p is not None and p.requires_grad:
                if id(p) not in views:        # a parameter shared by two modules: one op, one all-reduce
                    views[id(p)] = apply(SYNC, p)
                replaced.append((params, name, p))
                params[name] = views[id(p)]
    try:
        yield
    finally:
        for params, name, p in replaced:
            params[name] = p
