"""Global tensors: one logical tensor, held in parts by the processes of a placement.

``x = toynet.randn(4, 5, placement=toynet.placement("cpu", ranks=[0, 1]), sbp=toynet.sbp.split(0))`` is a
(4, 5) tensor on every process: ``x.shape`` is the *logical* shape, and each process holds only its part,
``x.to_local()``, here (2, 5). A :class:`GlobalTensor` is a ``Tensor`` whose ``array`` is that local part,
with three more facts: its ``placement``, its ``sbp`` (:mod:`toynet.distributed.sbp`), its logical shape.

Ops on global tensors run as on local ones, through the same ``apply``: while global tensors exist, the
global interpreter (:mod:`toynet.distributed.interpreter`) stands where Graph mode's tracer stands, boxes the
inputs to a signature of the op (:mod:`.sbp_rules`), runs the op's forward on the local parts and tags the
result with the signature's SBP. Autograd records the op with its *global* inputs, so backward runs the
same vjp rules on global gradients: each gradient gets its layout from the rules too, and boxing on the way
back is where the communication of training comes from. A leaf's gradient is boxed to the leaf's own SBP
(a broadcast weight used with split data gets a partial-sum gradient: all-reduced, that is data parallelism).

Everything that reads a global tensor's *value* (``print(x)``, ``x.numpy()``, ``x.item()``) boxes it to
broadcast first: a collective, so every process must do it, as every process runs the same program.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend, mode
from ..dynamic import autograd
from ..dynamic.autograd import GradFn
from ..dynamic.printing import format_array
from ..dynamic.tensor import Size, Tensor, apply
from ..dynamic.tensor_methods import attach
from ..ops._op import Op
from . import boxing, boxing_nd, comm
from . import sbp as sbp_kinds
from .placement import check_for_tensors
from .sbp import broadcast as B
from .sbp import partial_sum as P
from .sbp import split

#: The interpreter, handed over by :mod:`toynet.distributed.interpreter` when it loads (it imports this
#: module). It stands in ``toynet.mode.tracer`` while at least one global tensor is alive.
INTERPRETER: Any = None
_alive = [0]


class GlobalTensor(Tensor):
    """A tensor whose ``array`` is this process's part of a logical value laid out by ``sbp`` over
    ``placement``. Made by :func:`make` (``to_global``, creation functions with ``placement=``, ops)."""

    __slots__ = ("_grad", "_layout", "_logical", "_placement", "_sbp")
    is_global = True
    is_local = False

    def __del__(self) -> None:
        try:
            _alive[0] -= 1
            if _alive[0] == 0 and mode.tracer is INTERPRETER:
                mode.tracer = None   # the last global tensor is gone: ops go straight to Eager mode again
        except (TypeError, AttributeError):
            pass                     # Python is shutting down: the module's globals are gone already

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a global tensor cannot be copied or pickled yet (its parts live in several processes); "
                        "copy its value with x.to_global(sbp=...) * 1, or save x.to_local() on each process")

    @property
    def placement(self) -> Any:
        return self._placement

    @property
    def _ranks(self) -> tuple:
        """The processes of its placement: ranks in order, or the rows of a 2-D grid (for 2-D SBP)."""
        return self._placement._ranks

    @property
    def _members(self) -> tuple[int, ...]:
        return self._placement.flat_ranks()

    @property
    def sbp(self) -> tuple:
        return self._sbp if isinstance(self._sbp, tuple) else (self._sbp,)

    @property
    def shape(self) -> Size:
        return Size(self._logical)

    def numel(self) -> int:
        return math.prod(self._logical)

    @property
    def grad(self) -> Any:
        return self._grad

    @grad.setter
    def grad(self, value: Any) -> None:
        # A tensor's gradient is laid out as the tensor is: a partial sum arriving at a broadcast weight is
        # all-reduced here (in backward, each leaf's gradient is set once per use, the same way on every rank).
        if value is not None and not isinstance(value, GlobalTensor):
            raise TypeError(f"the gradient of a global tensor must be a global tensor, got {type(value).__name__}")
        self._grad = value if value is None or value._sbp == self._sbp else box(value, self._sbp)

    def backward(self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """As ``Tensor.backward``, always on the lesson's walk: the fast path's walk (TOYNET_FAST=1) compares the
        shapes of local arrays, which differ between two layouts of one global value."""
        seeds = autograd._seeds([self], gradient, "backward")
        walk = next((r.lesson for r in mode.fast_replacements() if r.owner is autograd and r.name == "run_backward"),
                    autograd.run_backward)
        walk([self], seeds, retain_graph=create_graph if retain_graph is None else retain_graph,
             create_graph=create_graph)

    # ------------------------------------------------------------------------------ conversions

    def to_local(self) -> Tensor:
        """This process's part (shares its memory). Differentiable: its gradient becomes the global one."""
        out = Tensor.wrap(self.array, self.device)
        if mode.grad_enabled and self.requires_grad:
            out.requires_grad, out.grad_fn = True, GradFn(TO_LOCAL, (self,), {}, None)
        return out

    def to_global(self, placement: Any = None, sbp: Any = None) -> GlobalTensor:
        """The same value with another SBP (boxing), e.g. ``x.to_global(sbp=toynet.sbp.broadcast)``, or on other
        processes (``placement=``: a move, as from one pipeline stage to the next)."""
        target = self._placement if placement is None else check_for_tensors(placement)
        s = self._sbp if sbp is None else sbp_kinds.layout(sbp, target, self.ndim)
        if target != self._placement:
            return move(self, placement, s)
        return box(self, s)

    def detach(self) -> GlobalTensor:
        t = make(self.array, self.device, self._placement, self._sbp, self._logical)
        t._version = self
        return t

    def new_full(self, size: Any, fill_value: Any, dtype: Any = None) -> GlobalTensor:
        """A global tensor of logical ``size`` filled with ``fill_value`` (what backward's seed is made with):
        laid out like this one when the shapes agree (broadcast for a partial sum), else broadcast."""
        size = tuple(size)
        whole = sbp_kinds.broadcast_on(self._placement)
        s = (whole if _has(self._sbp, P) else self._sbp) if size == self._logical else whole
        array_dtype = self.array.dtype if dtype is None else backend.to_dtype(dtype).array_dtype
        local = self.device.xp.full(boxing.local_shape(size, s, ranks=self._ranks), fill_value, dtype=array_dtype)
        return make(local, self.device, self._placement, s, size)

    def new_tensor(self, data: Any) -> GlobalTensor:
        return from_logical(Tensor.from_data(data, dtype=self.dtype, device=self.device), self._placement,
                            sbp_kinds.broadcast_on(self._placement))

    # ------------------------------------------------------------------------------ its value

    def numpy(self) -> Any:
        """The whole logical value as a NumPy array (collective: every process must ask). A process outside
        the placement gets it too, from the placement's first process."""
        whole = mode.call_with_grad_mode(False, box, self, sbp_kinds.broadcast_on(self._placement))
        value = backend.to_numpy(whole.array, self.device)
        if len(self._members) < comm.world_size():
            first = self._members[0]
            value = comm.broadcast(value if comm.rank() == first else None, root=first)
        return value

    def item(self) -> Any:
        if self.numel() != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {tuple(self.shape)}")
        return self.numpy().reshape(()).item()

    def __setitem__(self, index: Any, value: Any) -> None:
        raise NotImplementedError("item assignment (x[i] = v) into a global tensor is not supported yet: build the "
                                  "new value with toynet.where or toynet.cat, or write into x.to_local()")

    def __repr__(self) -> str:
        values = self.numpy()
        parts = [f"placement={self._placement!r}", f"sbp={self.sbp!r}"]
        if values.size == 0:
            parts.append(f"size={tuple(self.shape)}")
        parts.append(f"dtype={self.dtype!r}")
        if self.grad_fn is not None:
            parts.append(f"grad_fn={self.grad_fn!r}")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        return _with_suffixes("tensor(" + format_array(values, indent=len("tensor(")), parts)


