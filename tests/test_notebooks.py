"""Every notebook in notebooks/ runs top to bottom, and what is stored in it is what running it gives.

Each ``notebooks/*.ipynb`` (found by globbing, so a new notebook is tested the moment it is added) is
executed with nbclient in a fresh kernel of *this* Python interpreter, in the notebooks folder, with
a time limit per cell; any error fails the test. The stored files are also checked against the rules
for notebooks kept in the repository: they were executed top to bottom in one go (execution counts
1, 2, 3...), hold no error outputs, no execution timestamps, no absolute paths, and stay small.

Some notebooks need more than "runs without error" (notebook 02's construction player must really
hold one frame per step); those checks read the freshly executed notebook and are registered in
:data:`EXTRA_CHECKS`. Printed numbers are checked in test_notebook_numbers.py.

:func:`execute_notebook` is also how the notebooks are executed before they are committed::

    python -c "import sys; sys.path.insert(0, 'tests'); import test_notebooks as t; t.execute_and_save('notebooks/02_autograd_on_arrays.ipynb')"
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 300              # seconds per cell
MAX_NOTEBOOK_BYTES = 1_500_000  # the whole .ipynb file, outputs and widget state included
MAX_OUTPUT_BYTES = 250_000      # one output of one cell (a big SVG or PNG should be drawn smaller)
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# ------------------------------------------------------------------------------------------ running


class ThisPythonKernels(KernelSpecManager):
    """Kernel specs that always start ``python3`` with the interpreter running the tests.

    An installed ``python3`` kernel spec may point at another Python (a system one, another venv)
    that has a different toynet, or none.
    """

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                          display_name="Python 3 (ipykernel)", language="python", name=kernel_name)


def execute_notebook(notebook: nbformat.NotebookNode | Path | str, cwd: Path = NOTEBOOK_DIR,
                     timeout: int = CELL_TIMEOUT) -> nbformat.NotebookNode:
    """Run every code cell of ``notebook`` in a fresh kernel; return the notebook with new outputs.

    Raises ``nbclient.exceptions.CellExecutionError`` (with the cell and its traceback) on any error.
    Widget state is stored in the notebook's metadata, as JupyterLab's "save widget state" does;
    cells carry no timing metadata.
    """
    if not isinstance(notebook, nbformat.NotebookNode):
        notebook = nbformat.read(str(notebook), as_version=4)
    manager = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPythonKernels())
    # coalesce_streams: one stream output per cell and stream, as Jupyter shows it; otherwise a print can be
    # stored in two outputs, split wherever the kernel happened to flush, which some viewers show on two lines.
    client = nbclient.NotebookClient(notebook, km=manager, timeout=timeout, allow_errors=False,
                                     store_widget_state=True, record_timing=False, coalesce_streams=True,
                                     resources={"metadata": {"path": str(cwd)}})
    # Inline figures even where MPLBACKEND=Agg is set for scripts (the kernel inherits the environment).
    client.execute(env=dict(os.environ, MPLBACKEND="module://matplotlib_inline.backend_inline"))
    return notebook


def execute_and_save(path: Path | str) -> None:
    """Execute a notebook and write it back with its fresh outputs (what to do before committing it)."""
    path = Path(path).resolve()
    notebook = execute_notebook(path)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                       "language": "python"}
    nbformat.validate(notebook)
    nbformat.write(notebook, str(path))


# --------------------------------------------------------------------------------- stored notebooks


def code_cells(notebook: nbformat.NotebookNode) -> list:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.strip()]


def output_texts(cell: nbformat.NotebookNode) -> list[str]:
    """Every output of a cell as text (streams, reprs, HTML, SVG; images as their base64)."""
    texts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            texts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            texts += [v if isinstance(v, str) else json.dumps(v) for v in out.data.values()]
        elif out.output_type == "error":
            texts.append("\n".join(out.traceback))
    return texts


def forbidden_paths() -> list[str]:
    """Absolute paths that would make a stored output depend on the machine it was run on."""
    paths = {str(ROOT), str(Path.home()), str(Path(sys.executable).parent)}
    return sorted(p for p in paths if len(p) > 1)


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_stored_notebook_was_executed_in_order_and_is_clean(path):
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES, (
        f"{path.name} is {path.stat().st_size:,} bytes; keep notebooks under {MAX_NOTEBOOK_BYTES:,} (draw "
        "smaller graphs, show PNGs with a max_size, trim long printouts)")
    notebook = nbformat.read(str(path), as_version=4)
    nbformat.validate(notebook)
    counts = [c.execution_count for c in code_cells(notebook)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts}: execute the notebook top to bottom in a fresh kernel "
        "before committing it (see execute_and_save in this file)")
    for i, cell in enumerate(code_cells(notebook)):
        assert "execution" not in cell.metadata, f"{path.name} cell {i}: timing metadata (timestamps) stored"
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"{path.name} cell {i} stores an error:\n{output_texts(cell)}"
            size = len(json.dumps(out))
            assert size <= MAX_OUTPUT_BYTES, f"{path.name} cell {i}: an output of {size:,} bytes"
        for text in output_texts(cell):
            for p in forbidden_paths():
                assert p not in text, f"{path.name} cell {i}: output holds the absolute path {p!r}"
            assert not re.search(r"/tmp/ipykernel_\d+", text), f"{path.name} cell {i}: a kernel temp path"


# --------------------------------------------------------------------------------- fresh execution


def test_kernel_is_this_interpreter(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.executable)")])
    executed = execute_notebook(notebook, cwd=tmp_path, timeout=120)
    assert executed.cells[0].outputs[0].text.strip() == sys.executable


def widget_states(notebook: nbformat.NotebookNode) -> dict:
    """model id -> {"model_name": ..., "state": {...}} of every widget the run created."""
    return notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})


def check_construction_player(notebook: nbformat.NotebookNode) -> None:
    """02: the player holds the seeds' four construction steps, and its slider really moves through them.

    The four steps of ``x, w, b = ...; z = flow.matmul(x, w) + b; y = ...; l = loss(z, y)`` recorded
    by ``flow.viz.record()``: the three creations (merged into one step), z, y and l. The notebook moves
    the slider to every step from Python and prints each caption; the stored state is the last step.
    """
    frames = 4
    by_kind: dict[str, list[dict]] = {}
    for model in widget_states(notebook).values():
        by_kind.setdefault(model["model_name"], []).append(model["state"])
    sliders = [s for s in by_kind.get("IntSliderModel", []) if s.get("description") == "step"]
    plays = by_kind.get("PlayModel", [])
    assert len(sliders) == 1 and len(plays) == 1, f"expected one player; widgets: {sorted(by_kind)}"
    slider, play = sliders[0], plays[0]
    assert (slider["min"], slider["max"]) == (play["min"], play["max"]) == (0, frames - 1)
    html = [s.get("value", "") for s in by_kind.get("HTMLModel", [])]
    captions = [h for h in html if h.startswith("<b>step ")]
    pictures = [h for h in html if h.startswith("<svg")]
    assert len(captions) == 1 and captions[0].startswith(f"<b>step {slider['value'] + 1}/{frames}</b>")
    assert len(pictures) == 1 and pictures[0].rstrip().endswith("</svg>")
    printed = "".join(text for cell in code_cells(notebook) for text in output_texts(cell))
    for step in range(1, frames + 1):
        assert f"step {step}/{frames}" in printed, f"the slider never showed step {step}"


def figures(notebook: nbformat.NotebookNode, mime: str = "image/png") -> int:
    """How many outputs of the notebook are pictures of this type (matplotlib figures are PNGs)."""
    return sum(mime in out.get("data", {}) for cell in code_cells(notebook) for out in cell.get("outputs", []))


def shows_plots(minimum: int) -> Callable[[nbformat.NotebookNode], None]:
    """03 and 05 draw their loss curves and timings as charts, not only as printed numbers."""
    def check(notebook: nbformat.NotebookNode) -> None:
        assert figures(notebook) >= minimum, f"expected at least {minimum} matplotlib figures"
    return check


def tagged_stdout(notebook: nbformat.NotebookNode, tag: str) -> str:
    cells = [c for c in code_cells(notebook) if tag in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}"
    return "".join(out.text for out in cells[0].outputs if out.output_type == "stream" and out.name == "stdout")


def number_after(text: str, label: str) -> float:
    match = re.search(re.escape(label) + r"\s*([-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?)", text)
    assert match, f"no number after {label!r} in:\n{text}"
    return float(match.group(1))


def check_capstone(notebook: nbformat.NotebookNode) -> None:
    """06: the tutorial's two loops agree, the long run learns, and the notebook shows it.

    The exact losses depend on the machine's BLAS kernel (the notebook says so), so these are the
    properties every machine must see: the first loss is the untrained 1000-way guess, Eager and Graph
    mode print the same first loss, the loss falls far below ln 10, and on the synthetic stand-in (whose
    classes a network can learn) the held-out images end up scored right. Pictures: the sample images,
    the timing and memory chart, the loss curve and the predictions (PNGs), and the network (SVG).
    """
    same = tagged_stdout(notebook, "capstone-same-numbers")
    assert abs(number_after(same, "first loss:") - math.log(1000)) < 0.3
    # The same forward pass: the same first loss (later ones drift in the last bits, see the notebook).
    assert abs(number_after(same, "first loss:") - number_after(same, "Graph mode:")) < 1e-3
    assert number_after(same, "steps:") < 1.0   # the largest difference between Eager and Graph losses
    result = tagged_stdout(notebook, "capstone-result")
    first, last = number_after(result, "first loss:"), number_after(result, "last 20 steps:")
    after = float(re.findall(r"(\d+)%", result)[-1])  # the held-out accuracy after training, in %
    printed = "".join(text for cell in code_cells(notebook) for text in output_texts(cell))
    if "synthetic stand-in" in printed:
        assert first - last > 5 and last < math.log(10) / 10, result
        assert after >= 90, result
    else:  # the real CIFAR-10: a couple of hundred steps are a fraction of an epoch
        assert first - last > 3, result
    assert figures(notebook) >= 4 and figures(notebook, "image/svg+xml") >= 1


#: Notebook name -> a check of the freshly executed notebook, beyond "no cell raised".
EXTRA_CHECKS: dict[str, Callable[[nbformat.NotebookNode], None]] = {
    "02_autograd_on_arrays.ipynb": check_construction_player,
    "03_poly_fit_eager_vs_graph.ipynb": shows_plots(3),
    "05_compiler_passes.ipynb": shows_plots(1),
    "06_mobilenetv2_cifar10.ipynb": check_capstone,
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path):
    executed = execute_notebook(path)
    check = EXTRA_CHECKS.get(path.name)
    if check is not None:
        check(executed)
