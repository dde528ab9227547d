"""CIFAR-10 from local files, the restricted pickle reader, and the image transforms.

Hostile files (forged dtypes, memory and compression bombs, fuzzing) are in tests/hostile/test_cifar_archive.py.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import socket
import tarfile

import numpy as np
import pytest
from cifar_fixture import ARCHIVE, CLASSES, FOLDER, make_cifar10, python2_pickle

import toynet as flow
from toynet.vision import datasets
from toynet.vision import transforms as T
from toynet.vision.datasets import CIFAR10, DatasetFormatError


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a socket fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("CIFAR10 tried to use the network")
    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def check_split(dataset, images, labels):
    assert len(dataset) == len(labels)
    assert dataset.data.shape == (len(labels), 32, 32, 3) and dataset.data.dtype == np.uint8
    np.testing.assert_array_equal(dataset.data, images)
    assert dataset.targets == labels
    assert dataset.classes == CLASSES and dataset.class_to_idx["cat"] == 3
    for i in (0, len(dataset) - 1):
        image, label = dataset[i]
        assert isinstance(image, flow.backend.host.ndarray)
        assert image.shape == (32, 32, 3) and image.dtype == np.uint8
        np.testing.assert_array_equal(image, images[i])
        assert type(label) is int and label == labels[i]


# ------------------------------------------------------------------------------------------ loading


@pytest.mark.parametrize("as_tar", [True, False], ids=["tar.gz", "directory"])
@pytest.mark.parametrize("style", ["python2", "python3"])
def test_cifar10_loads_both_splits(tmp_path, as_tar, style, no_network):
    fake = make_cifar10(tmp_path, n_train=23, n_test=7, as_tar=as_tar, style=style)  # 23: uneven batches
    before = sorted(os.listdir(tmp_path))
    check_split(CIFAR10(tmp_path, train=True), fake.train_images, fake.train_labels)
    check_split(CIFAR10(str(tmp_path), train=False, download=True), fake.test_images, fake.test_labels)
    assert sorted(os.listdir(tmp_path)) == before  # nothing extracted to disk
    assert before == [ARCHIVE if as_tar else FOLDER]


def test_fixture_writes_the_python2_format_of_the_official_files(tmp_path):
    fake = make_cifar10(tmp_path, n_train=5, n_test=2)
    with tarfile.open(fake.path) as tar:
        names = sorted(tar.getnames())
        raw = tar.extractfile(f"{FOLDER}/data_batch_1").read()
    assert names == sorted(f"{FOLDER}/{n}" for n in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch",
                                                     "batches.meta", "readme.html"])
    opcodes = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
    assert opcodes[0] == ("PROTO", 2)
    assert ("GLOBAL", "numpy.core.multiarray _reconstruct") in opcodes
    assert ("SHORT_BINSTRING", "data") in opcodes  # a Python 2 str, not a Python 3 unicode/bytes
    # The array as cPickle writes NumPy 1.x's __reduce__: _reconstruct(ndarray, (0,), 'b'), BUILD with
    # (1, shape, dtype('u1', 0, 1) built from its version-3 state, False, raw bytes), memo entries after the
    # globals and rebuilt objects (not after the fresh tuples and 1-byte strings, which cPickle leaves out).
    start = opcodes.index(("SHORT_BINSTRING", "data"))
    array_ops = [(name, None if name == "BINPUT" else arg) for name, arg in opcodes[start:start + 39]]
    assert array_ops == [
        ("SHORT_BINSTRING", "data"), ("BINPUT", None), ("GLOBAL", "numpy.core.multiarray _reconstruct"),
        ("BINPUT", None), ("GLOBAL", "numpy ndarray"), ("BINPUT", None), ("BININT1", 0), ("TUPLE1", None),
        ("SHORT_BINSTRING", "b"), ("TUPLE3", None), ("REDUCE", None), ("BINPUT", None), ("MARK", None),
        ("BININT1", 1), ("BININT1", 1), ("BININT2", 3072), ("TUPLE2", None), ("GLOBAL", "numpy dtype"),
        ("BINPUT", None), ("SHORT_BINSTRING", "u1"), ("BININT1", 0), ("BININT1", 1), ("TUPLE3", None),
        ("REDUCE", None), ("BINPUT", None), ("MARK", None), ("BININT1", 3), ("SHORT_BINSTRING", "|"),
        ("NONE", None), ("NONE", None), ("NONE", None), ("BININT", -1), ("BININT", -1), ("BININT1", 0),
        ("TUPLE", None), ("BUILD", None), ("NEWFALSE", None), ("BINSTRING", fake.train_images[0].transpose(2, 0, 1)
                                                                          .tobytes().decode("latin1")),
        ("TUPLE", None)]
    assert opcodes[start + 39] == ("BUILD", None)
    memo = [arg for name, arg in opcodes if name in ("BINPUT", "LONG_BINPUT")]
    assert memo == list(range(1, len(memo) + 1))  # cPickle numbers its memo from 1
    # The standard library reads it as it reads the real files: str keys with latin1, bytes keys with bytes.
    assert set(pickle.loads(raw, encoding="latin1")) == {"batch_label", "labels", "data", "filenames"}
    assert b"data" in pickle.loads(raw, encoding="bytes")


def test_item_is_read_only_view_and_transforms_apply(tmp_path):
    make_cifar10(tmp_path, n_train=10, n_test=3)
    ds = CIFAR10(tmp_path, transform=T.ToTensor(), target_transform=lambda t: CLASSES[t])
    image, name = ds[4]
    assert isinstance(image, flow.Tensor) and image.shape == (3, 32, 32) and image.dtype == flow.float32
    assert name == CLASSES[ds.targets[4]]
    with pytest.raises(ValueError):
        ds.data[0, 0, 0, 0] = 1  # a transform cannot silently edit the data set
    text = repr(ds)
    assert "Number of datapoints: 10" in text and "Split: Train" in text and "ToTensor()" in text


def test_incomplete_directory_falls_back_to_the_archive(tmp_path):
    fake = make_cifar10(tmp_path, n_train=10, n_test=3)
    os.makedirs(tmp_path / FOLDER)
    (tmp_path / FOLDER / "readme.html").write_text("half-extracted")
    check_split(CIFAR10(tmp_path, train=False), fake.test_images, fake.test_labels)


# ------------------------------------------------------------------------------------ missing files


def test_missing_files_fail_at_once_saying_where_to_put_them(tmp_path, no_network):
    """Without download=True (downloads, offline among them, are tests/hostile/test_downloads.py)."""
    root = tmp_path / "data"
    url = "https://example.org/mirror/cifar-10-python.tar.gz"
    with pytest.raises(FileNotFoundError) as info:
        CIFAR10(root, train=True, source_url=url)
    message = str(info.value)
    assert str(root / ARCHIVE) in message and str(root / FOLDER / "data_batch_1") in message
    assert url in message and "Pass download=True to fetch" in message
    assert not root.exists()  # nothing created


def test_download_true_with_files_present_does_nothing(tmp_path, no_network, capsys):
    """A copy that is not the pinned archive (here the stand-in) is read as it is: never replaced."""
    make_cifar10(tmp_path, n_train=5, n_test=2)
    assert len(CIFAR10(tmp_path, train=True, download=True)) == 5
    assert os.listdir(tmp_path) == [ARCHIVE] and capsys.readouterr().out == ""


def test_partial_directory_names_the_missing_files(tmp_path):
    make_cifar10(tmp_path, n_train=5, n_test=2, as_tar=False)
    os.remove(tmp_path / FOLDER / "data_batch_3")
    with pytest.raises(FileNotFoundError, match="lacks data_batch_3"):
        CIFAR10(tmp_path)
    assert len(CIFAR10(tmp_path, train=False)) == 2  # the test split is complete


def test_wrong_archive_and_truncated_archive(tmp_path):
    with tarfile.open(tmp_path / ARCHIVE, "w:gz") as tar:  # e.g. the binary version under the wrong name
        info = tarfile.TarInfo("cifar-10-batches-bin/data_batch_1.bin")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(DatasetFormatError, match=r"unexpected member 'cifar-10-batches-bin/data_batch_1.bin'. "
                                                 r"The CIFAR-10 \*python\* archive holds only"):
        CIFAR10(tmp_path)
    fake = make_cifar10(tmp_path / "t", n_train=5, n_test=2)
    with open(fake.path, "r+b") as f:
        f.truncate(os.path.getsize(fake.path) // 2)
    with pytest.raises(OSError, match="truncated"):
        CIFAR10(tmp_path / "t")


def test_damaged_batch_contents_are_reported(tmp_path):
    make_cifar10(tmp_path, n_train=5, n_test=2, as_tar=False)
    batch = tmp_path / FOLDER / "test_batch"
    batch.write_bytes(python2_pickle({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}))
    with pytest.raises(DatasetFormatError, match=r"test_batch: 'data' must be a uint8 array of shape \(N, 3072\)"
                                                 r".*\(2, 100\)"):
        CIFAR10(tmp_path, train=False)
    batch.write_bytes(python2_pickle({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 12]}))
    with pytest.raises(DatasetFormatError, match=r"test_batch: labels \[12\] are outside 0..9"):
        CIFAR10(tmp_path, train=False)
    assert issubclass(DatasetFormatError, ValueError)


# -------------------------------------------------------------------------------- restricted pickle


class RunsACommand:
    """The classic malicious pickle: unpickling it calls os.system."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def evil_pickles(marker):
    command = f"touch {marker}"
    yield "os.system", pickle.dumps(RunsACommand(command), protocol=2)
    yield "os.system", pickle.dumps({b"data": RunsACommand(command)}, protocol=pickle.HIGHEST_PROTOCOL)
    yield "builtins.eval", pickle.dumps(type("E", (), {"__reduce__": lambda s: (eval, ("1",))})(), protocol=4)
    # A dotted name must not be resolved attribute by attribute from an allowed module.
    yield "numpy.ndarray.__new__", b"\x80\x04\x8c\x05numpy\x8c\x0fndarray.__new__\x93."


