"""Fuzzing the ONNX importer (issue 21): mutate small valid ONNX models and check what `flow.onnx.load` makes of them.

Each example takes one of a few seed models (a CNN, an MLP, shape plumbing, shape arithmetic, generated
tensors, integer and bool arithmetic, a model toynet exported itself) and applies one to three mutations: a
declared shape or dimension (0, negative, huge), an attribute (another value, another type, a list, removed, one
the op does not have), an edge (an input rewired to another value, to a name nothing defines, to a later node's
output: a cycle), a dtype, an op type, a domain, the opset. Then, on the serialized file:

- `flow.onnx.load` either returns a graph or raises `flow.onnx.ONNXImportError` (`ONNXUnsupportedError` is one):
  any other exception fails the test;
- loading allocates less than BUDGET_BYTES (measured with tracemalloc, which sees NumPy's allocations). The
  mutations draw dimensions that are either small (at most 7) or far beyond every cap (2**31 and more), so a
  model that may legitimately allocate up to the import cap (256 MB) is never drawn: a peak over the budget
  means something was allocated before its size was checked;
- a graph that loads runs on random inputs; when ONNX's checker and ONNX Runtime accept the model too, toynet's
  outputs have ONNX Runtime's shapes, dtypes and values. (When they reject it, toynet may be more lenient, but
  what it loaded must run.)

Hangs: seed models are tiny, a graph is run only when all its values together hold at most MAX_RUN_ELEMENTS
numbers, and an example that takes more than SECONDS_PER_EXAMPLE fails (a loop over a count read from the file,
such as Split's num_outputs = 2**62, would). The conftest's "fixed" profile draws the same examples on every
run; HYPOTHESIS_PROFILE=random draws new ones.
"""

from __future__ import annotations

import contextlib
import math
import signal
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import toynet as flow
from toynet.onnx import ONNXImportError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from toynet.onnx.import_ops import IMPORTERS  # noqa: E402

# Mutants compute with infinities and NaNs (a cast of 1e30 to int8, a log of a negative number) on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

BUDGET_BYTES = 64 * 2**20
MAX_RUN_ELEMENTS = 200_000
EXAMPLES_PER_SEED = 30
SECONDS_PER_EXAMPLE = 20   # (an example takes milliseconds; this is for a loop that would not end)

# ------------------------------------------------------------------------------------------- seed models


def _value(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)   # each seed is valid, so a refusal is a mutation's doing
    return model


def _floats(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def cnn():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], axis=1, name="flatten"),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1, alpha=0.5, name="fc")]
    return _model(nodes, [_value("x", TensorProto.FLOAT, [1, 2, 6, 6])], [_value("y", TensorProto.FLOAT, [1, 4])],
                  [_init("w", _floats(3, 2, 3, 3)), _init("b", _floats(3, seed=1)),
                   _init("fc_w", _floats(4, 27, seed=2)), _init("fc_b", _floats(4, seed=3))])


def mlp():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Add", ["h", "b"], ["a"], name="add"),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1, name="softmax")]
    return _model(nodes, [_value("x", TensorProto.FLOAT, [2, 5])], [_value("y", TensorProto.FLOAT, [2, 3])],
                  [_init("w", _floats(5, 3)), _init("b", _floats(3, seed=1))])


def plumbing():
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=1, name="concat"),
             helper.make_node("Gather", ["c", "idx"], ["g"], axis=1, name="gather"),
             helper.make_node("Reshape", ["g", "shape"], ["r"], name="reshape"),
             helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0], name="transpose")]
    return _model(nodes, [_value("x", TensorProto.FLOAT, [2, 3, 4])], [_value("y", TensorProto.FLOAT, [8, 3])],
                  [_init("idx", np.array([0, 2, 5], np.int64)), _init("shape", np.array([3, -1], np.int64))])


