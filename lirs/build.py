"""`lirs index`: build the offset table of a dataset in one sequential, chunked scan.

Memory stays O(chunk): record offsets stream into the sidecar's temp file as they are found, labels
into a scratch file that is compacted (unique values + smallest code dtype) at the end.
Chunks are read with O_DIRECT, two ahead, 16 pieces of 1 MiB in flight (lirs.inputs.read_chunks),
while the numba kernel (which releases the GIL) scans the previous one on every core: no page-cache
copy or reclaim takes CPU from the scan, also on files larger than RAM. Where O_DIRECT is refused,
or the file is in the page cache already (just written or appended to), the chunks come through
the page cache.
"""
from __future__ import annotations

import io
import logging
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .api import positive_int, whole
from .constants import BLOCK
from .errors import DataError, UsageError
from .incremental import Unconfirmed, confirm, guessed_wrong, plan_update, scan_one, settle
from .inputs import absolute, expand_paths, labels_candidates, resolve_format, text_paths
from .index import VARIABLE_FORMATS, Index, data_sums, header_for, open_index, write_index
from .labelcodes import encode_label_parts
from .npyformat import NpyRows, npy_header
from .freshness import fingerprint, label_entries
from .relpaths import relpath
from .sidecar import SidecarWriter, check_replaceable, sidecar_path
from .tfrecord import TFRecordScanner
from .litter import named, out_dir
from .scanner import SCAN_CORES, Tap, VarScanner, write_labels  # noqa: F401 - re-exported
from .textguess import refuse_misread
from .units import parse_size

log = logging.getLogger("lirs.index")

def _unchanged(path: str, fp0) -> None:
    """DataError when ``path`` no longer has the fingerprint ``fp0`` it had as its scan began."""
    if fingerprint(path) != fp0:
        raise DataError(f"{path}: file changed while it was being indexed (still being written?); run "
                        "`lirs index` again once it is complete")


class _Scratch(io.BufferedRandom):
    """An anonymous scratch file whose failed writes (ENOSPC, EDQUOT, EIO: they carry no name, the
    file has none) name ``what`` it is instead of printing a bare "No space left on device"."""

    what = ""

    def write(self, b) -> int:
        try:
            return super().write(b)
        except OSError as e:
            raise named(e, self.what) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as e:
            raise named(e, self.what) from None


def labels_scratch(dirpath: str):
    """An anonymous temporary file in ``dirpath`` for a scan's float64 labels (read back by
    :func:`write_labels`); an OSError of its writes names it and ``dirpath``."""
    f = _Scratch(tempfile.TemporaryFile(dir=dirpath, buffering=0))  # noqa: SIM115 - closed by the caller
    f.what = f"{dirpath} (the index's temporary labels file there)"
    return f


