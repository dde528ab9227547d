"""What Eager mode says when an op fails: the array module's error turned into one that names the op and
the shapes (the op's own shape rule explains it), and the message for tensors on different devices."""

from __future__ import annotations

from typing import Any, Sequence

from ._op import Op, ShapeError


def explain_failure(op: Op, inputs: Sequence, attrs: dict, error: Exception) -> Exception:
    """Turn an array-module error into one that names the op and the shapes.

    Eager mode lets the array module find shape problems (running the shape rule on every op would
    cost time on every call); when it fails, the op's shape rule runs to say what was wrong.
    """
    if isinstance(error, ShapeError):
        return error
    try:
        op.infer(*inputs, **attrs)
    except ShapeError as explained:
        return explained
    except Exception:
        pass
    shapes = ", ".join(str(tuple(x.shape)) if _is_tensor(x) else repr(x) for x in inputs)
    return type(error)(f"{op.name} failed on inputs {shapes}: {error}") if isinstance(
        error, (ValueError, TypeError, IndexError)) else error


def device_mismatch(op: Op, inputs: Sequence) -> str:
    """The message of an op given tensors on different devices."""
    devices = [str(x.device) for x in inputs if _is_tensor(x)]
    return (f"{op.name}: expected all tensors to be on the same device, but found {' and '.join(devices)}; "
            f"move them with tensor.to(device) first")


def _is_tensor(x: Any) -> bool:  # (this module sits below Tensor: it never names the class)
    return hasattr(x, "grad_fn") and hasattr(x, "device")
