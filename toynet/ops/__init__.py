"""Every op toynet knows, each defined once (forward, vjp, shape rule) and registered in :data:`OPS`.

Importing this package registers them all. Both designs use this one table: Eager ``Tensor`` calls
``op.forward`` at once; Graph mode records ``op`` in a ``Node`` and calls it from a compiled plan.
"""

# Importing each module registers its ops. The elementwise themes come in this order so that OPS
# lists them as it always has: arithmetic, maths, piecewise, comparison, conversion.
from . import conv  # noqa: F401
from . import arithmetic, maths, piecewise, comparison, conversion  # noqa: F401
from . import loss, norm, pool, random, reduce, reduce_more, shape, select  # noqa: F401
from . import trigonometry, rounding  # noqa: F401  (later additions go last: OPS keeps its order)
from . import cumulative  # noqa: F401  (ONNX's CumSum)
from . import fast  # noqa: F401  (the fast path's ops: fused ones, and the convolutions only its passes write)
from . import instance_norm, padding, upsample  # noqa: F401  (the style-transfer network's ops)
from ._op import OPS, Op, ShapeError, register  # noqa: F401
from . import embedding, gather, gelu, layer_norm  # noqa: F401  (the transformer's ops)
