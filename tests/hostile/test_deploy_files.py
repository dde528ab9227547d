"""A deployed graph's files are data: loading one never runs code from it, and refuses, with a
CheckpointError naming the file, the entry and what was expected, anything toynet would not have
written (issue 10, findings 1 and 4).

``flow.load(dir)`` compiles Python source for the graph it reads. Strings from ``structure.json`` (state
names, node names, source lines) used to be pasted into comments of that source: a line break ended the
comment and the rest ran, while the model still gave the right outputs. Each injection here writes a
sentinel file if its code ever runs; none may, and each file must be refused before anything is built.

Every file edit here is "resealed" (manifest.json rewritten to match), as an attacker would do: the
manifest detects accidents, it is not a signature, so these checks must hold on their own.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toynet as flow
from json_paths import paths_of  # tests/hostile/json_paths.py
from toynet import nn
from toynet.ops import OPS
from toynet.serialization import CheckpointError
from toynet.static.compile import Plan
from toynet.static.ir import INPUT, OP, Graph, Node


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 5))

    def forward(self, x):
        return self.classifier(self.features(x) * 2.0).softmax(dim=1)


class Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


X = flow.randn(2, 3, 8, 8)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A deployed conv net (its directory) and what it computes on X."""
    flow.manual_seed(0)
    model = SmallConvNet()
    model.eval()
    graph = Infer(model)
    expected = graph(X).numpy()
    where = tmp_path_factory.mktemp("deployed") / "model"
    flow.save(graph, where)
    return where, expected


def reseal(root):
    """Make manifest.json (if the checkpoint has one) match the files as they are now."""
    manifest_file = Path(root) / "manifest.json"
    if manifest_file.exists():
        manifest = json.loads(manifest_file.read_text())
        for name in manifest["files"]:
            data = (Path(root) / name).read_bytes()
            manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        manifest_file.write_text(json.dumps(manifest))


def copy_of(saved, tmp_path, edit=None, edit_arrays=None):
    """A copy of the saved graph, its structure.json edited by ``edit(structure)`` and its arrays by
    ``edit_arrays(dict of arrays)``, resealed."""
    source, _ = saved
    root = tmp_path / "copy"
    root.mkdir()
    for f in source.iterdir():
        (root / f.name).write_bytes(f.read_bytes())
    if edit is not None:
        structure = json.loads((root / "structure.json").read_text())
        edit(structure)
        (root / "structure.json").write_text(json.dumps(structure).replace(f'"{DEEP}"', "[" * 5000 + "]" * 5000))
    if edit_arrays is not None:
        with np.load(root / "arrays.npz") as archive:
            arrays = {k: archive[k] for k in archive.files}
        edit_arrays(arrays)
        np.savez(root / "arrays.npz", **arrays)
    reseal(root)
    return root


DEEP = "(5000 nested lists)"   # written out as such by copy_of: json.dumps cannot nest that deep


def nodes(structure, kind=None, op=None):
    return [n for n in structure["graph"]["nodes"] if (kind is None or n["kind"] == kind)
            and (op is None or n.get("op") == op)]


def rename_node(structure, old, new):
    """Rename a node everywhere it is referred to, so only the name itself is wrong."""
    graph = structure["graph"]
    for n in graph["nodes"]:
        if n["name"] == old:
            n["name"] = new
        for x in n.get("inputs", []):
            if x.get("node") == old:
                x["node"] = new
    graph["inputs"] = [new if n == old else n for n in graph["inputs"]]
    graph["outputs"] = [new if n == old else n for n in graph["outputs"]]


def injected(sentinel):
    """Python that creates ``sentinel`` if it ever runs, behind a line break (indented as in run())."""
    return f"\n    __import__('pathlib').Path({str(sentinel)!r}).touch()\n    #"


def load_and_run(root):
    model = flow.load(root)
    return model(X).numpy()


# ------------------------------------------------------------------------------ code injection


def inject_state_name(structure, code):
    state = nodes(structure, "state")[0]
    state["state_name"] += code


def inject_node_name(structure, code):
    rename_node(structure, nodes(structure, "op")[0]["name"], nodes(structure, "op")[0]["name"] + code)