def make(array: Any, device: Any, placement: Any, sbp: Any, shape: tuple, requires_grad: bool = False,
         cls: type = GlobalTensor) -> GlobalTensor:
    """A global tensor around this process's part ``array`` (no copy, no communication); ``cls``: a subclass
    of GlobalTensor to make (a global ``nn.Parameter``)."""
    t = GlobalTensor.__new__(cls)
    _alive[0] += 1
    if mode.tracer is None and INTERPRETER is not None:
        mode.tracer = INTERPRETER    # from now on ops look at their inputs: global ones go to the interpreter
    t.array, t.node, t.device, t.requires_grad = array, None, device, requires_grad
    t.grad_fn = t.name = t._version = None
    t._placement, t._sbp, t._logical, t._grad = placement, sbp, tuple(shape), None
    t._layout = (placement, sbp)   # what a compiled nn.Graph plan is keyed on, besides shape, dtype and device
    return t


# ------------------------------------------------------------------------------------------ boxing


class _Box(Op):
    """Boxing, for autograd: the identity on the logical value, so its vjp hands the gradient on as it is."""

    name = "boxing"

    def vjp(self, grad: Any, inputs: tuple, output: Any, **attrs: Any) -> tuple:
        return (grad,)


class _ToGlobal(Op):
    """A local tensor made the local part of a global one. Its gradient is the gradient's part, laid out as
    the tensor (broadcast for a partial sum: each process's summand gets the whole gradient)."""

    name = "to_global"

    def vjp(self, grad: Any, inputs: tuple, output: Any, sbp: Any = None) -> tuple:
        part = box(grad, sbp_kinds.broadcast_on(grad._placement) if _has(sbp, P) else sbp).to_local()
        x = inputs[0]   # (a process outside the placement held no part: its tensor's gradient is zeros)
        return (part if comm.rank() in grad._members else x.new_full(tuple(x.shape), 0.0),)


