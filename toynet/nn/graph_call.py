"""The repeat call: ``graph(x, y)`` again with the very same tensors, as one generated function.

A training loop over fixed data (the tutorial's poly fit) calls a graph with the same tensors every
step. Then nothing about the inputs can have changed but their values, and a call only has to

1. check that the call is that repeat: the same tensors, still holding the same arrays;
2. check the plan's guard (what the plan took for granted still holds, see :mod:`.graph_guard`);
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

from ..static.arguments import TENSOR, unflatten
from ..dynamic.tensor import Tensor

#: What a repeat function returns when it does not apply to the call.
MISS = object()


def repeat_call(compiled: Any, args: tuple, inputs: list, bindings: list) -> Callable[[tuple], Any]:
    """The function that runs ``compiled``'s plan for a call with exactly ``args`` (all tensors, fed to the
    plan as ``inputs``); ``bindings``: the graph's optimizers (see ``graph_train.OptimizerBinding``)."""
    plan = compiled.plan
    names: dict[str, Any] = {**plan.namespace, "_MISS": MISS, "_inputs": inputs, "_scheduled": compiled.commit,
                             "_device": plan.device, "_make": Tensor._make}
    tests = [f"len(args) == {len(args)}"]
    for k, t in enumerate(args):
        names[f"_arg{k}"], names[f"_array{k}"] = t, t.array
        tests.append(f"args[{k}] is _arg{k} and _arg{k}.array is _array{k}")
    feeds = []
    for i, binding in enumerate(bindings):
        names[f"_feed{i}"], names[f"_fed{i}"] = binding.feed_learning_rates, binding.fed
        for k, group in enumerate(binding.optimizer.param_groups):
            # The guard checks that group k is still this dict; its "lr" is the float fed last, or not (see
            # OptimizerBinding.feed_learning_rates: anything but a float is fed on every call).
            names[f"_group{i}_{k}"] = group
            feeds.append((i, f"_group{i}_{k}['lr'] is not _fed{i}[{k}]"))
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
    for i, condition in feeds:
        lines += [f"    if {condition}:", f"        _feed{i}()"]
    lines += ["    # the plan (see graph.plan.source), on the arrays of this call site",
              "    inputs, states, commit = _inputs, _arrays, _scheduled"] + plan.body + [f"    return {result}"]
    repeat = compiled.guard.function("repeat", lines, names)
    repeat.source = "\n".join(lines) + "\n"
    return repeat
