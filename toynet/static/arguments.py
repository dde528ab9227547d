"""The call interface of a graph: the one walk over nested call arguments, and what a compiled plan depends on.

``build`` may take and return any nesting of tuples, lists and dicts around tensors. A compiled plan
works on flat lists of arrays, so a call's arguments are flattened on the way in and ``build``'s result
is rebuilt from the plan's flat outputs on the way out. Everything that looks at nested arguments goes
through the one pair here::

    leaves, spec = flatten(((x, y), {"k": 2}))
    # leaves: [x, y, 2]                              every non-container value, in order
    # spec:   ("tuple", (("tuple", ("T", "T")), ("dict", (("k", ("V", 2)),))))
    unflatten(spec, iter([x2, y2]))                  # ((x2, y2), {"k": 2})

The spec is made of tuples only, so it can be hashed (a plan cache key, see :func:`signature`) and saved
with a deployed graph. It keeps every non-tensor value, ``("V", value)``, because a plan returns only
tensors: ``unflatten`` needs just the spec and the tensors.

A graph's *call* is flattened by :func:`flatten_call`, which decides what becomes a graph input:

* tensors, and NumPy arrays and scalars (wrapped as tensors, without a copy): each call's values are
  fed to the plan, only shapes and dtypes are in the signature;
* Python ``int`` and ``float`` numbers, ``("N", "float")`` in the spec: graph inputs too, so a new value
  runs the same plan instead of compiling another (``build`` sees a 0-d lazy tensor that promotes like
  the Python number: ``x32 * scale`` stays float32). Numbers in *static* arguments stay values;
* everything else (``bool``, strings, None, other objects) is a value of the spec: a new value is a new
  signature, compiled anew.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from .. import backend
from ..dynamic.tensor import Tensor
from .ir import CONSTANT, Graph, Node

#: A tensor's place in a spec; :func:`unflatten` fills it with the next tensor it is given.
TENSOR = ("T",)
#: A Python number that is a graph input; :func:`unflatten` fills it like a tensor.
FLOAT, INT = ("N", "float"), ("N", "int")


def flatten(value: Any) -> tuple[list, Any]:
    """Every leaf of a nesting of tuples, lists and dicts (tensors and other values, in order), and the
    spec that :func:`unflatten` rebuilds the nesting from."""
    leaves: list = []
    return leaves, _walk(value, leaves)


def _walk(value: Any, leaves: list) -> Any:
    # A plain recursive function and list comprehensions: flatten runs on every call of a graph whose
    # inputs are new tensors (a data loader's batches), so it is kept as cheap as Python allows.
    if isinstance(value, Tensor):
        leaves.append(value)
        return TENSOR
    if isinstance(value, tuple):
        return ("tuple", tuple([_walk(v, leaves) for v in value]))
    if isinstance(value, list):
        return ("list", tuple([_walk(v, leaves) for v in value]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, _walk(v, leaves)) for k, v in value.items()]))
    leaves.append(value)
    return ("V", value)


def unflatten(spec: Any, tensors: Iterator[Tensor]) -> Any:
    """The nesting :func:`flatten` described, with the next of ``tensors`` in each tensor's place.

    (A spec read back from a graph saved by an older toynet may hold lists where this one has tuples.)"""
    kind = spec[0]
    if kind == "T" or kind == "N":
        return next(tensors)
    if kind == "V":
        return spec[1]
    if kind == "dict":
        return {k: unflatten(s, tensors) for k, s in spec[1]}
    items = [unflatten(s, tensors) for s in spec[1]]
    return tuple(items) if kind == "tuple" else items


def flatten_call(args: tuple, kwargs: dict, static: frozenset = frozenset(), names: tuple = ()
                 ) -> tuple[list, Any]:
    """:func:`flatten` for the arguments of a graph's call (see the module's docstring): NumPy arrays become
    tensors and Python numbers ``("N", ...)`` inputs, except the numbers inside the arguments named in
    ``static`` (``names`` are build's parameter names, to name positional arguments)."""
    leaves: list = []
    if not static:
        return leaves, _walk_call((args, kwargs), leaves, True)
    positional = tuple([_walk_call(a, leaves, i >= len(names) or names[i] not in static)
                        for i, a in enumerate(args)])
    keywords = tuple([(k, _walk_call(v, leaves, k not in static)) for k, v in kwargs.items()])
    return leaves, ("tuple", (("tuple", positional), ("dict", keywords)))


def _walk_call(value: Any, leaves: list, numbers: bool) -> Any:
    if isinstance(value, Tensor):
        leaves.append(value)
        return TENSOR
    kind = type(value)
    if numbers and (kind is float or kind is int):
        leaves.append(value)
        return FLOAT if kind is float else INT
    if isinstance(value, (backend.host.ndarray, backend.host.number)):
        leaves.append(_host_tensor(value))
        return TENSOR
    if isinstance(value, tuple):
        return ("tuple", tuple([_walk_call(v, leaves, numbers) for v in value]))
    if isinstance(value, list):
        return ("list", tuple([_walk_call(v, leaves, numbers) for v in value]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, _walk_call(v, leaves, numbers)) for k, v in value.items()]))
    leaves.append(value)
    return ("V", value)


