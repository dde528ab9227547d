"""flow.onnx.load: ONNX models (written here with onnx.helper) become toynet inference graphs that
compute what ONNX Runtime computes, print with tags, draw, and fail clearly on what toynet cannot import."""

from __future__ import annotations

import re

import numpy as np
import pytest

import toynet as flow

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)  # a valid model (output shapes left to the runtime)
    return model


def small_cnn(batch="N"):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "conv.weight")
    b = numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "conv.bias")
    fc = numpy_helper.from_array(rng.normal(size=(5, 4)).astype(np.float32), "fc.weight")
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("LeakyRelu", ["c"], ["r"], alpha=0.1, name="act"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.weight"], ["y"], transB=1, alpha=0.5, name="fc"),
        helper.make_node("Softmax", ["y"], ["out"], axis=-1, name="softmax"),
    ]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                      [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, 5])], [w, b, fc])


def test_an_imported_model_computes_what_onnx_runtime_computes(tmp_path):
    model = small_cnn(batch=2)
    onnx.save(model, str(tmp_path / "cnn.onnx"))
    graph = flow.onnx.load(tmp_path / "cnn.onnx")
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    (expected,) = ort.InferenceSession(str(tmp_path / "cnn.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    got = graph(flow.tensor(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_symbolic_dimensions_need_input_shapes():
    model = small_cnn(batch="N")
    with pytest.raises(ValueError, match=r"graph input 'x' has shape \['N', 3, 8, 8\].*input_shapes="):
        flow.onnx.load(model)
    graph = flow.onnx.load(model, input_shapes={"x": (3, 3, 8, 8)})
    assert graph(flow.randn(3, 3, 8, 8)).shape == (3, 5)


def test_printing_drawing_and_the_ir_of_an_imported_graph():
    graph = flow.onnx.load(small_cnn(batch=2))
    text = repr(graph)
    assert "(INPUT:x:tensor(..., size=[2, 3, 8, 8], dtype=toynet.float32))" in text
    assert "(PARAMETER:conv.weight:tensor(..., size=[4, 3, 3, 3]" in text
    assert "(OPERATOR:conv-conv2d" in text and "(OUTPUT:" in text
    assert any(n.op.name == "conv2d" for n in graph.ir.op_nodes)
    assert "conv2d" in graph.traced.format(show_source=True)
    assert "Conv conv" in graph.traced.format(show_source=True)  # the ONNX node each op came from
    dot = flow.viz.draw(graph).source
    assert "conv2d" in dot and "softmax" in dot


def test_all_unsupported_ops_are_listed_at_once():
    nodes = [helper.make_node("Einsum", ["x", "x"], ["a"], equation="ij,ij->ij"),
             helper.make_node("Unique", ["a"], ["v"]),
             helper.make_node("Relu", ["v"], ["y"])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?"])])
    with pytest.raises(NotImplementedError, match=r"cannot import ONNX op\(s\) Einsum, Unique; it imports: .*Relu"):
        flow.onnx.load(model)


def test_a_shape_computed_while_running_is_refused_with_the_reason():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?"])])
    with pytest.raises(ValueError, match=r"'reshape' \(Reshape\): its shape must be a constant.*input\(s\) shape"):
        flow.onnx.load(model)
    # The backend (ONNX's test runner) takes such an input as a constant of the call's value.
    from toynet.onnx.backend import ToynetBackend
    rep = ToynetBackend.prepare(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = rep.run([x, np.array([3, 2])])
    np.testing.assert_array_equal(y, x.reshape(3, 2))
    (y,) = rep.run([x, np.array([1, 6])])  # another shape value: built again
    np.testing.assert_array_equal(y, x.reshape(1, 6))


def test_shape_arithmetic_on_known_values_is_folded_while_importing():
    # Exporters compute shapes with ops: Shape -> Gather -> Concat -> Reshape. The importer computes them.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?"])], inits)
    graph = flow.onnx.load(model)
    assert graph(flow.randn(2, 3, 4)).shape == (2, 12)


def test_attributes_toynet_does_not_implement_are_refused_not_ignored():
    nodes = [helper.make_node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1, name="pick")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.INT64, ["?"])])
    with pytest.raises(NotImplementedError, match="'pick' \\(ArgMax\\): attribute select_last_index=1"):
        flow.onnx.load(model)


def test_a_file_that_is_not_onnx_is_an_error_and_nothing_runs(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x80\x04print('hello')\x00 not protobuf")
    with pytest.raises(ValueError, match="is not an ONNX model"):
        flow.onnx.load(bad)
    with pytest.raises(FileNotFoundError, match="no ONNX file"):
        flow.onnx.load(tmp_path / "missing.onnx")


def test_an_inconsistent_model_fails_in_toynets_shape_rules_with_the_node_named():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(4, 5, 3, 3)).astype(np.float32), "w")  # 5 channels, not 3
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="ONNX node 'conv' \\(Conv\\): .*conv2d"):
        flow.onnx.load(model)


