"""Deployment: save a compiled graph with its parameters, and load it back without the model's code.

``toynet.save(graph, "model_dir")`` writes a checkpoint directory (see toynet.serialization) of kind
``"graph"``: ``structure.json`` holds the graph itself, node by node (op names, inputs, attributes,
shapes), and ``arrays.npz`` holds the values of its state (parameters, buffers) and constants. Ops are
stored by name and found again in toynet's op table, so loading needs toynet, not the Python classes
that defined the model. No pickle anywhere.

What is saved is the graph's *forward* computation of its outputs, as traced (before the optimisation
passes, which run again when the graph is loaded). A training graph's backward and update nodes are
not part of a deployment.

``toynet.load("model_dir")`` returns a :class:`DeployedGraph`, which you call like the original graph.
The saved form is data only: loading checks it whole (:mod:`toynet.static.validate`) before it builds
anything, and no string from the file reaches the compiled plan's source other than checked names (of
letters, digits, ``_``, ``.`` and ``-``) and source lines, one printable line each, in comments.
"""

from __future__ import annotations

import threading

from typing import Any

from .. import backend, serialization
from ..ops import OPS
from ..dynamic.tensor import Tensor
from .trace import unflatten
from .compile import Plan
from .ir import CONSTANT, INPUT, OP, STATE, Graph, Node
from .passes import optimize
from .passes.simplify import live_nodes
from .validate import MAX_SOURCE, CheckedGraph, Ref, check_graph

KIND = "graph"


# ------------------------------------------------------------------------- the call's numbers


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


# ------------------------------------------------------------------------------ attribute values


def encode_value(value: Any) -> Any:
    """An op attribute (or literal input) as JSON: tuples, slices, dtypes and devices are tagged."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return {"float": repr(value)} if value != value or value in (float("inf"), float("-inf")) else value
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[k, encode_value(v)] for k, v in value.items()]}
    if isinstance(value, slice):
        return {"slice": [encode_value(value.start), encode_value(value.stop), encode_value(value.step)]}
    if value is Ellipsis:
        return {"ellipsis": True}
    if isinstance(value, backend.DType):
        return {"dtype": value.name}
    if isinstance(value, backend.Device):
        return {"device": str(value)}
    if backend.is_host_scalar(value):
        return encode_value(backend.host_scalar(value))
    raise TypeError(f"cannot save the attribute value {value!r} ({type(value).__name__}) in a graph")


# ------------------------------------------------------------------------------------------ graphs


def forward_graph(graph: Graph) -> Graph:
    """The part of a traced graph that computes its outputs (no backward, no updates)."""
    result = graph.copy()
    result.updates = {}
    live = live_nodes(result)
    result.nodes = [n for n in result.nodes if id(n) in live or n.kind == INPUT]
    return result


def encode_graph(graph: Graph, state_values: dict[str, Tensor]) -> tuple[dict, dict]:
    """``(structure, arrays)``: the graph as JSON-able data and the arrays it needs, by name. Source lines
    are kept as one printable line (other characters escaped, as ``repr`` does), at most
    :data:`~toynet.static.validate.MAX_SOURCE` characters."""
    arrays: dict[str, Any] = {}
    nodes = []
    for n in graph.nodes:
        entry = {"name": n.name, "kind": n.kind, "shape": list(n.shape), "dtype": n.dtype.name,
                 "phase": n.phase, "scope": n.scope, "source": printable(n.source)[:MAX_SOURCE]}
        if n.kind == OP:
            entry["op"] = n.op.name
            entry["inputs"] = [{"node": x.name} if isinstance(x, Node) else {"literal": encode_value(x)}
                               for x in n.inputs]
            entry["attrs"] = {k: encode_value(v) for k, v in n.attrs.items() if k != "device"}
        elif n.kind == STATE:
            entry.update(state_name=n.state_name, state_kind=n.state_kind, array=f"s{len(arrays)}")
            arrays[entry["array"]] = state_values[n.state_name].numpy()
        elif n.kind == CONSTANT:
            entry["array"] = f"c{len(arrays)}"
            arrays[entry["array"]] = backend.to_numpy(n.value, n.device)
        nodes.append(entry)
    structure = {"name": graph.name, "nodes": nodes, "inputs": [n.name for n in graph.inputs],
                 "outputs": [n.name for n in graph.outputs],
                 "output_structure": encode_value(graph.output_structure)}
    return structure, arrays


def printable(text: str) -> str:
    """``text`` with every character that is not printable escaped as ``repr`` escapes it (a line break
    becomes the two characters ``\\n``): one printable line, whatever it held."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def decode_graph(data: Any, arrays: Any, device: backend.Device, source: str = "structure.json",
                 class_name: Any = "") -> tuple[Graph, dict[str, Tensor]]:
    """Rebuild a graph (and its state tensors) from :func:`encode_graph`'s output, on ``device``.

    The whole description is checked first (:func:`~toynet.static.validate.check_graph`); then the
    arrays it declares are read (``arrays`` is an open checkpoint, which reads only those, each checked
    before its data is read; or a dict name -> host array, checked the same way); only then is anything
    built."""
    checked = check_graph(data, source, class_name)
    arrays = _arrays_of(checked, arrays)
    graph = Graph(checked.name)
    by_name: dict[str, Node] = {}
    states: dict[str, Tensor] = {}
    for entry in checked.nodes:
        kind, shape, dtype = entry["kind"], entry["shape"], entry["dtype"]
        common = dict(phase=entry["phase"], scope=entry["scope"], source=entry["source"])
        if kind == OP:
            op = OPS[entry["op"]]
            inputs = tuple(by_name[x.name] if isinstance(x, Ref) else x for x in entry["inputs"])
            attrs = dict(entry["attrs"])
            if op.changes_device:
                attrs["device"] = attrs["source"] = device  # the loaded graph lives on one device
            node = Node(entry["name"], OP, shape, dtype, device, op=op, inputs=inputs, attrs=attrs, **common)
        elif kind == STATE:
            states[entry["state_name"]] = Tensor.wrap(backend.from_host(arrays[entry["array"]], device), device)
            node = Node(entry["name"], STATE, shape, dtype, device, state_name=entry["state_name"],
                        state_kind=entry["state_kind"], **common)
        elif kind == CONSTANT:
            node = Node(entry["name"], CONSTANT, shape, dtype, device,
                        value=backend.from_host(arrays[entry["array"]], device), **common)
        else:
            node = Node(entry["name"], INPUT, shape, dtype, device, **common)
        graph.nodes.append(node)
        graph._names.add(node.name)
        by_name[node.name] = node
    graph.inputs = [by_name[n] for n in checked.inputs]
    graph.outputs = [by_name[n] for n in checked.outputs]
    graph.output_structure = checked.output_structure
    return graph, states


