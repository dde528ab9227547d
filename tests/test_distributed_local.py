"""toynet.distributed in one process: what needs no MPI (placements, SBP, rules, global tensors of a run of
size one, the launcher's bookkeeping, the PMI answers). tests/test_distributed.py runs several processes."""

from __future__ import annotations

import copy
import gc
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import toynet as flow
from toynet import mode
from toynet.distributed import boxing, comm, launch, pmi, sbp_rules, world
placement_module = sys.modules["toynet.distributed.placement"]   # (the package attribute is the class)
from toynet.distributed.global_tensor import GlobalTensor
from toynet.ops import OPS

ROOT = Path(__file__).resolve().parent.parent

S0, S1, B, P = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast, flow.sbp.partial_sum
ONE = flow.placement("cpu", [0])


@pytest.fixture(autouse=True)
def _interpreter_leaves_with_the_last_global_tensor():
    """Every test's global tensors are gone at its end, and with them the global interpreter."""
    yield
    gc.collect()
    stuck = mode.tracer is not None
    mode.tracer = None   # (a failed test's traceback may still hold global tensors: do not leak into others)
    assert not stuck, "the global interpreter stayed installed after the last global tensor died"


# ------------------------------------------------------------------------------------------ placement, sbp


def test_placement_prints_compares_and_keeps_its_hierarchy():
    p = flow.placement("cpu", [0, 1])
    assert repr(p) == 'toynet.placement(type="cpu", ranks=[0, 1])'
    assert p.ranks == [0, 1] and p.hierarchy == flow.Size([2]) and p.type == p.device_type == "cpu"
    assert p == flow.placement(type="cpu", ranks=(0, 1)) and p != flow.placement("cpu", [1, 0])
    assert len({p, flow.placement("cpu", range(2))}) == 1
    grid = flow.placement("cpu", [[0, 1], [2, 3]])
    assert grid.ranks == [[0, 1], [2, 3]] and grid.hierarchy == flow.Size([2, 2])
    assert repr(grid) == 'toynet.placement(type="cpu", ranks=[[0, 1], [2, 3]])'
    assert flow.placement.all("cpu") == ONE == flow.env.all_device_placement("cpu")


@pytest.mark.parametrize("ranks, error", [([0, 0], "twice"), ([[0, 1], [2]], "same shape"), ([], "non-empty"),
                                          (["a"], "process numbers"), ([-1], "process numbers")])
def test_placement_refuses_bad_ranks(ranks, error):
    with pytest.raises((ValueError, TypeError), match=error):
        flow.placement("cpu", ranks)


def test_a_cuda_placement_without_a_gpu_computes_on_the_cpu_and_says_so_once(monkeypatch):
    if flow.cuda.is_available():
        assert flow.placement("cuda", [0]).device().type == "cuda"
    else:
        monkeypatch.setattr(placement_module, "_warned", [])
        with pytest.warns(UserWarning, match="compute on their CPUs"):
            cuda = flow.placement("cuda", [0])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            flow.placement("cuda", [0])                      # once a run
        x = flow.ones(2, 3, placement=cuda, sbp=S0)
        assert cuda.device() == flow.device("cpu") and x.to_local().device == flow.device("cpu")
        assert 'placement=toynet.placement(type="cuda", ranks=[0])' in repr(x)   # as written
        assert (x * 2).numpy().sum() == 12
        with pytest.raises(RuntimeError, match="needs CuPy|no NVIDIA GPU|cannot reach"):
            flow.ones(2).to("cuda")                          # a local tensor asks for a device: still an error
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        flow.placement("tpu", [0])


def test_sbp_kinds_print_as_oneflow_s_with_toynet_s_name():
    assert [repr(s) for s in (S0, flow.sbp.split(-1), B, P)] == [
        "toynet.sbp.split(dim=0)", "toynet.sbp.split(dim=-1)", "toynet.sbp.broadcast", "toynet.sbp.partial_sum"]
    assert S0 == flow.sbp.split(0) != S1 and B != P and len({S0, flow.sbp.split(0), B}) == 2
    assert isinstance(S0, flow.sbp.sbp) and [s.short for s in (S1, B, P)] == ["S(1)", "B", "P"]
    with pytest.raises(TypeError, match="takes an int"):
        flow.sbp.split(True)


