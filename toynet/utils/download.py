"""Fetching a data file from the internet safely: kept only if it is the pinned file, all or nothing.

A download is bytes from a server toynet does not control, through a network that can fail at any byte.
So every function here works on these rules:

* **Nothing is trusted but the checksum pinned in the code.** Whatever the address (the usual one, a
  mirror the user passes, where a redirect leads), a file is kept only if its MD5 or SHA-256 digest is
  the one the caller pins. (MD5 is broken for *collisions*, two files made together by one author; making
  a file match the digest of a file someone else published is still out of reach.)
* **http and https only**, redirects included: no ``file:``, ``ftp:`` or ``data:`` address gets in.
* **Every size is capped** by the caller (about twice the real file): a larger ``Content-Length`` is
  refused before a byte is read, a body that runs past the cap is cut off, a body shorter than its
  ``Content-Length`` is refused. Unpacking is capped the same way (:mod:`toynet.utils.unpack`).
* **A timeout** on connecting and on every read (:data:`DEFAULT_TIMEOUT`), so a dead server cannot hang
  the program.
* **All or nothing.** Bytes go to a hidden temporary file beside the target (``.<name>.<random>.part``),
  renamed to the final name only once complete and verified. On any failure, Ctrl-C included, what the
  call made is deleted, folders too, and :class:`DownloadError` says which address failed, what went
  wrong and what to do. :func:`all_or_nothing` extends this to several steps (download four files,
  decompress each: all of it or none).
* **Nothing is overwritten.** A file already at the target stays as it is: if it is the pinned file the
  call prints ``Files already downloaded and verified`` (flowvision's words) and fetches nothing; if it
  is not, the call refuses and says so.

Standard library only (and tqdm for the progress bar on stderr). Unpacking what was downloaded is
:mod:`toynet.utils.unpack`.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from .interrupts import defer_interrupts

__all__ = ["ALREADY_THERE", "DEFAULT_TIMEOUT", "DownloadError", "all_or_nothing", "check_integrity", "download_url"]

DEFAULT_TIMEOUT = 30.0  # seconds without a byte (connecting, or between two reads) before giving up
ALREADY_THERE = "Files already downloaded and verified"  # flowvision's message, word for word
CHUNK = 64 * 2**10  # bytes read, hashed and written at a time


class DownloadError(RuntimeError):
    """A download or an unpacking that failed and kept nothing. ``url`` is the address (or the archive,
    when unpacking a local file failed) and ``reason`` what went wrong; the message has both."""

    def __init__(self, message: str, url: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.url, self.reason = url, reason or message


class _Refused(Exception):
    """Why a download or an archive is refused; the public functions turn it into a DownloadError."""


# -------------------------------------------------------------------------------------- checksums


def _pinned(md5: str | None, sha256: str | None) -> tuple[str, str]:
    """(algorithm, hex digest): exactly one must be given, since nothing unverified is ever kept."""
    if (md5 is None) == (sha256 is None):
        raise ValueError("pass exactly one of md5= and sha256=: a download is kept only if it has the "
                         "digest pinned in the code")
    return ("md5", md5.lower()) if md5 is not None else ("sha256", sha256.lower())


def _hasher(algorithm: str) -> Any:
    # MD5 checks which file this is, not a secret: say so, or FIPS-mode Pythons refuse to compute it
    return hashlib.md5(usedforsecurity=False) if algorithm == "md5" else hashlib.new(algorithm)


def _file_digest(path: str, algorithm: str) -> str:
    digest = _hasher(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def check_integrity(path: str | os.PathLike, md5: str | None = None, sha256: str | None = None) -> bool:
    """Whether ``path`` is a regular file with the pinned digest (give ``md5`` or ``sha256``)."""
    algorithm, expected = _pinned(md5, sha256)
    path = os.fspath(path)
    return os.path.isfile(path) and _file_digest(path, algorithm) == expected


# ------------------------------------------------------------------------ folders made, and unmade


def _make_folders(path: str) -> list[str]:
    """Make folder ``path`` and any missing parent; the folders made, outermost first."""
    missing, folder = [], os.path.abspath(path)
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    made: list[str] = []
    try:
        for folder in reversed(missing):
            try:
                os.mkdir(folder)
            except FileExistsError:
                if not os.path.isdir(folder):  # a file where a folder must go: let the error say which
                    raise
                continue  # another process made it meanwhile: not ours to remove
            made.append(folder)
    except BaseException:
        _remove_folders(made)
        raise
    return made


def _remove_folders(made: list[str]) -> None:
    """Remove the folders ``_make_folders`` made, innermost first, each only if it is empty."""
    for folder in reversed(made):
        try:
            os.rmdir(folder)
        except OSError:
            return  # something else put a file there meanwhile: leave it and its parents


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


class _Claims:
    """The paths an :func:`all_or_nothing` block is about to create."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def claim(self, path: str) -> str:
        """Note that the block will create ``path``: removed again if the block fails. A path that
        exists already is not the block's, and is never removed."""
        if not os.path.lexists(path):
            self.paths.append(path)
        return path

    def made(self, path: str) -> str:
        """Note that the block has just made ``path`` (under a name it could not know before, as
        ``tempfile`` picks it): removed again if the block fails."""
        self.paths.append(path)
        return path


