"""``nn.Module`` itself: registration, traversal, state dicts, modes, dtype moves, printing, containers,
and the Linear/Flatten layers, compared with PyTorch's behaviour where it is importable."""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import toynet as flow
from toynet import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.scale = nn.Parameter(flow.ones(4))
        self.register_buffer("steps", flow.zeros(1, dtype=flow.int64))
        self.register_buffer("scratch", flow.zeros(2), persistent=False)

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Sequential(nn.Linear(4, 2), nn.Tanh())
        self.register_buffer("mean", flow.zeros(2))

    def forward(self, x):
        return self.head(self.block(x)) - self.mean


# ======================================================================================= registration


def test_attributes_register_parameters_buffers_and_submodules():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "block.scale", "block.fc.weight", "block.fc.bias", "head.0.weight", "head.0.bias"]
    assert [n for n, _ in net.named_buffers()] == ["mean", "block.steps", "block.scratch"]
    assert [n for n, _ in net.named_children()] == ["block", "head"]
    assert [n for n, _ in net.named_modules()] == ["", "block", "block.fc", "block.act", "head", "head.0", "head.1"]
    assert list(net.children()) == [net.block, net.head]
    assert list(net.parameters(recurse=False)) == []
    assert [p.shape for p in net.block.parameters(recurse=False)] == [(4,)]
    assert all(p.requires_grad for p in net.parameters())
    assert not any(b.requires_grad for b in net.buffers())
    assert net.block.fc is net._modules["block"]._modules["fc"]
    assert "fc" in dir(net.block) and "steps" in dir(net.block)


def test_reassigning_and_deleting_keeps_registries_consistent():
    block = Block()
    block.fc = nn.Linear(3, 5)                   # replace a submodule
    assert block.fc.out_features == 5 and [n for n, _ in block.named_children()] == ["fc", "act"]
    block.scale = nn.Parameter(flow.zeros(5))     # replace a parameter
    assert block.scale.shape == (5,)
    block.steps = flow.ones(1, dtype=flow.int64)  # a tensor assigned to a buffer name stays a buffer
    assert "steps" in dict(block.named_buffers()) and block.steps.item() == 1
    block.scale = None                            # a parameter set to None stays a (missing) parameter
    assert "scale" in block._parameters and block.scale is None and "scale" not in block._buffers
    assert "scale" not in dict(block.named_parameters())
    block.act = None
    assert "act" in block._modules and block.act is None
    del block.fc
    assert "fc" not in block._modules
    with pytest.raises(AttributeError, match="no attribute 'fc'"):
        _ = block.fc


def test_assigning_the_wrong_kind_of_value_is_an_error():
    block = Block()
    with pytest.raises(TypeError, match="cannot assign Tensor as parameter 'scale'"):
        block.scale = flow.ones(4)
    with pytest.raises(TypeError, match="cannot assign int as child module 'fc'"):
        block.fc = 3
    with pytest.raises(TypeError, match="cannot assign str as buffer 'steps'"):
        block.steps = "three"
    assert isinstance(block.scale, nn.Parameter) and isinstance(block.fc, nn.Linear)  # nothing changed
    with pytest.raises(KeyError, match='contain ".", got: a.b'):
        block.register_buffer("a.b", flow.zeros(1))
    with pytest.raises(KeyError, match="already exists"):
        block.register_buffer("forward", flow.zeros(1))
    with pytest.raises(KeyError, match="already exists"):
        block.add_module("training", nn.ReLU())
    with pytest.raises(TypeError, match="expected an nn.Parameter"):
        block.register_parameter("w", flow.ones(2))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        block.add_module("m", flow.ones(2))


def test_assigning_before_super_init_is_a_clear_error():
    class Early(nn.Module):
        def __init__(self, what):
            self.layer = what
            super().__init__()

    with pytest.raises(AttributeError, match=r"before Early.__init__\(\) has called super\(\).__init__\(\)"):
        Early(nn.Linear(2, 2))
    with pytest.raises(AttributeError, match="super"):
        Early(nn.Parameter(flow.ones(2)))

    class EarlyBuffer(nn.Module):
        def __init__(self):
            self.register_buffer("b", flow.ones(1))

    with pytest.raises(AttributeError, match="super"):
        EarlyBuffer()


def test_shared_parameters_and_modules_are_listed_once():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(model.modules())) == 3  # Sequential, Linear (once), ReLU
    tied = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    tied[1].weight = tied[0].weight
    assert [n for n, _ in tied.named_parameters()] == ["0.weight", "0.bias", "1.bias"]
    assert list(tied.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]  # as PyTorch: every name


