"""State-dict checkpoints that are damaged, forged or hostile (issue 10, findings 1, 3 and 4).

``flow.load`` of such a directory raises ``CheckpointError`` naming the file, the entry and what was
expected, never a KeyError, TypeError, AttributeError, RecursionError or MemoryError; it reads only the
arrays ``structure.json`` refers to, each checked against its declared dtype and shape before its data is
read (an unreferenced 256 MB member of a 255 KB archive costs nothing); and the SHA-256 manifest catches
files that were truncated or changed after saving.

Edits are "resealed" (manifest.json rewritten to match, as anyone can) except where the manifest itself
is what is tested: it detects accidents, it is not a signature.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toynet as flow
from json_paths import paths_of  # tests/hostile/json_paths.py
from toynet.serialization import CheckpointError


def reseal(root):
    manifest_file = Path(root) / "manifest.json"
    if manifest_file.exists():
        manifest = json.loads(manifest_file.read_text())
        for name in manifest["files"]:
            data = (Path(root) / name).read_bytes()
            manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        manifest_file.write_text(json.dumps(manifest))


def saved(tmp_path):
    root = tmp_path / "ckpt"
    flow.save({"model": {"w": flow.randn(2, 3), "b": flow.zeros(3)}, "step": 7, "lr": 0.5, "names": ["a", "b"],
               "counts": np.arange(4, dtype=np.int16)}, root)
    return root


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return saved(tmp_path_factory.mktemp("template"))


def copied(template, tmp_path):
    """A copy of the template checkpoint (saving anew each time would mostly measure fsync)."""
    root = tmp_path / "ckpt"
    root.mkdir()
    for f in template.iterdir():
        (root / f.name).write_bytes(f.read_bytes())
    return root


def edit_structure(root, edit, text_edit=None):
    path = root / "structure.json"
    structure = json.loads(path.read_text())
    edit(structure)
    text = json.dumps(structure)
    path.write_text(text_edit(text) if text_edit else text)
    reseal(root)


def model_node(s, key):
    items = s["root"]["items"][0]["value"]["items"]
    return next(i["value"] for i in items if i["key"] == key)


def item(s, key):
    return next(i for i in s["root"]["items"] if i["key"] == key)


MALFORMED = {
    "root missing": lambda s: s.pop("root"),
    "root not a node": lambda s: s.update(root=5),
    "type missing": lambda s: s["root"].pop("type"),
    "type unknown": lambda s: s["root"].update(type="pickle"),
    "type not a string": lambda s: s["root"].update(type=["dict"]),
    "items not a list": lambda s: s["root"].update(items={"w": 1}),
    "item without a key": lambda s: item(s, "step").pop("key"),
    "key of another type than key_type": lambda s: item(s, "step").update(key=3),
    "key twice": lambda s: s["root"]["items"].append(item(s, "step")),
    "tensor without its array": lambda s: model_node(s, "w").pop("array"),
    "array name not a string": lambda s: model_node(s, "w").update(array=7),
    "array name with a path": lambda s: model_node(s, "w").update(array="../t0"),
    "array name with a line break": lambda s: model_node(s, "w").update(array="t0\nimport os"),
    "unknown dtype": lambda s: model_node(s, "w").update(dtype="complex64"),
    "object dtype": lambda s: model_node(s, "w").update(dtype="object"),
    "dtype not a string": lambda s: model_node(s, "w").update(dtype=["float32"]),
    "shape not a list": lambda s: model_node(s, "w").update(shape="2,3"),
    "negative size": lambda s: model_node(s, "w").update(shape=[-2, -3]),
    "float size": lambda s: model_node(s, "w").update(shape=[2.0, 3]),
    "bool size": lambda s: model_node(s, "w").update(shape=[True, 3]),
    "huge shape": lambda s: model_node(s, "w").update(shape=[2**40, 2**40]),
    "too many dimensions": lambda s: model_node(s, "w").update(shape=[1] * 40),
    "device not a string": lambda s: model_node(s, "w").update(device=0),
    "device with a line break": lambda s: model_node(s, "w").update(device="cpu\n"),
    "requires_grad not a bool": lambda s: model_node(s, "w").update(requires_grad="yes"),
    "unknown field": lambda s: model_node(s, "w").update(code="print(1)"),
    "one array described twice differently": lambda s: model_node(s, "b").update(array=model_node(s, "w")["array"]),
    "int holding a string": lambda s: item(s, "step")["value"].update(value="7"),
    "float holding text": lambda s: item(s, "lr")["value"].update(value="half"),
    "bool holding 1": lambda s: item(s, "step")["value"].update(type="bool", value=1),
    "deeply nested": lambda s: item(s, "names").update(value=DEEP),
    "nested past the limit": lambda s: item(s, "names").update(value=nested(200)),
    "kind not a name": lambda s: s.update(kind=["state_dict"]),
    "version a string": lambda s: s.update(version="2"),
    "structure a list": lambda s: s.clear(),
}
DEEP = "(deeply nested)"


def nested(depth):
    node = {"type": "list", "items": []}
    for _ in range(depth):
        node = {"type": "list", "items": [node]}
    return node


TEXT_EDITS = {
    "deeply nested": lambda text: text.replace(f'"{DEEP}"', "[" * 100_000 + "]" * 100_000),
    "structure a list": lambda text: "[]",
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_structures_raise_checkpoint_error_naming_file_entry_and_expectation(tmp_path, case):
    root = saved(tmp_path)
    edit_structure(root, MALFORMED[case], TEXT_EDITS.get(case))
    with pytest.raises(CheckpointError) as error:
        flow.load(root)
    message = str(error.value)
    assert str(root / "structure.json") in message or str(root) in message, message
    assert "expected" in message or "version" in message or "kind" in message, message


@pytest.mark.parametrize("text", ['{"format": NaN}', '{"format": "toynet-checkpoint", "format": "x"}', "\udcff"])
def test_json_that_toynet_never_writes_is_refused(tmp_path, text):
    root = saved(tmp_path)
    (root / "structure.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    reseal(root)
    with pytest.raises(CheckpointError, match="structure.json"):
        flow.load(root)


# --------------------------------------------------------------------------------- array members


def rewrite_arrays(root, edit, **savez):
    with np.load(root / "arrays.npz") as archive:
        arrays = {k: archive[k] for k in archive.files}
    edit(arrays)
    np.savez(root / "arrays.npz", **arrays, **savez)
    reseal(root)


def weight_array(root):
    structure = json.loads((root / "structure.json").read_text())
    return model_node(structure, "w")["array"]


ARRAY_CASES = {
    "missing": lambda a, w: a.pop(w),
    "broadcastable shape": lambda a, w: a.update({w: a[w][:1]}),
    "transposed shape": lambda a, w: a.update({w: np.ascontiguousarray(a[w].T)}),
    "float64": lambda a, w: a.update({w: a[w].astype(np.float64)}),
    "big-endian": lambda a, w: a.update({w: a[w].astype(">f4")}),
    "object (pickle)": lambda a, w: a.update({w: np.array([[None] * 3] * 2, dtype=object)}),
    "a string array": lambda a, w: a.update({w: np.array([["ab"] * 3] * 2)}),
}


@pytest.mark.parametrize("case", ARRAY_CASES)
def test_arrays_that_disagree_with_structure_json_are_refused(tmp_path, case):
    root = saved(tmp_path)
    name = weight_array(root)
    rewrite_arrays(root, lambda a: ARRAY_CASES[case](a, name), allow_pickle=True)
    with pytest.raises(CheckpointError, match=f"arrays.npz.*{name}"):
        flow.load(root)


def bomb_npz(root, referenced_as=None, megabytes=256):
    """Add to arrays.npz a deflated member of ``megabytes`` MB of zeros (a few hundred KB on disk)."""
    member = referenced_as or "unreferenced"
    with zipfile.ZipFile(root / "arrays.npz", "a", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (megabytes * 2**18,)})
        with archive.open(f"{member}.npy", "w", force_zip64=True) as f:
            f.write(header.getvalue())
            chunk = bytes(2**20)
            for _ in range(megabytes):
                f.write(chunk)
    reseal(root)


def peak_megabytes(action):
    tracemalloc.start()
    try:
        action()
    except CheckpointError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return peak


def test_an_unreferenced_member_is_never_read(tmp_path):
    root = saved(tmp_path)
    bomb_npz(root)
    assert (root / "arrays.npz").stat().st_size < 2**20       # a small file...
    peak = peak_megabytes(lambda: flow.load(root))            # ...that inflates to 256 MB if read
    assert peak < 32, f"loading allocated {peak:.0f} MB"
    assert flow.load(root)["model"]["w"].shape == (2, 3)


def test_a_referenced_member_larger_than_declared_is_refused_before_it_is_inflated(tmp_path):
    root = saved(tmp_path)
    name = weight_array(root)
    rewrite_arrays(root, lambda a: a.pop(name))
    bomb_npz(root, referenced_as=name)
    peak = peak_megabytes(lambda: flow.load(root))
    assert peak < 32, f"loading allocated {peak:.0f} MB"
    with pytest.raises(CheckpointError, match=f"arrays.npz, member {name}.npy.*declares"):
        flow.load(root)


def test_a_member_whose_zip_entry_lies_about_its_size_is_refused(tmp_path):
    """structure.json, the .npy header and the zip directory all say 2 GB; the file holds a few KB."""
    root = saved(tmp_path)
    name = weight_array(root)
    structure = json.loads((root / "structure.json").read_text())
    model_node(structure, "w")["shape"] = [2**29]
    (root / "structure.json").write_text(json.dumps(structure))
    rewrite_arrays(root, lambda a: a.pop(name))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**29,)})
    with zipfile.ZipFile(root / "arrays.npz", "a") as archive:
        archive.writestr(f"{name}.npy", header.getvalue() + bytes(64))
    blob = bytearray((root / "arrays.npz").read_bytes())
    entry = blob.find(f"{name}.npy".encode(), blob.find(b"PK\x01\x02")) - 46   # its central directory entry
    assert blob[entry:entry + 4] == b"PK\x01\x02"
    declared = len(header.getvalue()) + 2**31
    blob[entry + 20:entry + 28] = declared.to_bytes(4, "little") * 2             # compressed and full size
    (root / "arrays.npz").write_bytes(bytes(blob))
    reseal(root)
    peak = peak_megabytes(lambda: flow.load(root))
    assert peak < 32, f"loading allocated {peak:.0f} MB"
    with pytest.raises(CheckpointError, match=f"arrays.npz, member {name}.npy.*cannot be"):
        flow.load(root)


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "empty"])
def test_a_damaged_archive_is_refused(tmp_path, damage):
    root = saved(tmp_path)
    data = (root / "arrays.npz").read_bytes()
    (root / "arrays.npz").write_bytes({"not a zip": b"\x80\x04\x95" + data[3:], "truncated": data[:len(data) // 2],
                                       "empty": b""}[damage])
    reseal(root)
    with pytest.raises(CheckpointError, match="arrays.npz"):
        flow.load(root)


# --------------------------------------------------------------------------------------- manifest


def test_the_manifest_catches_truncation_and_corruption_naming_the_file(tmp_path):
    root = saved(tmp_path)
    data = (root / "arrays.npz").read_bytes()
    (root / "arrays.npz").write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match=r"arrays.npz is \d+ bytes, but manifest.json says \d+.*truncated"):
        flow.load(root)
    blob = bytearray(data)
    blob[len(blob) // 3] ^= 0x01                              # one bit of one number: still a valid zip
    (root / "arrays.npz").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="arrays.npz does not match its SHA-256 digest in manifest.json"):
        flow.load(root)
    (root / "arrays.npz").write_bytes(data)
    text = (root / "structure.json").read_text()
    (root / "structure.json").write_text(text.replace('"value": 7', '"value": 8'))
    with pytest.raises(CheckpointError, match="structure.json does not match its SHA-256"):
        flow.load(root)
    (root / "structure.json").write_text(text)
    assert flow.load(root)["step"] == 7


@pytest.mark.parametrize("case", ["missing", "not json", "a path", "unlisted structure", "bad digest"])
def test_a_bad_manifest_is_refused(tmp_path, case):
    root = saved(tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    if case == "missing":
        (root / "manifest.json").unlink()
    elif case == "not json":
        (root / "manifest.json").write_text("{")
    else:
        if case == "a path":
            manifest["files"]["../../etc/passwd"] = manifest["files"]["arrays.npz"]
        elif case == "unlisted structure":
            del manifest["files"]["structure.json"]
        else:
            manifest["files"]["arrays.npz"]["sha256"] = "x" * 64
        (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="manifest.json"):
        flow.load(root)


def test_a_checkpoint_of_version_1_has_no_manifest_and_still_loads(tmp_path):
    root = saved(tmp_path)
    (root / "manifest.json").unlink()
    structure = json.loads((root / "structure.json").read_text())
    structure["version"] = 1
    (root / "structure.json").write_text(json.dumps(structure))
    assert flow.load(root)["step"] == 7


@pytest.mark.parametrize("case", ["symlink to a file", "symlink to /dev/zero", "fifo", "directory"])
def test_files_that_are_not_plain_files_are_refused_without_blocking(tmp_path, case):
    root = saved(tmp_path)
    target = root / "arrays.npz"
    (tmp_path / "elsewhere.npz").write_bytes(target.read_bytes())
    target.unlink()
    if case == "symlink to a file":
        target.symlink_to(tmp_path / "elsewhere.npz")
    elif case == "symlink to /dev/zero":
        target.symlink_to("/dev/zero")
    elif case == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("loading blocked"))
    signal.alarm(10)
    try:
        with pytest.raises(CheckpointError, match="arrays.npz"):
            flow.load(root)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------------------------------- fuzzing


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=False)
    | st.sampled_from(["", "\n", "t0", "t1", "float32", "object", "../t0", "cpu", "cuda:0", "nan", "tensor",
                       "ndarray", "dict", "int", "str", "\x00", "a" * 300]) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8)


def plain(value):
    """Is ``value`` something a state dict holds: tensors, arrays, numbers, strings, containers of those?"""
    if isinstance(value, (dict, list, tuple)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return all(isinstance(k, (str, int)) and plain(v) for k, v in items)
    return value is None or isinstance(value, (bool, int, float, str, np.ndarray, flow.Tensor))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_structure_json_loads_plain_data_or_raises_checkpoint_error(template, tmp_path_factory, data):
    root = copied(template, tmp_path_factory.mktemp("fuzz"))
    structure = json.loads((root / "structure.json").read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in paths_of(structure) if p]
        path = data.draw(st.sampled_from(paths))
        parent = structure
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "duplicate", "huge", "deep"]))
        if action == "replace":
            parent[path[-1]] = data.draw(VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(path[-1], parent[path[-1]])
        elif action == "huge":
            parent[path[-1]] = 10**40 if not isinstance(parent[path[-1]], list) else [2**31] * 3
        elif action == "deep":
            parent[path[-1]] = nested(data.draw(st.integers(60, 300)))
    (root / "structure.json").write_text(json.dumps(structure))
    reseal(root)
    try:
        loaded = flow.load(root)
    except CheckpointError:
        return
    assert plain(loaded)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_arrays_npz_loads_plain_data_or_raises_checkpoint_error(template, tmp_path_factory, data):
    root = copied(template, tmp_path_factory.mktemp("fuzz"))
    blob = bytearray((root / "arrays.npz").read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, max(len(blob) - 1, 0)))
        action = data.draw(st.sampled_from(["flip", "truncate", "insert", "zero", "ff"]))
        if action == "flip" and blob:
            blob[where] ^= data.draw(st.integers(1, 255))
        elif action == "truncate":
            del blob[where:]
        elif action == "insert":
            blob[where:where] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            blob[where:where + 4] = (b"\x00" if action == "zero" else b"\xff") * len(blob[where:where + 4])
    (root / "arrays.npz").write_bytes(bytes(blob))
    reseal(root)
    try:
        loaded = flow.load(root)
    except CheckpointError:
        return
    assert plain(loaded) and loaded["model"]["w"].shape == (2, 3) and loaded["counts"].dtype == np.int16