@pytest.mark.parametrize("as_tar", [True, False], ids=["tar.gz", "directory"])
def test_restricted_unpickler_refuses_code(tmp_path, as_tar):
    marker = tmp_path / "pwned"
    for k, (name, payload) in enumerate(evil_pickles(marker)):
        root = tmp_path / str(k)
        make_cifar10(root, n_train=5, n_test=2, as_tar=False)
        (root / FOLDER / "test_batch").write_bytes(payload)
        if as_tar:
            with tarfile.open(root / ARCHIVE, "w:gz") as tar:
                tar.add(root / FOLDER, arcname=FOLDER)
            (root / FOLDER / "batches.meta").unlink()  # make the directory incomplete: read the archive
        with pytest.raises(pickle.UnpicklingError) as info:
            CIFAR10(root, train=False)
        message = str(info.value)
        attr = name.rpartition(".")[2]
        assert attr in message and "refusing" in message and "test_batch" in message
    assert not marker.exists()


def test_restricted_reader_accepts_what_numpy_writes():
    arrays = [np.arange(12, dtype=np.uint8).reshape(3, 4), np.zeros((0, 3072), np.uint8),
              np.arange(6, dtype=">i8").reshape(2, 3), np.asfortranarray(np.arange(6.0).reshape(2, 3))]
    for protocol in (2, 3, 4, 5):
        for a in arrays:
            back = datasets.load_restricted_pickle(pickle.dumps({"a": a, "n": [1, 2.5, "s", None, b"b", -2**40]},
                                                                protocol=protocol), "mem")
            np.testing.assert_array_equal(back["a"], a)
            assert back["a"].dtype == a.dtype and back["a"].flags.writeable
            assert back["n"] == [1, 2.5, "s", None, b"b", -2**40]
    # Python 2 strings stay bytes, as pickle.load(f, encoding="bytes") reads them
    assert datasets.load_restricted_pickle(python2_pickle({"k": ["ab", "c"]}), "py2") == {b"k": [b"ab", b"c"]}


