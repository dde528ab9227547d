"""The bytes of CIFAR-10's files, from the extracted folder or straight out of the ``.tar.gz``, every size capped.

A 260 KB ``.tar.gz`` can hold a member that expands to gigabytes, and a tar header can declare any
size; Python's ``tarfile`` reads what a header declares. So nothing is read before its size is known
to fit: the archive may hold only the members the real one holds (:data:`MEMBER_CAPS`, each with a
cap well above its real size), each at most once, as a regular file; a member's declared size is
checked against its cap before one byte of it is read; and the decompressed stream is read through
:class:`_CappedStream`, which refuses any read or seek past :data:`STREAM_CAP` and any header (with
its pax or GNU extensions) longer than :data:`HEADER_BUDGET`, before decompressing a byte of it.
An extracted file is read with at most its cap plus one byte. A size beyond a cap raises
:class:`~.pickle_machine.DatasetFormatError` naming the file and the member.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import zlib
from typing import Any, BinaryIO

from .pickle_machine import DatasetFormatError

FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")

#: Every member of the real archive (under ``FOLDER/``) and the most bytes it may have. A real batch has
#: 31,035,704 (10,000 rows of 3,072 pixels, labels and file names), batches.meta 158, readme.html 88.
MEMBER_CAPS = {**{name: 40 * 2**20 for name in BATCHES}, "batches.meta": 2**20, "readme.html": 2**20}
HEADER_BUDGET = 64 * 2**10  # bytes of tar header, pax and GNU extension records before one member
#: The most bytes the decompressed archive may have (the real one: 181,142,800): every member at its cap,
#: and a header for each and for the folder (no name may come twice).
STREAM_CAP = sum(MEMBER_CAPS.values()) + (len(MEMBER_CAPS) + 1) * HEADER_BUDGET


def read_file(path: str, name: str) -> bytes:
    """The bytes of the extracted file ``path`` (CIFAR-10's member ``name``), at most its cap."""
    cap = MEMBER_CAPS[name]
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(cap + 1) if size <= cap else b""
    if size > cap or len(data) > cap:
        raise DatasetFormatError(f"{path}: {max(size, len(data))} bytes, more than the {cap} a CIFAR-10 "
                                 f"'{name}' can have; the file is not from the CIFAR-10 python archive")
    return data


def read_archive(archive: str, names: list[str], source_url: str) -> dict[str, bytes]:
    """The bytes of members ``FOLDER/<name>`` for ``names``, in one pass over the stream, in memory.
    The rest of the stream is not decompressed once all are read. A damaged archive raises ``OSError``,
    a missing member ``FileNotFoundError``, a member that must not be there or is too large
    :class:`~.pickle_machine.DatasetFormatError`."""
    files: dict[str, bytes] = {}
    try:
        with open(archive, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = _CappedStream(gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw, archive)
            stream.budget = HEADER_BUDGET
            with tarfile.open(fileobj=stream, mode="r:") as tar:  # plain tar over our stream: no seek back
                _read_members(tar, stream, archive, set(names), files, source_url)
    except DatasetFormatError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise OSError(f"{archive} is not a readable .tar.gz archive ({e}); it may be truncated: "
                      f"get it again from {source_url}") from e
    missing = [n for n in names if n not in files]
    if missing:
        raise FileNotFoundError(
            f"{archive} has no member(s) {', '.join(f'{FOLDER}/{n}' for n in missing)}. It is not the CIFAR-10 "
            f"*python* archive (the binary and MATLAB versions have other names and layouts); get {ARCHIVE} "
            f"from {source_url}")
    return files


def _read_members(tar: tarfile.TarFile, stream: _CappedStream, archive: str, wanted: set[str],
                  files: dict[str, bytes], source_url: str) -> None:
    seen: set[str] = set()
    while True:  # at most 10 rounds: each one adds a new name to `seen` or raises
        if len(files) == len(wanted):
            return  # the rest of the stream is never decompressed
        stream.budget = HEADER_BUDGET  # tarfile reads the next header (and its extensions) now
        member = tar.next()
        stream.budget = None
        if member is None:
            return
        name = _member_name(member, archive, source_url)
        where = f"{archive}:{member.name}"
        if name in seen:
            raise DatasetFormatError(f"{where}: this member appears twice; the CIFAR-10 archive has each once")
        seen.add(name)
        if name == FOLDER:
            continue
        if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or member.sparse is not None:
            raise DatasetFormatError(f"{where}: expected a regular file, found a tar entry of type "
                                     f"{member.type!r} (a link, device, folder or sparse file)")
        cap = MEMBER_CAPS[name]
        if member.size > cap:
            raise DatasetFormatError(f"{where}: declares {member.size} bytes, more than the {cap} a CIFAR-10 "
                                     f"'{name}' can have; refused without decompressing it")
        if name in wanted:
            data = tar.extractfile(member).read(member.size)
            if len(data) != member.size:
                raise OSError(f"member {member.name} is cut short")
            files[name] = data


def _member_name(member: tarfile.TarInfo, archive: str, source_url: str) -> str:
    """The member's name inside ``FOLDER`` (or ``FOLDER`` itself); any other name is refused."""
    name = member.name[2:] if member.name.startswith("./") else member.name
    if name == FOLDER and member.isdir():
        return name
    folder, _, base = name.partition("/")
    if folder != FOLDER or base not in MEMBER_CAPS:
        raise DatasetFormatError(
            f"{archive}: unexpected member {member.name[:200]!r}. The CIFAR-10 *python* archive holds only "
            f"{FOLDER}/ with {', '.join(MEMBER_CAPS)}; this is another archive (the binary and MATLAB versions "
            f"have other names and layouts) or an altered one: get {ARCHIVE} from {source_url}")
    return base


class _CappedStream:
    """The decompressed archive as ``tarfile`` reads it: every read and seek checked before it happens.
    No position past :data:`STREAM_CAP`; while ``budget`` is set (tarfile reading a header), at most that
    many bytes read in all."""

    def __init__(self, raw: BinaryIO | Any, archive: str) -> None:
        self.raw, self.archive, self.name = raw, archive, archive
        self.pos = 0
        self.budget: int | None = None

    def _check(self, end: int, n: int) -> None:
        if end > STREAM_CAP:
            raise DatasetFormatError(f"{self.archive}: the archive expands beyond {STREAM_CAP} bytes, more than "
                                     "the CIFAR-10 archive can (a compression bomb?); refused")
        if self.budget is not None:
            self.budget -= n
            if self.budget < 0:
                raise DatasetFormatError(f"{self.archive}: a tar header with extensions longer than "
                                         f"{HEADER_BUDGET} bytes near byte {self.pos}; refused")

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = STREAM_CAP + 1 - self.pos  # never asked by tarfile; refused by _check
        self._check(self.pos + n, n)
        data = self.raw.read(n)
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        target = {0: offset, 1: self.pos + offset}.get(whence, STREAM_CAP + 1)
        self._check(target, 0)  # tarfile skips only data whose declared size was checked against its cap
        self.pos = self.raw.seek(target)
        return self.pos

    def tell(self) -> int:
        return self.pos