def _build_variable(files, fmt, dest, chunk_bytes, progress, plan=None, where=None, guessed=True, names=None):
    """Scan ``files`` (whole, or per ``plan``: a :class:`lirs.incremental.Keep` or None per file)
    into the sidecar ``dest``; returns its path. ``guessed``: the format was detected, so a lines
    file that would be misread (a CSV header, a JSON document over lines) is refused (not when the
    format was given: the user said every line is a record)."""
    from .units import progress_bar

    total = sum(os.path.getsize(p) for p in files)
    w = SidecarWriter(dest)
    lab_tmp = None
    try:
        if fmt == "libsvm":
            lab_tmp = labels_scratch(os.path.dirname(absolute(dest)))
        with progress_bar(total, "lirs index", progress) as bar, ThreadPoolExecutor(SCAN_CORES) as pool:
            tap = Tap(w)
            scanner = TFRecordScanner if fmt == "tfrecord" else VarScanner
            sc = scanner(fmt, tap, lab_tmp, chunk_bytes, bar, pool)
            if fmt == "libsvm":
                sc.marks = []  # the state at every MiB: what an incremental index restarts from
                sc.kept_labels = []  # runs of an old index's labels kept (incremental)
            w.begin("offsets", np.int64)
            file_starts = [0]
            data_ends = []
            fps, sums = [], []
            featureless = 0  # LIBSVM files without any feature (sklearn's "auto" then reads zero-based)
            for p, keep in zip(files, plan or [None] * len(files)):
                fp0 = fingerprint(p)
                if keep is not None and keep.seen != (fp0["size"], fp0["mtime_ns"]):  # changed since planned: again
                    raise Unconfirmed(p)
                if fmt == "lines" and guessed:
                    refuse_misread(p)
                lo_hi, n0 = sc.stats[:2].copy(), sc.n
                try:
                    end = scan_one(sc, tap, lab_tmp, p, keep, sums, bar)
                except DataError:
                    _unchanged(p, fp0)  # a file being written ends mid-record: say so, not "bad data"
                    raise
                # a file of no records (comment lines only) is as if absent, as an empty file is
                featureless += int(sc.stats[1] < 0 and sc.n > n0)
                sc.stats[0], sc.stats[1] = min(lo_hi[0], sc.stats[0]), max(lo_hi[1], sc.stats[1])
                tap.finish(end)
                fps.append(fp0)
                file_starts.append(sc.n)
                data_ends.append(end)
            w.end()
            n = sc.n
            if n == 0:
                raise DataError(f"{files[0]}: no records found ({data_ends[0]} bytes of blank or comment lines)"
                                if len(files) == 1 else
                                f"no records in any of the {len(files)} files ({files[0]} ...: only blank or "
                                "comment lines); expected a dataset of one record at least")
            # first record offset of each file, read back from the streamed table (a file of no
            # records: its data end, where its records would start)
            offs = w.offsets_view()
            headers = [int(offs[a]) if a < b else e for a, b, e in zip(file_starts, file_starts[1:], data_ends)]
            del offs
            w.add("file_starts", np.asarray(file_starts, np.int64))
            w.add("data_ends", np.asarray(data_ends, np.int64))
            w.add("header_sizes", np.asarray(headers, np.int64))
            st = tap.st
            meta = {
                **(where or {}), "record_bytes_min": int(st[0]), "record_bytes_max": int(st[1]),
                "record_bytes_mean": float(st[2] / n), "records_under_4k": int(st[3]),
                "records_straddling_4k": int(st[4]),
            }
            if fmt == "libsvm":
                # load_svmlight_files(zero_based="auto") is one-based only if *every* file has a
                # feature and its smallest index is above 0: a featureless file makes it zero-based.
                # least_index is the smallest index written: zero_based=False refuses only a real 0
                meta.update(min_index=int(sc.stats[0]) if sc.stats[1] >= 0 and not featureless else 0,
                            least_index=int(sc.stats[0]) if sc.stats[1] >= 0 else 0,
                            max_index=int(sc.stats[1]) if sc.stats[1] >= 0 else -1,
                            qid_records=sc.qid_count)
                write_labels(w, lab_tmp, n, sc.distinct, pool, kept=sc.kept_labels)
            w.add("content_sums", np.concatenate(sums))
            if getattr(sc, "marks", None) is not None:
                w.add("scan_marks", np.asarray(sc.marks, np.int64).reshape(-1))
        # names: (data, sidecar) the files read and written will be renamed to (shuffle's outputs)
        shell = Index(format=fmt, paths=tuple(files) if names is None else (names[0],), n=n,
                      file_starts=np.asarray(file_starts, np.int64),
                      data_ends=np.asarray(data_ends, np.int64), header_sizes=np.asarray(headers, np.int64),
                      fingerprints=tuple(fps), meta=meta)
        # a file modified while we scanned it would leave a wrong index: compare fingerprints again
        for p, fp in zip(files, fps):
            _unchanged(p, fp)
        w.seal(header_for(shell, dest if names is None else names[1]))
        confirm(plan)  # what was kept as unchanged was: checked before the sidecar takes its name
        return w.publish()
    except BaseException as e:
        settle(plan, cancel=not isinstance(e, Exception))  # an error: build() asks the checks' answer
        w.abort()
        raise
    finally:
        if lab_tmp is not None:
            lab_tmp.close()


