"""``flow.onnx.export(graph, path)``: write an inference graph as an ONNX model.

The exporter walks the same forward graph that ``flow.save(graph, dir)`` deploys (the traced ops,
before the optimisation passes, which ONNX Runtime does its own way) and writes each op with the
converters of :mod:`toynet.onnx.export_ops`:

* parameters and buffers become initializers named by their module path (``features.0.0.weight``);
* the graph's inputs and outputs are ``input_0``, ``input_1``..., ``output_0``..., with their shapes
  (the first dimension named ``batch`` with ``dynamic_batch=True``);
* each ONNX node's ``doc_string`` is the line of the user's code that made the op, which Netron shows.

An op with no ONNX form stops the export with its name and source line. ``onnx`` is imported only here,
when exporting, so ``import toynet`` works without it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .. import backend
from ..static.serialize import bake_numbers
from ..static.ir import CONSTANT, INPUT, OP, STATE, Graph
from ..static.serialize import DeployedGraph, forward_graph
from .export_ops import CONVERTERS, Writer

#: The opset written when none is asked for: supported by ONNX Runtime releases from 1.12 on.
DEFAULT_OPSET = 17
OLDEST_OPSET = 13


def require_onnx() -> Any:
    """The ``onnx`` module, or an error that says how to install it."""
    try:
        return importlib.import_module("onnx")
    except ImportError:
        raise ImportError("toynet's ONNX support needs the onnx package: pip install 'toynet[onnx]' "
                          "(or pip install onnx onnxruntime)") from None


def forward_of(graph: Any) -> tuple[Graph, dict]:
    """The forward graph and its state values (name -> tensor) of a called nn.Graph or a loaded graph."""
    if isinstance(graph, DeployedGraph):
        return forward_graph(graph.traced), graph.states
    last = getattr(graph, "_last", None)
    if hasattr(graph, "build") and last is None:
        raise RuntimeError("the graph must be compiled first: call it once on example inputs before "
                           "flow.onnx.export(graph, path)")
    if last is None:
        raise TypeError(f"flow.onnx.export takes an nn.Graph or a graph from flow.load / flow.onnx.load, "
                        f"got {type(graph).__name__}")
    return forward_graph(bake_numbers(last.traced, last.numbers)), last.states


def to_model(graph: Any, opset_version: int | None = None, dynamic_batch: bool = False) -> Any:
    """The ONNX ``ModelProto`` of ``graph`` (see the module doc)."""
    onnx = require_onnx()
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    opset = DEFAULT_OPSET if opset_version is None else opset_version
    newest = onnx.defs.onnx_opset_version()
    if type(opset) is not int or not OLDEST_OPSET <= opset <= newest:
        raise ValueError(f"opset_version must be an int from {OLDEST_OPSET} to {newest} (this onnx package's "
                         f"newest), got {opset_version!r}")
    forward, states = forward_of(graph)
    missing = [n for n in forward.op_nodes if n.op.name not in CONVERTERS]
    if missing:
        where = "; ".join(f"{n.op.name} at {n.source or n.name}" for n in missing)
        raise NotImplementedError(f"no ONNX mapping for op(s): {where}. Supported: {', '.join(sorted(CONVERTERS))}")

    writer = Writer(helper, numpy_helper, opset, dynamic_batch)
    inputs, outputs = [], []
    for i, n in enumerate(forward.inputs):
        writer.names[id(n)] = f"input_{i}"
        inputs.append(_value_info(helper, f"input_{i}", n, dynamic_batch))
    for n in forward.nodes:
        if n.kind == STATE:
            writer.names[id(n)] = n.state_name
            array = states[n.state_name].numpy()
            writer.initializers.append(numpy_helper.from_array(array, n.state_name))
        elif n.kind == CONSTANT:
            writer.names[id(n)] = writer.constant(backend.to_numpy(n.value, n.device), n.name)
        elif n.kind == OP:
            writer.current = n
            writer.names[id(n)] = CONVERTERS[n.op.name](writer, n)
        elif n.kind != INPUT:
            raise ValueError(f"unexpected node kind {n.kind!r} in graph {forward.name}")
    for i, n in enumerate(forward.outputs):
        name = f"output_{i}"
        # An output may be an input or an initializer itself, or repeat another output: an Identity gives
        # each output its own name.
        writer.nodes.append(helper.make_node("Identity", [writer.names[id(n)]], [name], name=f"{name}:identity"))
        outputs.append(_value_info(helper, name, n, dynamic_batch))

    body = helper.make_graph(writer.nodes, forward.name, inputs, outputs, writer.initializers,
                             doc_string=f"exported by toynet from graph {forward.name}")
    model = helper.make_model(body, producer_name="toynet", opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, _ir_version_for(onnx, opset))
    return model


def _ir_version_for(onnx: Any, opset: int) -> int:
    """The IR version that goes with ``opset``, so older runtimes can open the file."""
    for _release, ir, default_opset, *_ in onnx.helper.VERSION_TABLE:
        if default_opset == opset:
            return ir
    return onnx.IR_VERSION


def _value_info(helper: Any, name: str, node: Any, dynamic_batch: bool) -> Any:
    shape = list(node.shape)
    if dynamic_batch and shape:
        shape[0] = "batch"
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(node.dtype.array_dtype), shape)


def export(graph: Any, path: Any, opset_version: int | None = None, dynamic_batch: bool = False) -> Path:
    """Write ``graph`` (a called inference nn.Graph, or a graph from ``flow.load`` / ``flow.onnx.load``) as
    the ONNX model ``path``, checked by ``onnx.checker`` first. Returns the path written."""
    onnx = require_onnx()
    model = to_model(graph, opset_version, dynamic_batch)
    onnx.checker.check_model(model, full_check=True)
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory: give the file to write, e.g. {path / 'model.onnx'}")
    path.write_bytes(model.SerializeToString())
    return path
