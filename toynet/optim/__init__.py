"""Optimizers and learning-rate schedulers: ``toynet.optim.SGD``, ``toynet.optim.Adam``, ``toynet.optim.AdamW``,
``toynet.optim.lr_scheduler.StepLR``... Each optimizer's maths is one pure ``update`` rule that Eager mode
runs step by step and Graph mode traces into the training graph."""

from . import lr_scheduler  # noqa: F401
from .adam import Adam  # noqa: F401
from .adamw import AdamW  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .sgd import SGD  # noqa: F401
from . import fast  # noqa: E402,F401  (the fast path's replacements, swapped in by TOYNET_FAST=1)
