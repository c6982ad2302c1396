"""The on-disk index format (``DATA.lirs``): a preamble, named little-endian arrays, a JSON header.

Layout: a 64-byte preamble (magic, version, flags, header offset, header length, CRC-32 of the
header), then arrays aligned to 64 bytes, then the JSON header naming every array (dtype, offset,
count), the data files (absolute and relative path, fingerprint) and what the scan learned.
A sidecar is written to a temporary file beside its destination, fsynced and renamed: a crash
never leaves a half-written index under the final name. This module knows bytes and headers, not
records: :mod:`lirs.index` turns a sidecar into an :class:`~lirs.index.Index`.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib

import numpy as np

from .constants import BLOCK
from .errors import IndexFormatError, UsageError
from .offsets import OffsetEncoder, OffsetTable

MAGIC = b"LIRSIDX\x00"
VERSION = 1
_PREAMBLE = struct.Struct("<8sIIQQI")  # magic, version, flags, header_off, header_len, header_crc
_PREAMBLE_SIZE = 64
_ALIGN = 64
SIDECAR_SUFFIX = ".lirs"
_SAMPLE_BLOCKS = 16
_SAMPLE_BLOCK = BLOCK


# --------------------------------------------------------------------------- fingerprint


def fingerprint(path: str) -> dict:
    """Size, mtime_ns, inode and a BLAKE2b hash of 16 sampled 4 KiB blocks of ``path``."""
    st = os.stat(path)
    h = hashlib.blake2b(digest_size=16)
    h.update(st.st_size.to_bytes(8, "little"))
    if st.st_size:
        last = max(0, st.st_size - _SAMPLE_BLOCK)
        offs = sorted(set(int(x) for x in np.linspace(0, last, _SAMPLE_BLOCKS)))
        with open(path, "rb") as f:
            for off in offs:
                h.update(os.pread(f.fileno(), _SAMPLE_BLOCK, off))
    return {
        "size": int(st.st_size),
        "mtime_ns": int(st.st_mtime_ns),
        "inode": int(st.st_ino),
        "sample_hash": h.hexdigest(),
    }


def fingerprint_diff(path: str, expected: dict) -> str | None:
    try:
        now = fingerprint(path)
    except FileNotFoundError:
        return "the data file is missing"
    for key, what in (("size", "size"), ("sample_hash", "content"), ("mtime_ns", "modification time"),
                      ("inode", "inode")):
        if now[key] != expected.get(key):
            return f"its {what} changed ({expected.get(key)} -> {now[key]})"
    return None


def sidecar_path(paths) -> str:
    """Default sidecar path: ``DATA.lirs`` for one file, ``DIR.lirs`` beside a directory."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if len(paths) != 1:
        raise UsageError("several data files form one dataset: name its sidecar with -o NAME.lirs")
    p = paths[0].rstrip(os.sep) or paths[0]
    return p + SIDECAR_SUFFIX


