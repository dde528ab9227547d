"""MNIST and Fashion-MNIST, read from their standard IDX files (``train-images-idx3-ubyte.gz``...).

Both data sets ship as four files in the same format (Yann LeCun's "IDX"), gzip-compressed:

    bytes 0-1   0x00 0x00
    byte  2     the element type: 0x08 is unsigned byte, the only one these data sets use
    byte  3     the number of dimensions: 3 for images (count, rows, columns), 1 for labels (count)
    then        one big-endian uint32 per dimension, then the elements, row-major

A file is data from outside, so the header is checked before anything is allocated: the magic bytes,
the number of dimensions, each dimension against a cap (28 x 28 pixels, at most :data:`MAX_ITEMS` items),
and then the body must have exactly the size the header promised (at most one byte more is ever
decompressed, so a "zip bomb" cannot fill the memory). Anything else raises
:class:`~toynet.vision.pickle_machine.DatasetFormatError` naming the file and what was wrong.

The files go in ``root/MNIST/raw/`` (or ``root/FashionMNIST/raw/``), where torchvision and flowvision
put them, compressed or not. ``download=True`` fetches the ones that are missing, as flowvision does,
through :mod:`toynet.utils.download`: each ``.gz`` is kept only if its MD5 is the one pinned in
:attr:`MNIST.resources`, whatever address it came from, then decompressed beside it (at most the size
the caps above allow); a failed download leaves the folder as it was.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

from ..backend import host  # image files are host data
from ..utils.download import ALREADY_THERE, DownloadError, all_or_nothing, check_integrity, download_url
from ..utils.unpack import gunzip
from .pickle_machine import DatasetFormatError
from .vision_dataset import VisionDataset

__all__ = ["MNIST", "FashionMNIST", "read_idx"]

UNSIGNED_BYTE = 0x08
SIDE = 28  # pixels per row and per column
MAX_ITEMS = 100_000  # the training files hold 60,000; a cap keeps a damaged header from allocating gigabytes


def read_idx(path: str | os.PathLike, ndim: int, max_items: int = MAX_ITEMS) -> Any:
    """The uint8 array of an IDX file of ``ndim`` dimensions (``.gz`` or not), read-only.

    For ``ndim == 3`` the array is (N, 28, 28); for ``ndim == 1`` it is (N,). Raises
    :class:`DatasetFormatError` on a header or size that is not MNIST's."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as stream:
            return _read_stream(stream, path, ndim, max_items)
    except (OSError, EOFError, zlib.error) as error:  # what gzip raises on a damaged archive
        raise DatasetFormatError(f"{path}: not a readable {'gzip ' if opener is gzip.open else ''}file "
                                 f"({error}); replace it with the original") from error


def _read_stream(stream: BinaryIO, path: str, ndim: int, max_items: int) -> Any:
    magic = stream.read(4)
    if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[2] != UNSIGNED_BYTE or magic[3] != ndim:
        raise DatasetFormatError(
            f"{path}: the magic number is {magic.hex() or 'missing'}, expected 000008{ndim:02x} (unsigned "
            f"bytes, {ndim} dimension{'s' if ndim > 1 else ''}): is this an "
            f"{'image' if ndim == 3 else 'label'} file of MNIST?")
    header = stream.read(4 * ndim)
    if len(header) < 4 * ndim:
        raise DatasetFormatError(f"{path}: the file ends inside its {4 + 4 * ndim}-byte header; it is truncated")
    dims = tuple(int.from_bytes(header[4 * i:4 * i + 4], "big") for i in range(ndim))
    if dims[0] > max_items:
        raise DatasetFormatError(f"{path}: the header announces {dims[0]} items, more than the {max_items} "
                                 f"allowed (MNIST has 60,000); the file is damaged or not MNIST")
    if ndim == 3 and dims[1:] != (SIDE, SIDE):
        raise DatasetFormatError(f"{path}: images of {dims[1]}x{dims[2]} pixels, expected {SIDE}x{SIDE}")
    size = int(host.prod(dims))
    body = stream.read(size + 1)  # one byte more than promised: enough to see that there is more
    if len(body) != size:
        raise DatasetFormatError(f"{path}: the header promises {size} bytes of data for shape {dims}, the "
                                 f"file has {'more' if len(body) > size else len(body)}; it is damaged")
    array = host.frombuffer(body, dtype=host.uint8).reshape(dims)
    array.flags.writeable = False  # items are views: a transform must not edit the data set
    return array


def _largest_idx(packed: str) -> int:
    """The most bytes the IDX file ``packed`` may decompress to: its header and :data:`MAX_ITEMS` items."""
    ndim = 3 if "-idx3-" in packed else 1
    return 4 + 4 * ndim + MAX_ITEMS * (SIDE * SIDE if ndim == 3 else 1)


