"""Deployment: flow.save(graph, dir) writes the graph and its state; flow.load(dir) runs it in a fresh
process that has never seen the model's Python code. No pickle anywhere."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from graphs import InferenceGraph, TrainGraph

import toynet as flow
from toynet import nn


class SmallConvNet(nn.Module):
    """Defined only here: the deployed copy must run without this class."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(4 * 4 * 4, 5))

    def forward(self, x):
        return self.classifier(self.features(x)).softmax(dim=1)


def conv_graph():
    flow.manual_seed(0)
    model = SmallConvNet()
    for _ in range(2):                      # running statistics that are not 0 and 1
        model(flow.randn(4, 3, 8, 8))
    model.eval()
    return InferenceGraph(model)


def poly_graph():
    x = flow.tensor(np.linspace(-math.pi, math.pi, 200), dtype=flow.float32)
    y = flow.tensor(np.sin(x), dtype=flow.float32)
    xx = flow.cat([x.unsqueeze(-1).pow(1), x.unsqueeze(-1).pow(2), x.unsqueeze(-1).pow(3)], dim=1)
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    graph = TrainGraph(model, nn.MSELoss(reduction="sum"), flow.optim.SGD(model.parameters(), lr=1e-5))
    return graph, xx, y


# Runs in a fresh interpreter: it imports toynet and numpy, nothing of this file.
LOADER = textwrap.dedent("""
    import sys
    import numpy as np
    import toynet as flow

    assert not any("test_graph" in name for name in sys.modules), "the model's code was imported"
    conv = flow.load("conv_model")
    x = flow.tensor(np.load("conv_x.npy"))
    np.save("conv_out.npy", conv(x).numpy())
    np.save("conv_out_again.npy", conv(x).numpy())

    poly = flow.load("poly_model")
    loss = poly(flow.tensor(np.load("poly_xx.npy")), flow.tensor(np.load("poly_y.npy")))
    np.save("poly_loss.npy", loss.numpy())
    try:
        conv(flow.randn(3, 3, 8, 8))
    except ValueError as error:
        print("WRONG-SHAPE:", error)
    print("classes:", type(conv).__name__, type(poly).__name__)
    assert not any("test_graph" in name for name in sys.modules)
""")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """Save both graphs, run them in a fresh process, return what it computed and what we expect."""
    where = tmp_path_factory.mktemp("deploy")
    graph = conv_graph()
    x = flow.randn(2, 3, 8, 8)
    conv_out = graph(x).numpy()
    flow.save(graph, where / "conv_model")
    np.save(where / "conv_x.npy", x.numpy())

    poly, xx, y = poly_graph()
    for _ in range(50):
        poly(xx, y)
    flow.save(poly, where / "poly_model")
    # The next call returns the loss of the saved parameters (it is computed before that step's update).
    poly_loss = poly(xx, y).numpy()
    np.save(where / "poly_xx.npy", xx.numpy())
    np.save(where / "poly_y.npy", y.numpy())

    result = subprocess.run([sys.executable, "-c", LOADER], cwd=where, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    return {"dir": where, "stdout": result.stdout, "conv_out": conv_out, "poly_loss": poly_loss}


def test_a_deployed_conv_net_gives_the_original_outputs_in_a_fresh_process(deployed):
    where = deployed["dir"]
    np.testing.assert_allclose(np.load(where / "conv_out.npy"), deployed["conv_out"], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.load(where / "conv_out_again.npy"), np.load(where / "conv_out.npy"))
    assert "classes: DeployedGraph DeployedGraph" in deployed["stdout"]


def test_a_deployed_poly_fit_graph_computes_the_saved_models_loss(deployed):
    np.testing.assert_allclose(np.load(deployed["dir"] / "poly_loss.npy"), deployed["poly_loss"], rtol=1e-6)


def test_wrong_input_shapes_on_a_deployed_graph_say_what_was_expected(deployed):
    line = next(s for s in deployed["stdout"].splitlines() if s.startswith("WRONG-SHAPE:"))
    assert "traced for inputs (float32[2, 3, 8, 8])" in line
    assert "got (float32[3, 3, 8, 8])" in line and "cannot retrace" in line


def test_deployed_graphs_hold_the_forward_computation_only(tmp_path):
    poly, xx, y = poly_graph()
    poly(xx, y)
    flow.save(poly, tmp_path / "poly")
    loaded = flow.load(tmp_path / "poly")
    phases = {n.phase for n in loaded.traced.nodes if n.kind == "op"}
    assert phases == {"forward"}
    assert not loaded.traced.updates
    weight = poly.model[0].weight.numpy().copy()
    first = loaded(xx, y).numpy()
    np.testing.assert_array_equal(loaded(xx, y).numpy(), first)     # calling it does not train
    np.testing.assert_array_equal(poly.model[0].weight.numpy(), weight)
    with pytest.raises(ValueError, match="cannot retrace"):
        loaded(xx)
    with pytest.raises(ValueError, match="cannot retrace"):
        loaded(xx.to(flow.float64), y)


def test_saving_an_uncompiled_graph_says_to_call_it_first(tmp_path):
    with pytest.raises(RuntimeError, match="graph must be compiled first"):
        flow.save(conv_graph(), tmp_path / "never_called")
    assert not (tmp_path / "never_called").exists() or not any((tmp_path / "never_called").iterdir())


def test_the_saved_files_contain_no_pickle(deployed):
    for name in ("conv_model", "poly_model"):
        folder = deployed["dir"] / name
        files = sorted(p.name for p in folder.iterdir())
        assert files == ["arrays.npz", "manifest.json", "structure.json"]
        structure = json.loads((folder / "structure.json").read_text())
        assert structure["kind"] == "graph"
        with np.load(folder / "arrays.npz", allow_pickle=False) as arrays:
            assert arrays.files
            for key in arrays.files:
                assert arrays[key].dtype != object
        for path in folder.iterdir():
            assert not path.read_bytes().startswith(b"\x80"), f"{path} looks like a pickle"
    conv = json.loads((deployed["dir"] / "conv_model" / "structure.json").read_text())
    ops = [n["op"] for n in conv["graph"]["nodes"] if n["kind"] == "op"]
    assert ops[0] == "conv2d" and "softmax" in ops and "batch_norm" in ops
    states = {n["state_name"] for n in conv["graph"]["nodes"] if n["kind"] == "state"}
    assert "features.1.running_mean" not in states and "model.features.1.running_mean" in states
