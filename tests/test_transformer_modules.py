"""A transformer's layers (issue 20): F.scaled_dot_product_attention, nn.Embedding, nn.LayerNorm, nn.GELU and
nn.MultiheadAttention against PyTorch (values, gradients, state dicts, printouts); every new op inside an
nn.Graph, forward and training, equal to Eager mode on the lesson path and on the fast path; and an attention
block exported to ONNX, run by ONNX Runtime and imported back.
"""

from __future__ import annotations

import numpy as np
import pytest

import toynet as flow
import toynet.nn.functional as F
from toynet import nn
from toynet.ops import ShapeError

torch = pytest.importorskip("torch")


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def close(ours, theirs, tol=2e-6):
    np.testing.assert_allclose(np.asarray(ours.detach().numpy() if hasattr(ours, "detach") else ours),
                               theirs.detach().numpy() if hasattr(theirs, "detach") else theirs, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------ scaled_dot_product_attention


MASKS = {
    "none": {},
    "causal": {"is_causal": True},
    "bool": {"attn_mask": np.tril(np.ones((4, 6), bool), 2)},
    "float": {"attn_mask": rand(2, 1, 4, 6, seed=9)},
    "scale": {"scale": 0.3},
}


@pytest.mark.parametrize("case", sorted(MASKS))
def test_attention_matches_torch_values_and_gradients(case, device):
    q, k, v = rand(2, 3, 4, 5), rand(2, 3, 6, 5, seed=1), rand(2, 3, 6, 7, seed=2)
    kwargs = MASKS[case]
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, **{n: torch.tensor(a) if isinstance(a, np.ndarray) else a for n, a in kwargs.items()})
    g = rand(*want.shape, seed=3)
    (want * torch.tensor(g)).sum().backward()
    fq, fk, fv = (flow.tensor(a, device=device, requires_grad=True) for a in (q, k, v))
    got = F.scaled_dot_product_attention(
        fq, fk, fv, **{n: flow.tensor(a, device=device) if isinstance(a, np.ndarray) else a for n, a in kwargs.items()})
    (got * flow.tensor(g, device=device)).sum().backward()
    close(got, want)
    for ours, theirs in ((fq, tq), (fk, tk), (fv, tv)):
        close(ours.grad, theirs.grad, 1e-5)


def test_attention_dropout_is_toynets_random_and_errors_name_the_problem():
    q = flow.randn(1, 2, 3, 4)
    flow.manual_seed(5)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    flow.manual_seed(5)
    assert np.array_equal(a.numpy(), F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy())
    assert not np.allclose(a.numpy(), F.scaled_dot_product_attention(q, q, q).numpy())
    with pytest.raises(ValueError, match="pass attn_mask or is_causal=True, not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=flow.ones(3, 3).bool(), is_causal=True)
    with pytest.raises(ShapeError, match=r"query and key must have the same feature size .*key \(1, 2, 3, 5\)"):
        F.scaled_dot_product_attention(q, flow.randn(1, 2, 3, 5), q)
    with pytest.raises(ShapeError, match=r"attn_mask of shape \(2, 2\) does not broadcast to the attention scores' "
                                         r"shape \(1, 2, 3, 3\)"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=flow.ones(2, 2).bool())


# ----------------------------------------------------------------------------------- the modules


def torch_state(module):
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def test_embedding_module_init_repr_padding_and_pretrained():
    flow.manual_seed(0)
    emb = nn.Embedding(1000, 16, padding_idx=-1)
    w = emb.weight.numpy()
    assert emb.padding_idx == 999 and np.all(w[999] == 0)
    assert abs(w[:999].mean()) < 0.02 and abs(w[:999].std() - 1) < 0.02       # N(0, 1)
    assert repr(emb) == repr(torch.nn.Embedding(1000, 16, padding_idx=-1)) == "Embedding(1000, 16, padding_idx=999)"
    assert [n for n, _ in emb.named_parameters()] == ["weight"]
    emb(flow.tensor([[1, 999], [999, 2]])).sum().backward()
    assert np.all(emb.weight.grad.numpy()[999] == 0) and np.all(emb.weight.grad.numpy()[1] == 1)
    frozen = nn.Embedding.from_pretrained(flow.tensor(rand(3, 2)))
    assert not frozen.weight.requires_grad and frozen(flow.tensor([2])).shape == (1, 2)
    with pytest.raises(NotImplementedError, match="max_norm, scale_grad_by_freq and sparse are not supported"):
        nn.Embedding(3, 2, max_norm=1.0)
    with pytest.raises(ValueError, match=r"padding_idx 3 must be within num_embeddings \(3\)"):
        nn.Embedding(3, 2, padding_idx=3)


@pytest.mark.parametrize("kwargs", [{}, {"elementwise_affine": False}, {"bias": False}, {"eps": 1e-3}])
def test_layer_norm_module_matches_torch(kwargs):
    ours, theirs = nn.LayerNorm((3, 4), **kwargs), torch.nn.LayerNorm((3, 4), **kwargs)
    assert repr(ours) == repr(theirs)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.tensor(rand(*p.shape, seed=4)))
    ours.load_state_dict(torch_state(theirs))
    x = rand(2, 3, 4)
    close(ours(flow.tensor(x)), theirs(torch.tensor(x)))
    with pytest.raises(ValueError, match="normalized_shape must be a positive int or a tuple of them"):
        nn.LayerNorm(0)


