"""CIFAR-10 files made by an attacker: the loader refuses them cleanly, by name, without crashing or allocating.

Every hostile file here is built by hand, opcode by opcode or tar block by tar block, as an attacker
would (nothing is pickled by Python's pickler). Whatever could crash the process (a forged dtype turns
file bytes into object pointers) or exhaust memory (an object-array allocation, a compression bomb)
runs in a child process, so a segfault or a blow-up shows as this test failing, with its exit code and
its peak memory, instead of taking pytest down. Each refusal test fails against the loader that
unpickled with a restricted ``find_class`` (it segfaults, allocates hundreds of MB, loads the file, or
raises another error); the round trip and the fuzz tests keep the reader honest on valid files.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest
from cifar_fixture import ARCHIVE, CLASSES, FOLDER, make_cifar10, python2_pickle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toynet.vision.datasets import CIFAR10, DatasetFormatError, load_restricted_pickle

MB = 2**20

# ------------------------------------------------------------------------ pickle opcodes, by hand

PROTO2, STOP = b"\x80\x02", b"."


def glob(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()  # GLOBAL


def text(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE


def blob(raw: bytes) -> bytes:
    return b"C" + bytes([len(raw)]) + raw if len(raw) < 256 else b"B" + len(raw).to_bytes(4, "little") + raw


def num(n: int) -> bytes:
    return b"K" + bytes([n]) if 0 <= n < 256 else b"J" + n.to_bytes(4, "little", signed=True)


def tup(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"  # MARK ... TUPLE


def call(func: bytes, *args: bytes) -> bytes:
    return func + tup(*args) + b"R"  # REDUCE


def dtype(code: str) -> bytes:
    return call(glob("numpy", "dtype"), text(code), b"\x89", b"\x88")  # dtype(code, False, True)


def pickled_dict(**entries: bytes) -> bytes:
    return PROTO2 + b"}(" + b"".join(text(k) + v for k, v in entries.items()) + b"u" + STOP  # SETITEMS


def pickled_list(*items: bytes) -> bytes:
    return b"](" + b"".join(items) + b"e"  # EMPTY_LIST, MARK, items, APPENDS


# The forgery of issue 10: a 'V8' dtype whose BUILD state declares a field 'f' of dtype object at offset 0
# and flags 0 (so NumPy does not notice it holds objects); _frombuffer then makes 8 bytes of the file an
# object pointer, dereferenced as soon as anything looks at the array.
OBJECT_FIELD = (b"}" + text("f") + tup(dtype("O"), num(0)) + b"s")
FORGED_V8 = dtype("V8") + tup(num(3), text("|"), b"N", tup(text("f")), OBJECT_FIELD, num(8), num(1), num(0)) + b"b"
FORGED_ARRAY = call(glob("numpy.core.numeric", "_frombuffer"), blob(b"A" * 8), FORGED_V8, tup(num(1)), text("C"))
# The same forgery on the dtype the real files use: 'u1' with a field of objects in its state; and a state
# with fields that need no object dtype (refused at the state itself: fields, item size 8).
FORGED_U1 = dtype("u1") + tup(num(3), text("|"), b"N", tup(text("f")), OBJECT_FIELD, num(8), num(1), num(0)) + b"b"
U1_FIELD = b"}" + text("f") + tup(dtype("u1"), num(0)) + b"s"
FIELDED_U1 = dtype("u1") + tup(num(3), text("|"), b"N", tup(text("f")), U1_FIELD, num(8), num(1), num(0)) + b"b"


def reconstructed(shape: tuple[int, ...], dtype_ops: bytes, raw: bytes) -> bytes:
    """An array as NumPy pickles it: _reconstruct(ndarray, (0,), 'b'), BUILD (1, shape, dtype, False, raw)."""
    array = call(glob("numpy.core.multiarray", "_reconstruct"), glob("numpy", "ndarray"), tup(num(0)), blob(b"b"))
    return array + tup(num(1), tup(*map(num, shape)), dtype_ops, b"\x89", blob(raw)) + b"b"


def u1_state() -> bytes:
    return tup(num(3), text("|"), b"N", b"N", b"N", num(-1), num(-1), num(0)) + b"b"


def batch(data: bytes, labels: list[int]) -> bytes:
    return pickled_dict(data=data, labels=pickled_list(*map(num, labels)))


META = python2_pickle({"num_cases_per_batch": 10000, "label_names": CLASSES, "num_vis": 3072})

# ------------------------------------------------------------------------------------------ helpers


def cifar_folder(root, test_batch: bytes | None = None, meta: bytes | None = None):
    """An extracted CIFAR-10 folder (2 test images) with test_batch and/or batches.meta replaced."""
    make_cifar10(root, n_train=5, n_test=2, as_tar=False)
    if test_batch is not None:
        (root / FOLDER / "test_batch").write_bytes(test_batch)
    if meta is not None:
        (root / FOLDER / "batches.meta").write_bytes(meta)
    return root


def run_isolated(root, train: bool = False) -> dict:
    """Load CIFAR10(root) in a child process: its outcome, exit code, peak memory growth (MB), and how much it read
    (MB read from files, MB decompressed): the work a refusal did, counted, not timed (a busy machine is slow)."""
    code = textwrap.dedent(f"""
        import json, resource, zlib
        decompressed = [0]
        _decompressobj = zlib.decompressobj
        class Counting:  # counts what gzip decompresses (it reads through zlib.decompressobj)
            def __init__(self, *args, **kwargs):
                self.inner = _decompressobj(*args, **kwargs)
            def decompress(self, data, *args):
                out = self.inner.decompress(data, *args)
                decompressed[0] += len(out)
                return out
            def __getattr__(self, name):
                return getattr(self.inner, name)
        zlib.decompressobj = Counting
        def read_mb():
            with open("/proc/self/io") as f:
                return int(next(line for line in f if line.startswith("rchar")).split()[1]) / 2**20
        from toynet.vision.datasets import CIFAR10, DatasetFormatError
        base, read_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, read_mb()
        try:
            CIFAR10({str(root)!r}, train={train})
            outcome = "loaded"
        except DatasetFormatError as e:
            outcome = "DatasetFormatError: " + str(e)
        except BaseException as e:
            outcome = type(e).__name__ + ": " + str(e)
        grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
        print(json.dumps(dict(outcome=outcome, grew_mb=grew, read_mb=read_mb() - read_before,
                              decompressed_mb=decompressed[0] / 2**20)))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # the toynet under test
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"the loader crashed (exit code {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def refused(result: dict, *words: str) -> None:
    assert result["outcome"].startswith("DatasetFormatError: "), result["outcome"]
    for word in words:
        assert word in result["outcome"], (word, result["outcome"])


