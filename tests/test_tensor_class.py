"""``toynet.Tensor`` as a class one calls (OneFlow's rules: a shape gives an uninitialised float32 tensor,
data becomes float32) beside ``toynet.tensor`` (which infers the dtype), and ``toynet.Size``."""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow


def test_tensor_of_a_shape_is_uninitialised_float32():
    x = flow.Tensor(2, 3)
    assert x.shape == (2, 3) and x.dtype is flow.float32 and not x.requires_grad
    assert flow.Tensor(flow.Size([4, 1])).shape == (4, 1)
    assert flow.Tensor(3).shape == (3,)  # one int is a shape too, as in OneFlow and PyTorch
    assert flow.Tensor(2, 2, dtype=flow.float64, requires_grad=True).requires_grad
    assert flow.Tensor(np.int64(2), 0).shape == (2, 0)


def test_tensor_of_data_is_float32_but_tensor_function_infers():
    for data in ([1, 2, 3], (1, 2, 3), np.array([1, 2, 3]), [[1.5, 2.0]]):
        assert flow.Tensor(data).dtype is flow.float32, data
    np.testing.assert_array_equal(flow.Tensor([1, 2, 3]).numpy(), [1.0, 2.0, 3.0])
    assert flow.tensor([1, 2, 3]).dtype is flow.int64
    assert flow.tensor([1.0, 2.0]).dtype is flow.float32
    assert flow.tensor(np.ones(2)).dtype is flow.float64
    assert flow.Tensor([1, 2], dtype=flow.int32).dtype is flow.int32


def test_tensor_of_a_tensor_shares_memory():
    t = flow.tensor([1, 2])
    alias = flow.Tensor(t)
    alias.fill_(7)
    assert t.tolist() == [7, 7] and alias.dtype is flow.int64


@pytest.mark.parametrize("args,error,match", [
    ((), TypeError, "needs data or a shape"),
    ((2, -1), ValueError, "sizes must be ints >= 0"),
    (([1], [2]), TypeError, "one piece of data"),
    ((2, 3.5), TypeError, "one piece of data"),
])
def test_bad_arguments_say_what_to_pass(args, error, match):
    with pytest.raises(error, match=match):
        flow.Tensor(*args)


def test_shape_is_a_size_that_prints_as_one_and_behaves_as_a_tuple():
    x = flow.randn(64, 1, 28, 28)
    assert isinstance(x.shape, flow.Size) and isinstance(x.shape, tuple)
    assert repr(x.shape) == str(x.shape) == "toynet.Size([64, 1, 28, 28])"
    assert x.shape == (64, 1, 28, 28) and x.shape[0] == 64 and x.size() == (64, 1, 28, 28)
    n, c, h, w = x.shape
    assert (n, c, h, w) == (64, 1, 28, 28) and x.shape.numel() == 64 * 28 * 28
    assert isinstance(x.shape[1:], flow.Size) and x.shape[1:] == (1, 28, 28)
    assert str(flow.tensor(3.0).shape) == "toynet.Size([])"
    assert f"{x.shape}" == "toynet.Size([64, 1, 28, 28])"
    assert flow.zeros(x.shape[1:]).shape == (1, 28, 28) and x.reshape(x.shape[0], -1).shape == (64, 784)
    with pytest.raises(TypeError, match="takes ints"):
        flow.Size([2, "3"])


def test_a_shape_in_graph_mode_still_compiles():
    """Shapes become op attributes written into compiled code with repr: they must stay plain tuples."""

    class Model(flow.nn.Module):
        def forward(self, x):
            return x.sum(0, keepdim=True).expand(x.shape) + x.reshape(x.shape[0], -1).reshape(x.shape)

    class Graph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = Model()

        def build(self, x):
            return self.model(x)

    x = flow.randn(3, 4)
    graph = Graph()
    np.testing.assert_allclose(graph(x).numpy(), Model()(x).numpy(), rtol=1e-6)
    assert graph(x).shape == (3, 4)
