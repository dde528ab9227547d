"""Matrix multiplication, batched and broadcasting like NumPy's ``matmul``."""

from __future__ import annotations

from typing import Any

from .. import backend
from ._op import Op, ShapeError, apply, broadcast_shapes, call_source, register, shape_of


@register
class Matmul(Op):
    """``a @ b``. For matrices, d/da = g @ b^T and d/db = a^T @ g; leading (batch) dimensions
    broadcast, so their gradients are summed back to each input's own shape. 1-d inputs are treated
    as a row (``a``) or a column (``b``) vector, as NumPy does."""

    name = "matmul"
    supports_out = True

    def forward(self, xp, a, b, out=None):
        return xp.matmul(a, b, out=out)

    def infer(self, a, b, **attrs):
        sa, sb = shape_of(a), shape_of(b)
        if not sa or not sb:
            raise ShapeError(f"matmul: both operands need at least one dimension, got shapes {sa} and {sb}")
        ka = sa[-1]
        kb = sb[-2] if len(sb) >= 2 else sb[0]
        if ka != kb:
            raise ShapeError(f"matmul: cannot multiply shapes {sa} and {sb}: the last dimension of the first "
                             f"({ka}) must equal the {'second-to-last' if len(sb) >= 2 else 'only'} dimension "
                             f"of the second ({kb})")
        batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
        rows = (sa[-2],) if len(sa) >= 2 else ()
        cols = (sb[-1],) if len(sb) >= 2 else ()
        return batch + rows + cols, backend.promote(a.dtype, b.dtype)

    def vjp(self, grad, inputs, output, **attrs):
        a, b = inputs
        # View vectors as matrices so one pair of formulas covers every case.
        a2 = a.unsqueeze(0) if a.ndim == 1 else a
        b2 = b.unsqueeze(-1) if b.ndim == 1 else b
        if a.ndim == 1 and b.ndim == 1:
            g2 = grad.reshape(1, 1)
        elif a.ndim == 1:
            g2 = grad.unsqueeze(-2)
        elif b.ndim == 1:
            g2 = grad.unsqueeze(-1)
        else:
            g2 = grad
        grad_a = grad_b = None
        if getattr(a, "requires_grad", False):
            grad_a = (g2 @ b2.transpose(-1, -2)).sum_to(a2.shape).reshape(a.shape)
        if getattr(b, "requires_grad", False):
            grad_b = (a2.transpose(-1, -2) @ g2).sum_to(b2.shape).reshape(b.shape)
        return grad_a, grad_b

    def emit(self, args, inputs, out=None):
        return call_source("xp.matmul", args, out)

    def kernels(self, args, inputs, out=None):
        """``matmul``, or ``dot`` for two matrices of one float dtype: the same BLAS product behind less
        of NumPy's dispatch, which counts for small matrices."""
        if not _dot_fits(inputs[0], inputs[1]):
            return {}
        return {"matmul": self.emit(args, inputs, out), "dot": call_source("xp.dot", args, out)}


