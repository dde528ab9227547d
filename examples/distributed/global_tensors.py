"""Global tensors on two processes (notebook 10, section 10.2). Every process runs this same program:

    python -m toynet.distributed.launch --nproc_per_node 2 examples/distributed/global_tensors.py [OUT_DIR]

Each line a process prints starts with its rank, ``[rank 0]`` or ``[rank 1]``. With ``OUT_DIR``, each process
also saves the parts it held to ``OUT_DIR/rank<r>.npz``, for the notebook to draw.
"""

import sys

import numpy as np

import toynet as flow

rank = flow.env.get_rank()
placement = flow.placement("cpu", ranks=[0, 1])
S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast
held = {}


def say(*words):
    """Print with this process's rank in front of every line, in one write (the processes share one terminal:
    two writes of one line could be split by the other process's)."""
    text = " ".join(str(w) for w in words)
    sys.stdout.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
    sys.stdout.flush()


# One logical 4 x 6 matrix, laid out three ways. flow.tensor(..., placement=, sbp=) takes rank 0's values.
M = np.arange(24, dtype=np.float32).reshape(4, 6)
for name, sbp in {"S(0)": S0, "S(1)": S1, "B": B}.items():
    m = flow.tensor(M, placement=placement, sbp=sbp)
    held[name] = m.to_local().numpy()
    say(f"M as {name:4s} shape {tuple(m.shape)}, sbp {m.sbp}, local part {tuple(m.to_local().shape)}")
say("my part of M as S(0):\n" + str(held["S(0)"].astype(int)))

# S(0) x B -> S(0): each process multiplies its rows by the whole weight; no communication.
x = flow.tensor(M, placement=placement, sbp=S0)
w = flow.tensor(np.ones((6, 2), dtype=np.float32), placement=placement, sbp=B)
y = x @ w
held["S(0) x B"] = y.to_local().numpy()
say(f"x S(0) @ w B -> {y.sbp[0].short} of shape {tuple(y.shape)}, my rows:", held["S(0) x B"].astype(int).tolist())

# S(1) x S(0) -> P: x's columns meet w's rows; each process's product is a summand of M.
X = np.stack([np.arange(4), np.ones(4)], axis=1).astype(np.float32)       # (4, 2)
W = np.stack([np.full(6, 6), np.arange(6)]).astype(np.float32)            # (2, 6); X @ W == M
p = flow.tensor(X, placement=placement, sbp=S1) @ flow.tensor(W, placement=placement, sbp=S0)
held["P"] = p.to_local().numpy()
say(f"X S(1) @ W S(0) -> {p.sbp[0].short}, my summand:\n" + str(held["P"].astype(int)))
q = p.to_global(sbp=B)                                                    # all-reduce: the sum, everywhere
held["P to B"] = q.to_local().numpy()
say(f"to_global(sbp=B) -> {q.sbp[0].short}: my copy equals M: {np.array_equal(held['P to B'], M)}")

# Backward: a broadcast weight used with split rows gets partial gradients, all-reduced into w.grad.
w = flow.tensor(np.ones((6, 2), dtype=np.float32), placement=placement, sbp=B, requires_grad=True)
(x @ w).sum().backward()
held["w.grad"] = w.grad.to_local().numpy()
say(f"w.grad is {w.grad.sbp[0].short}; its first column is M's column sums:", held["w.grad"][:, 0].astype(int).tolist())

if len(sys.argv) > 1:
    np.savez(f"{sys.argv[1]}/rank{rank}.npz", **held)