def inject_source(structure, code):
    nodes(structure, "op")[0]["source"] += code


def inject_graph_name(structure, code):
    structure["graph"]["name"] += code


def inject_scope(structure, code):
    nodes(structure, "op")[1]["scope"] += code


def inject_class(structure, code):
    structure["class"] += code


def inject_reduction(structure, code):  # a string attribute that emit rules would paste with repr
    nodes(structure, "op", "softmax")[0]["attrs"]["dim"] = "1" + code


def inject_literal(structure, code):    # a literal input (the 2.0 of "* 2.0"), pasted with repr
    for n in nodes(structure, "op", "mul"):
        n["inputs"] = [{"literal": "2.0" + code} if "literal" in x else x for x in n["inputs"]]


def inject_output_value(structure, code):
    structure["graph"]["output_structure"] = {"tuple": ["V", code]}


INJECTIONS = [inject_state_name, inject_node_name, inject_source, inject_graph_name, inject_scope,
              inject_class, inject_reduction, inject_literal, inject_output_value]


@pytest.mark.parametrize("inject", INJECTIONS, ids=lambda f: f.__name__)
def test_strings_from_structure_json_never_run_as_code(saved, tmp_path, inject):
    sentinel = tmp_path / "INJECTED_CODE_RAN"
    root = copy_of(saved, tmp_path, lambda s: inject(s, injected(sentinel)))
    refused = None
    try:
        load_and_run(root)
    except CheckpointError as error:
        refused = error
    assert not sentinel.exists(), f"code from structure.json ran ({inject.__name__})"
    assert refused is not None, "a structure.json with a line break of Python in it was loaded"
    assert str(root / "structure.json") in str(refused)


def test_a_loaded_graph_still_computes_what_was_saved(saved):
    root, expected = saved
    np.testing.assert_allclose(load_and_run(root), expected, rtol=1e-6, atol=1e-7)


def test_the_compiler_escapes_what_it_puts_in_comments():
    """Defence in depth: even a graph built in memory with such names compiles them as comment text."""
    graph = Graph("g\nimport os")
    x = Node("x", INPUT, (2,), flow.float32, flow.device("cpu"))
    y = Node("y\n    raise SystemExit('ran')\u2028\r#", OP, (2,), flow.float32, flow.device("cpu"), op=OPS["relu"],
             inputs=(x,), source="line\nraise SystemExit\x00")
    graph.nodes = [x, y]
    graph.inputs, graph.outputs = [x], [y]
    plan = Plan(graph)
    assert "raise SystemExit" not in [line.strip() for line in plan.source.splitlines()]
    assert "# y     raise SystemExit('ran')  #: relu    (line raise SystemExit\\x00)" in plan.source
    assert "\x00" not in plan.source and "\u2028" not in plan.source and "\r" not in plan.source
    np.testing.assert_array_equal(plan.run([np.array([-1.0, 2.0], dtype=np.float32)], [])[0], [0.0, 2.0])


# ------------------------------------------------------------------- arrays that disagree with the graph


def first_weight(structure):
    return next(n for n in nodes(structure, "state") if n["shape"] == [5, 64])["array"]


@pytest.mark.parametrize("case", ["broadcastable shape", "float64", "int32", "missing", "object"])
def test_arrays_must_have_the_shape_and_dtype_the_graph_declares(saved, tmp_path, case):
    structure = json.loads((saved[0] / "structure.json").read_text())
    name = first_weight(structure)

    def edit_arrays(arrays):
        if case == "broadcastable shape":        # (1, 64) would broadcast where (5, 64) was declared
            arrays[name] = arrays[name][:1]
        elif case == "missing":
            del arrays[name]
        elif case == "object":
            arrays[name] = np.array([None] * 320, dtype=object).reshape(5, 64)
        else:                                    # float64 weights would make float64 outputs
            arrays[name] = arrays[name].astype(case)
    if case == "object":
        root = copy_of(saved, tmp_path)
        arrays = dict(np.load(root / "arrays.npz"))
        edit_arrays(arrays)
        np.savez(root / "arrays.npz", **arrays, allow_pickle=True)
        reseal(root)
    else:
        root = copy_of(saved, tmp_path, edit_arrays=edit_arrays)
    with pytest.raises(CheckpointError, match=f"arrays.npz.*{name}") as error:
        load_and_run(root)
    assert str(root / "arrays.npz") in str(error.value)


