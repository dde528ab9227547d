"""Reductions (sum, mean, var, max, argmax) and the normalisations built on them (softmax).

A reduction's vjp spreads the output gradient back over the reduced dimensions: reshape it to the
"keepdim" shape, then broadcast it to the input's shape.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, full_reduction, ones_name, register, require_float, shape_of


def reduced_shape(shape: tuple, dims: tuple, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def spread(grad: Any, shape: tuple, dims: tuple, keepdim: bool) -> Any:
    """Broadcast the gradient of a reduction back to the input's ``shape``."""
    if not keepdim:
        grad = grad.reshape(reduced_shape(shape, dims, keepdim=True))
    return grad.expand(*shape)


def count(shape: tuple, dims: tuple) -> int:
    n = 1
    for d in dims:
        n *= shape[d]
    return n


class Reduction(Op):
    def infer(self, a, dim=(), keepdim=False, **attrs):
        shape = shape_of(a)
        for d in dim:
            if not 0 <= d < max(len(shape), 1):
                raise ShapeError(f"{self.name}: dim {d} is out of range for shape {shape}")
        return reduced_shape(shape, dim, keepdim), self.out_dtype(a)

    def out_dtype(self, a):
        return a.dtype


@register
class Sum(Reduction):
    """Sum over ``dim``; every input element gets the output's gradient."""

    name = "sum"
    supports_out = True

    def forward(self, xp, a, dim=(), keepdim=False, out=None):
        # Integers and bools sum to int64, as out_dtype says (NumPy would sum uint8 to uint64).
        dtype = None if backend.dtype_of(a).is_floating_point else backend.int64.array_dtype
        return full_reduction(xp, xp.sum(a, axis=dim, keepdims=keepdim, out=out, dtype=dtype))

    def out_dtype(self, a):
        return a.dtype if a.dtype.is_floating_point else backend.int64

    def vjp(self, grad, inputs, output, dim=(), keepdim=False):
        return (spread(grad, inputs[0].shape, dim, keepdim),)


@register
class Mean(Reduction):
    """Mean over ``dim``; every input element gets 1/n of the output's gradient."""

    name = "mean"
    supports_out = True

    def forward(self, xp, a, dim=(), keepdim=False, out=None):
        return full_reduction(xp, xp.mean(a, axis=dim, keepdims=keepdim, out=out))

    def infer(self, a, dim=(), keepdim=False):
        require_float(self.name, a)
        return super().infer(a, dim=dim, keepdim=keepdim)

    def vjp(self, grad, inputs, output, dim=(), keepdim=False):
        shape = inputs[0].shape
        return (spread(grad * (1.0 / count(shape, dim)), shape, dim, keepdim),)


@register
class Var(Reduction):
    """Variance over ``dim`` (``unbiased`` divides by n-1); d/da = 2 (a - mean) / (n - ddof)."""

    name = "var"

    def forward(self, xp, a, dim=(), keepdim=False, unbiased=True):
        return full_reduction(xp, xp.var(a, axis=dim, keepdims=keepdim, ddof=1 if unbiased else 0))

    def infer(self, a, dim=(), keepdim=False, unbiased=True):
        require_float(self.name, a)
        return super().infer(a, dim=dim, keepdim=keepdim)

    def vjp(self, grad, inputs, output, dim=(), keepdim=False, unbiased=True):
        a = inputs[0]
        n = count(a.shape, dim) - (1 if unbiased else 0)
        centered = a - a.mean(dim, keepdim=True)
        return (spread(grad, a.shape, dim, keepdim) * centered * (2.0 / n),)


@register
class Amax(Reduction):
    """Largest element over ``dim``; the gradient goes to the maximal elements (split evenly on ties)."""

    name = "amax"
    supports_out = True
    saves_output = True

    def forward(self, xp, a, dim=(), keepdim=False, out=None):
        return full_reduction(xp, xp.amax(a, axis=dim, keepdims=keepdim, out=out))

    def vjp(self, grad, inputs, output, dim=(), keepdim=False):
        a = inputs[0]
        is_max = a == spread(output, a.shape, dim, keepdim)
        ties = is_max.sum(dim, keepdim=True).to(grad.dtype)
        return (spread(grad, a.shape, dim, keepdim) * is_max / ties,)


