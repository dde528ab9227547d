"""The scalar teaching toys: their training numbers, and where the recursive backward goes wrong.

The expected numbers come from an independent re-derivation, in closed form, of what each algorithm
computes for the seed article's program (fit y = w*x + b to one point with squared error), not from
running the toys themselves.
"""

from __future__ import annotations

import pytest

from toynet.toy import static
from toynet.toy.dynamic import Tensor

X, Y, LR, STEPS = 1, 2, 0.01, 100


def reference_fit(w: float, b: float, grad_w_factor: float, grad_b_factor: float) -> list[tuple]:
    """Gradient descent on z = e², e = w*x + b - y, with gradients (grad_w_factor*e*x, grad_b_factor*e).

    The true gradient is (2ex, 2e). The article's recursive walk gives (4ex, 3e) on its loss graph:
    y_hat feeds both factors of z; the first factor's share e reaches b and w*x at once, then y_hat
    passes on its full total 2e again, so b gets e + 2e; the node w*x likewise holds e, then 3e, and
    passes e*x then 3e*x to w.
    Returns (loss, w, b, grad_w, grad_b) per step, with w and b after the update, as the article prints.
    """
    rows = []
    for _ in range(STEPS):
        e = w * X + b - Y
        gw, gb = grad_w_factor * e * X, grad_b_factor * e
        w, b = w - LR * gw, b - LR * gb
        rows.append((e * e, w, b, gw, gb))
    return rows


def dynamic_fit(walk: str, w0: float = 2, b0: float = 1) -> list[tuple]:
    x, y = Tensor(X, requires_grad=False), Tensor(Y, requires_grad=False)
    w, b = Tensor(w0), Tensor(b0)
    rows = []
    for _ in range(STEPS):
        y_hat = w * x + b
        z = (y_hat - y) * (y_hat - y)
        getattr(z, walk)()
        w.value -= LR * w.grad
        b.value -= LR * b.grad
        rows.append((z.value, w.value, b.value, w.grad, b.grad))
        z.zero_grad()
        assert w.grad is None and b.grad is None and y_hat.grad is None
    return rows


def assert_rows_close(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected)
    for step, (g, e) in enumerate(zip(got, expected)):
        assert g == pytest.approx(e, rel=1e-9, abs=1e-12), f"step {step}: {g} != {e}"


# ------------------------------------------------------------------------------------------ dynamic


def test_dynamic_recursive_walk_reproduces_the_articles_run():
    rows = dynamic_fit("backward")
    assert_rows_close(rows, reference_fit(2, 1, grad_w_factor=4, grad_b_factor=3))
    assert rows[0][3:] == (4, 3)  # first step: e = 1, so grad_w = 4e*x = 4 and grad_b = 3e = 3
    loss, w, b = rows[-1][:3]
    assert loss < 1e-5 and w * X + b == pytest.approx(Y, abs=1e-3)
    assert w == pytest.approx(1.429, abs=1e-3)  # a different point on the line of perfect fits


def test_dynamic_topological_walk_follows_the_true_gradient():
    rows = dynamic_fit("backward_topological")
    assert_rows_close(rows, reference_fit(2, 1, grad_w_factor=2, grad_b_factor=2))
    assert rows[0][3:] == (2, 2)
    # With x = 1 the true gradient changes w and b equally, so w - b stays 1: heading for (1.5, 0.5).
    for _, w, b, _, _ in rows:
        assert w - b == pytest.approx(1.0)


def numeric_derivative(f, at: float, eps: float = 1e-6) -> float:
    return (f(at + eps) - f(at - eps)) / (2 * eps)


def test_recursive_walk_double_counts_through_a_shared_inner_node():
    def loss(w_value, b_value=1.0):
        w, b = Tensor(w_value), Tensor(b_value)
        x, y = Tensor(1.0, requires_grad=False), Tensor(2.0, requires_grad=False)
        y_hat = w * x + b  # used by both factors below: an inner node with two consumers
        return w, b, (y_hat - y) * (y_hat - y)

    true_grad_w = numeric_derivative(lambda v: loss(v)[2].value, 2.0)
    true_grad_b = numeric_derivative(lambda v: loss(2.0, v)[2].value, 1.0)
    assert (true_grad_w, true_grad_b) == pytest.approx((2.0, 2.0))

    w, b, z = loss(2.0)
    z.backward()
    assert (w.grad, b.grad) == (4.0, 3.0)  # wrong
    w, b, z = loss(2.0)
    z.backward_topological()
    assert (w.grad, b.grad) == pytest.approx((true_grad_w, true_grad_b))


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_recursive_walk_error_grows_with_a_chain_of_shared_nodes(depth):
    def build(w_value):
        w = Tensor(w_value)
        h = w * 1.5
        for _ in range(depth):
            h = h + h  # h feeds both inputs of the next node
        return w, h

    true_grad = numeric_derivative(lambda v: build(v)[1].value, 0.7)
    assert true_grad == pytest.approx(1.5 * 2 ** depth)
    w, h = build(0.7)
    h.backward()
    assert w.grad != pytest.approx(true_grad)
    assert w.grad > true_grad  # over-counted, never under
    w, h = build(0.7)
    h.backward_topological()
    assert w.grad == pytest.approx(true_grad)