@contextmanager
def all_or_nothing(root: str | os.PathLike) -> Iterator[_Claims]:
    """Make folder ``root`` (with missing parents) and run the block, which claims each path it is about
    to create (``undo.claim(path)``; ``undo.made(path)`` just after making one with a temporary name). If
    the block fails, Ctrl-C included, the claimed paths and the folders made here are removed (a second
    Ctrl-C waits until that is done), so ``root`` is as it was::

        with all_or_nothing(root) as undo:
            packed = undo.claim(os.path.join(root, "a.gz"))  # claim returns the path
            download_url(url, root, "a.gz", md5=..., max_bytes=...)
            gunzip(packed, undo.claim(packed[:-3]), max_bytes=...)
    """
    made = _make_folders(os.fspath(root))
    claims = _Claims()
    try:
        yield claims
    except BaseException:
        with defer_interrupts():
            for path in reversed(claims.paths):
                _remove(path)
            _remove_folders(made)
        raise


# ----------------------------------------------------------------------------------- downloading


def _check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise DownloadError(f"Refusing to download {url!r}: only http:// and https:// addresses are fetched "
                            f"(this one is {parts.scheme + ':' if parts.scheme else 'not a web address'}). "
                            "For a file you already have, put it where the data set looks for it.",
                            url=url, reason="not an http or https address")


