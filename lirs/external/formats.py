"""Inputs of `lirs shuffle`: the format, each file's record range, the record layout; .npy headers.

Text formats (``libsvm``, ``lines``) have records of any length, framed by newlines; ``tfrecord``
records frame themselves (length, CRCs) and go to piles and outputs whole; fixed formats
(``npy``, ``fixed``) have records of ``record_size`` bytes after a header, and in piles every record
is followed by its label bytes (``.npy`` labels in ``INPUT.labels.npy``).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..build import VarScanner, check_header_size, labels_for_npy, npy_layout, raw_fixed_count
from ..textguess import refuse_misread
from ..inputs import resolve_format
from ..preads import read_at
from ..errors import DataError, UsageError
from ..npyformat import header_bytes
from ..index import VARIABLE_FORMATS
from ..kernels import scan as KS

_SAMPLE = 1 << 20  # bytes of the first text input that estimate the mean record size
_HEAD_CHECK = 1 << 16  # bytes at the start of each LIBSVM input checked before pass 1 (without --index)


@dataclass
class Source:
    """One input file: its records lie in bytes [start, end)."""

    path: str
    start: int            # first record byte
    end: int              # end of the last record
    n: int = -1           # records (fixed formats; -1 when unknown)
    labels: object = None  # the .npy labels (lirs.npyformat.NpyRows: read a chunk at a time)


@dataclass
class Dataset:
    """The inputs of one shuffle and their record layout.

    ``rs``: bytes per record (0 for text); ``dtype``/``shape``: one record's layout (fixed formats);
    ``linfo``: (dtype, shape, bytes) of one record's labels, or None.
    """

    fmt: str
    files: list
    srcs: list = field(default_factory=list)
    rs: int = 0
    dtype: object = None
    shape: tuple | None = None
    linfo: tuple | None = None
    given: bool = False  # the format was given (not detected): the outputs' sidecars say so

    @property
    def text(self) -> bool:
        """Records framed by newlines (``libsvm``, ``lines``)."""
        return self.fmt in VARIABLE_FORMATS and self.fmt != "tfrecord"

    @property
    def variable(self) -> bool:
        """Records of any length (text and ``tfrecord``): no record size, no labels."""
        return self.fmt in VARIABLE_FORMATS

    @property
    def ls(self) -> int:
        """Label bytes per record (0 without labels)."""
        return self.linfo[2] if self.linfo else 0

    @property
    def rr(self) -> int:
        """Bytes per record in a pile: the record and its labels (0 for text)."""
        return 0 if self.variable else self.rs + self.ls

    @property
    def in_bytes(self) -> int:
        """Record bytes of all inputs (headers excluded)."""
        return sum(s.end - s.start for s in self.srcs)

    @property
    def pile_bytes(self) -> int:
        """Bytes the piles hold: text may gain a newline per input; fixed records carry labels."""
        if self.variable:
            return self.in_bytes + (len(self.srcs) if self.text else 0)
        return sum(s.n for s in self.srcs) * self.rr

    @property
    def out_bytes(self) -> int:
        """About the bytes of the output: records, labels, newlines or headers."""
        labels = sum(s.n for s in self.srcs) * self.ls
        extra = len(self.srcs) if self.text else 0 if self.variable else 1 << 16
        return self.in_bytes + labels + extra

    def sidecar_bytes(self, mean_record: float) -> int:
        """About the bytes of the output's sidecar (``index``): the offsets of records of any length
        (~4 B each) and LIBSVM's label codes (~1 B), or labels' values and codes of fixed records
        (~their bytes); ``mean_record``: :meth:`mean_record`. Over half the output for short lines."""
        if self.variable:
            n, per = self.pile_bytes / max(mean_record, 1.0), 5 if self.fmt == "libsvm" else 4
        else:
            n, per = self.pile_bytes / max(self.rr, 1), self.ls
        return int(n * per) + (64 << 10)  # + header, checksums and scan marks

    def mean_record(self) -> float:
        """Bytes per pile record: exact for fixed formats, from the first MiB of text."""
        if not self.variable:
            return float(self.rr)
        s = self.srcs[0]
        head = read_at(s.path, _SAMPLE)
        if not self.text:
            return _mean_tfrecord(head)
        lines = head.count(b"\n")
        if lines == 0:  # the whole sample is part of one line
            return float(max(len(head), min(s.end, _SAMPLE)))
        return len(head) / lines


def _mean_tfrecord(head: bytes) -> float:
    """Mean bytes of the TFRecord records that start in ``head`` (framing included), from their
    length fields; the first record's size when it does not fit ``head``."""
    pos = count = 0
    while pos + 8 <= len(head):
        pos += int.from_bytes(head[pos:pos + 8], "little") + 16
        count += 1
        if pos > len(head):
            break
    return pos / max(count, 1)


