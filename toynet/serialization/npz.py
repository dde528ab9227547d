"""Reading the arrays of a checkpoint's ``arrays.npz``: only those asked for, each checked before it is read.

``numpy.load`` of an ``.npz`` gives every member on request and trusts each member's own header for its
size: a 255 KB archive can hold a member that inflates to 256 MB, or declare a shape of a billion
elements. Here the caller says which members it needs and what each must be (dtype and shape, from
``structure.json``), and for each member, before any of its data is read:

1. the zip directory's declared size must be the ``.npy`` header plus exactly the expected bytes;
2. the ``.npy`` header (no pickle: a strict pattern, or NumPy's own header reader) must give that
   dtype and shape;

and then exactly that many bytes are read into an array made here. Members nobody asked for are never
opened. A member stored uncompressed (as ``numpy.savez`` writes them) is read straight from the file
into its array; its CRC is checked unless the caller has already checked the whole file (the
checkpoint's SHA-256 manifest). A compressed member goes through :mod:`zipfile`, which checks the CRC.
"""

from __future__ import annotations

import io
import os
import re
import struct
import warnings
import zipfile
import zlib
from typing import Any, BinaryIO

from .. import backend
from .errors import MAX_NPY_HEADER, CheckpointError

numpy = backend.host            # checkpoints are host data
npy_format = numpy.lib.format   # NumPy's .npy header reader (it parses, never runs)

#: What :func:`read_members` is asked for: member name -> (dtype, shape, where it is referred from).
Wanted = dict[str, tuple[numpy.dtype, tuple[int, ...], str]]

_HEADER_READERS = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}
_MAX_RATIO = 1100   # deflate's best is about 1032:1
_CHUNK = 8 * 2**20  # bytes read at a time from a compressed member: the zip layer copies each read once
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # a zip member's local header (APPNOTE 4.3.7)
#: The header ``numpy.save`` writes, for the common case; anything else goes to NumPy's header reader.
_PLAIN_HEADER = re.compile(rb"\{'descr': '([<>|][biuf][1248])', 'fortran_order': (True|False), "
                           rb"'shape': \(((?:\d+, )*\d+,?|)\), \} *\n")


def read_members(file: BinaryIO, label: str, wanted: Wanted, check_crc: bool = True) -> dict[str, Any]:
    """The arrays ``wanted`` from the ``.npz`` archive open as ``file`` (``label`` names it in errors).
    ``check_crc=False`` skips the CRC of uncompressed members, for a file already checked whole."""
    arrays: dict[str, Any] = {}
    try:
        length = os.fstat(file.fileno()).st_size if hasattr(file, "fileno") else None
        with zipfile.ZipFile(file) as archive:
            for name, (dtype, shape, where) in wanted.items():
                try:
                    info = archive.getinfo(f"{name}.npy")
                except KeyError:
                    raise CheckpointError(f"{label} has no array {name!r}, which {where} refers to; the "
                                          f"checkpoint is incomplete") from None
                member = _Member(f"{label}, member {name}.npy ({where})", info, dtype, tuple(shape), length)
                if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
                    arrays[name] = member.read_stored(file, check_crc)
                elif info.compress_type == zipfile.ZIP_DEFLATED:
                    arrays[name] = member.read_compressed(archive)
                else:
                    raise CheckpointError(f"{member.where}: compression method {info.compress_type} (or "
                                          f"encryption) is not what NumPy writes")
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
            RuntimeError, struct.error) as error:
        raise CheckpointError(f"{label} is truncated or corrupt ({type(error).__name__}: {error})") from error
    return arrays


