"""How tensors print: values like PyTorch/OneFlow (``tensor([[-0.3298, ...]], dtype=toynet.float32)``)
and, for lazy tensors and nn.Graph printouts, meta only (``tensor(..., is_lazy='True', size=(2, 3), ...)``).
"""

from __future__ import annotations

from typing import Any

from .. import backend

host = backend.host  # printing works on host copies of the values (only backend imports NumPy)


def format_array(array: Any, indent: int) -> str:
    """Print a host array the way PyTorch and OneFlow do: 4 decimals (scientific notation when the
    magnitudes differ widely), whole numbers as ``1.``, ``, `` separators, summarised beyond 1000
    elements, continuation lines indented by ``indent`` spaces."""
    floatmode = "fixed"
    if array.dtype.kind == "f":
        finite = host.abs(array[host.isfinite(array)]).astype(host.float64)
        nonzero = finite[finite != 0]
        if host.all(finite == host.round(finite)) and (
                nonzero.size == 0 or (nonzero.max() < 1e8 and nonzero.max() / nonzero.min() <= 1e3)):
            floatmode = "maxprec"  # whole numbers, no scientific notation: print 1. rather than 1.0000
    return host.array2string(array, precision=4, floatmode=floatmode, separator=", ", prefix=" " * indent,
                             threshold=1000, edgeitems=3, max_line_width=80)


def _suffixes(t: Any, lazy_meta: bool, leaf_grad_fn: str | None = None) -> list[str]:
    parts = []
    if getattr(t, "_placement", None) is not None:   # a global tensor: where its parts live, and how
        parts += [f"placement={t._placement!r}", f"sbp={t.sbp!r}"]
    elif t.device.type != "cpu":
        parts.append(f"device='{t.device}'")
    if lazy_meta:
        if t.is_lazy:
            parts.append("is_lazy='True'")
        parts.append(f"size={tuple(t.shape)}")
    parts.append(f"dtype={t.dtype!r}")
    if lazy_meta and t.is_lazy:
        return parts  # a lazy tensor's autograd record is an implementation detail of tracing
    if t.grad_fn is not None:
        parts.append(f"grad_fn={t.grad_fn!r}")
    elif t.requires_grad and leaf_grad_fn:
        parts.append(f"grad_fn=<{leaf_grad_fn}>")
    elif t.requires_grad:
        parts.append("requires_grad=True")
    return parts


def _join(head: str, parts: list[str], linewidth: int | None) -> str:
    """Join ``head`` and suffixes with ", ", wrapping to a new line indented by 7 spaces (as OneFlow
    does) when a line would pass ``linewidth``."""
    text = head
    line_len = len(head)
    for part in parts:
        if linewidth is not None and line_len + len(part) + 2 > linewidth:
            text += ",\n" + " " * 7 + part
            line_len = 7 + len(part)
        else:
            text += ", " + part
            line_len += len(part) + 2
    return text + ")"


def meta_repr(t: Any, linewidth: int | None = 80) -> str:
    """``tensor(..., is_lazy='True', size=(64, 3, 32, 32), dtype=toynet.float32)``: what nn.Graph prints."""
    return _join("tensor(...", _suffixes(t, lazy_meta=True), linewidth)


def tensor_repr(t: Any, leaf_grad_fn: str | None = None) -> str:
    """``tensor([...], dtype=toynet.float32, ...)``. ``leaf_grad_fn`` names what a leaf that requires grad
    shows instead of ``requires_grad=True`` (a Parameter: ``grad_fn=<accumulate_grad>``, as OneFlow
    prints the node that adds each backward's gradient into ``.grad``)."""
    if t.is_lazy:
        return meta_repr(t, linewidth=None)
    values = t.numpy()
    body = format_array(values, indent=len("tensor("))
    parts = _suffixes(t, lazy_meta=False, leaf_grad_fn=leaf_grad_fn)
    if values.size == 0 and values.ndim != 1:   # (as OneFlow: tensor([], dtype=...) for an empty vector)
        parts.insert(0, f"size={tuple(t.shape)}")
    return "tensor(" + body + ", " + ", ".join(parts) + ")"
