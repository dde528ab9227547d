"""``@toynet.nn.Graph.trace``: a function becomes a graph object that compiles on its first call.

* the result equals the eager function's, for tensors captured from outside and for arguments;
* it is an nn.Graph (printable, compiled once: later calls reuse the plan, new shapes compile again);
* modules and tensors the function reads from outside are read fresh on every call (a parameter
  updated by an optimizer, a captured tensor changed in place), not frozen at the first call;
* a module it closes over shows as a MODULE in print(graph); a non-function is refused clearly.
"""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
from toynet import nn


def test_captured_tensor_slicing_matches_numpy():
    array = np.random.default_rng(0).standard_normal((4, 5, 6, 7)).astype(np.float32)
    x = flow.tensor(array)

    @flow.nn.Graph.trace
    def sliced():
        return x[1:3, 2:4, ..., 1:5]

    np.testing.assert_array_equal(sliced().numpy(), array[1:3, 2:4, ..., 1:5])
    np.testing.assert_array_equal(sliced().numpy(), array[1:3, 2:4, ..., 1:5])


def test_traced_function_is_a_compiled_graph_with_arguments():
    w = flow.randn(3, 2)

    @flow.nn.Graph.trace
    def affine(a, b):
        """Doc kept."""
        return flow.matmul(a, w) + b

    assert isinstance(affine, flow.nn.Graph)
    assert affine.__doc__ == "Doc kept."
    assert not affine.is_compiled
    a, b = flow.randn(4, 3), flow.randn(4, 2)
    np.testing.assert_allclose(affine(a, b).numpy(), (a.numpy() @ w.numpy()) + b.numpy(), rtol=1e-6)
    assert affine.is_compiled
    plan = affine.plan
    affine(flow.randn(4, 3), flow.randn(4, 2))
    assert affine.plan is plan, "the same shapes must reuse the compiled plan"
    out = affine(flow.randn(6, 3), flow.randn(6, 2))
    assert out.shape == (6, 2) and affine.plan is not plan
    text = repr(affine)
    assert affine.name.startswith("affine_graph_")  # the class is named after the function, as in OneFlow
    assert text.startswith(f"(GRAPH:{affine.name}:affine_graph): (")
    assert f"(INPUT:_{affine.name}-input_0" in text and f"(OUTPUT:_{affine.name}-output_0" in text


def test_closed_over_module_is_a_graph_module_read_fresh():
    model = nn.Linear(3, 2)

    @flow.nn.Graph.trace
    def predict(v):
        return model(v)

    v = flow.randn(5, 3)
    np.testing.assert_allclose(predict(v).numpy(), model(v).numpy(), rtol=1e-6)
    assert "(MODULE:model:Linear(in_features=3, out_features=2, bias=True))" in repr(predict)
    # An optimizer step outside the graph changes the weights: the next call must see them.
    optimizer = flow.optim.SGD(model.parameters(), lr=0.5)
    model(v).sum().backward()
    optimizer.step()
    np.testing.assert_allclose(predict(v).numpy(), model(v).numpy(), rtol=1e-6)


def test_captured_tensor_changed_in_place_is_seen():
    scale = flow.ones(3)

    @flow.nn.Graph.trace
    def scaled(v):
        return v * scale

    v = flow.ones(2, 3)
    np.testing.assert_array_equal(scaled(v).numpy(), np.ones((2, 3)))
    scale.copy_(flow.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(scaled(v).numpy(), np.tile([1.0, 2.0, 3.0], (2, 1)))
    scale.data = flow.tensor([7.0, 7.0, 7.0])  # a new array: a constant frozen into the plan would miss it
    np.testing.assert_array_equal(scaled(v).numpy(), np.full((2, 3), 7.0))


def test_graph_named_like_an_attribute_and_non_functions():
    config = nn.ReLU()  # a module variable named like the graph's own attribute

    @flow.nn.Graph.trace
    def act(v):
        return config(v)

    np.testing.assert_array_equal(act(flow.tensor([-1.0, 2.0])).numpy(), [0.0, 2.0])
    assert "(MODULE:config_:ReLU())" in repr(act)
    with pytest.raises(TypeError, match="decorates a function"):
        flow.nn.Graph.trace(3)
    with pytest.raises(TypeError, match="nn.Graph subclass"):
        flow.nn.Graph.trace(nn.ReLU())