class SidecarWriter:
    """Streams arrays into a temp file next to the destination, then fsyncs and renames.

    ``begin(name, dtype)`` / ``append(chunk)`` ... then ``_open = None`` (or the next ``begin``,
    ``add`` or ``commit``) write one array. The array ``"offsets"`` is stored compactly (see
    :class:`OffsetTable`): as ``offsets_rel`` (streamed), ``offsets_base`` and ``offsets_wide``.
    """

    def __init__(self, dest: str):
        self.dest = os.path.abspath(dest)
        d = os.path.dirname(self.dest)
        self.tmp = os.path.join(d, f".{os.path.basename(self.dest)}.tmp-{os.getpid()}")
        self.f = open(self.tmp, "wb")
        self.f.write(b"\0" * _PREAMBLE_SIZE)
        self.arrays: dict = {}
        self._cur: str | None = None
        self._enc: OffsetEncoder | None = None
        self._offset_view: tuple | None = None

    @property
    def _open(self) -> str | None:
        return self._cur

    @_open.setter
    def _open(self, name) -> None:
        if name is None:
            self._finish()
        self._cur = name

    def _finish(self) -> None:
        """Close the array being streamed (the compact offsets need their last block and bases)."""
        enc, self._enc = self._enc, None
        if enc is None:
            return
        self._cur = "offsets_rel"
        self._write(enc.encode(np.empty(0, np.int64), final=True))
        rel = self.arrays["offsets_rel"]
        bases, wides = enc.bases(), enc.wides()
        self._cur = None
        self.add("offsets_base", bases)
        self.add("offsets_wide", wides)
        self._offset_view = (rel["offset"], rel["count"], bases, wides)

    def _pad(self):
        pos = self.f.tell()
        if pos % _ALIGN:
            self.f.write(b"\0" * (_ALIGN - pos % _ALIGN))

    def begin(self, name: str, dtype) -> None:
        self._open = None
        self._pad()
        if name == "offsets":
            self._enc = OffsetEncoder()
            name, dtype = "offsets_rel", np.uint32
        dt = np.dtype(dtype).newbyteorder("<")
        self.arrays[name] = {"dtype": dt.str, "offset": self.f.tell(), "count": 0}
        self._cur = name

    def _write(self, arr: np.ndarray) -> None:
        spec = self.arrays[self._cur]
        a = np.ascontiguousarray(arr, dtype=np.dtype(spec["dtype"]))
        self.f.write(a.tobytes() if a.size < 4096 else memoryview(a).cast("B"))
        spec["count"] += int(a.size)

    def append(self, arr: np.ndarray) -> None:
        if self._enc is not None:
            arr = self._enc.encode(np.ascontiguousarray(arr, np.int64))
        self._write(arr)

    def add(self, name: str, arr: np.ndarray) -> None:
        self.begin(name, np.asarray(arr).dtype)
        self.append(np.asarray(arr))
        self._open = None

    def add_offsets(self, offsets) -> None:
        """Write an :class:`OffsetTable` (or int64 offsets) as the index's offsets."""
        if isinstance(offsets, OffsetTable):
            self.add("offsets_rel", np.asarray(offsets.rel, np.uint32))
            self.add("offsets_base", np.asarray(offsets.base, np.int64))
            self.add("offsets_wide", np.asarray(offsets.wide, np.int64))
            self._offset_view = None
        else:
            self.add("offsets", np.asarray(offsets, np.int64))

    def offsets_view(self) -> OffsetTable:
        """The offsets streamed so far, read back from the temp file (after the stream closed)."""
        self._open = None
        self.f.flush()
        off, count, bases, wides = self._offset_view
        rel = np.memmap(self.tmp, dtype=np.uint32, mode="r", offset=off, shape=(count,)) if count else \
            np.empty(0, np.uint32)
        return OffsetTable(bases, rel, wides)

    def commit(self, header: dict) -> str:
        self._open = None
        header = dict(header)
        header["arrays"] = self.arrays
        blob = json.dumps(header, sort_keys=True).encode()
        self._pad()
        hoff = self.f.tell()
        self.f.write(blob)
        self.f.seek(0)
        self.f.write(_PREAMBLE.pack(MAGIC, VERSION, 0, hoff, len(blob), zlib.crc32(blob)))
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.dest)
        try:
            dfd = os.open(os.path.dirname(self.dest), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:  # some filesystems refuse fsync on directories
            pass
        return self.dest

    def abort(self) -> None:
        try:
            self.f.close()
        finally:
            try:
                os.unlink(self.tmp)
            except FileNotFoundError:
                pass


def relpath(path: str, base_dir: str) -> str:
    try:
        return os.path.relpath(path, base_dir)
    except ValueError:
        return path


def read_header(sidecar: str) -> tuple[dict, int]:
    """Return the JSON header of a sidecar and its file size; raises IndexFormatError."""
    with open(sidecar, "rb") as f:
        pre = f.read(_PREAMBLE_SIZE)
        size = os.fstat(f.fileno()).st_size
        if len(pre) < _PREAMBLE.size or pre[:8] != MAGIC:
            raise IndexFormatError(f"{sidecar}: not a lirs index (bad magic); build one with `lirs index`")
        magic, version, flags, hoff, hlen, crc = _PREAMBLE.unpack_from(pre)
        if version != VERSION:
            raise IndexFormatError(f"{sidecar}: index version {version}, this lirs reads {VERSION}; "
                                   "re-run `lirs index`")
        if hoff + hlen > size:
            raise IndexFormatError(f"{sidecar}: truncated index ({size} bytes, header at {hoff}+{hlen})")
        f.seek(hoff)
        blob = f.read(hlen)
    if zlib.crc32(blob) != crc:
        raise IndexFormatError(f"{sidecar}: corrupt index header (checksum mismatch); re-run `lirs index`")
    return json.loads(blob), size


def offsets_of(arrays: dict) -> OffsetTable | None:
    if "offsets_rel" in arrays:
        return OffsetTable(arrays["offsets_base"], arrays["offsets_rel"], arrays.get("offsets_wide"))
    if "offsets" in arrays:  # plain int64 offsets (an index written before the compact form)
        return OffsetTable.from_array(np.asarray(arrays["offsets"]))
    return None




def read_arrays(sidecar: str, header: dict, size: int, *, mmap: bool = True) -> dict:
    """The arrays a sidecar's header names, by name: read-only memory maps (or read into memory
    with ``mmap=False``). Raises IndexFormatError when one lies past the end of the file."""
    arrays = {}
    for name, spec in header["arrays"].items():
        dt = np.dtype(spec["dtype"])
        end = spec["offset"] + spec["count"] * dt.itemsize
        if end > size:
            raise IndexFormatError(f"{sidecar}: truncated index (array {name} ends at {end}, file has {size})")
        if spec["count"] == 0:
            arrays[name] = np.empty(0, dt)
        elif mmap:
            arrays[name] = np.memmap(sidecar, dtype=dt, mode="r", offset=spec["offset"], shape=(spec["count"],))
        else:
            arrays[name] = np.fromfile(sidecar, dtype=dt, count=spec["count"], offset=spec["offset"])
    return arrays
