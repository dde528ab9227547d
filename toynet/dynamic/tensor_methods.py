"""What you can do with a :class:`~toynet.dynamic.tensor.Tensor`: arithmetic, sums and means, and shapes.

``x + y``, ``x @ w``, ``x.sum(1)``, ``x.reshape(2, -1)``, ``x.t()``: each of these reads the arguments the
way PyTorch does and calls :func:`~toynet.dynamic.tensor.apply` with one op of the table. They carry no
state and no logic of their own, so they live apart from the class (``tensor.py``: what a tensor *is*;
this module: what you can *do* with one). The methods are written as an ordinary class body and attached
to ``Tensor`` when toynet is imported, as DeZero's ``setup_variable`` does. More of them:
:mod:`~toynet.dynamic.tensor_maths` (``x.exp()``, ``x > 0``, ``x.max(1)``...), :mod:`~toynet.dynamic.tensor_data`
(``x[i]``, ``x.add_(y)``, ``x.to(...)``).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Sequence

from .. import backend
from ..ops import OPS, ShapeError
from ..ops import _op as op_base
from ..ops._op import normalize_dim
from ..ops.shape import resolve_reshape, shape_arg
from .tensor import Tensor, apply

_ADD, _SUB, _MUL, _DIV, _NEG, _POW, _MATMUL, _RESHAPE, _PERMUTE, _GETITEM = (
    OPS[n] for n in ("add", "sub", "mul", "div", "neg", "pow", "matmul", "reshape", "permute", "getitem"))


class TensorMethods:
    """Attached to :class:`~toynet.dynamic.tensor.Tensor` below; never instantiated."""

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

    # --------------------------------------------------------------------------- reductions

    def sum(self, dim: Any = None, keepdim: bool = False) -> "Tensor":
        return apply(OPS["sum"], self, dim=_reduced_dims("sum", dim, self.ndim), keepdim=keepdim)

    def mean(self, dim: Any = None, keepdim: bool = False) -> "Tensor":
        op_base.require_float("mean", self)  # NumPy would quietly give float64; Graph mode refuses
        return apply(OPS["mean"], self, dim=_reduced_dims("mean", dim, self.ndim), keepdim=keepdim)

    def sum_to(self, shape: Sequence[int]) -> "Tensor":
        """Sum over the dimensions that broadcasting added: the vjp of broadcasting to ``self.shape``."""
        return self if self.shape == tuple(shape) else apply(OPS["sum_to"], self, shape=tuple(shape))

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

    def reshape(self, *shape: Any) -> "Tensor":
        """The same elements in another shape; one size may be -1, worked out from the others."""
        shape = shape_arg(shape)
        if -1 in shape:
            shape = resolve_reshape(tuple(self.shape), shape)
        return self if shape == self.shape else apply(_RESHAPE, self, shape=shape)

    view = reshape

    def view_as(self, other: "Tensor") -> "Tensor":
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        """Merge dimensions ``start_dim``..``end_dim`` into one."""
        shape = tuple(self.shape) or (1,)
        start, end = normalize_dim("flatten", start_dim, len(shape)), normalize_dim("flatten", end_dim, len(shape))
        if start > end:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        new = shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:]
        return self if new == self.shape else apply(_RESHAPE, self, shape=new)

    def unsqueeze(self, dim: int) -> "Tensor":
        shape = tuple(self.shape)
        d = normalize_dim("unsqueeze", dim, len(shape) + 1)
        return self.reshape(shape[:d] + (1,) + shape[d:])

    def squeeze(self, dim: Any = None) -> "Tensor":
        shape = tuple(self.shape)
        if dim is None:
            return self.reshape(tuple(s for s in shape if s != 1))
        d = normalize_dim("squeeze", dim, len(shape))
        return self if shape[d] != 1 else self.reshape(shape[:d] + shape[d + 1:])

    def permute(self, *dims: Any) -> "Tensor":
        """Reorder the dimensions: dimension ``i`` of the result is dimension ``dims[i]`` of this tensor."""
        # Not a permutation? The permute op's shape rule says so (Eager mode runs it when NumPy refuses).
        return apply(_PERMUTE, self, dims=tuple(d + self.ndim if d < 0 else d for d in shape_arg(dims)))

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        """Swap two dimensions."""
        a, b = normalize_dim("transpose", dim0, self.ndim), normalize_dim("transpose", dim1, self.ndim)
        dims = list(range(self.ndim))
        dims[a], dims[b] = b, a
        return self.permute(dims)

    def t(self) -> "Tensor":
        """The transpose of a matrix (a tensor of fewer than two dimensions is its own)."""
        return self if self.ndim < 2 else self.permute(1, 0)

    @property
    def T(self) -> "Tensor":
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> "Tensor":
        """The transpose of each matrix: the last two dimensions swapped."""
        return self.permute(*range(self.ndim - 2), -1, -2)

    def expand(self, *shape: Any) -> "Tensor":
        """Repeat along dimensions of size 1 (and new leading ones) without copying; -1 keeps a size."""
        shape, own = shape_arg(shape), tuple(self.shape)
        lead = len(shape) - len(own)
        if lead < 0:
            raise ShapeError(f"expand: cannot expand shape {own} to fewer dimensions {shape}")
        shape = tuple(own[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
        return self if shape == own else apply(OPS["broadcast_to"], self, shape=shape)

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(*other.shape)

    broadcast_to = expand

    def repeat(self, *sizes: Any) -> "Tensor":
        """Tile the tensor ``sizes[i]`` times along dimension ``i`` (built from reshape and expand)."""
        sizes = shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: got {len(sizes)} sizes for a tensor with {self.ndim} dimensions")
        t = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self.shape))
        interleaved, expanded, final = [], [], []
        for size, times in zip(t.shape, sizes):
            interleaved += [1, size]
            expanded += [times, size]
            final.append(size * times)
        return t.reshape(interleaved).expand(*expanded).reshape(final)

    def square(self) -> Tensor:
        return apply(OPS["square"], self)




def _reduced_dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """The dimensions a reduction runs over; a 0-d tensor has none (``dim=0`` or ``-1`` means itself)."""
    dims = op_base.normalize_dims(op, dim, ndim)  # (checks them: a 0-d tensor takes dim 0 and -1 too)
    return dims if ndim else ()


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
