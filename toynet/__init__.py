"""toynet: a small deep-learning framework for learning how frameworks work inside.

``import toynet as flow`` gives a OneFlow/PyTorch-style API with two designs side by side:
Eager mode (:class:`Tensor`, define-by-run) and Graph mode (``flow.nn.Graph``, define-and-run).
"""

import sys

from . import backend
from .backend import (  # noqa: F401
    Device as device,
    DType as dtype,
    bool_ as bool,  # noqa: A001
    float16, float32, float64, int8, int32, int64, uint8,
    manual_seed,
)
from .mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .mode import fast_replacements, is_fast_path, set_fast_path  # noqa: F401  (TOYNET_FAST)
from .dynamic.tensor import Size, Tensor  # noqa: F401
from .dynamic import tensor_data, tensor_methods  # noqa: F401,E402  (attach Tensor's op methods)
from .dynamic.tensor_maths import (  # noqa: F401  (x.sin() and toynet.sin(x)...)
    acos, acosh, arccos, arccosh, arcsin, arcsinh, arctan, arctanh, asin, asinh, atan, atanh, ceil, cos, cosh, erf,
    erfc, expm1, floor, log1p, log2, log10, reciprocal, round, sign, sin, sinh, square, tan, trunc,
)
from .dynamic.creation import (  # noqa: F401
    arange, eye, from_numpy, full, full_like, is_tensor, linspace, ones, ones_like, rand, randint, randn, tensor,
    zeros, zeros_like,
)
from .dynamic.functional import (  # noqa: F401
    abs, add, argmax, broadcast_to, cat, clamp, clip, concat, div, exp, flatten, log, log_softmax, matmul,
    max, maximum, mean, min, minimum, mul, neg, permute, pow, relu, reshape, rsqrt, sigmoid, softmax, sqrt,
    squeeze, stack, sub, sum, tanh, transpose, unsqueeze, var, where,
    bmm, chunk, gather, masked_fill, multinomial, split, topk, tril, triu,
)
from .dynamic import autograd  # noqa: F401,E402

half, float, double, long = float16, float32, float64, int64  # noqa: A001


class cuda:  # noqa: N801  (a namespace, as flow.cuda / torch.cuda)
    """``toynet.cuda.is_available()``: is there a GPU toynet can use (CuPy installed, a GPU present)?"""

    is_available = staticmethod(backend.cuda_is_available)


__version__ = "0.1.0"

from . import distributed  # noqa: E402,F401  (global tensors, collectives; MPI only when processes talk)
from .distributed import env, placement, sbp  # noqa: E402,F401
from . import nn  # noqa: E402,F401
from . import optim, utils  # noqa: E402,F401
from .dynamic import amp  # noqa: E402,F401
from .serialization import load, save  # noqa: E402,F401
from . import onnx  # noqa: E402,F401  (needs the onnx package only when used)
from . import viz  # noqa: E402,F401  (last: it registers notebook display on the classes above)

# `toynet.autograd` and `toynet.amp` are public namespaces (as in PyTorch and OneFlow) whose modules live with
# the dynamic design: `import toynet.autograd` and `from toynet.amp import GradScaler` find them there.
sys.modules[__name__ + ".autograd"] = autograd
sys.modules[__name__ + ".amp"] = amp
