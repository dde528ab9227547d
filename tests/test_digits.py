"""The handwritten digits that ship with toynet (toynet/vision/digits.py): the real file, its split, and a
reader that refuses anything else before building anything."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

from toynet.vision import transforms
from toynet.vision.digits import DIGITS_FILE, MAX_TEXT_BYTES, Digits, read_digits, split
from toynet.vision.pickle_machine import DatasetFormatError


def test_the_shipped_file_is_scikit_learns_copy_of_the_uci_digits():
    with open(DIGITS_FILE, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == \
            "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
    images, labels = read_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    assert images.min() == 0 and images.max() == 255
    assert sorted(set(labels.tolist())) == list(range(10))


def test_the_split_holds_out_a_fifth_of_each_digit_the_same_way_every_time():
    _, labels = read_digits()
    train, held = split(labels)
    assert len(set(train) & set(held)) == 0 and len(train) + len(held) == len(labels)
    for digit in range(10):
        share = (labels[held] == digit).sum() / (labels == digit).sum()
        assert abs(share - 0.2) < 0.01
    again = split(labels)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], held)


def test_the_data_set_gives_images_and_labels_like_mnist():
    train, held = Digits(), Digits(train=False, transform=transforms.ToTensor())
    assert (len(train), len(held)) == (1438, 359)
    image, label = held[0]
    assert tuple(image.shape) == (1, 8, 8) and 0 <= label < 10
    assert float(image.numpy().max()) <= 1.0
    assert "Number of datapoints: 1438" in repr(train)


def write(tmp_path, text: bytes, name="digits.csv.gz"):
    path = tmp_path / name
    with gzip.open(path, "wb") as f:
        f.write(text)
    return path


@pytest.mark.parametrize("text, words", [
    (b"1,2,3\n", "expected lines of 64 pixels and a label"),
    (b",".join([b"17"] * 64) + b",3\n", "pixels must be in 0..16"),
    (b",".join([b"1"] * 64) + b",10\n", "labels in 0..9"),
    (b",".join([b"1"] * 64) + b",-1\n", "labels in 0..9"),
    (b",".join([b"x"] * 65) + b"\n", "not lines of comma-separated whole numbers"),
    (b"\xff\xfe" + b",".join([b"1"] * 65), "not lines of comma-separated whole numbers"),
])
def test_a_wrong_file_is_refused_with_what_was_expected(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(DatasetFormatError, match=words) as error:
        read_digits(path)
    assert str(path) in str(error.value)


def test_a_decompression_bomb_is_refused_before_it_is_read_whole(tmp_path):
    path = write(tmp_path, b"0," * (MAX_TEXT_BYTES // 2 + 10))
    assert path.stat().st_size < 100_000
    with pytest.raises(DatasetFormatError, match="decompresses to more than"):
        read_digits(path)


def test_an_oversized_file_is_refused_before_it_is_opened(tmp_path):
    path = tmp_path / "big.csv.gz"
    path.write_bytes(b"\0" * (2 << 20))
    with pytest.raises(DatasetFormatError, match="more than"):
        read_digits(path)