# -------------------------------------------------------------------------------------- transforms


def random_image(h=32, w=32, c=3, seed=1):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def test_to_tensor_values_layout_and_dtype():
    image = random_image(5, 7)
    t = T.ToTensor()(image)
    assert isinstance(t, flow.Tensor) and t.shape == (3, 5, 7) and t.dtype == flow.float32
    assert t.device == flow.device("cpu") and not t.requires_grad
    expected = image.transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    np.testing.assert_array_equal(t.numpy(), expected)
    assert t.numpy().min() >= 0 and t.numpy().max() <= 1 and t.numpy().flags.c_contiguous
    gray = T.ToTensor()(image[:, :, 0])
    assert gray.shape == (1, 5, 7)
    floats = T.ToTensor()(np.full((2, 2, 3), 0.25, np.float64))
    assert floats.dtype == flow.float32 and float(floats.numpy()[0, 0, 0]) == 0.25
    with pytest.raises(TypeError, match="uint8"):
        T.ToTensor()(image.astype(np.int32))
    with pytest.raises(ValueError, match=r"\(H, W\) or \(H, W, C\)"):
        T.ToTensor()(np.zeros((1, 2, 3, 4), np.uint8))


def test_to_tensor_matches_torch():
    torch = pytest.importorskip("torch")
    image = random_image(6, 4)
    ours = T.ToTensor()(image).numpy()
    theirs = torch.from_numpy(image).permute(2, 0, 1).float().div(255).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_to_tensor_accepts_pil_images():
    Image = pytest.importorskip("PIL.Image")
    image = random_image(4, 6)
    t = T.ToTensor()(Image.fromarray(image))
    np.testing.assert_array_equal(t.numpy(), T.ToTensor()(image).numpy())
    assert T.RandomCrop(2)(Image.fromarray(image)).shape == (2, 2, 3)


