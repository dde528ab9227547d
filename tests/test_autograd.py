"""The backward engine (toynet/autograd.py): higher-order gradients, deep and shared graphs,
retain_graph, grad mode, detach, requires_grad propagation, accumulation, leaves and grad_fns."""

from __future__ import annotations

import gc
import weakref

import re

import numpy as np
import pytest

import toynet as flow
from gradcheck import check_grad


def _leaf(t):
    """Finite differences call ``fn`` on plain tensors; the derivative inside needs a leaf that requires grad."""
    return t if t.requires_grad else t.requires_grad_(True)


# ------------------------------------------------------------------------------- higher-order gradients

COMPOSITES = {
    "tanh(x) * x^2": lambda x: x.tanh() * x ** 2,
    "x^3 + exp(x)": lambda x: x ** 3 + x.exp(),
    "softmax(x) * x": lambda x: x.softmax(-1) * x,
    "log(1 + x^2) / (1 + x^2)": lambda x: (1 + x * x).log() / (1 + x * x),
    "relu(x)^3 + sqrt(x^2 + 1)": lambda x: x.relu() ** 3 + (x * x + 1).sqrt(),
    "x[::-1] * x.amax() + mean(x)^2": lambda x: x[::-1] * x.amax() + x.mean() ** 2,
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_second_derivative_matches_finite_differences_of_the_first(name, device):
    f = COMPOSITES[name]

    def first_derivative(x):
        x = _leaf(x)
        (g,) = flow.autograd.grad(f(x).sum(), x, create_graph=True)
        return g

    x = np.array([-1.3, -0.4, 0.6, 1.1])
    # check_grad differentiates first_derivative once more (through the recorded vjp graph) and compares
    # with central differences of first_derivative itself.
    check_grad(first_derivative, x, device=device)
    # ...and the first derivative itself against central differences of f.
    check_grad(f, x, device=device)


def test_second_derivatives_of_two_variables(device):
    def gradients(w, x):  # d/dw and d/dx of sigmoid(w * x), each a differentiable graph
        w, x = _leaf(w), _leaf(x)
        return list(flow.autograd.grad((w * x).sigmoid().sum(), [w, x], create_graph=True))

    check_grad(gradients, np.array([0.7, -1.2]), np.array([1.5, 0.3]), device=device)


def test_hessian_vector_products_match_torch():
    torch = pytest.importorskip("torch")
    x0, v0 = np.array([-1.3, -0.4, 0.6, 1.1]), np.array([0.5, -1.0, 2.0, 0.25])

    def f(L, x):
        return ((x.tanh() * x ** 2).sum() + (x.softmax(0) * x).sum()) * (x * x).mean()

    x = flow.tensor(x0, requires_grad=True)
    (g,) = flow.autograd.grad(f(flow, x), x, create_graph=True)
    (hv,) = flow.autograd.grad((g * flow.tensor(v0)).sum(), x)
    tx = torch.tensor(x0, requires_grad=True)
    (tg,) = torch.autograd.grad(f(torch, tx), tx, create_graph=True)
    (thv,) = torch.autograd.grad((tg * torch.tensor(v0)).sum(), tx)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(hv.numpy(), thv.numpy(), rtol=1e-10)


def test_third_derivative_of_a_cube(device):
    x = flow.tensor(2.0, dtype=flow.float64, device=device, requires_grad=True)
    (d1,) = flow.autograd.grad(x ** 3, x, create_graph=True)
    (d2,) = flow.autograd.grad(d1, x, create_graph=True)
    (d3,) = flow.autograd.grad(d2, x)
    assert (d1.item(), d2.item(), d3.item()) == (12.0, 12.0, 6.0)
    assert d3.grad_fn is None  # without create_graph the result is a plain tensor


def test_backward_with_create_graph_gives_a_differentiable_grad(device):
    x = flow.tensor([1.0, 2.0], dtype=flow.float64, device=device, requires_grad=True)
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    (g2,) = flow.autograd.grad(x.grad.sum(), x)
    np.testing.assert_allclose(g2.numpy(), [6.0, 12.0])


# ---------------------------------------------------------------------------- deep and shared graphs


def test_a_100000_op_chain_backpropagates_without_recursion():
    x = flow.tensor(1.0, dtype=flow.float64, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.00001
    y.backward(retain_graph=True)  # a recursive walk would pass Python's ~1000-frame limit here
    assert x.grad.item() == pytest.approx(1.00001 ** 100_000, rel=1e-9)
    ref = weakref.ref(y)
    del y                          # freeing the whole (retained) chain must not recurse either
    assert ref() is None


def test_a_shared_parent_gets_the_sum_of_its_consumers_gradients(device):
    x = flow.tensor([0.5, -1.0], dtype=flow.float64, device=device, requires_grad=True)
    y = x * 2                     # y feeds three consumers
    z = y * y + y.exp() + y
    z.sum().backward()
    y_ = 2 * np.array([0.5, -1.0])
    np.testing.assert_allclose(x.grad.numpy(), 2 * (2 * y_ + np.exp(y_) + 1))


def test_diamond(device):
    x = flow.tensor(0.3, dtype=flow.float64, device=device, requires_grad=True)
    a = x.exp()
    d = a * 3 + a * 4             # two paths from d back to a
    d.backward()
    assert x.grad.item() == pytest.approx(7 * np.exp(0.3))


def seed_article_backward(t, grads):
    """The seed article's recursive walk, over toynet's records: after *each* consumer adds its share to
    a parent, the parent immediately pushes its whole accumulated gradient further down."""
    fn = t.grad_fn
    if fn is None:
        return
    with flow.no_grad():
        input_grads = fn.op.vjp(grads[id(t)], fn.inputs, t, **fn.attrs)
    for x, g in zip(fn.inputs, input_grads):
        if g is None:
            continue
        grads[id(x)] = grads[id(x)] + g if id(x) in grads else g
        seed_article_backward(x, grads)


def test_the_seed_articles_recursive_walk_double_counts_and_toynet_does_not():
    # loss = d * d with d = w * x shared by both factors: d loss / d w = 2 d x.
    w = flow.tensor(2.0, dtype=flow.float64, requires_grad=True)
    x = 3.0
    d = w * x
    loss = d * d
    grads = {id(loss): flow.ones_like(loss)}
    seed_article_backward(loss, grads)
    # The first factor pushes d down to w; the second adds its d and pushes the sum 2 d again: 3 d x.
    assert grads[id(w)].item() == pytest.approx(3 * 6.0 * x)
    loss.backward()             # topological order: d's gradient is complete before it moves on
    assert w.grad.item() == pytest.approx(2 * 6.0 * x)


# ------------------------------------------------------------------------------------- retain_graph


def test_second_backward_without_retain_graph_raises_clearly(device):
    x = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        loss.backward()


def test_retain_graph_allows_a_second_backward_that_accumulates(device):
    x = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)


def test_backward_frees_the_saved_tensors():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    hidden = x.exp()
    loss = (hidden * 2).sum()
    ref = weakref.ref(hidden)
    del hidden
    assert ref() is not None      # kept alive by the graph for backward
    loss.backward()
    assert ref() is None          # freed as soon as backward no longer needs it


def test_a_graph_holds_its_outputs_weakly():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()                    # exp's vjp reads its output, which the grad_fn must not keep alive
    ref = weakref.ref(y)
    gc.disable()
    try:
        del y
        assert ref() is None      # freed by reference counting alone: no tensor <-> grad_fn cycle
    finally:
        gc.enable()


# ----------------------------------------------------------------------------------------- grad mode


def test_no_grad_records_nothing(device):
    x = flow.tensor([1.0], device=device, requires_grad=True)
    with flow.no_grad():
        y = x * 2
        assert not flow.is_grad_enabled()
        with flow.enable_grad():
            z = x * 2
    assert flow.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None


def test_no_grad_as_decorator_and_set_grad_enabled():
    x = flow.tensor([1.0], requires_grad=True)

    @flow.no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad
    assert flow.is_grad_enabled()
    with flow.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert flow.is_grad_enabled()
    flow.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        flow.set_grad_enabled(True)
    assert (x * 2).requires_grad


def test_no_grad_restores_the_mode_after_an_exception():
    with pytest.raises(ValueError):
        with flow.no_grad():
            raise ValueError("boom")
    assert flow.is_grad_enabled()


def test_detach_cuts_the_graph_and_shares_data(device):
    x = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    y = x * 3
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), [3.0, 6.0])
    assert d.array is y.array     # same memory, no copy
    (y * d).sum().backward()      # d is a constant here: d(y*d)/dx = 3 d
    np.testing.assert_allclose(x.grad.numpy(), [9.0, 18.0])


