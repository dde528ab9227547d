"""The fast path of the static design: skip this folder on a first reading. :mod:`.compile` writes plans
with the tricks that save Python calls on small arrays (ufuncs called directly, one-line sources, chosen
kernels, typed literals, inlined fused kernels); the speed passes are in :mod:`toynet.static.passes.fast`."""

from . import compile  # noqa: F401
