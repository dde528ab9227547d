"""Global tensors in several processes, run by tests/test_distributed.py (2 processes).

Creation with placement= and sbp=, every boxing path, every signature of cases.OPS, gradients of
cases.GRADS, training with an optimizer, printing, and the errors; the results go to OUT/rank<r>.json.
"""

import gc
import sys

import cases

import toynet as flow
from toynet import mode

r, n = flow.env.get_rank(), flow.env.get_world_size()
flow.manual_seed(cases.RANK_SEEDED + r)   # different on each rank: global creation must agree anyway
p = flow.placement("cpu", list(range(n)))
SBP = {"S0": flow.sbp.split(0), "S1": flow.sbp.split(1), "B": flow.sbp.broadcast, "P": flow.sbp.partial_sum}
D = cases.data()
out = {}


def describe(t):
    return {"sbp": t.sbp[0].short, "value": t.numpy(), "local": t.to_local().numpy(), "shape": list(t.shape)}


def make(name, sbp, requires_grad=False):
    return flow.tensor(D[name], placement=p, sbp=SBP[sbp], requires_grad=requires_grad)


x = flow.randn(5, 3, placement=p, sbp=SBP["S0"])
out["randn S0"] = describe(x)
out["zeros B"] = describe(flow.zeros(2, 3, placement=p, sbp=SBP["B"]))
for src in SBP:
    for dst in SBP:
        out[f"box {src} -> {dst}"] = describe(make("T", src).to_global(sbp=SBP[dst]))
for name, (inputs, op, _) in cases.OPS.items():
    out[f"op {name}"] = describe(op(*(make(a, s) for a, s in inputs)))
for name, (inputs, loss_of) in cases.GRADS.items():
    leaves = [make(a, s, requires_grad=True) for a, s in inputs]
    loss = loss_of(*leaves)
    loss.backward()
    out[f"grad {name}"] = {"loss": loss.item(), "grads": [describe(t.grad) for t in leaves]}

# the local parts of a split made global again, with their own gradient
part = flow.tensor(cases.shard(D["C"], 0, n, r), requires_grad=True)
((part.to_global(placement=p, sbp=SBP["S0"]) ** 2).sum()).backward()
out["to_global grad"] = {"part": part.numpy(), "grad": part.grad.numpy()}

# training: plain SGD on a broadcast weight and bias, with split data
w = flow.zeros(4, 6, placement=p, sbp=SBP["B"], requires_grad=True)
b = flow.zeros(6, placement=p, sbp=SBP["B"], requires_grad=True)
opt = flow.optim.SGD([w, b], lr=0.1, momentum=0.9)
data, target = make("A", "S0"), make("C", "S0")
for _ in range(3):
    loss = ((data @ w + b - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
out["sgd"] = {"w": describe(w), "b": describe(b), "grad sbp": w.grad.sbp[0].short}

y = make("A", "S0", requires_grad=True) @ make("W", "B")
out["repr"] = repr(y)
out["dropout"] = describe(flow.nn.functional.dropout(make("C", "S0"), p=0.5, training=True))
for what, call in {"mixed": lambda: make("A", "S0") + flow.tensor(D["A"]),
                   "local placement": lambda: flow.tensor(D["A"]).placement}.items():
    try:
        call()
        out[f"error {what}"] = None
    except (RuntimeError, NotImplementedError) as error:
        out[f"error {what}"] = str(error)
# a placement on rank 0 only: rank 1 holds an empty part, yet reads the value, and a move takes it to rank 1
first = flow.tensor(D["A"]).to_global(placement=flow.placement("cpu", [0]), sbp=SBP["B"])
moved = (first * 2).to_global(placement=flow.placement("cpu", [n - 1]), sbp=SBP["S0"])
out["subset"] = {"value": first.numpy(), "local": list(first.to_local().shape), "moved": moved.numpy(),
                 "moved local": moved.to_local().numpy()}
del x, y, w, b, opt, data, target, loss, leaves, part, first, moved
gc.collect()
out["interpreter gone"] = mode.tracer is None
cases.write(sys.argv[1], r, out)