class _WebOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects (servers move files to CDNs) to http and https addresses only: urllib's own
    handler would also follow one to ftp:."""

    def http_error_302(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> Any:
        target = urllib.parse.urljoin(req.full_url, headers.get("Location") or headers.get("URI") or "")
        if urllib.parse.urlsplit(target).scheme.lower() not in ("http", "https"):
            fp.close()
            raise _Refused(f"the server redirected to {target!r}, which is not an http or https address")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _progress_bar(total: int | None, label: str) -> Any:
    from tqdm import tqdm  # here, not at the top: `import toynet` does not pay for it

    # On stderr, shown even when stderr is not a terminal (a log, a notebook), then fewer updates
    quiet = not getattr(sys.stderr, "isatty", lambda: False)()
    return tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                disable=False, mininterval=5.0 if quiet else 0.1, leave=True)


def _fetch(url: str, out: BinaryIO, algorithm: str, max_bytes: int, timeout: float, label: str) -> str:
    """Stream ``url`` into ``out``; the digest of what came. Raises ``_Refused`` or what urllib raises."""
    opener = urllib.request.build_opener(_WebOnlyRedirects)
    request = urllib.request.Request(url, headers={"User-Agent": "toynet", "Accept-Encoding": "identity"})
    with opener.open(request, timeout=timeout) as response:
        if response.status != 200:
            raise _Refused(f"the server answered HTTP {response.status} {response.reason}, not 200 OK")
        declared = response.headers.get("Content-Length")
        declared = int(declared) if declared and declared.strip().isdigit() else None
        if declared is not None and declared > max_bytes:
            raise _Refused(f"the server announces {declared} bytes, more than the {max_bytes} this file may have")
        digest, received = _hasher(algorithm), 0
        with _progress_bar(declared, label) as bar:
            while chunk := response.read(CHUNK):
                received += len(chunk)
                if received > max_bytes:
                    raise _Refused(f"the server sent more than the {max_bytes} bytes this file may have")
                digest.update(chunk)
                out.write(chunk)
                bar.update(len(chunk))
        # http.client's read(n) returns b"" when the connection closes early, without an error: count
        if declared is not None and received < declared:
            raise _Refused(f"the connection closed after {received} of the {declared} bytes announced")
    return digest.hexdigest()


def _what_went_wrong(error: BaseException, timeout: float) -> str:
    if isinstance(error, _Refused):
        return str(error)
    if isinstance(error, urllib.error.HTTPError):
        return f"the server answered HTTP {error.code} {error.reason}"
    cause = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(cause, TimeoutError):
        return f"no answer for {timeout:g} s (the timeout)"
    if isinstance(error, urllib.error.URLError):
        return f"the server could not be reached ({cause})"
    if isinstance(error, http.client.IncompleteRead):
        return f"the connection closed in the middle of the file ({len(error.partial)} bytes into a chunk)"
    if isinstance(error, (http.client.HTTPException, ConnectionError)):
        return f"the connection broke ({type(error).__name__}: {error})"
    return f"{type(error).__name__}: {error}"


def download_url(url: str, root: str | os.PathLike, filename: str | None = None, *, md5: str | None = None,
                 sha256: str | None = None, max_bytes: int, timeout: float = DEFAULT_TIMEOUT,
                 advice: str | None = None) -> str:
    """Download ``url`` to ``root/filename`` (``filename``: the last part of the address by default) and
    return that path, keeping it only if its digest is the pinned ``md5`` or ``sha256`` (one is required).

    At most ``max_bytes`` are accepted; ``timeout`` is in seconds, for connecting and for each read. A
    progress bar goes to stderr. ``root`` is made if missing. If ``root/filename`` is already the pinned
    file, nothing is fetched; if something else is there, it is left alone and :class:`DownloadError`
    says so. On any failure nothing is kept (no partial file, no folder this call made) and
    :class:`DownloadError` names the address and what went wrong, ending with ``advice`` (by default:
    check the network, or put the file there by hand).
    """
    _check_url(url)
    algorithm, expected = _pinned(md5, sha256)
    root = os.fspath(root)
    filename = filename or os.path.basename(urllib.parse.urlsplit(url).path)
    if not filename or filename in (".", "..") or "/" in filename or os.sep in filename:
        raise ValueError(f"download_url: {filename!r} is not a file name; pass filename=")
    path = os.path.join(root, filename)
    if os.path.lexists(path):
        if os.path.isfile(path) and _file_digest(path, algorithm) == expected:
            print(ALREADY_THERE)
            return path
        raise DownloadError(
            f"{path} is in the way: it is not the file {url} gives (its {algorithm} is not the pinned "
            f"{expected}), so it is damaged, cut short or another file. toynet does not overwrite it: delete "
            f"it (or move it away) and try again.", url=url, reason=f"{path} exists and is not the pinned file")

    made = _make_folders(root)
    part = None
    print(f"Downloading {url} to {path}")
    try:
        with tempfile.NamedTemporaryFile(dir=root, prefix=f".{filename}.", suffix=".part", delete=False) as out:
            part = out.name
            got = _fetch(url, out, algorithm, max_bytes, timeout, filename)
            out.flush()
            os.fsync(out.fileno())  # on disk before it gets its name: a crash leaves no short file there
        if got != expected:
            raise _Refused(f"what it sent has {algorithm} {got}, but {filename} must have {expected}: a "
                           f"changed, damaged or forged copy")
        os.replace(part, path)  # atomic: path is either absent or the whole verified file
        part = None
        return path
    except BaseException as error:
        with defer_interrupts():  # a second Ctrl-C waits until the clean-up is done
            if part is not None:
                _remove(part)
            _remove_folders(made)
        if not isinstance(error, (_Refused, urllib.error.URLError, http.client.HTTPException, OSError)):
            raise  # Ctrl-C, or a bug: as it is
        what = _what_went_wrong(error, timeout)
        advice = advice or (f"Check the network connection and try again, or get the file another way and "
                            f"put it at {path}.")
        raise DownloadError(f"Could not download {url}: {what}. Nothing was kept in {root}. {advice}",
                            url=url, reason=what) from error
