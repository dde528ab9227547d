"""toynet.save / toynet.load: exact round trips, no pickle, atomic replacement, clear errors on bad files."""

from __future__ import annotations

import json
import math
import os
from collections import OrderedDict

import numpy as np
import pytest

import toynet as flow
from toynet import nn, serialization
from toynet.serialization import CheckpointError, directory


def files_of(directory):
    """Every file under ``directory`` with its bytes, to prove a checkpoint was left untouched."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


def test_nested_structure_round_trips_exactly(tmp_path):
    shared = flow.randn(2, 3)
    obj = {
        "weights": OrderedDict([("a.weight", shared), ("a.bias", flow.zeros(3, dtype=flow.float64))]),
        "again": shared,
        3: [1, 2.5, True, None, "text", float("nan"), float("inf"), -float("inf")],
        "tuple": (flow.arange(4), flow.tensor([True, False]), flow.tensor(np.arange(6, dtype=np.uint8))),
        "numbers": {"int8": flow.tensor(np.array([-3], dtype=np.int8)), "half": flow.ones(2, dtype=flow.float16),
                    "int32": flow.tensor(np.array(7, dtype=np.int32))},
        "host": np.arange(5, dtype=np.int16),
        "numpy scalar": np.float32(0.25),
        "empty": {},
        "empty list": [],
    }
    flow.save(obj, tmp_path / "ckpt")
    back = flow.load(tmp_path / "ckpt")

    assert list(back) == list(obj)
    assert type(back["weights"]) is OrderedDict and list(back["weights"]) == ["a.weight", "a.bias"]
    np.testing.assert_array_equal(back["weights"]["a.weight"].numpy(), shared.numpy())
    assert back["again"] is back["weights"]["a.weight"]          # one tensor saved twice loads as one
    assert back["weights"]["a.bias"].dtype is flow.float64
    values = back[3]
    assert values[:5] == [1, 2.5, True, None, "text"] and type(values[2]) is bool and type(values[0]) is int
    assert math.isnan(values[5]) and values[6] == math.inf and values[7] == -math.inf
    assert isinstance(back["tuple"], tuple)
    for saved, loaded in zip(obj["tuple"] + tuple(obj["numbers"].values()),
                             back["tuple"] + tuple(back["numbers"].values())):
        assert loaded.dtype is saved.dtype and loaded.shape == saved.shape and loaded.device == saved.device
        np.testing.assert_array_equal(loaded.numpy(), saved.numpy())
    assert back["host"].dtype == np.int16 and back["host"].tolist() == [0, 1, 2, 3, 4]
    assert back["numpy scalar"] == 0.25 and back["empty"] == {} and back["empty list"] == []


def test_files_are_json_and_npz_without_pickle(tmp_path):
    flow.save({"w": flow.ones(2, 2), 0: [flow.arange(3)]}, tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["arrays.npz", "manifest.json", "structure.json"]
    structure = json.loads((tmp_path / "ckpt" / "structure.json").read_text())
    assert structure["format"] == "toynet-checkpoint" and structure["version"] == 2
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert manifest["format"] == "toynet-manifest" and sorted(manifest["files"]) == ["arrays.npz", "structure.json"]
    assert manifest["files"]["arrays.npz"]["size"] == os.path.getsize(tmp_path / "ckpt" / "arrays.npz")
    assert structure["kind"] == "state_dict"
    items = structure["root"]["items"]
    assert [(i["key"], i["key_type"]) for i in items] == [("w", "str"), (0, "int")]
    assert items[0]["value"] == {"type": "tensor", "array": "t0", "dtype": "float32", "shape": [2, 2],
                                 "device": "cpu:0", "requires_grad": False, "parameter": False}
    with np.load(tmp_path / "ckpt" / "arrays.npz", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["t0", "t1"] and archive["t1"].dtype == np.int64


def test_model_and_parameters_round_trip(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    flow.save(model.state_dict(), tmp_path / "model")
    fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(flow.load(tmp_path / "model"))
    x = flow.randn(5, 3)
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())

    flow.save({"p": model[0].weight}, tmp_path / "param")
    p = flow.load(tmp_path / "param")["p"]
    assert isinstance(p, nn.Parameter) and p.requires_grad


def test_devices_and_map_location(tmp_path, device):
    t = flow.randn(3, device=device)
    flow.save({"t": t}, tmp_path / "ckpt")
    back = flow.load(tmp_path / "ckpt")["t"]
    assert back.device == device
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    assert flow.load(tmp_path / "ckpt", map_location="cpu")["t"].device == flow.device("cpu")
    mapped = flow.load(tmp_path / "ckpt", map_location={str(device): "strict"})["t"]
    assert mapped.device == flow.device("strict")


def test_unavailable_saved_device_suggests_map_location(tmp_path):
    flow.save({"t": flow.ones(2)}, tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "structure.json"
    path.write_text(path.read_text().replace('"device": "cpu:0"', '"device": "tpu:0"'))
    reseal(tmp_path / "ckpt")
    with pytest.raises(RuntimeError, match="map_location='cpu'"):
        flow.load(tmp_path / "ckpt")
    assert flow.load(tmp_path / "ckpt", map_location="cpu")["t"].tolist() == [1.0, 1.0]


def test_saving_replaces_an_earlier_checkpoint(tmp_path):
    flow.save({"a": flow.ones(2)}, tmp_path / "ckpt")
    flow.save({"b": flow.zeros(3)}, tmp_path / "ckpt")
    assert list(flow.load(tmp_path / "ckpt")) == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]              # no temporary or backup directory left
    (tmp_path / "made_by_user").mkdir()                          # an empty directory is fine, as OneFlow's
    flow.save({"c": 1}, tmp_path / "made_by_user")               # tutorial makes it first
    assert flow.load(tmp_path / "made_by_user") == {"c": 1}


def test_an_unsavable_value_deep_inside_leaves_the_old_checkpoint_intact(tmp_path):
    flow.save({"model": {"w": flow.ones(2)}}, tmp_path / "ckpt")
    before = files_of(tmp_path / "ckpt")
    with pytest.raises(TypeError, match=r"obj\['model'\]\['layers'\]\[1\]: a object"):
        flow.save({"model": {"w": flow.zeros(2), "layers": [1, object()]}}, tmp_path / "ckpt")
    with pytest.raises(TypeError, match="key"):
        flow.save({("tuple", "key"): 1}, tmp_path / "ckpt")
    assert files_of(tmp_path / "ckpt") == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


@pytest.mark.parametrize("failing_step", ["structure.json", "swap"])
def test_a_failure_while_writing_leaves_the_old_checkpoint_intact(tmp_path, monkeypatch, failing_step):
    flow.save({"w": flow.ones(2)}, tmp_path / "ckpt")
    before = files_of(tmp_path / "ckpt")
    if failing_step == "structure.json":   # the disk fills up after arrays.npz was written
        real_write = directory._write_synced

        def write(file, fn):
            if file.name == "structure.json":
                raise OSError(28, "No space left on device")
            return real_write(file, fn)
        monkeypatch.setattr(directory, "_write_synced", write)
    else:                                  # the rename (or exchange) that puts the new directory in place fails
        real_rename = os.rename

        def rename(src, dst):
            if str(src).endswith(".saving"):
                raise OSError(5, "I/O error")
            real_rename(src, dst)
        monkeypatch.setattr(directory.os, "rename", rename)
        monkeypatch.setattr(directory, "exchange", lambda a, b: rename(a, b))
    with pytest.raises(OSError):
        flow.save({"w": flow.zeros(5)}, tmp_path / "ckpt")
    monkeypatch.undo()
    assert files_of(tmp_path / "ckpt") == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    assert flow.load(tmp_path / "ckpt")["w"].tolist() == [1.0, 1.0]


def test_save_refuses_to_overwrite_other_things(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a toynet checkpoint"):
        flow.save({"a": 1}, tmp_path / "notes")
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        flow.save({"a": 1}, tmp_path / "file")
    with pytest.raises(TypeError, match="state_dict"):
        flow.save(nn.Linear(2, 2), tmp_path / "model")
    with pytest.raises(ValueError, match="contains itself"):
        loop = []
        loop.append(loop)
        flow.save({"loop": loop}, tmp_path / "loop")


def reseal(root):
    """Rewrite a checkpoint's manifest to match its files as they are now: what a hostile or careless
    editor would do, so the checks behind the manifest are the ones that answer."""
    manifest = json.loads((root / "manifest.json").read_text())
    for name in list(manifest["files"]):
        if (root / name).exists():
            with open(root / name, "rb") as f:
                manifest["files"][name] = directory._digest(f)
    (root / "manifest.json").write_text(json.dumps(manifest))


def damage(tmp_path, how):
    root = tmp_path / "ckpt"
    flow.save({"w": flow.ones(4), "n": 1}, root)
    structure = root / "structure.json"
    data = json.loads(structure.read_text())
    if how == "missing structure":
        structure.unlink()
    elif how == "bad json":
        structure.write_text(structure.read_text()[:40])
    elif how == "foreign format":
        structure.write_text(json.dumps({"format": "something-else", "version": 1}))
    elif how == "newer version":
        structure.write_text(json.dumps({**data, "version": 99}))
    elif how == "missing arrays":
        (root / "arrays.npz").unlink()
    elif how == "truncated arrays":
        content = (root / "arrays.npz").read_bytes()
        (root / "arrays.npz").write_bytes(content[: len(content) // 2])
    elif how == "array missing":
        data["root"]["items"][0]["value"]["array"] = "t7"
        structure.write_text(json.dumps(data))
    elif how == "shape mismatch":
        data["root"]["items"][0]["value"]["shape"] = [5]
        structure.write_text(json.dumps(data))
    elif how == "unknown node":
        data["root"]["items"][1]["value"]["type"] = "complex"
        structure.write_text(json.dumps(data))
    elif how == "malformed node":
        del data["root"]["items"][1]["value"]["value"]
        structure.write_text(json.dumps(data))
    elif how == "unknown kind":
        structure.write_text(json.dumps({**data, "kind": "hologram"}))
    elif how == "a file":
        root = tmp_path / "model.pt"
        root.write_bytes(b"\x80\x04\x95pickle")
    if how not in ("missing structure", "missing arrays", "a file") and (root / "structure.json").exists():
        reseal(root)
    return root


@pytest.mark.parametrize("how, message", [
    ("missing structure", "no structure.json.*arrays.npz"),
    ("bad json", "not valid JSON"),
    ("foreign format", "'something-else'"),
    ("newer version", "version 99.*upgrade toynet"),
    ("missing arrays", "has no arrays.npz"),
    ("truncated arrays", "truncated or corrupt"),
    ("array missing", "no array 't7'"),
    ("shape mismatch", r"says float32 \[5\]"),
    ("unknown node", r"structure.json: obj\['n'\]: expected a node whose type is one of .* got 'complex'"),
    ("malformed node", r"structure.json: obj\['n'\]: expected a node of type 'int' with the fields type, value"),
    ("unknown kind", "kind 'hologram'"),
    ("a file", "is a file.*pickle"),
])
def test_damaged_or_foreign_checkpoints_give_clear_errors(tmp_path, how, message):
    root = damage(tmp_path, how)
    with pytest.raises(CheckpointError, match=message):
        flow.load(root)


def test_missing_checkpoint():
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        flow.load("/nonexistent/ckpt")


class Exported:
    """Stands in for nn.Graph's deployment export: its own kind, written through the public hooks."""

    def __init__(self, weight):
        self.weight = weight

    def _toynet_save_(self, path):
        root, arrays = serialization.encode({"weight": self.weight})
        serialization.write_checkpoint(path, {"kind": "test-exported", "state": root, "ops": ["matmul"]},
                                       arrays, files={"README.txt": b"an exported model"})


