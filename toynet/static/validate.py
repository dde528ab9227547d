"""Checking a saved graph completely, before anything is built from it.

A deployed graph's ``structure.json`` may come from anyone. Loading it compiles Python source, so what
it says must be data the compiler can take at its word. :func:`check_graph` reads the whole description
and refuses (with :class:`~toynet.serialization.CheckpointError` naming the file, the entry and what was
expected) anything that :func:`~toynet.static.serialize.encode_graph` would not have written:

* every name (graph, nodes, states, arrays) matches :data:`~toynet.serialization.errors.NAME`; node and
  state names are unique; the class name is a Python identifier;
* every op is in the op table (``toynet.ops.OPS``), and is not one that only a pass makes;
* every attribute is one its op takes, of the type and in the range :data:`ATTRIBUTES` allows; every
  literal input is a number;
* every node's inputs are earlier nodes; shapes and dtypes are well-formed and bounded, and each op's
  declared shape and dtype are what its shape rule gives for its inputs;
* inputs, outputs and the output structure fit together; source lines are one printable line;
* counts are capped: nodes, inputs per op, nesting, the work constant folding does at load time.

It returns a :class:`CheckedGraph`: the same description with values decoded (tuples, dtypes), plus the
arrays to read, each with the dtype and shape its node declares.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .. import backend
from ..ops import OPS
from ..ops.fast.conv_fused import ALGORITHMS
from ..ops.select import TENSOR_INDEX
from ..serialization.errors import MAX_DEPTH, CheckpointError, is_name, shape_error, short
from .ir import CONSTANT, INPUT, OP, PHASES, STATE

MAX_NODES = 50_000
MAX_OP_INPUTS = 4096
MAX_SOURCE = 500                # characters of one source line
MAX_FOLDED_BYTES = 2**28        # values constant folding computes while loading
MAX_GRAPH_BYTES = 2**36         # all values of the graph together (the compiled plan allocates buffers for them)
MAX_INDEX_ELEMENTS = 2**24      # elements of the index tensors of one getitem (its shape rule reads them)
STATE_KINDS = ("parameter", "buffer", "optimizer", "system")
PASS_OPS = ("fused_elementwise",)  # made by the optimisation passes after loading, never saved
DTYPES = {d.name: d for d in backend.ALL_DTYPES}
_CLASS = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
_FIELDS = {"name", "kind", "shape", "dtype", "phase", "scope", "source"}
_KIND_FIELDS = {INPUT: set(), STATE: {"state_name", "state_kind", "array"}, CONSTANT: {"array"},
                OP: {"op", "inputs", "attrs"}}
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass
class CheckedGraph:
    """A saved graph that passed :func:`check_graph`: node entries with decoded ``shape`` (a tuple),
    ``dtype`` (a DType), ``inputs`` and ``attrs``; the arrays to read, name -> (dtype, shape, where)."""

    name: str
    nodes: list[dict]
    inputs: list[str]
    outputs: list[str]
    output_structure: Any
    wanted: dict[str, tuple] = field(default_factory=dict)


# --------------------------------------------------------------------------------- attribute values


def _int(low: int, high: int):
    return lambda v: type(v) is int and low <= v <= high


def _ints(low: int, high: int, length: int | None = None, scalar: bool = False):
    def ok(v: Any) -> bool:
        if scalar and type(v) is int:
            return low <= v <= high
        return isinstance(v, tuple) and (length is None or len(v) == length) and len(v) <= 64 and all(
            type(d) is int and low <= d <= high for d in v)
    return ok


def _number(low: float, high: float):
    return lambda v: type(v) in (int, float) and low <= v <= high


def _index_item(v: Any) -> bool:
    if isinstance(v, slice):
        return all(x is None or type(x) is int and abs(x) <= 2**62 for x in (v.start, v.stop, v.step))
    return v is None or v is Ellipsis or v == TENSOR_INDEX or type(v) is int and abs(v) <= 2**62


_BIG = 2**31
#: Each attribute an op may have, with what its value may be. An op may only have the attributes its
#: forward takes as keywords, and only those listed here.
ATTRIBUTES: dict[str, tuple[str, Any]] = {
    "kernel_size": ("an int or a pair of ints from 1 to 65536", _ints(1, 65536, 2, scalar=True)),
    "stride": ("an int or a pair of ints from 1 to 65536", _ints(1, 65536, 2, scalar=True)),
    "dilation": ("an int or a pair of ints from 1 to 65536", _ints(1, 65536, 2, scalar=True)),
    "padding": ("an int or a pair of ints from 0 to 65536", _ints(0, 65536, 2, scalar=True)),
    "output_size": ("an int or a pair of ints from 1 to 2**31", _ints(1, _BIG, 2, scalar=True)),
    "sides": ("four ints from 0 to 65536 (left, right, top, bottom)", _ints(0, 65536, 4)),
    "scale": ("a pair of ints from 1 to 65536", _ints(1, 65536, 2)),
    "shape": ("a tuple of sizes (-1 to 2**31)", _ints(-1, _BIG)),
    "input_shape": ("a tuple of sizes", _ints(0, _BIG)),
    "weight_shape": ("a tuple of sizes", _ints(0, _BIG)),
    "dims": ("a tuple of dimensions", _ints(-64, 63)),
    "dim": ("a dimension, a tuple of them, or None", lambda v: v is None or _ints(-64, 63, scalar=True)(v)),
    "groups": ("an int from 1 to 65536", _int(1, 65536)),
    "num_classes": ("an int from 1 to 2**31", _int(1, _BIG)),
    "ignore_index": ("an int", _int(-2**63, 2**63 - 1)),
    "divisor_override": ("None or an int from 1 to 2**31", lambda v: v is None or _int(1, _BIG)(v)),
    "eps": ("a number from 0 to 1", _number(0.0, 1.0)),
    "p": ("a number from 0 to 1", _number(0.0, 1.0)),
    "min": ("None or a number", lambda v: v is None or type(v) in (int, float)),
    "max": ("None or a number", lambda v: v is None or type(v) in (int, float)),
    "reduction": ("'mean', 'sum' or 'none'", lambda v: v in ("mean", "sum", "none") and type(v) is str),
    "dtype": ("a dtype", lambda v: isinstance(v, backend.DType)),
    "index": ("a tuple of ints, slices, None, ... and tensor places",
              lambda v: isinstance(v, tuple) and len(v) <= 64 and all(_index_item(i) for i in v)),
    "source": ("a device", lambda v: isinstance(v, backend.Device)),  # to_device's; replaced when loading
    "algorithm": (f"one of {ALGORITHMS}", lambda v: type(v) is str and v in ALGORITHMS),
    **{flag: ("true or false", lambda v: type(v) is bool)
       for flag in ("ceil_mode", "count_include_pad", "keepdim", "training", "unbiased")},
}

_SIGNATURES: dict[str, tuple[frozenset, int, float]] = {}


def op_signature(name: str) -> tuple[frozenset, int, float]:
    """What op ``name``'s forward takes: its attributes (the keywords :data:`ATTRIBUTES` lists), and the
    fewest and most inputs (arrays or numbers) it is called with."""
    if name not in _SIGNATURES:
        parameters = list(inspect.signature(OPS[name].forward).parameters.values())[1:]  # after xp
        positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                      and p.name not in ATTRIBUTES and p.name not in ("out", "scratch")]
        fewest = sum(1 for p in positional if p.default is p.empty)
        most = math.inf if any(p.kind == p.VAR_POSITIONAL for p in parameters) else len(positional)
        _SIGNATURES[name] = (frozenset(p.name for p in parameters if p.name in ATTRIBUTES), fewest, most)
    return _SIGNATURES[name]


def decode_value(value: Any, fail: Any, depth: int = 0) -> Any:
    """An attribute or literal as :func:`~toynet.static.serialize.encode_value` wrote it, back as the
    Python value; ``fail(expected, got)`` makes the error for anything else."""
    if depth > MAX_DEPTH:
        raise fail(f"values nested at most {MAX_DEPTH} deep", "deeper")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, list):
        return [decode_value(v, fail, depth + 1) for v in value]
    if not (isinstance(value, dict) and len(value) == 1):
        raise fail("a value (number, string, bool, null, list, or one tag)", value)
    (tag, payload), = value.items()
    if tag == "tuple" and isinstance(payload, list):
        return tuple(decode_value(v, fail, depth + 1) for v in payload)
    if tag == "dict" and isinstance(payload, list) and all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) in (str, int) for p in payload):
        return {k: decode_value(v, fail, depth + 1) for k, v in payload}
    if tag == "slice" and isinstance(payload, list) and len(payload) == 3:
        return slice(*(decode_value(v, fail, depth + 1) for v in payload))
    if tag == "ellipsis" and payload is True:
        return Ellipsis
    if tag == "dtype" and isinstance(payload, str) and payload in DTYPES:
        return DTYPES[payload]
    if tag == "device" and isinstance(payload, str) and re.fullmatch(r"[a-z]{1,20}(:[0-9]{1,4})?", payload):
        return backend.CPU  # only to_device has one (its source), and loading replaces it
    if tag == "float" and isinstance(payload, str) and payload in _FLOATS:
        return _FLOATS[payload]
    raise fail("a tagged value (tuple, dict, slice, ellipsis, dtype, device or float)", value)


def _spec_ok(spec: Any, depth: int = 0) -> int:
    """How many tensors an output structure holds; -1 if it is not one build() could return."""
    if depth > MAX_DEPTH or not isinstance(spec, (tuple, list)) or not spec:
        return -1
    kind = spec[0]
    if kind == "T" and len(spec) == 1:
        return 1
    if kind == "V" and len(spec) == 2:
        return 0 if spec[1] is None or type(spec[1]) in (bool, int, float, str) else -1
    if kind in ("tuple", "list", "dict") and len(spec) == 2 and isinstance(spec[1], (tuple, list)):
        if kind == "dict":
            if not all(isinstance(p, (tuple, list)) and len(p) == 2 and type(p[0]) in (str, int) for p in spec[1]):
                return -1
            counts = [_spec_ok(p[1], depth + 1) for p in spec[1]]
        else:
            counts = [_spec_ok(s, depth + 1) for s in spec[1]]
        return -1 if any(c < 0 for c in counts) else sum(counts)
    return -1


# ------------------------------------------------------------------------------------------ the graph


class _Meta:
    """What a shape rule reads of an input: its shape and dtype."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: backend.DType):
        self.shape, self.dtype = shape, dtype