def test_normalize_per_channel():
    x = T.ToTensor()(random_image(3, 4))
    mean, std = (0.1, 0.5, 0.9), (0.2, 0.25, 0.5)
    y = T.Normalize(mean, std)(x)
    assert y.dtype == flow.float32 and y.shape == (3, 3, 4)
    expected = (x.numpy() - np.array(mean, np.float32)[:, None, None]) / np.array(std, np.float32)[:, None, None]
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    batch = flow.stack([x, x])  # (N, C, H, W) works too
    np.testing.assert_allclose(T.Normalize(mean, std)(batch).numpy()[1], expected, rtol=1e-6)
    np.testing.assert_allclose(T.Normalize(0.5, 0.5)(x).numpy(), (x.numpy() - 0.5) / 0.5, rtol=1e-6)
    with pytest.raises(ValueError, match="mean has 2 values but the image has 3 channels"):
        T.Normalize((0.1, 0.2), (1.0, 1.0))(x)
    with pytest.raises(ValueError, match="std must not contain 0"):
        T.Normalize((0.1,), (0.0,))
    with pytest.raises(TypeError, match="put ToTensor"):
        T.Normalize((0.1,), (1.0,))(random_image())


def test_compose_applies_in_order():
    pipeline = T.Compose([lambda v: v + 1, lambda v: v * 10])
    assert pipeline(1) == 20
    full = T.Compose([T.RandomCrop(8, padding=2), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    out = full(random_image(8, 8))
    assert out.shape == (3, 8, 8) and -1 <= out.numpy().min() and out.numpy().max() <= 1
    assert repr(full).splitlines()[1].strip().startswith("RandomCrop(size=(8, 8), padding=(2, 2, 2, 2))")


def test_random_crop_takes_a_window_of_the_padded_image():
    image = random_image(6, 5)
    padded = np.pad(image, ((4, 4), (4, 4), (0, 0)))
    seen = set()
    for _ in range(300):
        crop = T.RandomCrop(6, padding=4)(image)
        assert crop.shape == (6, 6, 3) and crop.dtype == np.uint8
        offsets = [(i, j) for i in range(padded.shape[0] - 5) for j in range(padded.shape[1] - 5)
                   if np.array_equal(padded[i:i + 6, j:j + 6], crop)]
        assert offsets
        seen.update(offsets)
    assert {i for i, _ in seen} == set(range(9)) and {j for _, j in seen} == set(range(8))
    assert T.RandomCrop((3, 2))(image).shape == (3, 2, 3)
    assert T.RandomCrop((8, 11), padding=(3, 1))(image).shape == (8, 11, 3)  # (left/right, top/bottom)
    assert T.RandomCrop((7, 9), padding=(1, 0, 3, 1))(image).shape == (7, 9, 3)  # (l, t, r, b)
    np.testing.assert_array_equal(T.RandomCrop((6, 5))(image), image)
    with pytest.raises(ValueError, match="larger than the"):
        T.RandomCrop(7)(image)
    with pytest.raises(TypeError, match="before ToTensor"):
        T.RandomCrop(2)(T.ToTensor()(image))


def test_random_horizontal_flip():
    image = random_image(4, 5)
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=1.0)(image), image[:, ::-1])
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=0.0)(image), image)
    flips = [not np.array_equal(T.RandomHorizontalFlip()(image), image) for _ in range(400)]
    assert 150 < sum(flips) < 250
    with pytest.raises(ValueError, match="probability"):
        T.RandomHorizontalFlip(p=1.5)


