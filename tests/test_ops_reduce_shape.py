"""Reductions, shape ops, indexing, joining, matmul, linear and mse_loss: every vjp against central
finite differences (float64, on every device of the fixture; hypothesis draws shapes and dims), and
forward and gradients against PyTorch (or NumPy where PyTorch has no such index, e.g. negative steps).

``CASES`` is a table of fixed-shape calls written once as ``fn(L, *tensors)`` (``L`` is ``toynet`` or
``torch``); ``tests/test_cupy.py`` reruns it on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import toynet as flow
from gradcheck import check_grad

GRADCHECK = settings(max_examples=5, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def normal(rng, shape):
    return rng.standard_normal(shape)


def off_zero(rng, shape):
    return rng.uniform(0.3, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


def index(L, values, like):
    """An index tensor on ``like``'s device."""
    return L.tensor(values, device=like.device)


def F(L):
    return L.nn.functional


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable          # fn(L, *tensors) -> tensor or list of tensors
    shapes: tuple         # one shape per input
    torch: bool = True    # False where PyTorch has no such call (negative steps, sum_to)
    make: Callable = normal

    def __repr__(self) -> str:
        return self.name


CASES = [
    # reductions
    Case("sum_all", lambda L, a: a.sum(), [(2, 3)]),
    Case("sum_dim", lambda L, a: a.sum(1), [(2, 3, 2)]),
    Case("sum_dims_keepdim", lambda L, a: a.sum((0, 2), keepdim=True), [(2, 3, 2)]),
    Case("mean_all", lambda L, a: a.mean(), [(2, 3)]),
    Case("mean_neg_dim", lambda L, a: a.mean(-1), [(2, 3, 2)]),
    Case("var_all", lambda L, a: a.var(), [(2, 3)]),
    Case("var_dim", lambda L, a: a.var(1), [(2, 3, 2)]),
    Case("var_biased_keepdim", lambda L, a: a.var(0, unbiased=False, keepdim=True), [(3, 2)]),
    Case("std", lambda L, a: a.std(1), [(2, 4)]),
    Case("amax_all", lambda L, a: a.amax(), [(2, 3)]),
    Case("amax_dims", lambda L, a: a.amax((0, 2), keepdim=True), [(2, 3, 2)]),
    Case("max_all", lambda L, a: a.max(), [(3, 4)]),
    Case("max_dim_values", lambda L, a: a.max(1).values, [(3, 4)]),
    Case("max_dim_keepdim", lambda L, a: a.max(0, keepdim=True)[0], [(3, 4)]),
    Case("min_all", lambda L, a: a.min(), [(3, 4)]),
    Case("min_dim_values", lambda L, a: a.min(-1).values, [(3, 4)]),
    Case("softmax", lambda L, a: a.softmax(1), [(3, 4)]),
    Case("softmax_dim0", lambda L, a: L.softmax(a, 0), [(3, 2, 2)]),
    Case("log_softmax", lambda L, a: a.log_softmax(-1), [(3, 4)]),
    Case("log_softmax_dim1", lambda L, a: F(L).log_softmax(a, dim=1), [(2, 3, 2)]),
    Case("sum_to", lambda L, a: a.sum_to((1, 3)), [(2, 4, 3)], torch=False),
    # shapes
    Case("reshape", lambda L, a: a.reshape(3, 4), [(2, 6)]),
    Case("view_infer", lambda L, a: a.view(-1, 2), [(2, 3, 2)]),
    Case("flatten", lambda L, a: a.flatten(1), [(2, 3, 2)]),
    Case("flatten_all", lambda L, a: L.flatten(a), [(2, 3, 2)]),
    Case("unsqueeze", lambda L, a: a.unsqueeze(1), [(2, 3)]),
    Case("unsqueeze_neg", lambda L, a: a.unsqueeze(-1), [(2, 3)]),
    Case("squeeze_dim", lambda L, a: a.squeeze(1), [(2, 1, 3)]),
    Case("squeeze_all", lambda L, a: a.squeeze(), [(1, 2, 1, 3)]),
    Case("transpose", lambda L, a: a.transpose(0, 2), [(2, 3, 4)]),
    Case("t", lambda L, a: a.t(), [(2, 3)]),
    Case("T", lambda L, a: a.T, [(2, 3)]),
    Case("permute", lambda L, a: a.permute(2, 0, 1), [(2, 3, 4)]),
    Case("expand", lambda L, a: a.expand(2, 3, 4), [(3, 1)]),
    Case("expand_keep", lambda L, a: a.expand(-1, 4), [(3, 1)]),
    Case("repeat", lambda L, a: a.repeat(2, 1, 3), [(3, 2)]),
    # indexing
    Case("index_int", lambda L, a: a[1], [(4, 3)]),
    Case("index_negative_int", lambda L, a: a[-1, 2], [(4, 3)]),
    Case("index_slice", lambda L, a: a[1:3], [(4, 3)]),
    Case("index_step", lambda L, a: a[::2, 1:], [(4, 3)]),
    Case("index_none_ellipsis", lambda L, a: a[None, ..., 0], [(2, 4, 3)]),
    Case("index_mixed", lambda L, a: a[1, :, None, 1:], [(2, 4, 3)]),
    Case("index_negative_step", lambda L, a: a[::-1], [(4, 3)], torch=False),
    Case("index_negative_steps", lambda L, a: a[3:0:-2, ::-1], [(4, 3)], torch=False),
    Case("index_int_tensor_repeats", lambda L, a: a[index(L, [0, 2, 0, 0], a)], [(4, 3)]),
    Case("index_list_repeats", lambda L, a: a[[3, 1, 3]], [(4, 3)]),
    Case("index_two_lists", lambda L, a: a[[0, 1, 1], [2, 2, 0]], [(4, 3)]),
    Case("index_slice_then_list", lambda L, a: a[:, [1, 1, 0]], [(4, 3)]),
    Case("index_2d_int_tensor", lambda L, a: a[index(L, [[0, 1], [1, 1]], a)], [(4, 3)]),
    Case("index_0d_int_tensor", lambda L, a: a[index(L, 2, a)], [(4, 3)]),
    Case("index_bool_mask", lambda L, a: a[a > 0], [(4, 3)], make=off_zero),
    Case("index_bool_rows", lambda L, a: a[index(L, [True, False, True, True], a)], [(4, 3)]),
    # joining and splitting
    Case("cat", lambda L, a, b: L.cat([a, b]), [(2, 3), (1, 3)]),
    Case("cat_last", lambda L, a, b, c: L.cat([a, b, c], dim=-1), [(2, 1), (2, 3), (2, 2)]),
    Case("stack", lambda L, a, b: L.stack([a, b], 1), [(2, 3), (2, 3)]),
    Case("stack_last", lambda L, a, b: L.stack([a, b], -1), [(2, 3), (2, 3)]),
    Case("split", lambda L, a: list(a.split(2, 1)), [(3, 5)]),
    Case("split_sizes", lambda L, a: list(a.split([1, 3], 0)), [(4, 2)]),
    Case("chunk", lambda L, a: list(a.chunk(3, 0)), [(7, 2)]),
    # matmul and layers
    Case("matmul_vec_vec", lambda L, a, b: a @ b, [(3,), (3,)]),
    Case("matmul_vec_mat", lambda L, a, b: a @ b, [(3,), (3, 4)]),
    Case("matmul_mat_vec", lambda L, a, b: L.matmul(a, b), [(2, 3), (3,)]),
    Case("matmul_mat_mat", lambda L, a, b: a @ b, [(2, 3), (3, 4)]),
    Case("matmul_batched", lambda L, a, b: a @ b, [(2, 2, 3), (2, 3, 4)]),
    Case("matmul_broadcast", lambda L, a, b: a @ b, [(2, 1, 2, 3), (3, 3, 4)]),
    Case("matmul_vec_batch", lambda L, a, b: a @ b, [(3,), (2, 3, 4)]),
    Case("matmul_batch_vec", lambda L, a, b: a @ b, [(2, 2, 3), (3,)]),
    Case("linear", lambda L, x, w, b: F(L).linear(x, w, b), [(4, 3), (2, 3), (2,)]),
    Case("linear_no_bias", lambda L, x, w: F(L).linear(x, w), [(4, 3), (2, 3)]),
    Case("linear_batched", lambda L, x, w, b: F(L).linear(x, w, b), [(2, 4, 3), (2, 3), (2,)]),
    Case("linear_vector", lambda L, x, w, b: F(L).linear(x, w, b), [(3,), (2, 3), (2,)]),
    Case("mse_mean", lambda L, a, b: F(L).mse_loss(a, b), [(2, 3), (2, 3)]),
    Case("mse_sum", lambda L, a, b: F(L).mse_loss(a, b, reduction="sum"), [(2, 3), (2, 3)]),
    Case("mse_none", lambda L, a, b: F(L).mse_loss(a, b, reduction="none"), [(2, 3), (2, 3)]),
]


