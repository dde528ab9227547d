"""Handwritten digits that ship with toynet: real data for honest accuracy figures, with no download.

The 1,797 images of the UCI "Optical Recognition of Handwritten Digits" test set (E. Alpaydin and C. Kaynak,
1998; licence CC BY 4.0), as scikit-learn ships them in ``sklearn/datasets/data/digits.csv.gz``: one line per
image, 64 pixel counts in 0..16 (an 8x8 image: each pixel counts the ink in a 4x4 block of a 32x32 scan) and
its label 0..9. ``toynet/vision/data/README.md`` says where the file comes from.

``Digits(train=True)`` gives 1,438 of them and ``Digits(train=False)`` the other 359: 20% of each digit's
images, picked by a seeded shuffle, are held out, so the split keeps each digit's share and is the same on
every machine. Images are ``(8, 8)`` uint8 arrays scaled to 0..255, as MNIST's are, so the same transforms
serve both.

The file is data, read with NumPy's text parser (no pickle) and checked before anything is built: its size, 65
integer columns a line, pixels in 0..16, labels in 0..9.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from typing import Any

from ..backend import host  # image files are host data
from .pickle_machine import DatasetFormatError
from .vision_dataset import VisionDataset

__all__ = ["Digits", "read_digits", "split"]

#: The file in the package, and the caps a reader checks before it parses anything.
DIGITS_FILE = os.path.join(os.path.dirname(__file__), "data", "digits.csv.gz")
MAX_COMPRESSED_BYTES, MAX_TEXT_BYTES = 1 << 20, 4 << 20
PIXELS, MAX_COUNT, CLASSES = 64, 16, 10
#: The held-out share of each class, and the seed of the shuffle that picks it.
HELD_OUT_SHARE, SPLIT_SEED = 0.2, 0


def read_digits(path: str | os.PathLike = DIGITS_FILE) -> tuple[Any, Any]:
    """``(images, labels)``: all the images as an ``(N, 8, 8)`` uint8 array in 0..255 and their labels."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size > MAX_COMPRESSED_BYTES:
        raise DatasetFormatError(f"{path}: {size} bytes, more than the {MAX_COMPRESSED_BYTES} a digits file can be")
    with gzip.open(path, "rb") as f:
        text = f.read(MAX_TEXT_BYTES + 1)
    if len(text) > MAX_TEXT_BYTES:
        raise DatasetFormatError(f"{path}: decompresses to more than {MAX_TEXT_BYTES} bytes")
    try:
        table = host.loadtxt(text.decode("ascii").splitlines(), delimiter=",", dtype=host.int64, ndmin=2)
    except (UnicodeDecodeError, ValueError) as error:
        raise DatasetFormatError(f"{path}: not lines of comma-separated whole numbers ({error})") from None
    if table.shape[1] != PIXELS + 1 or len(table) == 0:
        raise DatasetFormatError(f"{path}: expected lines of {PIXELS} pixels and a label, got a table of shape "
                                 f"{table.shape}")
    pixels, labels = table[:, :PIXELS], table[:, PIXELS]
    if pixels.min() < 0 or pixels.max() > MAX_COUNT or labels.min() < 0 or labels.max() >= CLASSES:
        raise DatasetFormatError(f"{path}: pixels must be in 0..{MAX_COUNT} and labels in 0..{CLASSES - 1}")
    images = (pixels * 255 + MAX_COUNT // 2) // MAX_COUNT   # 0..16 ink counts as 0..255 grey levels
    return images.astype(host.uint8).reshape(-1, 8, 8), labels


def split(labels: Any) -> tuple[Any, Any]:
    """Indices of the training and the held-out images: ``HELD_OUT_SHARE`` of each class, by a seeded shuffle."""
    rng = host.random.default_rng(SPLIT_SEED)
    held_out = []
    for digit in range(CLASSES):
        members = host.flatnonzero(labels == digit)
        held_out.extend(rng.permutation(members)[:round(len(members) * HELD_OUT_SHARE)])
    held = host.zeros(len(labels), dtype=bool)
    held[held_out] = True
    return host.flatnonzero(~held), host.flatnonzero(held)


class Digits(VisionDataset):
    """The handwritten digits above, as a data set: ``Digits(train=True, transform=ToTensor())[i]`` is a
    ``(1, 8, 8)`` image and its label. ``root`` is accepted for the same signature as the other data sets,
    and is only shown in the printout: the images ship with toynet."""

    classes = [str(d) for d in range(CLASSES)]

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True,
                 transform: Callable | None = None, target_transform: Callable | None = None):
        self.root, self.train = os.path.dirname(DIGITS_FILE) if root is None else root, train
        self.transform, self.target_transform = transform, target_transform
        images, labels = read_digits()
        kept = split(labels)[0 if train else 1]
        self.data = images[kept]
        self.targets = [int(label) for label in labels[kept]]
