"""Errors catchable the way OneFlow's and PyTorch's are, and messages that say what they found (issue 21)."""

from __future__ import annotations

import json

import pytest
from test_deploy_files import copy_of, mutate, saved  # noqa: F401,F811  (saved: the fixture)

import toynet as flow
from toynet.ops import ShapeError
from toynet.serialization import CheckpointError


@pytest.mark.parametrize("mistake", [
    lambda: flow.randn(2, 3) @ flow.randn(4, 5),
    lambda: flow.randn(2, 3) + flow.randn(4, 5),
    lambda: flow.randn(2, 3).reshape(7),
])
def test_a_shape_mistake_is_caught_as_runtime_error_and_as_value_error(mistake):
    for kind in (RuntimeError, ValueError, ShapeError):
        with pytest.raises(kind):
            mistake()


def test_too_many_nodes_says_how_many(saved, tmp_path):
    structure = json.loads((saved[0] / "structure.json").read_text())
    node = structure["graph"]["nodes"][0]
    root = copy_of(saved, tmp_path, lambda s: mutate(s, [(("graph", "nodes"), "replace", [node] * 50_001)],
                                                      tmp_path / "unused"))
    with pytest.raises(CheckpointError, match="a list of 50001 nodes"):
        flow.load(root)
