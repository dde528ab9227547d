"""A transformer's ops (issue 20): gelu, layer_norm, embedding, gather/topk, tril/triu, multinomial, cross_entropy's
label smoothing, masked_fill, and the functions around them (split, chunk, bmm, batched @ on 4-D tensors).

Each one: gradients against central finite differences (tests/gradcheck.py) on every device, values and
gradients against PyTorch, second derivatives where the vjp has a fused op, and the error messages of bad
input. Graph mode against Eager mode and ONNX Runtime are in tests/test_transformer_modules.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_grad

import toynet as flow
import toynet.nn.functional as F
from toynet.ops import OPS, ShapeError
from toynet.ops._op import apply
from toynet.ops.gelu import TANH_DEGREE, TANH_RANGE, erfc_fit, tanh_form_fit

torch = pytest.importorskip("torch")


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def torch_grads(fn, arrays, weights):
    """PyTorch's output of ``fn`` and gradients of ``sum(fn(...) * weights)`` for the float arrays."""
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = fn(*ts)
    (out * torch.tensor(weights, dtype=out.dtype)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else None for t in ts]


def flow_grads(fn, arrays, weights):
    ts = [flow.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = fn(*ts)
    (out * flow.tensor(weights, dtype=out.dtype)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else None for t in ts]


def assert_like_torch(ours, theirs, arrays, out_shape, rtol=1e-10, atol=1e-12, seed=1):
    weights = rand(*out_shape, seed=seed).astype(arrays[0].dtype)
    got, got_grads = flow_grads(ours, arrays, weights)
    want, want_grads = torch_grads(theirs, arrays, weights)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


def second_derivative(fn):
    """``x -> d/dx sum(fn(x)^2)``, built with create_graph so that check_grad differentiates it once more."""
    def grad_of(t):
        t = t if t.requires_grad else t.detach().requires_grad_()
        (g,) = flow.autograd.grad((fn(t) ** 2).sum(), t, create_graph=True)
        return g
    return grad_of


# ---------------------------------------------------------------------------------------------- gelu


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradient_matches_finite_differences(approximate, device):
    x = np.concatenate([rand(9), [-6.0, -0.5, 0.0, 0.7, 6.0]])
    check_grad(lambda t: F.gelu(t, approximate=approximate), x, device=device)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_second_derivative_matches_finite_differences(approximate):
    check_grad(second_derivative(lambda t: F.gelu(t, approximate=approximate)), rand(7), atol=1e-4)


@pytest.mark.parametrize("dtype, rtol, atol", [(np.float64, 1e-12, 1e-14), (np.float32, 2e-6, 2e-6)])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch_values_and_gradients(approximate, dtype, rtol, atol):
    x = np.concatenate([rand(200) * 3, np.linspace(-12, 12, 101)]).astype(dtype)
    assert_like_torch(lambda t: F.gelu(t, approximate=approximate),
                      lambda t: torch.nn.functional.gelu(t, approximate=approximate), [x], x.shape, rtol, atol)


def test_gelu_float16_and_in_place_out_of_graph_plans():
    x = rand(3, 1000).astype(np.float32) * 4
    want = torch.nn.functional.gelu(torch.tensor(x)).numpy()
    out = x.copy()   # a compiled plan may hand the input's own buffer as out=
    assert OPS["gelu"].forward(np, out, out=out) is out
    np.testing.assert_allclose(out, want, atol=1e-6)
    half = F.gelu(flow.tensor(x.astype(np.float16)))
    assert half.dtype is flow.float16
    np.testing.assert_allclose(half.numpy().astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_the_fitted_polynomials_are_close_to_erf_everywhere():
    """Phi from the float32 tanh form within 1e-7, and erfc from the float64 form within 1e-13 (relative)."""
    import math
    x = np.linspace(-TANH_RANGE, TANH_RANGE, 2001)
    coefficients = tanh_form_fit()
    assert len(coefficients) == TANH_DEGREE + 1
    h = sum(c * (x * x) ** k for k, c in enumerate(coefficients))
    phi = (1 + np.tanh(x * h)) / 2
    exact = np.array([math.erfc(-v / math.sqrt(2)) / 2 for v in x])
    assert np.abs(phi - exact).max() < 1.2e-7
    z = np.linspace(0, 20, 1001)
    t = 1 / (1 + 0.4 * z)
    q = sum(c * t ** k for k, c in enumerate(erfc_fit()))
    erfc = 2 * t * q * np.exp(-z * z)
    want = np.array([math.erfc(v) for v in z])
    assert np.max(np.abs(erfc - want) / want) < 1e-12


def test_gelu_refuses_bad_input():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'fast'"):
        F.gelu(flow.randn(3), approximate="fast")
    with pytest.raises(ShapeError, match=r"gelu: needs a floating-point tensor, got .*int64.*\.to\(toynet.float32\)"):
        F.gelu(flow.tensor([1, 2]))


# ---------------------------------------------------------------------------------------- layer_norm


@pytest.mark.parametrize("shape, normalized", [((3, 4), (4,)), ((2, 3, 4), (3, 4)), ((5,), (5,))])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_gradients_match_finite_differences(shape, normalized, affine, device):
    x = rand(*shape)
    params = [rand(*normalized, seed=2), rand(*normalized, seed=3)][:{"both": 2, "weight": 1, "none": 0}[affine]]
    check_grad(lambda t, *p: F.layer_norm(t, normalized, *p, eps=1e-3), x, *params, device=device)


def test_layer_norm_bias_without_weight_and_second_derivative(device):
    x, b = rand(3, 4), rand(4, seed=1)
    check_grad(lambda t, bias: F.layer_norm(t, (4,), None, bias), x, b, device=device)
    w = flow.tensor(rand(4, seed=2))
    check_grad(second_derivative(lambda t: F.layer_norm(t, (4,), w, None)), x, atol=1e-4)


@pytest.mark.parametrize("dtype, rtol, atol", [(np.float64, 1e-10, 1e-12), (np.float32, 1e-5, 1e-5)])
def test_layer_norm_matches_torch_values_and_gradients(dtype, rtol, atol):
    x, w, b = (rand(4, 5, 6, seed=0) * 3 + 1).astype(dtype), rand(5, 6, seed=1).astype(dtype), rand(5, 6, seed=2).astype(dtype)
    assert_like_torch(lambda *t: F.layer_norm(t[0], (5, 6), t[1], t[2], eps=1e-4),
                      lambda *t: torch.nn.functional.layer_norm(t[0], (5, 6), t[1], t[2], eps=1e-4),
                      [x, w, b], x.shape, rtol, atol)


def test_layer_norm_over_many_rows_runs_in_chunks_and_float16_computes_in_float32():
    x, w = rand(3000, 64).astype(np.float32), rand(64, seed=1).astype(np.float32)   # several cache-sized chunks
    assert_like_torch(lambda a, b: F.layer_norm(a, (64,), b), lambda a, b: torch.nn.functional.layer_norm(a, (64,), b),
                      [x, w], x.shape, 1e-4, 1e-4)
    half = F.layer_norm(flow.tensor(x.astype(np.float16) * 100), (64,))
    assert half.dtype is flow.float16
    want = torch.nn.functional.layer_norm(torch.tensor(x.astype(np.float16).astype(np.float32) * 100), (64,)).numpy()
    np.testing.assert_allclose(half.numpy().astype(np.float32), want, atol=1e-2)


def test_layer_norm_refuses_bad_shapes():
    x = flow.randn(2, 3, 4)
    with pytest.raises(ShapeError, match=r"normalized_shape \(3,\) must be the last dimension\(s\) of the input, whose "
                                         r"shape is \(2, 3, 4\) \(e.g. normalized_shape=\(4,\)\)"):
        F.layer_norm(x, (3,))
    with pytest.raises(ShapeError, match=r"layer_norm: weight has shape \(3,\) but the normalised shape is \(4,\)"):
        F.layer_norm(x, (4,), flow.ones(3))
    with pytest.raises(ShapeError, match="needs a floating-point tensor"):
        F.layer_norm(flow.tensor([[1, 2]]), (2,))


# ----------------------------------------------------------------------------------------- embedding


def test_embedding_gradient_sums_repeated_rows_and_skips_the_padding_row(device):
    weight = rand(6, 3)
    indices = flow.tensor([[1, 2, 2], [5, 1, 0], [2, 2, 2]], device=device)
    check_grad(lambda w: F.embedding(indices, w), weight, device=device)
    w = flow.tensor(weight, device=device, requires_grad=True)
    g = rand(3, 3, 3, seed=1)
    (F.embedding(indices, w, padding_idx=2) * flow.tensor(g, device=device)).sum().backward()
    expected = np.zeros_like(weight)
    np.add.at(expected, indices.numpy(), g)
    expected[2] = 0        # the padding row gets no gradient, though finite differences would see one
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-12)


def test_embedding_matches_torch_for_any_index_shape():
    weight = rand(7, 4).astype(np.float32)
    for indices in (np.array(3), np.array([[0, 6, 6], [1, 1, 1]]), np.array([[[5]], [[5]]]), np.zeros((2, 0), int)):
        for padding in (None, 1, -1):
            assert_like_torch(lambda w: F.embedding(flow.tensor(indices), w, padding_idx=padding),
                              lambda w: torch.nn.functional.embedding(torch.tensor(indices), w, padding_idx=padding),
                              [weight], indices.shape + (4,), 1e-6, 1e-7)


def test_embedding_gradient_of_the_gradient():
    indices = flow.tensor([0, 2, 2, 1])
    check_grad(lambda g: apply(OPS["embedding_grad"], g, indices, shape=(3, 2), ignore_index=1), rand(4, 2))


def test_embedding_refuses_bad_indices():
    weight = flow.randn(5, 3)
    with pytest.raises(IndexError, match=r"embedding: index out of range: the indices run from 0 to 7, but the weight "
                                         r"has 5 rows \(num_embeddings=5\), so they must be in \[0, 5\)"):
        F.embedding(flow.tensor([0, 7]), weight)
    with pytest.raises(IndexError, match=r"run from -1 to 1"):
        F.embedding(flow.tensor([-1, 1]), weight)
    with pytest.raises(ShapeError, match=r"indices must be an integer tensor \(int64\), got .*float32.*\.long\(\)"):
        F.embedding(flow.tensor([0.0, 1.0]), weight)
    with pytest.raises(ValueError, match=r"padding_idx 5 must be within num_embeddings \(5\)"):
        F.embedding(flow.tensor([0]), weight, padding_idx=5)


# ------------------------------------------------------------------------------------ gather and topk


def test_gather_gradient_and_its_gradient_match_finite_differences(device):
    index = flow.tensor([[0, 2, 2], [1, 0, 1]], device=device)
    check_grad(lambda t: t.gather(1, index), rand(2, 4), device=device)
    check_grad(lambda t: flow.gather(t, 0, index), rand(3, 3), device=device)        # a smaller index: a corner
    check_grad(lambda g: apply(OPS["gather_grad"], g, index, dim=1, shape=(2, 4)), rand(2, 3), device=device)


def test_gather_matches_torch():
    x = rand(3, 4, 5)
    index = np.random.default_rng(1).integers(0, 4, (2, 3, 5))
    assert_like_torch(lambda t: t.gather(1, flow.tensor(index)), lambda t: t.gather(1, torch.tensor(index)),
                      [x], index.shape)


def test_gather_refuses_bad_indices():
    x = flow.randn(2, 3)
    with pytest.raises(IndexError, match=r"gather: index out of range: values from 0 to 3 along dimension 1 of size 3"):
        x.gather(1, flow.tensor([[0, 3]]))
    with pytest.raises(ShapeError, match=r"index has 1 dimension\(s\) but the input has 2"):
        x.gather(1, flow.tensor([0]))
    with pytest.raises(ShapeError, match=r"larger than the input \(2, 3\) in dimension 0"):
        x.gather(1, flow.tensor([[0], [1], [1]]))


@pytest.mark.parametrize("k, dim, largest", [(2, -1, True), (3, 0, False), (1, 1, True), (4, 1, False)])
def test_topk_matches_torch_values_indices_and_gradients(k, dim, largest):
    x = rand(3, 4, 5)
    ours = flow.tensor(x).topk(k, dim, largest)
    theirs = torch.tensor(x).topk(k, dim, largest)
    np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())
    assert ours.values.dtype is flow.float64 and ours.indices.dtype is flow.int64
    assert_like_torch(lambda t: flow.topk(t, k, dim, largest)[0], lambda t: t.topk(k, dim, largest)[0],
                      [x], ours.values.shape)


