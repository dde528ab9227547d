"""Guards: what a compiled plan took for granted, checked before every run of it.

Tracing runs ``build`` once and bakes into the plan everything Python saw then:

* which tensor each parameter and buffer of the modules is (the plan reads those very tensors), and
  the shape, dtype and device of its array (the generated code is written for them);
* every module's ``training`` flag (dropout and batch norm traced one branch) and its other plain
  settings (``p`` of a dropout, ``eps`` of a batch norm, ``reduction`` of a loss);
* whether each parameter requires grad (only those get updates);
* each optimizer's parameter groups, their hyper-parameters (``momentum``, ``weight_decay``, ``betas``...:
  Python numbers in the traced update rule) and its state slots; only ``lr`` is fed in on every call.

A plan is right only while all of that still holds. ``torch.compile`` calls these checks *guards*; so
does toynet. A :class:`Guard` is generated code too: one boolean expression of identity tests and
comparisons, some twenty nanoseconds each, so checking it on every call costs well under a
microsecond for a small model. Where several conditions can only change together, one *stamp* stands
for them on the hot path: a state whose tensor still holds the very array it held at the last check
cannot have a new shape, dtype or device, so ``t.array is <that array>`` is tested, and the full
conditions only when it fails (after an eager step replaced the array, say), which then stamps the new
array. Likewise the modules: every change made through ``nn.Module``'s methods (assigning an attribute
or a parameter, ``register_buffer``, ``train()``/``eval()``, ``del``) adds one to
``toynet.nn.module.CHANGES``, so the hot path only compares that count (and the number of each
container's children, which ``del model[0]`` changes without a method of Module). When the guard
fails, :meth:`Guard.failures` says in words which condition failed, and ``nn.Graph`` compiles a new
plan (``graph.debug(1)`` prints why) instead of running stale code.

Not guarded: values the plan copied in as constants (eager tensors ``build`` captured that are not
parameters or buffers: register them as buffers) and Python state outside the modules and optimizers.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from ..dynamic.tensor import Tensor
from .graph_amp import guard_features
from .module import CHANGES, Module

#: Types of settings compared by value (``==``); anything else is compared by identity.
_PLAIN = (bool, int, float, str, type(None))
_TERMS_PER_STATEMENT = 200   # the generated check is split into statements of this many terms


def _plain(value: Any) -> bool:
    if type(value) in _PLAIN:
        return True
    return type(value) is tuple and all(_plain(v) for v in value)


class Guard:
    """A list of conditions and, for each, how to say that it failed; :meth:`check` tests them all."""

    def __init__(self) -> None:
        #: The arrays of the states stamped with :meth:`stamp_array`, in order, as of the last check: what
        #: the plan is given (kept here, it costs nothing to pass them on every call).
        self.arrays: list = []
        self._namespace: dict[str, Any] = {"_stamps": [], "_arrays": self.arrays}
        self._names: dict[int, str] = {}
        self._terms: list[tuple[str, Callable[[], str]]] = []
        self._fast: list[str] = []          # the hot path: the terms no stamp stands for, and the stamps
        self._stamps: list[str] = []        # the source each stamp is taken from
        self.check: Callable[[], bool] = lambda: True

    def __len__(self) -> int:
        return len(self._terms)

    def name(self, obj: Any) -> str:
        """The name ``obj`` has in the generated code (the guard keeps a reference to it)."""
        key = id(obj)
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = f"o{len(self._names)}"
            self._namespace[found] = obj
        return found

    def require(self, expression: str, why: Callable[[], str], stamped: bool = False) -> None:
        """Add a condition (Python source over :meth:`name` names) and what to say when it is false;
        ``stamped``: a stamp (see :meth:`stamp`) stands for it on the hot path."""
        self._terms.append((expression, why))
        if not stamped:
            self._fast.append(expression)

    def stamp(self, source: str, by_value: bool = False) -> None:
        """Test on the hot path only that ``source`` is the very object it was at the last full check (or
        equal to it: ``by_value``); the conditions it stands for (added with ``stamped=True``) are checked
        only when it is not."""
        self._fast.append(f"{source} {'==' if by_value else 'is'} _stamps[{len(self._stamps)}]")
        self._stamps.append(source)

    def stamp_array(self, tensor: Tensor) -> None:
        """:meth:`stamp` a state tensor's array into :attr:`arrays`."""
        self._fast.append(f"{self.name(tensor)}.array is _arrays[{len(self.arrays)}]")
        self.arrays.append(tensor.array)

    def same(self, source: str, value: Any) -> str:
        """Source testing that ``source`` still gives ``value``: by identity, or by value for plain data."""
        if value is None or type(value) is bool:
            return f"{source} is {value}"
        if _plain(value):
            v = self.name(value)
            return f"({source} is {v} or {source} == {v})"
        return f"{source} is {self.name(value)}"

    def compile(self) -> None:
        """Generate :meth:`check`: True when every condition holds (a missing key or attribute: False).
        It tests the hot-path terms; if one fails, every condition, and stamps anew if they hold. (The
        function testing every condition is generated only the first time it is needed.)"""
        self._namespace["_recheck"] = self._recheck
        self._namespace["_stamps"] = [eval(source, self._namespace) for source in self._stamps]  # noqa: S307
        self._exec(_function("check", self._fast, "_recheck()"))
        self.check = self._namespace["check"]

    def hot_terms(self) -> list[str]:
        """The hot path's terms (source over this guard's names): what :meth:`check` tests first."""
        return list(self._fast)

    def function(self, name: str, lines: list[str], names: dict[str, Any]) -> Callable:
        """Compile ``lines`` (the source of ``def name(...)``, which may use :meth:`hot_terms`) with this
        guard's names and ``names`` (kept by the function alone: the guard does not keep them alive)."""
        namespace = {**self._namespace, **names}
        self._exec(lines, namespace, f"<toynet {name}>")
        return namespace[name]

    def _exec(self, lines: list[str], namespace: dict | None = None, filename: str = "<toynet guard>") -> None:
        code = compile("\n".join(lines) + "\n", filename, "exec")
        exec(code, self._namespace if namespace is None else namespace)  # noqa: S102  (our own generated code)

    def _recheck(self) -> bool:
        if "full" not in self._namespace:
            restamp = [f"    _stamps[{k}] = {source}" for k, source in enumerate(self._stamps)]
            restamp += [f"    _arrays[{k}] = {t}.array" for k, t in enumerate(
                term.split(".array is _arrays[")[0] for term in self._fast if ".array is _arrays[" in term)]
            self._exec(_function("full", [t for t, _ in self._terms], "False")
                       + ["def restamp():"] + (restamp or ["    pass"]))
        if self._namespace["full"]():
            self._namespace["restamp"]()
            return True
        return False

    def failures(self, limit: int = 3) -> list[str]:
        """What no longer holds, in words (at most ``limit`` of them)."""
        found = []
        for expression, why in self._terms:
            try:
                ok = eval(expression, self._namespace)  # noqa: S307  (our own generated expression)
            except Exception:
                ok = False
            if not ok:
                found.append(why())
                if len(found) == limit:
                    break
        return found