def open_dataset(files, format: str = "auto", record_size=None, header_size: int = 0, *, index: bool = False) -> Dataset:
    """Detect the format of ``files`` and read every file's record range and layout; ``index``: the
    outputs get a sidecar, whose labels must be numbers, one a record (checked before any pass)."""
    fmt, why = resolve_format(files, format, record_size)
    check_header_size(header_size, fmt, why, record_size, files)  # else ignored: the format gives the layout
    ds = Dataset(fmt, list(files), given=format != "auto")
    if ds.variable:
        for p in files:
            size = os.path.getsize(p)
            if size == 0:
                raise DataError(f"{p}: empty file (0 bytes); nothing to shuffle")
            if ds.fmt == "libsvm":
                check_head(p)
            elif format == "auto":  # a CSV header would be shuffled in as a record (given a format: it is one)
                refuse_misread(p)
            ds.srcs.append(Source(p, 0, size))
    elif ds.fmt == "npy":
        _npy_sources(ds, numbers=index)
    else:
        if not record_size or record_size <= 0:
            raise UsageError("--format fixed needs --record-size N (bytes per record)")
        if header_size < 0:
            raise UsageError("--header-size must be >= 0")
        for p in files:
            n = raw_fixed_count(p, header_size, record_size, "shuffle")
            ds.srcs.append(Source(p, header_size, header_size + n * record_size, n))
        ds.rs, ds.dtype, ds.shape = int(record_size), np.dtype(np.uint8), (int(record_size),)
    return ds


class _Discard:
    """Sidecar-writer stand-in for a LIBSVM check: the scanner's record starts are not kept."""

    def append(self, arr) -> None:
        pass


def libsvm_checker(piece: int, pool=None) -> VarScanner:
    """A scanner whose ``scan_region`` raises DataError (file, line, byte) at the first line
    ``load_svmlight_file`` would refuse, keeping nothing; ``piece``: bytes scanned at a time."""
    return VarScanner("libsvm", _Discard(), None, piece, None, pool)


def check_head(path: str) -> None:
    """DataError at the first bad line among the complete lines of the first ``_HEAD_CHECK``
    bytes of the LIBSVM input ``path`` (a shorter file: all its lines; a first line longer than
    that: its tokens up to the last blank in it, its label at least): a file of another format
    (binary, CSV) named ``.svm`` stops the shuffle before pass 1, not after being dealt as lines.
    (``--index`` checks every line; the rest are copied byte for byte.)"""
    raw = read_at(path, _HEAD_CHECK)
    head = np.frombuffer(raw, np.uint8)
    end = KS.rfind_byte(head, 0, head.size, 10) + 1
    if len(raw) < _HEAD_CHECK and end < len(raw):  # the whole file: its last line too
        end = len(raw)
    elif end == 0 and raw:  # one line longer than the head (a binary file has none): its tokens to its last blank
        cut = max(KS.rfind_byte(head, 0, head.size, c) for c in b" \t\v\f\r")  # what the grammar splits tokens on
        end = cut if cut > 0 else len(raw)
    if end > 0 and head[end - 1] != 10:  # a line cut there: ended as pass 1 ends an input's last line
        head, end = np.frombuffer(raw[:end] + b"\n", np.uint8), end + 1
    if end > 0:
        libsvm_checker(end).scan_region(path, head, 0, end, 0)


def _npy_sources(ds: Dataset, numbers: bool = False) -> None:
    """Rows of every .npy input (one dtype and row shape) and the labels beside them (``numbers``:
    as an index takes them, one number a record)."""
    for p in ds.files:
        h, r, n, dt, shp = npy_layout(p)
        if ds.dtype is not None and (dt != ds.dtype or shp != ds.shape):
            raise DataError(f"{p}: record layout {dt}{shp} differs from the dataset's first file "
                            f"({ds.dtype}{ds.shape})")
        ds.rs, ds.dtype, ds.shape = r, dt, shp
        if n == 0:
            raise DataError(f"{p}: no records")
        ds.srcs.append(Source(p, h, h + n * r, n, labels_for_npy(p, n, numbers=numbers)))
    ds.linfo = _label_info(ds.srcs)


def _label_info(srcs: list) -> tuple | None:
    """(dtype, shape, bytes) of one record's labels when every input has labels of one layout; None
    (and a warning when only some have labels) otherwise."""
    labs = [s.labels for s in srcs]
    if all(lab is None for lab in labs):
        return None
    if any(lab is None for lab in labs):
        missing = next(s.path for s in srcs if s.labels is None)
        warnings.warn(f"{missing}: no labels file beside it while other inputs have one; "
                      "the output gets no labels")
        for s in srcs:
            s.labels = None
        return None
    l0 = labs[0]
    for s in srcs[1:]:
        if s.labels.dtype != l0.dtype or s.labels.shape[1:] != l0.shape[1:]:
            raise DataError(f"{s.path}: labels {s.labels.dtype}{s.labels.shape[1:]} differ from "
                            f"the first file's ({l0.dtype}{l0.shape[1:]})")
    return (l0.dtype, tuple(l0.shape[1:]), int(l0.dtype.itemsize * int(np.prod(l0.shape[1:], dtype=np.int64))))


def npy_header(dtype, shape) -> bytes:
    """The .npy header of a C-order array (:func:`lirs.npyformat.header_bytes`)."""
    return header_bytes(dtype, shape)