# ----------------------------------------------------------------------------- forged dtypes: no crash


@pytest.mark.parametrize("where, payload, words", [
    ("batches.meta", pickled_dict(label_names=pickled_list(FORGED_ARRAY)), ["dtype 'V8' refused", "plain numbers"]),
    ("test_batch", batch(call(glob("numpy.core.numeric", "_frombuffer"), blob(bytes(3072)), FORGED_U1,
                              tup(num(1), num(3072)), text("C")), [0]), ["dtype 'O' refused"]),
    ("test_batch", batch(reconstructed((1, 3072), FIELDED_U1, bytes(3072)), [0]),
     ["the state (3, '|', None, ('f',), a dict of 1 items, 8, 1, 0) of dtype('u1') is refused"]),
    ("test_batch", batch(call(glob("numpy.core.numeric", "_frombuffer"), blob(b"A" * 8), dtype("O"), tup(num(1)),
                              text("C")), [0]), ["dtype 'O' refused"]),
], ids=["issue-10-V8-object-field", "u1-object-field-frombuffer", "u1-fields-state", "object-dtype"])
def test_forged_dtype_is_refused_without_crashing(tmp_path, where, payload, words):
    root = cifar_folder(tmp_path, **{"meta" if where == "batches.meta" else "test_batch": payload})
    result = run_isolated(root)
    refused(result, os.path.join(FOLDER, where), *words)


