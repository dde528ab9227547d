"""The tiny GPT of notebook 09 (toynet.text.gpt), written only with OneFlow's API, against PyTorch running the
same network with the same weights: logits, gradients, five AdamW steps with gradient clipping; then Graph mode
against Eager mode, generation with and without the key-value cache, and export to ONNX."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.text import GPT, CharCorpus, GPTConfig, python_docs

CONFIG = dict(block_size=16, vocab_size=37, n_layer=2, n_head=4, n_embd=32)


def tiny(seed: int = 0, **changes) -> GPT:
    flow.manual_seed(seed)
    return GPT(GPTConfig(**{**CONFIG, **changes}))


def batch(seed: int = 0, B: int = 3, T: int = 16):
    rng = np.random.default_rng(seed)
    return (flow.tensor(rng.integers(0, CONFIG["vocab_size"], (B, T))),
            flow.tensor(rng.integers(0, CONFIG["vocab_size"], (B, T))))


@pytest.fixture(scope="module")
def torch_gpt():
    torch = pytest.importorskip("torch")
    bench = str(Path(__file__).resolve().parent.parent / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import torch_gpt
    torch.manual_seed(0)
    return torch, torch_gpt


def assert_close(ours, theirs, rel, what):
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    scale = max(np.abs(theirs).max(), 1e-12)
    assert np.abs(ours - theirs).max() <= rel * scale, f"{what}: max |difference| {np.abs(ours - theirs).max():.3g} " \
                                                       f"against a largest value of {scale:.3g}"


def test_logits_and_gradients_match_pytorch(torch_gpt):
    torch, torch_gpt = torch_gpt
    model = tiny()
    twin = torch_gpt.twin_of(model)
    x, y = batch()
    logits, loss = model(x, y)
    t_logits, t_loss = twin(torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy()))
    assert_close(logits.numpy(), t_logits.detach().numpy(), 1e-4, "logits")
    assert_close(loss.numpy(), t_loss.detach().numpy(), 1e-5, "loss")
    loss.backward()
    t_loss.backward()
    theirs = dict(twin.named_parameters())
    for name, p in model.named_parameters():
        assert_close(p.grad.numpy(), theirs[name].grad.numpy(), 1e-3, f"gradient of {name}")


def test_five_adamw_steps_with_clipping_give_pytorchs_losses(torch_gpt):
    torch, torch_gpt = torch_gpt
    model = tiny(seed=1)
    twin = torch_gpt.twin_of(model)
    opt = flow.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    t_opt = torch.optim.AdamW(twin.parameters(), lr=3e-3, weight_decay=0.1)
    ours, theirs = [], []
    for step in range(5):
        x, y = batch(seed=step)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        _, t_loss = twin(torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy()))
        t_opt.zero_grad()
        t_loss.backward()
        t_norm = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
        t_opt.step()
        assert_close(norm.numpy(), t_norm.numpy(), 1e-4, f"gradient norm of step {step}")
        ours.append(float(loss.numpy()))
        theirs.append(float(t_loss.detach().numpy()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
    assert ours[-1] < ours[0]


class TrainGPT(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x, y):
        _, loss = self.model(x, y)
        loss.backward()
        return loss


def test_a_graph_of_the_gpt_trains_like_eager_mode_with_per_group_clipping():
    eager_model, graph_model = tiny(seed=2), tiny(seed=2)
    eager_opt = flow.optim.AdamW(eager_model.parameters(), lr=3e-3)
    graph_opt = flow.optim.AdamW([{"params": graph_model.parameters(), "clip_grad_max_norm": 0.5,
                                   "clip_grad_norm_type": 2.0}], lr=3e-3)
    graph = TrainGPT(graph_model, graph_opt)
    for step in range(4):
        x, y = batch(seed=10 + step)
        _, loss = eager_model(x, y)
        eager_opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(eager_model.parameters(), 0.5)
        eager_opt.step()
        np.testing.assert_allclose(graph(x, y).numpy(), loss.numpy(), rtol=1e-5)
    n_embd = CONFIG["n_embd"]
    for (name, p), q in zip(eager_model.named_parameters(), graph_model.parameters()):
        ours, theirs = q.numpy(), p.numpy()
        if name.endswith("c_attn.bias"):
            # The keys' bias adds the same number to every score of a row, which softmax ignores: its gradient is
            # zero up to rounding, and Adam's normalisation turns rounding into steps. Compare queries and values.
            ours, theirs = np.delete(ours, np.s_[n_embd:2 * n_embd]), np.delete(theirs, np.s_[n_embd:2 * n_embd])
        # (Adam divides by the root of the squared gradients: where a gradient is tiny, rounding in it moves a
        # weight by a visible fraction of lr = 3e-3. 2e-5 is under 1% of one step.)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=2e-5, err_msg=name)


def test_an_inference_graph_gives_eager_logits_and_keeps_the_mask_out_of_the_state_dict():
    model = tiny(seed=3).eval()

    class Logits(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    x, _ = batch(seed=3)
    np.testing.assert_allclose(Logits()(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert not [k for k in model.state_dict() if k.endswith("mask")]


def test_generation_with_the_key_value_cache_gives_the_tokens_of_generation_without_it():
    model = tiny(seed=4).eval()
    prompt = flow.tensor([[1, 2, 3]])
    # top_k=1 makes sampling greedy: both ways must pick the same tokens, up to block_size and past it
    # (where the uncached model crops its context and the cache starts again, the tokens may differ: the
    # first 13 new tokens fill the context exactly).
    cached = model.generate(prompt, 13, top_k=1, use_cache=True)
    plain = model.generate(prompt, 13, top_k=1, use_cache=False)
    assert cached.numpy().tolist() == plain.numpy().tolist()
    longer = model.generate(prompt, 40, top_k=5, use_cache=True)
    assert tuple(longer.shape) == (1, 43)


def test_a_context_longer_than_block_size_is_refused_with_the_fix():
    model = tiny()
    with pytest.raises(ValueError, match="crop the context"):
        model(flow.zeros(1, 17, dtype=flow.int64))
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(n_embd=30, n_head=4)


def test_the_corpus_is_the_python_reference_that_ships_with_python():
    corpus = CharCorpus(python_docs())
    assert len(corpus.text) > 300_000 and 60 < corpus.vocab_size < 200
    assert corpus.decode(corpus.encode("def f(x):")) == "def f(x):"
    flow.manual_seed(0)
    x, y = corpus.batch("train", 4, 32)
    assert tuple(x.shape) == (4, 32) and (x.numpy()[:, 1:] == y.numpy()[:, :-1]).all()
    with pytest.raises(ValueError, match="not in the corpus"):
        corpus.encode("\u2603")


def test_the_trained_gpt_exports_to_onnx_and_runs_in_onnx_runtime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = tiny(seed=5).eval()

    class Logits(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    x, _ = batch(seed=5, B=2)
    graph = Logits()
    expected = graph(x).numpy()
    path = flow.onnx.export(graph, tmp_path / "gpt.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