def test_topk_breaks_ties_by_index_and_checks_k(device):
    x = flow.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]], device=device)
    assert x.topk(3).indices.tolist() == [[1, 2, 4]]
    assert x.topk(2, largest=False).indices.tolist() == [[0, 3]]
    assert flow.tensor([3, 1, 2], dtype=flow.uint8).topk(2).values.tolist() == [3, 2]
    assert x.topk(0).values.shape == (1, 0)
    check_grad(lambda t: t.topk(2)[0], rand(3, 4), device=device)
    with pytest.raises(ShapeError, match=r"topk: k=6 is out of range for dimension 1 of size 5 \(0 <= k <= 5\)"):
        x.topk(6)


# ----------------------------------------------------------------------------------------- tril, triu


@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_tril_and_triu_match_torch_on_batches_of_matrices(diagonal):
    x = rand(2, 3, 4, 5)
    for name in ("tril", "triu"):
        assert_like_torch(lambda t: getattr(flow, name)(t, diagonal), lambda t: getattr(torch, name)(t, diagonal),
                          [x], x.shape)


def test_tril_triu_gradients_and_errors(device):
    check_grad(lambda t: t.tril(-1) + t.triu(1) * 2, rand(3, 4), device=device)
    assert flow.ones(2, 2, dtype=flow.bool).tril().tolist() == [[True, False], [True, True]]
    with pytest.raises(ShapeError, match=r"tril: needs a tensor with at least 2 dimensions \(a matrix, or a batch of "
                                         r"them in the last two dimensions\), got shape \(3,\)"):
        flow.randn(3).tril()


