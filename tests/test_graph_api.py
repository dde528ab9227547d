"""nn.Graph as the tutorials use it: the seeds' examples give Eager mode's numbers, modules keep
their train/eval behaviour, new input shapes compile new graphs, and mistakes get OneFlow's errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphs import InferenceGraph, TrainGraph

import toynet as flow
from toynet import nn
from toynet.static.trace import flatten, signature, unflatten
from toynet.static.trace import StateInfo, trace_step

# ------------------------------------------------------------------------------ the seeds' examples


class ModuleMyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(flow.randn(in_features, out_features))
        self.bias = nn.Parameter(flow.randn(out_features))

    def forward(self, input):
        return flow.matmul(input, self.weight) + self.bias


def test_graph_my_linear_equals_the_eager_module():
    linear_model = ModuleMyLinear(4, 3)

    class GraphMyLinear(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = linear_model

        def build(self, input):
            return self.model(input)

    graph_mylinear = GraphMyLinear()
    for _ in range(2):
        input = flow.randn(1, 4)
        out = graph_mylinear(input)
        assert not out.is_lazy and out.shape == (1, 3) and out.dtype == flow.float32
        np.testing.assert_allclose(out.numpy(), linear_model(input).detach().numpy(), rtol=1e-6, atol=1e-6)
    assert graph_mylinear.model is linear_model
    assert not graph_mylinear.training


def poly_data():
    x = flow.tensor(np.linspace(-math.pi, math.pi, 2000), dtype=flow.float32)
    y = flow.tensor(np.sin(x), dtype=flow.float32)
    xx = flow.cat([x.unsqueeze(-1).pow(1), x.unsqueeze(-1).pow(2), x.unsqueeze(-1).pow(3)], dim=1)
    return xx, y


def poly_setup():
    flow.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    loss_fn = nn.MSELoss(reduction="sum")
    optimizer = flow.optim.SGD(model.parameters(), lr=1e-6)
    return model, loss_fn, optimizer


def linear_train_graph(model, loss_fn, optimizer):
    class LinearTrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.loss_fn = loss_fn
            self.add_optimizer(optimizer)

        def build(self, x, y):
            y_pred = self.model(x)
            loss = self.loss_fn(y_pred, y)
            loss.backward()
            return loss

    return LinearTrainGraph()


def test_poly_fit_graph_matches_the_eager_loop_step_by_step():
    xx, y = poly_data()
    model, loss_fn, optimizer = poly_setup()
    eager_losses = []
    for _ in range(300):
        loss = loss_fn(model(xx), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        eager_losses.append(loss.numpy().item())

    g_model, g_loss_fn, g_optimizer = poly_setup()
    graph = linear_train_graph(g_model, g_loss_fn, g_optimizer)
    assert graph.training
    graph_losses = [graph(xx, y).numpy().item() for _ in range(300)]

    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    assert graph_losses[-1] < graph_losses[0] / 5                  # it did learn
    for p, q in zip(g_model.parameters(), model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)


def test_poly_fit_graph_reaches_the_tutorials_result_after_2000_steps():
    xx, y = poly_data()
    model, loss_fn, optimizer = poly_setup()
    graph = linear_train_graph(model, loss_fn, optimizer)
    for t in range(2000):
        loss = graph(xx, y)
    # The tutorial prints "1999 9.040091" and y = -0.0014 + 0.842 x + 0.0002 x^2 - 0.0913 x^3
    # (from another random start).
    assert 8.5 < loss.numpy().item() < 10.0
    weight = model[0].weight.numpy()[0]
    assert abs(weight[0] - 0.84) < 0.02
    assert abs(weight[1]) < 0.01
    assert abs(weight[2] - (-0.091)) < 0.003
    assert abs(model[0].bias.numpy()[0]) < 0.05
    assert graph.state_dict()["System-Train-TrainStep"].numpy().tolist() == [2000]


# ------------------------------------------------------------------------------------ a conv net


def conv_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 4 * 4, 5))


def conv_batch(n=6, seed=0):
    rng = np.random.default_rng(seed)
    x = flow.tensor(rng.standard_normal((n, 3, 8, 8)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 5, n), dtype=flow.int64)
    return x, y


def test_conv_net_training_graph_matches_eager_step_by_step():
    batches = [conv_batch(seed=s) for s in range(4)]
    flow.manual_seed(1)
    eager_model = conv_net()
    flow.manual_seed(1)
    graph_model = conv_net()
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.05, momentum=0.9)
    graph = TrainGraph(graph_model, nn.CrossEntropyLoss(),
                       flow.optim.SGD(graph_model.parameters(), lr=0.05, momentum=0.9))
    loss_fn = nn.CrossEntropyLoss()
    for step, (x, y) in enumerate(batches):
        flow.manual_seed(100 + step)           # the same dropout mask in both modes
        loss = loss_fn(eager_model(x), y)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        flow.manual_seed(100 + step)
        graph_loss = graph(x, y)
        np.testing.assert_allclose(graph_loss.numpy(), loss.numpy(), rtol=1e-5, err_msg=f"step {step}")
        for (name, p), q in zip(graph_model.state_dict().items(), eager_model.state_dict().values()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{name}, step {step}")
    # BatchNorm's running statistics were updated by the graph and are visible in the module.
    bn = graph_model[1]
    assert not np.allclose(bn.running_mean.numpy(), 0) and not np.allclose(bn.running_var.numpy(), 1)
    assert bn.num_batches_tracked.numpy().item() == 4


def test_conv_net_inference_graph_in_eval_mode():
    flow.manual_seed(2)
    model = conv_net()
    for _ in range(2):                      # give BatchNorm running statistics that are not 0 and 1
        model(conv_batch(seed=9)[0])
    model.eval()
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    graph = InferenceGraph(model)
    x, _ = conv_batch(seed=5)
    first, second = graph(x).numpy().copy(), graph(x).numpy()
    np.testing.assert_array_equal(first, second)         # Dropout is off: no randomness
    with flow.no_grad():
        np.testing.assert_allclose(first, model(x).numpy(), rtol=1e-5, atol=1e-6)
    for key, value in model.state_dict().items():        # eval: running statistics stay
        np.testing.assert_array_equal(value.numpy(), before[key], err_msg=key)
    assert "dropout" not in graph.ir.format() and "batch_norm_stats" not in graph.ir.format()


def test_dropout_in_a_training_mode_graph_draws_new_masks_like_eager():
    flow.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 20), nn.Dropout(0.5))
    graph = InferenceGraph(model)           # no optimizer, but the module is in training mode
    x = flow.ones(4, 20)
    flow.manual_seed(7)
    a, b = graph(x).numpy().copy(), graph(x).numpy().copy()
    assert not np.array_equal(a, b)
    flow.manual_seed(7)
    with flow.no_grad():
        np.testing.assert_allclose(a, model(x).numpy(), rtol=1e-6)
        np.testing.assert_allclose(b, model(x).numpy(), rtol=1e-6)
    assert np.mean(a == 0) > 0.2


def test_training_graph_updates_batchnorm_statistics_like_eager_without_an_optimizer_step():
    flow.manual_seed(4)
    eager = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=None))
    flow.manual_seed(4)
    lazy = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=None))   # cumulative average
    graph = InferenceGraph(lazy)
    for seed in range(3):
        x = flow.tensor(np.random.default_rng(seed).standard_normal((8, 3)).astype(np.float32))
        with flow.no_grad():
            want = eager(x)
        np.testing.assert_allclose(graph(x).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    for key, value in lazy.state_dict().items():
        np.testing.assert_allclose(value.numpy(), eager.state_dict()[key].numpy(), rtol=1e-6, err_msg=key)


class TwiceGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, a, b):
        return self.model(a) + self.model(b)


def test_a_module_called_twice_in_build_updates_its_buffers_twice_like_eager():
    """The second call's running statistics are the state's update, not lost behind the first's."""
    flow.manual_seed(5)
    eager, lazy = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    a, b = flow.randn(8, 3), flow.randn(8, 3) * 3 + 1
    with flow.no_grad():
        want = eager(a) + eager(b)
    np.testing.assert_allclose(TwiceGraph(lazy)(a, b).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    for key, value in lazy.state_dict().items():
        np.testing.assert_allclose(value.numpy(), eager.state_dict()[key].numpy(), rtol=1e-6, err_msg=key)


# --------------------------------------------------------------------------------- input shapes


def test_new_input_shapes_compile_new_graphs_and_old_shapes_reuse_them(capsys):
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    graph = InferenceGraph(model)
    graph.debug(1)
    shapes = [(4, 3), (5, 3), (4, 3), (5, 3), (1, 3)]
    messages = []
    for shape in shapes:
        x = flow.randn(*shape)
        out = graph(x)
        assert out.shape == (shape[0], 2)
        with flow.no_grad():
            np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-6)
        messages.append(capsys.readouterr().out)
    new_shape = "(GRAPH:InferenceGraph_{}:InferenceGraph) got a new input shape, is compiling a new graph."
    building = "start building graph."
    assert [building in m for m in messages] == [True, True, False, False, True]
    assert [new_shape.format(graph.name.split("_")[-1]) in m for m in messages] == [False, True, False, False, True]
    assert graph.ir.inputs[0].shape == (1, 3)     # the graph of the last call
    # The cached plan for (4, 3) is the very plan made on the first call.
    graph(flow.randn(4, 3))
    first_plan = graph.plan
    graph(flow.randn(5, 3))
    graph(flow.randn(4, 3))
    assert graph.plan is first_plan


