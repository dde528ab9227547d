"""nn.Graph on a 2 x 2 grid of processes (2-D SBP), run by tests/test_distributed.py with 4 processes; run alone
it uses a 1 x 1 grid: the single-process reference. Weights (B, B), inputs (B, S(0)), targets (S(0), B)."""

import sys

import cases
import numpy as np

import toynet as flow

r, n = flow.env.get_rank(), flow.env.get_world_size()
GRID = flow.placement("cpu", [[0, 1], [2, 3]] if n == 4 else [[0]])
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
flow.manual_seed(0)
model = flow.nn.Sequential(flow.nn.Linear(8, 4), flow.nn.ReLU(), flow.nn.Linear(4, 2))
model.to_global(placement=GRID, sbp=(B, B))


class Train(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model, self.loss_fn = model, flow.nn.MSELoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


graph, rng, losses = Train(), np.random.default_rng(0), []
for _ in range(3):
    x = flow.tensor(rng.standard_normal((8, 8)).astype(np.float32), placement=GRID, sbp=(B, S0))
    y = flow.tensor(rng.standard_normal((8, 2)).astype(np.float32), placement=GRID, sbp=(S0, B))
    losses.append(graph(x, y).numpy().item())
boxing = sorted({n.op.describe(**n.attrs) for n in graph._last.traced.op_nodes if n.op.name == "boxing"})
cases.write(sys.argv[1], r, {"losses": losses, "after": [p.numpy() for p in model.parameters()], "boxing": boxing,
                             "local": [list(p.to_local().shape) for p in model.parameters()]})