# ------------------------------------------------------------------------------------------ multinomial


def test_multinomial_follows_the_probabilities_and_the_seed(device):
    probs = flow.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 5.0, 0.0]], device=device)   # rows need not sum to 1
    flow.manual_seed(3)
    first = probs.multinomial(4000, replacement=True)
    flow.manual_seed(3)
    assert first.tolist() == flow.multinomial(probs, 4000, True).tolist()
    assert first.shape == (2, 4000) and first.dtype is flow.int64 and first.device == probs.device
    counts = np.bincount(first.numpy()[0], minlength=4) / 4000
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.6, 0.3], atol=0.03)
    assert set(first.numpy()[1].tolist()) == {2}
    draws = [flow.tensor([0.1, 0.2, 0.3, 0.4]).multinomial(4).tolist() for _ in range(200)]
    assert all(sorted(d) == [0, 1, 2, 3] for d in draws)                 # without replacement: each once
    assert np.mean([d[0] == 3 for d in draws]) > 0.25                     # the heaviest comes first most often


def test_multinomial_refuses_bad_probabilities():
    with pytest.raises(ValueError, match="probabilities must be finite and non-negative"):
        flow.tensor([0.5, -0.1]).multinomial(1)
    with pytest.raises(ValueError, match="a row of probabilities sums to 0"):
        flow.tensor([[0.5, 0.5], [0.0, 0.0]]).multinomial(1)
    with pytest.raises(ValueError, match="cannot draw 2 samples without replacement from a row with fewer than 2"):
        flow.tensor([0.0, 1.0, 0.0]).multinomial(2)
    with pytest.raises(ShapeError, match="cannot draw 4 samples without replacement from 3 categories"):
        flow.tensor([0.2, 0.3, 0.5]).multinomial(4)
    with pytest.raises(ShapeError, match=r"probs must be 1-D \(C,\) or 2-D \(N, C\), got shape \(1, 2, 3\)"):
        flow.ones(1, 2, 3).multinomial(1)


