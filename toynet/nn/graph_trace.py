"""``@toynet.nn.Graph.trace``: a plain function becomes an ``nn.Graph`` object.

::

    @flow.nn.Graph.trace
    def affine(x):
        return flow.matmul(x, w) + b

    y = affine(x)      # the first call traces, optimises and compiles; later calls run the plan
    print(affine)      # (GRAPH:affine_graph_0:affine_graph): ( ... ) as any graph prints

The function's arguments are the graph's inputs and its result the graph's output, exactly as for
``build``: the decorator writes the subclass (``build`` calls the function) and makes the one instance.

What the function reads from *outside* (its closure and the globals it names) is found when it is
decorated, so the graph reads it as state, fresh on every call, rather than freezing it into the plan:

* a ``Module`` becomes a module of the graph, under its variable's name: its parameters and buffers
  are the plan's state, and ``print(graph)`` shows it as a MODULE;
* a ``Tensor`` becomes a state of its own (OneFlow's "free eager tensor"): a later in-place change of it
  is seen by the next call. Tensors created *inside* the function are constants of the plan.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from ..static.trace import StateInfo
from ..dynamic.tensor import Tensor
from .module import Module
from .parameter import Parameter


def captured_values(func: Callable) -> dict[str, Any]:
    """The modules and tensors ``func`` reads from outside: closure variables, then the globals its code
    names (names inside nested functions and comprehensions count too)."""
    found: dict[str, Any] = {}
    code = getattr(func, "__code__", None)
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, func.__closure__ or ()):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # a variable the enclosing function has not assigned yet
            continue
    scope = getattr(func, "__globals__", {})
    for name in _names(code):
        if name not in found and name in scope:
            found[name] = scope[name]
    return {name: v for name, v in found.items() if isinstance(v, (Module, Tensor))}


def _names(code: Any) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names += _names(const)
    return names


def trace_function(base: type, func: Callable) -> Any:
    """The graph object of ``func`` (``base`` is ``nn.Graph``, passed in so this module need not import
    the one that imports it)."""
    if not inspect.isfunction(func):
        raise TypeError(f"nn.Graph.trace decorates a function, got {type(func).__name__}: write "
                        "@flow.nn.Graph.trace above a def (for a module, write an nn.Graph subclass)")
    outside = captured_values(func)
    modules = {name: m for name, m in outside.items() if isinstance(m, Module)}
    tensors = {name: t for name, t in outside.items() if isinstance(t, Tensor)}
    # The graph's class is named after the function, as OneFlow names it: print(graph) shows
    # (GRAPH:affine_graph_0:affine_graph).
    name = func.__name__.replace("<", "").replace(">", "") + "_graph"

    def __init__(self) -> None:
        base.__init__(self)
        for module_name, module in modules.items():
            # A variable named like a graph attribute (config, name...) gets a trailing underscore.
            setattr(self, module_name if module_name not in dir(self) else module_name + "_", module)

    def build(self, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    def _states_and_paths(self) -> tuple[dict[int, StateInfo], dict[int, str]]:
        states, paths = base._states_and_paths(self)
        for tensor_name, t in tensors.items():
            kind = "parameter" if isinstance(t, Parameter) else "buffer"
            states.setdefault(id(t), StateInfo(tensor_name, kind, t))
        return states, paths

    build.__doc__ = func.__doc__
    traced_class = type(name, (base,), {"__init__": __init__, "build": build, "_states_and_paths": _states_and_paths,
                                        "__doc__": func.__doc__, "__module__": getattr(func, "__module__", None)})
    graph = traced_class()
    functools.update_wrapper(graph, func, assigned=("__doc__", "__wrapped__"), updated=())
    graph.__dict__["__wrapped__"] = func
    return graph
