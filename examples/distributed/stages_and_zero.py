"""Two more ways to split training over processes, in nn.Graph (notebook 10, 10.6): a pipeline and ZeRO.

    python examples/distributed/stages_and_zero.py OUT_DIR                                   # one process
    python -m toynet.distributed.launch --nproc_per_node 2 examples/distributed/stages_and_zero.py OUT_DIR

Both train a small MLP (64 -> 32 -> 10) on the handwritten digits that ship with toynet, 20 steps of 64 images
from one seeded shuffle, the same in every run:

* **pipeline**: the hidden layer is stage 0, on rank 0; the output layer is stage 1, on the last rank (with one
  process both are rank 0). ``set_stage`` marks them; the graph moves the activations forward and their
  gradients back between the two placements, and ``set_gradient_accumulation_steps(2)`` cuts each batch into
  two micro-batches. SGD with momentum.
* **zero off** / **zero on**: data parallelism (the weights broadcast, each batch split by rows) with Adam,
  without and with ``enable_zero``: with it, each process keeps and updates its share of Adam's moments.

Each line printed starts with the rank. With ``OUT_DIR``, each process saves to ``OUT_DIR/rank<r>.json``, for
each of the three runs: the losses, the final parameters (whole), the shape of this process's part of each
parameter, and the boxing nodes and moves of the graph the plan runs; for the data-parallel runs also the SBP
and this process's shape of each of Adam's moments.
"""

import json
import sys
from pathlib import Path

import numpy as np

import toynet as flow
from toynet import nn
from toynet.distributed import boxing
from toynet.vision.datasets import Digits

flow.set_fast_path(False)           # the lesson path, whatever TOYNET_FAST says: the same engine for every run
rank, world = flow.env.get_rank(), flow.env.get_world_size()
B, S0 = flow.sbp.broadcast, flow.sbp.split(0)
FIRST, LAST = flow.placement("cpu", ranks=[0]), flow.placement("cpu", ranks=[world - 1])
EVERY = flow.placement("cpu", ranks=list(range(world)))
STEPS, BATCH = 20, 64
digits = Digits(train=True)
X, Y = digits.data.reshape(len(digits), 64).astype(np.float32) / 255, np.array(digits.targets)


def say(text):
    """Print with the rank in front, in one write (the processes share one terminal)."""
    sys.stdout.write(f"[rank {rank}] {text}\n")
    sys.stdout.flush()


def mlp():
    flow.manual_seed(0)             # the same first weights in every run, whatever the number of processes
    return nn.Sequential(nn.Sequential(nn.Linear(64, 32), nn.ReLU()), nn.Linear(32, 10))


def batches():
    """STEPS batches of BATCH images, from one seeded shuffle: the same on every process and in every run."""
    order = np.random.default_rng(0).permutation(len(X))
    return [order[i * BATCH:(i + 1) * BATCH] for i in range(STEPS)]


class Train(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model, self.loss_fn = model, nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def pipeline():
    model = mlp()
    model[0].to_global(placement=FIRST, sbp=B)                  # stage 0's weights live on rank 0 only
    model[1].to_global(placement=LAST, sbp=B)                   # stage 1's on the last rank only
    graph = Train(model, flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    graph.model[0].config.set_stage(stage_id=0, placement=FIRST)
    graph.model[1].config.set_stage(stage_id=1, placement=LAST)
    graph.config.set_gradient_accumulation_steps(2)             # each batch of 64: two micro-batches of 32
    losses = []
    for rows in batches():
        x = flow.tensor(X[rows], placement=FIRST, sbp=B)        # the images go to stage 0
        y = flow.tensor(Y[rows], placement=LAST, sbp=B)         # the labels to stage 1, which computes the loss
        losses.append(graph(x, y).numpy().tolist())             # one loss per micro-batch
    local = {name: list(p.to_local().shape) for name, p in model.named_parameters()}
    say(f"pipeline: loss {np.mean(losses[0]):.3f} -> {np.mean(losses[-1]):.3f}; my parts of the parameters: "
        + ", ".join(f"{name} {shape}" for name, shape in local.items()))
    return {"losses": losses, "local": local, "collectives": collectives(graph), "after": whole(model)}


def data_parallel(zero):
    model = mlp().to_global(placement=EVERY, sbp=B)              # every process holds the whole model
    adam = flow.optim.Adam(model.parameters(), lr=0.01)
    graph = Train(model, adam)
    if zero:    # split each of Adam's slots of 100 numbers or more over the processes
        graph.config.enable_zero(True, stage=2, shard_min_size=100)
    losses = []
    for rows in batches():
        x = flow.tensor(X[rows], placement=EVERY, sbp=S0)       # each process gets its share of the rows
        y = flow.tensor(Y[rows], placement=EVERY, sbp=S0)
        losses.append(graph(x, y).numpy().item())
    moments = {f"{name} {key}": {"sbp": v.sbp[0].short, "local": list(v.to_local().shape), "shape": list(v.shape)}
               for name, p in model.named_parameters() for key, v in adam.state[p].items() if v.ndim > 0}
    mine = sum(int(np.prod(m["local"])) for m in moments.values())
    every = sum(int(np.prod(m["shape"])) for m in moments.values())
    say(f"ZeRO {'on ' if zero else 'off'}: loss {losses[0]:.3f} -> {losses[-1]:.3f}; I keep {mine:,} of the "
        f"{every:,} numbers of Adam's moments")
    return {"losses": losses, "moments": moments, "collectives": collectives(graph), "after": whole(model),
            "local": {name: list(p.to_local().shape) for name, p in model.named_parameters()}}


def whole(model):
    """Every parameter's whole value (``numpy()`` of a global tensor: every process gets it)."""
    return {name: p.numpy().tolist() for name, p in model.named_parameters()}


def collectives(graph):
    """The boxing nodes and moves of the graph the plan runs (``graph.ir``), in the order it runs them: for each,
    its phase, what it does (``P->S(0)`` and its collective of ``boxing.PATHS``, or a move from ranks to ranks),
    the logical shape of the value, and the op that computed the value (and the op before that one)."""
    traced, found = {n.name: n for n in graph.traced_ir.nodes}, []
    for node in graph.ir.op_nodes:
        if node.op_name not in ("boxing", "move"):
            continue
        src, dst = node.attrs["src"], node.attrs["dst"]
        if node.op_name == "boxing":
            what = f"{src.short}->{dst.short} ({boxing.PATHS[boxing.kind(src), boxing.kind(dst)]})"
        else:
            what = f"move ranks {list(src)}->{list(dst)}"
        value = traced[node.name].input_nodes[0]                # as traced: before the passes fused anything
        made_from = [op_of(x) for x in value.input_nodes if x.kind == "op"][:1]
        found.append({"phase": node.phase, "what": what, "shape": list(node.attrs["shape"]),
                      "of": " of ".join([op_of(value), *made_from]) if value.kind == "op" else value.kind})
    return found


def op_of(node):
    """The op that computes ``node``'s value (a process outside its placement has an ``elsewhere`` stand-in)."""
    return node.attrs["op"] if node.op_name == "elsewhere" else node.op_name


results = {"world": world, "pipeline": pipeline(), "zero off": data_parallel(False), "zero on": data_parallel(True)}
if len(sys.argv) > 1:
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(results))