def test_forgery_inside_the_archive_names_the_member(tmp_path):
    cifar_folder(tmp_path / "d", meta=pickled_dict(label_names=pickled_list(FORGED_ARRAY)))
    with tarfile.open(tmp_path / ARCHIVE, "w:gz") as tar:
        tar.add(tmp_path / "d" / FOLDER, arcname=FOLDER)
    refused(run_isolated(tmp_path), f"{ARCHIVE}:batches.meta", "dtype 'V8' refused")


# ---------------------------------------------------------------------------------- memory bombs


def test_object_array_allocation_bomb_is_refused_before_allocating(tmp_path):
    # The 66-byte pickle of issue 10: _reconstruct(ndarray, (25000000,), 'O'), an array of 25 million objects.
    bomb = PROTO2 + glob("numpy.core.multiarray", "_reconstruct") + glob("numpy", "ndarray") + num(25_000_000) \
        + b"\x85" + b"U\x01O" + b"\x87R" + STOP
    assert len(bomb) < 70
    result = run_isolated(cifar_folder(tmp_path, test_batch=bomb))
    assert result["grew_mb"] < 30, result
    refused(result, "_reconstruct(numpy's ndarray, (25000000,), b'O') refused")


def test_declared_array_larger_than_a_batch_is_refused_before_allocating(tmp_path):
    # A plain uint8 array of 10,001 rows (one more than a batch has), whose bytes are not even there.
    rows = reconstructed((10_001, 3072), dtype("u1") + u1_state(), b"x")
    result = run_isolated(cifar_folder(tmp_path, test_batch=batch(rows, [0])))
    assert result["grew_mb"] < 30, result
    refused(result, "shape (10001, 3072) has 30723072 elements; at most 30720000")


def test_pickle_opcode_bombs_are_refused_without_allocating(tmp_path):
    bombs = {
        "BINBYTES8 declaring 1 TB": PROTO2 + b"\x8e" + (2**40).to_bytes(8, "little") + b"abc" + STOP,
        "BINUNICODE8 declaring 1 TB": PROTO2 + b"\x8d" + (2**40).to_bytes(8, "little") + b"abc" + STOP,
        "memo index 2**32-1": PROTO2 + b"]r\xff\xff\xff\xff" + STOP,
        "a million empty lists": PROTO2 + b"](" + b"]" * 1_000_000 + b"e" + STOP,
        "LONG1 of 255 bytes": PROTO2 + b"\x8a\xff" + b"\x01" * 255 + STOP,
        "FRAME declaring 1 TB": b"\x80\x04\x95" + (2**40).to_bytes(8, "little") + b"N" + STOP,
    }
    for name, payload in bombs.items():
        result = run_isolated(cifar_folder(tmp_path / name.replace(" ", "_"), test_batch=payload))
        assert result["grew_mb"] < 30, (name, result)
        refused(result, "test_batch")


def test_oversized_extracted_file_is_refused_before_reading(tmp_path):
    root = cifar_folder(tmp_path)
    with open(root / FOLDER / "test_batch", "r+b") as f:
        f.truncate(300 * MB)  # a sparse file: 300 MB long, nothing on disk
    result = run_isolated(root)
    assert result["grew_mb"] < 30 and result["read_mb"] < 10, result     # refused from its size, not read
    refused(result, "test_batch", f"{300 * MB} bytes, more than the {40 * MB}")


# ---------------------------------------------------------------------------------- archive bombs


