"""The nn.Graph basics page (OneFlow's basics/08, English and Chinese), feature by feature, in our own code.

Each test follows one step a reader of that page takes, with toynet imported where OneFlow was, and
checks what the page shows (numbers aside): a custom Graph over a Module, inference and training
graphs of MobileNetV2 on a small CIFAR-10 of the real format, the two ways of looking inside a graph,
saving a Module's parameters and a graph's whole training state, exporting graphs for deployment (the
style-transfer network included, pretrained=False since nothing can be downloaded), and the autograd
example of the closing section.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from cifar_fixture import make_cifar10

import toynet as flow
import toynet.vision as flowvision
from toynet import nn
from toynet.vision import transforms
from toynet.vision.models.neural_style_transfer.stylenet import neural_style_transfer


@pytest.fixture
def loader(tmp_path, monkeypatch):
    """A DataLoader over a 12-image CIFAR-10 archive in ``data/`` of the working directory, as the page has it."""
    monkeypatch.chdir(tmp_path)
    make_cifar10(tmp_path / "data", n_train=12, n_test=2)
    data = flowvision.datasets.CIFAR10(root="data", train=True, transform=transforms.ToTensor(), download=True)
    return flow.utils.data.DataLoader(data, 4, shuffle=True, drop_last=True)


def _mobilenet():
    model = flowvision.models.mobilenet_v2()
    # The page assigns a new head under a misspelt name; the module keeps it (and the real head).
    model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
    return model


class Affine(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(flow.randn(n_in, n_out))
        self.bias = nn.Parameter(flow.randn(n_out))

    def forward(self, v):
        return flow.matmul(v, self.weight) + self.bias


def test_a_custom_graph_runs_its_module_and_prints_a_tensor():
    module = Affine(4, 3)

    class AffineGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = module

        def build(self, v):
            return self.model(v)

    v = flow.randn(1, 4)
    out = AffineGraph()(v)
    np.testing.assert_allclose(out.numpy(), module(v).numpy(), rtol=1e-6)
    assert re.fullmatch(r"tensor\(\[\[\s*-?\d+\.\d{4},\s+-?\d+\.\d{4},\s+-?\d+\.\d{4}\]\], dtype=toynet.float32\)",
                        str(out)), str(out)


def test_inference_and_training_graphs_of_mobilenet(loader, capsys):
    model = _mobilenet()
    model.eval()

    class Predict(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    x, _ = next(iter(loader))
    np.testing.assert_allclose(Predict()(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)

    model.train()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = Train()
    before = repr(graph)
    assert before.startswith(f"(GRAPH:{graph.name}:Train): (\n  (CONFIG:config:GraphConfig(training=True, ))")
    assert "(MODULE:model.features.0.0:Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), " \
           "bias=False)): (" in before
    assert "(MODULE:model.classifer.1:Linear(in_features=1280, out_features=10, bias=True))" in before
    assert "(INPUT:" not in before
    weight = model.features[0][0].weight.numpy().copy()
    graph.debug(1)
    for batch, (x, y) in enumerate(loader):
        loss = graph(x, y)
        line = f"loss: {loss:>7f}  [{batch * 4:>5d}/{len(loader.dataset):>5d}]"
        assert re.fullmatch(r"loss: +\d+\.\d{6}  \[ +\d+/ +12\]", line), line
    assert not np.array_equal(model.features[0][0].weight.numpy(), weight), "the graph must train the model"
    shown = capsys.readouterr().out
    for stage in ("end building graph.", "start compiling plan and init graph runtime.",
                  "end compiling plan and init graph rumtime."):
        assert f"(GRAPH:{graph.name}:Train) {stage}" in shown
    after = repr(graph)
    assert f"(INPUT:_{graph.name}-input_0:tensor(..., size=(4, 3, 32, 32), dtype=toynet.float32))" in after
    assert f"(INPUT:_{graph.name}-input_1:tensor(..., size=(4,), dtype=toynet.int64))" in after
    assert "(INPUT:_model.features.0.0-input_0:tensor(..., is_lazy='True', size=(4, 3, 32, 32)," in after


def test_saving_the_module_and_the_graphs_training_state(loader, tmp_path):
    model = _mobilenet()
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = nn.CrossEntropyLoss()
            self.add_optimizer(optimizer)

        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            return loss

    graph = Train()
    x, y = next(iter(loader))
    graph(x, y)
    # A Module's parameters: saved from the module itself, loaded into a new one.
    flow.save(model.state_dict(), "./graph_model")
    again = _mobilenet()
    again.load_state_dict(flow.load("./graph_model"))
    np.testing.assert_array_equal(again.classifer[1].weight.numpy(), model.classifer[1].weight.numpy())
    # The graph's training state (the Chinese page): saved after training, restored into a new graph.
    flow.save(graph.state_dict(), "./checkpoint")
    with pytest.raises(AssertionError, match="before the first call"):
        graph.load_state_dict(flow.load("./checkpoint"))  # as OneFlow: restore into a graph not yet run
    model.load_state_dict(flow.load("./graph_model"))
    restored = Train()
    restored.load_state_dict(flow.load("./checkpoint"))
    assert int(restored.state_dict()["System-Train-TrainStep"].numpy()[0]) == 1


def test_graphs_export_into_new_or_existing_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOYNET_HOME", str(tmp_path / "home"))  # no weights there, whatever this machine has

    class Wrap(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, *input):
            return self.model(*input)

    model = neural_style_transfer(pretrained=False, progress=True)
    model.eval()
    image = flow.ones((1, 3, 64, 64))
    graph = Wrap(model)
    out = graph(image)
    flow.save(graph, "1/model")                   # the English page: a new directory
    (tmp_path / "made_first").mkdir()             # the Chinese page makes the directory first
    flow.save(graph, "made_first")
    for where in ("1/model", "made_first"):
        np.testing.assert_allclose(flow.load(where)(image).numpy(), out.numpy(), rtol=1e-5, atol=1e-4)
    with pytest.raises(FileNotFoundError, match="never downloads"):
        neural_style_transfer(pretrained=True, progress=True)


def test_the_closing_autograd_example():
    def loss(y_pred, y):
        return flow.sum(1 / 2 * (y_pred - y) ** 2)

    x = flow.ones(1, 5)
    w = flow.randn(5, 3, requires_grad=True)
    b = flow.randn(1, 3, requires_grad=True)
    z = flow.matmul(x, w) + b
    value = loss(z, flow.zeros(1, 3))
    value.backward()
    np.testing.assert_allclose(b.grad.numpy(), z.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), np.ones((5, 1)) @ z.detach().numpy(), rtol=1e-6)
