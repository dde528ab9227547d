"""flow.onnx.export: poly fit, an MLP, a small CNN and MobileNetV2 written as ONNX, accepted by
onnx.checker (full_check), run by ONNX Runtime with toynet's outputs, and imported back by flow.onnx.load
with the same outputs again."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphs import InferenceGraph
from test_graph_deploy import conv_graph

import toynet as flow
from toynet import nn
from toynet.vision.models import mobilenet_v2

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from toynet.onnx.export import to_model  # noqa: E402

def poly_model():
    """The tutorials' first model: y = a + b x + c x^2 + d x^3 as Linear(3, 1) on the powers of x."""
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))


def poly_input():
    x = flow.tensor(np.linspace(-math.pi, math.pi, 200), dtype=flow.float32).unsqueeze(-1)
    return flow.cat([x.pow(1), x.pow(2), x.pow(3)], dim=1)


def mlp():
    flow.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 5), nn.Softmax(dim=1))
    return model.eval()


def mobilenet():
    flow.manual_seed(2)
    model = mobilenet_v2(num_classes=10)
    for _ in range(2):  # running statistics that are not 0 and 1
        model(flow.randn(4, 3, 32, 32))
    return model.eval()


class PoolPermute(nn.Module):
    """Pooling whose kernel is not its stride, and a 4-D permute (issue 21's audit: an exporter that swapped
    pooling's kernel and stride, or a permute rule wrong beyond 2-D, passed every model above)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.max_pool, self.avg_pool = nn.MaxPool2d(3, stride=2, padding=1), nn.AvgPool2d(2, stride=1)

    def forward(self, x):
        y = self.avg_pool(self.max_pool(self.conv(x)))
        return (y.permute(0, 2, 3, 1) * 2).flatten(1)


CASES = {
    "pool_permute": (lambda: InferenceGraph(PoolPermute().eval()), lambda: flow.randn(2, 3, 9, 7)),
    "poly": (lambda: InferenceGraph(poly_model()), poly_input),
    "mlp": (lambda: InferenceGraph(mlp()), lambda: flow.randn(3, 3, 4)),
    "cnn": (conv_graph, lambda: flow.randn(4, 3, 8, 8)),
    "mobilenet_v2": (lambda: InferenceGraph(mobilenet()), lambda: flow.randn(2, 3, 32, 32)),
}


def relative_error(got, expected):
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-12))


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    make_graph, make_input = CASES[request.param]
    graph, x = make_graph(), make_input()
    expected = graph(x).numpy()
    path = flow.onnx.export(graph, tmp_path_factory.mktemp("onnx") / f"{request.param}.onnx")
    return request.param, graph, x, expected, path


def test_onnx_checker_accepts_the_model_with_full_check(exported):
    _, _, _, _, path = exported
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)  # raises on any error: types, shapes, opset, names
    assert model.producer_name == "toynet"


def test_onnx_runtime_gives_toynets_outputs(exported):
    _, _, x, expected, path = exported
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"input_0": x.numpy()})
    assert got.shape == expected.shape
    assert relative_error(got, expected) < 1e-4


def test_flow_onnx_load_of_the_exported_file_gives_the_same_outputs(exported):
    _, _, x, expected, path = exported
    imported = flow.onnx.load(path)
    assert relative_error(imported(x).numpy(), expected) < 1e-4


def test_parameters_are_initializers_named_by_module_path_and_nodes_carry_source_lines(exported):
    name, graph, _, _, path = exported
    model = onnx.load(str(path))
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for state_name, tensor in graph.state_dict().items():
        if state_name in initializers:
            np.testing.assert_array_equal(initializers[state_name], tensor.numpy())
    weights = [n for n in initializers if n.endswith(".weight")]
    assert weights and all(n.startswith("model.") for n in weights)
    assert [i.name for i in model.graph.input] == ["input_0"]
    assert [o.name for o in model.graph.output] == ["output_0"]
    computing = [n for n in model.graph.node if n.op_type != "Identity"]
    assert computing and all(".py:" in n.doc_string for n in computing)


def test_op_mapping_of_mobilenet_uses_grouped_conv_batchnorm_and_clip():
    graph = InferenceGraph(mobilenet())
    graph(flow.randn(1, 3, 32, 32))
    model = to_model(graph)
    ops = {n.op_type for n in model.graph.node}
    assert {"Conv", "BatchNormalization", "Clip", "GlobalAveragePool", "Reshape", "Add"} <= ops
    assert "Gemm" in ops or {"Transpose", "MatMul"} <= ops   # the classifier: fused (fast path) or plain (lesson)
    assert any(a.name == "group" and a.i > 1 for n in model.graph.node if n.op_type == "Conv" for a in n.attribute)


def test_dynamic_batch_lets_onnx_runtime_run_other_batch_sizes(tmp_path):
    graph = conv_graph()
    graph(flow.randn(4, 3, 8, 8))
    path = flow.onnx.export(graph, tmp_path / "cnn.onnx", dynamic_batch=True)
    model = onnx.load(str(path))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = flow.randn(7, 3, 8, 8)
    (got,) = session.run(None, {"input_0": x.numpy()})
    expected = graph(x).numpy()  # the graph retraces for batch 7
    assert relative_error(got, expected) < 1e-4


def test_convert_to_onnx_and_check_is_oneflow_onnxs_entry_point(tmp_path):
    graph = InferenceGraph(mlp())
    graph(flow.randn(3, 3, 4))
    path = flow.onnx.convert_to_onnx_and_check(graph, onnx_model_path=tmp_path)
    assert path == tmp_path / "model.onnx" and path.is_file()


def test_an_op_without_onnx_form_is_named_with_its_source_line(tmp_path):
    class LossGraph(nn.Graph):
        def build(self, x, y):
            return x.var(dim=1) + y  # var has no ONNX mapping (ONNX has no variance op)

    graph = LossGraph()
    graph(flow.randn(2, 3), flow.randn(2))
    with pytest.raises(NotImplementedError, match=r"var at test_onnx_export\.py:\d+ in build: return x.var"):
        flow.onnx.export(graph, tmp_path / "loss.onnx")
    assert not (tmp_path / "loss.onnx").exists()


def test_bad_arguments_say_what_to_do(tmp_path):
    graph = InferenceGraph(mlp())
    with pytest.raises(RuntimeError, match="call it once"):
        flow.onnx.export(graph, tmp_path / "m.onnx")
    graph(flow.randn(3, 3, 4))
    with pytest.raises(ValueError, match="opset_version must be an int from 13"):
        flow.onnx.export(graph, tmp_path / "m.onnx", opset_version=9)
    with pytest.raises(IsADirectoryError, match="model.onnx"):
        flow.onnx.export(graph, tmp_path)
    with pytest.raises(TypeError, match="takes an nn.Graph"):
        flow.onnx.export(object(), tmp_path / "m.onnx")


def test_a_deployed_graph_exports_too(tmp_path):
    graph = conv_graph()
    x = flow.randn(4, 3, 8, 8)
    expected = graph(x).numpy()
    flow.save(graph, tmp_path / "deployed")
    path = flow.onnx.export(flow.load(tmp_path / "deployed"), tmp_path / "deployed.onnx", opset_version=13)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert relative_error(session.run(None, {"input_0": x.numpy()})[0], expected) < 1e-4


INDEXING = {"int": lambda x: x[1], "reversed": lambda x: x[:, ::-1], "ellipsis": lambda x: x[..., 1:3],
            "none_int_negative": lambda x: x[None, 0, -2:], "steps": lambda x: x[::2, 1::-1],
            "last": lambda x: x[:, -1]}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_basic_indexing_exports_as_slice_and_reshape(name, tmp_path):
    class Index(nn.Graph):
        def build(self, x):
            return INDEXING[name](x) * 2.0

    graph = Index()
    x = flow.randn(4, 5, 3)
    expected = graph(x).numpy()
    path = flow.onnx.export(graph, tmp_path / f"{name}.onnx")
    (got,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input_0": x.numpy()})
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(flow.onnx.load(path)(x).numpy(), expected)