def test_gelu_module_matches_torch():
    x = rand(50) * 3
    for approximate in ("none", "tanh"):
        ours, theirs = nn.GELU(approximate), torch.nn.GELU(approximate)
        assert repr(ours) == repr(theirs)
        close(ours(flow.tensor(x)), theirs(torch.tensor(x)))
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        nn.GELU("erf")


MHA_CASES = [
    ({}, {}),
    ({"batch_first": True}, {"key_padding_mask": "kpm"}),
    ({"kdim": 6, "vdim": 5}, {"attn_mask": "causal", "average_attn_weights": False}),
    ({"bias": False}, {"attn_mask": "float", "key_padding_mask": "kpm"}),
    ({"batch_first": True}, {"attn_mask": "heads", "need_weights": False}),
]


def _mha_inputs(kwargs, lib, L=4, S=5, N=3, E=8, heads=2):
    first = kwargs.get("batch_first", False)
    shape = (lambda n, t, e: (n, t, e)) if first else (lambda n, t, e: (t, n, e))
    q, k, v = rand(*shape(N, L, E)), rand(*shape(N, S, kwargs.get("kdim", E)), seed=1), \
        rand(*shape(N, S, kwargs.get("vdim", E)), seed=2)
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    masks = {"kpm": kpm, "causal": np.triu(np.ones((L, S), bool), 1), "float": rand(L, S, seed=3),
             "heads": rand(N * heads, L, S, seed=4) > 0.5}
    return [lib.tensor(a) for a in (q, k, v)], masks


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask")  # (PyTorch's, case 4)
@pytest.mark.parametrize("kwargs, call", MHA_CASES)
def test_multihead_attention_loads_torchs_state_dict_and_matches_it(kwargs, call):
    theirs = torch.nn.MultiheadAttention(8, 2, **kwargs)
    ours = nn.MultiheadAttention(8, 2, **kwargs)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.load_state_dict(torch_state(theirs)) == ([], [])
    (tq, tk, tv), masks = _mha_inputs(kwargs, torch)
    (fq, fk, fv), _ = _mha_inputs(kwargs, flow)
    for t in (tq, tk, tv):
        t.requires_grad_(True)
    targs = {n: torch.tensor(masks[a]) if isinstance(a, str) else a for n, a in call.items()}
    fargs = {n: flow.tensor(masks[a]) if isinstance(a, str) else a for n, a in call.items()}
    want, want_w = theirs(tq, tk, tv, **targs)
    got, got_w = ours(fq, fk, fv, **fargs)
    close(got, want)
    assert (got_w is None) == (want_w is None)
    if want_w is not None:
        close(got_w, want_w)
    want.sum().backward()
    got.sum().backward()
    grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, grads[name].grad, 1e-5)


def test_multihead_self_attention_unbatched_and_dropout_only_in_training():
    theirs = torch.nn.MultiheadAttention(8, 4)
    ours = nn.MultiheadAttention(8, 4, dropout=0.5)
    ours.load_state_dict(torch_state(theirs))
    x = rand(6, 8)
    ours.eval()
    out, weights = ours(*(flow.tensor(x),) * 3)
    want, want_w = theirs(*(torch.tensor(x),) * 3)
    close(out, want)
    close(weights, want_w)
    assert out.shape == (6, 8) and weights.shape == (6, 6)
    ours.train()
    assert not np.allclose(ours(*(flow.tensor(x),) * 3)[0].numpy(), out.numpy())


def test_multihead_attention_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        nn.MultiheadAttention(10, 3)
    mha = nn.MultiheadAttention(8, 2)
    x = flow.randn(4, 2, 8)
    with pytest.raises(ShapeError, match=r"must be embed_dim=8, kdim=8, vdim=8, got query \(4, 2, 6\)"):
        mha(flow.randn(4, 2, 6), x, x)
    with pytest.raises(ShapeError, match=r"key_padding_mask has shape \(4, 2\), expected \(2, 4\) \(N, S\)"):
        mha(x, x, x, key_padding_mask=flow.zeros(4, 2).bool())
    with pytest.raises(ShapeError, match=r"attn_mask has shape \(3, 3\), expected \(4, 4\) or \(4, 4, 4\)"):
        mha(x, x, x, attn_mask=flow.zeros(3, 3).bool())
    with pytest.raises(RuntimeError, match="is_causal=True is a hint that attn_mask is the causal mask"):
        mha(x, x, x, is_causal=True)