def test_environment_says_which_process_this_is():
    assert (flow.env.get_rank(), flow.env.get_world_size(), flow.env.get_local_rank()) == (0, 1, 0)
    read = world._from_environment
    by_hand = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}
    assert (read(by_hand).rank, read(by_hand).size, read(by_hand).local_rank, read(by_hand).how) == (3, 4, 1, "by hand")
    assert read({"PMI_SIZE": "2", "PMI_RANK": "1"}).how == "mpiexec"
    assert read({}).how == "one process"
    with pytest.raises(RuntimeError, match="needs MASTER_ADDR and MASTER_PORT"):
        read({"WORLD_SIZE": "2", "RANK": "0"})
    with pytest.raises(RuntimeError, match="must be in 0..WORLD_SIZE-1"):
        read({**by_hand, "RANK": "4"})


def test_without_mpi4py_one_process_works_and_more_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(RuntimeError, match=r"pip install -e \.\[distributed\]"):
        world.import_mpi()
    script = ("import sys; sys.modules['mpi4py'] = None\n"
              "import toynet as flow\n"
              "x = flow.ones(2, 3, placement=flow.placement('cpu', [0]), sbp=flow.sbp.split(0), requires_grad=True)\n"
              "(x * x).sum().backward(); print(x.grad.numpy().sum(), flow.distributed.all_reduce([1.0, 2.0]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["12.0", "[1.", "2.]"]


def test_without_mpi4py_two_processes_stop_at_once_saying_how_to_install(tmp_path):
    (tmp_path / "mpi4py.py").write_text("raise ImportError('mpi4py is hidden for this test')\n")
    script = tmp_path / "two.py"
    script.write_text("import toynet as flow\nflow.distributed.barrier()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    done = subprocess.run([sys.executable, "-m", "toynet.distributed.launch", "--nproc_per_node", "2", str(script)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.count(r"pip install -e .[distributed]") == 2
    assert re.search(r"toynet.distributed.launch: rank [01] failed \(exit code 1\)", done.stderr)


# ------------------------------------------------------------------------------------------ comm, boxing


def test_shards_follow_one_rule():
    assert comm.shard_sizes(5, 2) == [3, 2] and comm.shard_sizes(2, 3) == [1, 1, 0]
    assert comm.shard_slice(5, 2, 1) == slice(3, 5)


def test_collectives_of_one_process_are_copies():
    x = np.arange(6.0).reshape(2, 3)
    for result in (comm.all_reduce(x), comm.all_reduce(x, op="mean"), comm.all_gather(x, 1), comm.reduce_scatter(x),
                   comm.all_to_all(x, 0, 1), comm.broadcast(x)):
        np.testing.assert_array_equal(result, x)
        assert result is not x
    assert comm.all_gather_object("me") == ["me"]
    comm.barrier()
    with pytest.raises(ValueError, match="op must be one of"):
        comm.all_reduce(x, op="median")
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        comm.all_gather(x, axis=2)


@pytest.mark.parametrize("sbp, parts", [(S0, [(3, 6), (2, 6)]), (S1, [(5, 3), (5, 3)]), (B, [(5, 6)] * 2),
                                        (P, [(5, 6)] * 2)])
def test_each_process_holds_its_component(sbp, parts):
    full = np.arange(30.0).reshape(5, 6)
    pieces = [boxing.component(full, sbp, rank=r, size=2) for r in range(2)]
    assert [p.shape for p in pieces] == parts == [boxing.local_shape((5, 6), sbp, r, 2) for r in range(2)]
    whole = {S0: lambda: np.concatenate(pieces, 0), S1: lambda: np.concatenate(pieces, 1), B: lambda: pieces[1],
             P: lambda: pieces[0] + pieces[1]}[sbp]()
    np.testing.assert_array_equal(whole, full)


def test_the_boxing_table_names_a_way_for_every_pair():
    assert set(boxing.PATHS) == {(a, b) for a in "SBP" for b in "SBP" if a != b or a == "S"}


# ------------------------------------------------------------------------------------------ rules


def _meta(shape: tuple, sbp) -> GlobalTensor:
    return flow.zeros(*shape, placement=ONE, sbp=B).to_global(sbp=sbp) if sbp != P else \
        flow.zeros(*shape, placement=ONE, sbp=P)


@pytest.mark.parametrize("a, b, inputs, out", [
    (S0, B, (S0, B), S0), (B, S1, (B, S1), S1), (S1, S0, (S1, S0), P), (B, B, (B, B), B), (P, B, (P, B), P),
    (S0, S1, (S0, B), S0), (S1, B, (S1, S0), P), (B, S0, (S1, S0), P)])
def test_matmul_signatures(a, b, inputs, out):
    sig = sbp_rules.signature(OPS["matmul"], (_meta((4, 3), a), _meta((3, 2), b)), {})
    assert (sig.inputs, sig.output) == (inputs, out)


def test_elementwise_signatures_follow_broadcasting_and_linearity():
    add, mul, relu = OPS["add"], OPS["mul"], OPS["relu"]
    x, bias = _meta((4, 3), S0), _meta((3,), B)
    assert sbp_rules.signature(add, (x, bias), {}).inputs == (S0, B)          # the bias is broadcast along dim 0
    assert sbp_rules.signature(add, (_meta((4, 3), S1), bias), {}).inputs == (S1, S0)
    assert sbp_rules.signature(add, (_meta((4, 3), P), _meta((4, 3), P)), {}).output == P
    assert sbp_rules.signature(add, (_meta((4, 3), P), 1.0), {}).inputs == (B, None)  # 1 must not be added twice
    assert sbp_rules.signature(mul, (_meta((4, 3), P), 2.0), {}).output == P
    assert sbp_rules.signature(relu, (_meta((4, 3), P),), {}).output == B
    assert sbp_rules.signature(OPS["sum"], (x,), {"dim": (0,), "keepdim": False}).output == P
    assert sbp_rules.signature(OPS["sum"], (x,), {"dim": (1,), "keepdim": False}).output == S0
    assert sbp_rules.signature(OPS["softmax"], (x,), {"dim": 1}).rule.startswith("softmax: no SBP rule")


# ------------------------------------------------------------------------------------------ global tensors


@pytest.mark.parametrize("make", [
    lambda **k: flow.tensor([[1.0, 2.0], [3.0, 4.0]], **k), lambda **k: flow.zeros(2, 3, **k),
    lambda **k: flow.ones(2, 3, **k), lambda **k: flow.full((2, 2), 7.0, **k), lambda **k: flow.randn(3, 2, **k),
    lambda **k: flow.rand(2, 2, **k), lambda **k: flow.randint(0, 5, (3,), **k), lambda **k: flow.arange(4, **k),
    lambda **k: flow.linspace(0, 1, 5, **k), lambda **k: flow.eye(3, **k)])
def test_creation_functions_take_placement_and_sbp(make):
    flow.manual_seed(3)
    local = make()
    flow.manual_seed(3)
    x = make(placement=ONE, sbp=S0)
    assert x.is_global and not x.is_local and type(x) is GlobalTensor
    assert x.placement == ONE and x.sbp == (S0,) and x.shape == local.shape and x.dtype == local.dtype
    np.testing.assert_array_equal(x.numpy(), local.numpy())
    assert not local.is_global and local.is_local


def test_a_global_tensor_prints_its_placement_and_sbp():
    x = flow.tensor([1.0, 2.0], placement=ONE, sbp=B, requires_grad=True)
    assert repr(x) == ('tensor([1., 2.], placement=toynet.placement(type="cpu", ranks=[0]),\n'
                       "       sbp=(toynet.sbp.broadcast,), dtype=toynet.float32, requires_grad=True)")
    assert repr(x * 2).endswith("grad_fn=<MulBackward>)")


def test_to_global_to_local_and_their_gradients():
    part = flow.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    g = part.to_global(placement=ONE, sbp=S1)
    assert g.shape == (1, 3) and g.sbp == (S1,) and g.to_local().shape == (1, 3)
    (g.to_global(sbp=B) * 3).sum().backward()
    np.testing.assert_array_equal(part.grad.numpy(), [[3.0, 3.0, 3.0]])
    x = flow.ones(2, placement=ONE, sbp=B, requires_grad=True)
    (x.to_local() * 5).sum().backward()
    assert x.grad.sbp == (B,) and x.grad.numpy().tolist() == [5.0, 5.0]


def test_global_autograd_and_sgd_match_local_tensors():
    rng = np.random.default_rng(1)
    a, w0 = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    results = []
    for kw in ({}, {"placement": ONE, "sbp": B}):
        x = flow.tensor(a, **({"placement": ONE, "sbp": S0} if kw else {}))
        w = flow.tensor(w0, requires_grad=True, **kw)
        opt = flow.optim.SGD([w], lr=0.1, momentum=0.9)
        for _ in range(3):
            loss = ((x @ w).tanh() ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        results.append((w.numpy().copy(), loss.item()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    assert results[1][1] == pytest.approx(results[0][1])


def test_clear_errors():
    x = flow.ones(2, 3, placement=ONE, sbp=S0)
    with pytest.raises(RuntimeError, match="Global and local tensors do not mix"):
        x + flow.ones(2, 3)
    with pytest.raises(AttributeError, match="a local tensor has no placement"):
        flow.ones(2).placement
    assert not hasattr(flow.ones(2), "sbp")
    with pytest.raises(RuntimeError, match="this tensor is local already"):
        flow.ones(2).to_local()
    with pytest.raises(TypeError, match="needs both placement= and sbp="):
        flow.ones(2).to_global(placement=ONE)
    with pytest.raises(ValueError, match="2-D SBP, for a placement with a 2-D grid"):
        flow.ones(2, placement=ONE, sbp=(S0, B))
    with pytest.raises(ValueError, match=r"2-D grid of processes: sbp= needs one SBP per axis"):
        flow.ones(2, placement=flow.placement("cpu", [[0]]), sbp=B)
    with pytest.raises(NotImplementedError, match="3-D grid"):
        flow.ones(2, placement=flow.placement("cpu", [[[0]]]), sbp=(B, B, B))
    with pytest.raises(ValueError, match=r"split\(dim=2\) cannot cut a tensor of 2"):
        flow.ones(2, 3, placement=ONE, sbp=flow.sbp.split(2))
    with pytest.raises(RuntimeError, match="device comes from its placement"):
        x.to(flow.device("strict"))
    with pytest.raises(NotImplementedError, match="item assignment"):
        x[0] = 1.0
    with pytest.raises(TypeError, match="cannot be copied or pickled yet"):
        copy.deepcopy(x)


def test_every_sbp_rule_names_an_op_and_the_fast_paths_linear_keeps_the_layout():
    assert set(sbp_rules.RULES) <= set(OPS), "a rule names an op that does not exist"
    linear = OPS["linear"]   # (the fast path's fused x @ w^T + b)
    x, w, b = flow.ones(4, 3, placement=ONE, sbp=S0), flow.ones(2, 3, placement=ONE, sbp=B), flow.ones(2, placement=ONE, sbp=B)
    assert sbp_rules.signature(linear, (x, w, b), {}).output == S0
    w0 = flow.ones(2, 3, placement=ONE, sbp=S0)
    assert sbp_rules.signature(linear, (flow.ones(4, 3, placement=ONE, sbp=B), w0, b), {}).output == S1
    assert sbp_rules.signature(OPS["linear_grad_weight"], (flow.ones(4, 2, placement=ONE, sbp=S0), x), {}).output == P


def test_2d_sbp_on_a_grid_of_one_process_reads_axis_by_axis():
    grid = flow.placement("cpu", [[0]])
    a = flow.ones(4, 6, placement=grid, sbp=(B, S0)) * 2
    w = flow.ones(6, 8, placement=grid, sbp=(S1, B))
    y = a @ w
    assert y.sbp == (S1, S0) and y.shape == (4, 8) and y.numpy().sum() == 4 * 8 * 12
    assert y.to_global(sbp=(B, B)).sbp == (B, B) and y.to_local().shape == (4, 8)
    assert "sbp=(toynet.sbp.split(dim=1), toynet.sbp.split(dim=0))" in repr(y)


def test_a_graph_of_global_tensors_gives_global_tensors_and_says_their_layout():
    class Twice(flow.nn.Graph):
        def build(self, x):
            return (x * 2).sum(dim=0)

    g = Twice()
    out = g(flow.ones(2, 3, placement=ONE, sbp=S0))
    assert out.is_global and out.sbp == (flow.sbp.partial_sum,) and out.placement == ONE
    assert out.numpy().tolist() == [4.0, 4.0, 4.0]
    layouts = g._last.traced.layouts
    assert [layouts[n.name].sbp for n in g._last.traced.op_nodes] == [S0, flow.sbp.partial_sum]
    assert Twice()(flow.ones(2, 3)).numpy().sum() == 12     # and local tensors still go through
    with pytest.raises(RuntimeError, match="global and local tensors do not mix"):
        class Mixed(flow.nn.Graph):
            def build(self, x, y):
                return x + y
        Mixed()(flow.ones(2, 3, placement=ONE, sbp=S0), flow.ones(2, 3))


def test_a_global_graph_deploys_as_the_graph_one_process_runs(tmp_path):
    model = flow.nn.Linear(4, 2).to_global(placement=ONE, sbp=B)

    class Infer(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x) * 2

    graph = Infer()
    x = flow.randn(8, 4, placement=ONE, sbp=S0)
    want = graph(x).numpy()
    flow.save(graph, tmp_path / "deployed")
    deployed = flow.load(tmp_path / "deployed")
    assert "boxing" not in str(deployed.traced) and deployed.traced is not graph._last.traced
    np.testing.assert_allclose(deployed(x.to_local()).numpy(), want, rtol=1e-6)


def test_a_global_tensor_build_captures_keeps_its_layout():
    scale = flow.ones(4, 3, placement=ONE, sbp=S0) * 3

    class Scaled(flow.nn.Graph):
        def build(self, x):
            return x * scale          # (not a parameter or buffer: a constant of this process's part)

    g = Scaled()
    out = g(flow.ones(4, 3, placement=ONE, sbp=B))
    assert out.sbp == (S0,) and out.numpy().tolist() == [[3.0] * 3] * 4
    captured = [n.name for n in g._last.traced.nodes if "FreeEagerTensor" in n.name]
    assert captured and g._last.traced.layouts[captured[0]].sbp == S0


def test_a_plan_is_keyed_on_its_inputs_sbp():
    class Double(flow.nn.Graph):
        def build(self, x):
            return x * 2

    g = Double()
    g(flow.ones(2, 3, placement=ONE, sbp=S0))
    out = g(flow.ones(2, 3, placement=ONE, sbp=B))
    assert out.sbp == (B,) and len(g._compiled) == 2


def test_a_local_parameter_in_a_global_graph_is_named():
    model = flow.nn.Linear(3, 2)

    class Apply(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    with pytest.raises(RuntimeError, match=r"model.weight is a local tensor.*model.to_global"):
        Apply()(flow.ones(4, 3, placement=ONE, sbp=S0))
    model.to_global(placement=ONE, sbp=B)
    assert model.weight.is_global and model.weight.requires_grad and model.weight.grad_fn is None
    out = Apply()(flow.ones(4, 3, placement=ONE, sbp=S0))
    assert out.sbp == (S0,) and out.shape == (4, 2)
    assert model.to_local().weight.is_local


def test_the_interpreter_is_there_only_while_global_tensors_live():
    assert mode.tracer is None
    x = flow.ones(2, placement=ONE, sbp=B)
    assert mode.tracer is not None
    model = flow.nn.Linear(2, 1)
    assert model(flow.ones(1, 2)).shape == (1, 1)     # local work is unchanged meanwhile
    y = x * 2
    del x, y
    gc.collect()
    assert mode.tracer is None


def test_in_place_writes_into_a_global_tensor():
    x = flow.zeros(3, 2, placement=ONE, sbp=S0)
    x.copy_(flow.ones(2, placement=ONE, sbp=B))       # broadcast along dim 0
    x.add_(flow.ones(3, 2, placement=ONE, sbp=B))
    assert x.numpy().tolist() == [[2.0, 2.0]] * 3 and x.sbp == (S0,)
    x.zero_()
    assert x.numpy().sum() == 0


# ------------------------------------------------------------------------------------------ DDP, launcher, PMI


def test_ddp_in_one_process_returns_the_module_and_changes_nothing():
    flow.manual_seed(0)
    model = flow.nn.Linear(3, 2)
    x = flow.randn(4, 3)
    before = model(x).numpy()
    assert flow.nn.parallel.DistributedDataParallel(model) is model
    np.testing.assert_array_equal(model(x).numpy(), before)
    model(x).sum().backward()
    assert model.weight.grad.shape == (2, 3)


def test_the_launcher_gives_each_process_oneflow_s_variables(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "5")
    args = launch.parse(["--nproc_per_node", "2", "--nnodes", "2", "--node_rank", "1", "--master_port", "1234",
                         "train.py", "--lr", "0.1"])
    assert args.script == "train.py" and args.script_args == ["--lr", "0.1"]
    envs = launch.environments(args)
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["MASTER_PORT"]) for e in envs] == [
        ("2", "0", "4", "1234"), ("3", "1", "4", "1234")]
    assert all("PMI_RANK" not in e for e in envs)
    with pytest.raises(SystemExit):
        launch.parse(["--nnodes", "2", "train.py"])   # several machines need one --master_port


def _proc(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_the_launcher_names_the_rank_that_failed_first_and_stops_the_rest(capsys):
    start = time.monotonic()
    code = launch.watch({0: _proc("import time; time.sleep(60)"), 1: _proc("raise SystemExit(3)"),
                         2: _proc("raise SystemExit(70)")})
    assert code == 3 and time.monotonic() - start < 20
    assert "rank 1 failed (exit code 3); stopping ranks [0]" in capsys.readouterr().err
    assert launch.watch({0: _proc("pass"), 1: _proc("pass")}) == 0


def test_the_pmi_server_answers_what_mpich_asks_a_one_process_job():
    store: dict = {}
    ask = lambda line: pmi.answer(line, "job-7", store)
    assert ask("cmd=init pmi_version=1 pmi_subversion=1") == "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"
    assert ask("cmd=get_my_kvsname") == "cmd=my_kvsname rc=0 kvsname=job-7"
    assert ask("cmd=get kvsname=job-7 key=PMI_process_mapping") == "cmd=get_result rc=0 value=(vector,(0,1,1))"
    assert ask("cmd=get kvsname=job-7 key=nothing") == "cmd=get_result rc=1"
    assert ask("cmd=put kvsname=job-7 key=card value=abc") == "cmd=put_result rc=0"
    assert ask("cmd=get kvsname=job-7 key=card") == "cmd=get_result rc=0 value=abc"
    assert ask("cmd=barrier_in") == "cmd=barrier_out" and ask("cmd=abort exitcode=1") is None


def test_a_placement_with_more_ranks_than_the_run_says_to_start_more_processes():
    with pytest.raises(ValueError, match=r"names rank\(s\) \[1\], but this run has 1 process.*--nproc_per_node 2"):
        flow.tensor(np.ones(2), placement=flow.placement("cpu", ranks=[0, 1]), sbp=flow.sbp.broadcast)
