"""What ``flow.onnx.load`` checks in a model against ONNX's own schemas, before it builds anything.

* each node's attributes: present when required, of the type the schema gives, nothing the importer would
  ignore (:class:`Attributes`, :func:`attributes_of`);
* each node's inputs: how many, and of the types the op allows (:func:`schema_of`, :func:`check_signature`);
* the graph's inputs, initializers and declared outputs: element types, sizes counted from the declared shape
  before any array is made (:func:`input_type`, :func:`checked_initializer`, :func:`check_declared`).

Every refusal is an :class:`~toynet.onnx.errors.ONNXImportError` naming the node or tensor, what it held and
what was expected.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from .. import backend
from .errors import ONNXImportError, ONNXUnsupportedError
from .export import require_onnx
from .import_ops import to_toynet_dtype


class Attributes(dict):
    """An ONNX node's attributes; a missing one that an importer needs is an :class:`ONNXImportError`.

    It notes which attributes the importer looked at (``attrs["axis"]``, ``attrs.get(...)``, ``"axis" in attrs``):
    one it never looked at would be silently ignored, so :func:`build` refuses it, unless ignoring it cannot change
    what inference computes (:data:`~toynet.onnx.import_ops.IGNORED_ATTRIBUTES`)."""

    def __init__(self, values: dict, where: str):
        super().__init__(values)
        self.where = where
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)
        return super().__contains__(key)

    def __missing__(self, key: str) -> Any:
        raise ONNXImportError(f"{self.where}: needs the attribute {key!r}, which the node does not have")


def checked_initializer(onnx: Any, init: Any) -> Any:
    """An initializer's array, once its declared size is checked against the data the file holds (a tensor that
    declares (100000, 100000) with 16 bytes is refused by name, before NumPy allocates anything)."""
    where = f"ONNX initializer {init.name!r}"
    if init.data_location == onnx.TensorProto.EXTERNAL:
        raise ONNXImportError(f"{where} keeps its data in an external file; toynet reads single-file models only")
    if any(d < 0 for d in init.dims):
        raise ONNXImportError(f"{where} declares a negative dimension in {list(init.dims)}")
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
        field = onnx.helper.tensor_dtype_to_field(init.data_type)
    except KeyError:
        raise ONNXImportError(f"{where} has an unknown data type {init.data_type}") from None
    to_toynet_dtype(np_dtype, where)  # (a dtype toynet has no counterpart for is refused before reading)
    count = math.prod(init.dims)
    # The values are either raw bytes or in the one repeated field ONNX keeps that data type in (float16 and the
    # small ints in int32_data...): counted there, not in another field a mutated file may also fill.
    if init.HasField("raw_data"):
        held, whole = divmod(len(init.raw_data), np_dtype.itemsize)
        if whole:
            raise ONNXImportError(f"{where} holds {len(init.raw_data):,} bytes of raw data, not a whole number of "
                                  f"{np_dtype} values of {np_dtype.itemsize} bytes")
    else:
        held = len(getattr(init, field))
    if held != count:
        raise ONNXImportError(f"{where} declares shape {list(init.dims)} ({count:,} values) but holds {held:,}")
    try:
        return onnx.numpy_helper.to_array(init)
    except Exception as error:   # (what the checks above did not foresee: still this initializer's fault)
        raise ONNXImportError(f"{where} cannot be read: {type(error).__name__}: {error}") from None


def check_declared(onnx: Any, info: Any, value: Any, graph: str) -> None:
    """A graph output's computed dtype and shape against what the file declares for it (as far as it declares:
    symbolic or missing dimensions say nothing): a file that promises float32 outputs must not get int64 ones."""
    where = f"ONNX graph {graph!r}: its output {info.name!r}"
    if info.type.WhichOneof("value") not in (None, "tensor_type"):
        raise ONNXUnsupportedError(f"{where} is of the ONNX type {info.type.WhichOneof('value')}; toynet gives tensors "
                                   "only")
    tensor_type = info.type.tensor_type
    if tensor_type.elem_type:
        try:
            declared = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        except KeyError:
            raise ONNXImportError(f"{where} has an unknown element type {tensor_type.elem_type}") from None
        if declared != value.dtype.array_dtype:
            raise ONNXImportError(f"{where} is declared {declared}, but the graph computes {value.dtype.name}")
    dims = tensor_type.shape.dim
    known = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    # (All symbolic, as ["?"], is taken to say nothing, not even the rank.)
    if any(d is not None for d in known) and (len(known) != len(value.shape) or any(
            d is not None and d != size for d, size in zip(known, value.shape))):
        shown = [d if d is not None else (dim.dim_param or "?") for d, dim in zip(known, dims)]
        raise ONNXImportError(f"{where} is declared of shape {shown}, but the graph computes {list(value.shape)}")


class _Signature(NamedTuple):
    schema: Any        # onnx.defs.OpSchema: inputs, outputs and attributes of the op in one opset
    formal: list       # its formal inputs (the last may be variadic)
    allowed: dict      # type variable ("T") -> the ONNX types it may be ("tensor(float)", ...)


@functools.cache   # (a model repeats a few ops many times: looked up once each)
def _signature(op_type: str, opset: int) -> _Signature | None:
    """``op_type``'s schema in ``opset``, or None when ONNX has no such op in that opset."""
    onnx = require_onnx()
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    return _Signature(schema, list(schema.inputs),
                      {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints})


