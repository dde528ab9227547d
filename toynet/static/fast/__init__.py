"""The fast path of the static design: skip this folder on a first reading. :mod:`.compile` writes plans
with the tricks that save Python calls on small arrays (ufuncs called directly, one-line sources, chosen
kernels, typed literals, inlined fused kernels); the speed passes are in :mod:`toynet.static.passes.fast`.
:mod:`.shared_reports` keeps one graph for a pass that changed nothing, instead of a copy for its report."""

from . import compile, shared_reports  # noqa: F401
