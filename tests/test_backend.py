"""The backend layer (dtypes, devices, transfers, random numbers, array helpers) and the strict
stand-in GPU of tests/strict_xp.py, which must refuse NumPy exactly where CuPy does and otherwise
behave like CuPy for everything the ops use."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import strict_xp
import toynet as flow
from toynet import backend
from toynet.ops import Op
from toynet.ops._op import full_reduction
from toynet.dynamic.tensor import apply

xp = strict_xp.xp


def S(values, dtype=np.float64):
    """A strict array holding ``values``."""
    return strict_xp.from_numpy(np.asarray(values, dtype=dtype))


def host(a):
    return strict_xp.to_numpy(a)


# ---------------------------------------------------------------------------- the strict device refuses

def test_strict_arrays_refuse_implicit_conversion_to_numpy():
    a = S([1.0, 2.0])
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(a)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.array([a, a])
    with pytest.raises(TypeError):
        np.exp(a)                               # NumPy ufuncs
    with pytest.raises(TypeError, match="numpy.sum was called"):
        np.sum(a)                               # NumPy functions (which would otherwise call a.sum())
    with pytest.raises(TypeError, match="numpy.concatenate"):
        np.concatenate([a, a])
    with pytest.raises(AttributeError):
        a.__array_interface__                   # no back door to the memory
    with pytest.raises(AttributeError):
        a.data


def test_strict_arrays_refuse_host_arrays_as_operands():
    a = S([1.0, 2.0])
    for mix in (lambda: a + np.ones(2), lambda: np.ones(2) + a, lambda: xp.add(a, np.ones(2)),
                lambda: xp.concatenate([a, np.ones(2)]), lambda: a.__setitem__(slice(None), np.ones(2))):
        with pytest.raises(TypeError, match="numpy.ndarray|does not support ufuncs"):
            mix()
    with pytest.raises(TypeError, match="Python list"):
        xp.exp([1.0, 2.0])                      # CuPy ufuncs take arrays and scalars only
    with pytest.raises(AttributeError, match="on the host"):
        xp.random
    np.testing.assert_array_equal(host(a + np.float32(1.0)), [2.0, 3.0])  # NumPy scalars are fine


def test_strict_device_catches_a_stray_numpy_call_in_an_op():
    class HostExp(Op):  # not registered: a deliberately wrong op that calls NumPy instead of xp
        name = "host_exp"

        def forward(self, xp_, a):
            return np.exp(a)

    np.testing.assert_allclose(apply(HostExp(), flow.tensor([0.0])).numpy(), [1.0])  # works on the CPU...
    with pytest.raises(TypeError):
        apply(HostExp(), flow.tensor([0.0], device="strict"))                      # ...fails as on a GPU


def test_strict_device_catches_an_op_returning_a_host_array():
    class HostZeros(Op):
        name = "host_zeros"

        def forward(self, xp_, a):
            return np.zeros(a.shape)

    t = apply(HostZeros(), flow.tensor([1.0], device="strict"))
    with pytest.raises(TypeError, match="returned a host array"):
        t.numpy()


# ------------------------------------------------------------------------------ ...and acts like CuPy

def test_strict_module_functions_wrap_and_unwrap():
    a, b = S([[1.0, 2.0], [3.0, 4.0]]), S([1.0, -1.0])
    for got, want in [
        (xp.matmul(a, b), [-1.0, -1.0]), (xp.concatenate([a, a[:1]]), [[1, 2], [3, 4], [1, 2]]),
        (xp.stack((b, b), axis=1), [[1, 1], [-1, -1]]), (xp.where(a > 2, a, 0.0), [[0, 0], [3, 4]]),
        (xp.sum(a, axis=0), [4, 6]), (xp.linalg.norm(b), np.sqrt(2)), (xp.transpose(a, (1, 0)), [[1, 3], [2, 4]]),
        (xp.einsum("ij,j->i", a, b), [-1, -1]), (xp.maximum(a, 2.5), [[2.5, 2.5], [3, 4]]),
    ]:
        assert isinstance(got, strict_xp.StrictArray)
        np.testing.assert_allclose(host(got), want)
    q, r = xp.linalg.qr(a)                       # tuples of arrays come back wrapped
    assert isinstance(q, strict_xp.StrictArray) and isinstance(r, strict_xp.StrictArray)
    assert xp.float32 is np.float32 and xp.newaxis is None and isinstance(a, xp.ndarray)


def test_strict_reductions_give_0d_arrays_as_cupy_does():
    a = S([1.0, 2.0, 3.0])
    for r in (xp.sum(a), a.sum(), a.max(), xp.mean(a), a[0], xp.dot(a, a)):
        assert isinstance(r, strict_xp.StrictArray) and r.shape == ()
    assert float(a.sum()) == 6.0 and bool(a.all()) and int(S(7, np.int64)) == 7
    assert a.sum().item() == 6.0 and a.tolist() == [1.0, 2.0, 3.0]


def test_strict_out_and_in_place_keep_the_array():
    a, out = S([1.0, 2.0]), xp.empty((2,))
    assert xp.add(a, 1.0, out=out) is out
    np.testing.assert_array_equal(host(out), [2.0, 3.0])
    same = out
    out += a
    out *= 2.0
    assert out is same
    np.testing.assert_array_equal(host(out), [6.0, 10.0])
    assert xp.asarray(a) is a                      # as cupy.asarray(cupy_array)


def test_strict_ufunc_methods_and_submodules():
    acc = xp.zeros(4)
    xp.add.at(acc, (S([0, 0, 3], np.int64),), S([1.0, 2.0, 5.0]))
    np.testing.assert_array_equal(host(acc), [3.0, 0.0, 0.0, 5.0])
    assert xp.add.reduce(S([1.0, 2.0])).item() == 3.0
    a = xp.arange(6.0)
    windows = xp.lib.stride_tricks.as_strided(a, shape=(3, 2), strides=(a.strides[0] * 2, a.strides[0]))
    np.testing.assert_array_equal(host(windows), [[0, 1], [2, 3], [4, 5]])


def test_strict_array_attributes_and_indexing():
    a = S(np.arange(12.0).reshape(3, 4))
    assert a.shape == (3, 4) and a.ndim == 2 and a.size == 12 and a.dtype == np.float64
    assert a.strides == (32, 8) and a.T.shape == (4, 3) and len(a) == 3
    assert a.reshape(4, 3).shape == (4, 3) and a.astype(np.float32).dtype == np.float32
    rows = S([2, 0], np.int64)
    np.testing.assert_array_equal(host(a[rows]), [[8, 9, 10, 11], [0, 1, 2, 3]])
    np.testing.assert_array_equal(host(a[np.array([2, 0])]), host(a[rows]))   # host index arrays too
    np.testing.assert_array_equal(host(a[a > 9]), [10, 11])
    b = a.copy()
    b[0] = 0.0
    b[rows, 1] = S([7.0, 8.0])
    assert host(a)[0].tolist() == [0.0, 1.0, 2.0, 3.0]      # the copy was changed, not the original
    assert host(b)[0].tolist() == [0.0, 8.0, 0.0, 0.0] and host(b)[2, 1] == 7.0
    assert [host(row).tolist() for row in S([[1.0], [2.0]])] == [[1.0], [2.0]]
    assert (-a).sum().item() == -66.0 and abs(-a).sum().item() == 66.0 and (~(a > 5)).sum().item() == 6
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        assert getattr(a, op)(5.0).dtype == np.bool_
    assert (2.0 ** S([1.0, 2.0])).tolist() == [2.0, 4.0] and (1.0 - S([1.0])).tolist() == [0.0]
    assert (S([[1.0, 2.0]]) @ S([[1.0], [1.0]])).tolist() == [[3.0]]


def test_strict_transfers_copy_and_arrays_copy_and_pickle():
    source = np.array([1.0, 2.0])
    a = strict_xp.from_numpy(source)
    source[0] = 9.0
    back = strict_xp.to_numpy(a)
    back[1] = 9.0
    assert host(a).tolist() == [1.0, 2.0]          # both directions copy, as between host and GPU
    assert host(copy.deepcopy(a)).tolist() == [1.0, 2.0]
    assert host(pickle.loads(pickle.dumps(a))).tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="host numpy.ndarray"):
        strict_xp.from_numpy(a)
    with pytest.raises(TypeError, match="strict"):
        strict_xp.to_numpy(np.ones(2))


# ----------------------------------------------------------------------------------------- dtypes

def test_to_dtype_accepts_every_spelling():
    for spec in (flow.float32, "float32", "float", np.float32, np.dtype("float32"), float):
        assert backend.to_dtype(spec) is flow.float32
    assert backend.to_dtype(int) is flow.int64 and backend.to_dtype(bool) is flow.bool
    assert backend.to_dtype("double") is flow.float64 and backend.to_dtype("long") is flow.int64
    assert backend.to_dtype("half") is flow.float16 and backend.to_dtype(np.uint8) is flow.uint8
    with pytest.raises(TypeError, match="unknown dtype 'int128'"):
        backend.to_dtype("int128")
    with pytest.raises(TypeError, match="unknown dtype"):
        backend.to_dtype(object())


def test_dtype_objects():
    assert flow.float32.itemsize == 4 and flow.float64.itemsize == 8 and flow.bool.itemsize == 1
    assert flow.float32.array_dtype == np.float32
    assert copy.deepcopy(flow.float32) is flow.float32 and pickle.loads(pickle.dumps(flow.int64)) is flow.int64
    assert backend.dtype_of(np.zeros(1, np.int32)) is flow.int32
    with pytest.raises(TypeError, match="not supported"):
        backend.dtype_of(np.zeros(1, np.complex64))


def test_promotion_treats_python_numbers_as_weak():
    assert backend.promote(flow.float32, 2.0) is flow.float32
    assert backend.promote(flow.float32, 2) is flow.float32
    assert backend.promote(flow.float32, flow.float64) is flow.float64
    assert backend.promote(flow.int64, 2.5) is flow.float64
    assert backend.promote(flow.int32, flow.int64) is flow.int64
    assert backend.promote(flow.bool, True) is flow.bool


# ---------------------------------------------------------------------------------------- devices

def test_devices():
    d = flow.device("cuda:1")
    assert (d.type, d.index, str(d)) == ("cuda", 1, "cuda:1")
    assert flow.device("cpu") == "cpu" and flow.device("strict") == flow.device("strict:0")
    assert flow.device("strict") != flow.device("cpu") and hash(flow.device("cpu")) == hash(backend.CPU)
    assert flow.device(flow.device("strict:0")).type == "strict"
    assert backend.to_device_obj(None) is backend.CPU
    with pytest.raises(ValueError, match="unknown device type 'gpu'.*known device types: cpu, cuda, strict"):
        flow.device("gpu")
    with pytest.raises(ValueError, match="different index"):
        flow.device("cuda:0", 1)
    with pytest.raises(ValueError, match="unknown device type"):
        backend.array_module_for("tpu")


def test_device_xp_and_array_modules():
    assert flow.device("cpu").xp is np
    assert flow.device("strict").xp is xp
    assert backend.array_module_of_xp(xp).name == "strict"
    with pytest.raises(ValueError, match="not a loaded array module"):
        backend.array_module_of_xp(object())


def test_transfers_round_trip():
    cpu, strict = flow.device("cpu"), flow.device("strict")
    a = np.arange(3.0)
    on_strict = backend.to_device(a, cpu, strict)
    assert isinstance(on_strict, strict_xp.StrictArray)
    assert backend.to_device(on_strict, strict, strict) is on_strict
    np.testing.assert_array_equal(backend.to_device(on_strict, strict, cpu), a)
    np.testing.assert_array_equal(backend.to_numpy(on_strict, strict), a)
    assert isinstance(backend.from_host([1, 2], strict, flow.float32), strict_xp.StrictArray)
    assert isinstance(backend.host_to_xp(xp, a), strict_xp.StrictArray)
    assert backend.as_device_value(2.5, strict) == 2.5
    assert backend.as_device_value(on_strict, strict) is on_strict
    assert isinstance(backend.as_device_value(a, strict), strict_xp.StrictArray)


def test_array_and_scalar_predicates():
    flow.device("strict").xp  # load the strict module
    assert backend.is_array(np.zeros(2)) and backend.is_array(S([1.0]))
    assert not backend.is_array([1.0]) and not backend.is_array(flow.tensor([1.0]))
    assert backend.is_host_scalar(2) and backend.is_host_scalar(np.float32(2))
    assert not backend.is_host_scalar(S(1.0))
    assert backend.host_scalar(np.float32(2.5)) == 2.5 and type(backend.host_scalar(np.int64(3))) is int


def test_full_reduction_gives_0d_arrays_on_every_module():
    for module in (np, xp):
        a = module.ones(3) if module is xp else np.ones(3)
        r = full_reduction(module, module.sum(a))
        assert r.shape == () and not isinstance(r, np.generic)


# ----------------------------------------------------------------------------------------- random

def test_rng_state_round_trip_and_seeding():
    backend.manual_seed(5)
    state = backend.get_rng_state()
    first = backend.generator().standard_normal(3)
    backend.set_rng_state(state)
    np.testing.assert_array_equal(backend.generator().standard_normal(3), first)
    backend.manual_seed(5)
    np.testing.assert_array_equal(backend.generator().standard_normal(3), first)


def test_random_draws_are_identical_on_every_device():
    strict = flow.device("strict")
    for draw in (lambda d: backend.random_normal((4,), flow.float32, d),
                 lambda d: backend.random_uniform((4,), -1.0, 1.0, flow.float64, d),
                 lambda d: backend.random_integers(0, 10, (4,), flow.int64, d)):
        backend.manual_seed(3)
        on_cpu = draw(backend.CPU)
        backend.manual_seed(3)
        np.testing.assert_array_equal(backend.to_numpy(draw(strict), strict), on_cpu)
    backend.manual_seed(3)
    assert sorted(backend.random_permutation(5).tolist()) == [0, 1, 2, 3, 4]


def test_bernoulli_mask(device):
    mask = backend.bernoulli_mask(device.xp, (20000,), keep=0.8, dtype=flow.float32)
    values = device.array_module.to_numpy(mask)
    assert values.dtype == np.float32
    assert set(np.unique(values).tolist()) == {0.0, np.float32(1 / 0.8)}
    assert abs(values.mean() - 1.0) < 0.03          # kept elements are scaled so the mean is unchanged


# ---------------------------------------------------------------------------------------- helpers

def test_index_result_shape():
    marker = "<tensor>"
    assert backend.index_result_shape((4, 5), (0,), [], marker) == (5,)
    assert backend.index_result_shape((4, 5), (slice(None), None, slice(1, 3)), [], marker) == (4, 1, 2)
    assert backend.index_result_shape((4, 5), (marker, Ellipsis), [((2, 3), flow.int64)], marker) == (2, 3, 5)
    with pytest.raises(IndexError):
        backend.index_result_shape((4, 5), (7,), [], marker)


def test_cuda_is_reported_unavailable_without_raising():
    assert backend.cuda_is_available() in (True, False)
    assert flow.cuda.is_available() == backend.cuda_is_available()


def test_the_shape_of_an_indexing_allocates_nothing_of_the_declared_size():
    """A deployed-graph or ONNX file may declare an indexing of (3, 2**31, 4) by a (1000, 1000) index: finding the
    result's shape must not allocate gigabytes (it once built one byte per output element)."""
    import tracemalloc

    from toynet import backend
    tracemalloc.start()
    try:
        shape = backend.index_result_shape((3, 2**31, 4), (slice(None), "M"), [((1000, 1000), backend.int64)], "M")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shape == (3, 1000, 1000, 4) and peak < 1 << 20
    with pytest.raises(IndexError):
        backend.index_result_shape((4, 5), (7,), [], "M")
