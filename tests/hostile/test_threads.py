"""Graphs called from many threads at once (issue 21): a server's thread pool calling one nn.Graph (or a deployed
graph) must get what sequential calls give. A compiled plan computes in buffers it owns, so calls take turns (a
lock per graph); before, 84 of 100 concurrent results were wrong."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import toynet as flow
from toynet import nn

THREADS, CALLS = 8, 40


def mlp():
    flow.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).eval()


class Inference(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def hammer(call, inputs):
    """Every input through ``call`` from THREADS threads at once; the results in input order."""
    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(call, inputs))


@pytest.mark.parametrize("fast", [False, True], ids=["lesson", "fast"])
def test_concurrent_calls_of_one_graph_give_the_sequential_results(fast):
    model = mlp()
    rng = np.random.default_rng(0)
    inputs = [flow.tensor(rng.standard_normal((32, 16)).astype(np.float32)) for _ in range(THREADS * CALLS)]
    with flow.no_grad():
        expected = [model(x).numpy() for x in inputs]
    with flow.set_fast_path(fast):
        graph = Inference(model)
        graph(inputs[0])                     # compiled once; the threads then share its plan
        got = hammer(lambda x: graph(x).numpy(), inputs)
    wrong = sum(not np.allclose(g, e, rtol=1e-5, atol=1e-6) for g, e in zip(got, expected))
    assert wrong == 0, f"{wrong} of {len(inputs)} concurrent results differ from sequential ones"


def test_concurrent_calls_of_a_deployed_graph_give_the_sequential_results(tmp_path):
    model = mlp()
    graph = Inference(model)
    x0 = flow.randn(32, 16)
    graph(x0)
    flow.save(graph, tmp_path / "served")
    deployed = flow.load(tmp_path / "served")
    rng = np.random.default_rng(1)
    inputs = [flow.tensor(rng.standard_normal((32, 16)).astype(np.float32)) for _ in range(THREADS * CALLS)]
    with flow.no_grad():
        expected = [model(x).numpy() for x in inputs]
    got = hammer(lambda x: deployed(x).numpy(), inputs)
    wrong = sum(not np.allclose(g, e, rtol=1e-5, atol=1e-6) for g, e in zip(got, expected))
    assert wrong == 0, f"{wrong} of {len(inputs)} concurrent results differ from sequential ones"


@pytest.mark.parametrize("fast", [False, True], ids=["lesson", "fast"])
def test_training_steps_from_many_threads_are_whole_steps(fast):
    """The same batch from every thread: whatever the order, N whole steps give the weights of N sequential ones."""
    x, y = flow.randn(32, 16), flow.randn(32, 4)

    def trained(concurrently):
        model = mlp().train()

        class Step(nn.Graph):
            def __init__(self):
                super().__init__()
                self.model = model
                self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))

            def build(self, x, y):
                loss = ((self.model(x) - y) ** 2).mean()
                loss.backward()
                return loss

        step = Step()
        step(x, y)
        if concurrently:
            hammer(lambda _: step(x, y).numpy(), range(THREADS * 8))
        else:
            for _ in range(THREADS * 8):
                step(x, y)
        return {k: v.numpy() for k, v in model.state_dict().items()}

    with flow.set_fast_path(fast):
        together, one_by_one = trained(True), trained(False)
    for name in together:
        np.testing.assert_allclose(together[name], one_by_one[name], rtol=1e-5, atol=1e-6, err_msg=name)