def test_names_from_the_file_reach_the_compiled_plan_only_as_checked_names():
    # An ONNX file may come from anyone: its names are made of letters, digits, _ . - before use, and the
    # node's own name reaches the plan only in a one-line source comment.
    hostile = "x\n__import__('os').system('echo owned')#"
    nodes = [helper.make_node("Relu", [hostile], ["y; import os"], name="relu\nimport os")]
    model = make_model(nodes, [helper.make_tensor_value_info(hostile, TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y; import os", TensorProto.FLOAT, [2])])
    graph = flow.onnx.load(model)
    names = [n.name for n in graph.traced.nodes]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+", name) for name in names), names
    assert all("\n" not in n.source for n in graph.traced.nodes)
    np.testing.assert_array_equal(graph(flow.tensor([-1.0, 2.0])).numpy(), [0.0, 2.0])


def run_both(model, *feeds):
    """The outputs of ``model`` on ``feeds`` from ONNX Runtime and from toynet."""
    names = [i.name for i in model.graph.input]
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, dict(zip(names, feeds)))
    got = flow.onnx.load(model)(*[flow.tensor(x) for x in feeds])
    return [t.numpy() for t in (got if isinstance(got, tuple) else (got,))], expected


@pytest.mark.parametrize("base, exponent", [(np.float32, np.int64), (np.float32, np.int32), (np.int32, np.float32),
                                            (np.int64, np.float32), (np.float64, np.float32)])
def test_pow_of_mixed_dtypes_keeps_the_bases_dtype_as_onnx_does(base, exponent):
    # NumPy promotes (float32 ** int64 is float64); ONNX's Pow gives the base's dtype, an integer base truncated.
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=base)
    y = np.array([2, 3, 0], dtype=exponent) if np.issubdtype(exponent, np.integer) else \
        np.array([0.5, 2.5, 3.0], dtype=exponent)
    types = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int32: TensorProto.INT32,
             np.int64: TensorProto.INT64}
    model = make_model([helper.make_node("Pow", ["x", "y"], ["z"])],
                       [helper.make_tensor_value_info("x", types[base], [2, 3]),
                        helper.make_tensor_value_info("y", types[exponent], [3])],
                       [helper.make_tensor_value_info("z", types[base], [2, 3])])
    (got,), (expected,) = run_both(model, x, y)
    assert got.dtype == expected.dtype == base
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_min_and_argmin_of_unsigned_and_extreme_integers_agree_with_onnx_runtime():
    # Both were computed as max of -x: -x wraps around for uint8 (-1 is 255) and overflows for int8's -128.
    for dtype, elem, values in ((np.uint8, TensorProto.UINT8, [[0, 200, 3], [255, 1, 7]]),
                                (np.int8, TensorProto.INT8, [[-128, 5, 127], [3, -1, -128]])):
        model = make_model([helper.make_node("ReduceMin", ["x"], ["low"], axes=[1], keepdims=0),
                            helper.make_node("ArgMin", ["x"], ["at"], axis=1)],
                           [helper.make_tensor_value_info("x", elem, [2, 3])],
                           [helper.make_tensor_value_info("low", elem, [2]),
                            helper.make_tensor_value_info("at", TensorProto.INT64, [2, 1])])
        got, expected = run_both(model, np.array(values, dtype=dtype))
        for ours, theirs in zip(got, expected):
            assert ours.dtype == theirs.dtype
            np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_before_opset_13_works_on_the_input_seen_as_a_matrix(op):
    # Before opset 13 these ops flatten the input to (N, D) at `axis` (default 1), not along one axis (default -1).
    model = make_model([helper.make_node(op, ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                           [2, 3, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])], opset=11)
    (got,), (expected,) = run_both(model, np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pads, mode", [([7, 0, -3, 4], "constant"), ([2, 0, -3, 0], "constant"),
                                        ([0, 2, 0, -4], "constant"), ([-1, 0, 2, 0], "edge"),
                                        ([-1, 1, 0, -1], "reflect"), ([0, -1, 1, 2], "wrap")])
def test_pad_with_negative_pads_agrees_with_onnx_runtime(pads, mode):
    # Output element j is input element j - before, or padding: a negative pad may cut more than the input holds
    # on its side (7 before and -3 after on 2 rows is 6 rows of padding). The importer cut with Python slices,
    # whose negative stops wrap around, and kept a row (a fuzzed model found it).
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", "?"])],
                       [numpy_helper.from_array(np.array(pads, np.int64), "pads")], opset=19)
    (got,), (expected,) = run_both(model, np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
