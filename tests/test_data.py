"""Datasets and the DataLoader: batching, seeded shuffling, collation of every supported sample type."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import toynet as flow
from toynet.utils.data import DataLoader, Dataset, Subset, TensorDataset, default_collate


class Pictures(Dataset):
    """Like an image data set on disk: uint8 HWC arrays and int labels, made on the fly."""

    def __init__(self, n=10):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.full((4, 4, 3), i, dtype=np.uint8), i


def test_tensor_dataset():
    x, y = flow.arange(12.0).reshape(6, 2), flow.arange(6)
    data = TensorDataset(x, y)
    assert len(data) == 6
    xi, yi = data[4]
    assert xi.tolist() == [8.0, 9.0] and yi.item() == 4
    with pytest.raises(ValueError, match=r"same number of samples.*\[6, 5\]"):
        TensorDataset(x, flow.arange(5))
    with pytest.raises(TypeError, match="not a tensor"):
        TensorDataset(x, [1, 2, 3, 4, 5, 6])
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(flow.tensor(1.0))


def test_batches_in_order_and_lengths():
    data = TensorDataset(flow.arange(10), flow.arange(10) * 10)
    loader = DataLoader(data, batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(loader.dataset) == 10
    assert [x.tolist() for x, _ in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [y.tolist() for _, y in batches][2] == [80, 90]
    dropping = DataLoader(data, batch_size=4, drop_last=True)
    assert len(dropping) == 2 and [len(x) for x, _ in dropping] == [4, 4]
    assert len(DataLoader(data, batch_size=5, drop_last=True)) == 2
    assert len(DataLoader(data, batch_size=11)) == 1 and len(DataLoader(data, batch_size=11, drop_last=True)) == 0
    assert list(DataLoader(TensorDataset(flow.zeros(0, 2)), batch_size=3)) == []


def test_shuffle_is_seeded_and_reshuffles_every_epoch():
    data = TensorDataset(flow.arange(50))

    def epochs(loader, n=2):
        return [[int(v) for (x,) in loader for v in x.tolist()] for _ in range(n)]

    flow.manual_seed(3)
    first = epochs(DataLoader(data, batch_size=8, shuffle=True))
    flow.manual_seed(3)
    again = epochs(DataLoader(data, batch_size=8, shuffle=True))
    assert first == again                                # reproducible under manual_seed
    assert first[0] != first[1]                          # a new order every epoch
    assert all(sorted(e) == list(range(50)) for e in first)
    assert first[0] != list(range(50))

    flow.manual_seed(4)
    assert epochs(DataLoader(data, batch_size=8, shuffle=True)) != first

    # A loader's own seed ignores the global generator.
    own = epochs(DataLoader(data, batch_size=8, shuffle=True, generator=7))
    flow.manual_seed(99)
    assert epochs(DataLoader(data, batch_size=8, shuffle=True, generator=7)) == own


def test_host_samples_collate_to_tensors_keeping_uint8():
    loader = DataLoader(Pictures(10), batch_size=4, shuffle=True)
    images, labels = next(iter(loader))
    assert isinstance(images, flow.Tensor) and images.dtype is flow.uint8 and images.shape == (4, 4, 4, 3)
    assert labels.dtype is flow.int64 and labels.shape == (4,)
    assert images.numpy()[:, 0, 0, 0].tolist() == labels.tolist()
    assert sum(len(y) for _, y in loader) == 10


def test_default_collate_types_and_structures():
    Pair = namedtuple("Pair", "image label")
    assert default_collate([1, 2]).dtype is flow.int64
    floats = default_collate([1.5, 2])
    assert floats.dtype is flow.float32 and floats.tolist() == [1.5, 2.0]
    assert default_collate([True, False]).dtype is flow.bool
    assert default_collate(["a", "b"]) == ["a", "b"]
    assert default_collate([np.float64(1.0), np.float64(2.0)]).dtype is flow.float64  # NumPy keeps its dtype
    stacked = default_collate([flow.ones(2, 3), flow.zeros(2, 3)])
    assert stacked.shape == (2, 2, 3) and stacked.dtype is flow.float32
    assert stacked.sum().item() == 6

    batch = default_collate([{"x": flow.ones(2), "y": 1, "meta": ("a", 0.5)},
                             {"x": flow.zeros(2), "y": 2, "meta": ("b", 1.5)}])
    assert set(batch) == {"x", "y", "meta"} and batch["x"].shape == (2, 2)
    assert batch["y"].tolist() == [1, 2]
    assert batch["meta"][0] == ["a", "b"] and batch["meta"][1].tolist() == [0.5, 1.5]

    pairs = default_collate([Pair(flow.ones(3), 0), Pair(flow.ones(3), 1)])
    assert isinstance(pairs, Pair) and pairs.image.shape == (2, 3) and pairs.label.tolist() == [0, 1]
    lists = default_collate([[1, 2.0], [3, 4.0]])
    assert isinstance(lists, list) and lists[0].tolist() == [1, 3] and lists[1].dtype is flow.float32


@pytest.mark.parametrize("batch, error, message", [
    ([flow.ones(2), flow.ones(3)], ValueError, r"sample 0 has shape \(2,\) but sample 1 has shape \(3,\)"),
    ([np.zeros(2), np.zeros(3)], ValueError, "same shape"),
    ([flow.ones(2), 1], TypeError, "sample 1 holds a int"),
    ([(1, 2), (1,)], ValueError, "same number of fields"),
    ([{"a": 1}, {"b": 1}], ValueError, "keys"),
    ([object(), object()], TypeError, "don't know how to batch a object"),
    ([np.array(["a"]), np.array(["b"])], TypeError, "dtype <U1"),
    ([], ValueError, "empty batch"),
])
def test_default_collate_explains_what_it_cannot_batch(batch, error, message):
    with pytest.raises(error, match=message):
        default_collate(batch)


def test_tensor_dataset_fast_path_equals_per_sample_collation(device):
    x = flow.randn(13, 3, device=device)
    y = flow.arange(13, device=device)
    data = TensorDataset(x, y)
    flow.manual_seed(1)
    fast = list(DataLoader(data, batch_size=5, shuffle=True))
    flow.manual_seed(1)
    slow = list(DataLoader(data, batch_size=5, shuffle=True, collate_fn=default_collate))
    assert len(fast) == len(slow) == 3
    for (fx, fy), (sx, sy) in zip(fast, slow):
        assert fx.device == device and fy.device == device
        np.testing.assert_array_equal(fx.numpy(), sx.numpy())
        np.testing.assert_array_equal(fy.numpy(), sy.numpy())
        np.testing.assert_array_equal(fx.numpy(), x.numpy()[fy.numpy()])


def test_custom_collate_fn_and_subset():
    loader = DataLoader(Subset(Pictures(10), [9, 3, 5]), batch_size=2, collate_fn=lambda s: [lab for _, lab in s])
    assert list(loader) == [[9, 3], [5]]
    assert len(Subset(Pictures(), range(4))) == 4


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_size": 0}, ValueError, "positive integer"),
    ({"batch_size": -2}, ValueError, "positive integer"),
    ({"batch_size": 2.5}, ValueError, "positive integer"),
    ({"batch_size": True}, ValueError, "positive integer"),
    ({"shuffle": "yes"}, TypeError, "shuffle should be True or False"),
    ({"drop_last": 1}, TypeError, "drop_last"),
    ({"collate_fn": 3}, TypeError, "collate_fn"),
    ({"generator": "seed"}, TypeError, "generator"),
    ({"num_workers": -1}, ValueError, "num_workers"),
])
def test_bad_loader_settings_are_rejected(kwargs, error, message):
    with pytest.raises(error, match=message):
        DataLoader(Pictures(), **kwargs)


def test_loader_needs_a_map_style_dataset():
    with pytest.raises(TypeError, match="__getitem__ and __len__"):
        DataLoader(iter([1, 2, 3]))
    with pytest.raises(NotImplementedError, match="__len__"):
        len(DataLoader(Dataset()))


def test_positional_batch_size_as_in_the_tutorial():
    loader = DataLoader(Pictures(10), 4, shuffle=True)
    assert loader.batch_size == 4 and len(loader) == 3
    assert "batch_size=4" in repr(loader)