@register
class Argmax(Op):
    """Index of the largest element along ``dim`` (int64, no gradient)."""

    name = "argmax"

    def forward(self, xp, a, dim=0, keepdim=False):
        result = full_reduction(xp, xp.argmax(a, axis=dim))
        return xp.expand_dims(result, dim) if keepdim else result

    def infer(self, a, dim=0, keepdim=False):
        return reduced_shape(shape_of(a), (dim,), keepdim), backend.int64

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


class _BoolReduction(Op):
    def infer(self, a, **attrs):
        return (), backend.bool_

    def vjp(self, grad, inputs, output, **attrs):
        return (None,)


@register
class Any_(_BoolReduction):
    """True if any element is nonzero."""

    name = "any"

    def forward(self, xp, a):
        return full_reduction(xp, xp.any(a))


@register
class All(_BoolReduction):
    """True if every element is nonzero."""

    name = "all"

    def forward(self, xp, a):
        return full_reduction(xp, xp.all(a))


@register
class SumSquares(Op):
    """Sum of the squares of all elements (the squared L2 norm), one pass; d/da = 2 a g."""

    name = "sum_squares"

    def forward(self, xp, a):
        flat = a.reshape(-1)
        return full_reduction(xp, xp.dot(flat, flat))

    def infer(self, a):
        require_float(self.name, a)
        return (), a.dtype

    def vjp(self, grad, inputs, output):
        return (inputs[0] * (grad * 2.0),)

    def emit(self, args, inputs, out=None):
        flat = args[0] if len(shape_of(inputs[0])) == 1 else f"{args[0]}.reshape(-1)"
        return f"xp.dot({flat}, {flat})"


@register
class SumTo(Op):
    """Sum ``a`` down to ``shape``: the inverse of broadcasting, and so the vjp of every broadcast.

    Leading dimensions that broadcasting added are summed away; dimensions of size 1 in ``shape``
    are summed with keepdim.
    """

    name = "sum_to"
    supports_out = True
    may_alias_input = True  # with nothing to sum and no out=, it returns its input

    def forward(self, xp, a, shape=(), out=None):
        lead = a.ndim - len(shape)
        if out is None and lead > 0 and shape and a.shape[lead:] == shape:
            # Only leading dimensions to sum (a bias gradient): the sum has the shape asked for as it is, and
            # is a fresh array (a full sum to () would be a NumPy scalar, hence `shape` not empty). The array's
            # own method: xp.sum adds a layer of Python, which costs as much as summing 2000 numbers.
            return a.sum(axis=tuple(range(lead)))
        axes = _summed_axes(a.shape, shape)
        if not axes:
            if out is None:
                return a.reshape(shape)
            out[...] = a.reshape(shape)
            return out
        if out is None:
            out = xp.empty(shape, dtype=a.dtype)  # a fresh array of its own, not a view of the sum
        kept = tuple(1 if i in axes else d for i, d in enumerate(a.shape))
        a.sum(axis=axes, keepdims=True, out=out.reshape(kept))
        return out

    def infer(self, a, shape=()):
        src = shape_of(a)
        lead = len(src) - len(shape)
        if lead < 0 or any(d not in (1, s) for d, s in zip(shape, src[lead:])):
            raise ShapeError(f"sum_to: cannot sum shape {src} down to {shape}")
        return tuple(shape), a.dtype

    def vjp(self, grad, inputs, output, shape=()):
        return (grad.expand(*inputs[0].shape),)

    def emit(self, args, inputs, out=None, shape=()):
        src = shape_of(inputs[0])
        axes = _summed_axes(src, shape)
        if not axes or out is None:
            return None  # a reshape or copy, or no buffer to sum into: forward does those
        if axes == tuple(range(len(src) - len(shape))):
            # Only leading dimensions (a bias gradient): the sum has the output's shape as it is.
            return f"{args[0]}.sum(axis={axes!r}, out={out})"
        # Summed dimensions kept as 1s: write through a view of the buffer with that shape (made once,
        # when compiling; None for a state's array, which only the call brings), then view it back.
        kept = out.reshaped(reduced_shape(src, axes, keepdim=True))
        if kept is None:
            return None
        return f"{args[0]}.sum(axis={axes!r}, keepdims=True, out={kept}).reshape({tuple(shape)!r})"

    def kernels(self, args, inputs, out=None, shape=()):
        """NumPy's reduction, or ("blas") a matrix product with a vector of ones: when the summed axes are
        the leading (or trailing) ones, ``a`` seen as an (R, K) matrix sums to ``ones(R) @ a``, which BLAS
        runs several times faster (a bias gradient, BatchNorm's sums in NHWC)."""
        default = self.emit(args, inputs, out, shape=shape)
        blas = blas_sum(args[0], inputs[0], _summed_axes(shape_of(inputs[0]), shape), tuple(shape), out)
        return {"reduce": default, "blas": blas} if default is not None and blas is not None else {}


