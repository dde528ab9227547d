"""The checkpoint directory on disk: crash-consistent saves, a SHA-256 manifest, and careful opening.

A checkpoint is a directory ``path`` holding ``structure.json``, ``arrays.npz``, perhaps other files, and
``manifest.json``, which lists every other file with its size and SHA-256 digest.

Saving
    writes everything into a fresh hidden sibling ``.<name>.<random>.saving`` (each file flushed to disk,
    the manifest last), then swaps it in: in one atomic exchange where the system allows (Linux), else
    with two renames (the old directory to ``.<name>.<random>.old``, the new one to ``path``); the old
    one is then deleted. Where ``path`` is a symbolic link, the link is
    followed: the save replaces the directory it points to and the link stays.

A crash can stop a save at any point. Whatever the point, ``path`` holds either the old or the new
checkpoint whole, or (only between two renames) nothing, with the old one whole in its ``.old`` sibling:
the next save or load of ``path`` puts it back (:func:`recover`) before doing anything else, and deletes
every other leftover sibling of a save that did not finish. Leftovers of a save still running in another
process are recognised by the lock that process holds on them (``flock``, where the platform has it),
and the renames happen under a lock on the parent directory, which loads also take (shared) while they
open the files, so a load never mixes files of two saves.

Loading
    opens each file without following symbolic links and only if it is a regular file, checks each
    against the manifest (size first, then digest), and raises :class:`CheckpointError` naming the file
    that differs. The manifest detects corruption and truncation (a disk error, a copy cut short); it is
    *not* a signature: whoever can change the files can write a matching manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .. import backend
from . import npz
from .errors import MAX_MANIFEST_BYTES, MAX_STRUCTURE_BYTES, CheckpointError, is_name, short
from .recovery import exchange, hold, leftovers, locked, recover, sync_directory

FORMAT = "toynet-checkpoint"
VERSION = 2                      # 2: with manifest.json; version 1 (before it) is still read
STRUCTURE_FILE = "structure.json"
ARRAYS_FILE = "arrays.npz"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "toynet-manifest"
_WRITTEN_BY_TOYNET = re.compile(rb'\{\s*"format": "' + FORMAT.encode() + rb'"')


@dataclass
class Checkpoint:
    """A checkpoint opened for reading: its place, its parsed ``structure.json``, and its files, open and
    checked against the manifest. Arrays are read on request, only those asked for (:meth:`read_arrays`)."""

    path: Path
    structure: dict
    files: dict[str, BinaryIO] = field(default_factory=dict)
    #: The files were checked against a SHA-256 manifest (a version-1 checkpoint has none).
    verified: bool = False

    def read_arrays(self, wanted: npz.Wanted) -> dict[str, Any]:
        """The arrays named in ``wanted`` (name -> (dtype, shape, where it is referred from)), each checked
        against its expected dtype and shape before its data is read."""
        if not wanted:
            return {}
        file = self.files[ARRAYS_FILE]
        file.seek(0)
        return npz.read_members(file, str(self.path / ARRAYS_FILE), wanted, check_crc=not self.verified)

    def read_file(self, name: str) -> bytes:
        """The bytes of another file the checkpoint's manifest lists (written with ``files=`` at save)."""
        if name not in self.files:
            raise CheckpointError(f"{self.path} has no file {name!r} listed in its {MANIFEST_FILE}")
        self.files[name].seek(0)
        return self.files[name].read()

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------------------------------------- saving


def write_checkpoint(path: str | os.PathLike, structure: dict, arrays: dict[str, Any],
                     files: dict[str, bytes] | None = None) -> None:
    """Write a checkpoint directory crash-consistently: ``structure.json`` (``structure`` plus the format
    name and version), ``arrays.npz`` (``arrays``: name -> host array), any extra ``files`` (name ->
    bytes) and ``manifest.json``. The old directory at ``path`` is replaced only once the new one is
    complete on disk; a failed or killed save leaves it in place (see the module's docstring)."""
    target = resolve(path)
    # Serialise before touching the disk, so an unsavable value fails with nothing written.
    text = json.dumps({"format": FORMAT, "version": VERSION, **structure}, indent=1, allow_nan=False)
    extra = dict(files or {})
    for name in extra:
        if not is_name(name) or name in (STRUCTURE_FILE, ARRAYS_FILE, MANIFEST_FILE):
            raise ValueError(f"cannot add a file named {name!r} to a checkpoint")
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    with locked(parent):
        recover(target)
        _check_replaceable(target)
        staging, held = _make_staging(target)
    backup = None
    try:
        listed = {ARRAYS_FILE: _write_synced(staging / ARRAYS_FILE,
                                             lambda f: backend.host.savez(f, allow_pickle=False, **arrays))}
        for name, data in extra.items():
            listed[name] = _write_synced(staging / name, lambda f, data=data: f.write(data))
        listed[STRUCTURE_FILE] = _write_synced(staging / STRUCTURE_FILE, lambda f: f.write(text.encode("utf-8")))
        manifest = {"format": MANIFEST_FORMAT, "version": 1, "files": listed}
        _write_synced(staging / MANIFEST_FILE, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
        sync_directory(staging)
        with locked(parent):
            _check_replaceable(target)
            if not os.path.lexists(target):
                os.rename(staging, target)
            elif exchange(staging, target):
                backup = staging          # which now holds the old checkpoint
            else:
                backup = staging.with_suffix(".old")
                os.rename(target, backup)
                os.rename(staging, target)
            sync_directory(parent)
    except BaseException:
        with locked(parent):
            if backup is not None and not os.path.lexists(target):
                os.rename(backup, target)  # put the old checkpoint back
                backup = None
        if os.path.lexists(staging):
            shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if held is not None:
            os.close(held)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)


