"""glibc allocator tuning for the benchmarks: keep freed large blocks in the heap between steps.

This lives beside the benchmarks, not in toynet: it changes how the whole process allocates memory,
which a library should not do behind its user's back, and only the benchmarks ask for it
(``--tune-allocator``) to show what page faults on fresh temporaries cost.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: glibc's mallopt() parameter numbers (malloc.h): M_TRIM_THRESHOLD and M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def tune_host_allocator(keep_bytes: int = 1 << 30) -> bool:
    """Ask glibc's malloc to keep freed large blocks for reuse instead of returning them to the OS.

    Why: a training step allocates many megabyte-sized temporaries (im2col matrices, activations,
    gradients) and frees them a moment later. By default glibc serves each block above a threshold
    (128 KiB, raised dynamically up to 32 MiB) with its own ``mmap`` and unmaps it on ``free``, and
    trims the heap top when more than ``M_TRIM_THRESHOLD`` is free; the next step's allocation then
    gets fresh pages from the kernel, and touching each 4 KiB page costs a page fault plus zeroing.
    Setting both thresholds explicitly (which also switches off the dynamic adjustment) makes such
    blocks come from the heap, and keeps up to ``keep_bytes`` of freed memory there for the next step.
    The process keeps its peak memory instead of giving it back between steps.

    Works only with glibc on Linux (found through ``ctypes``); elsewhere it does nothing. Returns True
    when both settings were accepted. ``M_MMAP_THRESHOLD`` is capped by glibc at 32 MiB on 64-bit
    systems, so blocks larger than that are still mapped per allocation.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    largest_mmap_threshold = 32 << 20  # HEAP_MAX / 2 on 64-bit glibc; larger values are refused
    mmap_ok = mallopt(_M_MMAP_THRESHOLD, min(keep_bytes, largest_mmap_threshold)) == 1
    trim_ok = mallopt(_M_TRIM_THRESHOLD, keep_bytes) == 1
    return mmap_ok and trim_ok