class _ToLocal(Op):
    """A global tensor's local part. Its gradient is the global one made of the parts' gradients (a partial
    sum for a broadcast tensor: each process's copy was used on its own)."""

    name = "to_local"

    def vjp(self, grad: Any, inputs: tuple, output: Any) -> tuple:
        x = inputs[0]
        partial = tuple(P if s == B else s for s in x._sbp) if isinstance(x._sbp, tuple) else (P if x._sbp == B else
                                                                                               x._sbp)
        return (local_to_global(grad, x._placement, partial),)


BOX, TO_GLOBAL, TO_LOCAL = _Box(), _ToGlobal(), _ToLocal()


def box(x: GlobalTensor, dst: Any) -> GlobalTensor:
    """``x`` laid out as ``dst``: the collective (or local step) of :data:`toynet.distributed.boxing.PATHS`."""
    if dst == x._sbp:
        return x
    array = boxing.convert(x.device.xp, x.array, x._sbp, dst, x._logical, ranks=x._ranks)
    out = make(array, x.device, x._placement, dst, x._logical)
    if mode.grad_enabled and x.requires_grad:
        out.requires_grad, out.grad_fn = True, GradFn(BOX, (x,), {"src": x._sbp, "dst": dst}, None)
    return out


class _Move(Op):
    """A value moved to other processes (another placement). Its gradient moves back."""

    name = "move"

    def vjp(self, grad: Any, inputs: tuple, output: Any, src: Any = None) -> tuple:
        placement, s = src
        return (move(grad, placement, B if s == P else s),)


MOVE = _Move()


def move(x: GlobalTensor, placement: Any, s: Any) -> GlobalTensor:
    """``x`` on the processes of ``placement``, laid out as ``s``: its placement's processes make it whole
    (boxing to B among themselves), the first of them sends it to the processes of both placements, and each
    process of the new one keeps its part. Every process of the run calls it; those in neither placement only
    learn the shape."""
    p = check_for_tensors(placement)
    device = p.device()
    part = boxing.move(x.device.xp, x.array, x._ranks, x._sbp, p._ranks, s, x._logical, x.array.dtype)
    out = make(part if device is x.device else backend.from_host(backend.to_numpy(part, x.device), device, x.dtype),
               device, p, s, x._logical)
    if mode.grad_enabled and x.requires_grad:
        out.requires_grad, out.grad_fn = True, GradFn(MOVE, (x,), {"src": (x._placement, x._sbp)}, None)
    return out


