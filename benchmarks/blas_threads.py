"""The thread count of NumPy's BLAS and PyTorch's OpenMP pool, set before either loads.

They read ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` once, when their thread
pools start, so a benchmark run as a script calls :func:`use_threads` before it imports NumPy or PyTorch.
One thread is the default: on a shared 2-core machine a multi-threaded BLAS spins and waits, and timings
swing by 10x.
"""

from __future__ import annotations

import os
import sys


def threads_from_argv(default: str = "1") -> str:
    """The N of ``--threads N`` or ``--threads=N`` on the command line (argparse, which reads the options
    properly, runs only after NumPy has loaded)."""
    for i, arg in enumerate(sys.argv):
        if arg.startswith("--threads"):
            return arg.split("=", 1)[1] if "=" in arg else sys.argv[i + 1]
    return default


def use_threads(threads: str) -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = threads