@pytest.mark.parametrize("case", ["shape", "dtype"])
def test_a_state_node_declaring_another_shape_than_its_op_needs_is_refused(saved, tmp_path, case):
    def edit(structure):
        state = next(n for n in nodes(structure, "state") if n["shape"] == [5, 64])
        if case == "shape":
            state["shape"] = [1, 64]
        else:
            state["dtype"] = "float64"

    def edit_arrays(arrays):  # the array agrees with its (edited) node: the graph itself is wrong
        structure = json.loads((saved[0] / "structure.json").read_text())
        name = first_weight(structure)
        arrays[name] = arrays[name][:1] if case == "shape" else arrays[name].astype(np.float64)
    root = copy_of(saved, tmp_path, edit, edit_arrays)
    # (the first op that reads the weight: the fused linear on the fast path, the transpose on the lesson path)
    with pytest.raises(CheckpointError, match=r"structure.json: node model.classifier.1-(linear|permute)"):
        load_and_run(root)


# ------------------------------------------------------------------------- malformed graphs


def set_path(structure, path, value):
    target = structure
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


MALFORMED = {
    "unknown op": lambda s: nodes(s, "op")[0].update(op="system"),
    "a pass's op": lambda s: nodes(s, "op")[0].update(op="fused_elementwise"),
    "op name not a string": lambda s: nodes(s, "op")[0].update(op=["relu"]),
    "input from a later node": lambda s: nodes(s, "op")[0]["inputs"].__setitem__(
        0, {"node": nodes(s, "op")[-1]["name"]}),
    "input from itself": lambda s: nodes(s, "op")[0]["inputs"].__setitem__(0, {"node": nodes(s, "op")[0]["name"]}),
    "input from nowhere": lambda s: nodes(s, "op")[0]["inputs"].__setitem__(0, {"node": "nowhere"}),
    "duplicate node name": lambda s: nodes(s, "op")[1].update(name=nodes(s, "op")[0]["name"]),
    "duplicate state name": lambda s: nodes(s, "state")[1].update(state_name=nodes(s, "state")[0]["state_name"]),
    "name with a slash": lambda s: rename_node(s, nodes(s, "op")[0]["name"], "a/b"),
    "name too long": lambda s: rename_node(s, nodes(s, "op")[0]["name"], "a" * 201),
    "unknown attribute": lambda s: nodes(s, "op", "softmax")[0]["attrs"].update(out="x"),
    "attribute an input": lambda s: nodes(s, "op", "conv2d")[0]["attrs"].update(b=None),
    "attribute of the wrong type": lambda s: nodes(s, "op", "conv2d")[0]["attrs"].update(groups="1"),
    "attribute out of range": lambda s: nodes(s, "op", "conv2d")[0]["attrs"].update(groups=0),
    "stride 0": lambda s: nodes(s, "op", "conv2d")[0]["attrs"].update(stride={"tuple": [0, 0]}),
    "unknown tag": lambda s: nodes(s, "op", "conv2d")[0]["attrs"].update(stride={"pickle": "cos\nsystem"}),
    "deeply nested attribute": lambda s: nodes(s, "op", "softmax")[0]["attrs"].update(
        dim=json.loads("[" * 500 + "]" * 500)),
    "deeply nested file": lambda s: nodes(s, "op", "softmax")[0]["attrs"].update(dim=DEEP),
    "declared shape disagrees with the op": lambda s: nodes(s, "op", "relu")[0].update(shape=[2, 4, 8, 9]),
    "declared dtype disagrees with the op": lambda s: nodes(s, "op", "relu")[0].update(dtype="float64"),
    "dim out of range": lambda s: nodes(s, "op", "softmax")[0]["attrs"].update(dim=7),
    "huge shape": lambda s: nodes(s, "input")[0].update(shape=[2**40, 3]),
    "negative size": lambda s: nodes(s, "input")[0].update(shape=[-2, 3, 8, 8]),
    "float size": lambda s: nodes(s, "input")[0].update(shape=[2.0, 3, 8, 8]),
    "unknown dtype": lambda s: nodes(s, "input")[0].update(dtype="object"),
    "unknown node kind": lambda s: nodes(s, "input")[0].update(kind="python"),
    "missing field": lambda s: nodes(s, "op")[0].pop("attrs"),
    "extra field": lambda s: nodes(s, "op")[0].update(code="print(1)"),
    "unknown state kind": lambda s: nodes(s, "state")[0].update(state_kind="module"),
    "a literal that is not a number": lambda s: nodes(s, "op", "mul")[0]["inputs"].__setitem__(1, {"literal": [1]}),
    "inputs not listed": lambda s: s["graph"].update(inputs=[]),
    "an output that is no node": lambda s: s["graph"].update(outputs=["nowhere"]),
    "output structure of another count": lambda s: s["graph"].update(output_structure={"tuple": ["tuple", {
        "tuple": [{"tuple": ["T"]}, {"tuple": ["T"]}]}]}),
    "nodes not a list": lambda s: s["graph"].update(nodes={"a": 1}),
    "too many nodes": lambda s: s["graph"]["nodes"].extend([dict(nodes(s, "input")[0], name=f"i{k}")
                                                             for k in range(50_001)]),
    "graph missing": lambda s: s.pop("graph"),
    "class not a name": lambda s: s.update({"class": "a b"}),
    "a constant folding bomb": lambda s: s["graph"]["nodes"].extend([   # 8 GB computed while loading
        dict(op_node("one", [], "exp", [{"literal": 1.0}])),
        dict(op_node("big", [2**30], "broadcast_to", [{"node": "one"}]), attrs={"shape": {"tuple": [2**30]}}),
        op_node("bigger", [2**30], "exp", [{"node": "big"}])]),
    "an index bomb": lambda s: s["graph"]["nodes"].extend([
        dict(op_node("one", [], "exp", [{"literal": 1.0}])),
        dict(op_node("idx", [2**28], "broadcast_to", [{"node": "one"}]), attrs={"shape": {"tuple": [2**28]}}),
        dict(op_node("pick", [2**28], "getitem", [{"node": "one"}, {"node": "idx"}]),
             attrs={"index": {"tuple": ["<tensor>"]}})]),
}


