"""Malformed ONNX files (issue 21): each is refused with a toynet.onnx error that names the node, its op and what
was wrong, never a KeyError, a ZeroDivisionError or a silently different model."""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from toynet.onnx import ONNXImportError  # noqa: E402


def model(nodes, inputs=("x",), outputs=("y",), shape=(2, 3), opset=17, initializers=()):
    graph = helper.make_graph(
        nodes, "hostile",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)) for name in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def refused(m, *words):
    with pytest.raises(ONNXImportError) as info:
        flow.onnx.load(m)
    for word in words:
        assert word in str(info.value), str(info.value)
    return str(info.value)


def test_a_cycle_is_refused_naming_the_node_and_the_value():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Identity", ["b"], ["y"], name="out")]
    refused(model(nodes), "'first'", "Relu", "'b'", "dependency order")


def test_an_undefined_input_is_refused():
    refused(model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]), "'adder'", "Add", "'ghost'")


def test_an_unknown_graph_output_is_refused():
    refused(model([helper.make_node("Relu", ["x"], ["z"], name="r")], outputs=("nowhere",)), "'nowhere'")


@pytest.mark.parametrize("node, attribute", [
    (helper.make_node("Concat", ["x", "x"], ["y"], name="cat"), "axis"),
    (helper.make_node("Cast", ["x"], ["y"], name="caster"), "to"),
])
def test_a_missing_required_attribute_is_refused_by_name(node, attribute):
    refused(model([node]), f"'{node.name}'", node.op_type, f"'{attribute}'")


def test_a_missing_max_pool_kernel_is_refused():
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool")
    refused(model([node], shape=(1, 1, 4, 4)), "'pool'", "MaxPool", "kernel_shape")


@pytest.mark.parametrize("node", [
    helper.make_node("Softmax", ["x"], ["y"], name="soft", axis=1.7),
    helper.make_node("Transpose", ["x"], ["y"], name="swap", perm=[1.5, 0.5]),
])
def test_a_float_where_an_int_is_declared_is_refused_not_truncated(node):
    refused(model([node]), f"'{node.name}'", node.op_type, "FLOAT", "INT")


def test_depth_to_space_with_block_size_zero_is_refused():
    node = helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=0)
    refused(model([node], shape=(1, 4, 2, 2)), "'d2s'", "DepthToSpace")


def test_an_op_from_a_foreign_domain_says_its_domain():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")
    m = model([node])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(NotImplementedError, match="Relu of the domain 'com.example'"):
        flow.onnx.load(m)


def test_too_many_nodes_are_refused_before_any_is_built():
    nodes = [helper.make_node("Identity", ["x" if k == 0 else f"v{k - 1}"], [f"v{k}"]) for k in range(50_001)]
    nodes.append(helper.make_node("Identity", ["v50000"], ["y"]))
    refused(model(nodes), "50002 nodes", "50000")


def test_a_valid_model_still_loads_and_runs():
    m = model([helper.make_node("Softmax", ["x"], ["y"], name="soft", axis=1)])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(flow.onnx.load(m)(flow.tensor(x)).numpy(), flow.tensor(x).softmax(1).numpy(), rtol=1e-6)


# ------------------------------------------------------------------------- sizes checked before allocating

def _int64(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def refused_within(m, budget_bytes, *words):
    """Refused with an ONNXImportError naming ``words``, having allocated less than ``budget_bytes`` on the way."""
    import tracemalloc
    tracemalloc.start()
    try:
        message = refused(m, *words)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < budget_bytes, f"{peak:,} bytes allocated before refusing: {message}"


def test_constant_of_shape_asking_for_gigabytes_is_refused_before_allocating():
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="huge")]
    m = model(nodes, inputs=(), initializers=[_int64("shape", [20000, 20000])])
    refused_within(m, 20_000_000, "'huge'", "ConstantOfShape", "(20000, 20000)", "bytes")


def test_range_of_a_billion_is_refused_and_a_zero_step_named():
    consts = [helper.make_tensor(n, TensorProto.INT64, [], [v]) for n, v in (("a", 0), ("b", 10**9), ("d", 1))]
    refused_within(model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="count")], inputs=(),
                         initializers=consts), 20_000_000, "'count'", "Range")
    zero = [helper.make_tensor(n, TensorProto.INT64, [], [v]) for n, v in (("a", 0), ("b", 5), ("d", 0))]
    refused(model([helper.make_node("Range", ["a", "b", "d"], ["y"], name="stuck")], inputs=(), initializers=zero),
            "'stuck'", "delta is 0")


def test_tile_and_pad_that_would_allocate_gigabytes_are_refused():
    tile = model([helper.make_node("Tile", ["x", "reps"], ["y"], name="tiles")], shape=(2, 3),
                 initializers=[_int64("reps", [1, 10**9])])
    refused_within(tile, 20_000_000, "'tiles'", "Tile")
    pad = model([helper.make_node("Pad", ["x", "pads"], ["y"], name="padding")], shape=(2, 3),
                initializers=[_int64("pads", [0, 0, 10**5, 10**4])])
    refused_within(pad, 20_000_000, "'padding'", "Pad")


def test_a_dropout_mask_of_a_huge_declared_input_is_refused():
    m = model([helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop")], outputs=("y", "mask"),
              shape=(100000, 100000))
    m.graph.output[1].type.tensor_type.elem_type = TensorProto.BOOL
    refused_within(m, 20_000_000, "'drop'", "mask")


def test_an_initializer_declaring_more_than_it_holds_is_refused_by_name():
    liar = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[100000, 100000], raw_data=bytes(16))
    refused_within(model([helper.make_node("Add", ["x", "w"], ["y"])], initializers=[liar]), 20_000_000,
                   "'w'", "[100000, 100000]", "holds 4")