def test_random_transforms_draw_from_toynets_generator():
    image = random_image(4, 5)
    flip = T.RandomHorizontalFlip(p=0.3)
    flow.manual_seed(123)
    flipped = [not np.array_equal(flip(image), image) for _ in range(50)]
    expected = list(np.random.default_rng(123).random(50) < 0.3)  # toynet's generator, seeded alike
    assert flipped == expected

    augment = T.Compose([T.RandomCrop(4, padding=2), T.RandomHorizontalFlip()])
    def run(seed):
        flow.manual_seed(seed)
        return np.stack([augment(image) for _ in range(20)])
    np.testing.assert_array_equal(run(7), run(7))
    assert not np.array_equal(run(7), run(8))


# -------------------------------------------------------------------------------------- DataLoader


def test_dataloader_batches_cifar10(tmp_path):
    from toynet.utils.data import DataLoader

    fake = make_cifar10(tmp_path, n_train=23, n_test=7)
    pipeline = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))])
    train = CIFAR10(tmp_path, train=True, transform=pipeline)
    loader = DataLoader(train, batch_size=4, shuffle=True)
    assert len(loader) == 6 and loader.dataset is train

    def epoch(seed):
        flow.manual_seed(seed)
        return [(x.numpy(), y.numpy()) for x, y in loader]

    batches = epoch(0)
    assert [len(y) for _, y in batches] == [4, 4, 4, 4, 4, 3]
    x, y = batches[0]
    assert x.shape == (4, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int64
    assert sorted(np.concatenate([y for _, y in batches]).tolist()) == sorted(fake.train_labels)
    again = epoch(0)  # same seed: same order and same augmentations
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(batches, again))

    raw = DataLoader(CIFAR10(tmp_path, train=False), batch_size=5, drop_last=True)
    (images, labels), = list(raw)  # without transforms the uint8 HWC images are stacked as they are
    assert images.shape == (5, 32, 32, 3) and images.dtype == flow.uint8
    np.testing.assert_array_equal(images.numpy(), fake.test_images[:5])
    assert labels.numpy().tolist() == fake.test_labels[:5]
