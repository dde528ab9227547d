"""toynet.utils.global_view: to_global / to_local of tensors, lists, tuples, dicts and state dicts (one process,
placement ranks=[0]); and saving/loading them as OneFlow's save_load page does. tests/distributed/global_view.py
runs the same in two processes."""

from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict, namedtuple

import numpy as np
import pytest

import toynet as flow
from toynet import nn
from toynet.utils import global_view as gv

P = flow.placement("cpu", ranks=[0])
S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast
Pair = namedtuple("Pair", "first second")


@contextlib.contextmanager
def no_warnings():
    """A context in which any warning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def values(structure):
    """The structure with each tensor replaced by (is_global, its NumPy value), to compare whole structures."""
    if isinstance(structure, flow.Tensor):
        return (structure.is_global, structure.numpy().tolist())
    if isinstance(structure, dict):
        return type(structure)((k, values(v)) for k, v in structure.items())
    if isinstance(structure, (list, tuple)):
        items = [values(v) for v in structure]
        return type(structure)(*items) if hasattr(structure, "_fields") else type(structure)(items)
    return structure


# ------------------------------------------------------------------------------------------ every input kind


def test_the_module_is_where_oneflow_has_it():
    import toynet.utils.global_view as module
    assert flow.utils.global_view is module
    assert {"to_global", "to_local"} <= set(module.__all__)


def test_a_tensor_becomes_global_and_back():
    x = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    g = gv.to_global(x, placement=P, sbp=S0)
    assert g.is_global and g.placement == P and g.sbp == (S0,) and tuple(g.shape) == (2, 2)
    np.testing.assert_array_equal(g.numpy(), x.numpy())
    back = gv.to_local(g)
    assert not back.is_global
    np.testing.assert_array_equal(back.numpy(), x.numpy())


def test_positional_placement_and_sbp_as_in_oneflow_s_docstring():
    g = gv.to_global({"w": flow.ones(2)}, P, (B,))
    assert g["w"].sbp == (B,)


@pytest.mark.parametrize("sbp", [S0, (S0,), [S0]])
def test_sbp_may_be_one_sbp_or_a_tuple_or_list_of_one(sbp):
    assert gv.to_global([flow.ones(2, 2)], placement=P, sbp=sbp)[0].sbp == (S0,)


def test_none_comes_back_as_none_with_a_warning():
    with pytest.warns(UserWarning, match=r"to_global: 1 non-tensor leaf.*the input \(NoneType\)"):
        assert gv.to_global(None, placement=P, sbp=B) is None
    with no_warnings():
        assert gv.to_global(None, placement=P, sbp=B, warn_on_non_tensor_leaf=False) is None
        assert gv.to_local(None, warn_on_non_tensor_leaf=False) is None


def test_containers_keep_their_types_keys_and_order():
    a, b, c, d = flow.ones(2), flow.zeros(3), flow.arange(4), flow.ones(1, 2)
    inputs = {
        "list": [a, b],
        "tuple": (a, (b, [c])),
        "namedtuple": Pair(a, b),
        "dict": {"z": a, "a": {"inner": [b, c]}},
        "ordered": OrderedDict([("second", a), ("first", OrderedDict(x=b, y=(c, d)))]),
        "int keys": {0: a, 1: [b]},
    }
    for name, structure in inputs.items():
        g = gv.to_global(structure, placement=P, sbp=B)
        assert type(g) is type(structure), name
        local = gv.to_local(g)
        assert type(local) is type(structure), name
        assert values(local) == values(structure), name
        flat = [t for t in _tensors(g)]
        assert flat and all(t.is_global and t.sbp == (B,) for t in flat), name
        if isinstance(structure, dict):
            assert list(g) == list(structure), name


def _tensors(structure):
    if isinstance(structure, flow.Tensor):
        yield structure
    elif isinstance(structure, dict):
        for v in structure.values():
            yield from _tensors(v)
    elif isinstance(structure, (list, tuple)):
        for v in structure:
            yield from _tensors(v)


def test_non_tensor_leaves_pass_through_unchanged_with_one_warning_naming_them():
    array = np.arange(3)
    state = {"w": flow.ones(2), "lr": 0.1, "name": "adam", "steps": [1, 2], "array": array, "none": None}
    with pytest.warns(UserWarning) as caught:
        g = gv.to_global(state, placement=P, sbp=B)
    [message] = [str(w.message) for w in caught]
    assert message.startswith("to_global: 6 non-tensor leaf(s) kept as they are: input['lr'] (float), "
                              "input['name'] (str), input['steps'][0] (int), input['steps'][1] (int), "
                              "input['array'] (ndarray) and 1 more")
    assert "warn_on_non_tensor_leaf=False" in message
    assert g["lr"] == 0.1 and g["name"] == "adam" and g["steps"] == [1, 2] and g["array"] is array
    assert g["none"] is None
    with no_warnings():
        gv.to_global(state, placement=P, sbp=B, warn_on_non_tensor_leaf=False)
        local = gv.to_local(g, warn_on_non_tensor_leaf=False)
    assert local["array"] is array and local["lr"] == 0.1
    with pytest.warns(UserWarning, match=r"to_local: 6 non-tensor leaf"):
        gv.to_local(g)


def test_a_top_level_number_passes_through():
    with pytest.warns(UserWarning, match=r"the input \(int\)"):
        assert gv.to_global(3, placement=P, sbp=B) == 3
    with pytest.warns(UserWarning, match=r"to_local: 1 non-tensor leaf.*the input \(str\)"):
        assert gv.to_local("x") == "x"


def test_a_module_s_state_dict_round_trip():
    flow.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    with no_warnings():
        g = gv.to_global(model.state_dict(), placement=P, sbp=(B,))
    assert isinstance(g, OrderedDict) and list(g) == list(model.state_dict())
    assert all(v.is_global for v in g.values())           # OneFlow's docstring example prints True four times
    local = gv.to_local(g)
    assert all(not v.is_global for v in local.values())   # ...and to_local's, False four times
    fresh = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(local)
    for a, b in zip(model.parameters(), fresh.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def make_graph(call=True):
    flow.manual_seed(4)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    class TrainGraph(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss

    graph = TrainGraph()
    if call:
        graph(flow.ones(2, 3))
    return graph


def test_a_graph_s_state_dict_round_trip_with_numbers_among_the_tensors():
    state = make_graph().state_dict()
    with pytest.warns(UserWarning, match=r"input\['System-Train-Optimizer-0'\]\['param_groups'\]\[0\]\['lr'\] "
                                         r"\(float\)"):
        g = gv.to_global(state, placement=P, sbp=B)
    assert g["model"]["0.weight"].is_global and g["System-Train-TrainStep"].is_global
    assert g["System-Train-Optimizer-0"] == state["System-Train-Optimizer-0"]
    local = gv.to_local(g, warn_on_non_tensor_leaf=False)
    assert values(local) == values(state)
    resumed = make_graph(call=False)
    resumed.load_state_dict(local)       # what the page does with the loaded state dict
    assert values(resumed.state_dict()) == values(state)


# ------------------------------------------------------------------------------------------ sbp as a function


def test_sbp_function_gets_the_whole_input_and_each_tensor_as_on_the_page():
    state = {"System-Train-TrainStep": flow.tensor([3]),
             "module_pipeline": OrderedDict([("m_stage3.linear.weight", flow.ones(1, 2)),
                                             ("m_stage3.linear.bias", flow.zeros(1)),
                                             ("m_stage0.linear.weight", flow.ones(8, 16))])}
    calls = []

    def get_sbp(state_dict, tensor):   # the page's function
        calls.append((state_dict, tensor))
        if tensor is state_dict["System-Train-TrainStep"]:
            return flow.sbp.broadcast
        if tensor is state_dict["module_pipeline"]["m_stage3.linear.weight"]:
            return flow.sbp.split(1)
        if tensor is state_dict["module_pipeline"]["m_stage3.linear.bias"]:
            return flow.sbp.broadcast
        return flow.sbp.split(0)

    g = gv.to_global(state, placement=P, sbp=get_sbp)
    assert all(s is state for s, _ in calls) and [t for _, t in calls] == list(_tensors(state))
    assert g["System-Train-TrainStep"].sbp == (B,)
    pipeline = g["module_pipeline"]
    assert [pipeline[k].sbp for k in pipeline] == [(S1,), (B,), (S0,)]
    assert isinstance(pipeline, OrderedDict)


def test_sbp_function_may_return_a_tuple_and_may_be_any_callable():
    class Chooser:
        def __call__(self, state, tensor):
            return (S0,) if tensor.ndim else (B,)

    g = gv.to_global({"w": flow.ones(2, 2), "s": flow.tensor(1.0)}, placement=P, sbp=Chooser())
    assert g["w"].sbp == (S0,) and g["s"].sbp == (B,)


def test_a_tensor_there_twice_is_converted_once_and_stays_one_tensor():
    w = flow.ones(2, 2)
    seen = []
    g = gv.to_global({"a": w, "b": [w]}, placement=P, sbp=lambda s, t: seen.append(t) or B)
    assert g["a"] is g["b"][0] and len(seen) == 1
    local = gv.to_local(g)
    assert local["a"] is local["b"][0]


# ------------------------------------------------------------------------------------------ global inputs


def test_global_tensors_are_boxed_by_sbp_alone():
    g = gv.to_global({"w": flow.arange(6.0).reshape(2, 3)}, placement=P, sbp=S0)
    b = gv.to_global(g, sbp=B)
    assert b["w"].sbp == (B,) and b["w"].placement == P
    np.testing.assert_array_equal(b["w"].numpy(), np.arange(6.0).reshape(2, 3))
    same = gv.to_global(g, placement=P)     # the placement it has: the same tensors
    assert same["w"] is g["w"]
    s1 = gv.to_global(g, placement=P, sbp=lambda state, t: S1)
    assert s1["w"].sbp == (S1,)


def test_copy_gives_parts_that_share_no_memory():
    x = flow.ones(3)
    shared = gv.to_global(x, placement=P, sbp=B)
    copied = gv.to_global(x, placement=P, sbp=B, copy=True)
    x.add_(1)   # in place
    assert shared.numpy().tolist() == [2.0] * 3
    assert copied.numpy().tolist() == [1.0] * 3
    part = gv.to_local(copied, copy=True)
    part.add_(1)
    assert copied.numpy().tolist() == [1.0] * 3
    assert gv.to_global(x, placement=P, sbp=B, check_meta=False).is_global   # accepted, as OneFlow's code passes it


def test_gradients_flow_through_to_global_and_to_local():
    x = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
    g = gv.to_global({"x": x}, placement=P, sbp=S0)
    (gv.to_local(g)["x"] * 2).sum().backward()
    assert x.grad.numpy().tolist() == [2.0, 2.0, 2.0]


def test_to_local_keeps_local_tensors_with_a_warning():
    x = flow.ones(2)
    with pytest.warns(UserWarning, match=r"to_local: input\['a'\] is a local tensor already, kept as it is"):
        out = gv.to_local({"a": x})
    assert out["a"] is x


# ------------------------------------------------------------------------------------------ errors


def test_local_tensors_need_placement_and_sbp():
    for kwargs in ({"placement": P}, {"sbp": S0}, {}):
        with pytest.raises(TypeError, match=r"to_global: the input holds local tensors \(input\['w'\]...\): making "
                                            r"them global needs both placement= and sbp="):
            gv.to_global({"w": flow.ones(2)}, **kwargs)


def test_global_tensors_need_placement_or_sbp():
    g = gv.to_global([flow.ones(2)], placement=P, sbp=B)
    with pytest.raises(TypeError, match="holds global tensors; say what to change: placement=, sbp= or both"):
        gv.to_global(g)


def test_local_and_global_tensors_together_are_refused_naming_both():
    g = gv.to_global(flow.ones(2), placement=P, sbp=B)
    with pytest.raises(ValueError, match=r"must be all local or all global, but input\['b'\]\[0\] is local and "
                                         r"input\['a'\] is global; convert them in two calls"):
        gv.to_global({"a": g, "b": [flow.ones(2)]}, placement=P, sbp=B)


def test_a_bad_placement_or_sbp_says_what_is_expected():
    with pytest.raises(TypeError, match=r"placement must be a toynet.placement.*got 'cpu'"):
        gv.to_global(flow.ones(2), placement="cpu", sbp=B)
    with pytest.raises(TypeError, match=r"sbp must be an SBP .* or a function \(input, tensor\) -> SBP; got 'S0'"):
        gv.to_global(flow.ones(2), placement=P, sbp="S0")
    with pytest.raises(ValueError, match="2-D SBP"):
        gv.to_global(flow.ones(2), placement=P, sbp=(S0, B))
    with pytest.raises(TypeError, match="a function goes alone"):
        gv.to_global(flow.ones(2), placement=P, sbp=(lambda s, t: B,))
    with pytest.raises(NotImplementedError, match="grad_sbp"):
        gv.to_global(flow.ones(2), placement=P, sbp=B, grad_sbp=B)


def test_an_sbp_function_that_returns_something_else_is_named():
    def get_sbp(state, tensor):
        return "split"

    with pytest.raises(TypeError, match=r"the sbp function .*get_sbp returned 'split' for input\['m'\]\['w'\] "
                                        r"\(local shape \(2, 2\)\): sbp must be"):
        gv.to_global({"m": {"w": flow.ones(2, 2)}}, placement=P, sbp=get_sbp)


def test_a_tensor_that_cannot_take_the_sbp_is_named_with_the_way_out():
    state = {"w": flow.ones(2, 2), "step": flow.tensor(3)}
    with pytest.raises(ValueError, match=r"to_global of input\['step'\] \(local shape \(\), sbp toynet.sbp.split"
                                         r"\(dim=0\)\): a 0-d tensor has no dimension to split.*give some tensors "
                                         r"a layout of their own with sbp=a function"):
        gv.to_global(state, placement=P, sbp=S0)
    g = gv.to_global(state, placement=P, sbp=lambda s, t: B if t is s["step"] else S0)   # the way out
    assert g["step"].sbp == (B,)


def test_a_structure_that_contains_itself_is_refused():
    loop = [flow.ones(1)]
    loop.append(loop)
    with pytest.raises(ValueError, match=r"input\[1\] contains itself"):
        gv.to_global(loop, placement=P, sbp=B)
    with pytest.raises(ValueError, match=r"input\[1\] contains itself"):
        gv.to_local(loop)


# ------------------------------------------------------------------------------------------ saving and loading


def test_the_page_s_save_and_load_in_a_directory_per_rank(tmp_path):
    flow.manual_seed(6)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    state = model.state_dict()
    model_file_placement = P

    def get_sbp(state_dict, tensor):
        return flow.sbp.broadcast if tensor.ndim == 1 else flow.sbp.split(0)

    model_file_state_dict = gv.to_global(state, placement=model_file_placement, sbp=get_sbp)
    rank_id = flow.env.get_rank()
    state_dict_dir = tmp_path / f"graph_save_load_global_{rank_id}"
    if flow.env.get_rank() in model_file_placement.ranks:
        flow.save(gv.to_local(model_file_state_dict), state_dict_dir)

    local_state_dict = flow.load(state_dict_dir) if rank_id in model_file_placement.ranks else None
    global_state_dict = gv.to_global(local_state_dict, placement=model_file_placement, sbp=get_sbp)
    assert [v.sbp for v in global_state_dict.values()] == [(S0,), (B,), (S0,), (B,)]
    fresh = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    fresh.load_state_dict(gv.to_local(global_state_dict))
    for a, b in zip(model.parameters(), fresh.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
