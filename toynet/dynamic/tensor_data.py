"""The methods of :class:`~toynet.dynamic.tensor.Tensor` that read, write or convert its data: ``x[i]``, the
writes ``x[i] = v``, ``copy_``, ``fill_``, ``add_``..., ``x.to(dtype or device)``, ``x.float()``..., and what
leaves toynet: ``x.numpy()``, ``x.item()``, ``float(x)``, ``repr(x)``, ``np.sin(x)``.

The writes follow PyTorch's rules. Each one is counted on the tensor's version (see
:mod:`toynet.dynamic.autograd`), so backward refuses a vjp whose saved tensors changed. ``add_``, ``sub_``,
``mul_`` and ``div_`` refuse a result their tensor's dtype cannot hold (``int_tensor.add_(0.5)``);
``copy_``, ``fill_`` and ``x[i] = v`` cast, as in PyTorch. A leaf that requires grad is written only under
``no_grad()`` (optimizers do so), except by ``copy_`` or ``fill_``, which load values into it without
differentiating anything (unlike PyTorch). On other tensors the arithmetic writes and ``copy_`` are
differentiable: the tensor takes the write's history, as in PyTorch, unless it shares its memory with
a view (toynet cannot rewrite the other tensor's history, so it refuses rather than give wrong
gradients), and backward refuses to differentiate the ops that used the tensor before the write.
"""

from __future__ import annotations

from typing import Any, Iterator

from . import autograd
from .. import backend, mode
from ..backend import Device, DType
from ..ops import OPS, ShapeError
from ..ops import _op as op_base
from ..ops.select import TENSOR_INDEX, split_index
from .printing import tensor_repr
from .tensor import Tensor, apply
from .tensor_methods import _is_dtype_name, attach

_RESHAPE, _PERMUTE, _GETITEM = OPS["reshape"], OPS["permute"], OPS["getitem"]
_ADD, _SUB, _MUL, _DIV, _IDENTITY = (OPS[n] for n in ("add", "sub", "mul", "div", "identity"))


