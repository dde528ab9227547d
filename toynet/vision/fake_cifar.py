"""A small CIFAR-10 in the exact format of the official "python version" archive, made up on the spot.

For tests, notebooks and the tutorial examples on machines without the real data set (they run
offline). ``make_cifar10(root, n_train=50, n_test=10)`` writes ``root/cifar-10-python.tar.gz`` (or,
with ``as_tar=False``, the extracted ``root/cifar-10-batches-py/``): five training batches, one test batch
and ``batches.meta``, each a pickled dict as in the real files::

    data_batch_k, test_batch: {'batch_label': str, 'labels': [int], 'data': uint8 array (N, 3072),
                               'filenames': [str]}   # a row: 1024 red, 1024 green, 1024 blue bytes
    batches.meta:             {'num_cases_per_batch': int, 'label_names': [10 str], 'num_vis': 3072}

**This module writes pickles**, because that is what the CIFAR-10 files are (toynet's own formats never
use pickle). The official files were written by Python 2's cPickle (protocol 2) with NumPy 1.x: strings
are Python 2 byte strings and the arrays are rebuilt by ``numpy.core.multiarray._reconstruct`` with a
BUILD of their bytes. Python 3's pickle can no longer write that, so :func:`python2_pickle` emits
cPickle's opcodes itself (``style="python2"``, the default), down to its memo entries and batches of
1000 list items. ``style="python3"`` writes the same dicts with Python 3's pickle (bytes keys, NumPy 2
names, protocol 5), as someone re-saving the files would.

Images are learnable, not pure noise: each class has its own colour and a bright stripe at its own
place, plus noise, so a small model can fit them.

:func:`find_or_make_cifar10` is what the tutorial examples use: the real data set if it is there, else
a small stand-in in a separate folder (never where the real archive belongs).
"""


from __future__ import annotations

import io
import os
import pickle
import tarfile
from dataclasses import dataclass

from ..backend import host  # image files are host data

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"


@dataclass
class FakeCifar:
    """What :func:`make_cifar10` wrote: the path and the images (N, 32, 32, 3) and labels of each split."""

    path: str
    train_images: host.ndarray
    train_labels: list[int]
    test_images: host.ndarray
    test_labels: list[int]
    classes: list[str]


def make_images(labels: host.ndarray, rng: host.random.Generator) -> host.ndarray:
    """HWC uint8 images whose colour and stripe position depend on the label."""
    n = len(labels)
    colours = host.linspace(30, 220, 10)[:, None] * host.array([1.0, 0.6, 0.3]) + host.array([0, 40, 90])
    images = colours[labels][:, None, None, :] + rng.normal(0, 20, size=(n, 32, 32, 3))
    for k, label in enumerate(labels):
        images[k, 3 * label:3 * label + 3, :, :] = 255  # a horizontal stripe, row 3*label
    return host.clip(images, 0, 255).astype(host.uint8)


