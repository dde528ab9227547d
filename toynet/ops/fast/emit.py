"""The fast compiler's tables: the one-line source it writes for cheap ops, and the kernels ChooseKernels times.

The lesson compiler (:mod:`toynet.static.fast.compile`) writes every op as a call of its ``forward``. For ops
so cheap that the call itself (one more Python frame, the attributes bound by ``functools.partial``) costs
more than the work, which matters when arrays are small, the fast compiler
(:mod:`toynet.static.fast.compile`) writes instead

* :data:`UFUNCS`: the NumPy/CuPy ufunc an elementwise op is, called directly (``xp.add(a, b, out=buf)``);
* :data:`EMIT`: a rule ``emit(args, inputs, out=None, **attrs)`` giving one Python expression
  (``"v3.reshape((2000,))"``). ``args`` are the inputs' names in the generated code (or literals' source),
  ``inputs`` the inputs as the compiler knows them (nodes with ``shape`` and ``dtype``; numbers as they are),
  ``out`` the name of the array to write into or None (an :class:`~toynet.static.fast.compile.OutName`, whose
  ``reshaped(shape)`` names the same memory seen with another shape), and ``attrs`` the op's attributes,
  which go into the code through ``repr`` of toynet's own validated values (ints and tuples of them). A rule
  returns None where its expression does not apply: the plan then calls ``forward``, with the same result;
* :data:`KERNELS`: other ways to compute the same result, ``{kernel name: expression}`` with the ``emit``
  expression first (a BLAS product with a vector of ones instead of a NumPy reduction, say), for the
  compile-time kernel choice (:mod:`toynet.static.passes.fast.kernels`). Expressions may name vectors of
  ones (:func:`ones_name`), which :func:`bind_ones` makes once.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from .._op import shape_of
from ..reduce import reduced_shape, summed_axes

#: The ufunc of each elementwise op that is one (comparisons included).
UFUNCS: dict[str, str] = {
    "abs": "absolute", "sign": "sign", "add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
    "neg": "negative", "maximum": "maximum", "minimum": "minimum", "floor": "floor", "ceil": "ceil",
    "round": "rint", "trunc": "trunc", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin",
    "acos": "arccos", "atan": "arctan", "sinh": "sinh", "cosh": "cosh", "asinh": "arcsinh", "acosh": "arccosh",
    "atanh": "arctanh", "exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "expm1": "expm1",
    "log1p": "log1p", "log2": "log2", "log10": "log10", "reciprocal": "reciprocal", "square": "square",
    "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal", "ne": "not_equal",
    "logical_and": "logical_and", "logical_or": "logical_or",
}


def call_source(function: str, args: list[str], out: str | None = None) -> str:
    """Source of a call in generated code: ``function(a, b)``, or ``function(a, b, out=buffer)``."""
    return f"{function}({', '.join(args)}" + (f", out={out})" if out else ")")


# ------------------------------------------------------------------------------------------- emit rules


def _stacked_rows(inputs) -> bool:
    """A stack of rows times one matrix, which forward computes as one product (:mod:`.matmul`)."""
    return len(shape_of(inputs[0])) > 2 and len(shape_of(inputs[1])) == 2


def _matmul(args, inputs, out=None):
    return None if _stacked_rows(inputs) else call_source("xp.matmul", args, out)


def _reshape(args, inputs, out=None, shape=()):
    return f"{args[0]}.reshape({tuple(shape)!r})"


def _permute(args, inputs, out=None, dims=()):
    return f"{args[0]}.transpose({tuple(dims)!r})"


def _broadcast_to(args, inputs, out=None, shape=()):
    return f"xp.broadcast_to({args[0]}, {tuple(shape)!r})"


def _sum_to(args, inputs, out=None, shape=()):
    src = shape_of(inputs[0])
    axes = summed_axes(src, shape)
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


def _sum_squares(args, inputs, out=None):
    flat = args[0] if len(shape_of(inputs[0])) == 1 else f"{args[0]}.reshape(-1)"
    return f"xp.dot({flat}, {flat})"


def _linear(args, inputs, out=None):
    if _stacked_rows(inputs):
        return None
    product = call_source("xp.matmul", [args[0], f"{args[1]}.T"], out)
    return product if len(args) == 2 else _plus(product, args[2], out)


def _linear_grad_weight(args, inputs, out=None):
    if len(shape_of(inputs[0])) != 2:
        return None  # leading dimensions to fold first: forward does that
    return call_source("xp.matmul", [f"{args[0]}.T", args[1]], out)


EMIT: dict[str, Callable[..., str | None]] = {
    "matmul": _matmul, "reshape": _reshape, "permute": _permute, "broadcast_to": _broadcast_to,
    "sum_to": _sum_to, "sum_squares": _sum_squares, "linear": _linear, "linear_grad_weight": _linear_grad_weight,
}


# ------------------------------------------------------------------------------------ candidate kernels


def _matmul_kernels(args, inputs, out=None):
    """``matmul``, or ``dot`` for two matrices of one float dtype: the same BLAS product behind less of
    NumPy's dispatch, which counts for small matrices."""
    if not _dot_fits(inputs[0], inputs[1]):
        return {}
    return {"matmul": _matmul(args, inputs, out), "dot": call_source("xp.dot", args, out)}