def test_a_small_transformer_prints_as_pytorchs():
    def build(lib):
        return lib.nn.Sequential(lib.nn.Embedding(10, 8, padding_idx=0), lib.nn.LayerNorm(8), lib.nn.GELU("tanh"),
                                 lib.nn.MultiheadAttention(8, 2, batch_first=True), lib.nn.CrossEntropyLoss())
    assert repr(build(flow)) == repr(build(torch))


# --------------------------------------------------------------------------------- Graph mode == Eager mode


class Block(nn.Module):
    """Every new op and module in one network: embedding, layer norm, attention (module and function), the
    masks, gelu of both forms, topk and gather, label smoothing."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8, padding_idx=0)
        self.ln = nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.fc, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 11)
        self.act, self.act2 = nn.GELU(), nn.GELU("tanh")
        self.register_buffer("mask", flow.ones(5, 5).triu(1).bool())

    def forward(self, idx):
        x = self.emb(idx)
        h = self.ln(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
        y = x.unsqueeze(1)
        x = x + F.scaled_dot_product_attention(y, y, y, is_causal=True).squeeze(1)
        x = x.masked_fill(x > 2.0, 2.0).tril(1) + x.triu(2)
        logits = self.fc2(self.act2(self.act(self.fc(x))))
        top = logits.topk(3)
        return logits, top.values.sum() * 0.01 + logits.gather(-1, top.indices).mean()


def loss_of(model, idx, target):
    logits, extra = model(idx)
    return F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), label_smoothing=0.1) + extra


class Train(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, idx, target):
        loss = loss_of(self.model, idx, target)
        loss.backward()
        return loss


class Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, idx):
        return self.model(idx)[0]


def _batch(seed):
    rng = np.random.default_rng(seed)
    return flow.tensor(rng.integers(0, 11, (4, 5))), flow.tensor(rng.integers(0, 11, (4, 5)))


@pytest.mark.parametrize("path", ["lesson_path", "fast_path"])
def test_training_in_a_graph_equals_eager_mode(path, request):
    request.getfixturevalue(path)
    flow.manual_seed(0)
    eager = Block()
    flow.manual_seed(0)
    traced = Block()
    eager_opt = flow.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    graph = Train(traced, flow.optim.SGD(traced.parameters(), lr=0.1, momentum=0.9))
    for step in range(3):
        idx, target = _batch(step)
        loss = loss_of(eager, idx, target)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(graph(idx, target).numpy(), loss.numpy(), rtol=1e-5)
    for (name, a), b in zip(eager.named_parameters(), traced.parameters()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert np.all(traced.emb.weight.numpy()[0] == 0)          # the padding row stayed zero in the graph too
    idx, _ = _batch(7)
    traced.eval()
    np.testing.assert_allclose(Infer(traced)(idx).numpy(), traced(idx)[0].numpy(), rtol=1e-6, atol=1e-6)


def test_sampling_ops_in_a_graph():
    class Sample(nn.Graph):
        def build(self, logits):
            top = logits.topk(2)
            return top.indices.gather(-1, flow.softmax(top.values, -1).multinomial(1))

    logits = flow.tensor([[0.0, 5.0, 4.0, -9.0], [3.0, -1.0, 9.0, 0.0]])
    picked = [Sample()(logits).reshape(-1).tolist() for _ in range(20)]
    assert all(p[0] in (1, 2) and p[1] in (0, 2) for p in picked)
    assert len({tuple(p) for p in picked}) > 1                  # a fresh draw on every call


# ----------------------------------------------------------------------------------------- ONNX


@pytest.mark.parametrize("opset", [13, 17, 20])
def test_an_attention_block_runs_in_onnx_runtime_and_imports_back(opset, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    flow.manual_seed(0)
    model = Block().eval()

    class Outputs(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, idx):
            logits, extra = self.model(idx)
            top = logits.topk(2, largest=False)
            return logits, extra, top.values, top.indices

    graph = Outputs()
    idx, _ = _batch(3)
    expected = [t.numpy() for t in graph(idx)]
    path = flow.onnx.export(graph, tmp_path / "block.onnx", opset_version=opset)
    types = {n.op_type for n in __import__("onnx").load(str(path)).graph.node}
    assert {"Gather", "Where", "TopK", "GatherElements"} <= types
    assert ("LayerNormalization" in types) == (opset >= 17) and ("Trilu" in types) == (opset >= 14)
    assert ("Gelu" in types) == (opset >= 20) and ("Erf" in types) == (opset < 20)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input_0": idx.numpy()})
    for ours, theirs in zip(expected, got):
        np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
    back = flow.onnx.load(path)
    for ours, again in zip(expected, back(idx)):
        np.testing.assert_allclose(again.numpy(), ours, rtol=1e-5, atol=1e-5)


def test_an_attention_block_deploys_with_flow_save(tmp_path):
    flow.manual_seed(0)
    model = Block().eval()
    graph = Infer(model)
    idx, _ = _batch(4)
    expected = graph(idx).numpy()
    flow.save(graph, tmp_path / "block")
    np.testing.assert_array_equal(flow.load(tmp_path / "block")(idx).numpy(), expected)
