"""A small MNIST or Fashion-MNIST in the exact format of the real files, made up on the spot.

For tests, the tutorial pages and examples on machines without the real data (they run offline).
``make_mnist(root, "FashionMNIST", n_train=64, n_test=16)`` writes the four gzip-compressed IDX files
(see :mod:`toynet.vision.mnist` for the format) into ``root/FashionMNIST/raw/``, where
``datasets.FashionMNIST(root)`` reads them.

Images are learnable, not pure noise: each class is a bright bar at its own angle, shifted and on noise,
so a small network learns them over a few epochs (and not at once, which would teach nothing).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

from ..backend import host  # image files are host data
from .mnist import SIDE, UNSIGNED_BYTE, MNIST


@dataclass
class FakeMnist:
    """What :func:`make_mnist` wrote: the raw folder and the images (N, 28, 28) and labels of each split."""

    raw_folder: str
    train_images: host.ndarray
    train_labels: host.ndarray
    test_images: host.ndarray
    test_labels: host.ndarray


def idx_bytes(array: host.ndarray) -> bytes:
    """An uint8 array in the IDX format: two zero bytes, the type, the rank, the sizes, the elements."""
    header = bytes([0, 0, UNSIGNED_BYTE, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + host.ascontiguousarray(array, dtype=host.uint8).tobytes()


def make_images(labels: host.ndarray, rng: host.random.Generator) -> host.ndarray:
    """(N, 28, 28) uint8 images: class k is a bar at angle 18k degrees (neighbouring classes differ by
    only 18), shifted off the centre, of varying brightness, on strong noise: learnable, but not at once."""
    rows, cols = host.mgrid[0:SIDE, 0:SIDE] - (SIDE - 1) / 2
    images = rng.normal(40, 45, size=(len(labels), SIDE, SIDE))
    for k, label in enumerate(labels):
        angle = host.pi * label / 10 + rng.normal(0, 0.08)
        shift = rng.uniform(-4, 4)
        distance = host.abs(rows * host.cos(angle) - cols * host.sin(angle) - shift)  # from the bar's centre line
        images[k][distance < 2.0] += rng.uniform(70, 160)
    return host.clip(images, 0, 255).astype(host.uint8)


def make_mnist(root: str | os.PathLike, name: str = "MNIST", n_train: int = 64, n_test: int = 16,
               seed: int = 0, compress: bool = True) -> FakeMnist:
    """Write a small ``name`` ("MNIST" or "FashionMNIST") under ``root``, as the real files are laid out."""
    if name not in ("MNIST", "FashionMNIST"):
        raise ValueError(f"make_mnist: name must be 'MNIST' or 'FashionMNIST', got {name!r}")
    rng = host.random.default_rng(seed)
    train_labels, test_labels = rng.integers(0, 10, n_train), rng.integers(0, 10, n_test)
    train_images, test_images = make_images(train_labels, rng), make_images(test_labels, rng)
    folder = os.path.join(os.fspath(root), name, "raw")
    os.makedirs(folder, exist_ok=True)
    contents = dict(zip(MNIST.files[True] + MNIST.files[False],
                        (train_images, train_labels, test_images, test_labels)))
    for file_name, array in contents.items():
        data = idx_bytes(array.astype(host.uint8))
        if compress:
            with gzip.open(os.path.join(folder, file_name + ".gz"), "wb") as f:
                f.write(data)
        else:
            with open(os.path.join(folder, file_name), "wb") as f:
                f.write(data)
    return FakeMnist(folder, train_images, train_labels, test_images, test_labels)


def find_or_make_mnist(root: str | os.PathLike, name: str = "MNIST", n_train: int = 640, n_test: int = 128,
                       seed: int = 0) -> str:
    """``root`` if the real data set is there, else a folder holding a small stand-in (never ``root`` itself,
    so the stand-in is not mistaken for the real data later): the ``root=`` to pass to the data set."""
    raw = os.path.join(os.fspath(root), name, "raw")
    if all(os.path.isfile(os.path.join(raw, f + ".gz")) or os.path.isfile(os.path.join(raw, f))
           for pair in MNIST.files.values() for f in pair):
        return os.fspath(root)
    stand_in = os.path.join(os.fspath(root), f"fake-{name.lower()}")
    make_mnist(stand_in, name, n_train=n_train, n_test=n_test, seed=seed)
    return stand_in