def shape_arithmetic():
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0, name="batch"),
             helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0, name="target"),
             helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sl"], name="slice"),
             helper.make_node("Pad", ["sl", "pads"], ["pd"], mode="constant", name="pad"),
             helper.make_node("Tile", ["pd", "reps"], ["t"], name="tile"),
             helper.make_node("Reshape", ["t", "target"], ["flat"], name="flatten"),
             helper.make_node("Pow", ["flat", "two"], ["sq"], name="square"),
             helper.make_node("ReduceMax", ["sq"], ["m"], axes=[1], keepdims=1, name="max"),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.DOUBLE, name="cast")]
    inits = [_init("zero", np.array([0], np.int64)), _init("minus_one", np.array([-1], np.int64)),
             _init("starts", np.array([0, 1], np.int64)), _init("ends", np.array([2, 4], np.int64)),
             _init("axes", np.array([0, 1], np.int64)), _init("steps", np.array([1, 1], np.int64)),
             _init("pads", np.array([0, 1, 0, 1], np.int64)), _init("reps", np.array([1, 2], np.int64)),
             _init("two", np.array(2.0, np.float32))]
    return _model(nodes, [_value("x", TensorProto.FLOAT, [2, 4])], [_value("y", TensorProto.DOUBLE, [2, 1])], inits)


def generators():
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="fill",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
             helper.make_node("Range", ["start", "limit", "delta"], ["steps"], name="range"),
             helper.make_node("Cast", ["steps"], ["stepsf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Add", ["filled", "stepsf"], ["a"], name="add"),
             helper.make_node("Split", ["a", "split"], ["s0", "s1"], axis=1, name="split"),
             helper.make_node("Unsqueeze", ["s0", "axes"], ["u"], name="unsqueeze"),
             helper.make_node("Squeeze", ["u", "axes"], ["q"], name="squeeze"),
             helper.make_node("Greater", ["q", "x"], ["gt"], name="greater"),
             helper.make_node("Where", ["gt", "q", "x"], ["w"], name="where"),
             helper.make_node("Expand", ["w", "expand"], ["e"], name="expand"),
             helper.make_node("CumSum", ["e", "cum_axis"], ["cs"], name="cumsum"),
             helper.make_node("TopK", ["cs", "k"], ["y", "idx"], axis=-1, name="topk")]
    inits = [_init("shape", np.array([2, 3], np.int64)), _init("start", np.array(0, np.int64)),
             _init("limit", np.array(3, np.int64)), _init("delta", np.array(1, np.int64)),
             _init("split", np.array([2, 1], np.int64)), _init("axes", np.array([0], np.int64)),
             _init("expand", np.array([2, 2, 2], np.int64)), _init("cum_axis", np.array(1, np.int64)),
             _init("k", np.array([1], np.int64))]
    return _model(nodes, [_value("x", TensorProto.FLOAT, [2, 2])],
                  [_value("y", TensorProto.FLOAT, [2, 2, 1]), _value("idx", TensorProto.INT64, [2, 2, 1])], inits)


def integers():
    """Integer and bool tensors, where toynet's NumPy-style promotion and ONNX's typing part ways: ReduceMin and
    ArgMin of uint8 (negating wraps around), Pow of an int32 base with a float exponent (ONNX keeps int32)."""
    nodes = [helper.make_node("ReduceMin", ["x"], ["low"], axes=[1], keepdims=0, name="low"),
             helper.make_node("ArgMin", ["x"], ["where_low"], axis=1, name="where_low"),
             helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32, name="widen"),
             helper.make_node("Pow", ["xi", "two"], ["p"], name="power"),
             helper.make_node("Add", ["p", "n"], ["s"], name="add"),
             helper.make_node("Greater", ["s", "n"], ["g"], name="greater"),
             helper.make_node("Not", ["g"], ["ng"], name="not"),
             helper.make_node("Where", ["ng", "s", "n"], ["y"], name="where")]
    return _model(nodes, [_value("x", TensorProto.UINT8, [2, 3]), _value("n", TensorProto.INT32, [2, 3])],
                  [_value("low", TensorProto.UINT8, [2]), _value("where_low", TensorProto.INT64, [2, 1]),
                   _value("y", TensorProto.INT32, [2, 3])], [_init("two", np.array(2.5, np.float32))])


def exported():
    """A model toynet wrote itself: Conv, BatchNormalization, pooling, Linear, as flow.onnx.export writes them."""
    from toynet import nn

    flow.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.AvgPool2d(2),
                          nn.Flatten(), nn.Linear(12, 2)).eval()

    class Inference(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    graph = Inference()
    graph(flow.randn(1, 2, 4, 4))
    with tempfile.TemporaryDirectory() as folder:
        return onnx.load(str(flow.onnx.export(graph, Path(folder) / "model.onnx")))


SEEDS = {"cnn": cnn, "mlp": mlp, "plumbing": plumbing, "shape_arithmetic": shape_arithmetic,
         "generators": generators, "integers": integers, "exported": exported}

# ----------------------------------------------------------------------------------------------- mutations

# Dimensions and integer values: small ones a model can use, and ones far beyond any cap (never in between, see
# the module's docstring).
DIMS = [0, 1, 2, 3, 5, 7, -1, -7, 2**31, 2**40, 2**62]
INTS = DIMS + [4, -2, -3, 2**63 - 1, -2**63]
DTYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8, TensorProto.UINT8,
          TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.INT16, TensorProto.UINT16,
          TensorProto.STRING, TensorProto.COMPLEX64, TensorProto.BFLOAT16, TensorProto.UNDEFINED, 99]
OP_TYPES = sorted(IMPORTERS) + ["NotAnOp", "Loop", "If", "Einsum"]
DOMAINS = ["", "ai.onnx", "com.microsoft", "ai.onnx.ml"]
OPSETS = [1, 6, 7, 11, 13, 17, 18, 21, 10_000]


def _names(graph):
    """Every value name the graph defines: inputs, initializers, node outputs."""
    return sorted({v.name for v in graph.input} | {t.name for t in graph.initializer}
                  | {o for n in graph.node for o in n.output if o})


def _values_of(init):
    """An initializer's numbers, flat; none when an earlier mutation left them unreadable."""
    try:
        return list(numpy_helper.to_array(init).reshape(-1).astype(np.float64))
    except Exception:
        return []


def _array_for(data_type, dims, values):
    """An initializer of ``data_type`` and ``dims`` holding ``values`` (recycled), or None when it cannot be
    written (a dtype NumPy has no counterpart for, or too many values to write)."""
    count = math.prod(dims)   # (Python's ints: NumPy's would overflow on 2**62 x 4)
    if count > 4096 or any(d < 0 or d > 2**31 for d in dims):   # (NumPy has no (0, 2**62) array either)
        return None
    try:
        np_type = helper.tensor_dtype_to_np_dtype(data_type)
    except Exception:
        return None
    if np_type.kind not in "biuf":
        return None
    raw = np.resize(np.asarray(values, dtype=np.float64), count) if values else np.zeros(count)
    if np_type.kind == "b":
        raw = raw != 0
    elif np_type.kind in "iu":
        info = np.iinfo(np_type)
        raw = np.clip(raw, info.min, info.max)
    return raw.astype(np_type).reshape(dims)


def _targets(graph):
    """What has a declared shape and dtype: graph inputs and outputs, initializers."""
    return ([("input", i) for i in range(len(graph.input))] + [("output", i) for i in range(len(graph.output))]
            + [("init", i) for i in range(len(graph.initializer))])


