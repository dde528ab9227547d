"""toynet.distributed: several processes training one model, as OneFlow's distributed pages teach it.

Read it in this order:

1. :mod:`.world`: how the processes of a run find each other (MPI, through mpi4py and the MPICH wheel), and
   :mod:`.launch`, ``python -m toynet.distributed.launch --nproc_per_node 2 train.py``;
   :mod:`.guard`: why a rank that fails stops the others instead of leaving them waiting.
2. :mod:`.comm`: the collectives on arrays: ``all_reduce``, ``all_gather``, ``reduce_scatter``,
   ``all_to_all``, ``broadcast``, ``barrier``.
3. :mod:`.placement` and :mod:`.sbp`: where a *global tensor* lives and how its value is laid out (split,
   broadcast, partial sum); :mod:`.boxing`: turning one layout into another with one collective.
4. :mod:`.global_tensor`, :mod:`.sbp_rules`, :mod:`.interpreter`: ops on global tensors, each op with an
   SBP signature beside its forward and vjp, and autograd through it all.
5. ``toynet.nn.parallel.DistributedDataParallel``: data parallelism with local tensors and one all-reduce of
   each gradient.

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
