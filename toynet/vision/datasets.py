"""Image data sets read from local files: CIFAR-10 in its standard "python version" archive.

toynet never downloads anything. Put the archive where the data set looks for it (the error message
says exactly where) and it is read from there, either straight out of the ``.tar.gz`` (nothing is
extracted to disk) or from the extracted folder.

**This module uses pickle**, because the CIFAR-10 python files are pickles (written by Python 2 and
NumPy in 2009). Unpickling an arbitrary file can run arbitrary code: a pickle may name any importable
function (``os.system``) and call it. So the files are read with :class:`RestrictedUnpickler`, which
only lets through the few NumPy names that rebuild an array and its dtype; the rest of a CIFAR-10 file
is dicts, lists, strings and numbers, which pickle builds without naming any function. Anything else
is refused with an error. toynet's own file formats never use pickle.
"""

from __future__ import annotations

import io
import os
import pickle
import posixpath
import tarfile
from collections.abc import Callable
from typing import Any

from ..backend import host

# ------------------------------------------------------------------------------------ safe unpickling

# NumPy exports its unpickling helpers under no public name, so instead of importing a private module
# we ask NumPy which functions it uses to rebuild an array: the first item of what __reduce__ returns.
_REBUILD_ARRAY = host.zeros(1).__reduce__()[0]            # numpy's _reconstruct (pickle protocols 0-4)
_REBUILD_FROM_BUFFER = host.zeros(1).__reduce_ex__(5)[0]  # numpy's _frombuffer (pickle protocol 5)

#: Every global a CIFAR-10 batch file may name, under the module paths NumPy 1.x and 2.x write.
ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _REBUILD_ARRAY,   # the official files (NumPy 1.x)
    ("numpy._core.multiarray", "_reconstruct"): _REBUILD_ARRAY,  # the same files re-saved by NumPy 2.x
    ("numpy.core.numeric", "_frombuffer"): _REBUILD_FROM_BUFFER,
    ("numpy._core.numeric", "_frombuffer"): _REBUILD_FROM_BUFFER,
    ("numpy", "ndarray"): host.ndarray,
    ("numpy", "dtype"): host.dtype,
}


class RestrictedUnpickler(pickle.Unpickler):
    """A ``pickle.Unpickler`` that can build NumPy arrays and plain data, and nothing else.

    Pickle calls ``find_class(module, name)`` whenever a file asks for a global object (a class or
    function to call); this is the only way a pickle reaches code. Here it answers only the names in
    :data:`ALLOWED_GLOBALS` and raises ``pickle.UnpicklingError`` for everything else.
    ``encoding="latin1"`` decodes Python 2 strings, as NumPy recommends for its old pickles.
    """

    def __init__(self, file: Any, source: str = "<file>"):
        super().__init__(file, encoding="latin1")
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"{self.source}: refusing to unpickle the global '{module}.{name}'. A CIFAR-10 batch holds "
                "only NumPy arrays, lists, strings and numbers; this file is not a genuine CIFAR-10 file and "
                "loading it could run code. Delete it and use the original archive.") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f"{self.source}: persistent references are not allowed in CIFAR-10 files")


