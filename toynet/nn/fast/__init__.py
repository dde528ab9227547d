"""The fast path of ``toynet.nn``: skip this folder on a first reading.

* :mod:`.functional`: ``linear`` and ``mse_loss`` as one fused op each (Eager mode pays per op);
* :mod:`.guard`: a plan's guard generated as one boolean expression, with stamps for its hot path;
* :mod:`.repeat_call`: ``graph(x, y)`` again with the very same tensors, as one generated function.

Each registers what it replaces with :func:`toynet.mode.fast_replacement`; ``TOYNET_FAST=1`` (or
``toynet.set_fast_path(True)``) swaps them in.
"""

from . import functional  # noqa: F401
from . import guard, repeat_call  # noqa: E402,F401