def tar_header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def gzip_bomb(path, header: bytes, megabytes: int) -> None:
    """A .tar.gz whose first entry is ``header`` followed by ``megabytes`` MB of zeros: one compressed MB
    of zeros repeated (gzip allows concatenated members), so the file is ~1 KB per MB."""
    zeros = gzip.compress(bytes(MB), compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(header))
        for _ in range(megabytes):
            f.write(zeros)
        f.write(gzip.compress(bytes(1024)))


@pytest.mark.parametrize("header, words", [
    (tar_header(f"{FOLDER}/test_batch", 300 * MB), ["test_batch: declares 314572800 bytes", "without decompressing"]),
    (tar_header(f"{FOLDER}/readme.html", 300 * MB), ["readme.html: declares 314572800 bytes"]),  # not even wanted
    (tar_header("././@PaxHeader", 300 * MB, tarfile.XHDTYPE), ["expands beyond"]),
    (tar_header("././@PaxHeader", 30 * MB, tarfile.XHDTYPE), ["tar header with extensions longer than"]),
    (tar_header("././@LongLink", 30 * MB, tarfile.GNUTYPE_LONGNAME), ["tar header with extensions longer than"]),
], ids=["wanted-member", "skipped-member", "pax-header-300MB", "pax-header-30MB", "gnu-long-name"])
def test_gzip_bomb_is_refused_quickly_without_allocating(tmp_path, header, words):
    gzip_bomb(tmp_path / ARCHIVE, header, 300)
    assert os.path.getsize(tmp_path / ARCHIVE) < 400_000  # ~300 KB that expand to 300 MB
    result = run_isolated(tmp_path)
    assert result["grew_mb"] < 30 and result["decompressed_mb"] < 10, result   # refused early, not decompressed
    refused(result, ARCHIVE, *words)


# ---------------------------------------------------------------------------------- archive layout


