"""A plan's guard as generated code: the lesson's conditions (:mod:`toynet.nn.graph_plans`) compiled into one
boolean expression, with *stamps* on its hot path. What the fast path checks instead, with the same verdicts.

The lesson's guard reads every condition on every call: a loop of Python calls, several microseconds for a
small model. Here each condition becomes a term of source (``o3['training'] is e7``, ``len(o5) == e8``),
some twenty nanoseconds each, and where many conditions can only change together one *stamp* stands for
them on the hot path:

* a state tensor that still holds the very array it held at the last check cannot have a new shape, dtype
  or device, so ``o2.array is _arrays[0]`` is tested (``_arrays`` are also the state arrays handed to the
  plan), and the state's conditions only when it fails (an eager step replaced the array, say);
* every change made through ``nn.Module``'s methods and nn.Graph's settings adds one to
  ``toynet.nn.module.CHANGES``, so the conditions about modules and settings are tested only when that
  count moved.

When a stamp fails, every condition is checked as the lesson checks it, and if all hold the stamps are taken
anew. The source holds only names toynet made (``o3``, ``e7``, ``k2``) and attribute names of its own:
every object, key and expected value is in the namespace, none is written into the code.
"""

from __future__ import annotations

from typing import Any, Callable

from ...dynamic.tensor import Tensor
from ...mode import fast_replacement
from .. import graph_plans
from ..graph_plans import Condition, conditions_of
from ..module import CHANGES

_TERMS_PER_STATEMENT = 200   # the generated check is split into statements of this many terms
_STAMPED = {"module": "changes", "graph": "changes", "state": "array"}   # what stands for a condition


class CompiledGuard:
    """The lesson's conditions as generated code; ``check()`` is the hot path."""

    def __init__(self, conditions: list[Condition]):
        self.conditions = conditions
        #: The arrays of the states, as of the last check: what the plan is given.
        self.arrays: list = []
        self._stamps = [CHANGES[0]]            # the count of module changes at the last check
        self.namespace: dict[str, Any] = {"_arrays": self.arrays, "_changes": CHANGES, "_stamps": self._stamps,
                                          "_recheck": self._recheck}
        self._names: dict[int, str] = {}
        self._states: list[Tensor] = []        # the state tensors stamped, in order
        self._hot: list[str] = []
        for c in conditions:
            if c.about == "state" and not any(c.root is t for t in self._states):
                self._stamp_array(c.root)
            if c.about not in _STAMPED:
                self._hot.append(self.term(c))
        self._hot.append("_changes[0] == _stamps[0]")
        self.check: Callable[[], bool] = self.function("check", _function("check", self._hot, "_recheck()"), {})

    def __len__(self) -> int:
        return len(self.conditions)

    # ------------------------------------------------------------------------------------ source

    def name(self, obj: Any) -> str:
        """The name ``obj`` has in the generated code (the guard keeps a reference to it)."""
        found = self._names.get(id(obj))
        if found is None:
            found = self._names[id(obj)] = f"o{len(self._names)}"
            self.namespace[found] = obj
        return found

    def term(self, c: Condition) -> str:
        """Condition ``c`` as source."""
        source = self.name(c.root)
        for step in c.path:
            if step[0] == "key":
                source = f"{source}[{self.name(step[1])}]"
            elif step[0] == "attr":
                if not step[1].isidentifier():
                    raise ValueError(f"guard: attribute {step[1]!r} is not a name")
                source = f"{source}.{step[1]}"
            elif step[0] == "len":
                source = f"len({source})"
            elif step[0] == "of":
                source = f"{self.name(step[1])}({source})"
            else:
                source = f"{source}({self.name(step[1])})"
        expected = self.name(c.expected)
        return f"{source} is {expected}" if c.same == "is" else f"({source} is {expected} or {source} == {expected})"

    def _stamp_array(self, tensor: Tensor) -> None:
        self._hot.append(f"{self.name(tensor)}.array is _arrays[{len(self.arrays)}]")
        self._states.append(tensor)
        self.arrays.append(tensor.array)

    def hot_terms(self) -> list[str]:
        """The hot path's terms (source over this guard's names): what :meth:`check` tests first."""
        return list(self._hot)

    def function(self, name: str, lines: list[str], names: dict[str, Any]) -> Callable:
        """Compile ``lines`` (the source of ``def name(...)``, which may use :meth:`hot_terms`) with this
        guard's names and ``names`` (kept by the function alone: the guard does not keep them alive)."""
        namespace = {**self.namespace, **names}
        exec(compile("\n".join(lines) + "\n", f"<toynet {name}>", "exec"), namespace)  # noqa: S102 (our own code)
        return namespace[name]

    # ------------------------------------------------------------------------------ full check

    def _recheck(self) -> bool:
        """A stamp failed: check every condition; if all hold, take the stamps anew."""
        if not all(c.holds() for c in self.conditions):
            return False
        self.arrays[:] = [t.array for t in self._states]
        self._stamps[0] = CHANGES[0]
        return True

    def failures(self, limit: int = 3) -> list[str]:
        return [c.why() for c in self.conditions if not c.holds()][:limit]


def _function(name: str, terms: list[str], otherwise: str) -> list[str]:
    """``def name():`` returning True when all ``terms`` hold, else ``otherwise`` (also on an exception)."""
    lines = [f"def {name}():", "    try:", "        pass"]
    for start in range(0, len(terms), _TERMS_PER_STATEMENT):
        chunk = "\n                and ".join(terms[start:start + _TERMS_PER_STATEMENT])
        lines.append(f"        if not ({chunk}):\n            return {otherwise}")
    return lines + ["    except Exception:", f"        return {otherwise}", "    return True"]


@fast_replacement(graph_plans, "guard_graph")
def guard_graph(graph: Any, traced: Any, states: dict[str, Tensor], order: list[str]) -> CompiledGuard:
    """The lesson's conditions for this plan, compiled."""
    return CompiledGuard(conditions_of(graph, [(name, states[name]) for name in order]))
