"""The repeat call: ``graph(x, y)`` again with the very same tensors, as one generated function.

A training loop over fixed data (the tutorial's poly fit) calls a graph with the same tensors every
step. Then nothing about the inputs can have changed but their values, and a call only has to

1. check that the call is that repeat: the same tensors, still holding the same arrays;
2. check the plan's guard (what the plan took for granted still holds, see :mod:`toynet.nn.graph_plans`);
3. feed the optimizers' current learning rates into the plan (a scheduler may have changed them);
4. run the plan and wrap its outputs as tensors.

Done as four Python functions, that is about 1.5 microseconds of calls, loops and lookups around a plan
that may itself take ten (the poly fit's). So ``nn.Graph`` generates the four as *one* function per call
site, the way the guard and the plan themselves are generated: the guard's hot-path terms are written
inline after the input tests, the learning rates are fed only when one is no longer the number fed
last, and the plan's own body follows, inlined (``repeat.source`` shows the whole function). It
returns :data:`MISS` when the call is not the repeat it was made for, or a term of the guard fails;
``nn.Graph`` then takes the general path (flatten the arguments, look the plan up, recheck the guard
in full), which also makes the next repeat function. Like the guard's and the plan's, the code holds
only names and literals toynet wrote itself.
"""

from __future__ import annotations

from typing import Any, Callable

from ...dynamic.tensor import Tensor
from ...mode import fast_replacement
from ...static.trace import TENSOR, unflatten
from ...static.fast.compile import FastPlan
from ..graph import Graph

#: What a repeat function returns when it does not apply to the call.
MISS = object()

_lesson_call = Graph.__call__


@fast_replacement(Graph, "__call__")
def call(self: Graph, *args: Any, **kwargs: Any) -> Any:
    """``graph(...)``: the repeat function of the last call if this call is its repeat, else the lesson's call
    (which finds or compiles the plan), after which a call of tensors only gets a repeat function of its own."""
    self._check_initialized()
    with self._call_lock:   # (one call at a time, as the lesson's call: see Graph.__init__)
        repeat = self.__dict__.get("_repeat")
        if repeat is not None and not kwargs:   # the same tensors as the last call (a loop over fixed data)
            try:
                result = repeat(args)
            except Exception as error:
                self._run_failed(error)
                raise
            if result is not MISS:
                return result
        result = _lesson_call(self, *args, **kwargs)
        compiled = self._last
        flat = not kwargs and all(type(a) is Tensor for a in args) and isinstance(compiled.plan, FastPlan)
        self.__dict__["_repeat"] = repeat_call(compiled, args, self._compiled, self._optimizers) if flat else None
        return result


def repeat_call(compiled: Any, args: tuple, cache: Any, bindings: list) -> Callable[[tuple], Any]:
    """The function that runs ``compiled``'s plan for a call with exactly ``args`` (all tensors), while
    ``compiled`` is still one of the graph's plans (in ``cache``); ``bindings``: the graph's optimizers (see
    ``graph_train.OptimizerBinding``)."""
    plan = compiled.plan
    names: dict[str, Any] = {**plan.namespace, "_MISS": MISS, "_inputs": [t.array for t in args],
                             "_scheduled": compiled.commit, "_device": plan.device, "_make": Tensor._make,
                             "_plans": cache._recent, "_entry": compiled, "_entry_id": id(compiled)}
    tests = [f"len(args) == {len(args)}", "_plans.get(_entry_id) is _entry"]
    for k, t in enumerate(args):
        names[f"_arg{k}"], names[f"_array{k}"] = t, t.array
        tests.append(f"args[{k}] is _arg{k} and _arg{k}.array is _array{k}")
    feeds = []
    for i, binding in enumerate(bindings):
        # The learning rates as last fed by this function: a float (a new one is a new object) is fed only
        # when it is not the one fed last; anything else (a 0-d tensor, an array) on every call.
        groups = binding.optimizer.param_groups
        names[f"_feed{i}"], names[f"_fed{i}"] = binding.feed_learning_rates, [None] * len(groups)
        for k, group in enumerate(binding.optimizer.param_groups):
            names[f"_group{i}_{k}"] = group   # (the guard checks that group k is still this dict)
            feeds.append((i, k))
    spec = compiled.traced.output_structure
    if spec == TENSOR:   # build() returned one tensor: the common case, without the tree walk
        result = f"_make({plan.output_sources[0]}, None, _device, False)"
    else:
        names["_rebuild"] = lambda arrays: unflatten(spec, iter([Tensor.wrap(a, plan.device) for a in arrays]))
        sources = plan.output_sources   # (none when build() returns nothing)
        result = f"_rebuild(({', '.join(sources)}{',' if len(sources) == 1 else ''}))"
    lines = ["def repeat(args):", "    try:",
             "        if not (" + "\n                and ".join(tests + compiled.guard.hot_terms()) + "):",
             "            return _MISS",
             "    except Exception:   # a guard term that cannot be evaluated any more (a deleted key)",
             "        return _MISS"]
    for i, k in feeds:
        lines += [f"    if _group{i}_{k}['lr'] is not _fed{i}[{k}]:", f"        _feed{i}()",
                  f"        _fed{i}[{k}] = _group{i}_{k}['lr'] if type(_group{i}_{k}['lr']) is float else None"]
    lines += ["    # the plan (see graph.plan.source), on the arrays of this call site",
              "    inputs, states, commit = _inputs, _arrays, _scheduled"] + plan.body + [f"    return {result}"]
    repeat = compiled.guard.function("repeat", lines, names)
    repeat.source = "\n".join(lines) + "\n"
    return repeat
