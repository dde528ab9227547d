"""A run where rank 1 goes wrong, for tests/test_distributed.py: the others must stop, never hang.

    python fail.py raise|kill|early
"""

import os
import signal
import sys

import numpy as np

from toynet.distributed import comm

how = sys.argv[1]
comm.all_reduce(np.ones(3))              # everybody is connected
if comm.rank() == 1:
    if how == "raise":
        raise ValueError("rank 1 cannot go on")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "early":
        sys.exit(0)                      # leaves before the all_reduce below: rank 0 would wait forever
comm.all_reduce(np.ones(3))
comm.barrier()
