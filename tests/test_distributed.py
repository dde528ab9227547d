"""toynet.distributed in several processes: collectives, global tensors, DDP, and failures that never hang.

Each test starts real processes: through ``python -m toynet.distributed.launch``, by hand with OneFlow's
environment variables, or with the MPICH wheel's ``mpiexec``. The scripts they run are in
``tests/distributed/``; they write their results to JSON, compared here with one process's NumPy (or, for
gradients and training, with toynet's local tensors). These tests need MPI: without mpi4py and the MPICH
wheel they fail, saying how to install them (``pip install -e .[distributed]``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import toynet as flow

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "distributed"
_spec = importlib.util.spec_from_file_location("distributed_cases", SCRIPTS / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

TIMEOUT = 90  # seconds for one run: a hang is a failure, never a stuck test session
_OWN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def require_mpi() -> None:
    """Fail (not skip) when MPI is missing: these tests are the only check of the multi-process path."""
    missing = [name for name in ("mpi4py", "mpich") if not _installed(name)]
    if missing or not shutil.which("mpiexec", path=str(Path(sys.executable).parent)):
        pytest.fail(f"toynet.distributed's multi-process tests need MPI ({', '.join(missing) or 'mpiexec'} missing "
                    "here): run `pip install -e .[distributed]` (mpi4py and the MPICH wheel)")


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _OWN_VARIABLES and not k.startswith(("PMI_", "HYDRA_"))}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _finish(procs: list[subprocess.Popen], what: str) -> list[tuple[int, str, str]]:
    """Wait for ``procs`` (each in a session of its own); a run still going after TIMEOUT is killed and fails."""
    deadline = time.monotonic() + TIMEOUT
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            for q in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(q.pid, signal.SIGKILL)
            pytest.fail(f"{what} hung for {TIMEOUT} s")
        results.append((p.returncode, out, err))
    return results


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def launch(script: str, nproc: int, *args: str, **env: str) -> tuple[int, str, str, float]:
    """``python -m toynet.distributed.launch --nproc_per_node N script args``: (exit code, stdout, stderr, seconds)."""
    require_mpi()
    start = time.monotonic()
    cmd = [sys.executable, "-m", "toynet.distributed.launch", "--nproc_per_node", str(nproc), str(SCRIPTS / script),
           *args]
    [(code, out, err)] = _finish([_start(cmd, _env(**env))], f"the launch of {script}")
    return code, out, err, time.monotonic() - start


def launched_and_alone(script: str, nproc: int, tmp_path: Path) -> tuple[dict, list[dict]]:
    """Run ``script`` with ``nproc`` processes and then alone (its single-process reference): (the lone run's
    results, each rank's results)."""
    (tmp_path / "many").mkdir()
    code, _, err, _ = launch(script, nproc, str(tmp_path / "many"))
    assert code == 0, err
    (tmp_path / "one").mkdir()
    single = subprocess.run([sys.executable, str(SCRIPTS / script), str(tmp_path / "one")], cwd=ROOT, env=_env(),
                            capture_output=True, text=True, timeout=TIMEOUT)
    assert single.returncode == 0, single.stderr
    return cases.read(tmp_path / "one", 1)[0], cases.read(tmp_path / "many", nproc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ collectives


def check_collectives(out: Path, n: int) -> None:
    results = cases.read(out, n)
    for r, got in enumerate(results):
        for name, (_, reference) in cases.COLLECTIVES.items():
            want = reference(r, n)
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, (name, r)
            np.testing.assert_allclose(got[name], want, err_msg=f"{name} on rank {r}")
        assert got["mismatch"] == ("all_reduce: the processes passed arrays that do not match: " + ", ".join(
            f"rank {s}: ({s + 1},) float64" for s in range(n)))
        assert got["objects"] == [{"rank": s} for s in range(n)]
        assert got["env"] == [r, n, r]


def test_collectives_match_numpy_on_three_processes(tmp_path):
    code, out, err, _ = launch("collectives.py", 3, str(tmp_path))
    assert code == 0, err
    check_collectives(tmp_path, 3)


def test_processes_started_by_hand_with_oneflows_variables(tmp_path):
    """As OneFlow's pages start them: one terminal per rank, MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK."""
    require_mpi()
    port = str(_free_port())
    procs = [_start([sys.executable, str(SCRIPTS / "collectives.py"), str(tmp_path)],
                    _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(r), LOCAL_RANK=str(r)))
             for r in (1, 0)]  # rank 1 first: it waits for rank 0 to listen
    for code, _, err in _finish(procs, "two processes started by hand"):
        assert code == 0, err
    check_collectives(tmp_path, 2)


def test_the_mpich_wheels_mpiexec_runs_it_too(tmp_path):
    require_mpi()
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    [(code, _, err)] = _finish([_start([mpiexec, "-n", "2", sys.executable, str(SCRIPTS / "collectives.py"),
                                        str(tmp_path)], _env())], "mpiexec -n 2")
    assert code == 0, err
    check_collectives(tmp_path, 2)


# ------------------------------------------------------------------------------------------ global tensors


@pytest.fixture(scope="module")
def global_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("global")
    code, _, err, _ = launch("global_ops.py", 2, str(out))
    assert code == 0, err
    return cases.read(out, 2)


def check_layout(results: list[dict], name: str, value: np.ndarray, sbp: str) -> None:
    """Every rank sees the logical ``value``, laid out as ``sbp`` in its local part."""
    n = len(results)
    for r, got in enumerate(results):
        assert got[name]["sbp"] == {"S0": "S(0)", "S1": "S(1)"}.get(sbp, sbp), (name, got[name]["sbp"])
        np.testing.assert_allclose(got[name]["value"], value, rtol=1e-5, atol=1e-5, err_msg=name)
        if sbp in ("S0", "S1"):
            np.testing.assert_allclose(got[name]["local"], cases.shard(value, int(sbp[1]), n, r), rtol=1e-5, atol=1e-5)
        elif sbp == "B":
            np.testing.assert_allclose(got[name]["local"], value, rtol=1e-5, atol=1e-5)
    if sbp == "P":
        np.testing.assert_allclose(sum(got[name]["local"] for got in results), value, rtol=1e-5, atol=1e-5)


def test_creation_with_placement_agrees_on_every_rank(global_run):
    value = global_run[0]["randn S0"]["value"]   # the ranks seeded their generators differently
    check_layout(global_run, "randn S0", value, "S0")
    check_layout(global_run, "zeros B", np.zeros((2, 3)), "B")


@pytest.mark.parametrize("src", ["S0", "S1", "B", "P"])
@pytest.mark.parametrize("dst", ["S0", "S1", "B", "P"])
def test_every_boxing_path_keeps_the_value(global_run, src, dst):
    check_layout(global_run, f"box {src} -> {dst}", cases.data()["T"], dst)


@pytest.mark.parametrize("name", list(cases.OPS))
def test_op_signatures_give_the_rule_s_sbp_and_the_value_of_one_process(global_run, name):
    inputs, op, sbp = cases.OPS[name]
    data = cases.data()
    reference = op(*(flow.tensor(data[a]) for a, _ in inputs)).numpy()
    check_layout(global_run, f"op {name}", reference, sbp)


@pytest.mark.parametrize("name", list(cases.GRADS))
def test_gradients_flow_through_boxing_and_keep_each_leaf_s_layout(global_run, name):
    inputs, loss_of = cases.GRADS[name]
    data = cases.data()
    leaves = [flow.tensor(data[a], requires_grad=True) for a, _ in inputs]
    loss = loss_of(*leaves)
    loss.backward()
    for got in global_run:
        assert got[f"grad {name}"]["loss"] == pytest.approx(loss.item(), rel=1e-5)
    for i, ((_, sbp), leaf) in enumerate(zip(inputs, leaves)):
        check_layout([{"g": got[f"grad {name}"]["grads"][i]} for got in global_run], "g", leaf.grad.numpy(), sbp)


def test_a_local_part_made_global_gets_its_own_gradient(global_run):
    for got in global_run:
        np.testing.assert_allclose(got["to_global grad"]["grad"], 2 * got["to_global grad"]["part"], rtol=1e-6)


def test_training_a_global_model_matches_one_process(global_run):
    data = cases.data()
    w, b = flow.zeros(4, 6, requires_grad=True), flow.zeros(6, requires_grad=True)
    opt = flow.optim.SGD([w, b], lr=0.1, momentum=0.9)
    for _ in range(3):
        loss = ((flow.tensor(data["A"]) @ w + b - flow.tensor(data["C"])) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    check_layout([got["sgd"] for got in global_run], "w", w.numpy(), "B")
    check_layout([got["sgd"] for got in global_run], "b", b.numpy(), "B")
    assert all(got["sgd"]["grad sbp"] == "B" for got in global_run)  # partial sums all-reduced into the leaf


def test_a_global_tensor_prints_as_oneflow_prints_it(global_run):
    data = cases.data()
    want = data["A"] @ data["W"]
    for got in global_run:
        text = got["repr"]
        assert re.sub(r" *-?\d+\.\d+", "#", text) == (   # numbers as #, with the spaces that align them
            "tensor([" + ",\n        ".join(["[" + ",".join(["#"] * 6) + "]"] * 5) + "],\n"
            '       placement=toynet.placement(type="cpu", ranks=[0, 1]),\n'
            "       sbp=(toynet.sbp.split(dim=0),), dtype=toynet.float32,\n"
            "       grad_fn=<MatmulBackward>)")
        np.testing.assert_allclose(np.array(re.findall(r"-?\d+\.\d+", text), float).reshape(5, 6), want, atol=1e-4)


def test_random_ops_draw_the_same_numbers_everywhere(global_run):
    value = global_run[0]["dropout"]["value"]
    check_layout(global_run, "dropout", value, "S0")
    kept = value != 0
    np.testing.assert_allclose(value[kept], 2 * cases.data()["C"][kept], rtol=1e-6)


def test_clear_errors_and_the_interpreter_steps_aside(global_run):
    for got in global_run:
        assert got["error mixed"].startswith("add: got global and local tensors together")
        assert "x.to_local()" in got["error mixed"]
        assert got["error local placement"].startswith("a local tensor has no placement")
        assert got["interpreter gone"]


def test_a_placement_on_some_ranks_only_and_a_move_between_placements(global_run):
    A = cases.data()["A"]
    for r, got in enumerate(global_run):
        subset = got["subset"]
        np.testing.assert_array_equal(subset["value"], A)            # every rank reads the value...
        assert subset["local"] == (list(A.shape) if r == 0 else [0])  # ...only rank 0 holds it
        np.testing.assert_array_equal(subset["moved"], 2 * A)
        want = cases.shard(2 * A, 0, 1, 0) if r == 1 else np.zeros((0,), np.float32)
        np.testing.assert_array_equal(subset["moved local"], want)


# ------------------------------------------------------------------------------------------ DDP


def test_ddp_on_halves_equals_one_process_on_the_whole_batch(tmp_path):
    one, two = launched_and_alone("ddp.py", 2, tmp_path)
    assert not all(np.allclose(a, b) for a, b in zip(two[0]["before"], two[1]["before"]))  # different seeds...
    for got in two:                                                                    # ...the same model after
        for mine, reference in zip(got["after"], one["after"]):
            np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
        for mine, reference in zip(got["grads"], one["grads"]):
            np.testing.assert_allclose(mine, reference, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.mean([got["losses"] for got in two], axis=0), one["losses"], rtol=1e-5)


# ------------------------------------------------------------------------------------------ nn.Graph


def test_a_global_graph_trains_as_one_process_does_whatever_the_layout(tmp_path):
    """nn.Graph picks each op's SBP signature and inserts boxing: data parallelism (the gradients' P->B is the
    all-reduce), model parallelism and a partial-sum layer all train exactly as one process on whole batches."""
    one, two = launched_and_alone("graph_train.py", 2, tmp_path)
    for layout in ("data", "model", "rows"):
        for got in two:
            np.testing.assert_allclose(got[layout]["losses"], one[layout]["losses"], rtol=1e-5)
            for mine, reference in zip(got[layout]["after"], one[layout]["after"]):
                np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
            assert got[layout]["compiled"] == 1
    assert one["data"]["losses"][0] > one["data"]["losses"][-1]           # it trains
    data, model, rows = (two[0][k] for k in ("data", "model", "rows"))
    assert data["sbp"] == ["B"] * 4 and "P->B" in data["boxing"]          # the gradients' all-reduce
    assert model["sbp"] == ["S(0)", "S(0)", "B", "B"] and "S(1)->B" in model["boxing"]
    assert rows["sbp"] == ["B", "B", "S(1)", "B"]
    assert one["data"]["save"] == "saved" and "every process would write the same directory" in data["save"]
    for got in two:    # a global tensor captured by build(): each process's constant is its own part
        np.testing.assert_array_equal(got["captured"], 2 * np.arange(16, dtype=np.float32).reshape(8, 2))
    printed = data["printed"]
    assert "placement=(toynet.placement(type=\"cpu\", ranks=[0, 1]))" in printed
    # (the fast path's first op is its fused linear, the lesson path's a matmul)
    assert re.search(r"OPERATOR: model\.0-(matmul|linear)-\d+\(_Train_\d+-input_0/out:\(sbp=\(S\(0\)\), size=\(8, 3\)",
                     printed)
    assert re.search(r"OPERATOR: model\.0\.weight-boxing-\d+\(.*sbp=\(P\).*-> \(.*sbp=\(B\)", printed)


def test_pipeline_stages_with_micro_batches_and_zero_train_as_one_process_does(tmp_path):
    """set_stage on two placements (rank 0, rank 1) with 2 micro-batches equals one process on whole batches;
    enable_zero splits Adam's moments over the ranks (reduce-scatter in, all-gather out) and changes nothing."""
    one, two = launched_and_alone("graph_stages.py", 2, tmp_path)
    for case in ("pipeline 1", "pipeline 2", "zero off", "zero on"):
        for got in two:
            np.testing.assert_allclose(got[case]["losses"], one[case]["losses"], rtol=1e-5)
            for mine, reference in zip(got[case]["after"], one[case]["after"]):
                np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
    for mine, reference in zip(one["pipeline 2"]["after"], one["pipeline 1"]["after"]):   # 2 micro-batches = 1 batch
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-7)
    assert np.shape(one["pipeline 2"]["losses"]) == (3, 2)                                # a loss per micro-batch
    assert two[0]["pipeline 2"]["local"] == [[5, 6], [5], [0], [0]]                       # each stage on its rank
    assert two[1]["pipeline 2"]["local"] == [[0], [0], [3, 5], [3]]
    assert "stage_id=0" in two[0]["pipeline 2"]["repr"]
    slots = two[0]["zero on"]["slots"]
    assert slots["0.exp_avg"] == ["S(0)", [4, 4]] and slots["3.exp_avg"] == ["B", [2]]    # (2 < shard_min_size)
    assert {"P->S(0)", "S(0)->B"} <= set(two[0]["zero on"]["boxing"])
    assert "P->S(0)" not in two[0]["zero off"]["boxing"]


def test_a_graph_on_a_grid_of_four_processes_trains_as_one_process_does(tmp_path):
    """nn.Graph with 2-D SBP: (B, S(0)) inputs, (S(0), B) targets, (B, B) weights on a 2 x 2 grid; the lowering
    derives each op's signature axis by axis and boxes row then column; training equals a 1 x 1 grid's."""
    one, four = launched_and_alone("graph_2d.py", 4, tmp_path)
    for got in four:
        np.testing.assert_allclose(got["losses"], one["losses"], rtol=1e-5)
        for mine, reference in zip(got["after"], one["after"]):
            np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
        assert got["local"] == [[4, 8], [4], [2, 4], [2]]                  # (B, B): every process holds it all
        assert "boxing[P, P->B, B: 2-D: rows, then columns]" in got["boxing"]      # the gradients, on both axes


def test_global_view_saves_and_loads_a_split_state_dict_as_the_save_load_page_does(tmp_path):
    """toynet.utils.global_view.to_global / to_local on a graph-like state dict split over 2 processes (one weight
    along dim 1, the train step broadcast, numbers among the tensors), each rank's part saved in its own directory
    and loaded back: the whole values every time, whatever the route (global_view.py)."""
    code, _, err, _ = launch("global_view.py", 2, str(tmp_path))
    assert code == 0, err
    two = cases.read(tmp_path, 2)
    whole, split = two[0]["whole"], two[0]["split"]
    for name in ("global", "loaded"):
        for r, got in enumerate(two):
            for key, want in whole.items():
                seen = got[name][key]
                np.testing.assert_array_equal(seen["value"], want, err_msg=f"{name} {key} on rank {r}")
                assert seen["shape"] == list(want.shape) and seen["type"] == "GlobalTensor", (name, key)
                dim = split[key]
                assert seen["sbp"] == ("B" if dim is None else f"S({dim})"), (name, key, seen["sbp"])
                np.testing.assert_array_equal(seen["local"], want if dim is None else cases.shard(want, dim, 2, r))
    for r, got in enumerate(two):
        for key, want in whole.items():
            np.testing.assert_array_equal(got["broadcast"][key]["local"], want)   # boxed to B: every part is whole
            assert got["broadcast"][key]["sbp"] == "B"
        assert got["types"] == ["OrderedDict", "OrderedDict"]
        assert got["numbers"] == {"param_groups": [{"lr": 0.001, "momentum": 0.0}]}
        assert got["saved"] == ["arrays.npz", "manifest.json", "structure.json"]   # a directory per rank
        for key, part in got["loaded local"].items():
            dim = split[key]
            np.testing.assert_array_equal(part, whole[key] if dim is None else cases.shard(whole[key], dim, 2, r))
        for key, (ranks, sbp, shape) in got["on [0]"].items():     # a placement of rank 0 only (the page's way)
            part0 = whole[key] if split[key] is None else cases.shard(whole[key], split[key], 2, 0)
            assert (ranks, shape) == ([0], list(part0.shape)), key
            assert sbp == ("B" if split[key] is None else f"S({split[key]})"), key
            np.testing.assert_array_equal(got["on [0] moved"][key]["local"], part0)
        assert got["mismatch"].startswith("ValueError: to_global: every process must pass the same structure")
        assert "rank 1 passed None" in got["mismatch"]
        assert got["uneven"].startswith(f"RuntimeError: to_global of input['w'] (local shape ({2 + r}, 3)")


def test_2d_sbp_over_a_grid_of_four_processes(tmp_path):
    """placement ranks=[[0, 1], [2, 3]]: (B, S(0)) gives each row the whole value and each column the same half;
    matmul's signature is derived axis by axis ((B, S(0)) x (S(1), B) -> (S(1), S(0))); 2-D boxing and the 2-D SBP
    page's model give the values one process computes."""
    code, _, err, _ = launch("sbp_2d.py", 4, str(tmp_path))
    assert code == 0, err
    got = cases.read(tmp_path, 4)
    A = np.arange(24, dtype=np.float32).reshape(4, 6)
    W = np.arange(48, dtype=np.float32).reshape(6, 8) / 10
    for r, g in enumerate(got):
        row, column = divmod(r, 2)
        np.testing.assert_array_equal(g["a local"], cases.shard(A, 0, 2, column))        # (B, S(0))
        np.testing.assert_allclose(g["y"], A @ W, rtol=1e-5)
        assert g["y sbp"] == ["S(1)", "S(0)"]
        np.testing.assert_allclose(g["y local"], cases.shard(cases.shard(A @ W, 1, 2, row), 0, 2, column), rtol=1e-5)
        np.testing.assert_allclose(g["z local"], cases.shard(cases.shard(A @ W, 1, 2, row), 1, 2, column), rtol=1e-5)
        np.testing.assert_allclose(g["p"], A.sum(axis=1), rtol=1e-6)
        assert g["pred sbp"] == ["B", "S(0)"]
        weight, bias, weight2, bias2 = g["params"]
        want = np.maximum(g["x"] @ weight.T + bias, 0) @ weight2.T + bias2
        np.testing.assert_allclose(g["pred"], want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ failures


def test_a_rank_that_raises_stops_the_run_naming_it(tmp_path):
    code, _, err, seconds = launch("fail.py", 2, "raise")
    assert code == 1 and seconds < 30
    assert "ValueError: rank 1 cannot go on" in err
    assert "toynet.distributed: rank 1 of 2 failed with ValueError: rank 1 cannot go on" in err
    assert "toynet.distributed: rank 0 stops because rank 1 failed: ValueError: rank 1 cannot go on" in err
    assert err.rstrip().endswith("toynet.distributed.launch: rank 1 failed (exit code 1)")


def test_a_killed_rank_stops_the_run(tmp_path):
    code, _, err, seconds = launch("fail.py", 2, "kill")
    assert code == 128 + signal.SIGKILL and seconds < 30
    assert "rank 0 stops because rank 1 failed: its process ended without a word" in err
    assert "toynet.distributed.launch: rank 1 failed (killed by SIGKILL)" in err


def test_a_rank_that_leaves_early_is_an_error_not_a_hang(tmp_path):
    code, _, err, seconds = launch("fail.py", 2, "early", TOYNET_DIST_GRACE="1")
    assert code == 1 and seconds < 30
    assert "rank 0 waits in all_reduce, but rank 1 has ended its program" in err
    assert "toynet.distributed.launch: rank 0 failed (exit code 1)" in err


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_whose_peers_never_come_says_so(rank):
    port = str(_free_port())
    [(code, _, err)] = _finish([_start([sys.executable, str(SCRIPTS / "fail.py"), "raise"], _env(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank), TOYNET_DIST_TIMEOUT="2"))],
        "a lonely rank")
    assert code == 1
    if rank == 0:
        assert f"rank 0 waited 2 s at 127.0.0.1:{port}, and only ranks [0] of WORLD_SIZE=2 came" in err
    else:
        assert f"rank 1 could not reach rank 0 at MASTER_ADDR:MASTER_PORT = 127.0.0.1:{port} within 2 s" in err
