"""Neural-network building blocks: ``Module``, ``Parameter``, layers, losses, initialisation, gradient
clipping (``nn.utils``), and ``nn.Graph`` (Graph mode)."""

from .module import Module  # noqa: F401
from .parameter import Parameter  # noqa: F401
from . import functional, init  # noqa: F401
from .modules import *  # noqa: F401,F403
from .graph import Graph  # noqa: F401,E402
from . import utils  # noqa: F401,E402
from . import module_global, parallel  # noqa: F401,E402  (module.to_global, DistributedDataParallel)
from . import fast  # noqa: E402,F401  (the fast path's replacements, swapped in by TOYNET_FAST=1)
