"""The methods of :class:`~toynet.dynamic.tensor.Tensor` that only turn a call into an op.

``x + y``, ``x.exp()``, ``x.sum(1)``, ``x.reshape(2, -1)``, ``x[0]``: each of these reads the arguments
the way PyTorch does and calls :func:`~toynet.dynamic.tensor.apply` with one op of the table. They carry no
state and no logic of their own, so they live apart from the class, which stays short enough to read
in one sitting (``tensor.py``: what a tensor *is*; this module: what you can *do* with one). The
methods are written as an ordinary class body and attached to ``Tensor`` when toynet is imported, as
DeZero's ``setup_variable`` does.
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

from .. import backend
from ..backend import Device, DType
from ..ops import OPS
from ..ops import _op as op_base
from .tensor import Tensor, apply

_ADD, _SUB, _MUL, _DIV, _NEG, _POW, _MATMUL, _RESHAPE, _PERMUTE, _GETITEM = (
    OPS[n] for n in ("add", "sub", "mul", "div", "neg", "pow", "matmul", "reshape", "permute", "getitem"))


class TensorMethods:
    """Attached to :class:`~toynet.dynamic.tensor.Tensor` below; never instantiated."""

    # ----------------------------------------------------------------------------- devices

    def to(self, *args: Any, **kwargs: Any) -> "Tensor":
        """``t.to("cuda")``, ``t.to(toynet.float64)``, ``t.to(device, dtype)``, ``t.to(other_tensor)``."""
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("copy", None)
        if kwargs:
            raise TypeError(f"to() got unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, DType) or a in (float, int, bool) or (isinstance(a, str) and _is_dtype_name(a)):
                dtype = a
            else:
                device = a
        result = self
        if dtype is not None:
            dtype = backend.to_dtype(dtype)
            if dtype is not self.dtype:
                result = apply(OPS["cast"], result, dtype=dtype)
        if device is not None:
            device = backend.to_device_obj(device)
            if device != self.device:
                if result.node is not None:
                    raise RuntimeError(f"cannot move a lazy tensor to {device} inside nn.Graph.build(): a "
                                       f"graph runs on one device; move the inputs before calling the graph")
                result = apply(OPS["to_device"], result, device=device, source=self.device)
        return result

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, index: int = 0) -> "Tensor":
        return self.to(Device("cuda", index))

    def float(self) -> "Tensor":
        return self.to(backend.float32)

    def double(self) -> "Tensor":
        return self.to(backend.float64)

    def long(self) -> "Tensor":
        return self.to(backend.int64)

    def int(self) -> "Tensor":
        return self.to(backend.int32)

    def bool(self) -> "Tensor":
        return self.to(backend.bool_)

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def contiguous(self) -> "Tensor":
        return self

    def clone(self) -> "Tensor":
        return apply(OPS["identity"], self)

    # ------------------------------------------------------------------------- arithmetic

    def __add__(self, other: Any) -> "Tensor":
        return apply(_ADD, self, other)

    def __radd__(self, other: Any) -> "Tensor":
        return apply(_ADD, other, self)

    def __sub__(self, other: Any) -> "Tensor":
        return apply(_SUB, self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        return apply(_SUB, other, self)

    def __mul__(self, other: Any) -> "Tensor":
        return apply(_MUL, self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        return apply(_MUL, other, self)

    def __truediv__(self, other: Any) -> "Tensor":
        return apply(_DIV, self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return apply(_DIV, other, self)

    def __neg__(self) -> "Tensor":
        return apply(_NEG, self)

    def __pos__(self) -> "Tensor":
        return self

    def __pow__(self, exponent: Any) -> "Tensor":
        return apply(_POW, self, exponent)

    def __rpow__(self, base: Any) -> "Tensor":
        return apply(_POW, base, self)

    def __matmul__(self, other: Any) -> "Tensor":
        return apply(_MATMUL, self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        return apply(_MATMUL, other, self)

    def __abs__(self) -> "Tensor":
        return self.abs()

    # Comparisons give bool tensors (no gradient flows through them).
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

    # ------------------------------------------------------------------- elementwise maths

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

    # --------------------------------------------------------------------------- reductions

    def sum(self, dim: Any = None, keepdim: bool = False) -> "Tensor":
        return apply(OPS["sum"], self, dim=_reduced_dims("sum", dim, self.ndim), keepdim=keepdim)

    def mean(self, dim: Any = None, keepdim: bool = False) -> "Tensor":
        op_base.require_float("mean", self)  # NumPy would quietly give float64; Graph mode refuses
        return apply(OPS["mean"], self, dim=_reduced_dims("mean", dim, self.ndim), keepdim=keepdim)

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
        return _MinMax(apply(OPS["amax"], self, dim=(d,), keepdim=keepdim), self.argmax(d, keepdim))

    def min(self, dim: Any = None, keepdim: bool = False) -> Any:
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if dim is None:
            return -((-self).max())
        values, indices = (-self).max(dim, keepdim)
        return _MinMax(-values, indices)

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

    def sum_to(self, shape: Sequence[int]) -> "Tensor":
        """Sum over the dimensions that broadcasting added: the vjp of broadcasting to ``self.shape``."""
        shape = tuple(shape)
        if self.shape == shape:  # (a Size is a tuple)
            return self
        return apply(OPS["sum_to"], self, shape=shape)

    def retain_grad(self) -> None:
        """Keep this tensor's gradient in ``.grad`` after ``backward()`` although it is not a leaf (leaves
        that require grad keep theirs anyway). Backward hands the gradient of the op that made it over."""
        if self.is_lazy:
            raise RuntimeError("retain_grad() is for Eager mode; inside nn.Graph.build() return the tensor's "
                               "gradient from toynet.autograd.grad instead")
        if self.grad_fn is None:
            return
        owner = weakref.ref(self)  # the record must not keep its output alive

        def keep(grad: "Tensor") -> None:
            t = owner()
            if t is not None:  # a copy the tensor owns: users zero it in place
                t.grad = grad.detach().clone() if t.grad is None else t.grad + grad.detach()
        self.grad_fn.retains = keep

    def any(self) -> "Tensor":
        return apply(OPS["any"], self)

    def all(self) -> "Tensor":
        return apply(OPS["all"], self)


class _MinMax(tuple):
    """``(values, indices)`` with names, as ``tensor.max(dim)`` returns in PyTorch."""

    def __new__(cls, values: Tensor, indices: Tensor) -> "_MinMax":
        return super().__new__(cls, (values, indices))

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def _reduced_dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """The dimensions a reduction runs over; a 0-d tensor has none (``dim=0`` or ``-1`` means itself)."""
    dims = op_base.normalize_dims(op, dim, ndim)
    return () if ndim == 0 else dims


def _is_dtype_name(name: str) -> bool:
    try:
        backend.to_dtype(name)
    except TypeError:
        return False
    return True


def attach(methods: type, cls: type) -> None:
    """Copy the methods onto the class (``__hash__`` stays Tensor's own: a tensor is hashed by identity
    although ``==`` makes a bool tensor)."""
    for name, value in vars(methods).items():
        if name not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__hash__"):
            setattr(cls, name, value)


attach(TensorMethods, Tensor)
