"""``flow.onnx.load(path)``: an ONNX model becomes a toynet inference graph.

The importer does not build a graph of its own kind: it writes the same description that
``flow.save(graph, dir)`` writes (:func:`toynet.static.serialize.encode_graph`'s nodes and arrays) and
hands it to the loader of deployed graphs. So an ONNX file goes through the checks every saved graph
goes through (:mod:`toynet.static.validate`: known ops, allowed attributes, every shape what its op's
shape rule says, bounded sizes) before anything runs, and the result is a :class:`OnnxGraph`: a
deployed graph you call with tensors, print, draw with ``flow.viz.draw`` and run the passes on.

The file is read by protobuf as data (``onnx.load``): nothing in it is executed. Each ONNX node becomes
one or a few toynet ops (:mod:`toynet.onnx.import_ops`); a model with ops that have no mapping fails
before anything is built, with all of them listed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .. import backend, serialization
from ..ops import OPS
from ..static.serialize import DeployedGraph, decode_graph, encode_value, printable
from ..static.trace import TENSOR
from ..static.validate import MAX_FOLDED_BYTES, MAX_NODES, MAX_SOURCE
from . import import_arrange, import_nn  # noqa: F401  (register Split, Pad...; Gemm, Conv, pooling...)
from .errors import ONNXImportError, ONNXUnsupportedError
from .export import require_onnx
from .import_activations import IMPORTERS
from .import_ops import IGNORED_ATTRIBUTES, to_toynet_dtype
from .load_checks import attributes_of, check_declared, check_signature, checked_initializer, input_type, schema_of

#: Importing computes an op's value when its inputs are known and hold at most this many numbers.
MAX_FOLD_ELEMENTS = 4096
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class NeedsConstant(ONNXUnsupportedError):
    """A value that must be known before the graph runs (a shape, axes) is computed from graph inputs
    (``origins``, their ONNX names): the backend test runner then takes those inputs as constants."""

    def __init__(self, message: str, origins: frozenset):
        super().__init__(message)
        self.origins = origins


class Value:
    """A value while importing: the toynet node's name, shape and dtype (what a shape rule reads), and
    its contents when they are known before the graph runs (initializers, Constant nodes)."""

    __slots__ = ("name", "shape", "dtype", "known", "origins")

    def __init__(self, name: str, shape: tuple, dtype: backend.DType, known: Any = None,
                 origins: frozenset = frozenset()):
        self.name, self.shape, self.dtype, self.known = name, tuple(shape), dtype, known
        self.origins = origins  # the graph inputs (ONNX names) the value is computed from


class Builder:
    """Collects the toynet description (``encode_graph``'s format) of one ONNX graph."""

    def __init__(self, name: str, onnx: Any):
        self.name, self.onnx = name, onnx
        self.entries: list[dict] = []
        self.arrays: dict[str, Any] = {}
        self.values: dict[str, Value] = {}
        self._used: set[str] = set()
        self._next: dict[str, int] = {}   # base name -> the next suffix to try (see unique)
        self.onnx_node: Any = None   # the ONNX node being imported: names ops and errors
        self.since_version = 0       # the version of its op's schema (Softmax before 13 flattens to 2-d)
        # Bytes of the arrays importing has made itself (constants, folded values): capped all together, since a
        # file of many nodes each just under the cap of one value would otherwise add up to any size.
        self.allocated = 0

    def unique(self, base: str) -> str:
        base = _UNSAFE.sub("_", base)[:180] or "v"
        # Suffixes go on from where the base's last one stopped: nodes without names (most exporters leave them
        # empty) all share one base, and counting from 1 again for each would take n**2 / 2 steps (50,000 nodes:
        # over a billion).
        name, k = base, self._next.get(base, 1)
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        self._next[base] = k
        return name

    def _entry(self, name: str, kind: str, shape: tuple, dtype: backend.DType, **extra: Any) -> dict:
        if len(self.entries) >= MAX_NODES:   # (an ONNX node may become several toynet nodes: refused as they come)
            raise ONNXImportError(f"{self.where()}: the graph becomes more than {MAX_NODES} toynet nodes (inputs, "
                                  "parameters, constants and ops), the cap of every graph toynet loads")
        node = self.onnx_node
        source = f"{node.op_type} {node.name}".strip() if node is not None else ""
        entry = {"name": name, "kind": kind, "shape": list(shape), "dtype": dtype.name, "phase": "forward",
                 "scope": "", "source": printable(source)[:MAX_SOURCE], **extra}
        self.entries.append(entry)
        return entry

    def input(self, onnx_name: str, shape: tuple, dtype: backend.DType) -> Value:
        value = Value(self.unique(onnx_name), shape, dtype, origins=frozenset([onnx_name]))
        self._entry(value.name, "input", shape, dtype)
        return value

    def state(self, onnx_name: str, array: Any) -> Value:
        """An initializer: a parameter of the imported graph, named as in the file."""
        dtype = to_toynet_dtype(array.dtype, onnx_name)
        value = Value(self.unique(onnx_name), array.shape, dtype, known=array)
        key = f"s{len(self.arrays)}"
        self.arrays[key] = array
        self._entry(value.name, "state", array.shape, dtype, state_name=value.name, state_kind="parameter",
                    array=key)
        return value

    def constant(self, array: Any, base: str = "constant") -> Value:
        array = backend.host.asarray(array)
        dtype = to_toynet_dtype(array.dtype, f"{self.where()}: its {base}")
        self._count(array.nbytes, f"{base} of shape {array.shape}")
        value = Value(self.unique(base), array.shape, dtype, known=array)
        key = f"c{len(self.arrays)}"
        self.arrays[key] = array
        self._entry(value.name, "constant", array.shape, dtype, array=key)
        return value

    def op(self, op_name: str, *inputs: Any, **attrs: Any) -> Value:
        """Add toynet op ``op_name`` on ``inputs`` (values or literal numbers); its shape and dtype come
        from the op's own shape rule, as loading will check."""
        op = OPS[op_name]
        try:
            shape, dtype = op.infer(*inputs, **attrs)
        except (ValueError, TypeError) as error:
            raise ONNXImportError(f"{self.where()}: {error}") from None
        base = f"{self.onnx_node.name or self.onnx_node.op_type}-{op_name}" if self.onnx_node else op_name
        origins = frozenset().union(*[x.origins for x in inputs if isinstance(x, Value)])
        known = self._fold(op, inputs, attrs) if math.prod(shape) <= MAX_FOLD_ELEMENTS else None
        value = Value(self.unique(base), shape, dtype, known=known, origins=origins)
        self._entry(value.name, "op", shape, dtype, op=op_name,
                    inputs=[{"node": x.name} if isinstance(x, Value) else {"literal": encode_value(x)}
                            for x in inputs],
                    attrs={k: encode_value(v) for k, v in attrs.items()})
        return value

    def _fold(self, op: Any, inputs: tuple, attrs: dict) -> Any:
        """The op's result now, when all its inputs are known and small: exported models compute shapes
        with ops (``Shape`` -> ``Gather`` -> ``Concat`` -> ``Reshape``), and toynet needs them before it
        runs. The op stays in the graph too (the constant-folding pass folds it there)."""
        values = [x.known if isinstance(x, Value) else x for x in inputs]
        if op.random or any(v is None for v in values) or sum(
                backend.host.size(v) for v in values) > MAX_FOLD_ELEMENTS:
            return None
        result = backend.host.asarray(op.forward(backend.host, *values, **attrs))
        if self.allocated + result.nbytes > MAX_FOLDED_BYTES:
            return None   # (folding only helps: past the cap, the value is left to the graph)
        self.allocated += result.nbytes
        return result

    def allocation(self, shape: Any, itemsize: int, what: str) -> tuple:
        """``shape`` (ints) once checked that an array of it fits the cap on what importing may compute
        (MAX_FOLDED_BYTES, as for constant folding when a saved graph loads): called *before* allocating."""
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise ONNXImportError(f"{self.where()}: its {what} would have a negative size in {dims}")
        self._count(math.prod(dims) * itemsize, f"{what} of shape {dims}", allocate=False)
        return dims

    def _count(self, size: int, what: str, allocate: bool = True) -> None:
        """Refuse (before allocating it) an array of ``size`` bytes that would take what importing has allocated
        over MAX_FOLDED_BYTES; count it when ``allocate``."""
        if self.allocated + size > MAX_FOLDED_BYTES:
            already = f" after {self.allocated:,} bytes for earlier nodes" if self.allocated else ""
            raise ONNXImportError(f"{self.where()}: its {what} would take {size:,} bytes when importing{already}; "
                                  f"toynet computes at most {MAX_FOLDED_BYTES:,} bytes while it loads")
        if allocate:
            self.allocated += size

    def axis(self, value: Any, rank: int, what: str = "attribute 'axis'", input: int | None = 0,
             end: bool = False) -> int:
        """ONNX's axis ``value`` (negative ones count from the end: -1 is the last) as 0..rank-1 for an input of
        ``rank`` dimensions, or 0..rank when ``end`` (a place between dimensions, as Flatten's axis, where -1 is
        rank-1 still). Anything else is an ONNXImportError naming the node, ``what`` and the range, rather than a
        ZeroDivisionError or an IndexError later. ``input`` is the node's input the axis is of (None: its output,
        as for Unsqueeze)."""
        high = rank if end else rank - 1
        subject = "its output" if input is None else f"its input {self.onnx_node.input[input]!r}"
        if not isinstance(value, (int, backend.host.integer)) or isinstance(value, bool):
            raise ONNXImportError(f"{self.where()}: {what} is {value!r}; expected an int")
        if high < 0:
            raise ONNXImportError(f"{self.where()}: {what} is {value}, but {subject} is 0-d (a scalar), which has no "
                                  f"axis: {self.onnx_node.op_type} needs an input of at least one dimension")
        if not -rank <= value <= high:
            raise ONNXImportError(f"{self.where()}: {what} is {value}, but {subject} has {rank} dimension(s): "
                                  f"expected an axis from {-rank} to {high}")
        return int(value) + rank if value < 0 else int(value)

    def axes(self, values: Any, rank: int, what: str = "attribute 'axes'", input: int | None = 0,
             end: bool = False) -> tuple:
        """Several axes, each as :meth:`axis` checks it, none twice (ONNX says each axis is named once)."""
        result = tuple(self.axis(v, rank, f"{what} ({list(values)})", input, end) for v in values)
        if len(set(result)) != len(result):
            raise ONNXImportError(f"{self.where()}: {what} names an axis twice in {list(values)} (for {rank} "
                                  "dimension(s)); expected each axis at most once")
        return result

    def where(self) -> str:
        node = self.onnx_node
        return f"ONNX node {node.name!r} ({node.op_type})" if node is not None else f"ONNX graph {self.name!r}"

    def known(self, value: Any, what: str) -> Any:
        """The contents of ``value``, which must be known before the graph runs (a shape, axes, bounds)."""
        if value is None or value.known is None:
            origins = value.origins if value is not None else frozenset()
            got = f"a value computed from graph input(s) {', '.join(sorted(origins))}" if origins else "nothing"
            raise NeedsConstant(f"{self.where()}: its {what} must be a constant or an initializer, because toynet "
                                f"graphs have static shapes; got {got}", origins)
        return value.known


def unsupported_ops(model: Any) -> list[str]:
    """The op types of ``model``'s graph that have no importer, each once, sorted."""
    return sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.op_type} of the domain {n.domain!r} (toynet "
                   "imports the standard ai.onnx ops only)" for n in model.graph.node
                   if n.domain not in ("", "ai.onnx") or n.op_type not in IMPORTERS})


