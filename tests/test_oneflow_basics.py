"""What a learner meets first in OneFlow's basics tutorials (quickstart, tensors, data, networks, autograd,
optimisers, saving), written here in our own code: each test exercises one feature the pages rely on and
checks what toynet prints or computes. The pages themselves are run by an independent runner outside the
repository; these tests keep the features from regressing."""

from __future__ import annotations

import math
import re
from collections import OrderedDict

import numpy as np
import pytest

import toynet as flow
import toynet.nn as nn
from toynet.vision import datasets, transforms
from toynet.vision.mnist_fake import make_mnist

# ------------------------------------------------------------------------------------------- data


def test_a_fashion_mnist_loader_gives_batches_shaped_as_the_pages_print(tmp_path):
    make_mnist(tmp_path, "FashionMNIST", n_train=40, n_test=8)
    train = datasets.FashionMNIST(root=tmp_path, train=True, transform=transforms.ToTensor(), download=True,
                                  source_url="https://example.org/somewhere/")
    loader = flow.utils.data.DataLoader(train, 16, shuffle=True)
    images, labels = next(iter(loader))
    assert f"{images.shape}" == "toynet.Size([16, 1, 28, 28])" and str(labels.shape) == "toynet.Size([16])"
    assert repr(labels[0]) == f"tensor({labels[0].item()}, dtype=toynet.int64)"
    assert images.squeeze(1)[0].numpy().shape == (28, 28) and 0.0 <= images.numpy().min() <= 1.0


def test_a_small_classifier_learns_the_stand_in_fashion_mnist(tmp_path):
    """The quickstart's loop (forward, loss, zero_grad, backward, step; then an evaluation under no_grad)."""
    flow.manual_seed(0)
    make_mnist(tmp_path, "FashionMNIST", n_train=512, n_test=64, seed=5)
    train = flow.utils.data.DataLoader(datasets.FashionMNIST(tmp_path, transform=transforms.ToTensor()), 32,
                                       shuffle=True)
    test = flow.utils.data.DataLoader(datasets.FashionMNIST(tmp_path, train=False,
                                                            transform=transforms.ToTensor()), 32)
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 10))
    loss_fn, optimizer = nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=0.1)

    def accuracy():
        correct, total_loss = 0.0, 0
        with flow.no_grad():
            for x, y in test:
                pred = model(x)
                total_loss += loss_fn(pred, y)
                correct += float((pred.argmax(1).to(dtype=flow.int64) == y).sum().numpy())
        total_loss /= len(test)
        return correct / len(test.dataset), total_loss

    before, _ = accuracy()
    for _ in range(6):
        for x, y in train:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    after, test_loss = accuracy()
    assert after > max(0.6, before + 0.3), (before, after)
    assert re.fullmatch(r" *\d+\.\d{6}", f"{test_loss:>8f}") and re.fullmatch(r"\d\.\d{6}", f"{loss:>7f}")


# ----------------------------------------------------------------------------------------- tensors


def test_tensor_class_and_function_print_their_dtypes():
    assert repr(flow.Tensor([1, 2, 3])) == "tensor([1., 2., 3.], dtype=toynet.float32)"
    assert repr(flow.tensor([1, 2, 3])) == "tensor([1, 2, 3], dtype=toynet.int64)"
    assert repr(flow.tensor(np.ones((1, 2)))) == "tensor([[1., 1.]], dtype=toynet.float64)"
    assert str(flow.Tensor(2, 3).shape) == "toynet.Size([2, 3])"
    assert repr(flow.eye(2)) == "tensor([[1., 0.],\n        [0., 1.]], dtype=toynet.float32)"
    x = flow.randn(1, 4)
    assert str(x.reshape(2, 2).shape) == "toynet.Size([2, 2])" and repr(x.dtype) == "toynet.float32"
    assert repr(x.device) == "device(type='cpu', index=0)"
    assert repr(x.to(dtype=flow.int32).dtype) == "toynet.int32"


def test_slices_and_writes_into_a_column():
    t = flow.ones(3, 3)
    t[:, 1] = 0
    assert repr(t[..., -1]) == "tensor([1., 1., 1.], dtype=toynet.float32)"
    assert t.numpy().tolist() == [[1, 0, 1]] * 3


# ---------------------------------------------------------------------------------------- autograd


