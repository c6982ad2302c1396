"""Format-aware offset index (the paper's "Data Format Aware Location Generator", §4.1).

An :class:`Index` maps global record IDs ``0 .. n-1`` to byte spans in one or more data files:

* variable-length formats (``libsvm``, ``lines``, ``tfrecord``): one sequential, chunked scan stores the start
  offset of every record, compactly (:class:`OffsetTable`: a uint32 offset from the smallest start
  of its block of 1024 records, plus one int64 per block: about 4 B/record). Record ``i`` spans
  ``[offsets[i], offsets[i+1])`` in its
  file, or ``[offsets[i], data_ends[f])`` for the last record of file ``f``. A LIBSVM span may carry
  trailing comment or blank lines; decoders skip them exactly as sklearn does. A TFRecord span is
  the whole record: its 12-byte header, the payload and the 4-byte payload CRC.
* fixed-size formats (``npy``, ``fixed``): nothing is scanned; record ``i`` of file ``f`` starts at
  ``header_sizes[f] + (i - file_starts[f]) * record_size`` (the paper's arithmetic case).

The index lives in a sidecar file (``DATA.lirs``) that is written atomically (temp file, fsync,
rename) and carries a fingerprint of every data file; opening an index whose data changed raises
:class:`~lirs.errors.StaleIndexError`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .constants import FORMATS, VARIABLE_FORMATS  # noqa: F401 - re-exported
from .errors import IndexFormatError, StaleIndexError, UsageError
from .inputs import absolute
from .labelcodes import encode_labels
from .npyformat import descr_from_json
from .offsets import OffsetTable
from .pages import release_pages
from .freshness import check_label_files, check_no_new_files, data_paths, file_stat, files_crc, fingerprint, layout_crc, \
    rebuild_advice, reindex_command, staleness
from .relpaths import relpath
from .sidecar import SidecarWriter, is_sidecar_path, offsets_of, read_sidecar, sidecar_path, verify_arrays
from . import verified

log = logging.getLogger("lirs.index")


# --------------------------------------------------------------------------- the Index


@dataclass(eq=False)
class Index:
    """Record locations of one logical dataset (one or more files, global record IDs).

    Attributes
    ----------
    format : str
        ``"libsvm"``, ``"lines"``, ``"tfrecord"``, ``"npy"`` or ``"fixed"``.
    paths : tuple of str
        Absolute paths of the data files, in record-ID order.
    n : int
        Number of records (``len(index)``); see also :attr:`n_features` and :attr:`labels`.
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
        Extra facts from the scan (LIBSVM: ``min_index``, ``max_index``, ``qid_records``; statistics).
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
    sums: np.ndarray | None = None  # uint32: CRC-32C of every MiB of every file, file after file
    marks: np.ndarray | None = None  # int64: a LIBSVM scan's state at every MiB (lirs.scanner)
    header_crc: int = 0  # of the sidecar's header: which sidecar a recorded verification is for
    checked: tuple | None = None  # (size, mtime_ns, st_dev, st_ino, sample hash) of each data file as check_fresh found it
    labels_checked: tuple = ((), ())  # (paths, file_stat of each) of its labels files, as check_label_files found them
    layout: int = 0  # where the records lie (lirs.freshness.layout_crc; 0: no sidecar): a resume state's dataset
    order: int = 0  # its files' names in order (lirs.freshness.files_crc; 0: one file, or no sidecar)

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
        idx = cls(format=format, paths=paths, n=int(n), file_starts=fs, data_ends=de, header_sizes=hs,
                  record_size=record_size, record_dtype=np.dtype(record_dtype) if record_dtype is not None else (
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

    def release_pages(self) -> int:
        """Drop this process's resident pages of the memory-mapped sidecar arrays (offsets,
        labels): they stay in the page cache and map again when next touched (see
        :func:`lirs.pages.release_pages`). Returns the number of maps released."""
        t = self._offsets
        tables = () if t is None else (t.base, t.rel, t.wide)
        return release_pages(*tables, self.label_codes, self.label_values, owner=self)

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
        v = None if self.label_values is None else np.asarray(self.label_values, np.float64)
        return v if v is None or self.label_codes is None else v[self.label_codes]

    @property
    def n_features(self) -> int | None:
        """Features of a record: for LIBSVM the columns of a decoded batch, by ``load_svmlight_file``'s
        rule from the indices the scan saw (``max_index + 1`` zero-based, else ``max_index``; None
        for an index built without that range); for npy/fixed the elements of one record (the
        product of its shape: a batch is (k, *record_shape)); None for lines."""
        if self.format == "libsvm":
            from .decode import resolve_libsvm_params

            if "min_index" not in self.meta or "max_index" not in self.meta:
                return None
            return resolve_libsvm_params(self)[0]
        if self.is_fixed:
            return int(np.prod(self.record_shape, dtype=np.int64)) if self.record_shape is not None \
                else int(self.record_size)
        return None

    def labels_of(self, ids, *, checked: bool = True) -> np.ndarray | None:
        """float64 labels of the given record IDs (None when unknown); IndexError for one outside [0, n) (-1
        gave the last record's), unchecked with ``checked=False``: a plan's ids, a read step's (no min and max)."""
        if self.label_values is None:
            return None
        ids = self._ids(ids) if checked else np.asarray(ids, np.int64)
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
    def _ids(self, ids) -> np.ndarray:
        """``ids`` as int64, or IndexError for one outside [0, n) (one min and max: cheap per batch)."""
        ids = np.asarray(ids, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            raise IndexError(f"record id out of range [0, {self.n})")
        return ids

    def file_of(self, ids) -> np.ndarray:
        """int32 file number of each record ID."""
        ids = np.asarray(ids, np.int64)
        return (np.searchsorted(self.file_starts, ids, side="right") - 1).astype(np.int32)

    def spans(self, ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Byte spans of records: ``(file int32, start int64, end int64)``, each of shape ids.shape."""
        ids = self._ids(ids)
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

    def file_sums(self, f: int) -> np.ndarray | None:
        """uint32 CRC-32C per MiB of file ``f`` as indexed (None for an index without them)."""
        if self.sums is None:
            return None
        ends = self._block_ends()
        return np.asarray(self.sums[ends[f]:ends[f + 1]])

    def _block_ends(self) -> np.ndarray:
        # counted once per fingerprints (record() swaps them), not per file: an open is O(files)
        if self.__dict__.get("_ends", (None,))[0] is not self.fingerprints:
            from .content import block_count
            sizes = [block_count(fp.get("size", 0)) for fp in self.fingerprints]
            self._ends = (self.fingerprints, np.cumsum([0] + sizes, dtype=np.int64))
        return self._ends[1]

    def file_marks(self, f: int) -> np.ndarray | None:
        """int64 (blocks + 1, 4) scan marks of LIBSVM file ``f`` (see lirs.scanner), or None."""
        if self.marks is None:
            return None
        ends = self._block_ends()  # each file's marks: one row per block boundary, blocks + 1
        return np.asarray(self.marks, np.int64).reshape(-1, 4)[ends[f] + f:ends[f + 1] + f + 1]

    def check_fresh(self, *, record: bool = True, full: bool = False) -> list[int]:
        """Raise StaleIndexError naming the file and the first changed byte range if any data file
        changed since the index was built. A file whose size and mtime match is checked cheaply
        (16 sampled blocks); one whose mtime moved is read whole and compared with its per-MiB
        checksums: unchanged, its new mtime is recorded (``record``; in the sidecar, or the user's
        cache where the sidecar is read-only). ``full``: every file is read whole (``lirs index --check``).
        Labels files: :func:`~lirs.freshness.check_label_files`.
        Sets :attr:`checked`; returns the files read whole."""
        moved, seen = {}, []
        for f, (p, fp, trusted) in enumerate(zip(self.paths, self.fingerprints, verified.trusted_mtimes(self))):
            ident = file_stat(p)[2:]  # before the content check: a file renamed over after it is caught later
            why, mtime, now = staleness(p, fp, self.file_sums(f), trusted, full)
            if why:
                # found only by reading it whole (size, mtime and sampled blocks as indexed): an
                # incremental `lirs index` trusts those and would keep its old records
                hidden = full and staleness(p, fp, None)[0] is None
                raise StaleIndexError(f"index {self.sidecar or ''} is stale for {p}: {why}; {rebuild_advice(self, hidden)}"
                                      + (" (--full: its size, modification time and sampled blocks are as indexed, "
                                         "which `lirs index` alone trusts)" if hidden else ""))
            moved.update({} if mtime is None else {f: mtime})
            seen.append((int(fp["size"]), now) + ident + (fp.get("sample_hash"),))
        if moved and record and self.sidecar:
            verified.record(self, moved)
        check_label_files(self, full)  # served from the sidecar: an edit of a labels file is found here
        self.checked = tuple(seen)  # what an engine opening the files later must find (as_indexed)
        return sorted(moved)

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


# --------------------------------------------------------------------------- sidecar I/O


def header_for(index: Index, dest: str) -> dict:
    base = os.path.dirname(absolute(dest))  # where the kernel writes it: abspath folds "LINK/.." by text
    return {
        "format": index.format,
        "n": index.n,
        "files": [
            {"path": p, "relpath": relpath(p, base), "fingerprint": fp}
            for p, fp in zip(index.paths, index.fingerprints)
        ],
        "record_size": index.record_size,
        "record_dtype": None if index.record_dtype is None else np.lib.format.dtype_to_descr(index.record_dtype),
        "record_shape": None if index.record_shape is None else list(index.record_shape),
        "meta": index.meta,
        "created_by": "lirs",
    }


def write_index(index: Index, dest: str | None = None, *, fingerprints: bool = True, named: str | None = None) -> str:
    """Write ``index`` to its sidecar atomically and return the sidecar path.

    Data files are fingerprinted now unless ``index.fingerprints`` is already set, and summed
    (one sequential read each: formats whose index needs no scan) unless ``index.sums`` is set.
    ``named``: the sidecar's name once renamed (``dest`` a temporary elsewhere), which the header's
    file paths are relative to.
    """
    dest = dest or sidecar_path(index.paths if index.nfiles > 1 else index.paths[0])
    if fingerprints and not index.fingerprints:
        index.fingerprints = tuple(fingerprint(p) for p in index.paths)
    if fingerprints and index.sums is None:
        index.sums = data_sums(index.paths)
    w = SidecarWriter(dest)
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
        if index.sums is not None:
            w.add("content_sums", np.asarray(index.sums, np.uint32))
        index.sidecar = w.commit(header_for(index, named or dest))
        return index.sidecar
    except BaseException:
        w.abort()
        raise


def data_sums(paths) -> np.ndarray:
    """The per-MiB checksums (uint32) of the data files ``paths``, end to end, as a sidecar keeps
    them (one sequential read of each)."""
    from .content import sum_file

    return np.concatenate([np.empty(0, np.uint32)] + [sum_file(p) for p in paths])


def open_index(path: str, *, check: bool = True, mmap: bool = True, verify: bool = False,
               missing_ok: bool = False) -> Index:
    """Open the index of ``path`` (a data file, a directory, or the ``.lirs`` sidecar itself).

    A sidecar serves only the files it names relative to itself (the data file beside it, or the
    files of a directory or list it was built for); opened through a data path, it must name that
    path. Anything else raises :class:`IndexFormatError` naming both files: a copied sidecar never
    makes lirs read the file it was copied from. Arrays are memory-mapped read-only unless
    ``mmap=False`` (or the filesystem cannot map: then read). With ``check`` (the default) every
    data file's fingerprint is compared and :class:`StaleIndexError` raised on a mismatch; with
    ``verify`` the CRC-32 of every array is checked too (reads the whole sidecar).
    """
    path = os.fsdecode(path)
    named = is_sidecar_path(path)
    sidecar = absolute(path if named else sidecar_path(path))
    if not os.path.exists(sidecar):
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        raise IndexFormatError(f"{path} has no index ({sidecar} not found); run `{reindex_command([path], None)}` first")
    if os.path.isdir(sidecar):  # open() would say only "Is a directory"
        raise IndexFormatError(f"{sidecar} is a directory where {path}'s index belongs; remove it, or name the index "
                               "elsewhere with `lirs index -o NAME.lirs` and open that")
    header, arrays, mapped = read_sidecar(sidecar, mmap=mmap)
    if verify:
        bad = verify_arrays(sidecar, header, arrays)
        if bad:
            raise IndexFormatError("; ".join(bad))
    paths = data_paths(sidecar, header, None if named else path, missing_ok)
    fps = [fi["fingerprint"] for fi in header["files"]]
    fmt = header["format"]
    rd = header.get("record_dtype")
    idx = Index(
        format=fmt, paths=tuple(paths), n=int(header["n"]),
        file_starts=np.asarray(arrays["file_starts"]), data_ends=np.asarray(arrays["data_ends"]),
        header_sizes=np.asarray(arrays["header_sizes"]), record_size=header.get("record_size"),
        record_dtype=None if rd is None else np.lib.format.descr_to_dtype(descr_from_json(rd)),
        record_shape=None if header.get("record_shape") is None else tuple(header["record_shape"]),
        _offsets=offsets_of(arrays, header, mapped), label_values=arrays.get("label_values"),
        label_codes=arrays.get("label_codes"), fingerprints=tuple(fps), meta=header.get("meta", {}),
        sidecar=sidecar, sums=arrays.get("content_sums"), marks=arrays.get("scan_marks"),
        header_crc=header_crc(header), layout=layout_crc(header), order=files_crc(paths),
    )
    idx._validate()
    _check_offsets(idx)
    if check:
        idx.check_fresh()
        check_no_new_files(idx, path)
    return idx


def header_crc(header: dict) -> int:
    """CRC-32 of a sidecar header as written (sorted-key JSON)."""
    import json
    import zlib

    return zlib.crc32(json.dumps(header, sort_keys=True).encode())


def _check_offsets(idx: Index) -> None:
    """Raise IndexFormatError naming the sidecar when its offset table holds an impossible start
    (a flipped word, a torn copy): one pass over the table (4 B/record) at open, its pages released
    after, so no granularity ever plans a read from it."""
    t = idx.offset_table
    if t is None or idx.n == 0:
        return
    from .kernels.plan import check_offsets

    where = f"{idx.sidecar}: corrupt offset table"
    if len(t.base) < (idx.n + 1023) // 1024:
        raise IndexFormatError(f"{where} ({len(t.base)} blocks for {idx.n} records); check it with "
                               "`lirs index --check`, re-run `lirs index`")
    bad = int(check_offsets(np.asarray(t.base, np.int64), np.asarray(t.rel, np.uint32),
                            np.asarray(t.wide, np.int64), np.asarray(idx.file_starts, np.int64),
                            np.asarray(idx.data_ends, np.int64)))
    idx.release_pages()
    if bad >= 0:
        f = int(idx.file_of([bad])[0])
        raise IndexFormatError(f"{where}: record {bad} (of {idx.paths[f]}) starts at an impossible byte "
                               f"({int(t[bad])}; its file's records end at {int(idx.data_ends[f])}); check it "
                               "with `lirs index --check`, re-run `lirs index`")


def revalidate(path: str) -> Index:
    """``lirs index --check``: confirm that the index of ``path`` still describes its data exactly
    (array checksums; every data file read whole and compared with its per-MiB checksums, even
    one whose size and mtime match) without re-indexing, and record the files' new modification times (in
    the sidecar, atomically, or in the user's cache where the sidecar is read-only). Raises
    StaleIndexError (naming the first changed byte range) or IndexFormatError when it does not."""
    idx = open_index(path, check=False, mmap=False, verify=True)
    idx.check_fresh(full=True)
    check_no_new_files(idx, path)
    return idx
