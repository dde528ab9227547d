"""Data-parallel training of a small MLP on the handwritten digits that ship with toynet (notebook 10, 10.4).

    python examples/distributed/ddp_digits.py --steps 100                                   # one process
    python -m toynet.distributed.launch --nproc_per_node 2 examples/distributed/ddp_digits.py --steps 100

Every process builds the same model and wraps it in ``nn.parallel.DistributedDataParallel``. The batches come
from one seeded shuffle, the same on every process, and each process trains on its share of every batch (with
one process, on the whole batch). Each line printed starts with the rank. With ``--out DIR``, rank 0 saves the
trained parameters, the losses and the timings to ``DIR/ddp-<number of processes>.npz``.
"""

import argparse
import sys
import time

import numpy as np

import toynet as flow
from toynet import nn
from toynet.distributed import comm
from toynet.vision.datasets import Digits

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch", type=int, default=128, help="images a step, over all the processes")
parser.add_argument("--hidden", type=int, default=64, help="width of the hidden layer")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", help="a folder for rank 0's results")
args = parser.parse_args()
flow.set_fast_path(False)           # the lesson path, whatever TOYNET_FAST says: the same engine for every run
rank, world = flow.env.get_rank(), flow.env.get_world_size()


def say(text):
    """Print with the rank in front, in one write (the processes share one terminal)."""
    sys.stdout.write(f"[rank {rank}] {text}\n")
    sys.stdout.flush()


def images(dataset):
    return dataset.data.reshape(len(dataset), 64).astype(np.float32) / 255, np.array(dataset.targets)


(X, Y), (X_held, Y_held) = images(Digits(train=True)), images(Digits(train=False))
flow.manual_seed(0)
model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
model = nn.parallel.DistributedDataParallel(model)    # rank 0's weights everywhere; gradients averaged
opt = flow.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
mine = comm.shard_slice(args.batch, world, rank)          # this process's rows of every batch
say(f"{world} process(es); I train on rows {mine.start}..{mine.stop - 1} of each batch of {args.batch}")

rng, order, losses, seconds = np.random.default_rng(0), np.empty(0, dtype=int), [], []
for step in range(args.steps):
    if len(order) < args.batch:                           # a new epoch: one shuffle, the same everywhere
        order = rng.permutation(len(X))
    batch, order = order[:args.batch], order[args.batch:]
    start = time.perf_counter()
    loss = loss_fn(model(flow.tensor(X[batch[mine]])), flow.tensor(Y[batch[mine]]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    seconds.append(time.perf_counter() - start)
    losses.append(float(comm.all_reduce(np.array(loss.item()), op="mean")))   # the whole batch's loss

# Held-out accuracy: each process scores its share of the images; one all-reduce adds up the counts.
share = comm.shard_slice(len(X_held), world, rank)
with flow.no_grad():
    guesses = model(flow.tensor(X_held[share])).numpy().argmax(axis=1)
right = int(comm.all_reduce(np.array((guesses == Y_held[share]).sum())))
say(f"scored held-out images {share.start}..{share.stop - 1}")

# What the gradients' all-reduce costs alone: the same arrays, averaged as DDP does, 50 times.
grads = [p.grad.numpy() for p in model.parameters()]
comm.barrier()
start = time.perf_counter()
for _ in range(50):
    for g in grads:
        comm.all_reduce(g, op="mean")
all_reduce = (time.perf_counter() - start) / 50
if rank == 0:
    say(f"loss of the whole batch: first {losses[0]:.3f}, last {losses[-1]:.3f}")
    say(f"held-out accuracy: {right / len(X_held):.1%} ({right} of {len(X_held)})")
    say(f"a step: {np.median(seconds) * 1e3:.1f} ms (median of {args.steps}); all-reduce of the gradients alone, "
        f"{sum(g.size for g in grads):,} numbers: {all_reduce * 1e3:.2f} ms")
    if args.out:
        np.savez(f"{args.out}/ddp-{world}.npz", losses=np.array(losses), seconds=np.array(seconds),
                 all_reduce=all_reduce, right=right, **{n: p.numpy() for n, p in model.named_parameters()})