def test_requires_grad_propagates(device):
    a = flow.tensor([1.0], device=device, requires_grad=True)
    b = flow.tensor([2.0], device=device)
    assert (a + b).requires_grad and (b * a).requires_grad and (a * 2).requires_grad
    assert not (b + b).requires_grad and (b + b).grad_fn is None
    assert not (a > b).requires_grad         # bool results carry no gradient
    assert not a.argmax().requires_grad


def test_only_float_tensors_can_require_grad():
    with pytest.raises(RuntimeError, match="floating-point"):
        flow.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating-point"):
        flow.tensor([1, 2]).requires_grad_()


def test_requires_grad_can_change_only_on_leaves():
    x = flow.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        (x * 2).requires_grad_(False)
    y = flow.tensor([1.0]).requires_grad_()
    assert y.requires_grad and y.is_leaf


def test_gradients_accumulate_across_backward_calls(device):
    x = flow.tensor([1.0, -2.0], device=device, requires_grad=True)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2.0, 3 - 4.0])
    x.grad = None
    (x * 5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])


def test_each_leaf_owns_a_writable_grad(device):
    a = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    b = flow.tensor([3.0, 4.0], device=device, requires_grad=True)
    (a + b).sum().backward()      # add hands one gradient tensor to both; sum's is a broadcast view
    assert a.grad is not b.grad
    a.grad.zero_()                # in place, as zero_grad(set_to_none=False) or gradient clipping do
    a.grad.add_(flow.tensor([5.0, 5.0], device=device))
    np.testing.assert_array_equal(a.grad.numpy(), [5.0, 5.0])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])
    assert a.grad.grad_fn is None and not a.grad.requires_grad


