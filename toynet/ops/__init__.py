"""Every op toynet knows, each defined once (forward, vjp, shape rule) and registered in :data:`OPS`.

Importing this package registers them all. Both designs use this one table: Eager ``Tensor`` calls
``op.forward`` at once; Graph mode records ``op`` in a ``Node`` and calls it from a compiled plan.
"""

from ._op import OPS, Op, ShapeError, register  # noqa: F401
from . import elementwise, reduce, shape, linalg, loss, conv, pool  # noqa: F401  (registers the ops)
from . import norm, random  # noqa: F401,E402  (batch norm, dropout)