# ======================================================================================== state dicts


def test_state_dict_holds_parameters_and_persistent_buffers_detached():
    net = Net()
    state = net.state_dict()
    # Own parameters, own persistent buffers, then each child's, depth first (as PyTorch).
    assert list(state) == ["mean", "block.scale", "block.steps", "block.fc.weight", "block.fc.bias",
                           "head.0.weight", "head.0.bias"]
    assert "block.scratch" not in state
    for key, value in state.items():
        original = _lookup(net, key)
        # A parameter's entry keeps requires_grad (as OneFlow prints it) but is a new leaf, not the parameter.
        assert value.requires_grad == original.requires_grad and value.grad_fn is None
        assert value is not original and type(value) is flow.Tensor
        np.testing.assert_array_equal(value.numpy(), original.numpy())


def _lookup(module, dotted):
    *path, name = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    return getattr(module, name)


def test_state_dict_order_matches_torch():
    torch = pytest.importorskip("torch")

    class TorchBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)
            self.act = torch.nn.ReLU()
            self.scale = torch.nn.Parameter(torch.ones(4))
            self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))
            self.register_buffer("scratch", torch.zeros(2), persistent=False)

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = TorchBlock()
            self.head = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Tanh())
            self.register_buffer("mean", torch.zeros(2))

    assert list(Net().state_dict()) == list(TorchNet().state_dict())
    assert [n for n, _ in Net().named_parameters()] == [n for n, _ in TorchNet().named_parameters()]
    assert [n for n, _ in Net().named_buffers()] == [n for n, _ in TorchNet().named_buffers()]


def test_load_state_dict_round_trip_copies_in_place():
    source, target = Net(), Net()
    source.mean.fill_(3.0)
    params_before = list(target.parameters())
    arrays_before = [p.array for p in params_before]
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    for key, value in source.state_dict().items():
        np.testing.assert_array_equal(_lookup(target, key).numpy(), value.numpy())
    # The same Parameter objects (and arrays) are kept, so an optimizer built before loading still works.
    assert all(a is b for a, b in zip(params_before, target.parameters()))
    assert all(p.array is a for p, a in zip(target.parameters(), arrays_before))
    source.block.fc.weight.array[...] = 7  # no aliasing between the two models after loading
    assert not np.any(target.block.fc.weight.numpy() == 7)


def test_load_state_dict_accepts_numpy_arrays_and_casts():
    layer = nn.Linear(2, 1)
    layer.load_state_dict({"weight": np.array([[1.0, 2.0]]), "bias": np.array([0.5])})
    assert layer.weight.dtype is flow.float32
    np.testing.assert_array_equal(layer.weight.numpy(), [[1.0, 2.0]])


def test_failed_load_names_the_problems_and_changes_nothing():
    net = Net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    good = {k: flow.full(v.shape, 5.0).to(v.dtype) for k, v in net.state_dict().items()}

    missing = dict(good)
    del missing["head.0.bias"]
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: 'head.0.bias'"):
        net.load_state_dict(missing)
    unexpected = dict(good, **{"head.1.weight": flow.ones(2)})
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\) in state_dict: 'head.1.weight'"):
        net.load_state_dict(unexpected)
    wrong_shape = dict(good, **{"block.fc.weight": flow.ones(3, 4)})
    with pytest.raises(RuntimeError, match=r"size mismatch for 'block.fc.weight': the checkpoint has shape "
                                           r"\(3, 4\), this model has \(4, 3\)"):
        net.load_state_dict(wrong_shape)
    with pytest.raises(RuntimeError, match="size mismatch"):
        net.load_state_dict(wrong_shape, strict=False)  # shapes are checked even when not strict
    with pytest.raises(TypeError, match="expects a dict"):
        net.load_state_dict([("mean", flow.zeros(2))])
    for key, value in net.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[key], err_msg=f"{key} changed by a failed load")

    result = net.load_state_dict(dict(missing, extra=flow.ones(1)), strict=False)
    assert result.missing_keys == ["head.0.bias"] and result.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(net.head[0].weight.numpy(), np.full((2, 4), 5.0))
    np.testing.assert_array_equal(net.head[0].bias.numpy(), before["head.0.bias"])


