"""Inputs of `lirs shuffle`: format detection, per-file record ranges and layouts; .npy headers."""
from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import DataError, UsageError
from ..index import FORMATS, VARIABLE_FORMATS

# --------------------------------------------------------------------------- inputs


@dataclass
class _Source:
    path: str
    start: int            # first record byte
    end: int              # end of the last record
    n: int = -1           # records (fixed formats; -1 when unknown)
    labels: object = None  # memmap of the .npy labels


def _sources(files, fmt, record_size, header_size):
    """Per-file record ranges and the record layout: (sources, rs, dtype, shape, label info)."""
    from ..build import labels_for_npy, npy_layout

    srcs = []
    rs = None
    dtype = shape = None
    if fmt in VARIABLE_FORMATS:
        for p in files:
            size = os.path.getsize(p)
            if size == 0:
                raise DataError(f"{p}: empty file (0 bytes); nothing to shuffle")
            srcs.append(_Source(p, 0, size))
        return srcs, None, None, None, None
    if fmt == "npy":
        for p in files:
            h, r, n, dt, shp = npy_layout(p)
            if dtype is not None and (dt != dtype or shp != shape):
                raise DataError(f"{p}: record layout {dt}{shp} differs from the dataset's first file "
                                f"({dtype}{shape})")
            rs, dtype, shape = r, dt, shp
            if n == 0:
                raise DataError(f"{p}: no records")
            lab = labels_for_npy(p)
            if lab is not None and len(lab) != n:
                raise DataError(f"{p}: labels file has {len(lab)} entries, data has {n} records")
            srcs.append(_Source(p, h, h + n * r, n, lab))
        labs = [s.labels for s in srcs]
        linfo = None
        if any(lab is not None for lab in labs):
            if not all(lab is not None for lab in labs):
                missing = [s.path for s in srcs if s.labels is None][0]
                warnings.warn(f"{missing}: no labels file beside it while other inputs have one; "
                              "the output gets no labels")
                for s in srcs:
                    s.labels = None
            else:
                l0 = labs[0]
                for s in srcs[1:]:
                    if s.labels.dtype != l0.dtype or s.labels.shape[1:] != l0.shape[1:]:
                        raise DataError(f"{s.path}: labels {s.labels.dtype}{s.labels.shape[1:]} differ from "
                                        f"the first file's ({l0.dtype}{l0.shape[1:]})")
                linfo = (l0.dtype, tuple(l0.shape[1:]),
                         int(l0.dtype.itemsize * int(np.prod(l0.shape[1:], dtype=np.int64))))
        return srcs, rs, dtype, shape, linfo
    if not record_size or record_size <= 0:
        raise UsageError("--format fixed needs --record-size N (bytes per record)")
    if header_size < 0:
        raise UsageError("--header-size must be >= 0")
    from ..build import raw_fixed_count

    for p in files:
        n = raw_fixed_count(p, header_size, record_size, "shuffle")
        srcs.append(_Source(p, header_size, header_size + n * record_size, n))
    return srcs, int(record_size), np.dtype(np.uint8), (int(record_size),), None


def _detect(files, format, record_size):
    from ..build import detect_format

    if format not in ("auto",) + FORMATS:
        raise UsageError(f"unknown format {format!r}; expected auto, {', '.join(FORMATS)}")
    if record_size is not None and format == "auto":
        format = "fixed"
    if format != "auto":
        return format
    found = {p: detect_format(p) for p in files}
    kinds = set(found.values())
    if len(kinds) > 1:
        detail = ", ".join(f"{os.path.basename(p)}: {k}" for p, k in list(found.items())[:4])
        raise DataError(f"inputs of one shuffle must share a format; found {detail}")
    return kinds.pop()


def _mean_text_record(path: str, size: int) -> float:
    """Bytes per line in the first MiB of ``path`` (the whole sample when it has no newline)."""
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    lines = head.count(b"\n")
    if lines == 0:
        return float(max(len(head), min(size, 1 << 20)))
    return len(head) / lines


def _npy_header(dtype, shape) -> bytes:
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
         "shape": tuple(int(x) for x in shape)}
    b = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(b, d)
    except ValueError:  # header too long for version 1.0
        b = io.BytesIO()
        np.lib.format.write_array_header_2_0(b, d)
    return b.getvalue()
