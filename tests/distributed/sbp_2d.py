"""2-D SBP over a 2 x 2 grid of processes, run by tests/test_distributed.py with 4 processes: parts, a matmul
signature derived axis by axis, 2-D boxing, and the 2-D SBP page's model, each against the whole values."""

import sys

import cases
import numpy as np

import toynet as flow

r = flow.env.get_rank()
GRID = flow.placement("cpu", [[0, 1], [2, 3]])
B, S0, S1 = flow.sbp.broadcast, flow.sbp.split(0), flow.sbp.split(1)
A = np.arange(24, dtype=np.float32).reshape(4, 6)
W = np.arange(48, dtype=np.float32).reshape(6, 8) / 10

a = flow.tensor(A, placement=GRID, sbp=(B, S0))
w = flow.tensor(W, placement=GRID, sbp=(S1, B))
y = a @ w
z = y.to_global(sbp=(S1, S1))
p = (a * 1).to_global(sbp=(S0, B)).sum(dim=1)
flow.manual_seed(0)
model = flow.nn.Sequential(flow.nn.Linear(8, 4), flow.nn.ReLU(), flow.nn.Linear(4, 2))
model = model.to_global(placement=GRID, sbp=(B, B))
x = flow.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 2, 8), placement=GRID, sbp=(B, S0))
pred = model(x)
cases.write(sys.argv[1], r, {
    "a local": a.to_local().numpy(), "y": y.numpy(), "y sbp": [s.short for s in y.sbp], "y local": y.to_local().numpy(),
    "z": z.numpy(), "z local": z.to_local().numpy(), "p": p.numpy(), "p sbp": [s.short for s in p.sbp],
    "pred": pred.numpy(), "pred sbp": [s.short for s in pred.sbp], "x": x.numpy(),
    "params": [t.numpy() for t in model.parameters()]})
