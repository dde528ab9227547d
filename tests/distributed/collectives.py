"""Every collective of toynet.distributed.comm, run by tests/test_distributed.py in several processes.

    python -m toynet.distributed.launch --nproc_per_node 3 tests/distributed/collectives.py OUT

Each rank calls what cases.COLLECTIVES says and writes its results to OUT/rank<r>.json; the test compares
them with one process's NumPy. Also: what a shape mismatch says, all_gather_object, and flow.env.
"""

import sys

import cases
import numpy as np

import toynet as flow
from toynet.distributed import comm

r, n = comm.rank(), comm.world_size()
results = {name: call(comm, r, n) for name, (call, _) in cases.COLLECTIVES.items()}
try:
    comm.all_reduce(np.zeros(r + 1))   # every rank raises the same error: caught, the run goes on
except RuntimeError as error:
    results["mismatch"] = str(error)
comm.barrier()
results["objects"] = comm.all_gather_object({"rank": r})
results["env"] = [flow.env.get_rank(), flow.env.get_world_size(), flow.env.get_local_rank()]
cases.write(sys.argv[1], r, results)