def index_before_rename(tmp: str, fmt: str, dest: str, final: str, sidecar: str, format_given) -> str:
    """Index the finished TFRecord or text file ``tmp`` into ``dest``: the sidecar ``sidecar`` of
    ``final`` that ``lirs index`` writes once both are renamed there (a rename keeps the
    fingerprint); ``format_given`` as :func:`index_meta`'s. Returns ``dest``."""
    chunk = min(16 << 20, -(-os.path.getsize(tmp) // BLOCK) * BLOCK or BLOCK)
    return _build_variable([tmp], fmt, dest, chunk, False, where=index_meta(final, sidecar, format_given),
                           guessed=False, names=(final, sidecar))


# --------------------------------------------------------------------------- fixed formats


def npy_layout(path: str):
    """(header bytes, record bytes, records, dtype, record shape) of the ``.npy`` file ``path``;
    DataError naming it for a header lirs cannot read records by (or one that promises more bytes
    than the file has)."""
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0), (3, 0)):  # 3.0: 2.0's layout, a UTF-8 header
                raise ValueError(f"format version {version[0]}.{version[1]}; expected 1.0, 2.0 or 3.0")
            shape, fortran, dtype = npy_header(f, version)
        except (ValueError, EOFError) as e:
            raise DataError(f"{path}: byte 0: not a valid .npy file ({e})") from None
        header = f.tell()
    if dtype.hasobject:
        raise DataError(f"{path}: .npy holds Python objects; only plain numeric records can be read directly")
    if len(shape) == 0:
        raise DataError(f"{path}: .npy holds a scalar; expected an array of records (shape (n, ...))")
    if any(int(s) < 0 for s in shape):
        raise DataError(f"{path}: .npy header has a negative dimension (shape {tuple(shape)}); expected sizes >= 0")
    if fortran and len(shape) > 1:
        raise DataError(f"{path}: .npy is in Fortran order, so a record is not contiguous; "
                        "save it C-ordered (np.ascontiguousarray)")
    rs = dtype.itemsize * math.prod(int(s) for s in shape[1:])  # Python ints: a huge shape must not wrap
    n = int(shape[0])
    if rs == 0:
        raise DataError(f"{path}: .npy records hold no bytes (shape {tuple(shape)}, dtype {dtype}); expected "
                        "records of at least one value")
    size = os.path.getsize(path)
    if rs > size:
        raise DataError(f"{path}: .npy header promises records of {rs} bytes (shape {tuple(shape)}, dtype {dtype}), "
                        f"more than the file's {size} bytes; expected records that fit in the file")
    if header + n * rs > size:
        raise DataError(f"{path}: truncated .npy: header promises {n} records of {rs} bytes "
                        f"({header + n * rs} bytes), file has {size}")
    if header + n * rs < size:  # records appended without a new header would never be read
        raise DataError(f"{path}: byte {header + n * rs}: {size - header - n * rs} bytes after the {n} records of "
                        f"{rs} bytes the .npy header promises; expected the file to end there (save it again)")
    return header, rs, n, dtype, tuple(int(s) for s in shape[1:])


def npy_labels_file(path: str) -> str | None:
    """The labels file beside ``X.npy``: ``X.labels.npy`` or ``X.npy.labels.npy`` (None: neither);
    DataError naming both when both exist (one is another file's, and which is not known), or
    naming a symlink there whose target is missing (an unmounted store: its records would be served
    without labels, silently), or one that is not a regular file (checked before it is opened:
    opening a FIFO waits for a writer, forever)."""
    found = [c for c in labels_candidates(path) if os.path.lexists(c)]
    for c in found:
        if not os.path.exists(c):
            raise DataError(f"{c}: the labels file of {path} is a symlink to {os.readlink(c)}, which does not exist; "
                            "expected its labels there (mount or restore them, or remove the link to index "
                            "without labels)")
        if not os.path.isfile(c):
            raise DataError(f"{c}: the labels file of {path} is not a regular file (a FIFO, device, socket or "
                            "directory); expected a .npy file of its labels (or none there, to index without labels)")
    if len(found) > 1:
        raise DataError(f"{path}: two labels files beside it, {found[0]} and {found[1]}; expected one (remove or "
                        "rename the one that is not its labels)")
    return found[0] if found else None


