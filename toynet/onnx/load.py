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
from ..static.trace import TENSOR
from ..static.serialize import DeployedGraph, decode_graph, encode_value, printable
from ..static.validate import MAX_FOLDED_BYTES, MAX_NODES, MAX_SOURCE
from .export import require_onnx
from .import_activations import IMPORTERS
from . import import_arrange, import_nn  # noqa: F401  (register Split, Pad...; Gemm, Conv, pooling...)
from .import_ops import to_toynet_dtype

#: Importing computes an op's value when its inputs are known and hold at most this many numbers.
MAX_FOLD_ELEMENTS = 4096
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class ONNXImportError(ValueError):
    """An ONNX file toynet cannot import as it is: the message names the node, its op, the attribute or input at
    fault and what was expected."""


class Attributes(dict):
    """An ONNX node's attributes; a missing one that an importer needs is an :class:`ONNXImportError`."""

    def __init__(self, values: dict, where: str):
        super().__init__(values)
        self.where = where

    def __missing__(self, key: str) -> Any:
        raise ONNXImportError(f"{self.where}: needs the attribute {key!r}, which the node does not have")


class NeedsConstant(ValueError):
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
        self.onnx_node: Any = None   # the ONNX node being imported: names ops and errors

    def unique(self, base: str) -> str:
        base = _UNSAFE.sub("_", base)[:180] or "v"
        name, k = base, 1
        while name in self._used:
            name, k = f"{base}_{k}", k + 1
        self._used.add(name)
        return name

    def _entry(self, name: str, kind: str, shape: tuple, dtype: backend.DType, **extra: Any) -> dict:
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
        dtype = to_toynet_dtype(array.dtype, base)
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
        return backend.host.asarray(op.forward(backend.host, *values, **attrs))

    def allocation(self, shape: Any, itemsize: int, what: str) -> tuple:
        """``shape`` (ints) once checked that an array of it fits the cap on what importing may compute
        (MAX_FOLDED_BYTES, as for constant folding when a saved graph loads): called *before* allocating."""
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise ONNXImportError(f"{self.where()}: its {what} would have a negative size in {dims}")
        count = math.prod(dims)
        if count * itemsize > MAX_FOLDED_BYTES:
            raise ONNXImportError(f"{self.where()}: its {what} of shape {dims} would take {count * itemsize:,} bytes "
                                  f"when importing; toynet computes at most {MAX_FOLDED_BYTES:,} bytes while it loads")
        return dims

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