class TensorDataMethods:
    """Attached to :class:`~toynet.dynamic.tensor.Tensor` below; never instantiated."""

    # ------------------------------------------------------------------------- leaving toynet

    def _eager_only(self, what: str) -> None:
        if self.node is not None:
            raise RuntimeError(
                f"{what} is not available on a lazy tensor: inside nn.Graph.build() tensors carry no "
                "values yet; build() is traced once into a graph that runs later, so Python code cannot "
                "branch on or print their data. Return the tensor from build() and read it from the "
                "graph's output, or use tensor ops (toynet.where, clamp...) instead of Python control flow.")

    def numpy(self) -> Any:
        """The data as a NumPy array (copied from the GPU if needed; shares memory on the CPU)."""
        self._eager_only("tensor.numpy()")
        return backend.to_numpy(self.array, self.device)

    def item(self) -> Any:
        self._eager_only("tensor.item()")
        if self.numel() != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {tuple(self.shape)}")
        return backend.to_numpy(self.array, self.device).reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        self._eager_only("bool(tensor) (as in `if tensor:`)")
        if self.numel() != 1:
            raise RuntimeError(f"the truth value of a tensor of shape {tuple(self.shape)} is ambiguous; "
                               "use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point:
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        # As OneFlow: a 0-d tensor formats as its number (f"loss:{loss}" prints loss:0.0041...), a one-element
        # tensor too when given a format spec; anything else as its repr.
        if self.node is None and (self.ndim == 0 or (spec and self.numel() == 1)):
            return format(self.item(), spec)
        return format(repr(self), spec)

    def __repr__(self) -> str:
        return tensor_repr(self)

    def __iter__(self) -> Iterator["Tensor"]:
        for i in range(len(self)):
            yield self[i]

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """Let NumPy functions take tensors (``np.sin(x)``), as the tutorials do."""
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    # -------------------------------------------------------------------------------- shapes

    def __getitem__(self, index: Any) -> "Tensor":
        spec, tensors = split_index(index, Tensor, self.device)
        return apply(_GETITEM, self, *tensors, index=spec)

    def __setitem__(self, index: Any, value: Any) -> None:
        """In-place assignment ``t[index] = value`` (cast to ``t``'s dtype); not differentiated, and
        only in Eager mode."""
        if self.is_lazy:
            raise RuntimeError("item assignment (t[i] = v) is not supported inside nn.Graph.build(); build "
                               "the value with toynet.where or toynet.cat instead")
        if mode.grad_enabled and (self.requires_grad or _requires_grad(value)):
            _refuse_leaf(self, "item assignment (t[i] = v)")
            which = "a tensor that requires grad" if self.requires_grad else "a value that requires grad"
            raise RuntimeError(f"item assignment (t[i] = v) into {which} is not differentiated by toynet, so "
                               "the gradient would be wrong; do it under toynet.no_grad() or on a detached "
                               "tensor, or build the new tensor with toynet.where or toynet.cat")
        spec, tensors = split_index(index, Tensor, self.device)
        arrays = iter(t.array for t in tensors)
        resolved = tuple(next(arrays) if item == TENSOR_INDEX else item for item in spec)
        self.array[resolved] = value.to(self.device).array if isinstance(value, Tensor) else \
            backend.as_device_value(value, self.device, self.dtype)
        autograd.note_write(self, "item assignment (t[i] = v)")

    # ------------------------------------------------------------------------------ writes

    def copy_(self, src: Any) -> "Tensor":
        """Overwrite this tensor's values with ``src``, broadcast to its shape and cast to its dtype.

        Differentiable when ``src`` requires grad (the gradient reaches ``src``); counted as a write, so
        backward refuses to use an older value of this tensor that it saved.
        """
        if mode.tracer is not None:
            return mode.tracer.assign(self, src)
        return _write(self, "copy_", src)

    def fill_(self, value: Any) -> "Tensor":
        """Set every element to ``value`` (a number or a 0-d tensor), cast to this tensor's dtype."""
        if mode.tracer is not None:
            return mode.tracer.assign(self, value)
        if isinstance(value, Tensor) and value.ndim:
            raise RuntimeError(f"fill_: the value must be a number or a 0-d tensor, got shape "
                               f"{tuple(value.shape)}; use copy_ to write a tensor")
        return _write(self, "fill_", value)

    def zero_(self) -> "Tensor":
        return self.fill_(0)

    zeros_ = zero_  # OneFlow's spelling (x.grad.zeros_() in its autograd tutorial)

    def add_(self, other: Any, alpha: float = 1.0) -> "Tensor":
        return _update(self, "add_", _ADD, other, alpha)

    def sub_(self, other: Any, alpha: float = 1.0) -> "Tensor":
        return _update(self, "sub_", _SUB, other, alpha)

    def mul_(self, other: Any) -> "Tensor":
        return _update(self, "mul_", _MUL, other)

    def div_(self, other: Any) -> "Tensor":
        return _update(self, "div_", _DIV, other)

    def chunk(self, chunks: int, dim: int = 0) -> list["Tensor"]:
        if chunks < 1:
            raise ValueError(f"chunk: chunks must be at least 1, got {chunks}")
        size = self.shape[dim]
        step = -(-size // chunks)
        return self.split(step, dim)

    def split(self, split_size: Any, dim: int = 0) -> list["Tensor"]:
        d = op_base.normalize_dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size, int) and split_size < 1:
            raise ValueError(f"split: split_size must be at least 1, got {split_size}")
        sizes = [split_size] * (size // split_size) + ([size % split_size] if size % split_size else []) \
            if isinstance(split_size, int) else list(split_size)
        if sum(sizes) != size:
            raise ValueError(f"split: sizes {sizes} add up to {sum(sizes)}, but dimension {dim} has size {size}")
        pieces, start = [], 0
        for s in sizes:
            index = (slice(None),) * d + (slice(start, start + s),)
            pieces.append(self[index])
            start += s
        return pieces

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


# ---------------------------------------------------------------------------------------- writing


# PyTorch's casting rule for in-place results: bool < integers < floats; a write may not go down.
_KIND = {(False, True): 0, (False, False): 1, (True, False): 2}


def _requires_grad(value: Any) -> bool:
    return isinstance(value, Tensor) and value.requires_grad


def _refuse_leaf(target: Tensor, what: str) -> None:
    if target.requires_grad and target.grad_fn is None:
        raise RuntimeError(
            f"{what}: a leaf Variable that requires grad is being used in an in-place operation (a tensor of "
            f"shape {tuple(target.shape)} made with requires_grad=True, or a parameter). backward() would "
            "compute its gradient for values it no longer has. Fix: update it under `with toynet.no_grad():`, "
            "as optimizers do, or compute a new tensor out of place (y = x * 2).")


def _refuse_differentiable(target: Tensor, what: str) -> None:
    """A write that gradients flow through: allowed on a non-leaf whose memory no other tensor views."""
    _refuse_leaf(target, what)
    version = getattr(target, "_version", None)   # a view's is the tensor it views (see autograd.Version)
    if version is not None and type(version) is not autograd.Version or getattr(target, "_has_views", False):
        raise RuntimeError(
            f"{what}: this tensor (shape {tuple(target.shape)}) shares its memory with another tensor (it is a "
            "view made by reshape, permute, slicing or detach(), or a view was made of it), and the write involves "
            "gradients. toynet can give this tensor the write's history but not the other one, whose gradient "
            "would then be wrong. Fix: write into a copy (y = x.clone(); y.mul_(2)) or use the out-of-place "
            "form (y = x * 2).")


def _check_fits(target: Tensor, what: str, result: Tensor) -> None:
    """An arithmetic write keeps its tensor's shape and dtype; refuse results that do not fit (as PyTorch)."""
    if tuple(result.shape) != tuple(target.shape):
        raise RuntimeError(
            f"{what}: output with shape {tuple(target.shape)} doesn't match the broadcast shape "
            f"{tuple(result.shape)}: an in-place op cannot change its tensor's shape. Fix: use the out-of-place "
            f"form, y = x.{what[:-1]}(other), or an `other` that broadcasts to {tuple(target.shape)}.")
    if _KIND[result.dtype.is_floating_point, result.dtype is backend.bool_] > \
            _KIND[target.dtype.is_floating_point, target.dtype is backend.bool_]:
        have, want = result.dtype.name, target.dtype.name
        example = " (0.5 would become 0)" if result.dtype.is_floating_point else ""
        raise RuntimeError(
            f"{what}: result type {have} can't be cast to the desired output type {want}: an in-place op keeps "
            f"its tensor's dtype, and {have} values written into a {want} tensor would be changed{example}. "
            f"Fix: use the out-of-place form, y = x.{what[:-1]}(other), which gives {have}; or convert first, "
            f"x = x.to(toynet.{have}).")


def _update(target: Tensor, what: str, op: Any, other: Any, alpha: Any = 1) -> Tensor:
    """``target.add_(other)`` and the like: ``target = op(target, other * alpha)``, written into target."""
    if mode.tracer is not None:   # Graph mode: the tracer records an assignment
        return target.copy_(apply(op, target, other if alpha == 1 else other * alpha))
    if not (mode.grad_enabled and (target.requires_grad or _requires_grad(other))):
        result = apply(op, target, other if alpha == 1 else other * alpha)
        _check_fits(target, what, result)
        return _store(target, what, result.array)
    _refuse_differentiable(target, what)
    # The op's vjp may read target's old value, which the write destroys: it gets a copy, carrying the
    # old history. (`other` cannot view target's memory: that was refused just above.)
    old = Tensor._make(target.array.copy(), None, target.device, target.requires_grad)
    old.grad_fn = target.grad_fn
    other = old if other is target else other
    result = apply(op, old, other if alpha == 1 else other * alpha)
    _check_fits(target, what, result)
    _store(target, what, result.array, rebased=True)
    return _take_history(target, result)


def _write(target: Tensor, what: str, value: Any) -> Tensor:
    """``copy_`` and ``fill_``: overwrite with ``value``, broadcast and cast (truncating, as PyTorch).

    Overwriting a leaf that requires grad (loading weights) is allowed outside ``no_grad()``, unlike
    PyTorch, and not differentiated: the leaf stays a leaf, and backward refuses the ops that saved its
    old values."""
    loading = target.requires_grad and target.grad_fn is None
    recording = mode.grad_enabled and not loading and (target.requires_grad or _requires_grad(value))
    if recording:
        _refuse_differentiable(target, what)
    if isinstance(value, Tensor):
        if value.device != target.device:
            value = value.to(target.device)
        array = value.array
    else:
        array = backend.as_device_value(value, target.device, target.dtype)
    shape = tuple(getattr(array, "shape", ()))
    try:
        fits = op_base.broadcast_shapes(what, shape, tuple(target.shape)) == tuple(target.shape)
    except ShapeError:
        fits = False
    if not fits:
        raise RuntimeError(f"{what}: the source of shape {shape} does not broadcast to the shape "
                           f"{tuple(target.shape)} of the tensor written in place")
    new = None
    if recording and isinstance(value, Tensor):
        # The tensor's new history: a copy of the source, cast and broadcast to the tensor's dtype and shape.
        new = apply(_IDENTITY, value.to(target.dtype))
        if tuple(new.shape) != tuple(target.shape):
            new = new.expand(*target.shape)
    _store(target, what, array, rebased=recording)
    return _take_history(target, new) if recording else target


def _store(target: Tensor, what: str, array: Any, rebased: bool = False) -> Tensor:
    target.array[...] = array
    autograd.note_write(target, what, rebased)
    return target


def _take_history(target: Tensor, result: Tensor | None) -> Tensor:
    """After a differentiable write, ``target`` holds ``result``'s values: it takes its grad_fn too
    (and with a constant written, it no longer depends on anything that requires grad)."""
    target.grad_fn = None if result is None else result.grad_fn
    target.requires_grad = result is not None and result.requires_grad
    return target


attach(TensorDataMethods, Tensor)