def test_load_checks_values_against_each_dtype_before_copying(device):
    net = Net().to(device)
    good = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    cases = [
        ({"block.steps": np.array([2.5])}, r"'block.steps' holds fractional or non-finite float64 values"),
        ({"block.steps": np.array([2 ** 70], dtype=np.float64)}, r"beyond toynet.int64's range"),
        ({"mean": np.array(["a", "b"])}, r"'mean' holds strings \(<U1\)"),
        ({"mean": np.array([1 + 2j, 0])}, r"'mean' holds complex numbers"),
        ({"mean": np.array([None, None])}, r"'mean' holds Python objects"),
        ({"mean": [[1.0], [2.0, 3.0]]}, r"'mean' holds a list that is not an array of numbers"),
        ({"mean": np.array([1e39, 0.0])}, r"'mean' holds values as large as 1e\+39, beyond toynet.float32's range"),
        ({"mean": "fast"}, r"'mean' holds a str, not a tensor"),
    ]
    for change, message in cases:
        with pytest.raises(RuntimeError, match=message):
            net.load_state_dict({**good, **{k: v + 1 if k != "block.steps" else v for k, v in good.items()},
                                 **change})
        for key, value in net.state_dict().items():
            np.testing.assert_array_equal(value.numpy(), before[key], err_msg=f"{key} changed by a failed load")
    # What fits is cast: whole floats into the int64 buffer, ints and float64 into float32, on the device.
    net.load_state_dict({**good, "block.steps": np.array([7.0]), "mean": np.array([1, 2], dtype=np.int16),
                         "block.scale": np.full(4, 0.1)})
    assert net.block.steps.dtype is flow.int64 and net.block.steps.numpy().tolist() == [7]
    assert net.mean.device == device and net.mean.numpy().tolist() == [1.0, 2.0]
    np.testing.assert_array_equal(net.block.scale.numpy(), np.full(4, 0.1, np.float32))


# ================================================================================== modes and dtypes


def test_train_and_eval_reach_every_submodule():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.block.train()
    assert net.block.fc.training and not net.head.training and not net.training
    assert net.train() is net and all(m.training for m in net.modules())
    with pytest.raises(ValueError, match="boolean"):
        net.train("no")


def test_to_dtype_converts_floating_state_in_place():
    net = Net()
    weight = net.block.fc.weight
    net(flow.randn(2, 3)).sum().backward()
    assert net.to(flow.float64) is net
    assert net.block.fc.weight is weight  # same Parameter object: optimizers keep working
    assert all(p.dtype is flow.float64 for p in net.parameters())
    assert all(p.grad.dtype is flow.float64 for p in net.parameters())
    assert net.mean.dtype is flow.float64 and net.block.scratch.dtype is flow.float64
    assert net.block.steps.dtype is flow.int64  # integer buffers keep their dtype
    assert net(flow.randn(2, 3, dtype=flow.float64)).dtype is flow.float64
    net.float()
    assert all(p.dtype is flow.float32 for p in net.parameters())
    assert net.double().block.fc.bias.dtype is flow.float64


