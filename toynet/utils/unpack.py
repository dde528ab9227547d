"""Unpacking a downloaded archive safely: a ``.tar.gz`` into a folder, a ``.gz`` into a file, all or nothing.

An archive decides what it unpacks to: names, links, sizes. Python's ``tarfile`` writes what a header
declares (before Python 3.12's filters, even a member named ``../../.bashrc`` or a link to ``/etc``), and
a small ``.gz`` can expand to gigabytes. So :func:`extract_tar` refuses, before writing anything:

* a member whose path is absolute or has ``..``, or a backslash or NUL in its name;
* links, devices, FIFOs, sparse files: anything but plain files and folders (so nothing written can
  point outside the folder), and a member that comes twice;
* more members than the caller allows, files adding up to more bytes than it allows (each member's
  declared size is checked before one byte of it is decompressed), a header longer than 1 MB.

Files are written with plain permissions (no set-uid or executable bits from the archive), into a hidden
folder inside the target (``.unpacking.<random>.part``), and moved into place only once all of it is out,
never over anything already there. :func:`gunzip` decompresses a chunk at a time up to a cap, into a
hidden ``.part`` file renamed at the end. On any failure, Ctrl-C included, nothing is left behind and
:class:`~toynet.utils.download.DownloadError` names the archive (or the address it came from) and why.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import tempfile
import urllib.parse
import zlib
from typing import Any

from .download import (
    ALREADY_THERE,
    CHUNK,
    DEFAULT_TIMEOUT,
    DownloadError,
    all_or_nothing,
    check_integrity,
    download_url,
)
from .interrupts import defer_interrupts

__all__ = ["download_and_extract_archive", "extract_tar", "gunzip"]

HEADER_BUDGET = 2**20  # bytes of one tar header with its extensions (a long name, pax records)


class _Refused(Exception):
    """Why an archive is refused; the public functions turn it into a DownloadError."""


class _HeaderBudget:
    """The archive's bytes as ``tarfile`` reads them. While ``budget`` is set (tarfile reading a header
    and its extensions), at most that many bytes are read, checked before reading: tarfile reads an
    extension whole, whatever size its header declares."""

    def __init__(self, raw: Any, name: str) -> None:
        self.raw, self.name, self.pos = raw, name, 0
        self.budget: int | None = None

    def read(self, n: int = -1) -> bytes:
        if self.budget is not None:
            self.budget -= n if n is not None and n >= 0 else HEADER_BUDGET + 1
            if self.budget < 0:
                raise _Refused(f"a tar header with extensions longer than {HEADER_BUDGET} bytes near byte "
                               f"{self.pos}")
        data = self.raw.read(n)
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = self.raw.seek(offset, whence)
        return self.pos

    def tell(self) -> int:
        return self.pos


def _member_parts(member: tarfile.TarInfo) -> list[str]:
    """The member's path as folder names inside the archive; refused if it could land outside."""
    name = member.name
    if os.path.isabs(name) or name.startswith(("/", "\\")) or os.path.splitdrive(name)[0] or name[1:2] == ":":
        raise _Refused(f"member {name[:200]!r} has an absolute path")
    if "\\" in name or "\x00" in name:
        raise _Refused(f"member {name[:200]!r} has a backslash or NUL in its name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _Refused(f"member {name[:200]!r} has '..' in its path (it would land outside the folder)")
    return parts


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, stage: str, parts: list[str]) -> None:
    folder = os.path.join(stage, *parts[:-1])
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, parts[-1])
    # The stage holds no links (none is ever made), so this holds; checked anyway, as the last line
    if not os.path.realpath(target).startswith(os.path.realpath(stage) + os.sep):
        raise _Refused(f"member {member.name[:200]!r} would land outside the folder")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(target, flags, 0o644)  # plain permissions: no set-uid or executable bits from the archive
    except FileExistsError:
        raise _Refused(f"member {member.name[:200]!r} appears twice") from None
    source = tar.extractfile(member)
    with os.fdopen(fd, "wb") as out:
        left = member.size
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise _Refused(f"member {member.name[:200]!r} is cut short")
            out.write(chunk)
            left -= len(chunk)


