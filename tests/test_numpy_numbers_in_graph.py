"""NumPy scalars and arrays inside ``nn.Graph.build`` behave as they do in Eager mode (issue 20): attention is
usually written ``scores / np.sqrt(d)``, and the compiled plan must hold plain numbers, never NumPy reprs."""

import numpy as np
import pytest

import toynet as flow
from toynet import nn

FORMS = {
    "divide by np.sqrt": lambda y: y / np.sqrt(4),
    "times np.float32": lambda y: y * np.float32(0.5),
    "plus np.int64": lambda y: y + np.int64(2),
    "np.float64 minus": lambda y: np.float64(1.0) - y,
    "times a 0-d float64 array": lambda y: y * np.array(0.5),
    "times a 0-d float32 array": lambda y: y * np.array(0.5, dtype=np.float32),
    "plus a (4,) array": lambda y: y + np.arange(4, dtype=np.float32),
    "power np.int32": lambda y: y ** np.int32(2),
    "clamp to np.float32 bounds": lambda y: y.clamp(np.float32(-0.1), np.float32(0.1)),
    "reshape to np.int64 sizes": lambda y: y.reshape(np.int64(2), np.int64(8)),
    "permute by np.int64 dims": lambda y: y.permute(np.int64(1), np.int64(0)),
    "softmax over np.int64 dim": lambda y: y.softmax(np.int64(-1)),
    "sum over np.int64 dim": lambda y: y.sum(np.int64(0)),
}


class Wrap(nn.Graph):
    def __init__(self, model, form):
        super().__init__()
        self.model, self.form = model, form

    def build(self, x):
        return self.form(self.model(x))


@pytest.mark.parametrize("name", list(FORMS))
def test_graph_gives_what_eager_gives(name):
    flow.manual_seed(0)
    model, x = nn.Linear(4, 4), flow.randn(4, 4)
    eager = FORMS[name](model(x))
    graph = Wrap(model, FORMS[name])
    out = graph(x)
    assert out.dtype == eager.dtype, f"{name}: Graph gives {out.dtype}, Eager {eager.dtype}"
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6, atol=1e-6)
    code = [line.split("#")[0] for line in graph.plan.source.splitlines()]   # (comments quote build()'s lines)
    assert not [line for line in code if "np." in line or "numpy" in line]


def test_numpy_scale_in_a_training_graph_trains_like_eager():
    flow.manual_seed(1)
    model = nn.Linear(8, 8)
    twin = nn.Linear(8, 8)
    twin.load_state_dict(model.state_dict())
    x = flow.randn(5, 8)
    scale = 1 / np.sqrt(np.float32(8))

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            loss = ((self.model(x) * scale).softmax(-1) * np.arange(8, dtype=np.float32)).sum()
            loss.backward()
            return loss

    sgd = flow.optim.SGD(twin.parameters(), lr=0.1)
    train = Train()
    for _ in range(3):
        loss = ((twin(x) * scale).softmax(-1) * np.arange(8, dtype=np.float32)).sum()
        sgd.zero_grad()
        loss.backward()
        sgd.step()
        np.testing.assert_allclose(train(x).numpy(), loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(model.weight.numpy(), twin.weight.numpy(), rtol=1e-5, atol=1e-6)