def _linear_kernels(args, inputs, out=None):
    """As ``emit``, with ``matmul`` or ``dot`` for the product; with one output feature, also the bias added
    as a 0-d array: NumPy adds a scalar in its fast loop, but broadcasts a (1,) array element by element
    (a regression head, the poly fit's Linear(3, 1))."""
    if not _dot_fits(inputs[0], inputs[1]):
        return {}
    product = call_source("xp.dot", [args[0], f"{args[1]}.T"], out)
    if len(args) == 2:
        return {"matmul": _linear(args, inputs, out), "dot": product}
    found = {"matmul": _linear(args, inputs, out), "dot": _plus(product, args[2], out)}
    if shape_of(inputs[1])[0] == 1:
        found["dot, scalar bias"] = _plus(product, f"{args[2]}.reshape(())", out)
    return found


def _linear_grad_weight_kernels(args, inputs, out=None):
    if not _dot_fits(inputs[0], inputs[1]):
        return {}
    return {"matmul": _linear_grad_weight(args, inputs, out),
            "dot": call_source("xp.dot", [f"{args[0]}.T", args[1]], out)}


def _sum_to_kernels(args, inputs, out=None, shape=()):
    """NumPy's reduction, or ("blas") a matrix product with a vector of ones: when the summed axes are the
    leading (or trailing) ones, ``a`` seen as an (R, K) matrix sums to ``ones(R) @ a``, which BLAS runs
    several times faster (a bias gradient, BatchNorm's sums in NHWC)."""
    default = _sum_to(args, inputs, out, shape=shape)
    blas = blas_sum(args[0], inputs[0], summed_axes(shape_of(inputs[0]), shape), tuple(shape), out)
    return {"reduce": default, "blas": blas} if default is not None and blas is not None else {}


KERNELS: dict[str, Callable[..., dict[str, str]]] = {
    "matmul": _matmul_kernels, "linear": _linear_kernels, "linear_grad_weight": _linear_grad_weight_kernels,
    "sum_to": _sum_to_kernels,
}


def _plus(product: str, bias: str, out: str | None) -> str:
    return call_source("xp.add", [product, bias], out) if out else f"{product} + {bias}"


def _dot_fits(a: Any, b: Any) -> bool:
    """``xp.dot`` computes what ``xp.matmul`` does: both are matrices of one float dtype (with ``out=``,
    ``dot`` takes no other)."""
    return (len(shape_of(a)) == 2 and len(shape_of(b)) == 2 and getattr(a, "dtype", None) is not None
            and a.dtype is getattr(b, "dtype", None) and getattr(a.dtype, "name", "") in ("float32", "float64"))


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


# ----------------------------------------------------------------------------------- vectors of ones


def ones_name(n: int, dtype: str) -> str:
    """The name generated code gives a vector of ``n`` ones of ``dtype`` (``_ones_float32_2000``): a sum
    over axes is a matrix product with it, which BLAS runs several times faster than a NumPy reduction.
    :func:`bind_ones` puts the vectors a piece of code names into its namespace, once."""
    return f"_ones_{dtype}_{int(n)}"


_ONES_NAME = re.compile(r"\b_ones_(float32|float64)_(\d+)\b")


def bind_ones(code: str, namespace: dict, xp: Any) -> None:
    """Make every ``_ones_<dtype>_<n>`` that ``code`` (an op's generated expression, never a comment with a
    user's text in it) names, read-only on NumPy: nothing should write into a constant."""
    for match in _ONES_NAME.finditer(code):
        if match.group(0) not in namespace:
            ones = xp.ones(int(match.group(2)), dtype=match.group(1))
            if xp.__name__ == "numpy":  # (CuPy arrays have no read-only flag)
                ones.flags.writeable = False
            namespace[match.group(0)] = ones