def test_save_and_load_hooks_for_other_kinds(tmp_path):
    serialization.register_loader("test-exported", lambda ckpt, map_location: Exported(
        serialization.decode(ckpt.structure["state"], ckpt, map_location)["weight"]))
    flow.save(Exported(flow.ones(2, 2)), tmp_path / "exported")
    assert (tmp_path / "exported" / "README.txt").read_bytes() == b"an exported model"
    with serialization.read_checkpoint(tmp_path / "exported") as checkpoint:
        assert checkpoint.read_file("README.txt") == b"an exported model"   # listed in the manifest
    back = flow.load(tmp_path / "exported")
    assert isinstance(back, Exported) and back.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_serialization_imports_no_higher_layer():
    """serialization sits with tensor, below static and nn: it must not import nn (nn.Parameter registers
    itself with register_tensor_class instead), or static.serialize would reach nn through it."""
    import ast
    import pathlib

    package = pathlib.Path(flow.__file__).parent
    for path in [*sorted((package / "serialization").rglob("*.py")), *sorted((package / "static").rglob("*.py"))]:
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = module.split(".")[:len(module.split(".")) - node.level] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []) + [a.name]) for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(("toynet.nn", "toynet.optim", "toynet.vision", "toynet.viz")), \
                    f"{path.name} imports {name}, a higher layer"


def test_map_location_keys_match_any_spelling_of_the_saved_device(tmp_path):
    flow.save({"t": flow.ones(2)}, tmp_path / "ckpt")
    path = tmp_path / "ckpt" / "structure.json"
    path.write_text(path.read_text().replace('"device": "cpu:0"', '"device": "tpu:0"'))
    reseal(tmp_path / "ckpt")
    for key in ("tpu", "tpu:0"):  # "tpu" is device tpu:0 however it is written
        assert flow.load(tmp_path / "ckpt", map_location={key: "cpu"})["t"].device == flow.device("cpu")
    with pytest.raises(RuntimeError, match="map_location='cpu'"):
        flow.load(tmp_path / "ckpt", map_location={"tpu:1": "cpu"})