# --------------------------------------------------------------------------- cross_entropy's label smoothing


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_label_smoothing_matches_torch_with_ignore_index(reduction, smoothing):
    logits = rand(6, 5, 2)
    target = np.array([[0, 4], [2, -100], [1, 1], [-100, 3], [4, 0], [2, 2]])
    out_shape = () if reduction != "none" else target.shape
    assert_like_torch(
        lambda t: F.cross_entropy(t, flow.tensor(target), reduction=reduction, label_smoothing=smoothing),
        lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(target), reduction=reduction,
                                                    label_smoothing=smoothing), [logits], out_shape)


def test_label_smoothing_gradient_and_module(device):
    target = flow.tensor([0, 2, 1, 2], device=device)
    check_grad(lambda t: F.cross_entropy(t, target, label_smoothing=0.2), rand(4, 3), device=device)
    loss = flow.nn.CrossEntropyLoss(label_smoothing=0.2)(flow.tensor(rand(4, 3)), flow.tensor([0, 2, 1, 2]))
    want = torch.nn.CrossEntropyLoss(label_smoothing=0.2)(torch.tensor(rand(4, 3)), torch.tensor([0, 2, 1, 2]))
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
    with pytest.raises(ShapeError, match="label_smoothing must be between 0.0 and 1.0, got 1.5"):
        F.cross_entropy(flow.randn(2, 3), flow.tensor([0, 1]), label_smoothing=1.5)