def draw_arrays(case, seed=0):
    rng = np.random.default_rng(seed)
    return [case.make(rng, shape) for shape in case.shapes]


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_vjp_matches_finite_differences(case, device):
    check_grad(lambda *ts: case.fn(flow, *ts), *draw_arrays(case), device=device)


def _outputs(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("case", [c for c in CASES if c.torch], ids=repr)
def test_matches_torch(case):
    torch = pytest.importorskip("torch")
    arrays = draw_arrays(case)
    flow_in = [flow.tensor(a, requires_grad=True) for a in arrays]
    torch_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    flow_out, torch_out = _outputs(case.fn(flow, *flow_in)), _outputs(case.fn(torch, *torch_in))
    assert len(flow_out) == len(torch_out)
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(tuple(o.shape)) for o in torch_out]
    for f, t in zip(flow_out, torch_out):
        assert tuple(f.shape) == tuple(t.shape)
        np.testing.assert_allclose(f.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
    sum(((f * flow.tensor(w)).sum() for f, w in zip(flow_out, weights)), flow.tensor(0.0, dtype=flow.float64)
        ).backward()
    sum((t * torch.tensor(w)).sum() for t, w in zip(torch_out, weights)).backward()
    for i, (f, t) in enumerate(zip(flow_in, torch_in)):
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"gradient of input {i}")


