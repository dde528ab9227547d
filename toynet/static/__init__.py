"""The static (define-and-run) design: a traced graph of Nodes, differentiated, optimised, compiled."""

from .ir import Graph, Node  # noqa: F401

from . import fast  # noqa: E402,F401  (the fast compiler, swapped in by TOYNET_FAST=1)
from .passes import fast as _fast_passes  # noqa: E402,F401  (the speed passes and the fast pipeline)
