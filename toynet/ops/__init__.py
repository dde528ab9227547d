"""Every op toynet knows, each defined once (forward, vjp, shape rule) and registered in :data:`OPS`.

Importing this package registers them all. Both designs use this one table: Eager ``Tensor`` calls
``op.forward`` at once; Graph mode records ``op`` in a ``Node`` and calls it from a compiled plan.
"""

from . import conv, elementwise, linalg, loss, norm, pool, random, reduce, shape  # noqa: F401  (registers the ops)  # noqa: F401,E402  (batch norm, dropout)
from ._op import OPS, Op, ShapeError, register  # noqa: F401
