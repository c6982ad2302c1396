"""Format-aware offset index (the paper's "Data Format Aware Location Generator", §4.1).

An :class:`Index` maps global record IDs ``0 .. n-1`` to byte spans in one or more data files:

* variable-length formats (``libsvm``, ``lines``): one sequential, chunked scan stores the start
  offset of every record, compactly (:class:`OffsetTable`: a uint32 offset from the smallest start
  of its block of 1024 records, plus one int64 per block: about 4 B/record). Record ``i`` spans
  ``[offsets[i], offsets[i+1])`` in its
  file, or ``[offsets[i], data_ends[f])`` for the last record of file ``f``. A LIBSVM span may carry
  trailing comment or blank lines; decoders skip them exactly as sklearn does.
* fixed-size formats (``npy``, ``fixed``): nothing is scanned; record ``i`` of file ``f`` starts at
  ``header_sizes[f] + (i - file_starts[f]) * record_size`` (the paper's arithmetic case).

The index lives in a sidecar file (``DATA.lirs``) that is written atomically (temp file, fsync,
rename) and carries a fingerprint of every data file; opening an index whose data changed raises
:class:`~lirs.errors.StaleIndexError`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .errors import DataError, IndexFormatError, StaleIndexError, UsageError

log = logging.getLogger("lirs.index")

MAGIC = b"LIRSIDX\x00"
VERSION = 1
_PREAMBLE = struct.Struct("<8sIIQQI")  # magic, version, flags, header_off, header_len, header_crc
_PREAMBLE_SIZE = 64
_ALIGN = 64
FORMATS = ("libsvm", "lines", "npy", "fixed")
VARIABLE_FORMATS = ("libsvm", "lines")
SIDECAR_SUFFIX = ".lirs"
_SAMPLE_BLOCKS = 16
_SAMPLE_BLOCK = 4096


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


def _fingerprint_diff(path: str, expected: dict) -> str | None:
    try:
        now = fingerprint(path)
    except FileNotFoundError:
        return "the data file is missing"
    for key, what in (("size", "size"), ("sample_hash", "content"), ("mtime_ns", "modification time"),
                      ("inode", "inode")):
        if now[key] != expected.get(key):
            return f"its {what} changed ({expected.get(key)} -> {now[key]})"
    return None


# --------------------------------------------------------------------------- compact offsets

OFFSET_SHIFT = 10                  # records per offset block: 1 << OFFSET_SHIFT
OFFSET_BLOCK = 1 << OFFSET_SHIFT
_U32_SPAN = 1 << 32


class OffsetTable:
    """Record start offsets in about 4 B/record instead of 8.

    Record ``i`` belongs to block ``b = i >> 10``. ``base[b] >= 0``: the offset is ``base[b] +
    rel[i]`` (``base[b]`` is the smallest start of the block, ``rel`` uint32). ``base[b] < 0``: the
    block spans 4 GiB or more (records of megabytes); its offsets are stored whole in ``wide``, at
    ``(-base[b] - 1) * 1024 + (i & 1023)``.

    Indexing with an int gives an int; with a slice or an integer array, int64 offsets.
    ``base`` int64 (ceil(n/1024),), ``rel`` uint32 (n,), ``wide`` int64 (1024 * wide blocks,).
    """

    __slots__ = ("base", "rel", "wide")

    def __init__(self, base, rel, wide=None):
        self.base = base
        self.rel = rel
        self.wide = np.empty(0, np.int64) if wide is None else wide

    @classmethod
    def from_array(cls, offsets) -> "OffsetTable":
        """Compact an int64 (n,) array of offsets."""
        enc = _OffsetEncoder()
        rel = enc.encode(np.ascontiguousarray(offsets, np.int64), final=True)
        return cls(enc.bases(), rel, enc.wides())

    def __len__(self) -> int:
        return int(self.rel.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.base.nbytes + self.rel.nbytes + self.wide.nbytes)

    def _gather(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        b = np.asarray(self.base)[ids >> OFFSET_SHIFT]
        out = b + np.asarray(self.rel)[ids].astype(np.int64)
        wide = b < 0
        if wide.any():
            out[wide] = np.asarray(self.wide)[(-b[wide] - 1) * OFFSET_BLOCK + (ids[wide] & (OFFSET_BLOCK - 1))]
        return out

    def __getitem__(self, key):
        n = len(self)
        if isinstance(key, slice):
            a, b, step = key.indices(n)
            return self._gather(np.arange(a, b, step, dtype=np.int64))
        if np.ndim(key) == 0:
            i = int(key)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"record {key} outside [0, {n})")
            return int(self._gather(np.array([i]))[0])
        ids = np.asarray(key, np.int64)
        return self._gather(np.where(ids < 0, ids + n, ids))

    def to_array(self) -> np.ndarray:
        """All offsets as int64 (n,) (8 B/record: for whole-table work, in chunks if n is large)."""
        out = np.empty(len(self), np.int64)
        step = 1 << 24
        for a in range(0, len(self), step):
            out[a:a + step] = self[a:a + step]
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.to_array()
        return a if dtype is None else a.astype(dtype)


class _OffsetEncoder:
    """Streams int64 offsets into the compact form: uint32 ``rel`` comes out as blocks complete;
    the per-block ``base`` and the rare wide blocks stay in memory (8 B per 1024 records)."""

    def __init__(self):
        self.carry = np.empty(0, np.int64)
        self._bases: list = []
        self._wides: list = []
        self.nwide = 0

    def encode(self, offsets: np.ndarray, final: bool = False) -> np.ndarray:
        """uint32 rel of the offsets completed by this call (all of them when ``final``)."""
        a = np.concatenate([self.carry, offsets]) if self.carry.size else offsets
        full = (a.size // OFFSET_BLOCK) * OFFSET_BLOCK
        cut = a.size if final else full
        self.carry = a[cut:].copy()
        if cut == 0:
            return np.empty(0, np.uint32)
        head = a[:full].reshape(-1, OFFSET_BLOCK)
        parts = [head]
        if cut > full:
            parts.append(a[full:cut])
        rels = []
        for blk in parts:
            two = blk.reshape(-1, blk.shape[-1])
            lo = two.min(axis=1)
            span = two.max(axis=1) - lo
            rel = two - lo[:, None]
            wide = span >= _U32_SPAN
            if wide.any():
                codes = []
                for r in np.flatnonzero(wide):
                    w = np.zeros(OFFSET_BLOCK, np.int64)
                    w[:two.shape[1]] = two[r]
                    self._wides.append(w)
                    self.nwide += 1
                    codes.append(-self.nwide)
                lo = lo.copy()
                lo[wide] = codes
                rel[wide] = 0
            self._bases.append(lo.astype(np.int64))
            rels.append(rel.astype(np.uint32).ravel())
        return np.concatenate(rels)

    def bases(self) -> np.ndarray:
        return np.concatenate(self._bases) if self._bases else np.empty(0, np.int64)

    def wides(self) -> np.ndarray:
        return np.concatenate(self._wides) if self._wides else np.empty(0, np.int64)


def offset_arrays(offsets):
    """(base, rel, wide) of an OffsetTable or a plain int64 array (compacted on the fly), for kernels."""
    if not isinstance(offsets, OffsetTable):
        offsets = OffsetTable.from_array(offsets)
    return (np.asarray(offsets.base, np.int64), np.asarray(offsets.rel, np.uint32),
            np.asarray(offsets.wide, np.int64))


# --------------------------------------------------------------------------- the Index


@dataclass(eq=False)
class Index:
    """Record locations of one logical dataset (one or more files, global record IDs).

    Attributes
    ----------
    format : str
        ``"libsvm"``, ``"lines"``, ``"npy"`` or ``"fixed"``.
    paths : tuple of str
        Absolute paths of the data files, in record-ID order.
    n : int
        Number of records.
    file_starts : int64 ndarray, shape (nfiles + 1,)
        Global ID of the first record of each file; ``file_starts[-1] == n``.
    data_ends : int64 ndarray, shape (nfiles,)
        Byte offset just past the last record of each file.
    header_sizes : int64 ndarray, shape (nfiles,)
        Offset of record 0 in each file (``.npy`` header size; first record for text formats).
    record_size : int or None
        Bytes per record for fixed formats.
    record_dtype, record_shape
        For ``npy``: dtype and per-record shape; raw ``fixed``: ``uint8`` and ``(record_size,)``.
    label_values, label_codes
        Labels stored compactly: ``labels == label_values[label_codes]`` (or ``label_codes`` is
        None and ``label_values`` holds one float64 per record). Both None when unknown.
    meta : dict
        Extra facts from the scan (LIBSVM: ``min_index``, ``max_index``, ``nnz``; statistics).
    """

    format: str
    paths: tuple
    n: int
    file_starts: np.ndarray
    data_ends: np.ndarray
    header_sizes: np.ndarray
    record_size: int | None = None
    record_dtype: np.dtype | None = None
    record_shape: tuple | None = None
    _offsets: np.ndarray | None = None
    label_values: np.ndarray | None = None
    label_codes: np.ndarray | None = None
    fingerprints: tuple = ()
    meta: dict = field(default_factory=dict)
    sidecar: str | None = None

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, paths: Sequence[str], format: str, *, offsets=None, file_starts=None,
                    data_ends=None, header_sizes=None, record_size=None, record_dtype=None,
                    record_shape=None, labels=None, meta=None) -> "Index":
        """Build an in-memory index (no sidecar, no fingerprint) — for tests and generated plans.

        Variable formats need ``offsets`` (int64, (n,)) and ``data_ends``; fixed formats need
        ``record_size``, ``header_sizes`` and ``file_starts`` (or ``data_ends``).
        With one file, ``file_starts`` defaults to ``[0, n]``.
        """
        if format not in FORMATS:
            raise UsageError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
        paths = tuple(os.path.abspath(os.fspath(p)) for p in paths)
        nf = len(paths)
        hs = np.zeros(nf, np.int64) if header_sizes is None else np.asarray(header_sizes, np.int64)
        if format in VARIABLE_FORMATS:
            offsets = offsets if isinstance(offsets, OffsetTable) else OffsetTable.from_array(offsets)
            n = len(offsets)
            fs = np.array([0, n], np.int64) if file_starts is None else np.asarray(file_starts, np.int64)
            de = np.asarray(data_ends, np.int64)
        else:
            if not record_size or record_size <= 0:
                raise UsageError("fixed formats need record_size > 0")
            if file_starts is None:
                counts = (np.asarray(data_ends, np.int64) - hs) // record_size
                fs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            else:
                fs = np.asarray(file_starts, np.int64)
            n = int(fs[-1])
            de = hs + np.diff(fs) * record_size
            offsets = None
        idx = cls(format=format, paths=paths, n=int(n), file_starts=fs, data_ends=de,
                  header_sizes=hs, record_size=record_size,
                  record_dtype=np.dtype(record_dtype) if record_dtype is not None else (
                      np.dtype(np.uint8) if format == "fixed" else None),
                  record_shape=tuple(record_shape) if record_shape is not None else (
                      (int(record_size),) if format == "fixed" else None),
                  _offsets=offsets, meta=dict(meta or {}))
        if labels is not None:
            idx.label_values, idx.label_codes = encode_labels(np.asarray(labels, np.float64))
        idx._validate()
        return idx

    def _validate(self) -> None:
        nf = len(self.paths)
        if len(self.file_starts) != nf + 1 or self.file_starts[0] != 0 or self.file_starts[-1] != self.n:
            raise IndexFormatError("inconsistent file_starts in index")
        if len(self.data_ends) != nf or len(self.header_sizes) != nf:
            raise IndexFormatError("inconsistent per-file arrays in index")
        if self._offsets is not None and len(self._offsets) != self.n:
            raise IndexFormatError("offset table length does not match record count")

    # ---- properties ---------------------------------------------------------------------
    @property
    def nfiles(self) -> int:
        return len(self.paths)

    @property
    def is_fixed(self) -> bool:
        return self.format not in VARIABLE_FORMATS

    @property
    def offset_table(self) -> "OffsetTable | None":
        """The compact offsets of a variable-length format (None for fixed formats)."""
        return self._offsets

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n,): start of each record within its file, materialized (8 B/record; use
        :meth:`spans` or :attr:`offset_table` to look up a few records)."""
        if self._offsets is not None:
            return self._offsets.to_array()
        out = np.empty(self.n, np.int64)
        for f in range(self.nfiles):
            a, b = int(self.file_starts[f]), int(self.file_starts[f + 1])
            out[a:b] = self.header_sizes[f] + np.arange(b - a, dtype=np.int64) * self.record_size
        return out

    @property
    def labels(self) -> np.ndarray | None:
        """float64 (n,) labels, or None when the format carries none."""
        if self.label_values is None:
            return None
        if self.label_codes is None:
            return np.asarray(self.label_values, np.float64)
        return np.asarray(self.label_values, np.float64)[self.label_codes]

    def labels_of(self, ids) -> np.ndarray | None:
        """float64 labels of the given record IDs (None when unknown)."""
        if self.label_values is None:
            return None
        ids = np.asarray(ids, np.int64)
        if self.label_codes is None:
            return np.asarray(self.label_values[ids], np.float64)
        return np.asarray(self.label_values, np.float64)[self.label_codes[ids]]

    @property
    def payload_bytes(self) -> int:
        return int(sum(int(self.data_ends[f]) - self._first_offset(f) for f in range(self.nfiles)))

    def _first_offset(self, f: int) -> int:
        a, b = int(self.file_starts[f]), int(self.file_starts[f + 1])
        if a == b:
            return int(self.data_ends[f])
        return int(self.header_sizes[f]) if self.is_fixed else int(self._offsets[a])

    # ---- lookups ------------------------------------------------------------------------
    def file_of(self, ids) -> np.ndarray:
        """int32 file number of each record ID."""
        ids = np.asarray(ids, np.int64)
        return (np.searchsorted(self.file_starts, ids, side="right") - 1).astype(np.int32)

    def spans(self, ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Byte spans of records: ``(file int32, start int64, end int64)``, each of shape ids.shape."""
        ids = np.asarray(ids, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            raise IndexError(f"record id out of range [0, {self.n})")
        f = self.file_of(ids)
        if self.is_fixed:
            start = self.header_sizes[f] + (ids - self.file_starts[f]) * self.record_size
            return f, start, start + self.record_size
        start = self._offsets[ids]
        nxt = np.minimum(ids + 1, self.n - 1)
        last = (ids + 1) == self.file_starts[f + 1]
        end = np.where(last, self.data_ends[f], self._offsets[nxt])
        return f, np.asarray(start, np.int64), np.asarray(end, np.int64)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Full ``(starts, ends)`` int64 arrays of shape (n,) (ends materialized)."""
        starts = self.offsets
        ends = np.empty(self.n, np.int64)
        for f in range(self.nfiles):
            a, b = int(self.file_starts[f]), int(self.file_starts[f + 1])
            if b > a:
                ends[a:b - 1] = starts[a + 1:b]
                ends[b - 1] = self.data_ends[f]
        return starts, ends

    def check_fresh(self) -> None:
        """Raise StaleIndexError if any data file changed since the index was built."""
        for p, fp in zip(self.paths, self.fingerprints):
            why = _fingerprint_diff(p, fp)
            if why:
                raise StaleIndexError(
                    f"index {self.sidecar or ''} is stale for {p}: {why}; "
                    f"re-run `lirs index {p}`")

    def index_bytes(self) -> int:
        """Bytes the index needs in memory per dataset (offsets + labels), not counting metadata."""
        total = 0 if self._offsets is None else self._offsets.nbytes
        if self.label_codes is not None:
            total += self.label_codes.nbytes + self.label_values.nbytes
        elif self.label_values is not None:
            total += self.label_values.nbytes
        return int(total)

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"Index(format={self.format!r}, n={self.n}, files={self.nfiles}, sidecar={self.sidecar!r})"


def encode_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Compact labels: (values float64, codes of the smallest unsigned dtype) or (labels, None)."""
    labels = np.asarray(labels, np.float64)
    values, codes = np.unique(labels, return_inverse=True)
    if len(values) > 65535:
        return labels, None
    dt = np.uint8 if len(values) <= 256 else np.uint16
    return values, codes.astype(dt).reshape(labels.shape)


# --------------------------------------------------------------------------- sidecar I/O


def sidecar_path(paths) -> str:
    """Default sidecar path: ``DATA.lirs`` for one file, ``DIR.lirs`` beside a directory."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if len(paths) != 1:
        raise UsageError("several data files form one dataset: name its sidecar with -o NAME.lirs")
    p = paths[0].rstrip(os.sep) or paths[0]
    return p + SIDECAR_SUFFIX


class _SidecarWriter:
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
        self._enc: _OffsetEncoder | None = None
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
            self._enc = _OffsetEncoder()
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


def _rel(path: str, base_dir: str) -> str:
    try:
        return os.path.relpath(path, base_dir)
    except ValueError:
        return path


def _header_for(index: Index, dest: str) -> dict:
    base = os.path.dirname(os.path.abspath(dest))
    return {
        "format": index.format,
        "n": index.n,
        "files": [
            {"path": p, "relpath": _rel(p, base), "fingerprint": fp}
            for p, fp in zip(index.paths, index.fingerprints)
        ],
        "record_size": index.record_size,
        "record_dtype": None if index.record_dtype is None else np.lib.format.dtype_to_descr(index.record_dtype),
        "record_shape": None if index.record_shape is None else list(index.record_shape),
        "meta": index.meta,
        "created_by": "lirs",
    }


def write_index(index: Index, dest: str | None = None, *, fingerprints: bool = True) -> str:
    """Write ``index`` to its sidecar atomically and return the sidecar path.

    Data files are fingerprinted now unless ``index.fingerprints`` is already set.
    """
    dest = dest or sidecar_path(index.paths if index.nfiles > 1 else index.paths[0])
    if fingerprints and not index.fingerprints:
        index.fingerprints = tuple(fingerprint(p) for p in index.paths)
    w = _SidecarWriter(dest)
    try:
        w.add("file_starts", index.file_starts.astype(np.int64))
        w.add("data_ends", index.data_ends.astype(np.int64))
        w.add("header_sizes", index.header_sizes.astype(np.int64))
        if index._offsets is not None:
            w.add_offsets(index._offsets)
        if index.label_values is not None:
            w.add("label_values", np.asarray(index.label_values, np.float64))
            if index.label_codes is not None:
                w.add("label_codes", index.label_codes)
        index.sidecar = w.commit(_header_for(index, dest))
        return index.sidecar
    except BaseException:
        w.abort()
        raise


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


def _offsets_of(arrays: dict) -> OffsetTable | None:
    if "offsets_rel" in arrays:
        return OffsetTable(arrays["offsets_base"], arrays["offsets_rel"], arrays.get("offsets_wide"))
    if "offsets" in arrays:  # plain int64 offsets (an index written before the compact form)
        return OffsetTable.from_array(np.asarray(arrays["offsets"]))
    return None


def open_index(path: str, *, check: bool = True, mmap: bool = True) -> Index:
    """Open the index of ``path`` (a data file, a directory, or the ``.lirs`` sidecar itself).

    Arrays are memory-mapped read-only unless ``mmap=False``. With ``check`` (the default) every
    data file's fingerprint is compared and :class:`StaleIndexError` raised on a mismatch.
    """
    path = os.fspath(path)
    sidecar = os.path.abspath(path if path.endswith(SIDECAR_SUFFIX) else sidecar_path(path))
    if not os.path.exists(sidecar):
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        raise IndexFormatError(f"{path} has no index ({sidecar} not found); run `lirs index {path}` first")
    header, size = read_header(sidecar)
    base = os.path.dirname(os.path.abspath(sidecar))
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
    paths, fps = [], []
    for fi in header["files"]:
        rel = os.path.normpath(os.path.join(base, fi["relpath"]))
        paths.append(rel if os.path.exists(rel) else fi["path"])
        fps.append(fi["fingerprint"])
    fmt = header["format"]
    rd = header.get("record_dtype")
    idx = Index(
        format=fmt, paths=tuple(paths), n=int(header["n"]),
        file_starts=np.asarray(arrays["file_starts"]), data_ends=np.asarray(arrays["data_ends"]),
        header_sizes=np.asarray(arrays["header_sizes"]), record_size=header.get("record_size"),
        record_dtype=None if rd is None else np.lib.format.descr_to_dtype(
            [tuple(x) for x in rd] if isinstance(rd, list) else rd),
        record_shape=None if header.get("record_shape") is None else tuple(header["record_shape"]),
        _offsets=_offsets_of(arrays), label_values=arrays.get("label_values"),
        label_codes=arrays.get("label_codes"), fingerprints=tuple(fps), meta=header.get("meta", {}),
        sidecar=sidecar,
    )
    idx._validate()
    if check:
        idx.check_fresh()
    return idx


def build_index(paths, format: str = "auto", *, record_size: int | None = None, header_size: int = 0,
                out: str | None = None, progress: bool | None = None, chunk_bytes: int = 16 << 20) -> Index:
    """Scan ``paths`` (a file, a directory, or several files) and write the sidecar.

    Returns the opened :class:`Index`. See :mod:`lirs.scan` for the formats.
    """
    from .scan import build  # the scanner needs numba; keep `lirs.index` light

    return build(paths, format=format, record_size=record_size, header_size=header_size, out=out,
                 progress=progress, chunk_bytes=chunk_bytes)