def check_graph(data: Any, source: str = "structure.json", class_name: Any = "") -> CheckedGraph:
    """Check a saved graph (the ``"graph"`` entry of a deployment's structure.json) completely; see the
    module's docstring. ``source`` names the file in error messages."""

    def fail(where: str, expected: str, got: Any) -> CheckpointError:
        return CheckpointError(f"{source}: {where}: expected {expected}, got {short(got)}")

    if not (class_name == "" or isinstance(class_name, str) and _CLASS.fullmatch(class_name)):
        raise fail("class", "a Python class name", class_name)
    if not (isinstance(data, dict) and set(data) == {"name", "nodes", "inputs", "outputs", "output_structure"}):
        raise fail("graph", "an object with name, nodes, inputs, outputs and output_structure",
                   sorted(data) if isinstance(data, dict) else data)
    if not is_name(data["name"]):
        raise fail("graph.name", "a name of letters, digits, '_', '.' and '-'", data["name"])
    entries = data["nodes"]
    if not isinstance(entries, list) or not 0 < len(entries) <= MAX_NODES:
        raise fail("graph.nodes", f"a list of 1 to {MAX_NODES} nodes",
                   f"a list of {len(entries)} nodes" if isinstance(entries, list) else type(entries).__name__)
    checked = CheckedGraph(data["name"], [], [], [], None)
    metas: dict[str, _Meta] = {}
    kinds: dict[str, str] = {}
    state_names: set[str] = set()
    folded: set[str] = set()     # nodes constant folding will compute while loading
    folded_bytes = total_bytes = 0
    for i, entry in enumerate(entries):
        where = f"graph.nodes[{i}]"
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if not (isinstance(kind, str) and kind in _KIND_FIELDS):
            raise fail(where, "a node whose kind is input, state, constant or op", entry)
        if set(entry) != _FIELDS | _KIND_FIELDS[kind]:
            raise fail(where, f"a {kind} node with the fields {', '.join(sorted(_FIELDS | _KIND_FIELDS[kind]))}",
                       sorted(entry))
        name = entry["name"]
        if not is_name(name) or name in metas:
            raise fail(f"{where}.name", "a new name of letters, digits, '_', '.' and '-'", name)
        where = f"node {name}"
        if shape_error(entry["shape"]):
            raise fail(f"{where}.shape", shape_error(entry["shape"]), entry["shape"])
        if not (isinstance(entry["dtype"], str) and entry["dtype"] in DTYPES):
            raise fail(f"{where}.dtype", f"one of {', '.join(DTYPES)}", entry["dtype"])
        if entry["phase"] not in PHASES:
            raise fail(f"{where}.phase", f"one of {', '.join(PHASES)}", entry["phase"])
        if not (entry["scope"] == "" or is_name(entry["scope"])):
            raise fail(f"{where}.scope", "'' or a module path", entry["scope"])
        text = entry["source"]
        if not (isinstance(text, str) and len(text) <= MAX_SOURCE and text.isprintable()):
            raise fail(f"{where}.source", f"one printable line of at most {MAX_SOURCE} characters", text)
        node = dict(entry, shape=tuple(entry["shape"]), dtype=DTYPES[entry["dtype"]])
        if kind == STATE:
            if not is_name(entry["state_name"]) or entry["state_name"] in state_names:
                raise fail(f"{where}.state_name", "a new name of letters, digits, '_', '.' and '-'",
                           entry["state_name"])
            state_names.add(entry["state_name"])
            if entry["state_kind"] not in STATE_KINDS:
                raise fail(f"{where}.state_kind", f"one of {', '.join(STATE_KINDS)}", entry["state_kind"])
        if kind in (STATE, CONSTANT):
            array = entry["array"]
            if not is_name(array) or array in checked.wanted:
                raise fail(f"{where}.array", "a new array name", array)
            checked.wanted[array] = (node["dtype"].array_dtype, node["shape"], f"{source} at {where}")
        if kind == OP:
            _check_op(node, where, metas, fail)
            inputs = [x for x in node["inputs"] if isinstance(x, Ref)]
            if not OPS[node["op"]].random and all(x.name in folded or kinds[x.name] == CONSTANT for x in inputs):
                folded.add(name)
                folded_bytes += node["dtype"].itemsize * math.prod(node["shape"])
                if folded_bytes > MAX_FOLDED_BYTES:
                    raise fail(where, f"at most {MAX_FOLDED_BYTES} bytes of values computed from constants "
                                      f"alone (constant folding computes them while loading)", folded_bytes)
        total_bytes += node["dtype"].itemsize * math.prod(node["shape"])
        if total_bytes > MAX_GRAPH_BYTES:
            raise fail(where, f"graph values of at most {MAX_GRAPH_BYTES} bytes in all", total_bytes)
        metas[name] = _Meta(node["shape"], node["dtype"])
        kinds[name] = kind
        checked.nodes.append(node)
    for key in ("inputs", "outputs"):
        names = data[key]
        if not (isinstance(names, list) and len(names) <= MAX_OP_INPUTS
                and all(isinstance(n, str) and n in metas for n in names)):
            raise fail(f"graph.{key}", f"a list of at most {MAX_OP_INPUTS} names of its nodes", names)
    inputs = [n for n, k in kinds.items() if k == INPUT]
    if data["inputs"] != inputs:
        raise fail("graph.inputs", f"the input nodes in order {inputs}", data["inputs"])
    checked.inputs, checked.outputs = list(data["inputs"]), list(data["outputs"])
    structure = decode_value(data["output_structure"], lambda e, g: fail("graph.output_structure", e, g))
    if _spec_ok(structure) != len(checked.outputs):
        raise fail("graph.output_structure", f"the structure build() returned, holding the "
                   f"{len(checked.outputs)} outputs", data["output_structure"])
    checked.output_structure = structure
    return checked


