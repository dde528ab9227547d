"""Elementwise maths and activations as tensor methods (``x.exp()``, ``x.relu()``, ``x.clamp(0, 1)``), the
comparisons, the operators by name (``x.add(y)``), the reductions beyond sum and mean, and the less common maths
also as functions (``toynet.sin(x)``; the common ones are in :mod:`toynet.dynamic.functional`).

Each one only calls the op of the same name in the table (:mod:`toynet.ops.maths`, :mod:`toynet.ops.piecewise`,
:mod:`toynet.ops.trigonometry`...), where its forward and gradient rules are. The methods are attached to
``Tensor`` as :mod:`toynet.dynamic.tensor_methods` attaches its own.
"""

from __future__ import annotations

import operator
from typing import Any

from .. import backend
from ..ops import OPS, ShapeError
from ..ops import _op as op_base
from .tensor import Tensor, apply
from .tensor_methods import _reduced_dims, attach


class TensorMaths:
    """Attached to :class:`~toynet.dynamic.tensor.Tensor` below; never instantiated."""

    def sin(self) -> Tensor:
        return apply(OPS["sin"], self)

    def cos(self) -> Tensor:
        return apply(OPS["cos"], self)

    def tan(self) -> Tensor:
        return apply(OPS["tan"], self)

    def asin(self) -> Tensor:
        return apply(OPS["asin"], self)

    def acos(self) -> Tensor:
        return apply(OPS["acos"], self)

    def atan(self) -> Tensor:
        return apply(OPS["atan"], self)

    def sinh(self) -> Tensor:
        return apply(OPS["sinh"], self)

    def cosh(self) -> Tensor:
        return apply(OPS["cosh"], self)

    def asinh(self) -> Tensor:
        return apply(OPS["asinh"], self)

    def acosh(self) -> Tensor:
        return apply(OPS["acosh"], self)

    def atanh(self) -> Tensor:
        return apply(OPS["atanh"], self)

    def erf(self) -> Tensor:
        return apply(OPS["erf"], self)

    def erfc(self) -> Tensor:
        return apply(OPS["erfc"], self)

    def expm1(self) -> Tensor:
        return apply(OPS["expm1"], self)

    def log1p(self) -> Tensor:
        return apply(OPS["log1p"], self)

    def log2(self) -> Tensor:
        return apply(OPS["log2"], self)

    def log10(self) -> Tensor:
        return apply(OPS["log10"], self)

    def reciprocal(self) -> Tensor:
        return apply(OPS["reciprocal"], self)

    def floor(self) -> Tensor:
        return apply(OPS["floor"], self)

    def ceil(self) -> Tensor:
        return apply(OPS["ceil"], self)

    def round(self) -> Tensor:
        return apply(OPS["round"], self)

    def trunc(self) -> Tensor:
        return apply(OPS["trunc"], self)

    # PyTorch's longer names of the inverse functions, which OneFlow accepts too.
    arcsin, arccos, arctan = asin, acos, atan
    arcsinh, arccosh, arctanh = asinh, acosh, atanh

    def exp(self) -> "Tensor":
        return apply(OPS["exp"], self)

    def log(self) -> "Tensor":
        return apply(OPS["log"], self)

    def sqrt(self) -> "Tensor":
        return apply(OPS["sqrt"], self)

    def rsqrt(self) -> "Tensor":
        return apply(OPS["rsqrt"], self)

    def tanh(self) -> "Tensor":
        return apply(OPS["tanh"], self)

    def sigmoid(self) -> "Tensor":
        return apply(OPS["sigmoid"], self)

    def relu(self) -> "Tensor":
        return apply(OPS["relu"], self)

    def relu6(self) -> "Tensor":
        return apply(OPS["relu6"], self)

    def abs(self) -> "Tensor":
        return apply(OPS["abs"], self)

    def sign(self) -> "Tensor":
        return apply(OPS["sign"], self)

    def clamp(self, min: Any = None, max: Any = None) -> "Tensor":
        if min is None and max is None:
            raise ValueError("clamp needs at least one of min and max")
        return apply(OPS["clamp"], self, min=min, max=max)


    clip = clamp

    def maximum(self, other: Any) -> "Tensor":
        return apply(OPS["maximum"], self, other)

    def minimum(self, other: Any) -> "Tensor":
        return apply(OPS["minimum"], self, other)

    def where(self, condition: "Tensor", other: Any) -> "Tensor":
        return apply(OPS["where"], condition, self, other)


    # ---------------------------------------------------------- comparisons (bool results: no gradient)

    def __lt__(self, other: Any) -> "Tensor":
        return apply(OPS["lt"], self, other)

    def __le__(self, other: Any) -> "Tensor":
        return apply(OPS["le"], self, other)

    def __gt__(self, other: Any) -> "Tensor":
        return apply(OPS["gt"], self, other)

    def __ge__(self, other: Any) -> "Tensor":
        return apply(OPS["ge"], self, other)

    def __eq__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return apply(OPS["eq"], self, other)

    def __ne__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return apply(OPS["ne"], self, other)

    def __and__(self, other: Any) -> "Tensor":
        return apply(OPS["logical_and"], self, other)

    def __or__(self, other: Any) -> "Tensor":
        return apply(OPS["logical_or"], self, other)

    def __invert__(self) -> "Tensor":
        return apply(OPS["logical_not"], self)

    # ---------------------------------------------------- the operators by name (x.add(y) is x + y)

    def add(self, other: Any) -> "Tensor":
        return self + other

    def sub(self, other: Any) -> "Tensor":
        return self - other

    def mul(self, other: Any) -> "Tensor":
        return self * other

    def div(self, other: Any) -> "Tensor":
        return self / other

    def neg(self) -> "Tensor":
        return -self

    def pow(self, exponent: Any) -> "Tensor":
        return self ** exponent

    def matmul(self, other: Any) -> "Tensor":
        return self @ other

    def mm(self, other: Any) -> "Tensor":
        return self @ other

    # -------------------------------------------------------- reductions beyond sum and mean, softmax

    def var(self, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> "Tensor":
        op_base.require_float("var", self)
        return apply(OPS["var"], self, dim=_reduced_dims("var", dim, self.ndim),
                     unbiased=unbiased, keepdim=keepdim)

    def std(self, dim: Any = None, unbiased: bool = True, keepdim: bool = False) -> "Tensor":
        return self.var(dim, unbiased, keepdim).sqrt()

    def max(self, dim: Any = None, keepdim: bool = False) -> Any:
        """Without ``dim``: the largest element. With ``dim``: ``(values, indices)`` as in PyTorch."""
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        if dim is None:
            return apply(OPS["amax"], self, dim=tuple(range(self.ndim)), keepdim=False)
        d = op_base.normalize_dim("max", dim, self.ndim)
        return _ValuesIndices(apply(OPS["amax"], self, dim=(d,), keepdim=keepdim), self.argmax(d, keepdim))

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:
            return -((-self).max())
        values, indices = (-self).max(dim, keepdim)
        return _ValuesIndices(-values, indices)

    def amax(self, dim: Any = None, keepdim: bool = False) -> "Tensor":
        return apply(OPS["amax"], self, dim=_reduced_dims("amax", dim, self.ndim), keepdim=keepdim)

    def argmax(self, dim: Any = None, keepdim: bool = False) -> "Tensor":
        if dim is None:
            return apply(OPS["argmax"], self.reshape(-1), dim=0, keepdim=False)
        return apply(OPS["argmax"], self, dim=op_base.normalize_dim("argmax", dim, self.ndim), keepdim=keepdim)

    def softmax(self, dim: int = -1) -> "Tensor":
        return apply(OPS["softmax"], self, dim=op_base.normalize_dim("softmax", dim, self.ndim))

    def log_softmax(self, dim: int = -1) -> "Tensor":
        return apply(OPS["log_softmax"], self, dim=op_base.normalize_dim("log_softmax", dim, self.ndim))

    def any(self) -> "Tensor":
        return apply(OPS["any"], self)

    def all(self) -> "Tensor":
        return apply(OPS["all"], self)

    # ------------------------------------------------ a transformer's pieces: masks, picking, sampling

    def masked_fill(self, mask: "Tensor", value: Any) -> "Tensor":
        """``value`` where ``mask`` is True, this tensor's elements elsewhere (``where(mask, value, self)``);
        ``mask`` is bool and broadcasts to this tensor's shape, which the result keeps, with its dtype."""
        if not isinstance(mask, Tensor) or mask.dtype is not backend.bool_:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise TypeError(f"masked_fill: the mask must be a bool tensor, got {got}; make one with a comparison "
                            "(x > 0) or .bool()")
        if isinstance(value, Tensor) and value.ndim:
            raise ValueError(f"masked_fill: the value must be a number or a 0-d tensor, got shape "
                             f"{tuple(value.shape)}; use toynet.where(mask, values, x) for a tensor of values")
        shape = op_base.broadcast_shapes("masked_fill", tuple(mask.shape), tuple(self.shape))
        if shape != tuple(self.shape):
            raise ShapeError(f"masked_fill: a mask of shape {tuple(mask.shape)} does not broadcast to the tensor's "
                             f"shape {tuple(self.shape)}; the mask may only have the tensor's sizes or 1s")
        filled = apply(OPS["where"], mask, value, self)
        return filled if filled.dtype is self.dtype else filled.to(self.dtype)

    def tril(self, diagonal: int = 0) -> "Tensor":
        """The lower triangle of each matrix (last two dimensions), on and below diagonal ``diagonal``."""
        return apply(OPS["tril"], self, operator.index(diagonal))

    def triu(self, diagonal: int = 0) -> "Tensor":
        """The upper triangle of each matrix (last two dimensions), on and above diagonal ``diagonal``."""
        return apply(OPS["triu"], self, operator.index(diagonal))

    def gather(self, dim: int, index: "Tensor") -> "Tensor":
        """``out[i][j] = self[index[i][j]][j]`` for ``dim=0`` (``self[i][index[i][j]]`` for ``dim=1``...)."""
        return apply(OPS["gather"], self, index, dim=op_base.normalize_dim("gather", dim, self.ndim))

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
        """``(values, indices)`` of the ``k`` largest elements along ``dim`` (smallest with ``largest=False``),
        largest first; the values are differentiable. (They always come sorted, as ``sorted=True`` asks.)"""
        if self.ndim == 0:
            values, indices = self.reshape(1).topk(k, 0, largest, sorted)
            return _ValuesIndices(values.reshape(()), indices.reshape(()))
        d = op_base.normalize_dim("topk", dim, self.ndim)
        indices = apply(OPS["topk_indices"], self, operator.index(k), bool(largest), dim=d)
        return _ValuesIndices(apply(OPS["gather"], self, indices, dim=d), indices)

    def multinomial(self, num_samples: int, replacement: bool = False) -> "Tensor":
        """Category indices drawn from each row of this tensor of probabilities (``(C,)`` or ``(N, C)``,
        non-negative weights); toynet's random generator draws them (``toynet.manual_seed``)."""
        return apply(OPS["multinomial"], self, operator.index(num_samples), bool(replacement))


attach(TensorMaths, Tensor)


class _ValuesIndices(tuple):
    """``(values, indices)`` with names, as ``tensor.max(dim)`` and ``tensor.topk(k)`` return in PyTorch."""

    def __new__(cls, values: Tensor, indices: Tensor) -> "_ValuesIndices":
        return super().__new__(cls, (values, indices))

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def _function(name: str) -> Any:
    """``toynet.<name>(x)``: the method of the same name, called on ``x`` (a tensor or anything
    ``toynet.tensor`` accepts, as in OneFlow)."""
    method = getattr(Tensor, name)

    def function(x: Any) -> Tensor:
        return method(x if isinstance(x, Tensor) else Tensor.from_data(x))

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``toynet.{name}(x)`` is ``x.{name}()``: see :class:`TensorMaths`."
    return function


(sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, erf, erfc, expm1, log1p, log2, log10,
 reciprocal, square, floor, ceil, round, trunc, sign) = (_function(n) for n in (  # noqa: A001
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc",
    "expm1", "log1p", "log2", "log10", "reciprocal", "square", "floor", "ceil", "round", "trunc", "sign"))
arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh
