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

from typing import Any, Iterator, Sequence

from . import autograd, backend
from .autograd import GradFn
from .backend import CPU, Device, DType
from .ops import OPS, ShapeError
from .ops import _op as op_base

# ------------------------------------------------------------------------------------ tracing hooks

# Set by toynet.static while nn.Graph.build runs; every op then goes to the tracer instead of computing.
_tracer: Any = None
# Callbacks told about every eager op (toynet.viz.record uses this to animate graph construction).
_observers: list = []


def set_tracer(tracer: Any) -> Any:
    """Install (or, with ``None``, remove) the tracer that records ops; returns the previous one."""
    global _tracer
    previous, _tracer = _tracer, tracer
    return previous


def current_tracer() -> Any:
    if _tracer is None:
        raise RuntimeError("this lazy tensor belongs to an nn.Graph trace that has ended; lazy tensors "
                           "exist only inside nn.Graph.build()")
    return _tracer


# ------------------------------------------------------------------------------------------ the door


def apply(op: Any, *inputs: Any, **attrs: Any) -> "Tensor":
    """Run ``op`` on ``inputs`` (tensors and Python numbers) and return the result tensor.

    Eager: compute ``op.forward`` on the inputs' arrays now, and record a :class:`GradFn` if grad
    mode is on and an input requires grad. While an ``nn.Graph`` is being traced: hand the call to the
    tracer, which adds a node to the graph and returns a lazy tensor.
    """
    if _tracer is not None:
        return _tracer.apply(op, inputs, attrs)
    device = None
    requires_grad = False
    args = []
    for x in inputs:
        if isinstance(x, Tensor):
            if x.array is None:
                current_tracer()  # raises: a lazy tensor escaped its trace
            if device is None:
                device = x.device
            elif x.device is not device and x.device != device:
                raise RuntimeError(_device_mismatch(op, inputs))
            requires_grad = requires_grad or x.requires_grad
            args.append(x.array)
        elif type(x) is float or type(x) is int:
            args.append(x)
        else:
            # NumPy scalars become Python numbers, which never widen a tensor's dtype (NumPy 2 would
            # turn float32 * numpy.float64(2) into float64).
            args.append(backend.host_scalar(x))
    if device is None:
        device = attrs.get("device") or CPU
    try:
        out = op.forward(device.xp, *args, **attrs)
    except Exception as error:
        raise explain_failure(op, inputs, attrs, error) from error
    if op.changes_device:
        device = attrs["device"]
    if out.ndim == 0:  # NumPy returns scalars, not 0-d arrays, for 0-d results: keep every tensor on an array
        out = device.xp.asarray(out)
    result = Tensor.__new__(Tensor)
    result.array = out
    result.node = None
    result.device = device
    result.grad = None
    result.name = None
    # Only float results carry gradients: comparisons, argmax and the like give bool/int tensors that
    # end the graph, as in PyTorch.
    if requires_grad and autograd._enabled and out.dtype.kind == "f":  # a floating-point result
        result.requires_grad = True
        result.grad_fn = GradFn(op, inputs, attrs, result._weakref() if op.saves_output else None)
    else:
        result.requires_grad = False
        result.grad_fn = None
    if _observers:
        for observer in _observers:
            observer(op, inputs, attrs, result)
    return result


def explain_failure(op: Any, inputs: Sequence, attrs: dict, error: Exception) -> Exception:
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
    shapes = ", ".join(str(tuple(x.shape)) if isinstance(x, Tensor) else repr(x) for x in inputs)
    return type(error)(f"{op.name} failed on inputs {shapes}: {error}") if isinstance(
        error, (ValueError, TypeError, IndexError)) else error


def _device_mismatch(op: Any, inputs: Sequence) -> str:
    devices = [str(x.device) for x in inputs if isinstance(x, Tensor)]
    return (f"{op.name}: expected all tensors to be on the same device, but found {' and '.join(devices)}; "
            f"move them with tensor.to(device) first")


# ------------------------------------------------------------------------------------------ Tensor


class Tensor:
    """An n-dimensional array that can record how it was computed.

    ``toynet.tensor([[1., 2.]], requires_grad=True)`` makes one; ops on tensors (``a @ b``,
    ``a.relu()``, ``toynet.cat``) make more.
    """

    __slots__ = ("array", "node", "device", "requires_grad", "grad", "grad_fn", "name", "__weakref__")
    # An eager tensor's data lives in `array`; a lazy one's description lives in `node`.

    def __init__(self, data: Any = None, dtype: Any = None, device: Any = None, requires_grad: bool = False):
        device = backend.to_device_obj(device)
        dtype = None if dtype is None else backend.to_dtype(dtype)
        if isinstance(data, Tensor):
            array = data.to(device=device, dtype=dtype).detach().array
        elif data is None:
            raise TypeError("Tensor() needs data; use toynet.zeros(shape) for an empty tensor")
        else:
            if dtype is None and _is_float_data(data):
                dtype = backend.DEFAULT_FLOAT  # Python floats become float32, as in PyTorch
            array = backend.from_host(data, device, dtype)
            if array is data:  # a host array already on the CPU: copy, as documented (from_numpy shares)
                array = array.copy()
        backend.dtype_of(array)  # reject unsupported dtypes (complex, strings) right away
        self.array = array
        self.node = None
        self.device = device
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self.grad_fn = None
        self.name = None
        if requires_grad and not backend.dtype_of(array).is_floating_point:
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
    def _make(cls, array: Any, node: Any, device: Device, requires_grad: bool) -> "Tensor":
        t = cls.__new__(cls)
        t.array, t.node, t.device, t.requires_grad = array, node, device, requires_grad
        t.grad = t.grad_fn = t.name = None
        return t

    def _weakref(self):
        import weakref
        return weakref.ref(self)

    # ------------------------------------------------------------------------------ what it is

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape if self.node is None else self.node.shape

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
        self.array = value.array if isinstance(value, Tensor) else value

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

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
        if spec and self.node is None and self.numel() == 1:
            return format(self.item(), spec)
        return format(repr(self), spec)

    def __repr__(self) -> str:
        from .printing import tensor_repr
        return tensor_repr(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        """In a notebook, a tensor with a grad_fn also shows its autograd graph (see toynet.viz.jupyter)."""
        if self.grad_fn is None or self.node is not None:
            return None
        from .viz.jupyter import tensor_mimebundle
        return tensor_mimebundle(self, include, exclude)

    def __iter__(self) -> Iterator["Tensor"]:
        for i in range(len(self)):
            yield self[i]

    __hash__ = object.__hash__
    # `numpy_scalar * tensor` and `ndarray + tensor` call the tensor's reflected operator (keeping the
    # result a Tensor in the graph) instead of NumPy turning the tensor into an array.
    __array_priority__ = 1000

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """Let NumPy functions take tensors (``np.sin(x)``), as the tutorials do."""
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    # ------------------------------------------------------------------------- autograd

    def backward(self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``.grad`` of every leaf that requires grad."""
        autograd.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph)

    def detach(self) -> "Tensor":
        """A tensor sharing this one's data but cut from the graph (no grad_fn, no requires_grad)."""
        if self.node is not None:
            return current_tracer().detach(self)
        return Tensor.wrap(self.array, self.device)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if not self.is_leaf:
            raise RuntimeError("requires_grad_ can only change leaf tensors; use detach() first")
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(f"only floating-point tensors can require grad, got {self.dtype}")
        self.requires_grad = requires_grad
        return self

    def retain_grad(self) -> None:
        raise NotImplementedError("retain_grad is not supported; use toynet.autograd.grad(loss, tensor)")

    # ---------------------------------------------------------------------- in place (no grad)

    def copy_(self, src: Any) -> "Tensor":
        """Overwrite this tensor's values with ``src`` (broadcast and cast to this dtype).

        In-place writes are for state (parameters, running statistics) and are not differentiated.
        """
        if _tracer is not None:
            return _tracer.assign(self, src)
        if isinstance(src, Tensor):
            if src.device != self.device:
                src = src.to(self.device)
            value = src.array
        else:
            value = backend.as_device_value(src, self.device, self.dtype)
        self.array[...] = value
        return self

    def zero_(self) -> "Tensor":
        return self.fill_(0)

    def fill_(self, value: float) -> "Tensor":
        if _tracer is not None:
            return _tracer.assign(self, value)
        self.array[...] = value
        return self

    def add_(self, other: Any, alpha: float = 1.0) -> "Tensor":
        return self.copy_(self + other * alpha if alpha != 1.0 else self + other)

    def sub_(self, other: Any) -> "Tensor":
        return self.copy_(self - other)

    def mul_(self, other: Any) -> "Tensor":
        return self.copy_(self * other)

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

    def square(self) -> "Tensor":
        return self * self

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
        if tuple(self.shape) == shape:
            return self
        return apply(OPS["sum_to"], self, shape=shape)

    def any(self) -> "Tensor":
        return apply(OPS["any"], self)

    def all(self) -> "Tensor":
        return apply(OPS["all"], self)

    # -------------------------------------------------------------------------------- shapes

    def reshape(self, *shape: Any) -> "Tensor":
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        own = self.shape
        if shape == own:
            return self
        if -1 in shape:
            shape = _infer_reshape(tuple(own), tuple(shape))
        return apply(_RESHAPE, self, shape=tuple(int(d) for d in shape))

    view = reshape

    def view_as(self, other: "Tensor") -> "Tensor":
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        shape = tuple(self.shape)
        if not shape:
            return self.reshape(1)
        start = op_base.normalize_dim("flatten", start_dim, len(shape))
        end = op_base.normalize_dim("flatten", end_dim, len(shape))
        if start > end:
            raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        merged = 1
        for d in shape[start:end + 1]:
            merged *= d
        return self.reshape(shape[:start] + (merged,) + shape[end + 1:])

    def unsqueeze(self, dim: int) -> "Tensor":
        shape = tuple(self.shape)
        d = op_base.normalize_dim("unsqueeze", dim, len(shape) + 1)
        return self.reshape(shape[:d] + (1,) + shape[d:])

    def squeeze(self, dim: Any = None) -> "Tensor":
        shape = tuple(self.shape)
        if dim is None:
            return self.reshape(tuple(s for s in shape if s != 1))
        d = op_base.normalize_dim("squeeze", dim, len(shape))
        if shape[d] != 1:
            return self
        return self.reshape(shape[:d] + shape[d + 1:])

    def permute(self, *dims: Any) -> "Tensor":
        if len(dims) == 1 and not isinstance(dims[0], int):
            dims = tuple(dims[0])
        ndim = len(self.shape)
        axes = tuple(d + ndim if d < 0 else d for d in dims)
        if len(axes) != ndim or sorted(axes) != list(range(ndim)):
            raise ShapeError(f"permute: {dims} is not a permutation of the dimensions of a tensor with "
                             f"{ndim} dimensions")
        return apply(_PERMUTE, self, dims=axes)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        ndim = len(self.shape)
        a = op_base.normalize_dim("transpose", dim0, ndim)
        b = op_base.normalize_dim("transpose", dim1, ndim)
        if a == b:
            return self
        axes = list(range(ndim))
        axes[a], axes[b] = b, a
        return apply(_PERMUTE, self, dims=tuple(axes))

    def t(self) -> "Tensor":
        if self.ndim < 2:
            return self
        return self.transpose(0, 1)

    @property
    def T(self) -> "Tensor":
        return self.permute(*reversed(range(self.ndim)))

    def expand(self, *shape: Any) -> "Tensor":
        shape = _shape_arg(shape)
        own = tuple(self.shape)
        offset = len(shape) - len(own)
        if offset < 0:
            raise ShapeError(f"expand: cannot expand shape {own} to fewer dimensions {shape}")
        target = tuple(own[i - offset] if (s == -1 and i >= offset) else s for i, s in enumerate(shape))
        if target == own:
            return self
        return apply(OPS["broadcast_to"], self, shape=target)

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(*other.shape)

    broadcast_to = expand

    def repeat(self, *sizes: Any) -> "Tensor":
        """Tile the tensor ``sizes[i]`` times along dimension ``i`` (built from reshape and expand)."""
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: got {len(sizes)} sizes for a tensor with {self.ndim} dimensions")
        t = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self.shape))
        interleaved, expanded, final = [], [], []
        for size, times in zip(t.shape, sizes):
            interleaved += [1, size]
            expanded += [times, size]
            final.append(size * times)
        return t.reshape(interleaved).expand(*expanded).reshape(final)

    def __getitem__(self, index: Any) -> "Tensor":
        from .indexing import getitem
        return getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        from .indexing import setitem
        setitem(self, index, value)

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