def _unpack(archive: str, stage: str, max_bytes: int, max_members: int, source: str) -> None:
    with open(archive, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream = _HeaderBudget(gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw, source)
        stream.budget = HEADER_BUDGET  # tarfile.open reads the first header
        with tarfile.open(fileobj=stream, mode="r:") as tar:  # a plain tar over our stream
            member, count, total = tar.next(), 0, 0  # the first header, read by tarfile.open
            while member is not None:
                count += 1
                if count > max_members:
                    raise _Refused(f"it has more than the {max_members} members it may have")
                stream.budget = None
                parts = _member_parts(member)
                if member.isdir():
                    os.makedirs(os.path.join(stage, *parts), exist_ok=True)
                elif member.isreg() and not member.issparse() and parts:
                    total += member.size  # declared: checked before one byte of it is decompressed
                    if total > max_bytes:
                        raise _Refused(f"its files add up to more than the {max_bytes} bytes it may hold")
                    _write_member(tar, member, stage, parts)
                else:
                    kind = ("a symbolic link" if member.issym() else "a hard link" if member.islnk() else
                            "a device" if member.isdev() else "a sparse file" if member.issparse() else
                            f"an entry of type {member.type!r}")
                    raise _Refused(f"member {member.name[:200]!r} is {kind}; only plain files and folders "
                                   "are unpacked")
                stream.budget = HEADER_BUDGET
                member = tar.next()


def extract_tar(archive: str | os.PathLike, root: str | os.PathLike, *, max_bytes: int, max_members: int = 10_000,
                source: str | None = None) -> list[str]:
    """Unpack the ``.tar`` or ``.tar.gz`` file ``archive`` into folder ``root``, all or nothing; the paths
    of what it put there (the archive's top-level files and folders).

    Refused, with nothing unpacked: a member whose path is absolute or has ``..``; links, devices and
    anything but plain files and folders; more than ``max_members`` members; files adding up to more than
    ``max_bytes``; a header longer than 1 MB; a name that is already in ``root``. Everything is unpacked
    into a hidden folder inside ``root`` first and moved into place at the end. ``source`` names the
    archive in messages (by default its path). Raises :class:`DownloadError`."""
    archive, root = os.fspath(archive), os.fspath(root)
    source = source or archive
    with all_or_nothing(root) as undo:
        stage = undo.made(tempfile.mkdtemp(dir=root, prefix=".unpacking.", suffix=".part"))
        try:
            _unpack(archive, stage, max_bytes, max_members, source)
        except _Refused as error:
            raise DownloadError(f"{source}: refused to unpack it: {error}. Nothing was unpacked into {root}.",
                                url=source, reason=str(error)) from None
        except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
            raise DownloadError(f"{source}: could not unpack it ({type(error).__name__}: {error}). Nothing was "
                                f"unpacked into {root}.", url=source, reason=str(error)) from error
        names = sorted(os.listdir(stage))
        clash = [name for name in names if os.path.lexists(os.path.join(root, name))]
        if clash:
            raise DownloadError(f"{source}: {os.path.join(root, clash[0])} is in the way; toynet does not "
                                "overwrite it. Delete it (or move it away) and try again.", url=source,
                                reason=f"{clash[0]} exists")
        with defer_interrupts():  # the moves are not split by a Ctrl-C
            for name in names:
                os.rename(os.path.join(stage, name), undo.claim(os.path.join(root, name)))
            os.rmdir(stage)
    return [os.path.join(root, name) for name in names]


def gunzip(source: str | os.PathLike, target: str | os.PathLike, *, max_bytes: int) -> str:
    """Decompress the gzip file ``source`` into ``target`` (which must not exist), at most ``max_bytes``
    of it, atomically (through a hidden ``.part`` file beside ``target``); returns ``target``. Raises
    :class:`DownloadError` on a damaged file or one that decompresses to more than ``max_bytes``."""
    source, target = os.fspath(source), os.fspath(target)
    if os.path.lexists(target):
        raise DownloadError(f"{target} is in the way; toynet does not overwrite it. Delete it and try again.",
                            reason=f"{target} exists")
    part = None
    try:
        with gzip.open(source, "rb") as packed, tempfile.NamedTemporaryFile(
                dir=os.path.dirname(target) or ".", prefix=f".{os.path.basename(target)}.", suffix=".part",
                delete=False) as out:
            part, written = out.name, 0
            while chunk := packed.read(CHUNK):  # a chunk at a time: a gzip "bomb" stops at the cap
                written += len(chunk)
                if written > max_bytes:
                    raise _Refused(f"it decompresses to more than the {max_bytes} bytes it may have")
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, target)
        part = None
        return target
    except BaseException as error:
        with defer_interrupts():
            if part is not None and os.path.lexists(part):
                os.remove(part)
        if not isinstance(error, (_Refused, OSError, EOFError, zlib.error)):
            raise
        raise DownloadError(f"{source}: could not decompress it: {error}. Nothing was written to {target}.",
                            reason=str(error)) from error


def download_and_extract_archive(url: str, root: str | os.PathLike, filename: str | None = None, *,
                                 md5: str | None = None, sha256: str | None = None, max_bytes: int,
                                 max_extracted: int, max_members: int = 10_000, timeout: float = DEFAULT_TIMEOUT,
                                 advice: str | None = None) -> str:
    """:func:`download_url` then :func:`extract_tar` into ``root``, all or nothing: if unpacking fails the
    downloaded archive goes too. Returns the archive's path. If the pinned archive is already in
    ``root``, nothing is done (the data sets read archives in place)."""
    root = os.fspath(root)
    filename = filename or os.path.basename(urllib.parse.urlsplit(url).path)
    path = os.path.join(root, filename)
    if check_integrity(path, md5, sha256):
        print(ALREADY_THERE)
        return path
    with all_or_nothing(root) as undo:
        undo.claim(path)
        download_url(url, root, filename, md5=md5, sha256=sha256, max_bytes=max_bytes, timeout=timeout,
                     advice=advice)
        print(f"Extracting {path} to {root}")
        try:
            extract_tar(path, root, max_bytes=max_extracted, max_members=max_members, source=url)
        except DownloadError as error:
            raise DownloadError(f"{error} The downloaded {filename} is deleted too.", url=url,
                                reason=error.reason) from error
    return path