class Ref:
    """An op's input that is another node, by name."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _check_op(node: dict, where: str, metas: dict[str, _Meta], fail: Any) -> None:
    """Check one op node's op, inputs and attributes, and that its shape rule gives its declared shape
    and dtype; decode its inputs (:class:`Ref` or a number) and attributes in ``node``."""
    op_name = node["op"]
    if not isinstance(op_name, str) or op_name not in OPS or op_name in PASS_OPS:
        raise fail(f"{where}.op", "the name of an op in toynet's op table", op_name)
    op = OPS[op_name]
    raw_inputs, raw_attrs = node["inputs"], node["attrs"]
    attributes, fewest, most = op_signature(op_name)
    if not (isinstance(raw_inputs, list) and fewest <= len(raw_inputs) <= min(most, MAX_OP_INPUTS)):
        raise fail(f"{where}.inputs", f"a list of {fewest} to {min(most, MAX_OP_INPUTS)} inputs of {op_name}",
                   raw_inputs)
    inputs: list[Any] = []
    for k, x in enumerate(raw_inputs):
        if isinstance(x, dict) and set(x) == {"node"} and isinstance(x["node"], str) and x["node"] in metas:
            inputs.append(Ref(x["node"]))
            continue
        literal = x.get("literal", ...) if isinstance(x, dict) and set(x) == {"literal"} else ...
        if isinstance(literal, dict) and set(literal) == {"float"} and isinstance(literal["float"], str) \
                and literal["float"] in _FLOATS:
            literal = _FLOATS[literal["float"]]
        if not (type(literal) in (bool, float) or type(literal) is int and abs(literal) < 2**63):
            raise fail(f"{where}.inputs[{k}]", "{'node': an earlier node} or {'literal': a number}", x)
        inputs.append(literal)
    if not isinstance(raw_attrs, dict):
        raise fail(f"{where}.attrs", "an object", raw_attrs)
    attrs = {}
    for key, value in raw_attrs.items():
        if key not in attributes:
            raise fail(f"{where}.attrs", f"attributes of {op_name} ({', '.join(sorted(attributes))})", key)
        value = decode_value(value, lambda e, g: fail(f"{where}.attrs.{key}", e, g))
        expected, ok = ATTRIBUTES[key]
        if not ok(value):
            raise fail(f"{where}.attrs.{key}", expected, value)
        attrs[key] = value
    node["inputs"], node["attrs"] = inputs, attrs
    args = [metas[x.name] if isinstance(x, Ref) else x for x in inputs]
    _check_dims(op_name, attrs, args, lambda e, g: fail(f"{where}.attrs", e, g))
    if op_name in ("getitem", "getitem_grad"):
        elements = sum(math.prod(a.shape) for a in args[1:] if isinstance(a, _Meta))
        if elements > MAX_INDEX_ELEMENTS:
            raise fail(f"{where}.inputs", f"index tensors of at most {MAX_INDEX_ELEMENTS} elements", elements)
    try:
        shape, dtype = op.infer(*args, **{k: v for k, v in attrs.items() if k != "source"})
    except Exception as error:  # a shape rule refusing its inputs: ShapeError, or any error at all
        raise fail(where, f"inputs and attributes {op_name} accepts ({type(error).__name__}: {error})",
                   {"inputs": raw_inputs, "attrs": raw_attrs}) from None
    if tuple(shape) != node["shape"] or dtype is not node["dtype"]:
        raise fail(where, f"the shape and dtype {op_name}'s shape rule gives, {getattr(dtype, 'name', dtype)} "
                          f"{list(shape)}", f"{node['dtype'].name} {list(node['shape'])}")


def _check_dims(op_name: str, attrs: dict, args: list, fail: Any) -> None:
    """Dimensions in ``dim``/``dims`` must exist in the first input (not every shape rule checks), and
    ``dims`` must be a permutation of them. (one_hot's dim counts in its result: its rule checks it.)"""
    first = args[0] if args else None
    ndim = max(len(first.shape), 1) if isinstance(first, _Meta) else 1
    dim = attrs.get("dim")
    if op_name != "one_hot" and dim is not None:
        for d in (dim,) if type(dim) is int else dim:
            if not -ndim <= d < ndim:
                raise fail(f"dim within the {ndim} dimension(s) of the input", attrs["dim"])
    if "dims" in attrs and sorted(d % ndim for d in attrs["dims"] if -ndim <= d < ndim) != list(range(ndim)):
        raise fail(f"dims: a permutation of the input's {ndim} dimensions", attrs["dims"])