def test_retain_grad_keeps_the_gradient_of_an_intermediate_result():
    a = flow.tensor(math.pi / 2, requires_grad=True)
    s = flow.sin(a)
    s.retain_grad()
    flow.pow(s, 2).backward()
    assert repr(s.grad) == "tensor(2., dtype=toynet.float32)"   # d(s^2)/ds = 2 sin(pi/2)
    assert a.grad.item() == pytest.approx(2 * math.cos(np.float32(math.pi / 2)), abs=1e-12)
    assert s.grad_fn is not None and s.grad is not s.grad_fn  # still an ordinary non-leaf


def test_retain_grad_sums_every_consumer_and_every_backward():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    total = (h * h).sum() + h.sum()                      # two consumers: 2h + 1
    total.backward(retain_graph=True)
    np.testing.assert_allclose(h.grad.numpy(), [7.0, 13.0])
    total.backward()                                     # accumulates, as a leaf's .grad does
    np.testing.assert_allclose(h.grad.numpy(), [14.0, 26.0])
    h.grad.zeros_()
    assert h.grad.numpy().tolist() == [0.0, 0.0] and x.grad.numpy().tolist() == [42.0, 78.0]


def test_retain_grad_on_the_root_and_on_a_leaf():
    x = flow.tensor([2.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    y.backward(flow.ones_like(y) * 3)
    assert y.grad.tolist() == [3.0] and x.grad.tolist() == [12.0]
    x.retain_grad()                                      # a leaf keeps its gradient anyway: no change
    assert x.grad_fn is None


def test_grad_zeros_clears_accumulated_gradient():
    n1 = flow.tensor(10.0, requires_grad=True)
    n2 = flow.pow(n1, 2)
    n2.backward(retain_graph=True)
    n2.backward(retain_graph=True)
    assert n1.grad.item() == 40.0
    n1.grad.zeros_()
    n2.backward()
    assert n1.grad.item() == 20.0


# ------------------------------------------------------------------------ printing parameters, saving


def test_a_parameter_prints_as_a_tensor_with_accumulate_grad():
    w = nn.Parameter(flow.tensor([[2.0], [3.0]]))
    assert repr(w) == "tensor([[2.],\n        [3.]], dtype=toynet.float32, grad_fn=<accumulate_grad>)"
    frozen = nn.Parameter(flow.tensor([1.0]), requires_grad=False)
    assert repr(frozen) == "tensor([1.], dtype=toynet.float32)"
    assert repr(w * 2).endswith("grad_fn=<MulBackward>)")  # results of ops name their own record


def test_state_dict_entries_print_requires_grad_and_survive_save_and_load(tmp_path):
    m = nn.Linear(2, 3)
    m.load_state_dict({"weight": flow.ones(3, 2), "bias": flow.zeros(3)})
    state = m.state_dict()
    assert isinstance(state, OrderedDict)
    expected = ("OrderedDict([('weight', tensor([[1., 1.],\n        [1., 1.],\n        [1., 1.]], "
                "dtype=toynet.float32, requires_grad=True)), ('bias', tensor([0., 0., 0.], dtype=toynet.float32, "
                "requires_grad=True))])")
    assert str(state) == expected
    flow.save(state, str(tmp_path / "model"))
    m2 = nn.Linear(2, 3)
    m2.load_state_dict(flow.load(str(tmp_path / "model")))
    assert str(m2.state_dict()) == expected
    state["weight"].detach().fill_(5.0)                  # entries share the parameters' memory
    assert m.weight.numpy().min() == 5.0


def test_f_string_formats_of_one_element_tensors():
    loss = flow.tensor(2.152148)
    assert f"loss: {loss:>7f}" == "loss: 2.152148" and f"{flow.tensor(1.5):>8f}" == "1.500000"


def test_the_fashion_mnist_example_runs_on_its_stand_in(tmp_path, capsys):
    """examples/fashion_mnist.py (run by the main job) writes a stand-in where the real data is absent."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "examples" / "fashion_mnist.py"
    spec = importlib.util.spec_from_file_location("fashion_mnist_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    accuracy = example.main(["--root", str(tmp_path), "--epochs", "2", "--fake-size", "320", "--lr", "0.1"])
    printed = capsys.readouterr().out
    assert "one batch: toynet.Size([64, 1, 28, 28]) toynet.Size([64])" in printed
    assert (tmp_path / "fake-fashionmnist" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").is_file()
    assert printed.count("epoch ") == 2 and 0.0 <= accuracy <= 1.0