# --------------------------------------------------------------------------------------- masked_fill


def test_masked_fill_values_gradients_and_dtypes(device):
    mask = flow.tensor([[True, False, False], [False, False, True]], device=device)
    check_grad(lambda t: t.masked_fill(mask, -2.0), rand(2, 3), device=device)
    x = flow.tensor(rand(4, 2, 3), device=device)
    np.testing.assert_array_equal(flow.masked_fill(x, mask, float("-inf")).numpy(),
                                  torch.tensor(x.numpy()).masked_fill(torch.tensor(mask.numpy()), float("-inf")).numpy())
    ints = flow.tensor([1, 2, 3]).masked_fill(flow.tensor([True, False, True]), 7.9)
    assert ints.dtype is flow.int64 and ints.tolist() == [7, 2, 7]           # as PyTorch: the tensor's dtype
    assert flow.zeros(2).masked_fill(flow.tensor([False, True]), flow.tensor(5.0)).tolist() == [0.0, 5.0]


def test_masked_fill_refuses_bad_masks():
    x = flow.randn(2, 3)
    with pytest.raises(TypeError, match=r"the mask must be a bool tensor, got .*int64.*comparison \(x > 0\)"):
        x.masked_fill(flow.tensor([1, 0, 1]), 0.0)
    with pytest.raises(ShapeError, match=r"a mask of shape \(4, 2, 3\) does not broadcast to the tensor's shape \(2, 3\)"):
        x.masked_fill(flow.ones(4, 2, 3).bool(), 0.0)
    with pytest.raises(ValueError, match="value must be a number or a 0-d tensor"):
        x.masked_fill(x > 0, flow.zeros(3))


# ------------------------------------------------------------- split, chunk, bmm, and batched @ on 4-D


def test_split_chunk_and_a_4d_attention_shaped_pipeline_match_torch():
    x = rand(2, 5, 12)
    assert [p.shape for p in flow.split(flow.tensor(x), 4, dim=-1)] == [(2, 5, 4)] * 3
    assert [p.shape for p in flow.chunk(flow.tensor(x), 4, dim=1)] == [(2, 2, 12), (2, 2, 12), (2, 1, 12)]

    def heads(lib, t):   # (B, T, 3C) -> q, k, v (B, H, T, D) -> scores, broadcast against a (T, T) bias
        q, k, v = t.split(4, dim=-1)
        q, k, v = (u.view(2, 5, 2, 2).transpose(1, 2) for u in (q, k, v))
        att = (q @ k.transpose(-2, -1)) + lib.tensor(np.triu(np.ones((5, 5)), 1) * -1e4)
        return (att.softmax(-1) @ v).transpose(1, 2).contiguous().view(2, 5, 4)
    assert_like_torch(lambda t: heads(flow, t), lambda t: heads(torch, t), [x], (2, 5, 4))
    a, b = rand(3, 2, 4), rand(3, 4, 5, seed=1)
    assert_like_torch(flow.bmm, torch.bmm, [a, b], (3, 2, 5))
    assert_like_torch(lambda p, q: p @ q, lambda p, q: p @ q, [rand(2, 1, 3, 4), rand(3, 4, 2, seed=2)], (2, 3, 3, 2))


def test_bmm_refuses_what_matmul_would_broadcast():
    with pytest.raises(ShapeError, match=r"bmm: both tensors must be 3-D .*got shapes \(2, 3\) and \(3, 2\)"):
        flow.bmm(flow.randn(2, 3), flow.randn(3, 2))
    with pytest.raises(ShapeError, match=r"the first's columns \(4\) must equal the second's rows \(3\)"):
        flow.bmm(flow.randn(2, 3, 4), flow.randn(2, 3, 4))