def test_a_tensor_used_twice_in_one_op(device):
    x = flow.tensor([3.0], device=device, requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.item() == 6.0


def test_leaves_and_grad_fns():
    x = flow.tensor([1.0], requires_grad=True)
    c = flow.tensor([2.0])
    y = x * c
    z = y.exp()
    assert x.is_leaf and c.is_leaf and not y.is_leaf
    assert x.grad_fn is None
    assert y.grad_fn.name == "MulBackward" and repr(z.grad_fn) == "<ExpBackward>"
    assert z.grad_fn.next_functions == (y.grad_fn,)
    assert y.grad_fn.next_functions == (None, None)
    z.sum().backward()
    assert y.grad is None         # only leaves keep .grad
    assert c.grad is None         # c does not require grad


def test_backward_of_a_non_scalar_takes_a_gradient(device):
    x = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    (x * x).backward(flow.tensor([1.0, 0.5], device=device))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


# -------------------------------------------------------------------------------------- autograd.grad


def test_autograd_grad_returns_gradients_without_touching_dot_grad(device):
    x = flow.tensor([1.0, 2.0], device=device, requires_grad=True)
    w = flow.tensor([3.0, 4.0], device=device, requires_grad=True)
    hidden = x * w
    loss = (hidden * hidden).sum()
    gx, gw, gh = flow.autograd.grad(loss, [x, w, hidden])
    np.testing.assert_allclose(gx.numpy(), 2 * np.array([3.0, 8.0]) * [3.0, 4.0])
    np.testing.assert_allclose(gw.numpy(), 2 * np.array([3.0, 8.0]) * [1.0, 2.0])
    np.testing.assert_allclose(gh.numpy(), 2 * np.array([3.0, 8.0]))  # a non-leaf can be asked too
    assert x.grad is None and w.grad is None


def test_autograd_grad_with_grad_outputs_and_unused_inputs():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    unused = flow.tensor([5.0], requires_grad=True)
    y = x * 2
    (g,) = flow.autograd.grad(y, x, grad_outputs=flow.tensor([1.0, 10.0]), retain_graph=True)
    np.testing.assert_allclose(g.numpy(), [2.0, 20.0])
    with pytest.raises(RuntimeError, match="allow_unused"):
        flow.autograd.grad(y.sum(), [x, unused], retain_graph=True)
    gx, gu = flow.autograd.grad(y.sum(), [x, unused], allow_unused=True)
    assert gu is None
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])


# ------------------------------------------------------------------------------- dtypes of gradients


def _linear_step(data, target=None):
    flow.manual_seed(0)
    model = flow.nn.Linear(3, 2)
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    out = model(data)
    loss = (out.sum() if target is None else flow.nn.functional.mse_loss(out, target))
    loss.backward()
    opt.step()
    return model


def test_float64_data_into_a_float32_model_names_the_op_the_input_and_the_fix():
    # Issue 10, finding 10: the error came from optimizer.step and named only the parameter's and the
    # gradient's dtypes. backward now says which op met which input, and how to fix it.
    data = flow.tensor(np.ones((4, 3)))                     # NumPy's float64
    with pytest.raises(TypeError) as error:
        _linear_step(data)
    message = str(error.value)
    assert "float32 leaf tensor" in message and "would get a float64 gradient" in message
    assert re.search(r"(linear|matmul) received input 0 of shape \(4, 3\) and dtype float64", message)
    assert "x = x.float()" in message
    assert _linear_step(data.float()).weight.grad.dtype is flow.float32   # the fix works


def test_int_data_into_a_float32_model_is_named_too():
    with pytest.raises(TypeError, match=r"(linear|matmul) received input 0 of shape \(1, 3\) and dtype int64"):
        _linear_step(flow.tensor([[1, 2, 3]]))


def test_a_float64_target_is_pointed_at_through_the_loss():
    data = flow.ones(4, 3)
    with pytest.raises(TypeError, match=r"float64 values came in after (linear|add) \(the loss is float64\).*target"):
        _linear_step(data, flow.tensor(np.ones((4, 2))))
    _linear_step(data, flow.tensor(np.ones((4, 2))).float())