NEGATIVE_STEPS = [np.s_[::-1], np.s_[3:0:-2, ::-1], np.s_[::-2, None, 1], np.s_[..., ::-1]]


@pytest.mark.parametrize("index", NEGATIVE_STEPS, ids=str)
def test_negative_step_indexing_matches_numpy(device, index):
    a = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(flow.tensor(a, device=device)[index].numpy(), a[index])


# ---------------------------------------------------------------------------------- drawn by hypothesis


def dims_for(ndim):
    """None, one dim (possibly negative), or a tuple of distinct dims."""
    one = st.integers(-ndim, ndim - 1)
    several = st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple)
    return st.one_of(st.none(), one, several)


REDUCTIONS = {
    "sum": lambda a, dim, keepdim: a.sum(dim, keepdim=keepdim),
    "mean": lambda a, dim, keepdim: a.mean(dim, keepdim=keepdim),
    "var": lambda a, dim, keepdim: a.var(dim, keepdim=keepdim),
    "amax": lambda a, dim, keepdim: a.amax(dim, keepdim=keepdim),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@GRADCHECK
@given(data=st.data())
def test_reduction_vjp_over_drawn_dims(name, device, data):
    shape = data.draw(array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=3), label="shape")
    dim = data.draw(dims_for(len(shape)), label="dim")
    keepdim = data.draw(st.booleans(), label="keepdim")
    a = np.random.default_rng(len(shape)).standard_normal(shape)
    check_grad(lambda t: REDUCTIONS[name](t, dim, keepdim), a, device=device)


