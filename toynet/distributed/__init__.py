"""toynet.distributed: several processes training one model, as OneFlow's distributed pages teach it.

Read it in this order:

1. :mod:`~toynet.distributed.world`: how the processes of a run find each other (MPI, through mpi4py and the
   MPICH wheel), and :mod:`~toynet.distributed.launch`, ``python -m toynet.distributed.launch --nproc_per_node 2
   train.py``; :mod:`~toynet.distributed.guard`: why a rank that fails stops the others instead of leaving them
   waiting.
2. :mod:`~toynet.distributed.comm`: the collectives on arrays: ``all_reduce``, ``all_gather``,
   ``reduce_scatter``, ``all_to_all``, ``broadcast``, ``barrier``.
3. :mod:`~toynet.distributed.placement` and :mod:`~toynet.distributed.sbp`: where a *global tensor* lives and
   how its value is laid out (split, broadcast, partial sum); :mod:`~toynet.distributed.boxing`: turning one
   layout into another, by :mod:`~toynet.distributed.boxing_1d` (one collective, or a local step) and
   :mod:`~toynet.distributed.boxing_nd` (2-D SBP on a grid of processes), and moving a value between
   placements.
4. :mod:`~toynet.distributed.global_tensor`, :mod:`~toynet.distributed.sbp_rules`,
   :mod:`~toynet.distributed.interpreter`: ops on global tensors, each op with an SBP signature beside its
   forward and vjp, and autograd through it all.
5. :mod:`~toynet.distributed.graph_lowering`: ``nn.Graph`` on global tensors, the same signatures and boxing
   chosen ahead of time; moves between pipeline stages' placements, ZeRO's sharded optimizer slots.
6. Where a model meets them: :func:`toynet.nn.parallel.DistributedDataParallel`, data parallelism with local
   tensors and one all-reduce of each gradient; ``module.to_global(placement, sbp)``
   (:mod:`toynet.nn.module_global`), global parameters; :mod:`toynet.utils.global_view`, ``to_global`` and
   ``to_local`` of whole state dicts, to save and load a model in parts.

toynet imports and works without MPI: one process is a run of size one, where every collective is a copy.
``toynet.env.get_rank()`` and friends say which process this is.
"""

from ..dynamic import creation
from . import comm, env, interpreter, sbp  # noqa: F401  (interpreter: hands itself over to global_tensor)
from .comm import (  # noqa: F401
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    local_rank,
    rank,
    reduce_scatter,
    world_size,
)
from .global_tensor import GlobalTensor, from_logical  # noqa: F401
from .placement import placement  # noqa: F401

creation._make_global = from_logical  # placement=/sbp= on toynet.randn, zeros, tensor...