def archive_with(path, entries: list[tuple[str, bytes, bytes]]) -> None:
    """A .tar.gz of (name, tar type, data) entries."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
            info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def good_entries(tmp_path) -> list[tuple[str, bytes, bytes]]:
    fake = make_cifar10(tmp_path / "src", n_train=5, n_test=2, as_tar=False)
    return [(f"{FOLDER}/{n}", tarfile.REGTYPE, (tmp_path / "src" / FOLDER / n).read_bytes())
            for n in sorted(os.listdir(fake.path))]


@pytest.mark.parametrize("extra, words", [
    ((f"{FOLDER}/evil.py", tarfile.REGTYPE, b"import os"), ["unexpected member 'cifar-10-batches-py/evil.py'"]),
    (("../../etc/cron.d/x", tarfile.REGTYPE, b"x"), ["unexpected member '../../etc/cron.d/x'"]),
    (("/etc/passwd", tarfile.REGTYPE, b"x"), ["unexpected member '/etc/passwd'"]),
    ((f"{FOLDER}/test_batch", tarfile.SYMTYPE, b""), ["test_batch: expected a regular file"]),
    ((f"{FOLDER}/test_batch", tarfile.LNKTYPE, b""), ["test_batch: expected a regular file"]),
    ((f"{FOLDER}/readme.html", tarfile.REGTYPE, b"x"), ["readme.html: this member appears twice"]),
], ids=["unknown-name", "path-traversal", "absolute", "symlink", "hardlink", "duplicate"])
def test_archive_members_other_than_cifars_are_refused_by_name(tmp_path, extra, words):
    archive_with(tmp_path / ARCHIVE, [extra, *good_entries(tmp_path)])  # first, so it is seen
    refused(run_isolated(tmp_path), ARCHIVE, *words)


def test_archive_read_stops_after_the_wanted_members(tmp_path):
    # Anything after the members a split needs is never decompressed, so not even looked at.
    entries = {name.rpartition("/")[2]: (name, kind, data) for name, kind, data in good_entries(tmp_path)}
    first = [entries.pop("test_batch"), entries.pop("batches.meta"), (f"{FOLDER}/evil.py", tarfile.REGTYPE, b"x")]
    archive_with(tmp_path / ARCHIVE, [*first, *entries.values()])
    assert len(CIFAR10(tmp_path, train=False)) == 2
    with pytest.raises(DatasetFormatError, match="evil.py"):
        CIFAR10(tmp_path, train=True)


# --------------------------------------------------------------------------------- contents, by name


@pytest.mark.parametrize("payload, words", [
    (batch(reconstructed((2, 3071), dtype("u1") + u1_state(), bytes(2 * 3071)), [0, 1]),
     "'data' must be a uint8 array of shape (N, 3072) with N <= 10000, got an array of dtype '|u1' and shape "
     "(2, 3071)"),
    (batch(reconstructed((3072,), dtype("u1") + u1_state(), bytes(3072)), [0]), "shape (3072,)"),
    (batch(reconstructed((1, 3, 1024), dtype("u1") + u1_state(), bytes(3072)), [0]), "shape (1, 3, 1024)"),
    (batch(reconstructed((1, 3072), dtype("i8") + tup(num(3), text("<"), b"N", b"N", b"N", num(-1), num(-1), num(0))
                         + b"b", bytes(8 * 3072)), [0]), "got an array of dtype '<i8'"),
    (batch(reconstructed((1, 3072), dtype("u1") + u1_state(), bytes(3071)), [0]),
     "needs 3072 bytes, the file gives 3071"),
    (batch(reconstructed((1, 3072), dtype("u1") + u1_state(), bytes(3072)), [10]), "labels [10] are outside 0..9"),
    (batch(reconstructed((2, 3072), dtype("u1") + u1_state(), bytes(6144)), [0, 255]), "labels [255] are outside 0..9"),
    (batch(reconstructed((2, 3072), dtype("u1") + u1_state(), bytes(6144)), [1]), "'labels' must be a list of 2 ints"),
    (pickled_dict(data=reconstructed((1, 3072), dtype("u1") + u1_state(), bytes(3072)),
                  labels=pickled_list(text("cat"))), "'labels' must be a list of 1 ints"),
    (pickled_dict(data=reconstructed((1, 3072), dtype("u1") + u1_state(), bytes(3072)),
                  labels=pickled_list(b"\x88")), "'labels' must be a list of 1 ints"),  # True is not a label
    (pickled_dict(data=reconstructed((1, 3072), dtype("u1") + u1_state(), bytes(3072)), labels=pickled_list(num(0)),
                  filenames=pickled_list(text("a"), text("b"))), "'filenames' must be a list of 1 strings"),
    (pickled_dict(data=reconstructed((1, 3072), dtype("u1") + u1_state(), bytes(3072)), labels=pickled_list(num(0)),
                  extra=b"N"), "expected a dict with keys data, labels"),
    (pickled_dict(labels=pickled_list(num(0))), "expected a dict with keys data, labels"),
    (PROTO2 + pickled_list(num(0)) + STOP, "expected a pickled dict, got list"),
    (batch(reconstructed((1, 3072), dtype("u1"), bytes(3072)) + tup(num(1)) + b"b", [0]),
     "BUILD (setting an object's state) on an array of dtype '|u1' and shape (1, 3072)"),  # built twice
])
def test_batch_contents_other_than_cifars_are_refused_by_name(tmp_path, payload, words):
    with pytest.raises(DatasetFormatError) as info:
        CIFAR10(cifar_folder(tmp_path, test_batch=payload), train=False)
    assert os.path.join(FOLDER, "test_batch") in str(info.value) and words in str(info.value)


@pytest.mark.parametrize("names, words", [
    (CLASSES[:9], "'label_names' must be a list of 10 class names"),
    ([*CLASSES[:9], 3], "each of 'label_names' must be a string"),
    ([*CLASSES[:9], "x" * 300], "each of 'label_names' must be a string of 1 to 256 characters"),
])
def test_meta_contents_other_than_cifars_are_refused_by_name(tmp_path, names, words):
    with pytest.raises(DatasetFormatError, match=re.escape(f"batches.meta: {words}")):
        CIFAR10(cifar_folder(tmp_path, meta=python2_pickle({"label_names": names})), train=False)


EVIL_GLOBALS = [("os", "system"), ("posix", "system"), ("builtins", "eval"), ("__builtin__", "eval"),
                ("builtins", "getattr"), ("subprocess", "Popen"), ("numpy", "frombuffer"), ("numpy", "load"),
                ("numpy.core.multiarray", "scalar"), ("numpy", "ndarray.__new__"), ("copyreg", "_reconstructor"),
                ("numpy.core.multiarray", "_reconstruct.__globals__"), ("numpy.testing", "_private")]


@pytest.mark.parametrize("module, name", EVIL_GLOBALS)
@pytest.mark.parametrize("opcode", ["GLOBAL", "STACK_GLOBAL"])
def test_globals_outside_the_allow_list_are_refused_by_name(tmp_path, module, name, opcode):
    named = glob(module, name) if opcode == "GLOBAL" else text(module) + text(name) + b"\x93"
    payload = batch(call(named, text("touch pwned")), [0])
    with pytest.raises(DatasetFormatError) as info:
        CIFAR10(cifar_folder(tmp_path, test_batch=payload), train=False)
    message = str(info.value)
    assert f"refusing the global '{module}.{name}'" in message and "test_batch" in message
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("payload, words", [
    (call(glob("numpy", "ndarray"), tup(num(3))), "REDUCE calls numpy's ndarray"),
    (call(glob("numpy.core.multiarray", "_reconstruct"), glob("numpy", "ndarray"), tup(num(5)), blob(b"b")),
     "_reconstruct(numpy's ndarray, (5,), b'b') refused"),
    (call(glob("numpy", "dtype"), text("u1"), b"\x88", b"\x88"), "dtype('u1', True, True) refused"),
    (call(glob("numpy", "dtype"), text("S8"), b"\x89", b"\x88"), "dtype 'S8' refused"),
    (call(glob("numpy", "dtype"), text("(2,)u1"), b"\x89", b"\x88"), "dtype '(2,)u1' refused"),
    (dtype("u1") + tup(num(3), text("|"), b"N", b"N", b"N", num(-1), num(-1), num(63)) + b"b", "is refused"),
    (dtype("u1") + u1_state() + u1_state(), "is refused"),  # built twice
    (b"}" + tup(num(1)) + b"b", "BUILD (setting an object's state) on a dict"),
    (call(glob("_codecs", "encode"), text("x"), text("rot13")), "_codecs.encode('x', 'rot13') refused"),
    (b"\x81", "opcode NEWOBJ"), (b"\x97", "opcode NEXT_BUFFER"), (b"Q", "opcode BINPERSID"),
    (b"i__builtin__\neval\n", "opcode INST"), (b"\x82\x01", "opcode EXT1"), (b"I1\n", "opcode INT"),
    (b"]q\x00h\x00a", "nested more than 32 deep"),  # a list that holds itself
])
def test_allowed_names_used_any_other_way_are_refused(payload, words):
    with pytest.raises(DatasetFormatError) as info:
        load_restricted_pickle(PROTO2 + payload + STOP, "evil.pkl")
    assert str(info.value).startswith("evil.pkl: ") and words in str(info.value)


# ------------------------------------------------------------------------------- round trip, fuzzing


@pytest.mark.parametrize("style", ["python2", "python3"])
def test_synthetic_files_load_with_exactly_the_written_pixels_and_labels(tmp_path, style):
    # 1500 test images: list items in two APPENDS batches, and over 256 memo entries (LONG_BINPUT).
    fake = make_cifar10(tmp_path, n_train=20, n_test=1500, as_tar=True, style=style)
    test, train = CIFAR10(tmp_path, train=False), CIFAR10(tmp_path, train=True)
    np.testing.assert_array_equal(test.data, fake.test_images)
    np.testing.assert_array_equal(train.data, fake.train_images)
    assert test.targets == fake.test_labels and train.targets == fake.train_labels
    assert test.classes == CLASSES and test.data.dtype == np.uint8 and not test.data.flags.writeable


def mutate(data: bytes, edits: list[tuple[int, str, int]]) -> bytes:
    out = bytearray(data)
    for position, kind, value in edits:
        i = position % (len(out) + 1)
        if kind == "set" and i < len(out):
            out[i] = value
        elif kind == "insert":
            out[i:i] = bytes([value])
        elif kind == "delete":
            del out[i:i + 1 + value % 4]
        elif kind == "truncate":
            del out[i:]
    return bytes(out)


EDITS = st.lists(st.tuples(st.one_of(st.integers(0, 600), st.integers(0, 20_000), st.integers(-400, -1)),
                           st.sampled_from(["set", "set", "insert", "delete", "truncate"]), st.integers(0, 255)),
                 min_size=1, max_size=4)


@pytest.fixture(scope="module")
def valid_folders(tmp_path_factory):
    folders = {}
    for style in ("python2", "python3"):
        root = tmp_path_factory.mktemp(style)
        make_cifar10(root, n_train=5, n_test=3, as_tar=False, style=style)
        folders[style] = root
    return folders


def check_loaded_or_refused(root, train: bool = False) -> None:
    try:
        ds = CIFAR10(root, train=train)
    except DatasetFormatError:
        return
    assert ds.data.shape == (len(ds), 32, 32, 3) and ds.data.dtype == np.uint8 and len(ds) <= 50_000
    assert all(type(t) is int and 0 <= t <= 9 for t in ds.targets) and len(ds.classes) == 10


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(style=st.sampled_from(["python2", "python3"]), member=st.sampled_from(["test_batch", "batches.meta"]),
       edits=EDITS)
def test_mutated_files_load_correctly_shaped_or_raise_dataset_format_error(valid_folders, style, member, edits):
    path = valid_folders[style] / FOLDER / member
    original = path.read_bytes()
    try:
        path.write_bytes(mutate(original, edits))
        check_loaded_or_refused(valid_folders[style])
    finally:
        path.write_bytes(original)


@settings(max_examples=100, deadline=None)
@given(edits=EDITS)
def test_mutated_archives_load_or_raise_dataset_format_error_or_oserror(tmp_path_factory, edits):
    root = tmp_path_factory.mktemp("archive")
    fake = make_cifar10(root, n_train=5, n_test=3)
    archive = (root / ARCHIVE).read_bytes()
    with open(fake.path, "wb") as f:
        f.write(mutate(archive, edits))
    try:
        check_loaded_or_refused(root)
    except OSError:  # a damaged .tar.gz (bad CRC, cut short): "not a readable .tar.gz archive"
        pass


def _allowed_names_under_other_modules():
    """Every name the allow-list permits, under every module it is not permitted from (issue 21: the rule is the
    (module, name) pair, so `posix._reconstruct` must not pass because `_reconstruct` is an allowed name)."""
    from toynet.vision.cifar_pickle import GLOBALS
    modules = {m for m, _ in GLOBALS} | {"posix", "os", "builtins", "numpy.random", "numpy.core", "numpy.lib"}
    return sorted((m, n) for n in {n for _, n in GLOBALS} for m in modules if (m, n) not in GLOBALS)


@pytest.mark.parametrize("module, name", _allowed_names_under_other_modules())
def test_an_allowed_name_from_another_module_is_refused(tmp_path, module, name):
    payload = batch(call(glob(module, name), text("touch pwned")), [0])
    with pytest.raises(DatasetFormatError, match=re.escape(f"refusing the global '{module}.{name}'")):
        CIFAR10(cifar_folder(tmp_path, test_batch=payload), train=False)
    assert not (tmp_path / "pwned").exists()
