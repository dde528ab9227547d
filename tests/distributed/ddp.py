"""DistributedDataParallel, run by tests/test_distributed.py: each rank trains on its share of every batch.

Run alone (one process), the same script trains on whole batches: the test's single-process reference.
"""

import sys

import cases
import numpy as np

import toynet as flow

r, n = flow.env.get_rank(), flow.env.get_world_size()
flow.manual_seed(100 + r)     # every rank starts from different weights: DDP broadcasts rank 0's
model = flow.nn.Sequential(flow.nn.Linear(3, 8), flow.nn.Tanh(), flow.nn.Linear(8, 2))
before = [p.numpy().copy() for p in model.parameters()]
ddp = flow.nn.parallel.DistributedDataParallel(model)
assert ddp is model
opt = flow.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
loss_fn = flow.nn.MSELoss()
rng = np.random.default_rng(7)
losses = []
for step in range(4):
    X = rng.standard_normal((8, 3)).astype(np.float32)
    Y = rng.standard_normal((8, 2)).astype(np.float32)
    mine = slice(r * 8 // n, (r + 1) * 8 // n)   # this rank's half of the batch
    loss = loss_fn(model(flow.tensor(X[mine])), flow.tensor(Y[mine]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
cases.write(sys.argv[1], r, {"before": before, "after": [p.numpy() for p in model.parameters()],
                             "grads": [p.grad.numpy() for p in model.parameters()], "losses": losses})
