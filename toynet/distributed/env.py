"""``toynet.env``: which process this is, as OneFlow's ``oneflow.env`` says it.

``toynet.env.get_rank()``, ``get_world_size()`` and ``get_local_rank()`` read the environment the launcher
(or you, by hand) set: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (or mpiexec's own). They connect nothing,
so they are cheap and work before any collective; in a single process they are 0, 1 and 0.
"""

from __future__ import annotations

from .placement import placement
from .world import describe


def get_rank() -> int:
    """This process's number in the run, 0..get_world_size()-1."""
    return describe().rank


def get_world_size() -> int:
    """How many processes the run has."""
    return describe().size


def get_local_rank() -> int:
    """This process's number among those on its machine (the GPU it would use)."""
    return describe().local_rank


def all_device_placement(device_type: str = "cpu") -> placement:
    """The placement of every process of the run: ``toynet.placement(device_type, ranks=[0, ..., N-1])``."""
    return placement.all(device_type)