def _function(name: str, terms: list[str], otherwise: str) -> list[str]:
    """``def name():`` returning True when all ``terms`` hold, else ``otherwise`` (also on an exception)."""
    lines = [f"def {name}():", "    try:", "        pass"]
    for start in range(0, len(terms), _TERMS_PER_STATEMENT):
        chunk = "\n                and ".join(terms[start:start + _TERMS_PER_STATEMENT])
        lines.append(f"        if not ({chunk}):\n            return {otherwise}")
    return lines + ["    except Exception:", f"        return {otherwise}", "    return True"]


# ------------------------------------------------------------------------------------------- building


def _walk(modules: dict[str, Module]) -> Iterator[tuple[str, Module]]:
    seen: set[int] = set()
    stack = list(reversed(list(modules.items())))
    while stack:
        path, module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield path, module
        children = [(f"{path}.{k}", m) for k, m in module.__dict__["_modules"].items() if m is not None]
        stack.extend(reversed(children))


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return repr(value)


def guard_modules(guard: Guard, modules: dict[str, Module]) -> None:
    """Each module's registries (the very parameters, buffers and submodules) and plain settings; on the
    hot path, the count of module changes and the number of each module's children."""
    guard.stamp(f"{guard.name(CHANGES)}[0]", by_value=True)
    for path, module in _walk(modules):
        attributes = module.__dict__
        d = guard.name(attributes)
        for key, value in attributes.items():
            if _plain(value):
                source = f"{d}[{key!r}]"
                what = ("model.train()/eval() changed it" if key == "training" else "it was changed")
                guard.require(guard.same(source, value), lambda p=path, k=key, v=value, a=attributes, w=what:
                              f"{p}.{k} is {_describe(a.get(k, '<deleted>'))}, the plan was compiled for "
                              f"{v!r} ({w})", stamped=True)
        for kind, registry_name in (("parameter", "_parameters"), ("buffer", "_buffers"), ("submodule", "_modules")):
            registry = attributes[registry_name]
            r = guard.name(registry)
            guard.require(f"len({r}) == {len(registry)}" if registry else f"not {r}",
                          lambda p=path, r=registry, n=len(registry), k=kind:
                          f"{p} has {len(r)} {k}s, the plan was compiled with {n}",
                          stamped=not (kind == "submodule" and registry))
            for key, value in registry.items():
                guard.require(guard.same(f"{r}[{key!r}]", value), lambda p=path, k=key, v=value, r=registry, c=kind:
                              f"{p}.{k} is {_describe(r.get(k, '<deleted>'))}, not the {c} the plan was "
                              f"compiled with (it was replaced: the plan would keep using the old one)",
                              stamped=True)