@pytest.mark.parametrize("name", ["max", "softmax", "log_softmax"])
@GRADCHECK
@given(data=st.data())
def test_dim_op_vjp_over_drawn_dims(name, device, data):
    shape = data.draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3), label="shape")
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    fn = {"max": lambda t: t.max(dim).values, "softmax": lambda t: t.softmax(dim),
          "log_softmax": lambda t: t.log_softmax(dim)}[name]
    check_grad(fn, np.random.default_rng(0).standard_normal(shape), device=device)


@GRADCHECK
@given(shapes=mutually_broadcastable_shapes(num_shapes=1, min_dims=0, max_dims=3, max_side=3))
def test_sum_to_undoes_broadcasting(device, shapes):
    (small,), big = shapes
    a = np.random.default_rng(0).standard_normal(big)
    out = check_grad(lambda t: t.sum_to(small), a, device=device)
    expected = a.sum(axis=tuple(range(len(big) - len(small)))) if len(big) > len(small) else a
    expected = expected.sum(axis=tuple(i for i, d in enumerate(small) if d == 1), keepdims=True) \
        if small else expected
    np.testing.assert_allclose(out[0].sum_to(small).numpy(), np.reshape(expected, small))


@GRADCHECK
@given(data=st.data())
def test_shape_ops_vjp_over_drawn_shapes(device, data):
    shape = data.draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3), label="shape")
    ndim = len(shape)
    perm = data.draw(st.permutations(range(ndim)), label="permutation")
    where = data.draw(st.integers(-ndim - 1, ndim), label="unsqueeze at")
    reps = data.draw(st.lists(st.integers(1, 2), min_size=ndim, max_size=ndim + 1), label="repeat")

    def fn(t):
        moved = t.permute(*perm).unsqueeze(where).flatten()
        return [moved.reshape(-1, 1), t.repeat(*reps), t.unsqueeze(0).expand(2, *shape).squeeze()]
    check_grad(fn, np.random.default_rng(1).standard_normal(shape), device=device)


@GRADCHECK
@given(batch=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
       sizes=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
       vectors=st.tuples(st.booleans(), st.booleans()))
def test_matmul_vjp_over_drawn_batches(device, batch, sizes, vectors):
    (batch_a, batch_b), _ = batch
    n, k, m = sizes
    # A 1-d operand has no batch dimensions: it is a row (first) or a column (second) vector.
    shape_a = (k,) if vectors[0] else batch_a + (n, k)
    shape_b = (k,) if vectors[1] else batch_b + (k, m)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    (ta, tb) = check_grad(lambda x, y: x @ y, a, b, device=device)
    np.testing.assert_allclose((ta @ tb).numpy(), np.matmul(a, b), rtol=1e-12, atol=1e-12)


@GRADCHECK
@given(shapes=st.lists(st.integers(1, 3), min_size=1, max_size=4), dim=st.integers(0, 1))
def test_cat_split_roundtrip(device, shapes, dim):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((s, 2) if dim == 0 else (2, s)) for s in shapes]
    check_grad(lambda *ts: flow.cat(list(ts), dim=dim), *arrays, device=device)
    joined = flow.cat([flow.tensor(a, device=device) for a in arrays], dim=dim)
    for piece, a in zip(joined.split(shapes, dim), arrays):
        np.testing.assert_array_equal(piece.numpy(), a)


def test_indexing_with_a_host_array_and_a_tensor_agree(device):
    a = flow.tensor(np.arange(12.0).reshape(4, 3), device=device)
    rows = np.array([2, 0, 2])
    np.testing.assert_array_equal(a[rows].numpy(), a[flow.tensor(rows, device=device)].numpy())
    np.testing.assert_array_equal(a[rows].numpy(), np.arange(12.0).reshape(4, 3)[rows])