def blas_sum(arg: str, a: Any, axes: tuple, shape: tuple, out: Any = None) -> str | None:
    """Source summing ``a`` (named ``arg``) over ``axes`` into ``shape`` as one BLAS matrix-vector product
    with a vector of ones, or None where that does not apply: the axes are neither the leading nor the
    trailing ones, the dtype is not float32/float64, or ``out`` cannot be seen as a vector in advance."""
    src = shape_of(a)
    dtype = getattr(a.dtype, "name", "")
    if not axes or dtype not in ("float32", "float64"):
        return None
    summed = 1
    for axis in axes:
        summed *= src[axis]
    kept = 1
    for d in shape:
        kept *= d
    if summed * kept == 0:
        return None
    ones = ones_name(summed, dtype)
    if axes == tuple(range(len(axes))):          # leading axes: ones(R) @ a(R, K)
        product = [ones, _as_matrix(arg, src, (summed, kept))]
    elif axes == tuple(range(len(src) - len(axes), len(src))):   # trailing: a(K, R) @ ones(R)
        product = [_as_matrix(arg, src, (kept, summed)), ones]
    else:
        return None
    target = None
    if out is not None:
        target = str(out) if tuple(shape) == (kept,) else out.reshaped((kept,))
        if target is None:
            return None
    code = f"xp.dot({', '.join(product)}" + (f", out={target})" if target else ")")
    return code if tuple(shape) == (kept,) else f"{code}.reshape({tuple(shape)!r})"


def _as_matrix(arg: str, shape: tuple, matrix: tuple) -> str:
    return arg if tuple(shape) == matrix else f"{arg}.reshape({matrix!r})"


def _summed_axes(src: tuple, shape: tuple) -> tuple:
    """The axes of ``src`` that summing down to ``shape`` adds up: the leading ones broadcasting added,
    and those that are 1 in ``shape`` but not in ``src``."""
    lead = len(src) - len(shape)
    return tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and src[lead + i] != 1)


@register
class Softmax(Op):
    """``exp(a) / sum(exp(a))`` along ``dim``, shifted by the max so exp never overflows;
    vjp: s * (g - sum(g * s))."""

    name = "softmax"
    saves_output = True

    def forward(self, xp, a, dim=-1):
        shifted = a - xp.max(a, axis=dim, keepdims=True)
        e = xp.exp(shifted, out=shifted)
        e /= xp.sum(e, axis=dim, keepdims=True)
        return e

    def infer(self, a, dim=-1):
        require_float(self.name, a)
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, dim=-1):
        return (output * (grad - (grad * output).sum(dim, keepdim=True)),)


@register
class LogSoftmax(Op):
    """``a - log(sum(exp(a)))`` along ``dim``, computed stably; vjp: g - softmax(a) * sum(g)."""

    name = "log_softmax"
    saves_output = True

    def forward(self, xp, a, dim=-1):
        shifted = a - xp.max(a, axis=dim, keepdims=True)
        log_total = xp.log(xp.sum(xp.exp(shifted), axis=dim, keepdims=True))
        shifted -= log_total
        return shifted

    def infer(self, a, dim=-1):
        require_float(self.name, a)
        return shape_of(a), a.dtype

    def vjp(self, grad, inputs, output, dim=-1):
        return (grad - output.exp() * grad.sum(dim, keepdim=True),)