def guard_states(guard: Guard, states: list[tuple[str, Tensor]], parameters: set[str]) -> None:
    """Every state tensor the plan reads (``(name, tensor)`` in the plan's order): its array's shape, dtype
    and device; requires_grad of parameters."""
    for name, t in states:
        v = guard.name(t)
        array = t.array
        shape, dtype = array.shape, array.dtype
        guard.stamp_array(t)
        guard.require(f"{v}.array.shape == {guard.name(shape)}", lambda n=name, t=t, s=shape:
                      f"{n} has shape {tuple(t.array.shape)}, the plan was compiled for {tuple(s)} "
                      "(its .data was replaced)", stamped=True)
        dt = guard.name(dtype)
        guard.require(f"({v}.array.dtype is {dt} or {v}.array.dtype == {dt})", lambda n=name, t=t, d=dtype:
                      f"{n} has dtype {t.array.dtype}, the plan was compiled for {d}", stamped=True)
        guard.require(f"{v}.device is {guard.name(t.device)}", lambda n=name, t=t, d=t.device:
                      f"{n} is on {t.device}, the plan was compiled for {d}", stamped=True)
        if name in parameters:
            guard.require(f"{v}.requires_grad is {bool(t.requires_grad)}", lambda n=name, t=t, r=t.requires_grad:
                          f"{n}.requires_grad is {t.requires_grad}, the plan was compiled for {r}")


def guard_optimizers(guard: Guard, graph: Any, bindings: list, states: dict[str, Tensor]) -> None:
    """The optimizers' groups, hyper-parameters (all but the fed ``lr``) and state slots."""
    # (nn.Graph itself drops its plans when it gets another optimizer or remakes its step counter or
    # learning-rate tensors: no guard is needed for those.)
    for i, binding in enumerate(bindings):
        opt = binding.optimizer
        label = f"optimizer {i} ({type(opt).__name__})"
        o = guard.name(opt)
        groups = opt.param_groups
        guard.require(f"len({o}.param_groups) == {len(groups)}", lambda o=opt, n=len(groups), lb=label:
                      f"{lb} has {len(o.param_groups)} parameter groups, the plan was compiled with {n}")
        for k, group in enumerate(groups):
            gr = guard.name(group)
            guard.require(f"{o}.param_groups[{k}] is {gr}", lambda lb=label, k=k:
                          f"{lb}'s parameter group {k} was replaced")
            params = group["params"]
            guard.require(f"{gr}['params'] is {guard.name(params)} and len({gr}['params']) == {len(params)}",
                          lambda lb=label, k=k: f"{lb}'s parameter group {k} has other parameters now")
            for j, p in enumerate(params):
                guard.require(f"{gr}['params'][{j}] is {guard.name(p)}", lambda lb=label, k=k:
                              f"{lb}'s parameter group {k} has other parameters now")
            for key, value in group.items():
                if key in ("params", "lr"):
                    continue
                guard.require(guard.same(f"{gr}[{key!r}]", value), lambda lb=label, k=k, key=key, v=value, gp=group:
                              f"{lb}'s {key} is {_describe(gp.get(key, '<deleted>'))} in parameter group {k}, "
                              f"the plan was compiled for {v!r} (only lr is fed in on every call; another "
                              "hyper-parameter is part of the compiled update rule)")
        slots = opt.state
        s = guard.name(slots)
        guard.require(f"{o}.state is {s}", lambda lb=label: f"{lb}'s state was replaced (load_state_dict)")
        for p, slot in slots.items():
            sp = guard.name(slot)
            size = f"len({sp}) == {len(slot)}" if slot else f"not {sp}"
            guard.require(f"{s}[{guard.name(p)}] is {sp} and {size}", lambda lb=label:
                          f"{lb}'s state of a parameter was replaced")
            for key, t in slot.items():
                guard.require(f"{sp}[{key!r}] is {guard.name(t)}", lambda lb=label, key=key:
                              f"{lb}'s state slot {key!r} of a parameter was replaced")


def guard_graph(graph: Any, traced: Any, states: dict[str, Tensor], order: list[str]) -> Guard:
    """The guard of a plan ``graph`` (an nn.Graph) just compiled: its modules, the states the plan reads
    (``traced``: the traced graph, which says which are parameters; ``order``: the plan's state names),
    its optimizers. ``guard.arrays`` are the state arrays for the plan."""
    guard = Guard()
    parameters = {n.state_name for n in traced.states if n.state_kind == "parameter"}
    guard_states(guard, [(name, states[name]) for name in order], parameters)
    guard_modules(guard, graph._modules)
    guard_optimizers(guard, graph, graph._optimizers, states)
    guard_features(guard, graph)
    guard.compile()
    return guard