def test_zero_grad_and_requires_grad():
    net = Net()
    net(flow.randn(2, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not np.any(p.grad.numpy()) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_apply_visits_children_first():
    seen = []
    Net().apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Block", "Linear", "Tanh", "Sequential", "Net"]


# ============================================================================================ printing


def test_nested_repr_matches_torch():
    torch = pytest.importorskip("torch")

    def build(L):
        return L.nn.Sequential(
            L.nn.Linear(3, 4), L.nn.ReLU(),
            L.nn.Sequential(L.nn.Linear(4, 1, bias=False), L.nn.Sigmoid()),
            L.nn.Flatten(), L.nn.Dropout(0.2), L.nn.ModuleList([L.nn.Tanh()]),
            L.nn.ModuleDict({"act": L.nn.ReLU6(inplace=True)}), L.nn.Softmax(dim=1), L.nn.Identity())

    assert repr(build(flow)) == repr(build(torch))
    assert repr(nn.CrossEntropyLoss()) == repr(torch.nn.CrossEntropyLoss())
    assert repr(nn.MSELoss()) == repr(torch.nn.MSELoss())


def test_repr_of_a_custom_module_with_extra_repr_and_children():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def extra_repr(self):
            return "factor=2"

    assert repr(Scaled()) == "Scaled(\n  factor=2\n  (inner): Linear(in_features=2, out_features=2, bias=True)\n)"
    assert repr(Block()) == ("Block(\n  (fc): Linear(in_features=3, out_features=4, bias=True)\n"
                             "  (act): ReLU()\n)")


# ========================================================================================== containers


def test_sequential_indexing_slicing_and_editing():
    layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)]
    model = nn.Sequential(*layers)
    assert model[0] is layers[0] and model[-1] is layers[2] and len(model) == 3
    assert list(model) == layers
    tail = model[1:]
    assert isinstance(tail, nn.Sequential) and list(tail) == layers[1:]
    assert [n for n, _ in tail.named_children()] == ["1", "2"]  # names kept, as in PyTorch
    with pytest.raises(IndexError, match="out of range"):
        model[3]
    model[1] = nn.Tanh()
    assert isinstance(model[1], nn.Tanh)
    model.append(nn.Sigmoid())
    assert len(model) == 4 and isinstance(model[3], nn.Sigmoid)
    x = flow.randn(5, 2)
    expected = model[3](model[2](model[1](model[0](x))))
    np.testing.assert_allclose(model(x).numpy(), expected.numpy())
    del model[1]
    assert len(model) == 3 and [type(m).__name__ for m in model] == ["Linear", "Linear", "Sigmoid"]
    named = nn.Sequential(OrderedDict([("encode", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert named.encode is named[0] and list(named.state_dict()) == ["encode.weight", "encode.bias"]
    assert nn.Sequential()(x) is x


def test_module_list_and_module_dict_register_their_modules():
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(blocks) == 3 and len(list(blocks.parameters())) == 6
    assert blocks[-1] is list(blocks)[2]
    assert isinstance(blocks[:2], nn.ModuleList) and len(blocks[:2]) == 2
    blocks.append(nn.ReLU()).extend([nn.Tanh()])
    assert [type(m).__name__ for m in blocks][-2:] == ["ReLU", "Tanh"]
    blocks[0] = nn.Identity()
    assert isinstance(blocks[0], nn.Identity) and len(list(blocks.parameters())) == 4
    with pytest.raises(IndexError):
        blocks[10]
    with pytest.raises(TypeError):
        blocks.append(3)

    heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 3)})
    heads["c"] = nn.ReLU()
    assert list(heads) == ["a", "b", "c"] and list(heads.keys()) == ["a", "b", "c"]
    assert "a" in heads and "z" not in heads and len(heads) == 3
    assert heads["b"].out_features == 3
    assert [n for n, _ in heads.named_parameters()] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert dict(heads.items())["c"] is heads["c"] and next(iter(heads.values())) is heads["a"]
    pairs = nn.ModuleDict([("x", nn.ReLU()), ("y", nn.Tanh())])
    assert list(pairs) == ["x", "y"]


# ====================================================================================== Linear, Flatten


def test_linear_computes_x_wT_plus_b_and_its_gradients(device):
    layer = nn.Linear(3, 2).to(device)
    x = flow.randn(4, 3, device=device, requires_grad=True)
    y = layer(x)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(y.numpy(), x.numpy() @ w.T + b, rtol=1e-6, atol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(layer.bias.grad.numpy(), [4.0, 4.0])
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.tile(x.numpy().sum(0), (2, 1)), rtol=1e-6)
    assert nn.Linear(3, 2)(flow.randn(5, 6, 3)).shape == (5, 6, 2)
    assert nn.Linear(3, 2)(flow.randn(3)).shape == (2,)
    bare = nn.Linear(3, 2, bias=False)
    assert bare.bias is None and [n for n, _ in bare.named_parameters()] == ["weight"]
    assert repr(bare) == "Linear(in_features=3, out_features=2, bias=False)"
    with pytest.raises(ValueError, match="in_features = 3"):
        nn.Linear(3, 2)(flow.randn(4, 5))


def test_linear_default_init_follows_pytorch_bounds():
    flow.manual_seed(0)
    layer = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.dtype == np.float32 and w.shape == (300, 400)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.98 * bound  # uniform over the whole interval, not a narrower one
    np.testing.assert_allclose(w.std(), bound / math.sqrt(3), rtol=0.02)
    np.testing.assert_allclose(w.mean(), 0, atol=bound / 100)
    flow.manual_seed(0)
    np.testing.assert_array_equal(nn.Linear(400, 300).weight.numpy(), w)  # reproducible
    assert nn.Linear(2, 2, dtype=flow.float64).weight.dtype is flow.float64


def test_flatten():
    x = flow.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, -1)(x).shape == (120,)
    assert nn.Flatten(1, 2)(x).shape == (2, 12, 5)
    np.testing.assert_array_equal(nn.Flatten()(x).numpy(), x.numpy().reshape(2, 60))
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