def load_restricted_pickle(data: bytes, source: str) -> Any:
    """Unpickle ``data`` (the bytes of one file named ``source``) with :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(io.BytesIO(data), source).load()


# ------------------------------------------------------------------------------------------- CIFAR-10


class CIFAR10:
    """CIFAR-10: 60,000 colour images of 32x32 pixels in 10 classes (50,000 train, 10,000 test).

    ``root`` is a folder holding either ``cifar-10-python.tar.gz`` (read without extracting) or the
    extracted ``cifar-10-batches-py/``. ``dataset[i]`` is ``(image, label)``: the image an HWC
    ``uint8`` host array of shape (32, 32, 3) (after ``transform``, if given) and the label an int
    (after ``target_transform``). As in torchvision, ``data`` holds all images (N, 32, 32, 3),
    ``targets`` the labels, ``classes`` the class names.

    toynet never downloads: with ``download=True`` and the files present nothing happens; with the
    files absent it stops at once with a message saying where to put which file (``source_url``, if
    given, is where it says to get the archive). The files are pickles, read with
    :class:`RestrictedUnpickler`, which refuses anything but NumPy arrays and plain data.

    >>> from toynet.vision import datasets, transforms
    >>> train = datasets.CIFAR10("data", train=True, transform=transforms.ToTensor())  # doctest: +SKIP
    """

    archive_name = "cifar-10-python.tar.gz"
    base_folder = "cifar-10-batches-py"
    train_list = tuple(f"data_batch_{i}" for i in range(1, 6))
    test_list = ("test_batch",)
    meta_file = "batches.meta"
    url = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    image_shape = (3, 32, 32)  # how a row of the files' 3072 bytes is laid out: channel-major

    def __init__(self, root: str | os.PathLike, train: bool = True, transform: Callable | None = None,
                 target_transform: Callable | None = None, download: bool = False, source_url: str | None = None):
        self.root = os.path.expanduser(os.fspath(root))
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        self.source_url = source_url or self.url
        batch_names = self.train_list if train else self.test_list
        files = self._read_files([*batch_names, self.meta_file], download)

        images, self.targets = [], []
        for name in batch_names:
            data, labels = _check_batch(files[name], self._source(name))
            images.append(data)
            self.targets.extend(labels)
        flat = host.concatenate(images) if images else host.zeros((0, 3072), dtype=host.uint8)
        # Each row is 1024 red, then 1024 green, then 1024 blue bytes: reshape to NCHW, then make HWC.
        self.data = host.ascontiguousarray(flat.reshape(-1, *self.image_shape).transpose(0, 2, 3, 1))
        self.data.flags.writeable = False  # items are views: a transform must not edit the data set
        self.classes = _check_meta(files[self.meta_file], self._source(self.meta_file))
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        bad = [t for t in self.targets if not 0 <= t < len(self.classes)]
        if bad:
            raise ValueError(f"{self._source(batch_names[0])}: labels {sorted(set(bad))[:5]} are outside "
                             f"0..{len(self.classes) - 1}; the files are damaged")

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image, target = self.data[index], self.targets[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",
                 f"    Root location: {self.root}", f"    Split: {'Train' if self.train else 'Test'}"]
        if self.transform is not None:
            lines.append("    Transform: " + repr(self.transform).replace("\n", "\n    "))
        if self.target_transform is not None:
            lines.append(f"    Target transform: {self.target_transform!r}")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------- finding the files

    def _source(self, name: str) -> str:
        """Where file ``name`` came from, for error messages."""
        return os.path.join(self._origin, name) if self._origin_is_dir else f"{self._origin}:{name}"

    def _read_files(self, names: list[str], download: bool) -> dict[str, Any]:
        """Unpickle the named files from the extracted folder if it is complete, else from the archive."""
        folder = os.path.join(self.root, self.base_folder)
        archive = os.path.join(self.root, self.archive_name)
        if all(os.path.isfile(os.path.join(folder, n)) for n in names):
            self._origin, self._origin_is_dir = folder, True
            files = {}
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    files[name] = load_restricted_pickle(f.read(), self._source(name))
            return files
        if os.path.isfile(archive):
            self._origin, self._origin_is_dir = archive, False
            return self._read_archive(archive, names)
        raise FileNotFoundError(self._not_found_message(folder, archive, names, download))

    def _read_archive(self, archive: str, names: list[str]) -> dict[str, Any]:
        """Read members ``cifar-10-batches-py/<name>`` in one pass over the (gzip) stream, in memory."""
        wanted = {posixpath.join(self.base_folder, n): n for n in names}
        files: dict[str, Any] = {}
        try:
            with tarfile.open(archive, "r:*") as tar:
                for member in tar:  # sequential: a .tar.gz cannot seek backwards cheaply
                    name = wanted.get(posixpath.normpath(member.name))
                    if name is not None and member.isfile():
                        files[name] = load_restricted_pickle(tar.extractfile(member).read(), self._source(name))
                        if len(files) == len(wanted):
                            break  # the rest of the stream need not be decompressed
        except (tarfile.TarError, EOFError, OSError) as e:
            raise OSError(f"{archive} is not a readable .tar.gz archive ({e}); it may be truncated: "
                          f"get it again from {self.source_url}") from e
        missing = [n for n in names if n not in files]
        if missing:
            raise FileNotFoundError(
                f"{archive} has no member(s) {', '.join(posixpath.join(self.base_folder, n) for n in missing)}. "
                f"It is not the CIFAR-10 *python* archive (the binary and MATLAB versions have other "
                f"names and layouts); get {self.archive_name} from {self.source_url}")
        return files

    def _not_found_message(self, folder: str, archive: str, names: list[str], download: bool) -> str:
        if os.path.isdir(folder):
            missing = [n for n in names if not os.path.isfile(os.path.join(folder, n))]
            found = f"{folder} exists but lacks {', '.join(missing)}, and there is no {archive}"
        else:
            found = f"neither {archive} nor {folder}{os.sep} exists"
        why = ("download=True cannot help: toynet never downloads data (this machine may have no internet). "
               if download else "")
        return (f"CIFAR-10 not found: {found}. {why}Get the python version of CIFAR-10, {self.archive_name} "
                f"(about 163 MB), from {self.source_url} and put that file, unextracted, at {archive}; "
                f"or extract it so that {os.path.join(folder, names[0])} exists.")


def _check_batch(batch: Any, source: str) -> tuple[Any, list[int]]:
    """The (N, 3072) uint8 image rows and N labels of one unpickled batch, checked."""
    batch = _str_keys(batch, source)
    if "data" not in batch or "labels" not in batch:
        raise ValueError(f"{source}: expected a dict with keys 'data' and 'labels', got keys {sorted(batch)}")
    data, labels = batch["data"], batch["labels"]
    if not isinstance(data, host.ndarray) or data.dtype != host.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        what = f"{data.dtype} array of shape {data.shape}" if isinstance(data, host.ndarray) else type(data).__name__
        raise ValueError(f"{source}: 'data' must be a uint8 array of shape (N, 3072), got a {what}")
    if not isinstance(labels, list) or len(labels) != len(data) or not all(isinstance(t, int) for t in labels):
        raise ValueError(f"{source}: 'labels' must be a list of {len(data)} ints, one per image row")
    return data, labels


def _check_meta(meta: Any, source: str) -> list[str]:
    meta = _str_keys(meta, source)
    names = meta.get("label_names")
    if not isinstance(names, list) or not names:
        raise ValueError(f"{source}: expected a dict with a non-empty list 'label_names'")
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]


def _str_keys(obj: Any, source: str) -> dict[str, Any]:
    """The files' keys are Python 2 strings: str when read as latin1, bytes if re-saved from Python 3."""
    if not isinstance(obj, dict):
        raise ValueError(f"{source}: expected a pickled dict, got {type(obj).__name__}")  # noqa: TRY004 (bad file)
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}