def make_cifar10(root: str | os.PathLike, n_train: int = 50, n_test: int = 10, as_tar: bool = True,
                 seed: int = 0, style: str = "python2") -> FakeCifar:
    """Write a small CIFAR-10 under ``root``; ``n_train`` images are spread over the 5 training batches."""
    rng = host.random.default_rng(seed)
    train_labels = rng.integers(0, 10, n_train)
    test_labels = rng.integers(0, 10, n_test)
    train_images, test_images = make_images(train_labels, rng), make_images(test_labels, rng)

    dump = python2_pickle if style == "python2" else python3_pickle
    files = {}
    bounds = host.linspace(0, n_train, 6).astype(int)
    for k in range(5):
        sl = slice(bounds[k], bounds[k + 1])
        files[f"data_batch_{k + 1}"] = dump(_batch(f"training batch {k + 1} of 5", train_images[sl],
                                                   train_labels[sl], offset=bounds[k]))
    files["test_batch"] = dump(_batch("testing batch 1 of 1", test_images, test_labels, offset=0))
    files["batches.meta"] = dump({"num_cases_per_batch": max(int(host.diff(bounds).max()), n_test),
                                  "label_names": CLASSES, "num_vis": 3072})
    files["readme.html"] = b"<meta HTTP-EQUIV='REFRESH' content='0; url=http://www.cs.toronto.edu/~kriz/'>"

    os.makedirs(root, exist_ok=True)
    if as_tar:
        path = os.path.join(root, ARCHIVE)
        with tarfile.open(path, "w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(f"{FOLDER}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    else:
        path = os.path.join(root, FOLDER)
        os.makedirs(path, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(data)
    return FakeCifar(path, train_images, [int(t) for t in train_labels], test_images,
                     [int(t) for t in test_labels], list(CLASSES))


def _batch(label: str, images: host.ndarray, labels: host.ndarray, offset: int) -> dict:
    rows = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)  # HWC -> CHW, then one row each
    return {"batch_label": label, "labels": [int(t) for t in labels], "data": host.ascontiguousarray(rows),
            "filenames": [f"{CLASSES[t]}_s_{offset + i:06d}.png" for i, t in enumerate(labels)]}


def python3_pickle(obj: dict) -> bytes:
    """Python 3's own pickle, with the string keys made bytes as Python 3 reads Python 2 files."""
    return pickle.dumps({k.encode() if isinstance(k, str) else k: v for k, v in obj.items()},
                        protocol=pickle.HIGHEST_PROTOCOL)


# ------------------------------------------------------------------- Python 2 cPickle, protocol 2


def python2_pickle(obj: object) -> bytes:
    """The bytes Python 2's ``cPickle.dump(obj, f, 2)`` gives for dicts, lists, tuples, str, int, None,
    bool and C-ordered uint8 NumPy arrays, as in the official files: small tuples as TUPLE1-3, list items
    in batches of 1000 (APPENDS), and a memo entry (BINPUT, LONG_BINPUT from 256 on) after each object
    cPickle memoizes (a dict, list, global, rebuilt object, and a str of 2 or more bytes that another
    object refers to)."""
    writer = _Python2Writer()
    writer.save(obj)
    return bytes(b"\x80\x02" + writer.out + b".")  # PROTO 2 ... STOP


class _Python2Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.memo = 0  # cPickle numbers its memo from 1

    def put(self) -> None:
        self.memo += 1
        self.out += b"q" + bytes([self.memo]) if self.memo < 256 else b"r" + self.memo.to_bytes(4, "little")

    def save(self, obj: object, memoize: bool = True) -> None:
        out = self.out
        if obj is None:
            out += b"N"
        elif isinstance(obj, bool):
            out += b"\x88" if obj else b"\x89"  # NEWTRUE / NEWFALSE
        elif isinstance(obj, int):
            if 0 <= obj < 256:
                out += b"K" + bytes([obj])  # BININT1
            elif 0 <= obj < 65536:
                out += b"M" + obj.to_bytes(2, "little")  # BININT2
            else:
                out += b"J" + obj.to_bytes(4, "little", signed=True)  # BININT
        elif isinstance(obj, (str, bytes)):  # a Python 2 str is a byte string
            data = obj.encode("latin1") if isinstance(obj, str) else obj
            out += (b"U" + bytes([len(data)]) if len(data) < 256 else b"T" + len(data).to_bytes(4, "little")) + data
            if memoize and len(data) >= 2:
                self.put()
        elif isinstance(obj, tuple):
            if len(obj) > 3:
                out += b"("  # MARK, items, TUPLE; a shorter tuple is its items and TUPLE1-3
            for item in obj:
                self.save(item, memoize=False)
            out += (b")", b"\x85", b"\x86", b"\x87")[len(obj)] if len(obj) <= 3 else b"t"
        elif isinstance(obj, list):
            out += b"]"  # EMPTY_LIST
            self.put()
            for start in range(0, len(obj), 1000):
                batch = obj[start:start + 1000]
                if len(batch) == 1:
                    self.save(batch[0])
                    out += b"a"  # APPEND
                else:
                    out += b"("
                    for item in batch:
                        self.save(item)
                    out += b"e"  # APPENDS
        elif isinstance(obj, dict):
            out += b"}"  # EMPTY_DICT
            self.put()
            out += b"(" if len(obj) > 1 else b""
            for key, value in obj.items():
                self.save(key)
                self.save(value)
            out += b"u" if len(obj) > 1 else b"s" if obj else b""  # SETITEMS / SETITEM
        elif isinstance(obj, host.ndarray):
            self.save_array(obj)
        else:
            raise TypeError(f"python2_pickle cannot write {type(obj).__name__}")

    def save_array(self, array: host.ndarray) -> None:
        """NumPy 1.x's ``ndarray.__reduce__``: ``_reconstruct(ndarray, (0,), 'b')``, then BUILD with
        ``(1, shape, dtype, is_fortran, raw bytes)``; the dtype ``dtype('u1', 0, 1)``, then BUILD with
        its version-3 state ``(3, '|', None, None, None, -1, -1, 0)``."""
        assert array.dtype == host.uint8 and array.flags.c_contiguous, "only C-ordered uint8 arrays are needed"
        out = self.out
        out += b"cnumpy.core.multiarray\n_reconstruct\n"  # GLOBAL
        self.put()
        out += b"cnumpy\nndarray\n"
        self.put()
        self.save((0,), memoize=False)
        self.save("b", memoize=False)
        out += b"\x87R"  # TUPLE3, REDUCE
        self.put()
        out += b"("  # MARK: the state tuple
        self.save(1)
        self.save(array.shape, memoize=False)
        out += b"cnumpy\ndtype\n"
        self.put()
        self.save(("u1", 0, 1), memoize=False)
        out += b"R"
        self.put()
        self.save((3, "|", None, None, None, -1, -1, 0), memoize=False)
        out += b"b"  # BUILD
        self.save(False)
        self.save(array.tobytes(), memoize=False)
        out += b"tb"  # TUPLE, BUILD


# ----------------------------------------------------------------------- real data set, or a stand-in

FAKE_FOLDER = "toynet-fake-cifar10"


def has_cifar10(root: str | os.PathLike) -> bool:
    """Is the real CIFAR-10 under ``root`` (the archive, or the extracted training batch 1)?"""
    return (os.path.isfile(os.path.join(root, ARCHIVE))
            or os.path.isfile(os.path.join(root, FOLDER, "data_batch_1")))


def find_or_make_cifar10(root: str | os.PathLike, n_train: int = 640, n_test: int = 128, seed: int = 0) -> str:
    """The folder to read CIFAR-10 from: ``root`` if the data set is there; otherwise
    ``root/toynet-fake-cifar10``, where a synthetic stand-in of ``n_train`` training images is written
    (once; it is reused while its size matches). A message says which one is used."""
    root = os.fspath(root)
    if has_cifar10(root):
        return root
    fake_root = os.path.join(root, FAKE_FOLDER)
    marker = os.path.join(fake_root, f"size-{n_train}-{n_test}-seed-{seed}")
    if not os.path.isfile(marker):
        os.makedirs(fake_root, exist_ok=True)
        for name in os.listdir(fake_root):  # an older stand-in of another size
            if name.startswith("size-"):
                os.remove(os.path.join(fake_root, name))
        make_cifar10(fake_root, n_train=n_train, n_test=n_test, seed=seed)
        open(marker, "w").close()
    print(f"CIFAR-10 is not in {root}/ (put {ARCHIVE} there to train on the real data); using a synthetic "
          f"stand-in with {n_train} training images in {fake_root}/")
    return fake_root