@register
class Linear(Op):
    """``x @ weight^T + bias``, the fully connected layer as one op (PyTorch's ``addmm``).

    One op instead of transpose + matmul + add means fewer Python calls per step, which is what
    dominates small models in Eager mode. d/dx = g @ W, d/dW = g^T @ x (summed over leading
    dimensions), d/db = g summed over all but the last dimension.
    """

    name = "linear"
    supports_out = True

    def forward(self, xp, x, weight, bias=None, out=None):
        y = xp.matmul(x, weight.T, out=out)
        if bias is not None:
            y += bias
        return y

    def infer(self, x, weight, bias=None):
        sx, sw = shape_of(x), shape_of(weight)
        if len(sw) != 2 or not sx or sx[-1] != sw[1]:
            raise ShapeError(f"linear: input of shape {sx} does not fit weight of shape {sw}: the input's last "
                             f"dimension must equal in_features = {sw[1] if len(sw) == 2 else '?'}")
        if bias is not None and shape_of(bias) != (sw[0],):
            raise ShapeError(f"linear: bias of shape {shape_of(bias)} should have shape ({sw[0]},)")
        return sx[:-1] + (sw[0],), backend.promote(x.dtype, weight.dtype)

    def vjp(self, grad, inputs, output, **attrs):
        x, weight, bias = inputs if len(inputs) == 3 else (*inputs, None)
        grad_x = grad @ weight if getattr(x, "requires_grad", False) else None
        grad_w = grad_b = None
        if getattr(weight, "requires_grad", False):
            grad_w = apply(LinearGradWeight, grad, x)
        if getattr(bias, "requires_grad", False):
            grad_b = grad.sum_to(bias.shape)
        return grad_x, grad_w, grad_b

    def emit(self, args, inputs, out=None):
        product = call_source("xp.matmul", [args[0], f"{args[1]}.T"], out)
        if len(args) == 2:
            return product
        return call_source("xp.add", [product, args[2]], out) if out else f"{product} + {args[2]}"

    def kernels(self, args, inputs, out=None):
        """As ``emit``, with ``matmul`` or ``dot`` for the product (see ``Matmul.kernels``); with one output
        feature, also the bias added as a 0-d array: NumPy adds a scalar in its fast loop, but broadcasts a
        (1,) array element by element (a regression head, the poly fit's Linear(3, 1))."""
        if not _dot_fits(inputs[0], inputs[1]):
            return {}
        product = call_source("xp.dot", [args[0], f"{args[1]}.T"], out)
        if len(args) == 2:
            return {"matmul": self.emit(args, inputs, out), "dot": product}
        found = {"matmul": self.emit(args, inputs, out), "dot": _plus(product, args[2], out)}
        if shape_of(inputs[1])[0] == 1:
            found["dot, scalar bias"] = _plus(product, f"{args[2]}.reshape(())", out)
        return found


@register
class LinearGradWeight(Op):
    """The weight gradient of ``linear``: ``grad^T @ x`` summed over all leading dimensions, as one matrix
    product (one op instead of a transpose and a matmul: Eager mode pays per op).

    Its own vjp (for second derivatives): d/dgrad = x @ gw^T, d/dx = grad @ gw.
    """

    name = "linear_grad_weight"
    supports_out = True

    def forward(self, xp, grad, x, out=None):
        if grad.ndim != 2:  # fold leading (batch) dimensions into one
            grad, x = grad.reshape(-1, grad.shape[-1]), x.reshape(-1, x.shape[-1])
        return xp.matmul(grad.T, x, out=out)

    def infer(self, grad, x):
        sg, sx = shape_of(grad), shape_of(x)
        if not sg or sg[:-1] != sx[:-1]:
            raise ShapeError(f"linear_grad_weight: gradient of shape {sg} does not match input of shape {sx} "
                             "in the leading dimensions")
        return (sg[-1], sx[-1]), backend.promote(grad.dtype, x.dtype)

    def vjp(self, gw, inputs, output):
        grad, x = inputs
        return (x @ gw.t() if getattr(grad, "requires_grad", False) else None,
                grad @ gw if getattr(x, "requires_grad", False) else None)

    def emit(self, args, inputs, out=None):
        if len(shape_of(inputs[0])) != 2:
            return None  # leading dimensions to fold first: forward does that
        return call_source("xp.matmul", [f"{args[0]}.T", args[1]], out)

    def kernels(self, args, inputs, out=None):
        """As ``emit``, with ``matmul`` or ``dot`` for the product (see ``Matmul.kernels``)."""
        if not _dot_fits(inputs[0], inputs[1]):
            return {}
        return {"matmul": self.emit(args, inputs, out), "dot": call_source("xp.dot", [f"{args[0]}.T", args[1]], out)}


def _plus(product: str, bias: str, out: str | None) -> str:
    return call_source("xp.add", [product, bias], out) if out else f"{product} + {bias}"


def _dot_fits(a: Any, b: Any) -> bool:
    """``xp.dot`` computes what ``xp.matmul`` does: both are matrices of one float dtype (with
    ``out=``, ``dot`` takes no other)."""
    return (len(shape_of(a)) == 2 and len(shape_of(b)) == 2 and getattr(a, "dtype", None) is not None
            and a.dtype is getattr(b, "dtype", None) and getattr(a.dtype, "name", "") in ("float32", "float64"))
