"""What the multi-process scripts compute and what tests/test_distributed.py checks it against.

The scripts beside this file run in several processes (``python -m toynet.distributed.launch``, processes
started by hand, ``mpiexec``); each writes its results to ``OUT/rank<r>.json``. This module is shared by
both sides, so the inputs each rank makes and the single-process references come from one place:

* :data:`COLLECTIVES`: name -> (what rank ``r`` of ``n`` calls, the NumPy reference: rank ``r``'s result
  computed from every rank's input in one process);
* :data:`OPS`: global-tensor op cases: the SBP of each input, the op (a function of toynet tensors, run on
  global tensors by the script and on local ones by the test), the SBP the rule must give.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

RANK_SEEDED = 1000  # the scripts seed each rank's generator with RANK_SEEDED + rank: creation must still agree


def shard_sizes(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def shard(a: np.ndarray, axis: int, parts: int, index: int) -> np.ndarray:
    start = sum(shard_sizes(a.shape[axis], parts)[:index])
    return np.take(a, range(start, start + shard_sizes(a.shape[axis], parts)[index]), axis=axis)


# ------------------------------------------------------------------------------------------ collectives


def _x(r: int) -> np.ndarray:
    return np.arange(12, dtype=np.float32).reshape(3, 4) * (r + 1) + r


def _rows(r: int) -> np.ndarray:
    return np.full((r + 1, 2), r, dtype=np.float32)


def _cols(r: int) -> np.ndarray:
    return np.arange(3 * (r + 2), dtype=np.int64).reshape(3, r + 2) + 100 * r


def _square(r: int) -> np.ndarray:
    return np.arange(15, dtype=np.float64).reshape(5, 3) * (r + 1)


def _wide(r: int) -> np.ndarray:
    return np.arange(14, dtype=np.float32).reshape(2, 7) - r


def _tall(r: int) -> np.ndarray:
    return np.arange((r + 2) * 5, dtype=np.float32).reshape(r + 2, 5) + 10 * r


COLLECTIVES = {
    "all_reduce_sum": (lambda c, r, n: c.all_reduce(_x(r)), lambda r, n: sum(_x(s) for s in range(n))),
    "all_reduce_mean": (lambda c, r, n: c.all_reduce(_x(r), op="mean"), lambda r, n: sum(_x(s) for s in range(n)) / n),
    "all_reduce_max": (lambda c, r, n: c.all_reduce(_x(r) * (-1) ** r, op="max"),
                       lambda r, n: np.max([_x(s) * (-1) ** s for s in range(n)], axis=0)),
    "all_reduce_int64": (lambda c, r, n: c.all_reduce(np.full(2, r + 1, np.int64)),
                         lambda r, n: np.full(2, n * (n + 1) // 2, np.int64)),
    "all_reduce_float16": (lambda c, r, n: c.all_reduce(np.full(3, 0.5 * (r + 1), np.float16)),
                           lambda r, n: np.full(3, 0.5 * n * (n + 1) / 2, np.float16)),
    "all_reduce_0d": (lambda c, r, n: c.all_reduce(np.array(r + 1.0)), lambda r, n: np.array(n * (n + 1) / 2)),
    "all_gather_rows": (lambda c, r, n: c.all_gather(_rows(r), axis=0),
                        lambda r, n: np.concatenate([_rows(s) for s in range(n)], axis=0)),
    "all_gather_cols": (lambda c, r, n: c.all_gather(_cols(r), axis=-1),
                        lambda r, n: np.concatenate([_cols(s) for s in range(n)], axis=1)),
    "reduce_scatter_rows": (lambda c, r, n: c.reduce_scatter(_square(r), axis=0),
                            lambda r, n: shard(sum(_square(s) for s in range(n)), 0, n, r)),
    "reduce_scatter_cols": (lambda c, r, n: c.reduce_scatter(_wide(r), axis=1),
                            lambda r, n: shard(sum(_wide(s) for s in range(n)), 1, n, r)),
    "all_to_all": (lambda c, r, n: c.all_to_all(_tall(r), split_axis=1, concat_axis=0),
                   lambda r, n: np.concatenate([shard(_tall(s), 1, n, r) for s in range(n)], axis=0)),
    "broadcast": (lambda c, r, n: c.broadcast(np.arange(4.0) * 7 if r == n - 1 else None, root=n - 1),
                  lambda r, n: np.arange(4.0) * 7),
    "broadcast_0d": (lambda c, r, n: c.broadcast(np.array(2.5 * (r + 1)), root=0), lambda r, n: np.array(2.5)),
    "broadcast_bool": (lambda c, r, n: c.broadcast(np.array([True, False, True]) if r == 0 else np.zeros(1)),
                       lambda r, n: np.array([True, False, True])),
}


# ------------------------------------------------------------------------------------------ global ops


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(24)
    return {"A": rng.standard_normal((5, 4)).astype(np.float32), "W": rng.standard_normal((4, 6)).astype(np.float32),
            "b": rng.standard_normal(6).astype(np.float32), "C": rng.standard_normal((5, 6)).astype(np.float32),
            "T": np.arange(30, dtype=np.float32).reshape(5, 6), "V": rng.standard_normal((2, 5, 4)).astype(np.float32)}


#: name -> (input names and their SBP, the op on toynet tensors, the SBP the signature gives)
OPS = {
    "matmul S0 x B": ((("A", "S0"), ("W", "B")), lambda a, w: a @ w, "S0"),
    "matmul B x S1": ((("A", "B"), ("W", "S1")), lambda a, w: a @ w, "S1"),
    "matmul S1 x S0": ((("A", "S1"), ("W", "S0")), lambda a, w: a @ w, "P"),
    "matmul B x B": ((("A", "B"), ("W", "B")), lambda a, w: a @ w, "B"),
    "matmul P x B": ((("A", "P"), ("W", "B")), lambda a, w: a @ w, "P"),
    "matmul S0 x S1 (boxes w)": ((("A", "S0"), ("W", "S1")), lambda a, w: a @ w, "S0"),
    "batched matmul S1 x B": ((("V", "S1"), ("W", "B")), lambda v, w: v @ w, "S1"),
    "add S0 + bias B": ((("C", "S0"), ("b", "B")), lambda c, b: c + b, "S0"),
    "add S1 + bias S0": ((("C", "S1"), ("b", "S0")), lambda c, b: c + b, "S1"),
    "add P + P": ((("C", "P"), ("C", "P")), lambda x, y: x + y, "P"),
    "mul P * B": ((("C", "P"), ("C", "B")), lambda x, y: x * y, "P"),
    "mul P * 3": ((("C", "P"),), lambda x: x * 3, "P"),
    "add P + 1 (boxes to B)": ((("C", "P"),), lambda x: x + 1, "B"),
    "mul S0 * S1 (boxes)": ((("C", "S0"), ("C", "S1")), lambda x, y: x * y, "S0"),
    "relu P (boxes)": ((("C", "P"),), lambda x: x.relu(), "B"),
    "exp S1": ((("C", "S1"),), lambda x: x.exp(), "S1"),
    "sum over split dim": ((("C", "S0"),), lambda x: x.sum(0), "P"),
    "sum over other dim": ((("C", "S0"),), lambda x: x.sum(1), "S0"),
    "sum all": ((("C", "S1"),), lambda x: x.sum(), "P"),
    "mean over split dim": ((("C", "S0"),), lambda x: x.mean(), "P"),
    "mean keepdim S1": ((("C", "S1"),), lambda x: x.mean(1, keepdim=True), "P"),
    "mean other dim": ((("C", "S1"),), lambda x: x.mean(0), "S0"),
    "transpose": ((("C", "S0"),), lambda x: x.T, "S1"),
    "reshape keeps rows": ((("V", "S1"),), lambda v: v.reshape(2, 5, 2, 2), "S1"),
    "reshape mixes rows (fallback)": ((("C", "S0"),), lambda x: x.reshape(30), "B"),
    "getitem (fallback)": ((("C", "S0"),), lambda x: x[1:4], "B"),
    "cast": ((("C", "S0"),), lambda x: x.to("float64"), "S0"),
    "softmax (fallback)": ((("C", "S0"),), lambda x: x.softmax(1), "B"),
}

#: name -> (input names and SBPs, the loss on toynet tensors): gradients checked against one process.
GRADS = {
    "data parallel": ((("A", "S0"), ("W", "B"), ("b", "B")), lambda a, w, b: ((a @ w + b) ** 2).mean()),
    "model parallel": ((("A", "B"), ("W", "S1")), lambda a, w: (a @ w).tanh().sum()),
    "split contraction": ((("A", "S1"), ("W", "S0")), lambda a, w: ((a @ w) * (a @ w)).sum()),
    "elementwise and reductions": ((("C", "S1"), ("b", "B")), lambda c, b: (c * b).exp().mean(0).sum()),
}


def encode(value: object) -> object:
    """JSON for a result: arrays as {"dtype", "shape", "data"}."""
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        return {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.astype(np.float64).ravel().tolist()
                if a.dtype.kind != "b" else a.ravel().tolist()}
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    return value


def decode(value: object) -> object:
    if isinstance(value, dict) and set(value) == {"dtype", "shape", "data"}:
        return np.array(value["data"]).astype(np.dtype(value["dtype"])).reshape(value["shape"])
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def write(out: str, rank: int, results: dict) -> None:
    Path(out, f"rank{rank}.json").write_text(json.dumps(encode(results)))


def read(out: str | Path, n: int) -> list[dict]:
    return [decode(json.loads(Path(out, f"rank{r}.json").read_text())) for r in range(n)]