def op_node(name, shape, op, inputs):
    return {"name": name, "kind": "op", "shape": shape, "dtype": "float64", "phase": "forward", "scope": "",
            "source": "", "op": op, "inputs": inputs, "attrs": {}}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_graphs_are_refused_naming_the_file_and_the_entry(saved, tmp_path, case):
    root = copy_of(saved, tmp_path, MALFORMED[case])
    with pytest.raises(CheckpointError) as error:
        load_and_run(root)
    message = str(error.value)
    assert str(root / "structure.json") in message and "expected" in message, message


def test_a_graph_is_refused_by_a_loader_asked_for_a_state_dict(saved, tmp_path):
    sentinel = tmp_path / "INJECTED_CODE_RAN"
    root = copy_of(saved, tmp_path, lambda s: inject_state_name(s, injected(sentinel)))
    with pytest.raises(CheckpointError, match="kind 'graph', not 'state_dict'"):
        flow.load(root, kind="state_dict")
    assert flow.load(saved[0], kind="graph")(X).shape == (2, 5)
    flow.save({"w": flow.ones(2)}, tmp_path / "sd")
    with pytest.raises(CheckpointError, match="kind 'state_dict', not 'graph'"):
        flow.load(tmp_path / "sd", kind="graph")
    assert flow.load(tmp_path / "sd", kind="state_dict")["w"].tolist() == [1.0, 1.0]
    assert not sentinel.exists()


def test_saving_a_graph_that_could_not_be_loaded_back_fails_with_nothing_written(tmp_path):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleDict({"my layer": nn.Linear(3, 2)})

        def forward(self, x):
            return self.layers["my layer"](x)
    graph = Infer(Net())
    graph(flow.randn(4, 3))
    with pytest.raises(ValueError, match="cannot save graph.*my layer"):
        flow.save(graph, tmp_path / "model")
    assert not (tmp_path / "model").exists() and os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------ fuzzing


