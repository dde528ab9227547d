"""A small CIFAR-10 in the exact format of the official "python version" archive, made up on the spot.

For tests, notebooks and the tutorial examples on machines without the real data set (toynet never
downloads). ``make_cifar10(root, n_train=50, n_test=10)`` writes ``root/cifar-10-python.tar.gz`` (or,
with ``as_tar=False``, the extracted ``root/cifar-10-batches-py/``): five training batches, one test batch
and ``batches.meta``, each a pickled dict as in the real files::

    data_batch_k, test_batch: {'batch_label': str, 'labels': [int], 'data': uint8 array (N, 3072),
                               'filenames': [str]}   # a row: 1024 red, 1024 green, 1024 blue bytes
    batches.meta:             {'num_cases_per_batch': int, 'label_names': [10 str], 'num_vis': 3072}

**This module writes pickles**, because that is what the CIFAR-10 files are (toynet's own formats never
use pickle). The official files were written by Python 2's cPickle (protocol 2) with NumPy 1.x: strings
are Python 2 byte strings and the arrays are rebuilt by ``numpy.core.multiarray._reconstruct``. Python 3's
pickle can no longer write that, so :func:`python2_pickle` emits those opcodes itself
(``style="python2"``, the default). ``style="python3"`` writes the same dicts with Python 3's pickle
(bytes keys, NumPy 2 names), as someone re-saving the files would.

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
    """The bytes Python 2's ``cPickle.dumps(obj, 2)`` gives for dicts, lists, tuples, str, int, None,
    bool and uint8 NumPy arrays (without the optional memo opcodes, which only deduplicate)."""
    out = bytearray(b"\x80\x02")  # PROTO 2
    _write(out, obj)
    out += b"."  # STOP
    return bytes(out)


def _write(out: bytearray, obj: object) -> None:
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
    elif isinstance(obj, tuple):
        out += b"("  # MARK
        for item in obj:
            _write(out, item)
        out += b"t"  # TUPLE
    elif isinstance(obj, list):
        out += b"]"  # EMPTY_LIST
        if obj:
            out += b"("
            for item in obj:
                _write(out, item)
            out += b"e"  # APPENDS
    elif isinstance(obj, dict):
        out += b"}("  # EMPTY_DICT, MARK
        for key, value in obj.items():
            _write(out, key)
            _write(out, value)
        out += b"u"  # SETITEMS
    elif isinstance(obj, host.ndarray):
        assert obj.dtype == host.uint8 and obj.flags.c_contiguous, "only C-ordered uint8 arrays are needed"
        # _reconstruct(ndarray, (0,), 'b'), then __setstate__((1, shape, dtype, is_fortran, raw bytes))
        out += b"cnumpy.core.multiarray\n_reconstruct\n"  # GLOBAL
        out += b"(cnumpy\nndarray\n"  # MARK, GLOBAL: the arguments tuple starts with the class
        _write(out, (0,))
        _write(out, "b")
        out += b"tR"  # TUPLE, REDUCE
        out += b"("
        _write(out, 1)
        _write(out, obj.shape)
        out += b"cnumpy\ndtype\n"  # dtype('u1', 0, 1), then __setstate__ with NumPy 1.x's version-3 state
        _write(out, ("u1", 0, 1))
        out += b"R"
        _write(out, (3, "|", None, None, None, -1, -1, 0))
        out += b"b"  # BUILD
        _write(out, False)
        _write(out, obj.tobytes())
        out += b"tb"  # TUPLE, BUILD
    else:
        raise TypeError(f"python2_pickle cannot write {type(obj).__name__}")


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