def mutate_shape(data, model):
    """A declared shape: a graph input's or output's dimensions, or an initializer's (with data to match, or not)."""
    graph = model.graph
    kind, k = data.draw(st.sampled_from(_targets(graph)), label="shape of")
    if kind in ("input", "output"):
        dims = (graph.input if kind == "input" else graph.output)[k].type.tensor_type.shape.dim
        how = data.draw(st.sampled_from(["set", "add", "drop", "scalar"]), label="how")
        if how == "set" and len(dims):
            dims[data.draw(st.integers(0, len(dims) - 1), label="dim")].dim_value = data.draw(st.sampled_from(DIMS))
        elif how == "add":
            dims.add().dim_value = data.draw(st.sampled_from(DIMS), label="new dim")
        elif how == "drop" and len(dims):
            del dims[len(dims) - 1]
        elif how == "scalar":
            del dims[:]
        return
    init = graph.initializer[k]
    dims = list(init.dims)
    how = data.draw(st.sampled_from(["set", "add", "drop", "scalar"]), label="how")
    if how == "set" and dims:
        dims[data.draw(st.integers(0, len(dims) - 1), label="dim")] = data.draw(st.sampled_from(DIMS), label="size")
    elif how == "add":
        dims.append(data.draw(st.sampled_from(DIMS), label="new dim"))
    elif how == "drop" and dims:
        dims.pop()
    elif how == "scalar":
        dims = []
    if data.draw(st.booleans(), label="data to match"):
        array = _array_for(init.data_type, dims, _values_of(init))
        if array is not None:
            init.CopyFrom(numpy_helper.from_array(array, init.name))
            return
    del init.dims[:]
    init.dims.extend(dims)   # the same data under other dimensions: a liar


def mutate_values(data, model):
    """The numbers in an initializer: shapes, indices, axes, pads, repeats become other (small or huge) ones."""
    graph = model.graph
    if not graph.initializer:
        return
    init = graph.initializer[data.draw(st.integers(0, len(graph.initializer) - 1), label="values of")]
    values = data.draw(st.lists(st.sampled_from(INTS), min_size=1, max_size=6), label="values")
    keep_shape = data.draw(st.booleans(), label="keep shape")
    dims = list(init.dims) if keep_shape else ([len(values)] if data.draw(st.booleans(), label="1-d") else [])
    array = _array_for(init.data_type, dims, values)
    if array is not None:
        init.CopyFrom(numpy_helper.from_array(array, init.name))


def _attribute_value(data, name):
    kind = data.draw(st.sampled_from(["int", "float", "ints", "floats", "string", "tensor", "empty ints"]),
                     label=f"{name} as")
    if kind == "int":
        return helper.make_attribute(name, data.draw(st.sampled_from(INTS), label="int"))
    if kind == "float":
        return helper.make_attribute(name, data.draw(st.sampled_from([0.0, 1.5, -1.0, 1e30, float("nan")])))
    if kind == "ints":
        return helper.make_attribute(name, data.draw(st.lists(st.sampled_from(INTS), min_size=1, max_size=5)))
    if kind == "floats":
        return helper.make_attribute(name, [1.5, -2.0])
    if kind == "string":
        return helper.make_attribute(name, data.draw(st.sampled_from(["", "NOTSET", "SAME_LOWER", "CRD", "\xff"])))
    if kind == "tensor":
        return helper.make_attribute(name, numpy_helper.from_array(np.array([2, 3], np.int64)))
    return helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS)


def mutate_attribute(data, model):
    """An attribute: removed, given another value or type, or added (one the op's schema declares, or not)."""
    node = model.graph.node[data.draw(st.integers(0, len(model.graph.node) - 1), label="attribute of node")]
    attrs = node.attribute
    how = data.draw(st.sampled_from(["remove", "replace", "add from schema", "add unknown"]), label="how")
    if how in ("remove", "replace") and len(attrs):
        k = data.draw(st.integers(0, len(attrs) - 1), label="attribute")
        if how == "remove":
            del attrs[k]
        else:
            attrs[k].CopyFrom(_attribute_value(data, attrs[k].name))
        return
    if how == "add from schema":
        try:
            names = sorted(onnx.defs.get_schema(node.op_type, 17).attributes)
        except Exception:
            names = []
        name = data.draw(st.sampled_from(names), label="attribute") if names else "axis"
    else:
        name = "not_an_attribute"
    del attrs[:]  # (rebuilt below without the name, so the node holds it once)
    attrs.extend([a for a in list(node.attribute) if a.name != name] + [_attribute_value(data, name)])


