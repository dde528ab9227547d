"""Pipeline stages and ZeRO in nn.Graph, run by tests/test_distributed.py; run alone (one process) it is the
single-process reference (every placement is then rank 0).

``pipeline``: two stages on two placements (rank 0, then the last rank), ``set_stage`` on each, the batch cut
into 2 micro-batches (``set_gradient_accumulation_steps``): the step must equal one on the whole batch.
``zero``: data parallelism with ``enable_zero``: Adam's moments are split over the ranks, and training must
equal the same graph without ZeRO.
"""

import sys

import numpy as np

import toynet as flow

r, n = flow.env.get_rank(), flow.env.get_world_size()
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
P0, P1, ALL = flow.placement("cpu", [0]), flow.placement("cpu", [n - 1]), flow.placement("cpu", list(range(n)))


class Pipeline(flow.nn.Graph):
    def __init__(self, model, steps):
        super().__init__()
        self.model, self.loss_fn = model, flow.nn.CrossEntropyLoss()
        self.model[0].config.set_stage(stage_id=0, placement=P0)
        self.model[1].config.set_stage(stage_id=1, placement=P1)
        self.config.set_gradient_accumulation_steps(steps)
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def pipeline(steps):
    flow.manual_seed(0)
    model = flow.nn.Sequential(flow.nn.Sequential(flow.nn.Linear(6, 5), flow.nn.ReLU()), flow.nn.Linear(5, 3))
    model[0].to_global(placement=P0, sbp=B)
    model[1].to_global(placement=P1, sbp=B)
    graph, rng, losses = Pipeline(model, steps), np.random.default_rng(0), []
    for _ in range(3):
        x = flow.tensor(rng.standard_normal((8, 6)).astype(np.float32)).to_global(P0, B)
        y = flow.tensor(rng.integers(0, 3, 8)).to_global(P1, B)
        losses.append(graph(x, y).numpy().tolist())
    return {"losses": losses, "after": [p.numpy() for p in model.parameters()],
            "local": [list(p.to_local().shape) for p in model.parameters()], "repr": repr(model[0].to(
                flow.nn.graph.GraphModule))}


class Train(flow.nn.Graph):
    def __init__(self, model, zero):
        super().__init__()
        self.model, self.loss_fn = model, flow.nn.MSELoss()
        self.add_optimizer(flow.optim.Adam(model.parameters(), lr=0.05))
        if zero:
            self.config.enable_zero(True, stage=2, shard_min_size=8)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def zero(on):
    flow.manual_seed(0)
    model = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.Tanh(), flow.nn.Linear(8, 2)).to_global(ALL, B)
    graph, rng, losses = Train(model, on), np.random.default_rng(1), []
    for _ in range(3):
        x = flow.tensor(rng.standard_normal((8, 4)).astype(np.float32), placement=ALL, sbp=S0)
        y = flow.tensor(rng.standard_normal((8, 2)).astype(np.float32), placement=ALL, sbp=S0)
        losses.append(graph(x, y).numpy().item())
    opt = graph._optimizers[0].optimizer
    slots = {f"{i}.{k}": [str(v.sbp[0].short), list(v.to_local().shape)]
             for i, p in enumerate(model.parameters()) for k, v in opt.state[p].items() if v.ndim > 0}
    boxing = sorted({f"{b.attrs['src'].short}->{b.attrs['dst'].short}" for b in graph._last.traced.op_nodes
                     if b.op.name == "boxing"})
    return {"losses": losses, "after": [p.numpy() for p in model.parameters()], "slots": slots, "boxing": boxing}


results = {"pipeline 1": pipeline(1), "pipeline 2": pipeline(2), "zero off": zero(False), "zero on": zero(True)}

import cases  # noqa: E402

cases.write(sys.argv[1], r, results)