WEIRD_TEXT = st.sampled_from(["", "\n", "a\nb", "'", '"', "\\", "\x00", "\u2028", "é", "../../etc", "a" * 300,
                              "relu", "float64", "cpu", "T", "V", "tuple", "<tensor>", "nan", "inf",
                              "__import__('os').system('touch /tmp/x')"])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=False)
    | WEIRD_TEXT | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(WEIRD_TEXT, children, max_size=3)
    | children.map(lambda v: {"tuple": [v]}) | children.map(lambda v: {"dtype": v}),
    max_leaves=8)


@st.composite
def mutations(draw, structure):
    """A few random edits of ``structure``: replace a value, delete a key or an item, nest deeply,
    duplicate an item, inject code into a string."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in paths_of(structure) if p]
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "nest", "duplicate", "inject", "huge"]))
        edits.append((path, action, draw(VALUES)))
    return edits


def mutate(structure, edits, sentinel):
    for path, action, value in edits:
        parent = structure
        try:
            for key in path[:-1]:
                parent = parent[key]
            key = path[-1]
            old = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, (dict, list)):   # an earlier edit made the path end inside a string
            continue
        if action == "replace":
            parent[key] = value
        elif action == "delete":
            del parent[key]
        elif action == "nest":
            parent[key] = DEEP if value is None else json.loads("[" * 200 + "]" * 200)
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, old)
        elif action == "inject":
            parent[key] = (old if isinstance(old, str) else "x") + injected(sentinel)
        elif action == "huge":
            parent[key] = 10**30 if not isinstance(old, list) else [2**31] * 40


def check_fuzzed(root, sentinel):
    try:
        model = flow.load(root)
    except CheckpointError:
        return "refused"
    finally:
        assert not sentinel.exists(), "code from a fuzzed structure.json ran"
    # It loaded: it is a working model of the declared interface.
    assert type(model).__name__ == "DeployedGraph"
    model(X)
    assert not sentinel.exists(), "code from a fuzzed structure.json ran"
    return "loaded"


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_structure_json_loads_a_working_graph_or_raises_checkpoint_error(saved, tmp_path_factory, data):
    structure = json.loads((saved[0] / "structure.json").read_text())
    tmp_path = tmp_path_factory.mktemp("fuzz")
    sentinel = tmp_path / "INJECTED_CODE_RAN"
    edits = data.draw(mutations(structure))
    root = copy_of(saved, tmp_path, lambda s: mutate(s, edits, sentinel))
    check_fuzzed(root, sentinel)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_arrays_npz_loads_a_working_graph_or_raises_checkpoint_error(saved, tmp_path_factory, data):
    tmp_path = tmp_path_factory.mktemp("fuzz")
    root = copy_of(saved, tmp_path)
    blob = bytearray((root / "arrays.npz").read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(blob) - 1))
        action = data.draw(st.sampled_from(["flip", "truncate", "insert", "zero"]))
        if action == "flip":
            blob[where] ^= data.draw(st.integers(1, 255))
        elif action == "truncate":
            del blob[where:]
            if not blob:
                break
        elif action == "insert":
            blob[where:where] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            blob[where:where + 8] = bytes(min(8, len(blob) - where))
    (root / "arrays.npz").write_bytes(bytes(blob))
    reseal(root)
    check_fuzzed(root, tmp_path / "INJECTED_CODE_RAN")


def test_attributes_left_at_their_defaults_load_on_both_paths(saved, tmp_path):
    """A saved op may leave out attributes that have their default (``groups`` of a convolution): every pass,
    the fast path's layout planning too, reads the op's default then (found by the fuzzer above)."""
    structure = json.loads((saved[0] / "structure.json").read_text())
    convs = [path for path, node in enumerate(structure["graph"]["nodes"]) if "groups" in node.get("attrs", {})]
    assert convs, "the saved model has convolutions"
    root = copy_of(saved, tmp_path, lambda s: mutate(s, [(("graph", "nodes", k, "attrs", "groups"), "delete", None)
                                                         for k in convs], tmp_path / "unused"))
    for fast in (False, True):
        with flow.set_fast_path(fast):
            np.testing.assert_allclose(flow.load(root)(X).numpy(), flow.load(saved[0])(X).numpy(), rtol=1e-5)
