"""nn.Graph on global tensors, run by tests/test_distributed.py: the compiler picks SBP signatures and inserts
the boxing; training must match one process training on whole batches (run alone, this script is that one).

Three layouts of one model, each a few steps of SGD with momentum, compiled once per layout:
``data``: broadcast weights, batches split along rows (data parallelism: the gradients' all-reduce is boxing);
``model``: the first layer's weight split by output features (model parallelism);
``rows``: inputs and targets broadcast, the second layer's weight split along its inputs (a partial sum).
"""

import sys

import numpy as np

import toynet as flow

r, n = flow.env.get_rank(), flow.env.get_world_size()
P, B, S = flow.placement("cpu", ranks=list(range(n))), flow.sbp.broadcast, flow.sbp.split
LAYOUTS = {"data": (S(0), lambda name, t: B),
           "model": (B, lambda name, t: S(0) if name.startswith("0.") else B),
           "rows": (B, lambda name, t: S(1) if name == "2.weight" else B)}


class Train(flow.nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model, self.loss_fn = model, flow.nn.MSELoss()
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


results = {}
for layout, (data_sbp, weight_sbp) in LAYOUTS.items():
    flow.manual_seed(0)
    model = flow.nn.Sequential(flow.nn.Linear(3, 8), flow.nn.Tanh(), flow.nn.Linear(8, 2))
    model.to_global(placement=P, sbp=B).to_global(placement=P, sbp=weight_sbp)   # (a local tensor is a part)
    graph = Train(model, flow.optim.SGD(model.parameters(), lr=0.2, momentum=0.5))
    rng = np.random.default_rng(7)
    losses = []
    for step in range(3):
        x = flow.tensor(rng.standard_normal((8, 3)).astype(np.float32), placement=P, sbp=data_sbp)
        y = flow.tensor(rng.standard_normal((8, 2)).astype(np.float32), placement=P, sbp=data_sbp)
        losses.append(graph(x, y).numpy().item())
    traced = graph._last.traced
    results[layout] = {
        "losses": losses, "after": [p.numpy() for p in model.parameters()],
        "sbp": [str(p.sbp[0].short) for p in model.parameters()],
        "boxing": sorted({f"{n.attrs['src'].short}->{n.attrs['dst'].short}" for n in traced.op_nodes
                          if n.op.name == "boxing"}),
        "compiled": len(graph._compiled)}
    if layout == "data":    # deployment: from one process the logical graph; from more a clear refusal
        try:
            flow.save(graph, f"{sys.argv[1]}/deployed")
            results[layout]["save"] = "saved"
        except RuntimeError as error:
            results[layout]["save"] = str(error)
    if layout == "data" and r == 0:
        graph.debug(0, op_repr_with_py_stack=False)
        graph._debug.op_repr = True
        results[layout]["printed"] = repr(graph)

SCALE = np.arange(16, dtype=np.float32).reshape(8, 2)
# captured by build(), not a parameter: each process bakes in its part (here a partial sum: the parts add up)
scale = flow.tensor(SCALE, placement=P, sbp=B).to_global(sbp=flow.sbp.partial_sum)


class Scaled(flow.nn.Graph):
    def build(self, x):
        return x * scale


results["captured"] = Scaled()(flow.ones(8, 2, placement=P, sbp=B) * 2).numpy()

import cases  # noqa: E402

cases.write(sys.argv[1], r, results)
