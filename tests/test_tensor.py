"""The Tensor API: creation, seeding, dtypes, attributes, leaving toynet (numpy/item/tolist), printing,
Python operators and device moves."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import toynet as flow
from toynet.dynamic.autograd import version_of

# -------------------------------------------------------------------------------------------- creation


def test_tensor_from_python_data_infers_dtypes():
    assert flow.tensor([1.0, 2.0]).dtype is flow.float32      # Python floats become float32, as in PyTorch
    assert flow.tensor([1, 2.5]).dtype is flow.float32
    assert flow.tensor([[1, 2], [3, 4]]).dtype is flow.int64
    assert flow.tensor(3).dtype is flow.int64
    assert flow.tensor([True, False]).dtype is flow.bool
    assert flow.tensor([]).dtype is flow.float32 and flow.tensor([[], []]).shape == (2, 0)
    assert flow.tensor(np.arange(3.0)).dtype is flow.float64  # NumPy arrays keep their dtype
    assert flow.tensor(np.arange(3, dtype=np.int32)).dtype is flow.int32
    assert flow.tensor([1, 2], dtype=flow.float64).dtype is flow.float64
    assert flow.tensor([1, 2], dtype="float32").dtype is flow.float32


def test_tensor_copies_and_from_numpy_shares():
    host = np.zeros(3, dtype=np.float32)
    copied, shared = flow.tensor(host), flow.from_numpy(host)
    host[0] = 5.0
    assert copied.numpy()[0] == 0.0
    assert shared.numpy()[0] == 5.0
    original = flow.tensor([1.0, 2.0], requires_grad=True)
    clone = flow.tensor(original)
    clone.copy_(flow.tensor([9.0, 9.0]))
    np.testing.assert_array_equal(original.detach().numpy(), [1.0, 2.0])
    assert not clone.requires_grad
    with pytest.raises(TypeError, match="NumPy array"):
        flow.from_numpy([1.0, 2.0])


def test_filled_creators(device):
    assert flow.zeros(2, 3, device=device).shape == (2, 3)
    assert flow.ones((2, 3), device=device).shape == (2, 3)
    np.testing.assert_array_equal(flow.ones(2, 2, device=device).numpy(), np.ones((2, 2), np.float32))
    assert flow.zeros(4, dtype=flow.int64, device=device).dtype is flow.int64
    full = flow.full((2, 2), 7.5, device=device)
    np.testing.assert_array_equal(full.numpy(), np.full((2, 2), 7.5, np.float32))
    assert full.device == device
    like = flow.tensor([[1, 2]], device=device)
    for made, value in [(flow.zeros_like(like), 0), (flow.ones_like(like), 1), (flow.full_like(like, 4), 4)]:
        assert made.shape == (1, 2) and made.dtype is flow.int64 and made.device == device
        np.testing.assert_array_equal(made.numpy(), np.full((1, 2), value))
    assert flow.zeros_like(like, dtype=flow.float32).dtype is flow.float32
    assert flow.ones(2, requires_grad=True).requires_grad


def test_random_creators(device):
    n = flow.randn(200, 3, device=device)
    u = flow.rand(1000, device=device)
    assert n.shape == (200, 3) and n.dtype is flow.float32 and n.device == device
    assert abs(float(n.numpy().mean())) < 0.2 and 0.8 < float(n.numpy().std()) < 1.2
    assert 0.0 <= u.numpy().min() and u.numpy().max() < 1.0
    assert flow.randn(2, dtype=flow.float64).dtype is flow.float64
    r = flow.randint(3, 7, (50,), device=device)
    assert r.dtype is flow.int64 and 3 <= r.numpy().min() and r.numpy().max() < 7


def test_ranges(device):
    np.testing.assert_array_equal(flow.arange(5, device=device).numpy(), np.arange(5))
    assert flow.arange(5).dtype is flow.int64
    np.testing.assert_allclose(flow.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert flow.arange(0, 1, 0.25).dtype is flow.float32
    np.testing.assert_array_equal(flow.arange(2, 9, 3, dtype=flow.float64).numpy(), [2.0, 5.0, 8.0])
    np.testing.assert_allclose(flow.linspace(-1, 1, 5, device=device).numpy(), [-1, -0.5, 0, 0.5, 1])
    assert flow.linspace(0, 1, 3).dtype is flow.float32


# -------------------------------------------------------------------------------------------- seeding


def _draw():
    return flow.randn(4).tolist() + flow.rand(2).tolist() + flow.randint(0, 100, (3,)).tolist()


def test_manual_seed_reproduces_the_same_numbers():
    flow.manual_seed(123)
    first = _draw()
    flow.manual_seed(123)
    assert _draw() == first
    flow.manual_seed(124)
    assert _draw() != first


def test_manual_seed_gives_the_same_numbers_on_every_device():
    flow.manual_seed(7)
    on_cpu = flow.randn(5).numpy()
    flow.manual_seed(7)
    on_strict = flow.randn(5, device="strict").numpy()
    np.testing.assert_array_equal(on_cpu, on_strict)


def test_manual_seed_gives_the_same_numbers_in_another_process():
    code = ("import toynet as flow; flow.manual_seed(123); "
            "print(repr(flow.randn(4).tolist() + flow.rand(2).tolist() + flow.randint(0, 100, (3,)).tolist()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    flow.manual_seed(123)
    assert eval(out) == _draw()


# --------------------------------------------------------------------------------------------- dtypes


def test_dtype_names():
    assert flow.float is flow.float32 and flow.double is flow.float64 and flow.long is flow.int64
    assert flow.half is flow.float16
    assert repr(flow.float32) == "toynet.float32" and repr(flow.bool) == "toynet.bool"
    assert isinstance(flow.float32, flow.dtype)
    assert flow.float32.is_floating_point and not flow.int64.is_floating_point


def test_dtype_conversions(device):
    t = flow.tensor([1.7, -2.2], device=device)
    assert t.to(flow.float64).dtype is flow.float64
    assert t.double().dtype is flow.float64 and t.double().float().dtype is flow.float32
    np.testing.assert_array_equal(t.long().numpy(), [1, -2])
    assert t.int().dtype is flow.int32
    np.testing.assert_array_equal(t.bool().numpy(), [True, True])
    assert t.type_as(flow.tensor([1])).dtype is flow.int64
    assert t.to("float64").dtype is flow.float64 and t.to(float).dtype is flow.float32
    assert t.to(t) is t                                       # nothing to change: the same tensor


# ------------------------------------------------------------------------------------------ attributes


def test_attributes():
    t = flow.tensor(np.zeros((2, 3, 4), dtype=np.float32))
    assert t.shape == (2, 3, 4) and t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4
    assert t.ndim == 3 and t.dim() == 3 and t.numel() == 24 and len(t) == 2
    assert t.dtype is flow.float32 and t.device == flow.device("cpu") and t.device == "cpu"
    assert not t.requires_grad and t.grad is None and t.is_leaf and t.grad_fn is None
    assert not t.is_lazy
    assert t.T.shape == (4, 3, 2) and t[0].T.shape == (4, 3)
    assert [row.shape for row in t] == [(3, 4), (3, 4)]
    with pytest.raises(TypeError, match="0-d"):
        len(flow.tensor(1.0))


def test_leaving_toynet(device):
    t = flow.tensor([[1.5, 2.0]], device=device)
    host = t.numpy()
    assert isinstance(host, np.ndarray) and host.dtype == np.float32
    np.testing.assert_array_equal(host, [[1.5, 2.0]])
    assert t.tolist() == [[1.5, 2.0]]
    assert flow.tensor([[3.25]], device=device).item() == 3.25
    assert isinstance(flow.tensor(3, device=device).item(), int)
    assert float(flow.tensor(2.5, device=device)) == 2.5 and int(flow.tensor(7, device=device)) == 7
    assert bool(flow.tensor([1.0], device=device)) and not bool(flow.tensor(0.0, device=device))
    with pytest.raises(ValueError, match="one-element"):
        t.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(t)
    np.testing.assert_allclose(np.sin(flow.tensor([0.0, 1.0], device=device)), np.sin([0.0, 1.0]), rtol=1e-6)


def test_numpy_shares_memory_on_the_cpu():
    t = flow.zeros(2)
    t.numpy()[0] = 3.0
    assert t.tolist() == [3.0, 0.0]


def test_an_int_tensor_can_index_a_list():
    assert ["a", "b", "c"][flow.tensor(2)] == "c"
    with pytest.raises(TypeError, match="integer"):
        ["a", "b"][flow.tensor(1.0)]


# ------------------------------------------------------------------------------------------- printing


def test_repr_matches_the_seeds_style():
    t = flow.tensor([[-0.3298, -3.7907, 0.1661]])
    assert repr(t) == "tensor([[-0.3298, -3.7907,  0.1661]], dtype=toynet.float32)"
    assert repr(flow.tensor([1, 2, 3])) == "tensor([1, 2, 3], dtype=toynet.int64)"
    assert repr(flow.tensor(2.5)) == "tensor(2.5000, dtype=toynet.float32)"
    assert repr(flow.tensor([1.0, 2.0])) == "tensor([1., 2.], dtype=toynet.float32)"  # whole numbers, as PyTorch
    assert repr(flow.tensor([True, False])) == "tensor([ True, False], dtype=toynet.bool)"
    assert repr(flow.tensor([1e-8, 1.0])) == "tensor([1.0000e-08, 1.0000e+00], dtype=toynet.float32)"
    assert repr(flow.zeros(0, 3)) == "tensor([], size=(0, 3), dtype=toynet.float32)"
    assert repr(flow.tensor([[1.5, 2.0], [3.0, 4.0]], dtype=flow.float64)) == (
        "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]], dtype=toynet.float64)")


def test_repr_suffixes():
    x = flow.tensor([0.5, 1.5], requires_grad=True)
    assert repr(x) == "tensor([0.5000, 1.5000], dtype=toynet.float32, requires_grad=True)"
    assert repr(x * 2) == "tensor([1., 3.], dtype=toynet.float32, grad_fn=<MulBackward>)"
    assert repr(x.sum()) == "tensor(2., dtype=toynet.float32, grad_fn=<SumBackward>)"
    assert repr(flow.tensor([1.0], device="strict")) == "tensor([1.], device='strict:0', dtype=toynet.float32)"
    with flow.no_grad():
        assert repr(x * 2) == "tensor([1., 3.], dtype=toynet.float32)"


def test_repr_summarises_large_tensors():
    text = repr(flow.arange(5000))
    assert "..." in text and text.startswith("tensor([   0,    1,    2,") and len(text) < 200


def test_format_spec_on_a_one_element_tensor():
    loss = flow.tensor(0.123456789)
    assert f"loss: {loss:>7f}" == "loss: 0.123457"
    assert f"{flow.tensor([[2.5]]):.2f}" == "2.50"
    assert f"{flow.tensor(12):>5d}" == "   12"
    assert f"{flow.tensor([1.0, 2.0])}" == repr(flow.tensor([1.0, 2.0]))  # no spec: the repr
    str(loss)


# ------------------------------------------------------------------------------------------ operators


def test_python_operators_and_their_reflections(device):
    a = flow.tensor([1.0, 2.0, 4.0], device=device)
    b = flow.tensor([2.0, 2.0, 2.0], device=device)
    va, vb = a.numpy(), b.numpy()
    cases = [
        (a + b, va + vb), (a - b, va - vb), (a * b, va * vb), (a / b, va / vb), (a ** b, va ** vb),
        (a + 1, va + 1), (1 + a, 1 + va), (a - 1, va - 1), (1 - a, 1 - va), (a * 3, va * 3), (3 * a, 3 * va),
        (a / 2, va / 2), (2 / a, 2 / va), (a ** 2, va ** 2), (2 ** a, 2 ** va), (-a, -va), (+a, va),
        (abs(-a), va), (a @ b, va @ vb), (a.reshape(1, 3) @ b.reshape(3, 1), np.array([[va @ vb]])),
        (a < b, va < vb), (a <= 2, va <= 2), (a > 1, va > 1), (a >= b, va >= vb), (a == b, va == vb),
        (a != 2, va != 2), ((a > 1) & (b > 1), (va > 1) & (vb > 1)), ((a > 3) | (b > 3), (va > 3) | (vb > 3)),
        (~(a > 1), ~(va > 1)), (np.float64(2.0) * a, 2.0 * va), (a.add(b), va + vb), (a.sub(b), va - vb),
        (a.mul(b), va * vb), (a.div(b), va / vb), (a.pow(2), va ** 2), (a.neg(), -va),
    ]
    for got, want in cases:
        assert isinstance(got, flow.Tensor)
        assert got.device == device
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert (a * 2).dtype is flow.float32 and (np.float64(2.0) * a).dtype is flow.float32


def test_in_place_methods_write_without_recording(device):
    t = flow.zeros(3, device=device)
    t.add_(flow.ones(3, device=device))
    t.mul_(3.0)
    t.sub_(1.0)
    t.add_(flow.ones(3, device=device), alpha=2.0)
    np.testing.assert_array_equal(t.numpy(), [4.0, 4.0, 4.0])
    t.fill_(2.0)
    t.copy_(np.array([1.0, 2.0, 3.0]))  # host data is copied to the tensor's device
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0])
    t.zero_()
    assert t.tolist() == [0.0, 0.0, 0.0] and t.grad_fn is None
    t.fill_(6.0)
    t.div_(flow.tensor([2.0, 3.0, 4.0], device=device))
    t.sub_(1.0, alpha=0.5)
    np.testing.assert_array_equal(t.numpy(), [2.5, 1.5, 1.0])


def test_every_write_is_counted_on_the_memory_views_share():
    t = flow.zeros(2, 3)
    view, detached, alias = t[0], t.detach(), flow.Tensor(t)
    assert version_of(t).n == 0
    t.add_(1.0)
    view.mul_(2.0)                      # through a view of a row
    detached[1] = 5.0                   # through detach()
    alias.fill_(0.0)                    # through Tensor(t), which shares t's memory
    t.T.zero_()                         # through a view made of a view
    t.data = flow.ones(2, 3)            # new memory behind t: what backward saved of t is gone
    assert version_of(t).n == 6
    for other in (view, detached, alias):
        assert version_of(other) is version_of(t)
    copy = flow.tensor(t)               # toynet.tensor copies: its own memory, its own count
    copy.add_(1.0)
    assert version_of(copy).n == 1 and version_of(t).n == 6


# -------------------------------------------------------------------------------------------- devices


def test_moving_between_devices(device):
    t = flow.tensor([1.0, 2.0], requires_grad=True)
    moved = t.to(device)
    assert moved.device == device
    (moved * moved).sum().backward()                  # the gradient comes back to the CPU leaf
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 4.0])
    assert t.grad.device == flow.device("cpu")
    assert moved.cpu().device == flow.device("cpu")
    assert t.to(device, flow.float64).dtype is flow.float64
    assert t.to(dtype=flow.float64, device=device).device == device


def test_cuda_without_cupy_says_what_to_install():
    if flow.cuda.is_available():
        pytest.skip("a GPU is available here")
    with pytest.raises(RuntimeError, match="CuPy"):
        flow.tensor([1.0]).cuda()
    with pytest.raises(RuntimeError, match="CuPy"):
        flow.tensor([1.0]).to("cuda")
    with pytest.raises(RuntimeError, match="CuPy"):
        flow.zeros(2, device="cuda")


def test_unknown_devices_and_arguments():
    with pytest.raises(ValueError, match="known device types"):
        flow.tensor([1.0], device="tpu")
    with pytest.raises(ValueError, match="index"):
        flow.device("cuda:x")
    with pytest.raises(TypeError, match="unexpected"):
        flow.tensor([1.0]).to(device="cpu", non_blocking=True)
    assert str(flow.device("cuda:1")) == "cuda:1" and flow.device("cuda", 1) == flow.device("cuda:1")
    assert repr(flow.device("cpu")) == "device(type='cpu', index=0)"


def test_a_device_prints_as_oneflow_prints_it():
    x = flow.ones(2)
    assert str(x.device) == "cpu:0" and repr(x.device) == "device(type='cpu', index=0)"
    assert x.device == "cpu" and x.device == "cpu:0"  # either spelling names the same device