def mutate_edge(data, model):
    """An edge: a node input rewired to another value (earlier, later: a cycle), to nothing, or dropped; a node
    output renamed onto another value; two nodes swapped; a graph output pointed elsewhere."""
    graph = model.graph
    names = _names(graph) + ["ghost", ""]
    how = data.draw(st.sampled_from(["input", "extra input", "drop input", "output", "swap", "graph output"]),
                    label="edge")
    k = data.draw(st.integers(0, len(graph.node) - 1), label="node")
    node = graph.node[k]
    if how == "input" and len(node.input):
        node.input[data.draw(st.integers(0, len(node.input) - 1), label="input")] = data.draw(st.sampled_from(names))
    elif how == "extra input":
        node.input.append(data.draw(st.sampled_from(names), label="extra"))
    elif how == "drop input" and len(node.input):
        del node.input[len(node.input) - 1]
    elif how == "output" and len(node.output):
        node.output[0] = data.draw(st.sampled_from(names), label="output")
    elif how == "swap" and len(graph.node) > 1:
        j = data.draw(st.integers(0, len(graph.node) - 1), label="with node")
        first, second = onnx.NodeProto(), onnx.NodeProto()
        first.CopyFrom(graph.node[k])
        second.CopyFrom(graph.node[j])
        graph.node[k].CopyFrom(second)
        graph.node[j].CopyFrom(first)
    elif how == "graph output":
        graph.output[0].name = data.draw(st.sampled_from(names), label="graph output")


def mutate_dtype(data, model):
    """The element type of a graph input or output, or of an initializer (its data converted, or left as it was)."""
    graph = model.graph
    kind, k = data.draw(st.sampled_from(_targets(graph)), label="dtype of")
    new = data.draw(st.sampled_from(DTYPES), label="dtype")
    if kind in ("input", "output"):
        (graph.input if kind == "input" else graph.output)[k].type.tensor_type.elem_type = new
        return
    init = graph.initializer[k]
    array = _array_for(new, list(init.dims), _values_of(init))
    if array is not None and data.draw(st.booleans(), label="convert data"):
        init.CopyFrom(numpy_helper.from_array(array, init.name))
    else:
        init.data_type = new  # the same bytes or fields, read as another type


def mutate_op(data, model):
    """A node's op type, its domain, or the model's opset."""
    graph = model.graph
    how = data.draw(st.sampled_from(["op_type", "domain", "opset", "delete node", "duplicate node"]), label="op")
    node = graph.node[data.draw(st.integers(0, len(graph.node) - 1), label="node")]
    if how == "op_type":
        node.op_type = data.draw(st.sampled_from(OP_TYPES), label="op_type")
    elif how == "domain":
        node.domain = data.draw(st.sampled_from(DOMAINS), label="domain")
    elif how == "opset":
        model.opset_import[0].version = data.draw(st.sampled_from(OPSETS), label="opset")
    elif how == "delete node" and len(graph.node) > 1:
        graph.node.remove(node)
    elif how == "duplicate node":
        graph.node.append(node)


MUTATIONS = [mutate_shape, mutate_values, mutate_attribute, mutate_edge, mutate_dtype, mutate_op]

# ------------------------------------------------------------------------------------------------- checks


class Hang(BaseException):
    """An example ran past SECONDS_PER_EXAMPLE. (A BaseException: no ``except Exception`` in the code under test
    may swallow it.)"""