class _ToGlobalLazy(Op):
    """``x.to_global(placement=, sbp=)`` inside ``nn.Graph.build``: recorded as a node, which the graph's
    lowering (:mod:`.graph_lowering`) turns into boxing or a move, once it knows where ``x`` lives."""

    name = "to_global"

    def infer(self, x: Any, placement: Any = None, sbp: Any = None) -> tuple:
        return tuple(x.shape), x.dtype

    def forward(self, xp: Any, a: Any, placement: Any = None, sbp: Any = None) -> Any:
        raise RuntimeError("x.to_global() in nn.Graph.build() needs a graph of global tensors: give the graph global "
                           "inputs or parameters (e.g. model.to_global(placement=..., sbp=...))")

    def vjp(self, grad: Any, inputs: tuple, output: Any, placement: Any = None, sbp: Any = None) -> tuple:
        return (apply(TO_GLOBAL_BACK, grad, inputs[0]),)


class _ToGlobalBack(Op):
    """The gradient of a traced ``to_global``: back to the placement (and a layout) of the forward input, the
    second input (read for its layout only)."""

    name = "to_global_grad"
    nondifferentiable = (1,)

    def infer(self, grad: Any, like: Any) -> tuple:
        return tuple(grad.shape), grad.dtype


TO_GLOBAL_LAZY, TO_GLOBAL_BACK = _ToGlobalLazy(), _ToGlobalBack()


def relayout_(t: GlobalTensor, s: Any) -> GlobalTensor:
    """Lay ``t`` out as ``s`` *in place*: the same tensor object (held by an optimizer's state, a graph's
    plan) now holds this process's part under ``s``. Used for ZeRO's sharded optimizer slots."""
    if s != t._sbp:
        t.array = boxing.convert(t.device.xp, t.array, t._sbp, s, t._logical, ranks=t._ranks)
        t._sbp, t._layout = s, (t._placement, s)
    return t


# ------------------------------------------------------------------------------------------ making them


def local_to_global(x: Tensor, placement: Any = None, sbp: Any = None) -> GlobalTensor:
    """``x.to_global(placement, sbp)`` for a local ``x``: ``x`` becomes this process's part (no copy). The
    logical shape comes from every process's part (one small collective, which also checks them)."""
    if placement is None or sbp is None:
        raise TypeError("to_global on a local tensor needs both placement= and sbp=, e.g. "
                        "x.to_global(placement=toynet.placement('cpu', ranks=[0, 1]), sbp=toynet.sbp.split(0))")
    p = check_for_tensors(placement)
    s = sbp_kinds.layout(sbp, p, x.ndim)
    if x.device != p.device():
        x = x.to(p.device())
    logical = _logical_shape(tuple(x.shape), s, p._ranks)
    if comm.rank() not in p.flat_ranks():   # not one of the placement's processes: its tensor is not a part
        x = Tensor.wrap(x.array.reshape(-1)[:0].copy(), x.device)
    out = make(x.array, x.device, p, s, logical)
    if mode.grad_enabled and x.requires_grad:
        out.requires_grad, out.grad_fn = True, GradFn(TO_GLOBAL, (x,), {"sbp": s}, None)
    return out


def _logical_shape(local: tuple, s: Any, ranks: tuple) -> tuple:
    """The logical shape of parts ``local`` laid out as ``s`` over ``ranks`` (every process learns it)."""
    everyone = comm.all_gather_object(local)
    if isinstance(s, tuple):
        return boxing_nd.logical_shape(dict(enumerate(everyone)), s, ranks)
    shapes = [shape for r, shape in enumerate(everyone) if r in ranks]
    local = shapes[0]
    listed = ", ".join(f"rank {r}: {shape}" for r, shape in zip(ranks, shapes))
    if not isinstance(s, split):
        if len(set(shapes)) > 1:
            raise RuntimeError(f"to_global with {s!r}: every process must hold a part of the same shape; got {listed}")
        return local
    d = s.dim
    if len({shape[:d] + shape[d + 1:] for shape in shapes}) > 1:
        raise RuntimeError(f"to_global with {s!r}: the parts may differ along dim {d} only; got {listed}")
    sizes = [shape[d] for shape in shapes]
    if sizes != comm.shard_sizes(sum(sizes), len(sizes)):
        raise RuntimeError(f"to_global with {s!r}: the parts have sizes {sizes} along dim {d}, but toynet cuts a "
                           f"length of {sum(sizes)} into {comm.shard_sizes(sum(sizes), len(sizes))} (the first ones "
                           "one longer); make the parts that size")
    return local[:d] + (sum(sizes),) + local[d + 1:]