def labels_for_npy(path: str, n: int, *, numbers: bool = True):
    """The labels beside ``X.npy`` (``X.labels.npy`` or ``X.npy.labels.npy``) of its ``n``
    records: numbers of shape (n,) (``numbers=False``: any array of n rows), as a
    :class:`lirs.npyformat.NpyRows` read a slice at a time by pread (a memory map of a labels file
    rewritten in place meanwhile killed the process with SIGBUS); None when there are none.
    DataError naming the labels file when it is not such an array."""
    cand = npy_labels_file(path)
    if cand is None:
        return None
    try:
        lab = NpyRows(cand)
    except (ValueError, EOFError) as e:  # a corrupt header, pickled objects
        raise DataError(f"{cand}: not a .npy array of labels ({e}); expected one label a record of {path}") from None
    if lab.ndim == 0 or numbers and (lab.ndim != 1 or lab.dtype.kind not in "biuf"):
        want = f"numbers of shape ({n},)" if numbers else f"an array of {n} rows"
        raise DataError(f"{cand}: labels of shape {lab.shape}, dtype {lab.dtype}; expected {want}, one a record of {path}")
    if len(lab) != n:
        raise DataError(f"{cand}: {len(lab)} labels, but {path} has {n} records; expected one a record")
    wide = lab.dtype.kind in "iu" and lab.dtype.itemsize == 8 or lab.dtype.kind == "f" and lab.dtype.itemsize > 8
    if numbers and wide:  # labels are kept as float64: 64-bit integers and long doubles checked to fit
        for c in range(0, n, 1 << 20):  # a million at a time: no whole copy of a large labels file
            part = lab[c:c + (1 << 20)]
            with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # cast out and back: the point
                if lab.dtype.kind == "f":  # rounded as float32 features are; outside float64's range: refused
                    f8 = part.astype(np.float64)
                    bad = np.flatnonzero(np.isfinite(part) & ~np.isfinite(f8) | (part != 0) & (f8 == 0))
                else:
                    bad = np.flatnonzero(part.astype(np.float64).astype(lab.dtype) != part)
            if len(bad):
                v, at = part[bad[0]], c + int(bad[0])
                if lab.dtype.kind == "f":
                    raise DataError(f"{cand}: label {str(v)} of record {at} ({lab.dtype}) is outside float64's range "
                                    "(the labels' type in lirs): float64 would serve it as " + repr(float(f8[bad[0]]))
                                    + "; expected labels within float64's range (save them as float64)")
                raise DataError(f"{cand}: label {int(v)} of record {at} is past 2**53, where "
                                "float64 (the labels' type in lirs) does not hold every integer; expected integer "
                                "labels within +-2**53 (class ids), or keep such ids beside lirs")
    return lab


def raw_fixed_count(path: str, header_size: int, record_size: int, doing: str = "index") -> int:
    """Records in a raw fixed-size file: ``(size - header) / record_size``, which must divide exactly.

    Raises DataError naming the file and the byte where the trailing partial record starts."""
    size = os.path.getsize(path)
    h = header_size
    if size < h:
        raise DataError(f"{path}: the {h}-byte header is longer than the file ({size} bytes)")
    if size == h:
        raise DataError(f"{path}: empty file after the {h}-byte header; nothing to {doing}")
    n, rem = divmod(size - h, record_size)
    if rem:
        raise DataError(f"{path}: byte {h + n * record_size}: {rem} trailing bytes; file size {size} "
                        f"minus header {h} is not a multiple of --record-size {record_size}")
    return n