class MNIST(VisionDataset):
    """MNIST: 70,000 grey 28x28 images of handwritten digits (60,000 train, 10,000 test).

    ``dataset[i]`` is ``(image, label)``: the image a (28, 28) ``uint8`` host array (``ToTensor`` makes it
    a (1, 28, 28) float32 tensor) after ``transform``, the label an int after ``target_transform``.
    ``data`` holds all images (N, 28, 28), ``targets`` the labels, ``classes`` the class names.

    ``download=True`` fetches whichever of the four files is missing from ``raw_folder``, trying each
    of :attr:`mirrors` in turn; ``source_url``, if given, is the address of the folder holding them
    (each file's name is added to it; it replaces the mirrors, as in flowvision). Each file is kept
    only if its MD5 is the one pinned in :attr:`resources`, whatever the address, and is decompressed
    beside its ``.gz``; on any failure nothing is kept and ``DownloadError`` says what to do. Files
    already there are never replaced: if all four ``.gz`` are the pinned ones it prints "Files already
    downloaded and verified", and any other copy (put there by hand, or the stand-in of
    :mod:`toynet.vision.mnist_fake`) is read as it is. Without ``download=True``, a missing file stops
    it at once, saying where to put which files.
    """

    files = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
    mirrors = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
    #: Each compressed file, its pinned MD5 (a download with another digest is not kept) and its size in
    #: bytes (a download may have at most twice that).
    resources = (("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9_912_422),
                 ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28_881),
                 ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1_648_877),
                 ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4_542))
    classes = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five", "6 - six", "7 - seven",
               "8 - eight", "9 - nine"]

    def __init__(self, root: str | os.PathLike, train: bool = True, transform: Callable | None = None,
                 target_transform: Callable | None = None, download: bool = False, source_url: str | None = None):
        self.root = os.path.expanduser(os.fspath(root))
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        self.source_url = source_url
        images_name, labels_name = self.files[bool(train)]
        if download:
            self.download()
        self.data = read_idx(self._find(images_name), ndim=3)
        labels = read_idx(self._find(labels_name), ndim=1)
        if len(labels) != len(self.data):
            raise DatasetFormatError(f"{self.raw_folder}: {len(self.data)} images but {len(labels)} labels; "
                                     f"the two files do not belong together")
        if labels.size and labels.max() >= len(self.classes):
            raise DatasetFormatError(f"{self.raw_folder}: label {int(labels.max())} is outside 0..9; the label "
                                     f"file is damaged")
        self.targets = labels.tolist()  # Python ints: what dataset[i] returns and DataLoader batches
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    @property
    def raw_folder(self) -> str:
        return os.path.join(self.root, type(self).__name__, "raw")

    def _sources(self) -> list[str]:
        """The folders to fetch the files from, in turn."""
        if self.source_url is None:
            return list(self.mirrors)
        if self.source_url.endswith(".gz"):
            raise ValueError(f"{type(self).__name__}: source_url={self.source_url!r} names one file; give the "
                             f"address of the folder holding all four (each file's name is added to it)")
        return [self.source_url if self.source_url.endswith("/") else self.source_url + "/"]

    def _find(self, name: str) -> str:
        """The path of file ``name``: compressed (as distributed) or already extracted."""
        for candidate in (name + ".gz", name):
            path = os.path.join(self.raw_folder, candidate)
            if os.path.isfile(path):
                return path
        wanted = [packed for packed, _, _ in self.resources]
        raise FileNotFoundError(
            f"{type(self).__name__} not found: there is no {os.path.join(self.raw_folder, name + '.gz')} (nor "
            f"the extracted {name}). Pass download=True to fetch the four files {', '.join(wanted)} from "
            f"{self.source_url or self.mirrors[0]}, or get them yourself and put them, compressed or not, in "
            f"{self.raw_folder}{os.sep}")

    # ------------------------------------------------------------------------------------- downloading

    def download(self) -> None:
        """Fetch the files missing from ``raw_folder``, all of them or none (see the class docstring)."""
        def there(packed: str) -> bool:
            return any(os.path.isfile(os.path.join(self.raw_folder, n)) for n in (packed, packed[:-3]))

        missing = [(packed, md5, size) for packed, md5, size in self.resources if not there(packed)]
        if not missing:
            if all(check_integrity(os.path.join(self.raw_folder, packed), md5=md5)
                   for packed, md5, _ in self.resources):
                print(ALREADY_THERE)
            return  # otherwise copies put here by hand, or a stand-in: read and checked as they are
        sources = self._sources()
        with all_or_nothing(self.raw_folder) as undo:
            for packed, md5, size in missing:
                path = undo.claim(os.path.join(self.raw_folder, packed))
                self._fetch(packed, md5, size, sources)
                gunzip(path, undo.claim(path[:-3]), max_bytes=_largest_idx(packed))  # beside it, as flowvision

    def _fetch(self, packed: str, md5: str, size: int, sources: list[str]) -> None:
        """Download ``packed`` from the first of ``sources`` that gives the pinned file."""
        failures = []
        for k, folder in enumerate(sources):
            try:
                download_url(folder + packed, self.raw_folder, packed, md5=md5, max_bytes=2 * size)
                return
            except DownloadError as error:
                failures.append(f"{error.url}: {error.reason}")
                if k + 1 < len(sources):
                    print(f"Failed to download (trying next): {error.reason}")
        tried = "; ".join(failures)
        raise DownloadError(
            f"Could not download {packed} for {type(self).__name__} ({tried}). Nothing was kept in "
            f"{self.raw_folder}. Check the network connection, or pass source_url= the address of a folder "
            f"holding the four files (a mirror: each must still have its pinned md5), or get them yourself "
            f"and put them in {self.raw_folder}{os.sep}", url=sources[-1] + packed, reason=tried)


class FashionMNIST(MNIST):
    """Fashion-MNIST: 70,000 grey 28x28 images of clothes in 10 classes, in MNIST's exact format and
    file names (a drop-in replacement that is harder to fit). Files in ``root/FashionMNIST/raw/``."""

    mirrors = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
    resources = (("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26_421_880),
                 ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe", 29_515),
                 ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79", 4_422_102),
                 ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310", 5_148))
    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]