@contextlib.contextmanager
def time_limit(seconds):
    """Raise Hang in the main thread after ``seconds`` (with SIGALRM; where there is none, no limit)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise Hang(f"the example ran more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load_within_budget(path):
    """``flow.onnx.load(path)`` (None if it raised ONNXImportError) and the peak bytes Python and NumPy allocated
    while it ran. Any other exception propagates: it fails the test."""
    tracemalloc.start()
    try:
        try:
            graph = flow.onnx.load(path)
        except ONNXImportError:
            graph = None
        return graph, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def random_input(node, rng):
    dtype = node.dtype.array_dtype
    if node.dtype.is_floating_point:
        return rng.standard_normal(node.shape).astype(dtype)
    if node.dtype == flow.bool:
        return rng.integers(0, 2, node.shape).astype(bool)
    return rng.integers(0, 3, node.shape).astype(dtype)   # (small, not negative: they may be indices)


def onnx_runtime_session(model):
    """An ONNX Runtime session for ``model``, or None when ONNX's checker or ONNX Runtime rejects it. (The checker
    goes first: ONNX Runtime is C++, and a model the checker accepts will not crash it.)"""
    try:
        onnx.checker.check_model(model, full_check=True)
        options = ort.SessionOptions()
        options.log_severity_level = 4
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:
        return None


def describe(model):
    """The model in ONNX's text form, or as protobuf prints it when that form cannot show it (an initializer whose
    data does not fit its shape)."""
    try:
        return onnx.printer.to_text(model)
    except Exception:
        return str(model)


def check_mutant(model, path):
    path.write_bytes(model.SerializeToString())
    graph, peak = load_within_budget(path)
    assert peak < BUDGET_BYTES, f"{peak:,} bytes allocated while loading"
    if graph is None:
        return "refused"
    if sum(math.prod(n.shape) for n in graph.traced.nodes) > MAX_RUN_ELEMENTS:
        return "loaded, too large to run"
    rng = np.random.default_rng(0)
    feeds = [random_input(n, rng) for n in graph.traced.inputs]
    session = onnx_runtime_session(model)
    expected = None
    if session is not None:
        names = [i.name for i in session.get_inputs()]
        try:
            expected = session.run(None, dict(zip(names, feeds)))
        except Exception:   # ONNX Runtime fails on these inputs (an index out of range): nothing to compare
            session = None
    got = graph(*[flow.tensor(x) for x in feeds])   # what toynet loaded, it runs
    got = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
    if expected is None:
        return "loaded, runs (ONNX Runtime rejects it)"
    assert len(got) == len(expected)
    # float16 anywhere on the way: ONNX Runtime computes some float16 ops in float32, toynet in float16.
    half = any(n.dtype == flow.float16 for n in graph.traced.nodes)
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if half else {"rtol": 1e-4, "atol": 1e-5}
    for ours, theirs in zip(got, expected):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours.shape, ours.dtype, theirs.shape,
                                                                            theirs.dtype)
        if theirs.dtype.kind in "iu":
            # A NaN or an infinity cast to an integer (0 ** -1, (-1) ** 0.5) is undefined in C++; ONNX Runtime on x86
            # gives the lowest integer. Those elements have no right answer to compare.
            defined = theirs != np.iinfo(theirs.dtype).min
            ours, theirs = ours[defined], theirs[defined]
        np.testing.assert_allclose(ours, theirs, equal_nan=True, **tolerance)
    return "loaded, agrees with ONNX Runtime"


@pytest.fixture(scope="module")
def seeds():
    return {name: make() for name, make in SEEDS.items()}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_each_seed_model_loads_and_agrees_with_onnx_runtime(seeds, seed, tmp_path):
    assert check_mutant(seeds[seed], tmp_path / "seed.onnx") == "loaded, agrees with ONNX Runtime"


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_a_mutated_model_is_refused_by_name_or_loads_and_agrees(seeds, seed, tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "mutant.onnx"

    @settings(max_examples=EXAMPLES_PER_SEED, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(data=st.data())
    def mutated_models(data):
        model = onnx.ModelProto()
        model.CopyFrom(seeds[seed])
        for mutate in data.draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), label="mutations"):
            mutate(data, model)
        note(describe(model))   # the mutant, when an example fails
        with time_limit(SECONDS_PER_EXAMPLE):
            check_mutant(model, path)

    mutated_models()
