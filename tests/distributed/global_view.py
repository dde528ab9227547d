"""toynet.utils.global_view in 2 processes, run by tests/test_distributed.py: OneFlow's save_load page.

Each rank holds its part of a graph-like state dict (split along dim 0, one weight along dim 1, the train
step broadcast, numbers among the tensors), makes it global with ``sbp=get_sbp``, saves its local part in a
directory of its own, loads it back and makes it global again. Every rank writes what it sees to
OUT/rank<r>.json (whole values, its parts, the errors); the test compares them with WHOLE, which rank 0 writes
too ("whole"), and with its shards (``cases.shard``).
"""

import sys
import warnings
from collections import OrderedDict
from pathlib import Path

import cases
import numpy as np

import toynet as flow

gv = flow.utils.global_view
r, n = flow.env.get_rank(), flow.env.get_world_size()
OUT = Path(sys.argv[1])
placement = flow.placement("cpu", ranks=list(range(n)))
# The whole values: the page's pipeline of four Linear layers, and a (5, 3) tensor cut unevenly (3 + 2 rows).
SHAPES = {"m_stage0.linear.weight": (8, 16), "m_stage0.linear.bias": (8,), "m_stage1.linear.weight": (4, 8),
          "m_stage1.linear.bias": (4,), "m_stage2.linear.weight": (2, 4), "m_stage2.linear.bias": (2,),
          "m_stage2.odd": (5, 3), "m_stage3.linear.weight": (1, 2), "m_stage3.linear.bias": (1,)}
WHOLE = {k: (np.arange(np.prod(s), dtype=np.float32).reshape(s) * 0.5 + i) for i, (k, s) in enumerate(SHAPES.items())}
WHOLE["System-Train-TrainStep"] = np.array([7], dtype=np.int64)
SPLIT = {"m_stage3.linear.weight": 1, "m_stage3.linear.bias": None, "System-Train-TrainStep": None}  # else 0


def part(name):
    dim = SPLIT.get(name, 0)
    return WHOLE[name] if dim is None else cases.shard(WHOLE[name], dim, n, r)


local_state = OrderedDict(
    module_pipeline=OrderedDict((k, flow.tensor(part(k))) for k in SHAPES),
    **{"System-Train-TrainStep": flow.tensor(part("System-Train-TrainStep")),
       "System-Train-Optimizer-0": {"param_groups": [{"lr": 0.001, "momentum": 0.0}]}})


def get_sbp(state_dict, tensor):   # as on the page
    if tensor is state_dict["System-Train-TrainStep"]:
        return flow.sbp.broadcast
    if tensor is state_dict["module_pipeline"]["m_stage3.linear.weight"]:
        return flow.sbp.split(1)
    if tensor is state_dict["module_pipeline"]["m_stage3.linear.bias"]:
        return flow.sbp.broadcast
    return flow.sbp.split(0)


def describe(state):
    tensors = {"System-Train-TrainStep": state["System-Train-TrainStep"], **state["module_pipeline"]}
    return {k: {"value": t.numpy(), "local": t.to_local().numpy(), "sbp": t.sbp[0].short, "shape": list(t.shape),
                "type": type(t).__name__} for k, t in tensors.items()}


def error(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


out = {"whole": WHOLE, "split": {k: SPLIT.get(k, 0) for k in WHOLE}} if r == 0 else {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    global_state = gv.to_global(local_state, placement=placement, sbp=get_sbp)
out["warnings"] = [str(w.message) for w in caught if str(w.message).startswith("to_global")]
out["global"] = describe(global_state)
out["types"] = [type(global_state).__name__, type(global_state["module_pipeline"]).__name__]
out["numbers"] = global_state["System-Train-Optimizer-0"]

# Saving: each rank its part, in a directory of its own (the page's state_dict_dir).
state_dict_dir = OUT / f"graph_save_load_global_{r}"
if r in placement.ranks:
    flow.save(gv.to_local(global_state, warn_on_non_tensor_leaf=False), state_dict_dir)
out["saved"] = sorted(p.name for p in state_dict_dir.iterdir())

# Loading: the parts back, made global with the same placement and sbp.
local_again = flow.load(state_dict_dir) if r in placement.ranks else None
out["loaded local"] = {k: v.numpy() for k, v in local_again["module_pipeline"].items()}
loaded = gv.to_global(local_again, placement=placement, sbp=get_sbp, warn_on_non_tensor_leaf=False)
out["loaded"] = describe(loaded)

# Boxing a whole global state dict: broadcast, then every part is the whole value.
out["broadcast"] = describe(gv.to_global(loaded, sbp=flow.sbp.broadcast, warn_on_non_tensor_leaf=False))


# The page's loading on a placement of some of the ranks (model_file_placement = ranks [0]): the others pass
# None, get rank 0's structure, and take part. Rank 0's parts are then the whole values on [0].
P0 = flow.placement("cpu", ranks=[0])
mine = flow.load(state_dict_dir) if r in P0.ranks else None
on0 = gv.to_global(mine, placement=P0, sbp=get_sbp, warn_on_non_tensor_leaf=False)
out["on [0]"] = {k: [t.placement.ranks, t.sbp[0].short, list(t.shape)] for k, t in on0["module_pipeline"].items()}
out["on [0] numbers"] = on0["System-Train-Optimizer-0"]
out["on [0] moved"] = describe(gv.to_global(on0, placement=placement, sbp=flow.sbp.broadcast,
                                            warn_on_non_tensor_leaf=False))

# Errors: a rank that passes something else; tensors that do not fit the sbp.
out["mismatch"] = error(lambda: gv.to_global(local_state if r == 0 else None, placement, flow.sbp.split(0)))
keys = {"a": flow.ones(2)} if r == 0 else {"b": flow.ones(2)}
out["other keys"] = error(lambda: gv.to_global(keys, placement, flow.sbp.split(0)))
uneven = {"w": flow.ones(2 + r, 3)}   # parts of 2 and 3 rows: toynet cuts 5 rows as 3 + 2
out["uneven"] = error(lambda: gv.to_global(uneven, placement, flow.sbp.split(0)))
cases.write(str(OUT), r, out)