def test_a_shared_leaf_is_harmless_for_the_recursive_walk():
    w = Tensor(3.0)
    z = w * w - w  # w has three consumers, but a leaf never passes its gradient on
    z.backward()
    assert w.grad == pytest.approx(2 * 3.0 - 1)


def test_dynamic_numbers_constants_and_requires_grad():
    w = Tensor(2.0)
    c = Tensor(5.0, requires_grad=False)
    z = (w * 3 - c) * w  # a Python number becomes a constant tensor
    assert z.value == pytest.approx(2.0)
    assert z.requires_grad and not (c * c).requires_grad
    z.backward_topological()
    assert w.grad == pytest.approx(6 * 2.0 - 5)
    assert c.grad is None  # constants collect no gradient
    z.zero_grad()
    assert w.grad is None and z.grad is None


def test_backward_on_a_constant_does_nothing():
    c = Tensor(4.0, requires_grad=False) * Tensor(2.0, requires_grad=False)
    c.backward()
    assert c.grad is None


# ------------------------------------------------------------------------------------------- static


@pytest.fixture
def fresh_default_graph(monkeypatch):
    """Each test starts with an empty default graph (it is one module-level object)."""
    graph = static.Graph()
    monkeypatch.setattr(static, "default_graph", graph)
    return graph


def static_fit(graph_arg=None, w0=2, b0=3):
    kw = {} if graph_arg is None else {"graph": graph_arg}
    x, y = static.Variable(X, False, **kw), static.Variable(Y, False, **kw)
    w, b = static.Variable(w0, **kw), static.Variable(b0, **kw)
    y_hat = static.Add(static.Mul(w, x), b)
    loss = static.Mul(static.Sub(y_hat, y), static.Sub(y_hat, y))
    return x, y, w, b, loss


def test_static_fit_matches_true_gradient_descent(fresh_default_graph):
    _, _, w, b, loss = static_fit()
    assert loss.value is None  # building computes nothing
    assert len(fresh_default_graph.nodes) == 4 + 5
    optimizer = static.SGD(static.default_graph, loss, LR)
    rows = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        optimizer.get_grad()
        optimizer.step()
        rows.append((loss.value, w.value, b.value, w.grad, b.grad))
    assert_rows_close(rows, reference_fit(2, 3, grad_w_factor=2, grad_b_factor=2))
    assert rows[0][0] == 9 and rows[0][3:] == (6, 6)


def test_static_and_dynamic_topological_agree():
    graph = static.Graph()
    _, _, w, b, loss = static_fit(graph, w0=0.3, b0=-0.8)
    optimizer = static.SGD(graph, loss, LR)
    for _ in range(STEPS):
        optimizer.zero_grad()
        optimizer.get_grad()
        optimizer.step()
    *_, dw, db, _, _ = dynamic_fit("backward_topological", w0=0.3, b0=-0.8)[-1]
    assert (w.value, b.value) == pytest.approx((dw, db))


def test_static_each_node_passes_its_gradient_once(fresh_default_graph):
    _x, _y, w, b, loss = static_fit()
    static.SGD(fresh_default_graph, loss, LR).get_grad()
    assert all(not n.waiting_for_forward for n in fresh_default_graph.nodes)
    assert all(not n.waiting_for_backward for n in fresh_default_graph.nodes)
    y_hat = loss.parents[0].parents[0]
    assert y_hat.grad == 2 * (y_hat.value - Y)  # both consumers' shares, counted once each
    assert (w.grad, b.grad) == (2 * (5 - 2) * X, 2 * (5 - 2))


def test_static_explicit_graph_keeps_models_apart(fresh_default_graph):
    g1, g2 = static.Graph(), static.Graph()
    *_, w1, _, loss1 = static_fit(g1)
    *_, w2, _, _loss2 = static_fit(g2, w0=-1)
    assert fresh_default_graph.nodes == []  # nothing leaked into the default graph
    assert all(n.graph is g1 for n in g1.nodes) and len(g1.nodes) == 9
    opt1 = static.SGD(g1, loss1, LR)
    opt1.zero_grad()
    opt1.get_grad()
    opt1.step()
    assert w1.value == pytest.approx(2 - LR * 6) and w2.value == -1 and w2.grad is None


def test_static_single_default_graph_limitation(fresh_default_graph):
    *_, loss1 = static_fit()
    *_, _loss2 = static_fit()  # a second model, silently in the same default graph
    assert len(fresh_default_graph.nodes) == 18
    optimizer = static.SGD(static.default_graph, loss1, LR)
    optimizer.zero_grad()
    optimizer.get_grad()
    with pytest.raises(RuntimeError, match="does not lead to the target.*own Graph"):
        optimizer.step()


def test_static_parents_from_two_graphs_are_refused():
    a = static.Variable(1.0, graph=static.Graph())
    b = static.Variable(2.0, graph=static.Graph())
    with pytest.raises(ValueError, match="same Graph"):
        static.Add(a, b)
