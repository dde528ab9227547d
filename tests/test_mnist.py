"""MNIST and Fashion-MNIST from their IDX files: the stand-in writer and the reader agree, the header is
checked before anything is allocated, missing files give a message saying where to put them, and the
data sets work with transforms and the DataLoader."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

import toynet as flow
from toynet.vision import datasets, transforms
from toynet.vision.mnist import read_idx
from toynet.vision.mnist_fake import find_or_make_mnist, idx_bytes, make_mnist
from toynet.vision.pickle_machine import DatasetFormatError


@pytest.mark.parametrize("name", ["MNIST", "FashionMNIST"])
@pytest.mark.parametrize("compress", [True, False])
def test_reads_back_what_the_writer_wrote(tmp_path, name, compress):
    fake = make_mnist(tmp_path, name, n_train=12, n_test=5, seed=3, compress=compress)
    assert fake.raw_folder == os.path.join(str(tmp_path), name, "raw")
    cls = getattr(datasets, name)
    train, test = cls(tmp_path, train=True), cls(tmp_path, train=False)
    assert len(train) == 12 and len(test) == 5
    np.testing.assert_array_equal(train.data, fake.train_images)
    assert train.targets == fake.train_labels.tolist() and test.targets == fake.test_labels.tolist()
    image, label = test[2]
    assert image.shape == (28, 28) and image.dtype == np.uint8 and type(label) is int
    assert len(train.classes) == 10 and train.class_to_idx[train.classes[3]] == 3
    assert "Split: Test" in repr(test)


def test_classes_differ_between_the_two_data_sets():
    assert datasets.FashionMNIST.classes[9] == "Ankle boot" and datasets.MNIST.classes[9] == "9 - nine"


def test_transforms_and_the_dataloader(tmp_path):
    make_mnist(tmp_path, "FashionMNIST", n_train=10, n_test=4)
    one_hot = transforms.Lambda(lambda y: [float(y == k) for k in range(10)])
    data = datasets.FashionMNIST(tmp_path, download=True,
                                 transform=transforms.Compose([transforms.ToTensor(),
                                                               transforms.Normalize((0.5,), (0.5,))]),
                                 target_transform=one_hot)
    image, target = data[0]
    assert image.shape == (1, 28, 28) and image.dtype is flow.float32
    raw = data.data[0].astype(np.float32) / 255
    np.testing.assert_allclose(image.numpy()[0], (raw - 0.5) / 0.5, rtol=1e-6)
    assert sum(target) == 1 and target[data.targets[0]] == 1
    loader = flow.utils.data.DataLoader(datasets.FashionMNIST(tmp_path, transform=transforms.ToTensor()),
                                        batch_size=4, shuffle=True)
    x, y = next(iter(loader))
    assert x.shape == (4, 1, 28, 28) and y.shape == (4,) and y.dtype is flow.int64
    assert len(loader) == 3


def test_the_data_cannot_be_edited_through_an_item(tmp_path):
    make_mnist(tmp_path, n_train=2, n_test=1)
    image, _ = datasets.MNIST(tmp_path)[0]
    with pytest.raises(ValueError):
        image[0, 0] = 1


def test_missing_files_say_where_to_put_them(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        datasets.FashionMNIST(tmp_path, train=False, source_url="https://example.org/fmnist/")
    message = str(error.value)
    assert os.path.join(str(tmp_path), "FashionMNIST", "raw") in message
    assert "t10k-images-idx3-ubyte.gz" in message and "train-labels-idx1-ubyte.gz" in message
    assert "Pass download=True to fetch" in message and "https://example.org/fmnist/" in message
    assert os.listdir(tmp_path) == []  # downloads are tests/hostile/test_downloads.py


def write(path, data, compress=True):
    if compress:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


IMAGES = np.zeros((3, 28, 28), np.uint8)


@pytest.mark.parametrize("data,ndim,match", [
    (idx_bytes(IMAGES)[:9], 3, "ends inside its 16-byte header"),
    (b"\x00\x00\x09\x03" + idx_bytes(IMAGES)[4:], 3, "magic number is 00000903"),
    (idx_bytes(np.zeros(3, np.uint8)), 3, "magic number is 00000801, expected 00000803"),
    (idx_bytes(np.zeros((3, 28, 27), np.uint8)), 3, "28x27 pixels"),
    (idx_bytes(IMAGES)[:-1], 3, "promises 2352 bytes .* the file has 2351"),
    (idx_bytes(IMAGES) + b"\x00", 3, "the file has more"),
    (bytes([0, 0, 8, 1]) + (10**9).to_bytes(4, "big"), 1, "announces 1000000000 items"),
])
def test_damaged_headers_are_refused_before_allocating(tmp_path, data, ndim, match):
    with pytest.raises(DatasetFormatError, match=match):
        read_idx(write(tmp_path / "file.gz", data), ndim=ndim)


def test_a_damaged_gzip_is_a_format_error(tmp_path):
    path = tmp_path / "file.gz"
    path.write_bytes(b"\x1f\x8b\x08 this is not gzip")
    with pytest.raises(DatasetFormatError, match="not a readable gzip file"):
        read_idx(path, ndim=1)


def test_images_and_labels_must_belong_together(tmp_path):
    fake = make_mnist(tmp_path, n_train=4, n_test=2)
    write(tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz", idx_bytes(np.zeros(3, np.uint8)))
    with pytest.raises(DatasetFormatError, match="4 images but 3 labels"):
        datasets.MNIST(tmp_path)
    write(tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz", idx_bytes(np.array([1, 2, 12, 0], np.uint8)))
    with pytest.raises(DatasetFormatError, match="label 12 is outside 0..9"):
        datasets.MNIST(tmp_path)
    assert len(fake.test_labels) == 2


def test_find_or_make_never_writes_where_the_real_data_belongs(tmp_path):
    root = find_or_make_mnist(tmp_path, "FashionMNIST", n_train=8, n_test=2)
    assert root != str(tmp_path) and len(datasets.FashionMNIST(root)) == 8
    make_mnist(tmp_path, "FashionMNIST", n_train=5, n_test=1)  # now "the real one" is there
    assert find_or_make_mnist(tmp_path, "FashionMNIST") == str(tmp_path)


def test_stand_in_images_are_learnable(tmp_path):
    """Each class has its own bar: the mean image of a class is closer to its own class mean."""
    fake = make_mnist(tmp_path, n_train=200, n_test=0, seed=1)
    x, y = fake.train_images.reshape(200, -1).astype(float), fake.train_labels
    means = np.stack([x[y == k].mean(0) for k in range(10)])
    nearest = ((x[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (nearest == y).mean() > 0.8  # chance is 0.1


def test_lambda_rejects_non_functions():
    with pytest.raises(TypeError, match="Lambda expects a function"):
        transforms.Lambda(3)
    assert transforms.Lambda(lambda v: v + 1)(1) == 2