def build(model: Any, known_inputs: dict[str, Any] | None = None,
          input_shapes: dict[str, tuple] | None = None) -> tuple[dict, dict]:
    """``(structure, arrays)`` of ``model``: the description ``flow.load`` reads for a deployed graph.

    ``known_inputs`` (ONNX name -> array) turns graph inputs into constants (the backend test runner
    uses it for inputs that are really shapes or axes); ``input_shapes`` fixes dimensions the file leaves
    symbolic (``{"input": (1, 3, 224, 224)}``)."""
    onnx = require_onnx()
    if len(model.graph.node) > MAX_NODES:   # (before anything is built)
        raise ONNXImportError(f"ONNX graph {model.graph.name!r} has {len(model.graph.node)} nodes; toynet imports at "
                              f"most {MAX_NODES}, the cap of every graph it loads")
    missing = unsupported_ops(model)
    if missing:
        raise ONNXUnsupportedError(f"toynet cannot import ONNX op(s) {', '.join(missing)}; it imports: "
                                  f"{', '.join(sorted(IMPORTERS))}")
    graph = model.graph
    b = Builder(_UNSAFE.sub("_", graph.name or "onnx_model")[:100], onnx)
    known_inputs, input_shapes = known_inputs or {}, input_shapes or {}
    for init in graph.initializer:
        if init.name in b.values:
            raise ONNXImportError(f"ONNX initializer {init.name!r} is given twice")
        b.values[init.name] = b.state(init.name, checked_initializer(onnx, init))
    inputs = []
    for info in graph.input:
        if info.name in b.values:  # older exporters list initializers among the inputs too
            continue
        if info.name in known_inputs:
            b.values[info.name] = b.constant(known_inputs[info.name], info.name)
            continue
        shape, dtype = input_type(onnx, info, input_shapes.get(info.name))
        b.values[info.name] = value = b.input(info.name, shape, dtype)
        inputs.append(value.name)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    opset = opset if opset is not None else onnx.defs.onnx_opset_version()
    for node in graph.node:
        b.onnx_node = node
        undefined = [name for name in node.input if name and name not in b.values]
        if undefined:
            raise ONNXImportError(f"{b.where()} reads {', '.join(map(repr, undefined))}, which no graph input, "
                                  "initializer or earlier node defines (nodes must come in dependency order: a "
                                  "cycle or a missing value)")
        args = [b.values[name] if name else None for name in node.input]
        signature = schema_of(node, opset, b.where())
        schema = signature.schema
        b.since_version = schema.since_version
        check_signature(onnx, signature, node, args, b.where())
        attrs = attributes_of(onnx, node, schema, b.where())
        try:
            results = IMPORTERS[node.op_type](b, args, attrs)
        except ONNXImportError:
            raise
        except (ArithmeticError, LookupError, TypeError, ValueError) as error:   # what an importer found wrong
            raise ONNXImportError(f"{b.where()}: {type(error).__name__}: {error}") from None
        ignored = sorted(set(attrs) - attrs.read - IGNORED_ATTRIBUTES.get(node.op_type, set())
                         - IGNORED_ATTRIBUTES["*"])
        if ignored:   # (it would have computed something else than the file asks for)
            raise ONNXUnsupportedError(f"{b.where()}: toynet does not implement the attribute(s) "
                                       f"{', '.join(ignored)} of {node.op_type} (the version of opset "
                                       f"{schema.since_version}), and ignoring them would compute something else")
        results = results if isinstance(results, (list, tuple)) else [results]
        for name, value in zip(node.output, results):
            if not name:
                continue
            if name in b.values:   # ONNX assigns each value once: a second definition would shadow the first
                raise ONNXImportError(f"{b.where()}: its output {name!r} is already defined by a graph input, an "
                                      "initializer or an earlier node; each ONNX value is assigned once")
            b.values[name] = value
    b.onnx_node = None
    outputs = []
    for info in graph.output:
        if info.name not in b.values:
            raise ONNXImportError(f"ONNX graph {b.name!r}: its output {info.name!r} is no input, initializer or "
                                  "node output")
        value = b.values[info.name]
        check_declared(onnx, info, value, b.name)
        if value.name in outputs or value.name in inputs or value.known is not None:
            value = b.op("identity", value)  # each output its own node, computed by the graph
        outputs.append(value.name)
    spec = TENSOR if len(outputs) == 1 else ("tuple", tuple(TENSOR for _ in outputs))
    structure = {"name": b.name, "nodes": b.entries, "inputs": inputs, "outputs": outputs,
                 "output_structure": encode_value(spec)}
    return structure, b.arrays