class _Member:
    """One wanted member: where it is, its zip entry, and the dtype and shape it must have."""

    def __init__(self, where: str, info: zipfile.ZipInfo, dtype: numpy.dtype, shape: tuple, length: int | None):
        self.where, self.info, self.dtype, self.shape = where, info, dtype, shape
        self.nbytes = dtype.itemsize
        for d in shape:
            self.nbytes *= d
        if not self.nbytes < info.file_size <= self.nbytes + MAX_NPY_HEADER:
            raise CheckpointError(f"{where}: declares {info.file_size} bytes, but a {dtype.name} array of "
                                  f"shape {list(shape)} takes {self.nbytes} bytes and a header")
        # What the archive can hold at all: stored data must be in the file; deflate shrinks at most ~1032:1.
        if length is not None and (info.header_offset + info.compress_size > length
                                   or info.file_size > _MAX_RATIO * info.compress_size + 2**16):
            raise CheckpointError(f"{where}: declares {info.file_size} bytes from {info.compress_size} bytes "
                                  f"of a {length}-byte file, which cannot be: the file is truncated or forged")

    def header(self, f: BinaryIO) -> tuple[bool, int]:
        """Read and check the ``.npy`` header at ``f``'s position; return (fortran order, header size)."""
        magic = f.read(8)
        version = npy_format.read_magic(io.BytesIO(magic))
        if version not in _HEADER_READERS:
            raise CheckpointError(f"{self.where}: .npy format version {version} (expected 1.0 or 2.0)")
        length_bytes = f.read(2 if version == (1, 0) else 4)
        length = int.from_bytes(length_bytes, "little")
        if length > MAX_NPY_HEADER:
            raise CheckpointError(f"{self.where}: a .npy header of {length} bytes")
        text = f.read(length)
        size = len(magic) + len(length_bytes) + length
        plain = _PLAIN_HEADER.fullmatch(text)
        if plain:
            dtype = numpy.dtype(plain[1].decode())
            fortran = plain[2] == b"True"
            shape = tuple(int(d) for d in plain[3].split(b",") if d.strip())
        else:
            try:  # NumPy's reader parses the header as a Python literal (never runs it), raising what it meets
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # a damaged header's escapes would warn as it is parsed
                    shape, fortran, dtype = _HEADER_READERS[version](io.BytesIO(length_bytes + text),
                                                                     max_header_size=MAX_NPY_HEADER)
            except Exception as error:
                raise CheckpointError(f"{self.where}: its .npy header is damaged ({type(error).__name__}: "
                                      f"{error})") from None
        if dtype != self.dtype or tuple(shape) != self.shape:
            raise CheckpointError(f"{self.where}: holds {dtype} {list(shape)}, but structure.json says "
                                  f"{self.dtype.name} {list(self.shape)}")
        if self.info.file_size != size + self.nbytes:
            raise CheckpointError(f"{self.where}: declares {self.info.file_size} bytes, but its header and "
                                  f"data take {size + self.nbytes}")
        self.header_bytes = magic + length_bytes + text
        return bool(fortran), size

    def empty(self, fortran: bool) -> tuple[Any, memoryview]:
        try:
            array = numpy.empty(self.shape[::-1] if fortran else self.shape, dtype=self.dtype)
        except MemoryError:
            raise CheckpointError(f"{self.where}: {self.nbytes} bytes do not fit in this machine's memory") from None
        return array, memoryview(array.reshape(-1).view(numpy.uint8))

    def read_stored(self, f: BinaryIO, check_crc: bool) -> Any:
        """An uncompressed member, read straight from the file into its array."""
        f.seek(self.info.header_offset)
        fields = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
        if fields[0] != b"PK\x03\x04" or self.info.compress_size != self.info.file_size:
            raise CheckpointError(f"{self.where}: the zip entry is damaged")
        f.seek(fields[10] + fields[11], io.SEEK_CUR)   # past the file name and the extra field
        fortran, _ = self.header(f)
        array, view = self.empty(fortran)
        if self.nbytes and f.readinto(view) != self.nbytes:
            raise CheckpointError(f"{self.where}: the file ends inside this member")
        if check_crc and zlib.crc32(view, zlib.crc32(self.header_bytes)) != self.info.CRC:
            raise CheckpointError(f"{self.where}: its CRC does not match: the file is corrupt")
        return array.T if fortran else array

    def read_compressed(self, archive: zipfile.ZipFile) -> Any:
        """A compressed member, inflated through :mod:`zipfile` no further than its declared size."""
        with archive.open(self.info) as f:
            fortran, _ = self.header(f)
            array, view = self.empty(fortran)
            filled = 0
            while filled < self.nbytes:
                count = f.readinto(view[filled:filled + _CHUNK])
                if not count:
                    raise CheckpointError(f"{self.where}: ends after {filled} of {self.nbytes} bytes")
                filled += count
            f.read(1)  # at the end: the zip layer checks the CRC of what was read
        return array.T if fortran else array