def _checked_initializer(onnx: Any, init: Any) -> Any:
    """An initializer's array, once its declared size is checked against the data the file holds (a tensor that
    declares (100000, 100000) with 16 bytes is refused by name, before NumPy allocates anything)."""
    where = f"ONNX initializer {init.name!r}"
    if init.data_location == onnx.TensorProto.EXTERNAL:
        raise ONNXImportError(f"{where} keeps its data in an external file; toynet reads single-file models only")
    if any(d < 0 for d in init.dims):
        raise ONNXImportError(f"{where} declares a negative dimension in {list(init.dims)}")
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    except Exception:
        raise ONNXImportError(f"{where} has an unknown data type {init.data_type}") from None
    count = math.prod(init.dims)
    fields = [f for f in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
              if len(getattr(init, f))]
    held = len(init.raw_data) // max(itemsize, 1) if init.raw_data else max([len(getattr(init, f)) for f in fields],
                                                                               default=0)
    if held != count:
        raise ONNXImportError(f"{where} declares shape {list(init.dims)} ({count:,} values) but holds {held:,}")
    return onnx.numpy_helper.to_array(init)


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
        raise NotImplementedError(f"toynet cannot import ONNX op(s) {', '.join(missing)}; it imports: "
                                  f"{', '.join(sorted(IMPORTERS))}")
    graph = model.graph
    b = Builder(_UNSAFE.sub("_", graph.name or "onnx_model")[:100], onnx)
    known_inputs, input_shapes = known_inputs or {}, input_shapes or {}
    for init in graph.initializer:
        b.values[init.name] = b.state(init.name, _checked_initializer(onnx, init))
    inputs = []
    for info in graph.input:
        if info.name in b.values:  # older exporters list initializers among the inputs too
            continue
        if info.name in known_inputs:
            b.values[info.name] = b.constant(known_inputs[info.name], info.name)
            continue
        shape, dtype = _input_type(onnx, info, input_shapes.get(info.name))
        b.values[info.name] = value = b.input(info.name, shape, dtype)
        inputs.append(value.name)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    for node in graph.node:
        b.onnx_node = node
        undefined = [name for name in node.input if name and name not in b.values]
        if undefined:
            raise ONNXImportError(f"{b.where()} reads {', '.join(map(repr, undefined))}, which no graph input, "
                                  "initializer or earlier node defines (nodes must come in dependency order: a "
                                  "cycle or a missing value)")
        args = [b.values[name] if name else None for name in node.input]
        attrs = _attributes(onnx, node, opset, b.where())
        try:
            results = IMPORTERS[node.op_type](b, args, attrs)
        except (ONNXImportError, NeedsConstant):
            raise
        except (ArithmeticError, LookupError, TypeError, ValueError) as error:   # what an importer found wrong
            raise ONNXImportError(f"{b.where()}: {type(error).__name__}: {error}") from None
        results = results if isinstance(results, (list, tuple)) else [results]
        for name, value in zip(node.output, results):
            if name:
                b.values[name] = value
    b.onnx_node = None
    outputs = []
    for info in graph.output:
        if info.name not in b.values:
            raise ONNXImportError(f"ONNX graph {b.name!r}: its output {info.name!r} is no input, initializer or "
                                  "node output")
        value = b.values[info.name]
        if value.name in outputs or value.name in inputs or value.known is not None:
            value = b.op("identity", value)  # each output its own node, computed by the graph
        outputs.append(value.name)
    spec = TENSOR if len(outputs) == 1 else ("tuple", tuple(TENSOR for _ in outputs))
    structure = {"name": b.name, "nodes": b.entries, "inputs": inputs, "outputs": outputs,
                 "output_structure": encode_value(spec)}
    return structure, b.arrays


def _attributes(onnx: Any, node: Any, opset: Any, where: str) -> Attributes:
    """The node's attributes, each of the type the op's ONNX schema declares (a float ``axis`` is refused, not
    truncated)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset or onnx.defs.onnx_opset_version(), node.domain)
    except Exception:   # (no schema for that opset: the importer checks what it reads)
        schema = None
    values = {}
    for a in node.attribute:
        declared = schema.attributes.get(a.name) if schema is not None else None
        kinds = onnx.AttributeProto.AttributeType
        if declared is not None and a.type != declared.type:
            raise ONNXImportError(f"{where}: attribute {a.name!r} is {kinds.Name(a.type)}, but {node.op_type} takes "
                                  f"{kinds.Name(declared.type)}")
        try:
            values[a.name] = onnx.helper.get_attribute_value(a)
        except Exception as error:
            raise ONNXImportError(f"{where}: attribute {a.name!r} cannot be read ({error})") from None
    return Attributes(values, where)


def _input_type(onnx: Any, info: Any, given: Any) -> tuple[tuple, backend.DType]:
    tensor_type = info.type.tensor_type
    elem = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
    dtype = to_toynet_dtype(elem, f"graph input {info.name!r}")
    if given is not None:
        return tuple(int(d) for d in given), dtype
    dims = tensor_type.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        named = [d.dim_param or "?" if not d.HasField("dim_value") else d.dim_value for d in dims]
        raise ValueError(f"graph input {info.name!r} has shape {named} with symbolic dimensions; toynet graphs "
                         f"have static shapes: pass input_shapes={{{info.name!r}: (...)}} to flow.onnx.load")
    return tuple(d.dim_value for d in dims), dtype


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
            raise ValueError(f"{path} is not an ONNX model ({type(error).__name__}: {error})") from None
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
        raise ValueError(f"cannot import {where}: {error}") from None
    return OnnxGraph(graph, states, "OnnxGraph")