def _build_fixed(files, fmt, dest, record_size, header_size, where=None):
    """Index the fixed-size records of ``files`` (``.npy``, or raw with ``record_size``) into the
    sidecar ``dest``: every file (and labels file) is fingerprinted before its layout (and labels)
    are read, and the sidecar carries those fingerprints, so a file changed while it was indexed
    raises here, or makes the index stale at open; never a sidecar of the old layout that the
    changed file's fingerprint vouches for."""
    if fmt != "npy" and (not record_size or record_size <= 0):
        raise UsageError("--format fixed needs --record-size N (bytes per record)")
    headers, counts, labels, label_files, fps, label_fps = [], [], [], [], [], []
    dtype = shape = None
    rs = record_size
    for p in files:
        fp0, lf = fingerprint(p), None
        try:
            if fmt == "npy":
                h, r, n, dt, shp = npy_layout(p)
                if dtype is not None and (dt != dtype or shp != shape):  # a record_size was refused before
                    raise DataError(f"{p}: record layout {dt}{shp} differs from the dataset's first file "
                                    f"({dtype}{shape})")
                rs, dtype, shape = r, dt, shp
                lf = npy_labels_file(p)
                label_fps.append(None if lf is None else fingerprint(lf))
                labels.append(labels_for_npy(p, n))
                label_files.append(lf)
            else:
                h = header_size
                n = raw_fixed_count(p, h, record_size, "index")
        except DataError:  # a file being written (a partial record, a labels count behind): say so
            _unchanged(p, fp0)
            if lf is not None:
                _unchanged(lf, label_fps[-1])
            raise
        if n == 0:
            raise DataError(f"{p}: no records (a .npy array of shape {(0, *shp)}); expected at least one row"
                            if fmt == "npy" else f"{p}: no records")
        headers.append(h)
        counts.append(n)
        fps.append(fp0)
    fs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = Index.from_arrays(files, fmt, file_starts=fs, header_sizes=headers, record_size=rs,
                            record_dtype=dtype if fmt == "npy" else None,
                            record_shape=shape if fmt == "npy" else None)
    idx.meta = fixed_meta(idx, where)
    if any(lab is not None for lab in labels) and any(lab is None for lab in labels):  # all labelled or none
        have, bare = (next(p for p, f in zip(files, label_files) if (f is None) == none) for none in (False, True))
        raise DataError(f"{bare}: no labels file beside it ({labels_candidates(bare)[0]}), while {have} has one; "
                        "expected every .npy file of the dataset to have its labels, or none (its labels would be lost)")
    labelled = bool(labels) and all(lab is not None for lab in labels)
    if labelled:
        # with the fingerprints taken before the labels were read: a labels file changed since is found
        idx.meta["label_files"] = label_entries(label_files, os.path.dirname(absolute(dest)), label_fps)
        try:
            idx.label_values, idx.label_codes = encode_label_parts(labels)
        except DataError:  # cut short while read: rewritten in place
            for lf, lfp in zip(label_files, label_fps):
                _unchanged(lf, lfp)
            raise
    # the fingerprints taken before each layout was read, the checksums now: a file changed in between
    # is refused here; one changed after this check no longer matches them, and the index is stale at open
    idx.fingerprints, idx.sums = tuple(fps), data_sums(files)
    for p, fp in zip(list(files) + (label_files if labelled else []), fps + (label_fps if labelled else [])):
        _unchanged(p, fp)
    return write_index(idx, dest)


