"""What autograd says when it cannot go on: no seed for a root, a gradient of the wrong float dtype, a saved
tensor written in place after its op ran. Each error names what was wrong and how to fix it; the engine
(:mod:`toynet.dynamic.autograd`) only decides *when* to raise them.
"""

from __future__ import annotations

from typing import Any, Sequence


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "grad_fn") and hasattr(x, "new_tensor")


def no_seed_error(t: Any, i: int, what: str) -> Exception:
    """Why root ``t`` (the ``i``-th) cannot start a backward pass without a gradient."""
    if not _is_tensor(t):
        return TypeError(f"{what}: expected tensors, got {type(t).__name__}")
    if not t.requires_grad:
        return RuntimeError(
            f"{what}: tensor {i} of shape {tuple(t.shape)} does not require grad and has no grad_fn, so there is "
            "nothing to differentiate. Create the leaves with requires_grad=True (or use nn.Parameter), and "
            "don't compute the loss under toynet.no_grad().")
    return RuntimeError(
        f"{what}: the tensor has shape {tuple(t.shape)}; without a gradient argument backward() needs a "
        "one-element tensor such as a loss. Reduce it first (t.sum() or t.mean()) or pass "
        "gradient=toynet.ones_like(t).")


def mixed_float_error(fn: Any, leaf: Any, grad: Any, roots: Sequence[Any]) -> TypeError:
    """A float32 leaf was handed a float64 gradient: say where float64 came in and how to avoid it."""
    wanted, got = leaf.dtype.name, grad.dtype.name

    def foreign(record: Any) -> list:
        return [(i, x) for i, x in enumerate(record.inputs or ())
                if _is_tensor(x) and i not in record.op.nondifferentiable and x.dtype is not leaf.dtype]
    other = foreign(fn)
    # Follow the other dtype back to the op where it met this one's: there it came in with an input (data).
    while other and other[0][1].grad_fn is not None and foreign(other[0][1].grad_fn):
        fn = other[0][1].grad_fn
        other = [(i, x) for i, x in foreign(fn) if x.grad_fn is None] or foreign(fn)
    where = (f"{fn.op.name} received input {other[0][0]} of shape {tuple(other[0][1].shape)} and dtype "
             f"{other[0][1].dtype.name} with this {wanted} tensor, so its output and every gradient through it "
             f"are {got}" if other else f"{got} values came in after {fn.op.name} (the loss is "
             f"{roots[0].dtype.name}): a {got} tensor, such as data or a loss target made from a NumPy array, "
             f"was combined with {wanted} ones")
    what = f"{leaf.name!r}, " if leaf.name else ""
    fix = "x = x.float()" if wanted == "float32" else f"x = x.to(toynet.{wanted})"
    return TypeError(
        f"backward: the {wanted} leaf tensor ({what}shape {tuple(leaf.shape)}) would get a {got} gradient: "
        f"{where}. Convert the data (and targets) to the model's dtype before the call: {fix} (NumPy makes "
        f"float64 arrays by default); or compute in one dtype throughout (model.to(toynet.{got})).")


def modified_error(fn: Any, x: Any, role: str, version: Any) -> RuntimeError:
    """A tensor a vjp needs (``fn``'s ``role``) was written in place since the op ran: say by what, and how to fix it."""
    later = sum(1 for s in version.stamps if s > fn.epoch)
    exact = later < len(version.stamps) or len(version.stamps) == version.n
    made = f", which is the output of {x.grad_fn.name}," if x.grad_fn is not None else ""
    rebased = version.rebased > fn.epoch
    used, why = ("used", "then gave it a new history (gradients flow through that write), so its gradient would "
                 "take that history instead of the one the op used") if rebased else \
        ("saved", "changed it after that op ran, so the gradient would be computed from the new values")
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[tensor of shape {tuple(x.shape)}, dtype {x.dtype.name}]{made} is at version {version.n}; expected "
        f"version {version.n - later}{'' if exact else ' or earlier'} instead. It was {used} by {fn.op.name} "
        f"({fn.name}) as its {role}, and {version.writer} {why}. Fix: write into a copy (y = x.clone(); "
        "y.mul_(2)), use the out-of-place form (x = x * 2), or call backward() before the in-place write.")