def test_a_new_dtype_also_compiles_a_new_graph():
    graph = InferenceGraph(nn.ReLU())
    assert graph(flow.tensor([-1.0, 2.0])).dtype == flow.float32
    out = graph(flow.tensor([-1.0, 2.0], dtype=flow.float64))
    assert out.dtype == flow.float64 and out.numpy().tolist() == [0.0, 2.0]


# --------------------------------------------------------------------------- module access


def test_graph_model_is_the_real_module():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    graph = InferenceGraph(model)
    assert graph.model is model
    graph(flow.randn(4, 3))
    state = graph.model.state_dict()
    assert list(state) == list(model.state_dict())
    assert state["0.weight"] is not None and state["0.weight"].shape == (2, 3)
    assert isinstance(graph.model[0], nn.Linear)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        _ = graph.nothing


# ------------------------------------------------------------------------------------- errors


def test_build_must_be_overridden():
    class NoBuild(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(2, 2)

    with pytest.raises(NotImplementedError, match=r"nn.Graph.build\(\) method must be overridden"):
        NoBuild()(flow.randn(1, 2))


def test_missing_super_init_is_reported_on_assignment_and_on_call():
    class NoSuper(nn.Graph):
        def __init__(self):
            self.model = nn.Linear(2, 2)

        def build(self, x):
            return self.model(x)

    with pytest.raises(AttributeError, match=r"please call super\(\).__init__\(\)"):
        NoSuper()

    class NoSuperNoModules(nn.Graph):
        def __init__(self):
            pass

        def build(self, x):
            return x

    graph = NoSuperNoModules()
    with pytest.raises(AttributeError, match="Base class nn.Graph has not been initialized"):
        graph(flow.randn(1, 2))


def test_calling_build_directly_says_to_call_the_graph():
    graph = InferenceGraph(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match=r"build\(\) was called directly.*call the graph object"):
        graph.build(flow.randn(1, 2))


def small_train_graph(backward_kwargs=None, with_optimizer=True):
    model = nn.Linear(2, 2)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1)

    class Train(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            if with_optimizer:
                self.add_optimizer(optimizer)

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward(**(backward_kwargs or {}))
            return loss

    return Train()


def test_backward_without_an_optimizer(capsys):
    graph = small_train_graph(with_optimizer=False)
    with pytest.raises(RuntimeError, match="job has no TrainConf") as info:
        graph(flow.randn(1, 2))
    assert "add_optimizer" in str(info.value)
    assert f"[ERROR](GRAPH:{graph.name}:Train) building graph got error." in capsys.readouterr().out


@pytest.mark.parametrize("argument", ["retain_graph", "create_graph"])
def test_backward_refuses_retain_graph_and_create_graph(argument):
    graph = small_train_graph({argument: True})
    with pytest.raises(RuntimeError, match=f"nn.Graph donot accept '{argument}' argument in backward"):
        graph(flow.randn(1, 2))


def test_backward_needs_a_scalar_loss():
    model = nn.Linear(2, 2)

    class NotScalar(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            out = self.model(x)
            out.backward(flow.ones_like(out))
            return out

    with pytest.raises(RuntimeError, match=r"scalar loss, got shape \(3, 2\)"):
        NotScalar()(flow.randn(3, 2))


def test_optimizer_and_tensor_attributes_are_refused():
    graph = InferenceGraph(nn.Linear(2, 2))
    with pytest.raises(AttributeError, match="not allowed to set Optimizer attribute named 'opt'. "
                                             r"Please use add_optimizer\(...\) instead."):
        graph.opt = flow.optim.SGD(graph.model.parameters(), lr=0.1)
    with pytest.raises(AttributeError, match="not allowed to set Tensor attribute named 't'. Please use "
                                             "nn.Module to hold the tensor"):
        graph.t = flow.randn(2)
    graph.note = "plain attributes are fine"
    assert graph.note == "plain attributes are fine"


def test_module_names_with_a_dot_or_empty_are_refused():
    graph = InferenceGraph(nn.Linear(2, 2))
    with pytest.raises(KeyError, match=r'module name can\\?\'t contain ".", got: a.b'):
        setattr(graph, "a.b", nn.ReLU())
    with pytest.raises(KeyError, match=r'module name can\\?\'t be empty string ""'):
        setattr(graph, "", nn.ReLU())
    graph.plain = 1
    with pytest.raises(KeyError, match="attribute 'plain' already exists"):
        graph.plain = nn.ReLU()


def test_optimizer_with_parameters_outside_the_graph():
    outside = nn.Linear(2, 2)

    class Foreign(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(2, 2)
            self.add_optimizer(flow.optim.SGD(outside.parameters(), lr=0.1))

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss

    with pytest.raises(ValueError, match="is not in the corresponding nn.Graph/nn.Module"):
        Foreign()(flow.randn(1, 2))


def test_one_parameter_in_two_optimizers():
    model = nn.Linear(2, 2)

    class Twice(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))
            self.add_optimizer(flow.optim.Adam([model.bias], lr=0.1))

        def build(self, x):
            return x

    with pytest.raises(ValueError, match=r"<model.bias> is already bound to another optimizer."):
        Twice()


def test_add_optimizer_checks_its_arguments():
    model = nn.Linear(2, 2)
    graph = InferenceGraph(model)
    with pytest.raises(AssertionError, match="optimizer cannot be None"):
        graph.add_optimizer(None)
    with pytest.raises(AssertionError, match="optimizer must be an instance of Optimizer"):
        graph.add_optimizer("sgd")
    opt, other = flow.optim.SGD(model.parameters(), lr=0.1), flow.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(AssertionError, match="lr_scheduler's optimizer must be the same optimizer"):
        graph.add_optimizer(opt, lr_sch=flow.optim.lr_scheduler.StepLR(other, step_size=1))
    assert not graph.training


@pytest.mark.parametrize("code", ["x.numpy()", "x.item()", "x.sum().item()", "float(x.sum())",
                                  "int(x.sum())", "if_statement", "x.tolist()"])
def test_data_dependent_python_in_build_explains_tracing(code):
    class DataDependent(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(2, 2)

        def build(self, x):
            x = self.model(x)
            if code == "if_statement":
                if x.sum() > 0:
                    return x
                return -x
            eval(code)
            return x

    with pytest.raises(RuntimeError) as info:
        DataDependent()(flow.randn(1, 2))
    message = str(info.value)
    assert "lazy tensor" in message and "nn.Graph.build()" in message
    assert "traced once" in message and "toynet.where" in message


def test_printing_a_lazy_tensor_in_build_shows_its_meta(capsys):
    class Printing(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(2, 3)

        def build(self, x):
            y = self.model(x)
            print(y)
            return y

    Printing()(flow.randn(4, 2))
    assert "tensor(..., is_lazy='True', size=(4, 3), dtype=toynet.float32)" in capsys.readouterr().out


def test_lazy_tensors_cannot_escape_the_trace():
    escaped = []

    class Leaky(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = nn.Linear(2, 2)

        def build(self, x):
            y = self.model(x)
            escaped.append(y)
            return y

    Leaky()(flow.randn(1, 2))
    with pytest.raises(RuntimeError, match="lazy tensors exist only inside nn.Graph.build"):
        escaped[0] + 1


def test_views_compiled_state_before_the_first_call_say_how_to_compile():
    graph = InferenceGraph(nn.Linear(2, 2))
    assert not graph.is_compiled
    for view in ("plan", "ir", "passes", "traced_ir"):
        with pytest.raises(RuntimeError, match="has not been compiled yet; call the graph once"):
            getattr(graph, view)
    graph(flow.randn(1, 2))
    assert graph.is_compiled


def test_debug_level_is_checked():
    graph = InferenceGraph(nn.Linear(2, 2))
    with pytest.raises(AssertionError, match="The min verbose debug info level is -1, the max is 3, got 4"):
        graph.debug(4)


# --------------------------------------------------------------------------- optimizers, devices


OPTIMIZER_CONFIGS = {
    "param_groups": lambda m: [flow.optim.SGD([{"params": m[0].parameters(), "lr": 0.1},
                                               {"params": m[2].parameters(), "lr": 0.01, "momentum": 0.5}],
                                              lr=0.05, weight_decay=0.01)],
    "nesterov": lambda m: [flow.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True)],
    "dampening": lambda m: [flow.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, dampening=0.3)],
    "adam_amsgrad": lambda m: [flow.optim.Adam(m.parameters(), lr=0.05, amsgrad=True, weight_decay=0.1)],
    "two_optimizers": lambda m: [flow.optim.SGD(m[0].parameters(), lr=0.05, momentum=0.9),
                                 flow.optim.Adam(m[2].parameters(), lr=0.01)],
}


def mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def mlp_batches(device="cpu"):
    rng = np.random.default_rng(0)
    return [(flow.tensor(rng.standard_normal((6, 4)).astype(np.float32), device=device),
             flow.tensor(rng.standard_normal((6, 2)).astype(np.float32), device=device)) for _ in range(4)]


class MLPTrainGraph(nn.Graph):
    def __init__(self, model, optimizers, schedulers=()):
        super().__init__()
        self.model = model
        for i, optimizer in enumerate(optimizers):
            self.add_optimizer(optimizer, lr_sch=schedulers[i] if schedulers else None)

    def build(self, x, y):
        loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        return loss


@pytest.mark.parametrize("config", sorted(OPTIMIZER_CONFIGS))
@pytest.mark.parametrize("scheduled", [False, True], ids=["constant_lr", "step_lr"])
def test_optimizer_variants_and_schedulers_match_eager(config, scheduled):
    def schedulers(optimizers):
        return [flow.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in optimizers] if scheduled else []

    eager, lazy = mlp(), mlp()
    eager_opts, lazy_opts = OPTIMIZER_CONFIGS[config](eager), OPTIMIZER_CONFIGS[config](lazy)
    eager_schs, lazy_schs = schedulers(eager_opts), schedulers(lazy_opts)
    graph = MLPTrainGraph(lazy, lazy_opts, lazy_schs)
    for x, y in mlp_batches():
        loss = ((eager(x) - y) ** 2).mean()
        for o in eager_opts:
            o.zero_grad()
        loss.backward()
        for o in eager_opts:
            o.step()
        for s in eager_schs:
            s.step()
        np.testing.assert_allclose(graph(x, y).numpy(), loss.numpy(), rtol=1e-5)
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)
    assert [o.param_groups[0]["lr"] for o in lazy_opts] == [o.param_groups[0]["lr"] for o in eager_opts]


def test_tied_and_frozen_parameters_train_like_eager():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            flow.manual_seed(0)
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
            self.b.weight = self.a.weight                       # one parameter used in two places
            self.frozen = nn.Linear(4, 4)
            self.frozen.weight.requires_grad_(False)

        def forward(self, x):
            return (self.b(self.a(x).tanh()) + self.frozen(x) + x @ self.a.weight).pow(2).mean()

    eager, lazy = Tied(), Tied()
    eager_opt = flow.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lazy_opt = flow.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)

    class TrainTied(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = lazy
            self.add_optimizer(lazy_opt)

        def build(self, x):
            loss = self.model(x)
            loss.backward()
            return loss

    graph = TrainTied()
    frozen_before = lazy.frozen.weight.numpy().copy()
    for x, _ in mlp_batches():
        loss = eager(x)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(graph(x).numpy(), loss.numpy(), rtol=1e-5)
    for (name, p), q in zip(lazy.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
    np.testing.assert_array_equal(lazy.frozen.weight.numpy(), frozen_before)
    assert "model.frozen.weight-momentum" not in graph.state_dict()


def test_training_graph_on_every_device(device):
    """On the strict stand-in GPU, any stray NumPy call in tracing, passes or the plan would fail."""
    eager, lazy = mlp().to(device), mlp().to(device)
    eager_opt = flow.optim.Adam(eager.parameters(), lr=0.01)
    graph = MLPTrainGraph(lazy, [flow.optim.Adam(lazy.parameters(), lr=0.01)])
    for x, y in mlp_batches(device):
        loss = ((eager(x) - y) ** 2).mean()
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        out = graph(x, y)
        assert out.device == device
        np.testing.assert_allclose(out.numpy(), loss.numpy(), rtol=1e-5)
    for p, q in zip(lazy.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)


def test_inputs_on_another_device_than_the_modules_are_refused():
    graph = InferenceGraph(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="a graph runs on one device"):
        graph(flow.randn(1, 2, device="strict"))


def test_infinite_and_nan_literals():
    def masked(model, x):
        h = model(x)
        return flow.where(h > 0, h, float("-inf")).softmax(dim=1) + flow.maximum(h, float("-inf")) * 0

    class Masked(nn.Graph):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def build(self, x):
            return masked(self.model, x)

    model = nn.Linear(3, 3)
    x = flow.randn(4, 3)
    out = Masked(model)(x)
    with flow.no_grad():
        np.testing.assert_allclose(out.numpy(), masked(model, x).numpy(), rtol=1e-6)


def test_a_training_graph_leaves_eager_gradients_alone_and_returns_plain_tensors():
    model = nn.Linear(2, 2)
    graph = MLPTrainGraph(nn.Sequential(model), [flow.optim.SGD(model.parameters(), lr=0.1)])
    out = graph(flow.randn(3, 2), flow.randn(3, 2))
    assert model.weight.grad is None and model.bias.grad is None
    assert not out.is_lazy and not out.requires_grad and out.grad_fn is None
    assert not model.weight.is_lazy and model.weight.requires_grad
    # The module still trains eagerly afterwards.
    (model(flow.ones(1, 2)).sum()).backward()
    np.testing.assert_allclose(model.weight.grad.numpy(), np.ones((2, 2)), rtol=1e-6)


# ------------------------------------------------------------------------------ nested call arguments


def test_flatten_and_unflatten_nested_arguments():
    x, y = flow.ones(2), flow.zeros(3)
    value = ((x, [y, 3]), {"k": "s", "none": None, "t": x})
    leaves, spec = flatten(value)
    assert leaves == [x, y, 3, "s", None, x]
    x2, y2 = flow.ones(2), flow.zeros(3)
    assert unflatten(spec, iter([x2, y2, x2])) == ((x2, [y2, 3]), {"k": "s", "none": None, "t": x2})
    # The signature tells plans apart by nesting, values and tensor metadata, not by tensor identity.
    assert signature(leaves, spec) == signature(*flatten(((x2, [y2, 3]), {"k": "s", "none": None, "t": x2})))
    assert signature(leaves, spec) != signature(*flatten(((x, (y, 3)), {"k": "s", "none": None, "t": x})))
    assert signature(leaves, spec) != signature(*flatten(((x, [flow.zeros(4), 3]), {"k": "s", "none": None,
                                                                                   "t": x})))
    hash(signature(*flatten((np.zeros(2), {1, 2}))))  # unhashable values: compared by their repr


class NestedGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, pair, scale=1.0, extra=None):
        a, b = pair
        out = self.model(a) * scale + self.model(b)
        return {"out": out, "inputs": [a, (b, "tag")], "scale": scale}


def test_nested_arguments_and_results_pass_through_a_graph(tmp_path, capsys):
    model = nn.Linear(3, 2)
    graph = NestedGraph(model)
    graph.debug(1)
    a, b = flow.randn(4, 3), flow.randn(4, 3)
    marker = frozenset({"x"})   # not a tensor, number, string or None: a value of the plan, OneFlow warns of it
    result = graph((a, b), scale=2.0, extra=marker)
    printed = capsys.readouterr().out
    assert "(INPUT:_NestedGraph_0-input_1:tensor(..., size=(4, 3)" in printed
    # The number is an input of the plan too: a 0-d tensor in build().
    assert "(INPUT:_NestedGraph_0-input_2:tensor(..., is_lazy='True', size=(), dtype=toynet.float64))" in printed
    assert "[WARNING](INPUT:_NestedGraph_0-input_3:<class 'frozenset'>)" in printed
    assert sorted(result) == ["inputs", "out", "scale"] and float(result["scale"]) == 2.0
    assert isinstance(result["inputs"], list) and result["inputs"][1][1] == "tag"
    np.testing.assert_allclose(result["out"].numpy(), (model(a) * 2.0 + model(b)).numpy(), rtol=1e-5)
    np.testing.assert_array_equal(result["inputs"][1][0].numpy(), b.numpy())
    # New tensors of the same shapes reuse the plan, and so does a new value of the number; a list instead
    # of a tuple, an int instead of a float or another value compiles anew.
    graph.debug(-1)
    graph((flow.randn(4, 3), flow.randn(4, 3)), scale=2.0, extra=marker)
    assert len(graph._compiled) == 1
    again = graph((a, b), scale=3.0, extra=marker)
    assert len(graph._compiled) == 1 and again["out"].dtype == flow.float32
    np.testing.assert_allclose(again["out"].numpy(), (model(a) * 3.0 + model(b)).numpy(), rtol=1e-5)
    graph([a, b], scale=2.0, extra=marker)
    graph((a, b), scale=3, extra=marker)
    graph((a, b), scale=2.0, extra=frozenset())
    assert len(graph._compiled) == 4
    # A deployed graph rebuilds the same nesting, with the numbers of the last call.
    graph((a, b), scale=2.0)
    flow.save(graph, tmp_path / "nested")
    deployed = flow.load(tmp_path / "nested")(a, b)
    assert deployed["scale"] == 2.0 and deployed["inputs"][1][1] == "tag"
    np.testing.assert_allclose(deployed["out"].numpy(), result["out"].numpy(), rtol=1e-5)


def test_trace_step_records_updates_through_tracer_scope_and_update():
    """The static engine's own entry point: nn.Graph is one caller of trace_step, this test another."""
    weight, counter = flow.ones(3), flow.zeros(1)

    def build(x):
        return (x * weight).sum()

    def updates(tracer):
        with tracer.scope("count"):
            tracer.update(counter, tracer.add_state("count", "system", counter) + 1)
        tracer.update("w", 0.5)  # by state name; a number is broadcast as copy_ does

    seen = []
    states = {id(weight): StateInfo("w", "buffer", weight)}
    graph, tracer = trace_step("G", build, *flatten(((flow.ones(3),), {})), states, {}, updates=updates,
                               watch=lambda kind, name, v: seen.append((kind, name)))
    assert [(kind, name) for kind, name in seen if kind != "op"] == [("input", "_G-input_0"), ("output", "_G-output_0")]
    assert [kind for kind, _, _ in tracer.events] == ["input", "output"]
    states = tracer.state_tensors
    assert states == {"w": weight, "count": counter}
    assert sorted(graph.updates) == ["count", "w"]
    assert graph.updates["count"].name.startswith("count-") and graph.updates["count"].phase == "optimizer"
