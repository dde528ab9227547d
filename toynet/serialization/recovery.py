"""Locks and recovery: what lets a save be killed at any moment and the next save or load carry on.

Saves of a checkpoint ``path`` work in hidden siblings of it (see :mod:`toynet.serialization.directory`):
``.<name>.<12 hex digits>.saving`` while writing, ``.<name>.<12 hex digits>.old`` for the old checkpoint
between the two renames (on Linux, one atomic exchange replaces the two renames where the file system
allows, so ``path`` is never missing). A save holds ``flock`` on its ``.saving`` directory while it runs, and on the
parent directory while it renames; loads hold it (shared) on the parent while they open files. Locks
die with their process, so a killed save's leftovers are recognised as such by the next save or load,
which repairs them with :func:`recover`. Where there is no ``flock`` (Windows), nothing is locked.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # no flock (Windows): saves are still crash-consistent, concurrent ones not coordinated
    fcntl = None

try:  # Linux's renameat2 (glibc 2.28+): swaps two directories in one step
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2 if sys.platform.startswith("linux") else None
    if _renameat2 is not None:
        _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
except (OSError, AttributeError, TypeError):
    _renameat2 = None
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def exchange(a: Path, b: Path) -> bool:
    """Swap directories ``a`` and ``b`` atomically (``renameat2(RENAME_EXCHANGE)``), so that ``b`` is never
    missing. False, with nothing changed, where the system or the file system cannot: the caller then
    renames twice, and :func:`recover` covers the moment between."""
    if _renameat2 is None:
        return False
    return _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


@contextlib.contextmanager
def locked(directory: Path, shared: bool = False) -> Iterator[None]:
    """Hold ``flock`` on ``directory`` (exclusive, or shared) where the platform allows; else nothing."""
    fd = None
    if fcntl is not None:
        try:
            fd = os.open(directory, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError:
            pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def hold(directory: Path) -> int | None:
    """Lock a save's staging directory for as long as the save runs (the lock dies with the process)."""
    if fcntl is None:
        return None
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass
    return fd


def busy(directory: Path) -> bool:
    """Does a running save hold ``directory``?"""
    if fcntl is None:
        return False
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def leftovers(target: Path) -> list[tuple[Path, str]]:
    """The hidden siblings saves of ``target`` made and did not remove: ``(path, "saving" or "old")``."""
    pattern = re.compile(r"\." + re.escape(target.name) + r"\.[0-9a-f]{12}\.(saving|old)")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return []
    return [(target.parent / name, m.group(1)) for name in names if (m := pattern.fullmatch(name))]


def recover(target: Path) -> Path | None:
    """Repair what killed saves of ``target`` left (call with the parent directory locked).

    If ``target`` is missing and a save was killed between its two renames, the old checkpoint is put
    back from its ``.old`` sibling. Every other leftover not held by a running save is deleted. Returns
    the ``.old`` directory to read instead when it could not be moved back (a read-only place)."""
    found = leftovers(target)
    fallback = None
    if found and not os.path.lexists(target):
        olds = sorted((p for p, what in found if what == "old"), key=lambda p: p.stat().st_mtime_ns)
        if olds:
            try:
                os.rename(olds[-1], target)
                sync_directory(target.parent)
            except OSError:
                fallback = olds[-1]
    for path, what in found:
        if path != fallback and os.path.lexists(path) and not (what == "saving" and busy(path)):
            shutil.rmtree(path, ignore_errors=True)
    return fallback


def sync_directory(directory: Path) -> None:
    """Flush a directory's entries (new files, renames) to disk; not every platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