class OnnxGraph(DeployedGraph):
    """An ONNX model imported into toynet: call it with tensors (one per ONNX graph input, in order)."""

    @property
    def ir(self):  # a property, as nn.Graph's: flow.viz.draw(graph) draws the optimised graph
        return self.__dict__["_ir"]

    @ir.setter
    def ir(self, graph):
        self.__dict__["_ir"] = graph

    def __repr__(self) -> str:
        lines = [f"(ONNX GRAPH:{self.name}:OnnxGraph){{"]
        for n in self.traced.inputs:
            lines.append(f"  (INPUT:{n.name}:tensor(..., size={list(n.shape)}, dtype=toynet.{n.dtype.name}))")
        for n in self.traced.states:
            lines.append(f"  (PARAMETER:{n.state_name}:tensor(..., size={list(n.shape)}, "
                         f"dtype=toynet.{n.dtype.name}))")
        for n in self.ir.op_nodes:
            args = ", ".join(x.name if hasattr(x, "name") else repr(x) for x in n.inputs)
            lines.append(f"  (OPERATOR:{n.name}:{n.op.describe(**n.attrs)}({args}) -> {n.type_str()})")
        for n in self.traced.outputs:
            lines.append(f"  (OUTPUT:{n.name}:tensor(..., size={list(n.shape)}, dtype=toynet.{n.dtype.name}))")
        lines.append(")")
        return "\n".join(lines)