def resolve(path: str | os.PathLike) -> Path:
    """The absolute place a checkpoint path names, symbolic links followed (a saved link stays a link)."""
    return Path(os.path.realpath(os.fspath(path)))


def _make_staging(target: Path) -> tuple[Path, int | None]:
    """A new empty ``.<name>.<random>.saving`` sibling of ``target``, and the lock held on it."""
    while True:
        staging = target.parent / f".{target.name}.{secrets.token_hex(6)}.saving"
        try:
            os.mkdir(staging, 0o700)
        except FileExistsError:
            continue
        return staging, hold(staging)


def _check_replaceable(target: Path) -> None:
    """Refuse to overwrite anything but an empty directory or an earlier toynet checkpoint."""
    if not os.path.lexists(target):
        return
    if not target.is_dir():
        raise FileExistsError(f"{target} is a file; toynet.save writes a directory, so pick another path")
    if not any(target.iterdir()):
        return
    try:
        with open(target / STRUCTURE_FILE, "rb") as f:
            head = f.read(256)
            # What toynet writes starts with the format; anything else is parsed (all of it) to be sure.
            found = FORMAT if _WRITTEN_BY_TOYNET.match(head) else json.loads(head + f.read()).get("format")
    except (OSError, ValueError, AttributeError, RecursionError):
        found = None
    if found != FORMAT:
        raise FileExistsError(f"{target} exists and is not a toynet checkpoint; toynet.save replaces a "
                              f"checkpoint directory whole, so it will not overwrite other files. Pick a new "
                              f"path or remove that directory first")


def _write_synced(file: Path, write: Callable[[Any], Any]) -> dict:
    """Write a file, flush it to disk, and return its manifest entry (size and SHA-256)."""
    with open(file, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    with open(file, "rb") as f:
        return _digest(f)


def _digest(f: BinaryIO) -> dict:
    h = hashlib.sha256()
    buffer = bytearray(2**20)
    view = memoryview(buffer)
    size = 0
    f.seek(0)
    while count := f.readinto(buffer):
        h.update(view[:count])
        size += count
    f.seek(0)
    return {"size": size, "sha256": h.hexdigest()}


# ------------------------------------------------------------------------------------------ loading


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a checkpoint directory: check its files against the manifest and parse its structure. Close
    the result (it is a context manager) once its arrays are read."""
    root = resolve(path)
    if leftovers(root):  # a save was killed: finish its work first (or wait for a running one's renames)
        with locked(root.parent):
            root = recover(root) or root
    if not root.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if not root.is_dir():
        raise CheckpointError(f"{path} is a file, not a toynet checkpoint: toynet.save writes a directory "
                              f"holding {STRUCTURE_FILE} and {ARRAYS_FILE}. (toynet never reads pickle files "
                              f"such as PyTorch's .pt or OneFlow's pickled state dicts.)")
    with locked(root.parent, shared=True):  # no save swaps directories while the files are opened
        manifest, files = _open_files(root)
    checkpoint = Checkpoint(root, {}, files)
    try:
        if manifest is not None:
            _verify(root, manifest, files)
            checkpoint.verified = True
        checkpoint.structure = _structure(root, files[STRUCTURE_FILE], has_manifest=manifest is not None)
    except BaseException:
        checkpoint.close()
        raise
    return checkpoint


def _open_files(root: Path) -> tuple[dict | None, dict[str, BinaryIO]]:
    files: dict[str, BinaryIO] = {}
    try:
        manifest = None
        with contextlib.suppress(FileNotFoundError):
            with _open(root, MANIFEST_FILE) as f:
                manifest = _manifest(root, f)
        names = [STRUCTURE_FILE, ARRAYS_FILE] + [n for n in (manifest or {}) if n not in (STRUCTURE_FILE, ARRAYS_FILE)]
        for name in names:
            try:
                files[name] = _open(root, name)
            except FileNotFoundError:
                contents = sorted(p.name for p in root.iterdir())[:10]
                raise CheckpointError(f"{root} has no {name}, so it is not a complete toynet checkpoint (it "
                                      f"holds: {', '.join(contents) or 'nothing'})") from None
    except BaseException:
        for f in files.values():
            f.close()
        raise
    return manifest, files


def _open(root: Path, name: str) -> BinaryIO:
    """Open ``root/name`` for reading: never through a symbolic link, only a regular file (a FIFO or a
    device could block or never end)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(root / name, flags)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise CheckpointError(f"{root / name} cannot be opened as a plain file ({error})") from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"{root / name} is not a regular file")
    return os.fdopen(fd, "rb")


