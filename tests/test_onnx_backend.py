"""ONNX's own conformance suite (the node test cases the ``onnx`` package ships) run through toynet.

``onnx.backend.test.BackendTest(ToynetBackend)`` makes one unittest case per ONNX test model; pytest
collects them from this module's globals. Included: every node test whose ops all have an importer
(:data:`toynet.onnx.import_ops.IMPORTERS`). Excluded, by pattern, the cases of those ops that use what
toynet does not have, each pattern with its reason. The exclusions are exactly what the importer refuses:
every excluded case must raise ``flow.onnx.ONNXImportError`` (a case that passes, or fails another way, fails
``test_every_excluded_case_is_refused_by_the_importer``), so no pattern hides a wrong answer.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from onnx.backend.test import BackendTest  # noqa: E402
from onnx.backend.test.loader import load_model_tests  # noqa: E402

from toynet.onnx import ONNXImportError  # noqa: E402
from toynet.onnx.backend import ToynetBackend  # noqa: E402
from toynet.onnx.load import IMPORTERS  # noqa: E402

#: Cases of supported ops that need something toynet does not have.
EXCLUDED = {
    r"int16|uint16|uint32|uint64|bfloat16|BFLOAT16|FLOAT8|FLOAT4|INT2|INT4|UINT2|UINT4|e8m0|string":
        "dtypes toynet has no counterpart for",
    r"select_last_index": "ArgMax/ArgMin's tie-break to the last index",
    r"pool_1d|pool_3d|causal_conv": "1-d and 3-d convolution and pooling (toynet's are 2-d)",
    r"pool_2d_(pads|same_lower|same_upper)|averagepool_2d_dilations|maxpool_with_argmax|maxpool_2d_uint8":
        "asymmetric or more-than-half-kernel padding, dilated average pooling, MaxPool indices, integer pooling",
    r"training_mode|training_dropout": "training-mode BatchNormalization and Dropout (import is for inference)",
    r"identity_(opt|sequence)": "optional and sequence types",
}
MINIMUM_PASSING = 400

# ONNX's expected outputs for reductions over empty sets are log(0) = -inf: toynet computes the same, with
# NumPy's warning.
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")


def supported_case_names() -> list[str]:
    with warnings.catch_warnings():  # some reference implementations divide by zero on purpose
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = load_model_tests(kind="node")
    return sorted(c.name for c in cases if {n.op_type for n in c.model.graph.node} <= set(IMPORTERS))


SUPPORTED = supported_case_names()
INCLUDED = [name for name in SUPPORTED if not any(re.search(p, name) for p in EXCLUDED)]


EXCLUDED_CASES = [name for name in SUPPORTED if name not in INCLUDED]


def all_cases() -> type:
    """BackendTest's unittest class of every node case. Made in a function: pytest collects every TestCase class
    it finds in the module, so this one must not be left there (it would report its ~3400 cases, most skipped)."""
    return BackendTest(ToynetBackend, __name__).test_cases["OnnxBackendNodeModelTest"]


def included_cases(cases: type) -> type:
    """A unittest class with the included cases only (BackendTest's own include() would report every other
    one of its cases as skipped)."""
    return type("OnnxNodeTests", cases.__bases__, {f"{name}_cpu": getattr(cases, f"{name}_cpu") for name in INCLUDED})


OnnxNodeTests = included_cases(all_cases())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (reference outputs divided by zero on purpose)
def test_every_excluded_case_is_refused_by_the_importer():
    # An exclusion stands for "the importer refuses this": each excluded case, run as ONNX's runner runs it, must
    # raise flow.onnx.ONNXImportError. One that passes should be included; one that gives another answer or
    # another error is a bug the exclusion would hide.
    cases = all_cases()
    not_refused = {}
    for name in EXCLUDED_CASES:
        case = cases(f"{name}_cpu")
        try:
            getattr(case, f"{name}_cpu")()
        except ONNXImportError:
            continue
        except Exception as error:  # noqa: BLE001  (what the case did instead of being refused)
            not_refused[name] = f"{type(error).__name__}: {str(error)[:200]}"
        else:
            not_refused[name] = "passes"
    assert not not_refused, not_refused


def test_at_least_400_of_onnxs_node_test_cases_run_through_toynet():
    # Each included case is a test of this module (OnnxNodeTests): together they must be at least 400.
    collected = [name for name in vars(OnnxNodeTests) if name.startswith("test_")]
    assert len(collected) == len(INCLUDED) >= MINIMUM_PASSING, (len(collected), len(INCLUDED))


def test_every_exclusion_pattern_still_excludes_something():
    # A pattern that matches nothing hides nothing: it should be deleted, not kept as a stale reason.
    for pattern in EXCLUDED:
        assert any(re.search(pattern, name) for name in SUPPORTED), pattern


def test_the_docs_list_the_imported_ops_and_the_passing_count():
    # docs/onnx.md states both; they must not drift from the code.
    text = (Path(__file__).parent.parent / "docs" / "onnx.md").read_text()
    listed = text.split("### The ONNX ops toynet imports")[1].split("\n\n")[1]
    assert sorted(op.strip(" .\n") for op in listed.replace("\n", " ").split(",")) == sorted(IMPORTERS)
    assert f"**{len(INCLUDED)} cases, all" in text
