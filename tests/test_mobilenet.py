"""MobileNetV2 (toynet.vision.models) and the nn.Graph tutorial run on it, in Eager and Graph mode.

Checked: the structure and names torchvision/flowvision use (parameter count 3,504,872), forward
shapes, the tutorial's typo (``model.classifer``: the 1000-class head stays, the first loss is near
ln 1000), the same losses, weights and BatchNorm statistics from Eager and Graph training, ``print(graph)``
against the lines the tutorial shows, the inference graph and eval mode, PyTorch's numbers for the
same weights, and both example programs run small.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import toynet as flow
import toynet.vision as flowvision
from toynet import nn
from toynet.vision import transforms
from toynet.vision.fake_cifar import make_cifar10
from toynet.vision.models import ConvBNActivation, InvertedResidual, MobileNetV2, mobilenet_v2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# torchvision.models.mobilenet_v2() has 3,504,872 parameters; with 10 classes the head shrinks from
# (1280 + 1) * 1000 to (1280 + 1) * 10.
PARAMS_1000 = 3_504_872
PARAMS_10 = PARAMS_1000 - (1280 + 1) * (1000 - 10)


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def tutorial_model() -> MobileNetV2:
    """The tutorial's model, typo included: ``classifer`` is a new, unused head."""
    model = flowvision.models.mobilenet_v2()
    model.classifer = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
    model.train()
    return model


