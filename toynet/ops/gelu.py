"""GELU, the transformer's activation: ``gelu(x) = x * Phi(x)``, with ``Phi`` the standard normal's CDF.

``approximate="none"`` is the exact function, ``Phi(x) = (1 + erf(x / sqrt(2))) / 2``; ``"tanh"`` is the
approximation of the original paper (and GPT-2), ``Phi(x) ~ (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2``.

NumPy has no erf, and :class:`~toynet.ops.maths.Erf` calls Python's ``math.erf`` element by element: exact, but
a microsecond an element, most of a training step for a small GPT. Here ``Phi`` takes array operations only,
with polynomials fitted (once, when first needed) to ``math.erfc``:

* **float32** (and float16, computed in float32): the tanh form made exact, ``Phi(x) = (1 + tanh(x h(x^2))) / 2``
  with ``h`` a polynomial of degree 6 fitted to ``atanh(erf(x / sqrt(2))) / x`` on ``|x| <= 5.5`` (beyond, ``Phi``
  is 0 or 1 in float32). The fit weighs each point by how much an error there moves ``Phi``, and ends within
  1e-7 of ``Phi`` everywhere, the size of float32's rounding: about 20 array operations, one of them a tanh.
* **float64**: the complementary error function of ``z = |x| / sqrt(2)``, ``erfc(z) = t exp(-z^2) Q(t)`` with
  ``t = 1 / (1 + 0.4 z)``, where ``Q`` is smooth and bounded for every ``z >= 0``: a polynomial of degree 20 in
  ``t`` (interpolated at Chebyshev points) gives ``erfc`` to about 1e-14, relative, so ``Phi`` keeps its
  precision in both tails (``c = erfc(z) / 2`` is ``Phi`` for ``x < 0``, ``1 - c`` for ``x >= 0``).

The derivative is ``gelu'(x) = Phi(x) + x phi(x)``, ``phi(x) = exp(-x^2/2) / sqrt(2 pi)`` the normal density;
``Phi(x)`` is then read from the output ``y``, as ``y / x``, so the backward pass fits nothing again.
Each op runs over cache-sized chunks of the data, every step on a chunk while it is in the CPU cache;
``gelu_grad`` is the vjp's op, used when the gradient is not itself differentiated. Each form is an op of its
own (``gelu``, ``gelu_tanh``; ``gelu_grad``, ``gelu_tanh_grad``), so that none needs an attribute.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Any

from .. import backend, mode
from ._op import OPS, Elementwise, ShapeError, apply, broadcast_shapes, register

#: Chunks of this many bytes are processed one after the other, every step while the chunk is in cache.
CHUNK_BYTES = 1 << 18
#: float32's tanh form: the polynomial's degree, and where Phi is 0 or 1 to float32 (1 - Phi(5.5) = 2e-8).
TANH_DEGREE, TANH_RANGE = 6, 5.5
#: float64's erfc form: t = 1 / (1 + ERFC_P z) keeps the fitted polynomial's coefficients small (|c_k| < 4).
ERFC_DEGREE, ERFC_P = 20, 0.4
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


@functools.cache
def tanh_form_fit(degree: int = TANH_DEGREE, limit: float = TANH_RANGE, points: int = 300) -> tuple[float, ...]:
    """Coefficients (constant first) of ``h`` with ``Phi(x) = (1 + tanh(x h(x^2))) / 2`` on ``|x| <= limit``.

    Least squares, weighted by ``d Phi / d h`` (an error in ``h`` matters where ``Phi`` is not yet 0 or 1), then
    reweighted a few times towards the worst points (Lawson's iteration), so the largest error shrinks."""
    host = backend.host
    x = limit * (1 - host.cos(host.linspace(0, math.pi / 2, points + 1)[1:]))  # denser near 0
    phi = host.array([math.erfc(-v / math.sqrt(2)) / 2 for v in x])
    g = host.arctanh(2 * phi - 1)
    weight = (1 - host.tanh(g) ** 2) * x / 2
    powers = host.vander((x / limit) ** 2, degree + 1, increasing=True)   # (scaled, for a well-posed system)
    lawson = host.ones_like(x)
    for _ in range(20):
        w = weight * host.sqrt(lawson)
        coefficients = host.linalg.lstsq(powers * w[:, None], g / x * w, rcond=None)[0]
        error = abs(powers @ coefficients - g / x) * weight
        lawson *= error / error.max() + 1e-12
        lawson /= lawson.sum()
    return tuple(float(c) / limit ** (2 * k) for k, c in enumerate(coefficients))


def _erfcx(z: float) -> float:
    """``exp(z^2) erfc(z)`` in double precision; an asymptotic series where ``erfc`` would underflow."""
    if z < 10.0:
        return math.erfc(z) * math.exp(z * z)
    total, term = 1.0, 1.0
    for n in range(1, 30):
        term *= -(2 * n - 1) / (2 * z * z)
        total += term
    return total / (z * math.sqrt(math.pi))


@functools.cache
def erfc_fit(degree: int = ERFC_DEGREE) -> tuple[float, ...]:
    """Coefficients (constant first) of ``Q(t) / 2``, with ``erfc(z) / 2 = t exp(-z^2) Q(t) / 2``: Chebyshev
    interpolation of ``Q`` for ``t`` in [0, 1] (at ``t = 0``, ``z`` infinite, ``Q`` tends to ``P / sqrt(pi)``)."""
    host = backend.host

    def q(ts: Any) -> Any:
        return host.array([ERFC_P / math.sqrt(math.pi) if t <= 0 else _erfcx((1 / t - 1) / ERFC_P) / t for t in ts])
    chebyshev = host.polynomial.Chebyshev.interpolate(q, degree, domain=[0.0, 1.0])
    power = chebyshev.convert(kind=host.polynomial.Polynomial, domain=[-1.0, 1.0], window=[-1.0, 1.0])
    return tuple(float(c) / 2 for c in power.coef)


def _horner(xp: Any, coefficients: tuple, t: Any) -> Any:
    """``sum(c_k t^k)`` (a new array)."""
    result = xp.multiply(t, coefficients[-1])
    for c in coefficients[-2:0:-1]:
        result += c
        result *= t
    result += coefficients[0]
    return result


def _cdf(xp: Any, x: Any) -> Any:
    """``Phi(x)`` (a new array, of ``x``'s dtype: float32 or float64)."""
    if x.dtype.itemsize == 4:
        clipped = xp.clip(x, -TANH_RANGE, TANH_RANGE)
        inner = _horner(xp, tanh_form_fit(), xp.multiply(clipped, clipped))
        inner *= clipped
        xp.tanh(inner, out=inner)
        inner += 1.0
        inner *= 0.5
        return inner
    ax = xp.abs(x)
    t = xp.multiply(ax, ERFC_P / math.sqrt(2.0))
    t += 1.0
    xp.reciprocal(t, out=t)
    half_erfc = _horner(xp, erfc_fit(), t)
    half_erfc *= t
    half_erfc *= _exp_half_square(xp, ax)
    cdf = xp.multiply(half_erfc, -2.0, out=ax)     # c where x < 0, else 1 - c: c + (x >= 0) (1 - 2c)
    cdf += 1.0
    cdf *= x >= 0
    cdf += half_erfc
    return cdf


def _exp_half_square(xp: Any, x: Any) -> Any:
    """``exp(-x^2 / 2)`` (a new array)."""
    e = xp.multiply(x, x)
    e *= -0.5
    return xp.exp(e, out=e)


def _tanh_inner(xp: Any, x: Any) -> Any:
    """``sqrt(2/pi) (x + 0.044715 x^3)`` (a new array)."""
    inner = xp.multiply(x, x)
    inner *= _TANH_CUBIC
    inner += 1.0
    inner *= x
    inner *= _SQRT_2_OVER_PI
    return inner


def _gelu(xp: Any, x: Any, out: Any, approximate: str) -> Any:
    """``x * Phi(x)`` for one chunk, into ``out`` (which may be ``x`` itself: it is written last)."""
    if approximate == "tanh":
        cdf = xp.tanh(_tanh_inner(xp, x))
        cdf += 1.0
        cdf *= 0.5
    else:
        cdf = _cdf(xp, x)
    return xp.multiply(cdf, x, out=out)


def _gelu_derivative(xp: Any, x: Any, y: Any, approximate: str) -> Any:
    """``d gelu / dx`` for one chunk (a new array), from ``x`` and the forward's output ``y = x Phi(x)``: then
    ``Phi(x) = y / x`` (1/2 at 0) costs a division, not the polynomial again."""
    errstate = getattr(xp, "errstate", None)   # NumPy warns of 0 / 0, which copyto replaces just below
    with errstate(invalid="ignore", divide="ignore") if errstate else contextlib.nullcontext():
        cdf = xp.divide(y, x)
    xp.copyto(cdf, 0.5, where=x == 0)
    if approximate == "tanh":
        # tanh's derivative 1 - T^2 is 4 Phi (1 - Phi), so: Phi + 2 x Phi (1 - Phi) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
        slope = xp.multiply(x, x)
        slope *= 3 * _TANH_CUBIC
        slope += 1.0
        slope *= x
        slope *= 2 * _SQRT_2_OVER_PI
        rest = xp.subtract(1.0, cdf)
        rest *= cdf
        slope *= rest
    else:
        slope = _exp_half_square(xp, x)
        slope *= xp.multiply(x, 1.0 / math.sqrt(2.0 * math.pi))     # x phi(x), phi the normal density
    cdf += slope
    return cdf


def _by_chunks(xp: Any, kernel: Callable, shape: tuple, dtype: Any, out: Any, arrays: tuple,
               factor: Any = None) -> Any:
    """Run ``kernel(xp, *chunks of arrays, chunk of out)`` (``factor is None``: it writes its result there) or
    ``kernel(xp, *chunks of arrays)`` times the same chunk of ``factor``, a chunk at a time, into ``out``.

    Each chunk is read before its part of ``out`` is written, so ``out`` may be one of the inputs itself
    (Graph mode's plans write elementwise ops in place). float16 is computed in float32."""
    if out is None:
        out = xp.empty(shape, dtype=dtype)
    compute = "float64" if arrays[0].dtype.itemsize == 8 else "float32"
    if xp.__name__ != "numpy" or not out.flags.c_contiguous or any(a.shape != shape for a in arrays) or \
            factor is not None and factor.shape != shape:
        # a GPU runs one kernel per operation whatever the size; broadcasting needs whole arrays
        parts = [(arrays, out, factor)]
    else:
        flat = [a.reshape(-1) for a in arrays]
        flat_out = out.reshape(-1)
        flat_factor = None if factor is None else factor.reshape(-1)
        step = max(1, CHUNK_BYTES // max(arrays[0].itemsize, 4))
        parts = [([f[s] for f in flat], flat_out[s], None if factor is None else flat_factor[s])
                 for s in (slice(start, start + step) for start in range(0, flat_out.size, step))]
    for array_parts, out_part, factor_part in parts:
        array_parts = [a.astype(compute, copy=False) for a in array_parts]
        if factor is None:
            result = kernel(xp, *array_parts, out_part if out_part.dtype == compute else None)
            if result is not out_part:
                out_part[...] = result
        else:
            xp.multiply(kernel(xp, *array_parts), factor_part, out=out_part)
    return out


def _check(op: str, x: Any) -> None:
    """Eager mode runs a shape rule only after a failure, so ``forward`` checks too (on arrays)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and not getattr(dtype, "is_floating_point", getattr(dtype, "kind", "f") == "f"):
        raise ShapeError(f"{op}: needs a floating-point tensor, got {dtype}; convert it with .to(toynet.float32)")


class _Gelu(Elementwise):
    """``x * Phi(x)`` (see the module docstring); d/dx = Phi(x) + x phi(x), as ``gelu_grad`` computes it
    (from the output too: ``Phi(x)`` is ``output / x``)."""

    approximate = "none"
    saves_output = True

    def forward(self, xp, x, out=None):
        _check(self.name, x)
        kernel = functools.partial(_gelu, approximate=self.approximate)
        return _by_chunks(xp, kernel, x.shape, x.dtype, out, (x,))

    def infer(self, x):
        _check(self.name, x)
        return super().infer(x)

    def vjp(self, grad, inputs, output, **attrs):
        x = inputs[0]
        if mode.grad_enabled:   # create_graph=True: the gradient is differentiated again, so use plain ops
            return (grad * gelu_derivative(x, self.approximate),)
        return (apply(GRADS[self.name], grad, x, output),)


class _GeluGrad(Elementwise):
    """Backward helper: ``grad * gelu'(x)`` in one sweep, from ``grad``, ``x`` and gelu's output ``y`` (the
    gradient of ``gelu`` when it is not itself differentiated; :func:`gelu_derivative` writes the same with
    plain ops for ``create_graph=True``)."""

    approximate = "none"
    nondifferentiable = (0, 1, 2)

    def forward(self, xp, grad, x, y, out=None):
        _check(self.name, x)
        shape = tuple(broadcast_shapes(self.name, grad.shape, x.shape, y.shape))
        x, y = (a if a.shape == shape else xp.broadcast_to(a, shape) for a in (x, y))
        kernel = functools.partial(_gelu_derivative, approximate=self.approximate)
        return _by_chunks(xp, kernel, shape, xp.result_type(grad, x), out, (x, y), grad)

    def infer(self, grad, x, y):
        _check(self.name, x)
        return super().infer(grad, x, y)

    def vjp(self, grad, inputs, output, **attrs):
        raise NotImplementedError(f"{self.name} is used only when the gradient is not itself differentiated; "
                                  "gelu's vjp uses plain ops under create_graph=True")


@register
class Gelu(_Gelu):
    """The exact GELU, ``x * (1 + erf(x / sqrt(2))) / 2``."""

    name = "gelu"


@register
class GeluTanh(_Gelu):
    """GELU with GPT-2's tanh form of ``Phi``: ``x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2``."""

    name = "gelu_tanh"
    approximate = "tanh"


@register
class GeluGrad(_GeluGrad):
    name = "gelu_grad"


@register
class GeluTanhGrad(_GeluGrad):
    name = "gelu_tanh_grad"
    approximate = "tanh"


#: The op of each form of GELU (``F.gelu``'s ``approximate``), and the op of each one's gradient.
FORMS = {"none": "gelu", "tanh": "gelu_tanh"}
GRADS = {"gelu": OPS["gelu_grad"], "gelu_tanh": OPS["gelu_tanh_grad"]}


def gelu_derivative(x: Any, approximate: str = "none") -> Any:
    """``gelu'(x)`` written with differentiable toynet ops (for second derivatives)."""
    if approximate == "tanh":
        t = ((x + x * x * x * _TANH_CUBIC) * _SQRT_2_OVER_PI).tanh()
        slope = (x * x * (3 * _TANH_CUBIC) + 1.0) * _SQRT_2_OVER_PI
        return (t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * slope
    cdf = ((x * (1 / math.sqrt(2.0))).erf() + 1.0) * 0.5
    return cdf + x * (x * x * -0.5).exp() * (1 / math.sqrt(2.0 * math.pi))