def from_logical(t: Tensor, placement: Any, sbp: Any) -> GlobalTensor:
    """A global tensor whose logical value is ``t``: what ``toynet.randn(..., placement=, sbp=)`` makes. The
    values are the first rank's (broadcast), so every process agrees even with different random seeds."""
    if placement is None or sbp is None:
        raise TypeError("a global tensor needs both placement= and sbp=, e.g. placement=toynet.placement('cpu', "
                        "ranks=[0, 1]), sbp=toynet.sbp.broadcast")
    p = check_for_tensors(placement)
    s = sbp_kinds.layout(sbp, p, t.ndim)
    whole = comm.broadcast(backend.to_numpy(t.array, t.device), root=p.flat_ranks()[0])
    device = p.device()
    part = boxing.component(whole, s, ranks=p._ranks)
    return make(backend.from_host(part, device, t.dtype), device, p, s, tuple(t.shape), requires_grad=t.requires_grad)


def _with_suffixes(head: str, parts: list[str], linewidth: int = 80) -> str:
    """``head, part, part)``, a part going to a new line (indented under the values) when the line would
    pass ``linewidth``, as OneFlow prints tensors."""
    text, line = head, len(head) - head.rfind("\n") - 1
    for part in parts:
        if line + len(part) + 2 > linewidth:
            text, line = text + ",\n" + " " * len("tensor(") + part, len("tensor(") + len(part)
        else:
            text, line = text + ", " + part, line + len(part) + 2
    return text + ")"


# ------------------------------------------------------------------------------ on every (local) Tensor


def _has(s: Any, kind: Any) -> bool:
    return kind in s if isinstance(s, tuple) else s == kind


class NotGlobalError(AttributeError, RuntimeError):
    """A local tensor asked for what only global ones have (a RuntimeError, as OneFlow raises; an
    AttributeError too, so that ``hasattr(x, "placement")`` is False for a local tensor)."""


class LocalTensorMethods:
    """Attached to ``Tensor``: what a local tensor says about being global (``GlobalTensor`` overrides)."""

    is_global = property(lambda self: False, doc="A global tensor is one logical tensor held in parts by processes.")
    is_local = property(lambda self: True, doc="A local tensor lives in this process only.")

    @property
    def placement(self) -> Any:
        raise NotGlobalError("a local tensor has no placement (it lives in this process, on x.device); make it "
                           "global with x.to_global(placement=..., sbp=...)")

    @property
    def sbp(self) -> Any:
        raise NotGlobalError("a local tensor has no sbp: SBP describes how a global tensor is laid out over "
                           "processes; make it global with x.to_global(placement=..., sbp=...)")

    def to_global(self, placement: Any = None, sbp: Any = None) -> GlobalTensor:
        """Make this local tensor the local part of a global tensor laid out as ``sbp`` over ``placement``
        (inside ``nn.Graph.build``: a node, lowered to boxing or a move)."""
        if self.is_lazy:
            p = None if placement is None else check_for_tensors(placement)
            s = None if sbp is None else sbp_kinds.layout(sbp, p, self.ndim)
            return apply(TO_GLOBAL_LAZY, self, placement=p, sbp=s)
        return local_to_global(self, placement, sbp)

    def to_local(self) -> Tensor:
        raise RuntimeError("to_local() takes the local part of a global tensor; this tensor is local already")


attach(LocalTensorMethods, Tensor)