class GraphMobileNetV2(flow.nn.Graph):
    """The tutorial's training graph (its model, loss and optimizer passed in rather than global)."""

    def __init__(self, model, loss_fn, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        y_pred = self.model(x)
        loss = self.loss_fn(y_pred, y)
        loss.backward()
        return loss


class GraphMobileNetV2Inference(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    make_cifar10(root, n_train=64, n_test=8)
    return str(root)


@pytest.fixture(scope="module")
def batches(cifar_root):
    """The first batches of 8 of the stand-in CIFAR-10, read as the tutorial reads them."""
    data = flowvision.datasets.CIFAR10(root=cifar_root, train=True, transform=transforms.ToTensor())
    loader = flow.utils.data.DataLoader(data, 8, shuffle=False)
    return [(x, y) for x, y in loader][:3]


# ------------------------------------------------------------------------------------------ structure


def test_parameter_count_is_torchvisions():
    assert count(mobilenet_v2()) == PARAMS_1000
    assert count(mobilenet_v2(num_classes=10)) == PARAMS_10


def test_names_and_shapes_match_torchvision_if_installed():
    torchvision = pytest.importorskip("torchvision")
    for classes in (1000, 10):
        theirs = {k: tuple(v.shape) for k, v in torchvision.models.mobilenet_v2(num_classes=classes).state_dict().items()}
        ours = {k: tuple(v.shape) for k, v in mobilenet_v2(num_classes=classes).state_dict().items()}
        assert ours == theirs


def test_structure_and_names():
    model = mobilenet_v2()
    names = dict(model.named_modules())
    # The lines print(graph) shows in the tutorial come from these names and reprs.
    assert type(names["features.0"]) is ConvBNActivation and isinstance(names["features.0"], nn.Sequential)
    assert repr(names["features.0.0"]) == \
        "Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)"
    assert repr(names["features.0.1"]) == "BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)"
    assert repr(names["features.0.2"]) == "ReLU6(inplace=True)"
    assert repr(names["classifier"]) == ("Sequential(\n  (0): Dropout(p=0.2, inplace=False)\n"
                                         "  (1): Linear(in_features=1280, out_features=1000, bias=True)\n)")
    assert model.last_channel == 1280
    assert list(model._modules) == ["features", "adaptive_avg_pool2d", "classifier"]
    assert len(model.features) == 19
    blocks = [m for m in model.features if isinstance(m, InvertedResidual)]
    assert len(blocks) == 17
    # Residual connections exactly where a block keeps resolution and width (stride 1, in == out).
    assert [i for i, m in enumerate(model.features) if getattr(m, "use_res_connect", False)] == \
        [3, 5, 6, 8, 9, 10, 12, 13, 15, 16]
    # Block 1 (expand ratio 1) has no expansion: depthwise, projection, BatchNorm.
    assert repr(names["features.1.conv.0.0"]) == \
        "Conv2d(32, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=32, bias=False)"
    assert repr(names["features.1.conv.1"]) == "Conv2d(32, 16, kernel_size=(1, 1), stride=(1, 1), bias=False)"
    assert type(names["features.1.conv.2"]) is nn.BatchNorm2d
    # Block 2 (t = 6): 1x1 expansion 16 -> 96, depthwise with stride 2, linear projection to 24.
    assert repr(names["features.2.conv.0.0"]) == "Conv2d(16, 96, kernel_size=(1, 1), stride=(1, 1), bias=False)"
    assert repr(names["features.2.conv.1.0"]) == \
        "Conv2d(96, 96, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=96, bias=False)"
    assert repr(names["features.2.conv.2"]) == "Conv2d(96, 24, kernel_size=(1, 1), stride=(1, 1), bias=False)"
    assert repr(names["features.18.0"]) == "Conv2d(320, 1280, kernel_size=(1, 1), stride=(1, 1), bias=False)"
    kinds = [type(m).__name__ for m in model.modules()]
    assert (kinds.count("Conv2d"), kinds.count("BatchNorm2d"), kinds.count("ReLU6")) == (52, 52, 35)


def test_initialisation_is_torchvisions():
    model = mobilenet_v2()
    w = model.features[18][0].weight.numpy()  # kaiming normal, fan_out = 1280 * 1 * 1
    assert abs(w.std() - math.sqrt(2 / 1280)) < 0.05 * math.sqrt(2 / 1280)
    bn = model.features[5].conv[1][1]
    assert (bn.weight.numpy() == 1).all() and (bn.bias.numpy() == 0).all()
    fc = model.classifier[1]
    assert abs(fc.weight.numpy().std() - 0.01) < 0.0005 and (fc.bias.numpy() == 0).all()


def test_options_and_errors():
    with pytest.raises(RuntimeError, match="never downloads"):
        mobilenet_v2(pretrained=True)
    with pytest.raises(ValueError, match=r"\[t, c, n, s\]"):
        mobilenet_v2(inverted_residual_setting=[[1, 16, 1]])
    half = mobilenet_v2(width_mult=0.5, num_classes=10)
    assert half.features[0][0].out_channels == 16 and half.last_channel == 1280
    small = mobilenet_v2(num_classes=3, inverted_residual_setting=[[1, 16, 1, 1], [6, 24, 2, 2]])
    assert len(small.features) == 5
    assert small(flow.randn(2, 3, 16, 16)).shape == (2, 3)


# ------------------------------------------------------------------------------------------ forward


def test_forward_shape_and_eval_mode():
    model = mobilenet_v2(num_classes=10)
    x = flow.randn(3, 3, 32, 32)
    assert model(x).shape == (3, 10)
    assert model(flow.randn(1, 3, 64, 48)).shape == (1, 10)  # any size: adaptive pooling to 1x1
    model.eval()
    with flow.no_grad():
        a, b = model(x).numpy(), model(x).numpy()
        alone = model(x[1:2]).numpy()
    np.testing.assert_array_equal(a, b)  # no dropout in eval mode
    np.testing.assert_allclose(alone[0], a[1], rtol=1e-4, atol=1e-6)  # running statistics, not the batch's
    model.train()
    with flow.no_grad():
        train_pair = model(x[1:3]).numpy()
    assert np.abs(train_pair[0] - a[1]).max() > 1e-3  # training mode normalises with the batch's statistics


def test_first_loss_with_the_tutorials_typo(cifar_root):
    data = flowvision.datasets.CIFAR10(root=cifar_root, train=True, transform=transforms.ToTensor())
    x, y = next(iter(flow.utils.data.DataLoader(data, 32, shuffle=True)))
    model = tutorial_model()
    pred = model(x)
    assert pred.shape == (32, 1000)  # classifer is unused: the 1000-class head still answers
    loss = nn.CrossEntropyLoss()(pred, y)
    assert abs(loss.item() - math.log(1000)) < 0.3, loss.item()
    loss.backward()
    assert model.classifier[1].weight.grad is not None
    assert model.classifer[1].weight.grad is None


# ------------------------------------------------------------------------------ Eager vs Graph mode


def train_eager(batches, seed):
    flow.manual_seed(0)
    model = tutorial_model()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for step, (x, y) in enumerate(batches):
        flow.manual_seed(seed + step)  # dropout masks
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


def train_graph(batches, seed, disabled=()):
    flow.manual_seed(0)
    model = tutorial_model()
    graph = GraphMobileNetV2(model, nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=1e-3))
    for name in disabled:
        graph.config.enable_pass(name, False)
    losses = []
    for step, (x, y) in enumerate(batches):
        flow.manual_seed(seed + step)
        losses.append(graph(x, y).item())
    return model, graph, losses


def test_eager_and_graph_training_agree(batches):
    """With the same kernels (channels-last off: every op is Eager's own), the very same numbers."""
    eager_model, eager_losses = train_eager(batches, seed=7)
    graph_model, graph, graph_losses = train_graph(batches, seed=7, disabled=("ChannelsLast",))
    assert abs(eager_losses[0] - math.log(1000)) < 0.5
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    assert len(set(graph_losses)) == 3  # the steps really changed the weights
    eager_state, graph_state = eager_model.state_dict(), graph_model.state_dict()
    for key in eager_state:
        np.testing.assert_allclose(graph_state[key].numpy(), eager_state[key].numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=key)
    # The graph updated the module's own BatchNorm buffers, as Eager mode does.
    bn = graph_model.features[0][1]
    assert bn.num_batches_tracked.item() == 3
    assert np.abs(bn.running_mean.numpy()).max() > 1e-3 and np.abs(bn.running_var.numpy() - 1).max() > 1e-3
    assert graph.state_dict()["System-Train-TrainStep"].item() == 3


def test_channels_last_training_computes_the_same_maths(fast_path, batches):
    """Channels-last kernels add in another order, so float32 results differ in their last bits, and this
    step (batches of 8: BatchNorm over 8 values in the last 1x1 layers) magnifies such differences from
    step to step, in either mode (float32 Eager mode is as far from the exact result as Graph mode). The
    maths must be the same: in float64, where rounding is a billion times smaller, one step agrees to
    eight digits. (Over more steps even float64 drifts: this network magnifies a last-bit difference by
    about 1e8 per step.)"""
    def run(graph_mode):
        flow.manual_seed(0)
        model = tutorial_model().to(flow.float64)
        optimizer = flow.optim.SGD(model.parameters(), lr=1e-3)
        graph = GraphMobileNetV2(model, nn.CrossEntropyLoss(), optimizer) if graph_mode else None
        losses = []
        for step, (x, y) in enumerate(batches[:1]):
            flow.manual_seed(7 + step)
            if graph_mode:
                losses.append(graph(x.to(flow.float64), y).item())
                continue
            loss = nn.CrossEntropyLoss()(model(x.to(flow.float64)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return model, graph, losses

    flow.manual_seed(0)
    start = {name: p.numpy().astype(np.float64) for name, p in tutorial_model().named_parameters()}
    eager_model, _, eager_losses = run(False)
    graph_model, graph, graph_losses = run(True)
    reports = {r.name: r for r in graph.passes}
    assert "ops channels-last" in reports["ChannelsLast"].summary()
    assert "recomputes" in reports["RecomputeActivations"].summary()
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-10)
    # Compare each parameter's update. A BatchNorm bias right before another BatchNorm gets a zero gradient
    # (the second one subtracts any shift): its update is rounding noise in both modes, so it is skipped.
    updates = {name: (p.numpy() - start[name], q.numpy() - start[name])
               for (name, p), q in zip(graph_model.named_parameters(), eager_model.parameters())}
    largest = max(np.linalg.norm(e) for _, e in updates.values())
    errors = {name: np.linalg.norm(g - e) / np.linalg.norm(e) for name, (g, e) in updates.items()
              if np.linalg.norm(e) > 1e-9 * largest}
    assert len(errors) > 100 and max(errors.values()) < 1e-6   # (measured: 5e-8)


def test_matches_pytorch_for_the_same_weights(batches):
    """Loss, every gradient and the BatchNorm statistics of one training step, against PyTorch running
    the same weights through the same structure. In float64: at 32x32 input the last stages are 1x1
    maps, so each BatchNorm normalises only 8 numbers per channel, and in float32 the frameworks'
    different summation orders are amplified into gradient differences of a few percent."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a busy machine, PyTorch's threads spin against each other (100x slower)
    try:
        check_against_pytorch(torch, batches[0])
    finally:
        torch.set_num_threads(threads)


def check_against_pytorch(torch, batch):
    F = torch.nn.functional
    model = mobilenet_v2(num_classes=10).double()
    model.classifier[0].eval()  # dropout off: its random masks differ between frameworks
    params = {id(p): torch.tensor(p.numpy(), requires_grad=True) for p in model.parameters()}
    buffers = {id(b): torch.tensor(b.numpy()) for b in model.buffers()}

    def forward(m, x):
        if isinstance(m, MobileNetV2):
            x = F.adaptive_avg_pool2d(forward(m.features, x), 1).flatten(1)
            return forward(m.classifier, x)
        if isinstance(m, InvertedResidual):
            return x + forward(m.conv, x) if m.use_res_connect else forward(m.conv, x)
        if isinstance(m, nn.Sequential):
            for child in m:
                x = forward(child, x)
            return x
        if isinstance(m, nn.Conv2d):
            return F.conv2d(x, params[id(m.weight)], None, m.stride, m.padding, m.dilation, m.groups)
        if isinstance(m, nn.BatchNorm2d):
            return F.batch_norm(x, buffers[id(m.running_mean)], buffers[id(m.running_var)], params[id(m.weight)],
                                params[id(m.bias)], training=True, momentum=m.momentum, eps=m.eps)
        if isinstance(m, nn.ReLU6):
            return F.relu6(x)
        if isinstance(m, nn.Dropout):
            return x
        if isinstance(m, nn.Linear):
            return F.linear(x, params[id(m.weight)], params[id(m.bias)])
        raise AssertionError(f"no PyTorch counterpart for {type(m).__name__}")

    x, y = batch
    x = x.double()
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    torch_loss = F.cross_entropy(forward(model, torch.tensor(x.numpy())), torch.tensor(y.numpy()))
    torch_loss.backward()
    np.testing.assert_allclose(loss.item(), torch_loss.item(), rtol=1e-10)
    # atol, relative to the largest gradient: some gradients are ~0 in exact arithmetic (the biases of the
    # projection BatchNorms: a per-channel shift is removed again by the next BatchNorm), i.e. rounding noise
    scale = max(params[id(p)].grad.abs().max().item() for p in model.parameters())
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), params[id(p)].grad.numpy(), rtol=1e-6, atol=1e-9 * scale,
                                   err_msg=name)
    for name, b in model.named_buffers():
        if name.endswith("num_batches_tracked"):  # counted by the module; F.batch_norm has no counter
            assert b.item() == 1
        else:
            np.testing.assert_allclose(b.numpy(), buffers[id(b)].numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_inference_graph_respects_eval_mode(batches):
    model = mobilenet_v2(num_classes=10)
    x, y = batches[0]
    graph = GraphMobileNetV2(model, nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=1e-3))
    graph(x, y)  # some training first, so the running statistics are not the initial 0 and 1
    model.eval()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    inference = GraphMobileNetV2Inference(model)
    y_pred = inference(x)
    with flow.no_grad():
        expected = model(x)
    np.testing.assert_allclose(y_pred.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(inference(x).numpy(), y_pred.numpy())  # no dropout
    for key, value in model.state_dict().items():  # eval mode: the running statistics stay put
        np.testing.assert_array_equal(value.numpy(), before[key], err_msg=key)
    assert "training=False" in repr(inference)


# ------------------------------------------------------------------------------------------ print(graph)

# What the tutorial shows print(graph_mobile_net_v2) printing before and after its first call, with the
# tutorial's "..." where it left lines out. OneFlow prints the CUDA device; toynet, as OneFlow, prints
# no device for CPU tensors (normalised away below, with the dtypes' module name and line wrapping).
TUTORIAL_BEFORE = """\
(GRAPH:GraphMobileNetV2_0:GraphMobileNetV2): (
  (CONFIG:config:GraphConfig(training=True, ))
  (MODULE:model:MobileNetV2()): (
    (MODULE:model.features:Sequential()): (
      (MODULE:model.features.0:ConvBNActivation()): (
        (MODULE:model.features.0.0:Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)): (
          (PARAMETER:model.features.0.0.weight:tensor(..., device='cuda:0', size=(32, 3, 3, 3), dtype=oneflow.float32,
                 requires_grad=True)): ()
        )
    ...
    (MODULE:model.classifer:Sequential()): (
      (MODULE:model.classifer.0:Dropout(p=0.2, inplace=False)): ()
      (MODULE:model.classifer.1:Linear(in_features=1280, out_features=10, bias=True)): (
        (PARAMETER:model.classifer.1.weight:tensor(..., size=(10, 1280), dtype=oneflow.float32, requires_grad=True)): ()
        (PARAMETER:model.classifer.1.bias:tensor(..., size=(10,), dtype=oneflow.float32, requires_grad=True)): ()
      )
    )
  )
  (MODULE:loss_fn:CrossEntropyLoss()): ()
)
"""

TUTORIAL_AFTER = """\
(GRAPH:GraphMobileNetV2_0:GraphMobileNetV2): (
  (CONFIG:config:GraphConfig(training=True, ))
  (INPUT:_GraphMobileNetV2_0-input_0:tensor(..., device='cuda:0', size=(64, 3, 32, 32), dtype=oneflow.float32))
  (INPUT:_GraphMobileNetV2_0-input_1:tensor(..., device='cuda:0', size=(64,), dtype=oneflow.int64))
  (MODULE:model:MobileNetV2()): (
    (INPUT:_model-input_0:tensor(..., device='cuda:0', is_lazy='True', size=(64, 3, 32, 32),
           dtype=oneflow.float32))
    (MODULE:model.features:Sequential()): (
      (INPUT:_model.features-input_0:tensor(..., device='cuda:0', is_lazy='True', size=(64, 3, 32, 32),
             dtype=oneflow.float32))
      (MODULE:model.features.0:ConvBNActivation()): (
        (INPUT:_model.features.0-input_0:tensor(..., device='cuda:0', is_lazy='True', size=(64, 3, 32, 32),
               dtype=oneflow.float32))
        (MODULE:model.features.0.0:Conv2d(3, 32, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)): (
          (INPUT:_model.features.0.0-input_0:tensor(..., device='cuda:0', is_lazy='True', size=(64, 3, 32, 32),
                 dtype=oneflow.float32))
          (PARAMETER:model.features.0.0.weight:tensor(..., device='cuda:0', size=(32, 3, 3, 3), dtype=oneflow.float32,
                 requires_grad=True)): ()
          (OUTPUT:_model.features.0.0-output_0:tensor(..., device='cuda:0', is_lazy='True', size=(64, 32, 16, 16),
                 dtype=oneflow.float32))
        )
    ...
"""


# The PARAMETER and BUFFER examples of the tutorial's table of tags (printed with ": ()" after them).
TUTORIAL_TABLE_EXAMPLES = [
    ("(PARAMETER:model.features.0.1.weight:tensor(..., device='cuda:0', size=(32,), dtype=oneflow.float32, "
     "requires_grad=True))"),
    "(BUFFER:model.features.0.1.running_mean:tensor(..., device='cuda:0', size=(32,), dtype=oneflow.float32))",
]


def logical_lines(text: str, graph_name: str) -> list[tuple[int, str]]:
    """(indentation, content) of each printed entry: wrapped lines (a line ending in "," continues on
    the next) joined, the CUDA device dropped, OneFlow's names made toynet's, runs of spaces collapsed.
    A line "..." stays, to mark where the tutorial left lines out."""
    joined: list[str] = []
    for line in text.rstrip("\n").split("\n"):
        if joined and joined[-1].endswith(","):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    out = []
    for line in joined:
        content = line.strip().replace("device='cuda:0', ", "").replace("oneflow.", "toynet.")
        content = content.replace("GraphMobileNetV2_0", graph_name)
        out.append((len(line) - len(line.lstrip(" ")), re.sub(r"\s+", " ", content)))
    return out


def assert_shows_tutorial_lines(printed: str, tutorial: str, graph_name: str) -> None:
    """Every run of lines the tutorial shows appears, in order and contiguously, in what toynet prints;
    the first run starts the printout and, if the tutorial shows the end, the last run ends it."""
    ours = logical_lines(printed, graph_name)
    theirs = logical_lines(tutorial, graph_name)
    runs, run = [], []
    for entry in theirs:
        if entry[1] == "...":
            runs.append(run)
            run = []
        else:
            run.append(entry)
    runs.append(run)
    position = 0
    for k, run in enumerate(runs):
        if not run:
            continue
        starts = [i for i in range(position, len(ours) - len(run) + 1) if ours[i:i + len(run)] == run]
        assert starts, f"the tutorial's lines\n{run}\nare not in toynet's print(graph):\n{printed[:3000]}"
        if k == 0:
            assert starts[0] == 0
        if k == len(runs) - 1:
            assert starts[-1] + len(run) == len(ours)
        position = starts[0] + len(run)


def test_print_graph_matches_the_tutorial(cifar_root):
    data = flowvision.datasets.CIFAR10(root=cifar_root, train=True, transform=transforms.ToTensor())
    x, y = next(iter(flow.utils.data.DataLoader(data, 64, shuffle=True, drop_last=True)))
    model = tutorial_model()
    graph = GraphMobileNetV2(model, nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=1e-3))
    before = repr(graph)
    assert_shows_tutorial_lines(before, TUTORIAL_BEFORE, graph.name)
    entries = {content for _, content in logical_lines(before, graph.name)}
    for example in TUTORIAL_TABLE_EXAMPLES:
        assert logical_lines(example + ": ()", graph.name)[0][1] in entries
    loss = graph(x, y)
    assert loss.shape == ()
    after = repr(graph)
    assert_shows_tutorial_lines(after, TUTORIAL_AFTER, graph.name)
    assert after.count("(INPUT:_model.features.0.0-input_0:") == 1
    assert "(OUTPUT:_model.classifier.1-output_0:tensor(..., is_lazy='True', size=(64, 1000)" in after
    assert "_model.classifer" not in after  # the typo'd head is never called, so it has no INPUT/OUTPUT


# ------------------------------------------------------------------------------------------ examples


def run_example(name: str, cwd, *options: str) -> str:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, os.path.join(REPO, "examples", name), "--batch-size", "4",
                             "--max-batches", "6", "--fake-size", "48", "--seed", "0", *options],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_examples_run_small_and_agree(tmp_path):
    eager = run_example("mobilenet_eager.py", tmp_path)
    graph = run_example("mobilenet_graph.py", tmp_path, "--out", str(tmp_path / "out"))
    assert "synthetic stand-in with 48 training images" in eager
    eager_lines = re.findall(r"^loss: .*$", eager, re.MULTILINE)
    graph_lines = re.findall(r"^loss: .*$", graph, re.MULTILINE)
    assert len(eager_lines) == len(graph_lines) == 2  # batches 0 and 5, as the tutorial prints every 5th
    assert re.fullmatch(r"loss: \d\.\d{6}  \[   20/   48\]", eager_lines[1])
    assert [line[-15:] for line in eager_lines] == [line[-15:] for line in graph_lines]
    eager_losses = [float(line.split()[1]) for line in eager_lines]
    graph_losses = [float(line.split()[1]) for line in graph_lines]
    # Same seed: same data, weights and masks. The first loss comes before any update: only rounding
    # differs (Graph mode's channels-last kernels add in another order). Later ones follow five updates
    # on batches of 4, where BatchNorm over 4 values amplifies those last bits (see
    # test_channels_last_training_computes_the_same_maths for the comparison in float64).
    assert graph_losses[0] == pytest.approx(eager_losses[0], rel=1e-5)
    assert all(abs(g - e) < 0.5 for g, e in zip(graph_losses, eager_losses))  # (a bound, not a comparison)
    assert graph.count("(GRAPH:GraphMobileNetV2_0:GraphMobileNetV2): (") == 2  # before and after the first call
    assert "(INPUT:_GraphMobileNetV2_0-input_0:tensor(..., size=(4, 3, 32, 32), dtype=toynet.float32))" in graph
    first, resumed = re.search(r"original graph: loss (\S+); resumed graph: loss (\S+);", graph).groups()
    assert first == resumed
    assert "train steps 6 -> 7" in graph
    assert float(re.search(r"largest difference from Eager mode (\S+)", graph).group(1)) < 1e-4
    assert float(re.search(r"the reloaded graph's predictions differ by (\S+)", graph).group(1)) < 1e-5
    assert sorted(os.listdir(tmp_path / "out")) == ["GraphMobileNetV2", "mobile_net_v2_model"]
