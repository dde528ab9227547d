"""The dynamic (define-by-run) design: :class:`Tensor` and :func:`apply`, the one door to every op.

A tensor is either

* **eager**: it holds an array (``tensor.array``: a NumPy or CuPy array) and ops on it compute at
  once; when an input requires grad the result also remembers how it was made (``grad_fn``), which is
  all the graph Eager mode ever has; or
* **lazy** (``is_lazy=True``): inside ``nn.Graph.build`` it holds a static ``Node`` instead of data,
  and ops on it add nodes to the graph being traced. Same class, same methods, same op definitions:
  only *when* the computation happens differs.

:func:`apply` is where the two designs meet: it looks at its inputs, runs the op's ``forward`` on
arrays (eager) or hands the call to the active tracer (lazy), and records the ``GradFn``.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Sequence

from . import autograd
from .. import backend, mode
from .autograd import GradFn
from ..backend import CPU, Device, DType
from ..ops import _op as op_base
from ..ops import op_errors
from ..ops.shape import shape_arg


# ------------------------------------------------------------------------------------------ the door


def apply(op: Any, *inputs: Any, **attrs: Any) -> "Tensor":
    """Run ``op`` on ``inputs`` (tensors and Python numbers) and return the result tensor.

    Eager: compute ``op.forward`` on the inputs' arrays now, and record a :class:`GradFn` if grad
    mode is on and an input requires grad. While an ``nn.Graph`` is being traced: hand the call to the
    tracer, which adds a node to the graph and returns a lazy tensor.
    """
    if mode.tracer is not None:
        return mode.tracer.apply(op, inputs, attrs)
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    device = tensors[0].device if tensors else attrs.get("device") or CPU
    if any(t.device is not device or t.array is None for t in tensors):  # (one Device object per device)
        raise _refusal(op, inputs)
    # NumPy scalars become Python numbers, which never widen a tensor's dtype (NumPy 2 would turn
    # float32 * numpy.float64(2) into float64).
    args = [x.array if isinstance(x, Tensor) else x.item() if isinstance(x, _SCALARS) else x for x in inputs]
    try:
        out = op.forward(device.xp, *args, **attrs)
    except Exception as error:
        raise op_errors.explain_failure(op, inputs, attrs, error) from error
    device = attrs["device"] if op.changes_device else device  # (to_device)
    result = Tensor._make(out if out.ndim else device.xp.asarray(out), None, device)  # (NumPy: scalars for 0-d)
    if op.may_alias_input and len(inputs) == 1:  # a view of its input: writes through either are counted on
        result._version, inputs[0]._has_views = inputs[0], True  # the input (autograd.version_of)
    # Only float results carry gradients: comparisons, argmax and the like end the graph, as in PyTorch.
    if mode.grad_enabled and result.array.dtype.kind == "f" and any(t.requires_grad for t in tensors):
        result.requires_grad = True
        result.grad_fn = GradFn(op, inputs, attrs, weakref.ref(result) if op.saves_output else None)
    for observer in mode.op_observers:
        observer(op, inputs, attrs, result)
    return result


# -------------------------------------------------------------------------------------------- Size


class Size(tuple):
    """A tensor's shape: ``toynet.Size([64, 1, 28, 28])``, a tuple of ints that prints as OneFlow's and PyTorch's
    shapes do; ``numel()`` is the number of elements it holds. It *is* a tuple, so everything that reads
    shapes as tuples (``x.shape == (2, 3)``, unpacking, ``x.shape[1:]``, NumPy calls) works."""

    __slots__ = ()

    def __new__(cls, sizes: Any = ()) -> "Size":
        values = tuple(sizes)
        for d in values:
            if isinstance(d, bool) or not hasattr(d, "__index__"):
                raise TypeError(f"toynet.Size takes ints (one per dimension), got {d!r} in {values!r}")
        return super().__new__(cls, (d.__index__() for d in values))

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __getitem__(self, index: Any) -> Any:  # a slice of a shape is a shape
        return Size(tuple.__getitem__(self, index)) if isinstance(index, slice) else tuple.__getitem__(self, index)

    def __repr__(self) -> str:
        return f"toynet.Size([{', '.join(str(d) for d in self)}])"

    __str__ = __repr__


# ------------------------------------------------------------------------------------------ Tensor


class Tensor:
    """An n-dimensional array that can record how it was computed.

    ``toynet.tensor([[1., 2.]], requires_grad=True)`` makes one; ops on tensors (``a @ b``,
    ``a.relu()``, ``toynet.cat``) make more.
    """

    __slots__ = ("array", "node", "device", "requires_grad", "grad", "grad_fn", "name", "_version", "_has_views",
                 "__weakref__")
    # An eager tensor's data lives in `array`; a lazy one's description lives in `node`. `_version` counts
    # the in-place writes into its memory: an autograd.Version, None until needed, or the tensor it views;
    # `_has_views` is set (and only then: read it with getattr) once an op made a view of it.

    def __init__(self, *args: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False):
        """``Tensor(2, 3)``: an uninitialised float32 tensor of that shape; ``Tensor([1, 2, 3])``: the data
        as float32 (OneFlow's and PyTorch's rule for the class: ``toynet.tensor`` infers the dtype instead);
        ``Tensor(t)``: the same memory as tensor ``t``. ``dtype`` overrides float32."""
        if len(args) == 1 and isinstance(args[0], Tensor):
            data = args[0]
            self._set(data.to(device=backend.to_device_obj(device), dtype=dtype).detach().array,
                      backend.to_device_obj(device), requires_grad)
            self._version = data if self.array is data.array else None  # shared memory: a view
            return
        if not args:
            raise TypeError("Tensor() needs data or a shape: toynet.Tensor([1., 2.]) or toynet.Tensor(2, 3) "
                            "(uninitialised), or toynet.zeros(2, 3)")
        dtype = backend.to_dtype(dtype) if dtype is not None else backend.DEFAULT_FLOAT
        device = backend.to_device_obj(device)
        if isinstance(args[0], Size) or all(_is_int(a) for a in args):
            shape = tuple(args[0]) if isinstance(args[0], Size) else tuple(int(a) for a in args)
            if len(args) > 1 and isinstance(args[0], Size) or any(d < 0 for d in shape):
                raise ValueError(f"Tensor(*shape): sizes must be ints >= 0, got {args}")
            self._set(device.xp.empty(shape, dtype=dtype.array_dtype), device, requires_grad)
            return
        if len(args) > 1:
            raise TypeError(f"Tensor() takes one piece of data (a list, an array, a number) or ints (a shape), "
                            f"got {len(args)} arguments: {args!r:.200}; pass dtype= and device= by name")
        self._set(backend.from_host(args[0], device, dtype), device, requires_grad)

    @classmethod
    def from_data(cls, data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> "Tensor":
        """A tensor copied from ``data`` with the dtype inferred: Python floats become float32, ints int64,
        arrays keep theirs (what ``toynet.tensor`` does)."""
        device = backend.to_device_obj(device)
        dtype = None if dtype is None else backend.to_dtype(dtype)
        if isinstance(data, Tensor):
            return cls(data, dtype=dtype, device=device, requires_grad=requires_grad)
        if data is None:
            raise TypeError("toynet.tensor() needs data; use toynet.zeros(shape) for an empty tensor")
        if dtype is None and _is_float_data(data):
            dtype = backend.DEFAULT_FLOAT  # Python floats become float32, as in PyTorch
        array = backend.from_host(data, device, dtype)
        if array is data:  # a host array already on the CPU: copy, as documented (from_numpy shares)
            array = array.copy()
        t = cls.__new__(cls)
        t._set(array, device, requires_grad)
        return t

    def _set(self, array: Any, device: Device, requires_grad: bool) -> None:
        dtype = backend.dtype_of(array)  # rejects unsupported dtypes (complex, strings) right away
        self.array, self.node, self.device, self.requires_grad = array, None, device, bool(requires_grad)
        self.grad = self.grad_fn = self.name = self._version = None
        if requires_grad and not dtype.is_floating_point:
            raise RuntimeError(f"only floating-point tensors can require grad, got {backend.dtype_of(array)}")

    @classmethod
    def wrap(cls, array: Any, device: Device, requires_grad: bool = False) -> "Tensor":
        """Make a tensor around an existing device array (no copy)."""
        return cls._make(array, None, device, requires_grad)

    @classmethod
    def lazy(cls, node: Any, requires_grad: bool = False) -> "Tensor":
        """Make a lazy tensor: it stands for the value a static graph ``node`` will compute."""
        return cls._make(None, node, node.device, requires_grad)

    @classmethod
    def _make(cls, array: Any, node: Any, device: Device, requires_grad: bool = False) -> "Tensor":
        t = cls.__new__(cls)
        t.array, t.node, t.device, t.requires_grad = array, node, device, requires_grad
        t.grad = t.grad_fn = t.name = t._version = None
        return t

    # ------------------------------------------------------------------------------ what it is

    @property
    def shape(self) -> Size:
        return tuple.__new__(Size, self.array.shape if self.node is None else self.node.shape)

    @property
    def dtype(self) -> DType:
        return backend.dtype_of(self.array) if self.node is None else self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_lazy(self) -> bool:
        """True inside ``nn.Graph.build``: the tensor describes a value the graph will compute."""
        return self.node is not None

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def data(self) -> "Tensor":
        """The same values without the autograd history (shares the array)."""
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        # New memory behind the same tensor: what backward saved of it is no longer there (counted as a write).
        self.array = value.array if isinstance(value, Tensor) else value
        autograd.note_write(self, ".data =")

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self.array.size if self.node is None else math.prod(self.node.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    __hash__ = object.__hash__
    # `numpy_scalar * tensor` and `ndarray + tensor` call the tensor's reflected operator (keeping the
    # result a Tensor in the graph) instead of NumPy turning the tensor into an array.
    __array_priority__ = 1000
    # Leaving toynet (x.numpy(), x.item(), float(x), repr(x), np.sin(x)...): toynet.dynamic.tensor_data.

    # ------------------------------------------------------------------------- autograd

    def backward(self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``.grad`` of every leaf that requires grad."""
        autograd.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph)

    def detach(self) -> "Tensor":
        """A tensor sharing this one's data but cut from the graph (no grad_fn, no requires_grad)."""
        if self.node is not None:
            return (mode.tracer or mode.current_tracer()).detach(self)
        t = Tensor.wrap(self.array, self.device)
        t._version = self   # a view: as in PyTorch, a write through it is seen by backward
        return t

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if not self.is_leaf:
            raise RuntimeError("requires_grad_ can only change leaf tensors; use detach() first")
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(f"only floating-point tensors can require grad, got {self.dtype}")
        self.requires_grad = requires_grad
        return self

    # ------------------------------------------------------------------ new tensors like this one

    def new_tensor(self, data: Any) -> "Tensor":
        """A new tensor from ``data`` with this tensor's dtype and device."""
        return Tensor.from_data(data, dtype=self.dtype, device=self.device)

    def new_full(self, size: Sequence[int], fill_value: Any, dtype: Any = None) -> "Tensor":
        """A tensor of ``size`` filled with ``fill_value``, on this tensor's device (and dtype unless given).

        Inside ``nn.Graph.build`` the new tensor is a constant of the graph being traced (the seed
        ``loss.backward()`` starts from, for instance).
        """
        if self.node is not None:
            if tuple(size) != tuple(self.shape):
                raise RuntimeError(f"new_full: inside nn.Graph.build() a new tensor must have the shape of the "
                                   f"one it is made from, {tuple(self.shape)}; got {size}")
            return (mode.tracer or mode.current_tracer()).full_like(self, fill_value, dtype)
        array_dtype = self.array.dtype if dtype is None else backend.to_dtype(dtype).array_dtype
        return Tensor.wrap(self.device.xp.full(tuple(size), fill_value, dtype=array_dtype), self.device)

    def new_ones(self, *size: Any) -> "Tensor":
        return self.new_full(shape_arg(size), 1)

    def new_zeros(self, *size: Any) -> "Tensor":
        return self.new_full(shape_arg(size), 0)


def _is_int(value: Any) -> bool:
    """A size in ``Tensor(2, 3)``: an int (or NumPy integer), not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, backend.host.integer))


def _is_float_data(data: Any) -> bool:
    if isinstance(data, float):
        return True
    if isinstance(data, (list, tuple)):
        return not data or any(_is_float_data(d) for d in data)  # an empty list is float32, as in PyTorch
    return False  # arrays keep their own dtype


def _refusal(op: Any, inputs: tuple) -> Exception:
    """Why ``apply`` refuses these inputs: a lazy tensor used after its trace ended, or two devices."""
    if any(isinstance(x, Tensor) and x.array is None for x in inputs):
        mode.current_tracer()  # raises: a lazy tensor escaped its trace
    return RuntimeError(op_errors.device_mismatch(op, inputs))


_SCALARS = (backend.host.number, backend.host.bool_)  # NumPy's


def _as_size(shape: tuple) -> Size:
    """A Size around a shape known to be a tuple of ints (an array's, a node's), made without Size's checks."""
    return tuple.__new__(Size, shape)


op_base._apply = apply  # vjp rules reach apply through the op table (see toynet.ops._op.apply)