def _host_tensor(value: Any) -> Tensor:
    array = backend.host.asarray(value)
    try:
        backend.dtype_of(array)
    except TypeError as error:
        raise TypeError(f"a graph was called with a NumPy array of shape {array.shape} and dtype {array.dtype}, "
                        f"which cannot be a graph input: {error}") from None
    return Tensor.wrap(array, backend.CPU)


def leaf_kinds(spec: Any, kinds: list | None = None) -> list:
    """The spec's leaves in order: ``TENSOR``, ``FLOAT``/``INT`` or the ``("V", value)`` of each."""
    kinds = [] if kinds is None else kinds
    kind = spec[0]
    if kind in ("T", "N", "V"):
        kinds.append(spec)
    elif kind == "dict":
        for _, s in spec[1]:
            leaf_kinds(s, kinds)
    else:
        for s in spec[1]:
            leaf_kinds(s, kinds)
    return kinds


def signature(leaves: list, spec: Any) -> Any:
    """What a compiled plan depends on: the nesting, every other value (not the numbers that are inputs),
    and each tensor's shape, dtype and device. A call with the same signature reuses the plan; a new one
    compiles another."""
    key = (spec, tuple([(t.shape, t.dtype, t.device) for t in leaves if isinstance(t, Tensor)]))
    try:
        hash(key)
    except TypeError:  # an unhashable value among the arguments (a NumPy array, a set): compare its repr
        key = (repr(spec), key[1])
    return key


def graph_inputs(tracer: Any, leaves: list, spec: Any, on_input: Callable | None) -> list[Tensor]:
    """While tracing a call (``tracer``: a :class:`toynet.static.trace.Tracer`), a graph input
    ``_<graph>-input_<i>`` for each tensor of the call and each number the spec makes an input, in order.
    Other values reach ``build`` as they are; those that are not plain numbers, strings or None are
    numbered too (OneFlow warns of them)."""
    lazy, index = [], 0
    for value, kind in zip(leaves, leaf_kinds(spec)):
        if kind[0] == "V" and (value is None or isinstance(value, (int, float, str, bool))):
            continue
        name = f"_{tracer.graph.name}-input_{index}"
        index += 1
        if kind[0] == "N":
            lazy.append(tracer.add_number(name, value))
            value = lazy[-1]  # what build() sees
        elif isinstance(value, Tensor):
            if value.is_lazy:
                raise RuntimeError("a lazy tensor was passed into an nn.Graph call; graphs cannot be nested")
            lazy.append(tracer.add_input(name, value))
        if on_input is not None:
            on_input(name, value)
    return lazy


def bake_numbers(graph: Graph, values: list) -> Graph:
    """A copy of ``graph`` in which its number inputs are ``values``, as constants: what a deployed graph,
    called with tensors only, runs (``toynet.save(graph)`` keeps the numbers of the latest call)."""
    numbers = [n for n in graph.inputs if n.attrs.get("number")]
    if not numbers:
        return graph
    clone = graph.copy()
    value_of = {id(n): v for n, v in zip([n for n in clone.inputs if n.attrs.get("number")], values)}
    roots = {id(n) for n in clone.roots()}
    constants: dict[int, Node] = {}
    for n in clone.nodes:
        n.inputs = tuple(value_of.get(id(x), x) if isinstance(x, Node) else x for x in n.inputs)
        if id(n) in value_of and id(n) in roots:  # an output or a state's new value itself: a constant
            constants[id(n)] = Node(n.name, CONSTANT, (), n.dtype, n.device,
                                    value=n.device.xp.asarray(value_of[id(n)], dtype=n.dtype.array_dtype))
    clone.nodes = [constants.get(id(n), n) for n in clone.nodes if id(n) not in value_of or id(n) in constants]
    clone.inputs = [n for n in clone.inputs if id(n) not in value_of]
    clone.redirect_roots(constants)
    return clone