def test_setitem_writes_in_place(device):
    a = flow.zeros(3, 4, device=device)
    a[1] = 2.0
    a[:, 0] = flow.tensor([1.0, 1.0, 1.0], device=device)
    a[[2, 2], [3, 1]] = 5.0
    a[0, 1:3] = np.array([7.0, 8.0])  # host data is copied to the tensor's device
    expected = np.zeros((3, 4), dtype=np.float32)
    expected[1] = 2.0
    expected[:, 0] = 1.0
    expected[[2, 2], [3, 1]] = 5.0
    expected[0, 1:3] = [7.0, 8.0]
    np.testing.assert_array_equal(a.numpy(), expected)


def test_max_and_min_with_dim_return_values_and_indices(device):
    a = flow.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], device=device)
    values, indices = a.max(1)
    np.testing.assert_array_equal(values.numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 2])
    result = a.min(0, keepdim=True)
    np.testing.assert_array_equal(result.values.numpy(), [[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(result.indices.numpy(), [[0, 1, 0]])
    assert indices.dtype is flow.int64
    np.testing.assert_array_equal(flow.argmax(a, 1).numpy(), [1, 2])
    assert a.argmax().item() == 5


def test_amax_splits_the_gradient_between_ties(device):
    a = flow.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], device=device, requires_grad=True)
    a.amax(1).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


def test_reductions_return_0d_arrays(device):
    a = flow.tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    for result in (a.sum(), a.mean(), a.var(), a.amax(), a.max(), a.min(), a.any(), a.all(),
                   flow.nn.functional.mse_loss(a, a)):
        assert result.shape == ()
        assert result.array.ndim == 0
        result.array[...] = 0  # a real 0-d array, writable, not a NumPy scalar
    assert a.sum(0).sum(0).array.ndim == 0


def test_reductions_of_a_0d_tensor(device):
    a = flow.tensor(1.5, device=device, requires_grad=True)
    for result in (a.sum(0), a.mean(-1), a.sum(), a.amax()):
        assert result.shape == ()
        assert result.item() == 1.5
    a.sum(0, keepdim=True).backward()
    assert a.grad.item() == 1.0


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64", "bool"])
def test_integer_and_bool_sums_are_int64(device, dtype):
    t = flow.tensor(np.array([[200, 100], [1, 0]]).astype(dtype), device=device)
    expected = np.array([[200, 100], [1, 0]]).astype(dtype).astype(np.int64)
    for result, want in [(t.sum(), expected.sum()), (t.sum(1), expected.sum(1)), (t.sum(0, keepdim=True),
                                                                                  expected.sum(0, keepdims=True))]:
        assert result.dtype is flow.int64
        np.testing.assert_array_equal(result.numpy(), want)


def test_softmax_is_stable_for_large_logits(device):
    a = flow.tensor([[1000.0, 1000.0, -1000.0]], device=device)
    np.testing.assert_allclose(a.softmax(1).numpy(), [[0.5, 0.5, 0.0]])
    np.testing.assert_allclose(a.log_softmax(1).numpy()[0, :2], [np.log(0.5)] * 2, rtol=1e-6)


@pytest.mark.parametrize("lead", [(4,), (2, 3), ()])
def test_linear_grad_weight_is_the_weight_gradient_and_differentiable(device, lead):
    """linear's weight gradient op (one matmul over all leading dims) equals autograd's and has a vjp."""
    from gradcheck import check_grad
    from toynet.ops import OPS
    from toynet.dynamic.tensor import apply

    rng = np.random.default_rng(3)
    g, x = rng.standard_normal(lead + (2,)), rng.standard_normal(lead + (3,))
    check_grad(lambda g, x: apply(OPS["linear_grad_weight"], g, x), g, x, device=device)
    w = flow.tensor(rng.standard_normal((2, 3)), device=device, requires_grad=True)
    xt = flow.tensor(x, device=device)
    (flow.nn.functional.linear(xt, w) * flow.tensor(g, device=device)).sum().backward()
    expected = g.reshape(-1, 2).T @ x.reshape(-1, 3)
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-12)