_ADD, _SUB, _MUL, _DIV, _NEG, _POW, _MATMUL, _RESHAPE, _PERMUTE = (
    OPS[n] for n in ("add", "sub", "mul", "div", "neg", "pow", "matmul", "reshape", "permute"))


def _reduced_dims(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """The dimensions a reduction runs over; a 0-d tensor has none (``dim=0`` or ``-1`` means itself)."""
    dims = op_base.normalize_dims(op, dim, ndim)
    return () if ndim == 0 else dims


def _is_float_data(data: Any) -> bool:
    if isinstance(data, float):
        return True
    if isinstance(data, (list, tuple)):
        return not data or any(_is_float_data(d) for d in data)  # an empty list is float32, as in PyTorch
    return False  # arrays keep their own dtype


def _is_dtype_name(name: str) -> bool:
    try:
        backend.to_dtype(name)
    except TypeError:
        return False
    return True


def _shape_arg(args: tuple) -> tuple[int, ...]:
    """Accept both ``f(2, 3)`` and ``f((2, 3))``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


def _infer_reshape(old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
    total = 1
    for d in old:
        total *= d
    if new.count(-1) > 1:
        raise ShapeError(f"reshape: only one dimension can be -1, got {new}")
    known = 1
    for d in new:
        if d != -1:
            known *= d
    if -1 in new:
        if known == 0 or total % known:
            raise ShapeError(f"reshape: cannot reshape a tensor of shape {old} ({total} elements) into {new}")
        new = tuple(total // known if d == -1 else d for d in new)
    elif known != total:
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {old} ({total} elements) into {new} "
                         f"({known} elements)")
    return new


op_base._apply = apply  # vjp rules reach apply through the op table (see toynet.ops._op.apply)