def schema_of(node: Any, opset: int, where: str) -> _Signature:
    """The ONNX schema of ``node``'s op in the model's opset: what its inputs, outputs and attributes may be."""
    found = _signature(node.op_type, opset)
    if found is None:
        raise ONNXImportError(f"{where}: ONNX has no {node.op_type} in opset {opset}, the model's opset (the op "
                              "came in a later one)")
    return found


@functools.cache
def _onnx_type(dtype: backend.DType) -> str:
    """How ONNX's schemas spell ``dtype``: ``tensor(float)``."""
    onnx = require_onnx()
    code = onnx.helper.np_dtype_to_tensor_dtype(backend.host.dtype(dtype.array_dtype))
    return f"tensor({onnx.TensorProto.DataType.Name(code).lower()})"


def check_signature(onnx: Any, signature: _Signature, node: Any, args: list, where: str) -> None:
    """The node's inputs and outputs against its op's schema: how many, the required ones present, each input of a dtype
    the op takes there, and inputs that share a type variable of one dtype (``Add`` of float32 and int64 is no ONNX
    model: toynet's promotion would give a dtype ONNX never does)."""
    schema, formal, allowed = signature
    if not schema.min_input <= len(node.input) <= schema.max_input:
        raise ONNXImportError(f"{where}: has {len(node.input)} input(s); {node.op_type} takes {schema.min_input} to "
                              f"{schema.max_input}")
    if len(node.output) > schema.max_output or not any(node.output):
        raise ONNXImportError(f"{where}: has {len(node.output)} output(s); {node.op_type} gives {schema.min_output} "
                              f"to {schema.max_output}")
    first: dict[str, tuple] = {}   # type variable -> (input name, dtype) of the first input it typed
    for k, (name, value) in enumerate(zip(node.input, args)):
        param = formal[min(k, len(formal) - 1)]
        if value is None:
            if param.option == onnx.defs.OpSchema.FormalParameterOption.Single:
                raise ONNXImportError(f"{where}: its input {k} ({param.name}) is required, but the node leaves it out")
            continue
        have = _onnx_type(value.dtype)
        if have not in allowed.get(param.type_str, {param.type_str}):
            raise ONNXImportError(f"{where}: its input {k} ({param.name}, {name!r}) is {value.dtype.name}, which "
                                  f"{node.op_type} does not take there; it takes "
                                  f"{', '.join(sorted(allowed.get(param.type_str, {param.type_str})))}")
        if param.type_str in allowed:
            other = first.setdefault(param.type_str, (name, value.dtype))
            if other[1] != value.dtype:
                raise ONNXImportError(f"{where}: its inputs {other[0]!r} ({other[1].name}) and {name!r} "
                                      f"({value.dtype.name}) must have the same dtype ({node.op_type}'s type "
                                      f"{param.type_str})")


def attributes_of(onnx: Any, node: Any, schema: Any, where: str) -> Attributes:
    """The node's attributes, each one the op's ONNX schema declares, of the type it declares (a float ``axis`` is
    refused, not truncated; a misspelt ``axes`` is refused, not ignored), each given once."""
    values = {}
    kinds = onnx.AttributeProto.AttributeType
    for a in node.attribute:
        declared = schema.attributes.get(a.name)
        if declared is None:
            raise ONNXImportError(f"{where}: has an attribute {a.name!r}, which {node.op_type} does not take (it takes "
                                  f"{', '.join(sorted(schema.attributes)) or 'none'})")
        if a.type != declared.type:
            raise ONNXImportError(f"{where}: attribute {a.name!r} is {kinds.Name(a.type)}, but {node.op_type} takes "
                                  f"{kinds.Name(declared.type)}")
        if a.name in values:
            raise ONNXImportError(f"{where}: attribute {a.name!r} is given twice")
        try:
            values[a.name] = onnx.helper.get_attribute_value(a)
        except Exception as error:
            raise ONNXImportError(f"{where}: attribute {a.name!r} cannot be read ({error})") from None
    return Attributes(values, where)


def input_type(onnx: Any, info: Any, given: Any) -> tuple[tuple, backend.DType]:
    """A graph input's shape and dtype, from the file (or ``given``, input_shapes's entry for it)."""
    where = f"graph input {info.name!r}"
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise ONNXUnsupportedError(f"{where} is of the ONNX type {kind or 'nothing'}; toynet imports tensors only")
    tensor_type = info.type.tensor_type
    try:
        elem = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
    except KeyError:
        raise ONNXImportError(f"{where} has an unknown element type {tensor_type.elem_type}") from None
    dtype = to_toynet_dtype(elem, where)
    if given is not None:
        return tuple(int(d) for d in given), dtype
    if not tensor_type.HasField("shape"):
        raise ONNXUnsupportedError(f"{where} declares no shape (not even its rank); toynet graphs have static shapes: "
                                   f"pass input_shapes={{{info.name!r}: (...)}} to flow.onnx.load")
    dims = tensor_type.shape.dim
    if any(not d.HasField("dim_value") for d in dims):
        named = [d.dim_param or "?" if not d.HasField("dim_value") else d.dim_value for d in dims]
        raise ONNXUnsupportedError(f"{where} has shape {named} with symbolic dimensions; toynet graphs have static "
                                   f"shapes: pass input_shapes={{{info.name!r}: (...)}} to flow.onnx.load")
    if any(d.dim_value < 0 for d in dims):
        raise ONNXImportError(f"{where} declares a negative dimension in {[d.dim_value for d in dims]}")
    return tuple(d.dim_value for d in dims), dtype