def directory_meta(paths, dest: str) -> dict:
    """``{"directories": [DIR, ...]}``: the directories among ``paths`` (relative to the sidecar
    ``dest``'s directory), whose files added later are then found at open however the index is
    opened (a directory, a sidecar named with ``-o`` elsewhere); an empty list for files alone."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    base = os.path.dirname(absolute(dest))
    return {"directories": [relpath(absolute(p), base) for p in paths if os.path.isdir(p)]}


def index_meta(paths, dest: str, format_given: str | None) -> dict:
    """What the sidecar ``dest`` of ``paths`` keeps of how it was built: the directories given
    (:func:`directory_meta`) and the format given (None: detected), which a stale index's advice
    repeats (:func:`lirs.freshness.format_options`)."""
    return {**directory_meta(paths, dest), "format_given": format_given}


def fixed_meta(idx: Index, where: dict | None) -> dict:
    """The sidecar meta of the fixed-record index ``idx``: ``where`` (:func:`index_meta`) and its
    record sizes."""
    rs = idx.record_size
    return {**(where or {}), "record_bytes_min": rs, "record_bytes_max": rs, "record_bytes_mean": float(rs),
            "records_under_4k": int(idx.n if rs < 4096 else 0), "records_straddling_4k": int(_count_straddling(idx))}


def _count_straddling(idx: Index) -> int:
    total = 0
    for f in range(idx.nfiles):
        n = int(idx.file_starts[f + 1] - idx.file_starts[f])
        for c0 in range(0, n, 1 << 24):
            s = idx.header_sizes[f] + np.arange(c0, min(n, c0 + (1 << 24)), dtype=np.int64) * idx.record_size
            e = s + idx.record_size - 1
            total += int(np.count_nonzero((s >> 12) != (e >> 12)))
    return total


# --------------------------------------------------------------------------- entry point


def check_header_size(header_size: int, fmt: str, why: str, record_size: int | None = None, files=()) -> None:
    """UsageError where a ``header_size`` or ``record_size`` is given for the ``files`` of format
    ``fmt`` (found as ``why``) other than raw fixed records: their own format gives their layout,
    and the option would be ignored (or, for .npy, compared with rows it does not describe)."""
    for option, name, value in (("--record-size", "record_size", record_size),
                                ("--header-size", "header_size", header_size)):
        if value and fmt != "fixed":
            layout = "whose layout their own format gives"
            if fmt == "npy" and name == "record_size" and files:  # the size it may have been meant as
                layout = f"whose rows are {npy_layout(files[0])[1]} bytes ({files[0]}): .npy files give their own layout"
            raise UsageError(f"{option} ({name}={value}) applies to raw fixed files (--format fixed); "
                             f"these are {fmt} ({why}), {layout}")


def build(paths, format="auto", *, record_size=None, header_size=0, out=None, progress=None,
          chunk_bytes=16 << 20, full=False) -> Index:
    """Index ``paths`` and write the sidecar atomically; return the opened :class:`Index`.
    An existing sidecar of the same files is reused where the data did not change (lirs.incremental)
    unless ``full``."""
    paths, out = text_paths(paths), None if out is None else os.fsdecode(out)
    files = expand_paths(paths)
    # as the CLI checks them: -5 wrote a sidecar no epoch could read, np.int64(5) failed in its JSON
    record_size = None if record_size is None else whole("record_size", record_size, 1)
    header_size = whole("header_size", header_size, 0)
    # "64K" as `--chunk 64K` and shuffle's memory take it; -5 or 1.5 were taken as a 1-byte chunk
    chunk_bytes = positive_int("chunk_bytes", parse_size(chunk_bytes) if isinstance(chunk_bytes, str) else chunk_bytes)
    format, why = resolve_format(files, format, record_size)
    check_header_size(header_size, format, why, record_size, files)
    log.info("format: %s (%s)", format, why)
    guessed = not why.startswith("--format")
    if out is None:
        if isinstance(paths, (str, os.PathLike)):
            out = sidecar_path(paths)
        elif len(paths) == 1:
            out = sidecar_path(paths[0])
        else:
            raise UsageError("several data files form one dataset: name its sidecar with -o NAME.lirs")
    if not out.endswith(".lirs"):
        raise UsageError(f"sidecar name must end in .lirs: {out}")
    out_dir(out, "the index", writable=False)  # a read-only directory: the error names -o (firstuse)
    check_replaceable(out)  # before the scan, and before an old index there is looked at
    where = index_meta(paths, out, None if guessed else format)
    t0 = time.perf_counter()
    if format in VARIABLE_FORMATS:
        # at most the largest file (rounded up to a block): a chunk sizes the scan's buffers
        chunk_bytes = min(chunk_bytes, -(-max(os.path.getsize(p) for p in files) // BLOCK) * BLOCK or BLOCK)
        # an append is checked while its tail is scanned, on the guess that nothing else changed;
        # when the check says otherwise (or the guessed scan failed on bytes that did change), the
        # build starts again from the exact plan
        plan = None if full else plan_update(files, format, out, speculate=True)
        try:
            dest = _build_variable(files, format, out, chunk_bytes, progress, plan, where, guessed)
        except Exception as e:
            if not (isinstance(e, Unconfirmed) or guessed_wrong(plan)):
                raise
            log.info("changed before its old end or since it was planned (%s); planning from its checksums", e)
            plan = plan_update(files, format, out)
            try:
                dest = _build_variable(files, format, out, chunk_bytes, progress, plan, where, guessed)
            except Unconfirmed as again:  # changed once more between planning and scanning
                raise DataError(f"{again}: file changed while it was being indexed (still being written?); run "
                                "`lirs index` again once it is complete") from None
    else:
        dest = _build_fixed(files, format, out, record_size, header_size, where)
    log.info("indexed %d file(s) as %s in %.2fs -> %s", len(files), format, time.perf_counter() - t0, dest)
    return open_index(dest)


def build_index(paths, format: str = "auto", *, record_size: int | None = None, header_size: int = 0,
                out: str | None = None, progress: bool | None = None, chunk_bytes: int = 16 << 20,
                full: bool = False) -> Index:
    """Scan ``paths`` (a file, a directory, or several files) and write the sidecar.

    Returns the opened :class:`Index`. See this module's docstring for the formats. Where the
    sidecar exists, only what changed is scanned again (an append: its tail; a directory: the
    files added or changed), and the sidecar written is the one a full scan writes; ``full``:
    scan everything. ``record_size`` (an int >= 1) selects raw fixed records, after a
    ``header_size``-byte header in each file (either refused for any other format); ``chunk_bytes``: the
    bytes a text or TFRecord scan reads at a time, an int >= 1 or a size like ``"64K"`` (as
    ``lirs index --chunk``; at most the largest file is used).
    """
    return build(paths, format=format, record_size=record_size, header_size=header_size, out=out,
                 progress=progress, chunk_bytes=chunk_bytes, full=full)
