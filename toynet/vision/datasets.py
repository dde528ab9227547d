"""Image data sets read from local files: CIFAR-10 in its standard "python version" archive (here), and
MNIST and Fashion-MNIST in their IDX files (:mod:`toynet.vision.mnist`).

The archive is read from ``root``, either straight out of the ``.tar.gz`` (nothing is extracted to
disk) or from the extracted folder. ``download=True`` fetches it when it is not there, as flowvision
does, through :mod:`toynet.utils.download`: the archive is kept only if its MD5 is the one pinned here
(:attr:`CIFAR10.archive_md5`), whatever address it came from, and a failed download leaves ``root`` as
it was.

**The CIFAR-10 python files are pickles** (written by Python 2 and NumPy in 2009), and unpickling a
file can run any code it names. So toynet does not unpickle them: :func:`read_batch` and
:func:`read_meta` read them with :mod:`toynet.vision.cifar_pickle`, which builds only plain data
(dicts, lists, strings, numbers) and rebuilds an array from its raw bytes with a plain numeric dtype
and a shape checked here against CIFAR-10's (``data``: uint8 rows of 3,072 pixels, at most 10,000 per
file; ``labels``: one int in 0..9 per row). Sizes are capped before anything is read or decompressed
(:mod:`toynet.vision.cifar_archive`). Anything else raises :class:`DatasetFormatError`, naming the
file, the part and what was expected. toynet's own file formats never use pickle.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..backend import host
from ..utils.download import ALREADY_THERE, check_integrity, download_url
from ..utils.unpack import download_and_extract_archive
from .cifar_archive import MEMBER_CAPS, STREAM_CAP, read_archive, read_file
from .cifar_pickle import PickledArray, read_pickle
from .digits import Digits  # noqa: F401  (the handwritten digits that ship with toynet)
from .mnist import MNIST, FashionMNIST, read_idx  # noqa: F401  (datasets.MNIST, as in torchvision)
from .pickle_machine import DatasetFormatError
from .vision_dataset import VisionDataset

__all__ = ["CIFAR10", "Digits", "MNIST", "FashionMNIST", "DatasetFormatError", "read_batch", "read_meta",
           "load_restricted_pickle", "read_idx"]

ROW = 3072  # 32 x 32 pixels x 3 colours
MAX_ROWS = 10_000  # images in one batch file
NUM_CLASSES = 10
MAX_NAME = 256  # characters of a batch label, file name or class name

# ------------------------------------------------------------------------------------------- CIFAR-10


class CIFAR10(VisionDataset):
    """CIFAR-10: 60,000 colour images of 32x32 pixels in 10 classes (50,000 train, 10,000 test).

    ``root`` is a folder holding either ``cifar-10-python.tar.gz`` (read without extracting) or the
    extracted ``cifar-10-batches-py/``. ``dataset[i]`` is ``(image, label)``: the image an HWC
    ``uint8`` host array of shape (32, 32, 3) (after ``transform``, if given) and the label an int
    (after ``target_transform``). As in torchvision, ``data`` holds all images (N, 32, 32, 3),
    ``targets`` the labels, ``classes`` the class names.

    ``download=True`` fetches ``cifar-10-python.tar.gz`` (163 MB) from ``url``, or from ``source_url``
    if given (a mirror: OneFlow's tutorials pass one), into ``root`` and unpacks it there, unless the
    data set is already there. The archive is kept only if its MD5 is :attr:`archive_md5`, whatever
    the address; on any failure nothing is kept and ``DownloadError`` says what to do. Files already
    in ``root`` are never replaced: a pinned archive prints "Files already downloaded and verified",
    any other copy (one put there by hand, or the stand-in of :mod:`toynet.vision.fake_cifar`) is read
    as it is. Without ``download=True``, missing files stop it at once with a message saying where to
    put which file. The files are pickles, read by :func:`read_batch` and :func:`read_meta` without
    unpickling: anything but CIFAR-10's plain data and uint8 pixel rows raises
    :class:`DatasetFormatError`.

    >>> from toynet.vision import datasets, transforms
    >>> train = datasets.CIFAR10("data", train=True, transform=transforms.ToTensor())  # doctest: +SKIP
    """

    archive_name = "cifar-10-python.tar.gz"
    base_folder = "cifar-10-batches-py"
    train_list = tuple(f"data_batch_{i}" for i in range(1, 6))
    test_list = ("test_batch",)
    meta_file = "batches.meta"
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    archive_md5 = "c58f30108f718f92721af3b95e74349a"  # pinned: a download with another digest is not kept
    archive_size = 170_498_071  # bytes; a download may have at most twice this
    image_shape = (3, 32, 32)  # how a row of the files' 3072 bytes is laid out: channel-major

    def __init__(self, root: str | os.PathLike, train: bool = True, transform: Callable | None = None,
                 target_transform: Callable | None = None, download: bool = False, source_url: str | None = None):
        self.root = os.path.expanduser(os.fspath(root))
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        self.source_url = source_url or self.url
        batch_names = self.train_list if train else self.test_list
        if download:
            self.download()
        files = self._read_files([*batch_names, self.meta_file])

        images, self.targets = [], []
        for name in batch_names:
            data, labels = read_batch(files.pop(name), self._source(name))
            images.append(data)
            self.targets.extend(labels)
        flat = host.concatenate(images) if images else host.zeros((0, ROW), dtype=host.uint8)
        # Each row is 1024 red, then 1024 green, then 1024 blue bytes: reshape to NCHW, then make HWC.
        self.data = host.ascontiguousarray(flat.reshape(-1, *self.image_shape).transpose(0, 2, 3, 1))
        self.data.flags.writeable = False  # items are views: a transform must not edit the data set
        self.classes = read_meta(files[self.meta_file], self._source(self.meta_file))
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    # ------------------------------------------------------------------------------- finding the files

    def download(self) -> None:
        """Fetch and unpack the archive into ``root``, unless the data set is already there (see the class)."""
        archive = os.path.join(self.root, self.archive_name)
        folder = os.path.join(self.root, self.base_folder)
        if check_integrity(archive, md5=self.archive_md5):
            print(ALREADY_THERE)
            return
        names = [*(self.train_list if self.train else self.test_list), self.meta_file]  # what this split reads
        if os.path.isfile(archive) or all(os.path.isfile(os.path.join(folder, n)) for n in names):
            return  # a copy put here by hand, or a stand-in: read and checked as it is, never replaced
        pinned = {"md5": self.archive_md5, "max_bytes": 2 * self.archive_size,
                  "advice": f"Check the network connection, or pass source_url= the address of a mirror of "
                            f"{self.archive_name} (it must still have md5 {self.archive_md5}), or download it "
                            f"yourself and put it, unextracted, at {archive}."}
        if os.path.lexists(folder):  # half an extracted folder: keep it, the archive is read in its place
            download_url(self.source_url, self.root, self.archive_name, **pinned)
        else:  # unpacked as flowvision does; at most the members and bytes the real archive may have
            download_and_extract_archive(self.source_url, self.root, self.archive_name, **pinned,
                                         max_extracted=STREAM_CAP, max_members=len(MEMBER_CAPS) + 1)

    def _source(self, name: str) -> str:
        """Where file ``name`` came from, for error messages."""
        return os.path.join(self._origin, name) if self._origin_is_dir else f"{self._origin}:{name}"

    def _read_files(self, names: list[str]) -> dict[str, bytes]:
        """The bytes of the named files from the extracted folder if it is complete, else from the archive."""
        folder = os.path.join(self.root, self.base_folder)
        archive = os.path.join(self.root, self.archive_name)
        if all(os.path.isfile(os.path.join(folder, n)) for n in names):
            self._origin, self._origin_is_dir = folder, True
            return {name: read_file(os.path.join(folder, name), name) for name in names}
        if os.path.isfile(archive):
            self._origin, self._origin_is_dir = archive, False
            return read_archive(archive, names, self.source_url)
        raise FileNotFoundError(self._not_found_message(folder, archive, names))

    def _not_found_message(self, folder: str, archive: str, names: list[str]) -> str:
        if os.path.isdir(folder):
            missing = [n for n in names if not os.path.isfile(os.path.join(folder, n))]
            found = f"{folder} exists but lacks {', '.join(missing)}, and there is no {archive}"
        else:
            found = f"neither {archive} nor {folder}{os.sep} exists"
        return (f"CIFAR-10 not found: {found}. Pass download=True to fetch {self.archive_name} (about 163 MB) "
                f"from {self.source_url}, or get the python version of CIFAR-10 yourself and put that file, "
                f"unextracted, at {archive}; or extract it so that {os.path.join(folder, names[0])} exists.")


def read_batch(data: bytes, source: str) -> tuple[Any, list[int]]:
    """The (N, 3072) uint8 pixel rows (a read-only array) and the N labels of one batch file's bytes.

    ``source`` names the file in messages. The file must be a pickled dict with ``data`` (N <= 10,000
    rows) and ``labels`` (N ints in 0..9), and may have ``batch_label`` (a string) and ``filenames`` (N
    strings); anything else raises :class:`DatasetFormatError` before an array is made."""
    batch = _fields(read_pickle(data, source, max_elements=MAX_ROWS * ROW), source,
                    required=("data", "labels"), optional=("batch_label", "filenames"))
    array = batch["data"]
    if (type(array) is not PickledArray or not array.complete or array.dtype != "|u1" or len(array.shape) != 2
            or array.shape[1] != ROW or array.shape[0] > MAX_ROWS):
        raise DatasetFormatError(f"{source}: 'data' must be a uint8 array of shape (N, {ROW}) with N <= "
                                 f"{MAX_ROWS}, got {array!r}")
    n = array.shape[0]
    labels = batch["labels"]
    if type(labels) is not list or len(labels) != n or not all(type(t) is int for t in labels):
        raise DatasetFormatError(f"{source}: 'labels' must be a list of {n} ints, one per image row")
    bad = sorted({t for t in labels if not 0 <= t < NUM_CLASSES})
    if bad:
        raise DatasetFormatError(f"{source}: labels {bad[:5]} are outside 0..{NUM_CLASSES - 1}; the file is damaged")
    if "batch_label" in batch:
        _name(batch["batch_label"], source, "'batch_label'")
    if "filenames" in batch:
        names = batch["filenames"]
        if type(names) is not list or len(names) != n:
            raise DatasetFormatError(f"{source}: 'filenames' must be a list of {n} strings, one per image row")
        for name in names:
            _name(name, source, "each of 'filenames'")
    return array.to_numpy(copy=False), labels


def read_meta(data: bytes, source: str) -> list[str]:
    """The 10 class names in the bytes of ``batches.meta`` (``source`` names it in messages)."""
    meta = _fields(read_pickle(data, source, max_elements=0), source, required=("label_names",),
                   optional=("num_cases_per_batch", "num_vis"))
    names = meta["label_names"]
    if type(names) is not list or len(names) != NUM_CLASSES:
        raise DatasetFormatError(f"{source}: 'label_names' must be a list of {NUM_CLASSES} class names")
    cases, vis = meta.get("num_cases_per_batch", 0), meta.get("num_vis", ROW)
    if type(cases) is not int or not 0 <= cases <= MAX_ROWS or type(vis) is not int or vis != ROW:
        raise DatasetFormatError(f"{source}: 'num_cases_per_batch' must be an int up to {MAX_ROWS} and "
                                 f"'num_vis' {ROW}")
    return [_name(n, source, "each of 'label_names'") for n in names]


def load_restricted_pickle(data: bytes, source: str) -> Any:
    """Read the pickle ``data`` (the bytes of a file named ``source``) as :mod:`~toynet.vision.cifar_pickle`
    does, with every array of up to 10,000 x 3072 numbers made a NumPy array (a copy), nested at most 32
    deep. Python 2 strings come back as bytes. For looking into CIFAR-like files; :class:`CIFAR10` uses
    :func:`read_batch` and :func:`read_meta`, which check the layout too."""
    def convert(value: Any, depth: int) -> Any:
        if depth > 32:
            raise DatasetFormatError(f"{source}: data nested more than 32 deep")
        if type(value) is PickledArray and value.complete:
            return value.to_numpy()
        if type(value) in (list, tuple):
            return type(value)(convert(v, depth + 1) for v in value)
        if type(value) is dict:
            return {k: convert(v, depth + 1) for k, v in value.items()}
        if type(value) in (str, bytes, int, float, bool) or value is None:
            return value
        if type(value) is memoryview:  # a long byte string, a view of the file
            return bytes(value)
        raise DatasetFormatError(f"{source}: {value!r} is not data (an unbuilt array, a dtype or a function name)")
    return convert(read_pickle(data, source, max_elements=MAX_ROWS * ROW), 0)


def _fields(obj: Any, source: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    """The pickled dict's entries by str key (Python 2 files have byte-string keys); no key missing or extra."""
    if type(obj) is not dict:
        raise DatasetFormatError(f"{source}: expected a pickled dict, got {type(obj).__name__}")
    fields = {k.decode("latin1") if type(k) is bytes else k: v for k, v in obj.items()}
    missing = [k for k in required if k not in fields]
    extra = [k for k in fields if k not in required + optional]
    if missing or extra:
        raise DatasetFormatError(
            f"{source}: expected a dict with keys {', '.join(required)} (and optionally {', '.join(optional)}), "
            f"got keys {', '.join(repr(k)[:40] for k in list(fields)[:8])}")
    return fields


def _name(value: Any, source: str, what: str) -> str:
    """A short string of the file (bytes from Python 2 are latin1) as str."""
    if type(value) not in (str, bytes) or not 0 < len(value) <= MAX_NAME:
        raise DatasetFormatError(f"{source}: {what} must be a string of 1 to {MAX_NAME} characters, "
                                 f"got a {type(value).__name__}" + (f" of length {len(value)}" if
                                                                   type(value) in (str, bytes) else ""))
    return value.decode("latin1") if type(value) is bytes else value
