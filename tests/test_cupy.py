"""The real GPU device ("cuda", through CuPy): the op tests rerun on it where CuPy and a GPU exist (and
skip with the backend's own reason elsewhere); the clear error when CuPy or the GPU is missing; and the
rule that makes one op definition run on both: only toynet/backend.py imports numpy or cupy."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import types

import numpy as np
import pytest

import test_ops_elementwise as elementwise
import test_ops_reduce_shape as reduce_shape
import toynet as flow
from gradcheck import check_grad
from toynet import backend

TOYNET = pathlib.Path(flow.__file__).parent


def _why_no_gpu() -> str | None:
    try:
        backend.array_module_for("cuda")
    except RuntimeError as error:
        return str(error)
    return None


@pytest.fixture(scope="module")
def cuda():
    reason = _why_no_gpu()
    if reason is not None:
        pytest.skip(reason)
    return flow.device("cuda")


# -------------------------------------------------------------------------------- the op tests on a GPU

UNARY_SHAPES = [(2, 3), ()]
BINARY_SHAPES = [((3, 1), (1, 4)), ((4,), (2, 3, 4))]


@pytest.mark.parametrize("case", elementwise.UNARY, ids=repr)
@pytest.mark.parametrize("shape", UNARY_SHAPES, ids=str)
def test_unary_vjp_on_gpu(cuda, case, shape):
    elementwise.gradcheck_case(case, [shape], 0, cuda)


@pytest.mark.parametrize("case", elementwise.BINARY, ids=repr)
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
def test_binary_vjp_on_gpu(cuda, case, shapes):
    elementwise.gradcheck_case(case, shapes, 0, cuda)


@pytest.mark.parametrize("case", reduce_shape.CASES, ids=repr)
def test_reduce_shape_vjp_on_gpu(cuda, case):
    check_grad(lambda *ts: case.fn(flow, *ts), *reduce_shape.draw_arrays(case), device=cuda)


@pytest.mark.parametrize("case", reduce_shape.CASES, ids=repr)
def test_gpu_forward_matches_cpu(cuda, case):
    arrays = reduce_shape.draw_arrays(case)
    on_cpu = reduce_shape._outputs(case.fn(flow, *[flow.tensor(a) for a in arrays]))
    on_gpu = reduce_shape._outputs(case.fn(flow, *[flow.tensor(a, device=cuda) for a in arrays]))
    for c, g in zip(on_cpu, on_gpu):
        assert g.device == cuda
        np.testing.assert_allclose(g.numpy(), c.numpy(), rtol=1e-10, atol=1e-12)


def test_gpu_training_step_stays_on_the_gpu_and_in_float32(cuda):
    w = flow.randn(3, 2, device=cuda, requires_grad=True)
    x = flow.randn(4, 3, device=cuda)
    loss = flow.nn.functional.mse_loss((x @ w).tanh(), flow.zeros(4, 2, device=cuda))
    loss.backward()
    assert w.grad.device == cuda and w.grad.dtype is flow.float32
    flow.manual_seed(1)
    on_gpu = flow.randn(5, device=cuda).numpy()
    flow.manual_seed(1)
    np.testing.assert_array_equal(on_gpu, flow.randn(5).numpy())  # one host generator for every device


# ------------------------------------------------------------------------- when CuPy or the GPU is missing

@pytest.fixture
def fresh_cuda(monkeypatch):
    """Forget a loaded cuda module, so the next use runs the loader again (undone after the test)."""
    monkeypatch.delitem(backend._MODULES, "cuda", raising=False)
    return monkeypatch


def _fake_importlib(module=None):
    def import_module(name):
        if module is None:
            raise ImportError(f"No module named {name!r}")
        return module
    return types.SimpleNamespace(import_module=import_module)


def test_without_cupy_the_error_says_what_to_install(fresh_cuda):
    fresh_cuda.setattr(backend, "importlib", _fake_importlib(None))
    assert flow.device("cuda").type == "cuda"         # naming the device is fine...
    for make in (lambda: flow.zeros(2, device="cuda"), lambda: flow.tensor([1.0]).cuda(),
                 lambda: flow.tensor([1.0]).to("cuda"), lambda: flow.randn(2, device="cuda:0")):
        with pytest.raises(RuntimeError, match=r"needs CuPy.*pip install 'toynet\[cuda\]'.*cupy-cuda.*cpu"):
            make()                                    # ...using it says what is missing and how to fix it
    assert not flow.cuda.is_available()


def test_cupy_without_a_gpu_says_so(fresh_cuda):
    def broken():
        raise RuntimeError("cudaErrorNoDevice")
    no_driver = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=broken)))
    fresh_cuda.setattr(backend, "importlib", _fake_importlib(no_driver))
    with pytest.raises(RuntimeError, match="cannot reach an NVIDIA GPU.*cudaErrorNoDevice.*nvidia-smi"):
        flow.zeros(1, device="cuda")
    no_gpu = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        getDeviceCount=lambda: 0)))
    fresh_cuda.setattr(backend, "importlib", _fake_importlib(no_gpu))
    with pytest.raises(RuntimeError, match="no NVIDIA GPU"):
        flow.zeros(1, device="cuda")
    assert not flow.cuda.is_available()


def test_cuda_is_not_available_here_without_cupy():
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    assert flow.cuda.is_available() is False
    assert "pip install" in _why_no_gpu()


# ----------------------------------------------------------------------------- one backend, one import

def _imports_of(path: pathlib.Path) -> list[tuple[int, str]]:
    """Top-level module names imported by a file, also through importlib.import_module("...")/__import__."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")):
            found.append((node.lineno, node.args[0].value.split(".")[0]))
    return found


def test_only_the_backend_imports_numpy_or_cupy():
    offenders = [f"{path.relative_to(TOYNET.parent)}:{line} imports {name}"
                 for path in sorted(TOYNET.rglob("*.py")) if path != TOYNET / "backend.py"
                 for line, name in _imports_of(path) if name in ("numpy", "cupy", "cupyx")]
    assert not offenders, ("only toynet/backend.py may import numpy or cupy (ops get `xp`, host data code uses "
                           "backend.host):\n" + "\n".join(offenders))


def test_the_import_scan_finds_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import numpy as np\nfrom cupy import asarray\nimport importlib\n"
                      "m = importlib.import_module('cupyx.scatter')\nimport os.path\n")
    assert sorted(_imports_of(sample)) == [(1, "numpy"), (2, "cupy"), (3, "importlib"), (4, "cupyx"), (5, "os")]