def load(path: Any, input_shapes: dict[str, tuple] | None = None, device: Any = None,
         known_inputs: dict[str, Any] | None = None) -> OnnxGraph:
    """Import the ONNX model ``path`` (a file, or an ``onnx.ModelProto``) as a toynet inference graph."""
    onnx = require_onnx()
    if isinstance(path, (str, Path)):
        if not Path(path).is_file():
            raise FileNotFoundError(f"no ONNX file at {path}")
        try:
            model = onnx.load(str(path))
        except Exception as error:  # protobuf's DecodeError and friends: the bytes are not a model
            raise ONNXImportError(f"{path} is not an ONNX model ({type(error).__name__}: {error})") from None
    elif hasattr(path, "graph"):
        model = path
    else:
        raise TypeError(f"flow.onnx.load takes a path or an onnx.ModelProto, got {type(path).__name__}")
    structure, arrays = build(model, known_inputs, input_shapes)
    where = f"{path if isinstance(path, (str, Path)) else 'the ONNX model'}"
    device = backend.to_device_obj(device)
    try:
        graph, states = decode_graph(structure, arrays, device, where)
    except serialization.CheckpointError as error:
        raise ONNXImportError(f"cannot import {where}: {error}") from None
    return OnnxGraph(graph, states, "OnnxGraph")