def _manifest(root: Path, f: BinaryIO) -> dict[str, dict]:
    where = root / MANIFEST_FILE
    data = parse_json(_read_at_most(f, MAX_MANIFEST_BYTES), where, MAX_MANIFEST_BYTES)
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or data.get("version") != 1 \
            or not isinstance(files, dict):
        raise CheckpointError(f"{where} is not a toynet manifest: expected {{'format': '{MANIFEST_FORMAT}', "
                              f"'version': 1, 'files': {{...}}}}")
    for name, entry in files.items():
        if not is_name(name) or name in (MANIFEST_FILE, ".", ".."):
            raise CheckpointError(f"{where} lists a file named {short(name)}; names are plain file names")
        if not (isinstance(entry, dict) and set(entry) == {"size", "sha256"} and type(entry["size"]) is int
                and entry["size"] >= 0 and isinstance(entry["sha256"], str)
                and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])):
            raise CheckpointError(f"{where}: the entry of {name} is {short(entry)}; expected "
                                  f"{{'size': bytes, 'sha256': 64 hex digits}}")
    for name in (STRUCTURE_FILE, ARRAYS_FILE):
        if name not in files:
            raise CheckpointError(f"{where} does not list {name}")
    return files


def _verify(root: Path, manifest: dict[str, dict], files: dict[str, BinaryIO]) -> None:
    for name, entry in manifest.items():
        size = os.fstat(files[name].fileno()).st_size
        if size != entry["size"]:
            raise CheckpointError(f"{root / name} is {size} bytes, but {MANIFEST_FILE} says {entry['size']}: the "
                                  f"file is truncated or was changed after saving")
        if _digest(files[name])["sha256"] != entry["sha256"]:
            raise CheckpointError(f"{root / name} does not match its SHA-256 digest in {MANIFEST_FILE}: the file "
                                  f"is corrupt or was changed after saving")


def _structure(root: Path, f: BinaryIO, has_manifest: bool) -> dict:
    where = root / STRUCTURE_FILE
    structure = parse_json(_read_at_most(f, MAX_STRUCTURE_BYTES), where, MAX_STRUCTURE_BYTES)
    if not isinstance(structure, dict) or structure.get("format") != FORMAT:
        found = structure.get("format") if isinstance(structure, dict) else type(structure).__name__
        raise CheckpointError(f"{where} does not describe a toynet checkpoint (format {short(found)}, "
                              f"expected {FORMAT!r})")
    version = structure.get("version")
    if type(version) is not int or not 1 <= version <= VERSION:
        raise CheckpointError(f"{root} uses checkpoint format version {short(version)}, but this toynet reads "
                              f"versions 1 to {VERSION}" + ("; upgrade toynet" if type(version) is int
                                                            and version > VERSION else ""))
    if version >= 2 and not has_manifest:
        raise CheckpointError(f"{root} has no {MANIFEST_FILE}, which every checkpoint of version {version} "
                              f"has: the checkpoint is incomplete")
    kind = structure.setdefault("kind", "state_dict")
    if not is_name(kind):
        raise CheckpointError(f"{where}: 'kind' is {short(kind)}, expected a name such as 'state_dict'")
    return structure


def _read_at_most(f: BinaryIO, limit: int) -> bytes:
    """The file's bytes, or ``limit + 1`` of them when it is longer (``read(n)`` would allocate n bytes)."""
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    return f.read(min(size, limit) + 1)


def parse_json(data: bytes, where: Path, limit: int) -> Any:
    """Parse JSON from a checkpoint strictly: at most ``limit`` bytes, UTF-8, no NaN/Infinity tokens, no
    key twice in one object, nesting the parser can follow."""
    if len(data) > limit:
        raise CheckpointError(f"{where} is larger than {limit} bytes, more than toynet ever writes there")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise CheckpointError(f"{where} is nested too deeply: expected JSON as toynet writes it, a few levels "
                              f"deep") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{where} is not valid JSON ({error}); the checkpoint is damaged") from error


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON (toynet writes non-finite numbers as strings)")


def _unique_keys(pairs: list) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {twice!r} appears twice in one object")
    return result