def _arrays_of(checked: CheckedGraph, arrays: Any) -> dict[str, Any]:
    """The arrays a checked graph declares, each of its declared dtype and shape."""
    if hasattr(arrays, "read_arrays"):
        return arrays.read_arrays(checked.wanted)
    for name, (dtype, shape, where) in checked.wanted.items():
        array = arrays.get(name)
        if array is None or array.dtype != dtype or tuple(array.shape) != shape:
            found = "nothing" if array is None else f"{array.dtype} {list(array.shape)}"
            raise serialization.CheckpointError(f"{where}: array {name!r} is {found}, but the node declares "
                                                f"{dtype} {list(shape)}")
    return arrays


# ------------------------------------------------------------------------------------ save / load


def save_graph(path: Any, traced: Graph, states: dict[str, Tensor], class_name: str = "") -> None:
    """What ``toynet.save(graph, path)`` does for an nn.Graph: export the forward part of its traced graph
    and the state it reads (state name -> eager tensor).

    What is written is checked as loading will check it, so a graph that could not be loaded back (a
    state name with a space, from a ``ModuleDict`` key) fails here, with nothing written."""
    structure, arrays = encode_graph(forward_graph(traced), states)
    try:
        _arrays_of(check_graph(structure, "the graph to save", class_name), arrays)
    except serialization.CheckpointError as error:
        raise ValueError(f"cannot save graph {traced.name} for deployment: {error}") from None
    serialization.write_checkpoint(path, {"kind": KIND, "class": class_name, "graph": structure}, arrays)


class DeployedGraph:
    """A graph loaded from disk: call it with tensors of the shapes it was traced for."""

    def __init__(self, graph: Graph, states: dict[str, Tensor], class_name: str = ""):
        self.class_name = class_name
        self.traced = graph
        self.ir, self.passes = optimize(graph)
        self.plan = Plan(self.ir)
        self.states = states
        self._state_list = [states[name] for name in self.plan.state_names]
        self._call_lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.traced.name

    def __call__(self, *inputs: Tensor) -> Any:
        expected = [(tuple(n.shape), n.dtype) for n in self.traced.inputs]
        got = [(tuple(t.shape), t.dtype) if isinstance(t, Tensor) else (type(t).__name__, None) for t in inputs]
        if got != expected:
            want = ", ".join(f"{d.name}{list(s)}" for s, d in expected)
            have = ", ".join(f"{d.name}{list(s)}" if d is not None else s for s, d in got)
            raise ValueError(f"deployed graph {self.name} was traced for inputs ({want}) and cannot retrace "
                             f"without the model's code; got ({have})")
        device = self.plan.device
        with self._call_lock:   # one call at a time: the plan computes in buffers it owns
            outputs = self.plan.run([t.to(device).array for t in inputs], [t.array for t in self._state_list])
        return unflatten(self.traced.output_structure, iter([Tensor.wrap(a, device) for a in outputs]))

    def __repr__(self) -> str:
        return f"DeployedGraph({self.class_name or self.name}):\n{self.ir.format()}"


def _load(checkpoint: serialization.Checkpoint, map_location: Any) -> DeployedGraph:
    device = backend.to_device_obj(map_location if isinstance(map_location, (str, backend.Device)) else None)
    structure, source = checkpoint.structure, str(checkpoint.path / "structure.json")
    extra = sorted(set(structure) - {"format", "version", "kind", "class", "graph"})
    if "graph" not in structure or extra:
        raise serialization.CheckpointError(f"{source}: expected the entries format, version, kind, class and "
                                            f"graph, got {sorted(structure)}")
    class_name = structure.get("class", "")
    graph, states = decode_graph(structure["graph"], checkpoint, device, source, class_name)
    try:
        return DeployedGraph(graph, states, class_name)
    except MemoryError:  # the buffers its (checked, capped) shapes declare do not fit in this machine
        raise serialization.CheckpointError(f"{source}: the graph's values need more memory than this machine "
                                            f"can allocate") from None


serialization.register_loader(KIND, _load)
