"""`lirs index`: build the offset table of a dataset in one sequential, chunked scan.

Memory stays O(chunk): record offsets stream into the sidecar's temp file as they are found, labels
into a scratch file that is compacted (unique values + smallest code dtype) at the end.
Chunks are read with O_DIRECT, two ahead, 16 pieces of 1 MiB in flight (lirs.inputs.read_chunks),
while the numba kernel (which releases the GIL) scans the previous one on every core: no page-cache
copy or reclaim takes CPU from the scan, also on files larger than RAM. Where O_DIRECT is refused
the chunks come through the page cache.
"""
from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .svmlight import TokenError, line_number, line_tokens, parse_tokens
from .cores import usable_cores
from .errors import DataError, UsageError
from .content import BlockSums, block_count
from .inputs import SUM_TAPS, expand_paths, file_chunks, resolve_format
from .index import VARIABLE_FORMATS, Index, encode_labels, header_for, open_index, write_index
from .sidecar import SidecarWriter, fingerprint, sidecar_path
from .tfrecord import TFRecordScanner
from .kernels import scan as K

log = logging.getLogger("lirs.index")

# --------------------------------------------------------------------------- variable formats


def _line_of(path: str, offset: int) -> int:
    """1-based line number of byte ``offset`` of ``path`` (error path only)."""
    line = line_number(path, offset)
    return 1 if line is None else line



_CORES = usable_cores()
_MIN_PART = 4 << 20  # bytes of a region below which splitting it costs more than it saves


def _split_lines(buf, lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """buf[lo:hi] (complete lines) cut into ``parts`` spans of about equal size at line ends."""
    cuts, a = [], lo
    for q in range(1, parts):
        m = K.find_byte(buf, max(a, lo + (hi - lo) * q // parts), hi, 10)
        if m < 0 or m >= hi - 1:
            break
        cuts.append((a, m + 1))
        a = m + 1
    cuts.append((a, hi))
    return cuts


class VarScanner:
    """Scan state of one dataset in a text format; files are scanned one after another."""

    def __init__(self, fmt: str, writer: SidecarWriter, labels_file, chunk_bytes: int, bar, pool):
        self.fmt = fmt
        self.w = writer
        self.labels_file = labels_file
        self.chunk_bytes = chunk_bytes
        self.bar = bar
        # [min feature index, max feature index, unused, qid lines] (kernels keep [0], [1], [3] running)
        self.stats = np.array([np.iinfo(np.int64).max, -1, 0, 0], np.int64)
        self._qid = 0
        self.n = 0
        self.distinct: set | None = set()
        self._out = [None] * _CORES
        self._pool = pool
        # lines of the current file before the next region; None: regions do not come in file
        # order from its start (callers other than scan_file), so errors count lines in the file
        self._line_base: int | None = None

    def _arrays(self, slot: int, cap: int):
        """Reusable output arrays; untouched pages of np.empty cost no memory."""
        a = self._out[slot]
        if a is None or a[0].size < cap:
            # a `lines` record can be one byte (an empty line), a LIBSVM record needs two ("1\n")
            per = 1 if self.fmt == "lines" else 2
            cap = max(cap, self.chunk_bytes // per + 2)
            a = (np.empty(cap, np.int64), np.empty(cap, np.float64), np.empty(cap, np.uint8))
            self._out[slot] = a
        return a

    def _kernel(self, slot, buf, lo, hi, base):
        """Scan buf[lo:hi] (complete lines) into output slot ``slot``; runs on the pool (nogil)."""
        starts, labels, needs = self._arrays(slot, (hi - lo) // (1 if self.fmt == "lines" else 2) + 2)
        if self.fmt == "lines":
            return K.lines_scan(buf, lo, hi, base, starts), 0, None
        stats = self.stats.copy()
        stats[3] = 0
        k, nl = K.libsvm_validate(buf, lo, hi, base, starts, labels, needs, K._POW10, stats)
        return k, nl, stats

    def _region(self, path, buf, lo, hi, base):
        """Scan buf[lo:hi], complete lines at file offset ``base``; raise DataError at the first
        line that ``load_svmlight_file`` would refuse."""
        if hi <= lo:
            return
        parts = _split_lines(buf, lo, hi, min(_CORES, max(1, (hi - lo) // _MIN_PART)))
        if len(parts) == 1:
            results = [self._kernel(0, buf, lo, hi, base)]
        else:  # one part per core: the kernels release the GIL
            futs = [self._pool.submit(self._kernel, s, buf, a, b, base) for s, (a, b) in enumerate(parts)]
            results = [f.result() for f in futs]
        for slot, ((a, b), (k, nl, stats)) in enumerate(zip(parts, results)):
            self._emit(path, buf, a, b, base, slot, k, stats)
            if self._line_base is not None:
                self._line_base += nl

    def _fail(self, path, buf, lo, base, pos, message):
        """Raise the DataError of the byte buf[pos]: file, line, byte, message (one line)."""
        off = base + pos
        if self._line_base is not None:  # lines before this region are counted as we go
            line = self._line_base + K.count_byte(buf, lo, pos, 10) + 1
        else:
            line = _line_of(path, off)
        raise DataError(f"{path}: line {line}, byte {off}: {message}")

    def _check_line(self, path, buf, lo, hi, base, s):
        """Check the line at buf[s:] with sklearn's rules (Python ``int``/``float``).

        Returns (label float64, has qid, smallest index or -1, largest index or -1); raises
        DataError naming the line and the offending token."""
        e = K.find_byte(buf, s, hi, 10)
        line = bytes(buf[s:hi if e < 0 else e])
        toks = line_tokens(line)
        try:
            label, qid, cols, _ = parse_tokens(toks, values=False)
        except TokenError as e:
            err = e
        else:
            return label, qid is not None, (cols[0] if cols else -1), (cols[-1] if cols else -1)
        msg = err.message
        tok = line[err.at:].split(None, 1)
        if tok and b"\0" in tok[0]:
            msg += " (a NUL byte: binary data in a text file?)"
        elif b"\r" in line.rstrip(b"\r\t \x0b\x0c"):
            msg += " (a CR inside the line: CR-only line ends? LIBSVM lines end with \\n)"
        self._fail(path, buf, lo, base, s + err.at, msg)

    def _emit(self, path, buf, lo, hi, base, slot, k, stats):
        starts, labels, needs = self._out[slot]
        if self.fmt == "lines":
            self.w.append(starts[:k])
            self.n += k
            return
        labels = labels[:k]
        # lines outside the kernel's fast grammar (rare): Python checks them, in file order, so the
        # first line sklearn would refuse is the one reported
        for j in np.flatnonzero(needs[:k]):
            s = int(starts[j] - base)
            if needs[j] == K.LABEL_FLOAT:
                p = s
                while buf[p] in (32, 9, 11, 12, 13):
                    p += 1
                q = p
                while q < hi and buf[q] not in (32, 9, 10, 11, 12, 13, 35):
                    q += 1
                try:
                    labels[j] = float(bytes(buf[p:q]))
                    continue
                except ValueError:
                    pass  # the full check below names the error
            label, qid, first, last = self._check_line(path, buf, lo, hi, base, s)
            if needs[j] == K.LABEL_FLOAT:
                raise AssertionError(f"{path}: byte {base + s}: float() refused the label but the line checks")
            labels[j] = label
            stats[3] += qid
            if last >= 0:
                stats[0] = min(stats[0], first)
                stats[1] = max(stats[1], last)
        self.stats[0] = min(self.stats[0], stats[0])
        self.stats[1] = max(self.stats[1], stats[1])
        self._qid += int(stats[3])
        self.w.append(starts[:k])
        if self.labels_file is not None:
            self.labels_file.write(labels.tobytes())
            if self.distinct is not None:
                self.distinct.update(np.unique(labels).tolist())
                if len(self.distinct) > 65535:
                    self.distinct = None
        self.n += k

    def scan_file(self, path: str) -> tuple[int, int, int]:
        """Scan one file; returns (records, first record offset, data end)."""
        self._path = path
        self._line_base = 0
        n0 = self.n
        size = os.path.getsize(path)
        if size == 0:
            raise DataError(f"{path}: empty file (0 bytes); nothing to index")
        carry = np.empty(0, np.uint8)
        carry_base = 0
        for buf, nb, base in file_chunks(path, self.chunk_bytes, direct=True):
            lo = 0
            if carry.size:
                f = K.find_byte(buf, 0, nb, 10)
                if f < 0:
                    carry = np.concatenate([carry, buf[:nb]])
                    self.bar.update(nb)
                    continue
                joined = np.concatenate([carry, buf[:f + 1]])
                self._region(path, joined, 0, joined.size, carry_base)
                lo = f + 1
            last = K.rfind_byte(buf, lo, nb, 10)
            if last < 0:
                carry = buf[lo:nb].copy()
                carry_base = base + lo
            else:
                self._region(path, buf, lo, last + 1, base)
                carry = buf[last + 1:nb].copy()
                carry_base = base + last + 1
            self.bar.update(nb)
        if carry.size:  # last line without a trailing newline: still a record
            self._region(path, carry, 0, carry.size, carry_base)
        self._line_base = None
        count = self.n - n0
        if count == 0:
            raise DataError(f"{path}: no records found ({size} bytes of blank or comment lines)")
        return count, -1, size


_CSV_EXT = (".csv", ".tsv")


def _numeric(field: bytes) -> bool:
    try:
        float(field.strip().strip(b'"') or b"0")
        return True
    except ValueError:
        return False


def refuse_csv_header(path: str) -> None:
    """Raise DataError when the first line of the CSV/TSV file ``path`` is a header (a field that is
    not a number where the second line has one, or a one-line file of words): lirs delivers every
    line as a record, and a header would silently become a training record."""
    if os.path.splitext(path)[1].lower() not in _CSV_EXT:
        return
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    lines = head.split(b"\n", 2)
    sep = b"\t" if path.lower().endswith(".tsv") else b","
    first = lines[0].rstrip(b"\r").split(sep)
    second = lines[1].rstrip(b"\r").split(sep) if len(lines) > 1 and lines[1].strip() else None
    if second is None:
        header = not any(_numeric(x) for x in first)
    else:
        header = any(not _numeric(a) and _numeric(b) for a, b in zip(first, second))
    if header:
        shown = lines[0][:60].decode("utf-8", "replace")
        raise DataError(f"{path}: line 1, byte 0: expected a record, got what looks like a CSV header "
                        f"({shown!r}); lirs delivers every line as a record: remove the header "
                        f"(e.g. `tail -n +2 {os.path.basename(path)} > data.csv`) and index that file")


def _summed(scan, path: str):
    """``scan`` (a scanner's ``scan_file``) of ``path`` with the checksums of every byte it reads
    (uint32 per MiB, lirs.content) appended to the list ``sums``: the scan reads the file whole."""
    def run(p, sums):
        acc = SUM_TAPS[p] = BlockSums()
        try:
            out = scan(p)
        finally:
            SUM_TAPS.pop(p, None)
        got = acc.finish()
        if len(got) != block_count(os.path.getsize(p)):
            raise DataError(f"{p}: file changed while it was being indexed; run `lirs index` again")
        sums.append(got)
        return out
    return run


class Tap:
    """Sidecar-writer proxy: streams record starts to the sidecar and accumulates their size
    statistics as they pass (record i ends where record i+1 starts, a file's last record at its
    data end: :meth:`finish`), so the table is never read back to measure them."""

    def __init__(self, w):
        self.w = w
        self.n = 0
        self.prev = -1
        self.st = np.array([np.inf, 0.0, 0.0, 0.0, 0.0])

    def append(self, starts) -> None:
        """Stream ``starts`` (int64 (k,), increasing record starts in the output) to the sidecar."""
        starts = np.asarray(starts, np.int64)
        if starts.size == 0:
            return
        self.w.append(starts)
        if self.prev >= 0:
            K.span_stats(np.array([self.prev], np.int64), int(starts[0]), self.st)
        K.span_stats(starts[:-1], int(starts[-1]), self.st)
        self.prev = int(starts[-1])
        self.n += int(starts.size)

    def finish(self, data_end: int) -> None:
        """Count the last record, which ends at ``data_end``."""
        if self.prev >= 0:
            K.span_stats(np.array([self.prev], np.int64), int(data_end), self.st)
            self.prev = -1


_LABEL_STEP = 1 << 22  # labels converted per step (32 MiB of float64)


def _write_labels(w: SidecarWriter, lab_tmp, n: int, distinct, pool, step: int = _LABEL_STEP) -> None:
    """Write the ``n`` float64 labels of the scratch file ``lab_tmp`` to the sidecar: as codes into
    the sorted ``distinct`` values (uint8/uint16), or whole when ``distinct`` is None (too many).
    Steps of ``step`` labels are converted on ``pool`` (None: this thread), one per core at a time
    (searchsorted releases the GIL; memory stays a few steps), and written in order."""
    lab_tmp.flush()
    labels = np.memmap(lab_tmp, dtype=np.float64, mode="r", shape=(n,))
    steps = range(0, n, step)
    if distinct is not None:
        values = np.unique(np.array(list(distinct), np.float64))  # one NaN at the end
        dt = np.uint8 if len(values) <= 256 else np.uint16
        w.add("label_values", values)
        w.begin("label_codes", dt)
        code = lambda c0: np.searchsorted(values, labels[c0:c0 + step]).astype(dt)  # noqa: E731
        run = map if pool is None else pool.map
        for g in range(0, len(steps), _CORES):
            for codes in run(code, steps[g:g + _CORES]):
                w.append(codes)
    else:
        w.begin("label_values", np.float64)
        for c0 in steps:
            w.append(np.asarray(labels[c0:c0 + step]))
    w._open = None
    del labels


def _build_variable(files, fmt, dest, chunk_bytes, progress):
    from tqdm import tqdm

    total = sum(os.path.getsize(p) for p in files)
    w = SidecarWriter(dest)
    lab_tmp = None
    try:
        if fmt == "libsvm":
            lab_tmp = tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(dest)))
        with tqdm(total=total, unit="B", unit_scale=True, desc="lirs index",
                  disable=(None if progress is None else not progress), leave=False) as bar, \
                ThreadPoolExecutor(_CORES) as pool:
            tap = Tap(w)
            scanner = TFRecordScanner if fmt == "tfrecord" else VarScanner
            sc = scanner(fmt, tap, lab_tmp, chunk_bytes, bar, pool)
            w.begin("offsets", np.int64)
            file_starts = [0]
            data_ends = []
            fps, sums = [], []
            featureless = 0  # LIBSVM files without any feature (sklearn's "auto" then reads zero-based)
            for p in files:
                fp0 = fingerprint(p)
                if fmt == "lines":
                    refuse_csv_header(p)
                lo_hi = sc.stats[:2].copy()
                sc.stats[:2] = (np.iinfo(np.int64).max, -1)  # this file's own range
                _, _, end = _summed(sc.scan_file, p)(p, sums)
                featureless += int(sc.stats[1] < 0)
                sc.stats[0], sc.stats[1] = min(lo_hi[0], sc.stats[0]), max(lo_hi[1], sc.stats[1])
                tap.finish(end)
                fps.append(fp0)
                file_starts.append(sc.n)
                data_ends.append(end)
            w._open = None
            n = sc.n
            # first record offset of each file, read back from the streamed table
            offs = w.offsets_view()
            headers = [int(offs[a]) for a in file_starts[:-1]]
            del offs
            w.add("file_starts", np.asarray(file_starts, np.int64))
            w.add("data_ends", np.asarray(data_ends, np.int64))
            w.add("header_sizes", np.asarray(headers, np.int64))
            st = tap.st
            meta = {
                "record_bytes_min": int(st[0]), "record_bytes_max": int(st[1]),
                "record_bytes_mean": float(st[2] / n), "records_under_4k": int(st[3]),
                "records_straddling_4k": int(st[4]),
            }
            if fmt == "libsvm":
                # load_svmlight_files(zero_based="auto") is one-based only if *every* file has a
                # feature and its smallest index is above 0: a featureless file makes it zero-based
                meta.update(min_index=int(sc.stats[0]) if sc.stats[1] >= 0 and not featureless else 0,
                            max_index=int(sc.stats[1]) if sc.stats[1] >= 0 else -1,
                            qid_records=sc._qid)
                _write_labels(w, lab_tmp, n, sc.distinct, pool)
            w.add("content_sums", np.concatenate(sums))
        shell = Index(format=fmt, paths=tuple(files), n=n, file_starts=np.asarray(file_starts, np.int64),
                      data_ends=np.asarray(data_ends, np.int64), header_sizes=np.asarray(headers, np.int64),
                      fingerprints=tuple(fps), meta=meta)
        # a file modified while we scanned it would leave a wrong index: compare fingerprints again
        for p, fp in zip(files, fps):
            if fingerprint(p) != fp:
                raise DataError(f"{p}: file changed while it was being indexed; run `lirs index` again")
        return w.commit(header_for(shell, dest))
    except BaseException:
        w.abort()
        raise
    finally:
        if lab_tmp is not None:
            lab_tmp.close()


# --------------------------------------------------------------------------- fixed formats


def npy_layout(path: str):
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except ValueError as e:
            raise DataError(f"{path}: byte 0: not a valid .npy file ({e})") from None
        header = f.tell()
    if dtype.hasobject:
        raise DataError(f"{path}: .npy holds Python objects; only plain numeric records can be read directly")
    if len(shape) == 0:
        raise DataError(f"{path}: .npy holds a scalar; expected an array of records (shape (n, ...))")
    if fortran and len(shape) > 1:
        raise DataError(f"{path}: .npy is in Fortran order, so a record is not contiguous; "
                        "save it C-ordered (np.ascontiguousarray)")
    rs = int(dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
    n = int(shape[0])
    size = os.path.getsize(path)
    if header + n * rs > size:
        raise DataError(f"{path}: truncated .npy: header promises {n} records of {rs} bytes "
                        f"({header + n * rs} bytes), file has {size}")
    return header, rs, n, dtype, tuple(int(s) for s in shape[1:])


def labels_for_npy(path: str):
    """The labels beside ``X.npy`` (``X.labels.npy`` or ``X.npy.labels.npy``), memory-mapped where
    the filesystem allows it (read into memory where it cannot map: ENODEV on some FUSE and network
    filesystems); None when there are none."""
    for cand in (path[:-4] + ".labels.npy" if path.endswith(".npy") else None, path + ".labels.npy"):
        if cand and os.path.exists(cand):
            try:
                return np.load(cand, mmap_mode="r")
            except OSError as e:
                if e.errno not in (errno.ENODEV, errno.EINVAL, errno.EACCES, errno.ENOTSUP):
                    raise
                return np.load(cand)
    return None


def raw_fixed_count(path: str, header_size: int, record_size: int, doing: str = "index") -> int:
    """Records in a raw fixed-size file: ``(size - header) / record_size``, which must divide exactly.

    Raises DataError naming the file and the byte where the trailing partial record starts."""
    size = os.path.getsize(path)
    h = header_size
    if size <= h:
        raise DataError(f"{path}: empty file after the {h}-byte header; nothing to {doing}")
    n, rem = divmod(size - h, record_size)
    if rem:
        raise DataError(f"{path}: byte {h + n * record_size}: {rem} trailing bytes; file size {size} "
                        f"minus header {h} is not a multiple of --record-size {record_size}")
    return n


def _build_fixed(files, fmt, dest, record_size, header_size):
    headers, counts, labels = [], [], []
    dtype = shape = None
    rs = record_size
    for p in files:
        if fmt == "npy":
            h, r, n, dt, shp = npy_layout(p)
            if rs is not None and r != rs or dtype is not None and (dt != dtype or shp != shape):
                raise DataError(f"{p}: record layout {dt}{shp} differs from the dataset's first file "
                                f"({dtype}{shape})")
            rs, dtype, shape = r, dt, shp
            lab = labels_for_npy(p)
            if lab is not None and len(lab) != n:
                raise DataError(f"{p}: labels file has {len(lab)} entries, data has {n} records")
            labels.append(lab)
        else:
            if not record_size or record_size <= 0:
                raise UsageError("--format fixed needs --record-size N (bytes per record)")
            h = header_size
            n = raw_fixed_count(p, h, record_size, "index")
        if n == 0:
            raise DataError(f"{p}: no records")
        headers.append(h)
        counts.append(n)
    fs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = Index.from_arrays(files, fmt, file_starts=fs, header_sizes=headers, record_size=rs,
                            record_dtype=dtype if fmt == "npy" else None,
                            record_shape=shape if fmt == "npy" else None)
    if labels and all(lab is not None for lab in labels):
        idx.label_values, idx.label_codes = encode_labels(np.concatenate([np.asarray(x) for x in labels]))
    idx.meta = {"record_bytes_min": rs, "record_bytes_max": rs, "record_bytes_mean": float(rs),
                "records_under_4k": int(idx.n if rs < 4096 else 0),
                "records_straddling_4k": int(_count_straddling(idx))}
    return write_index(idx, dest)


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


def build(paths, format="auto", *, record_size=None, header_size=0, out=None, progress=None,
          chunk_bytes=16 << 20) -> Index:
    """Index ``paths`` and write the sidecar atomically; return the opened :class:`Index`."""
    files = expand_paths(paths)
    format, why = resolve_format(files, format, record_size)
    log.info("format: %s (%s)", format, why)
    if out is None:
        if isinstance(paths, (str, os.PathLike)):
            out = sidecar_path(paths)
        elif len(paths) == 1:
            out = sidecar_path(paths[0])
        else:
            raise UsageError("several data files form one dataset: name its sidecar with -o NAME.lirs")
    if not out.endswith(".lirs"):
        raise UsageError(f"sidecar name must end in .lirs: {out}")
    t0 = time.perf_counter()
    if format in VARIABLE_FORMATS:
        chunk_bytes = max(int(chunk_bytes), 1)
        dest = _build_variable(files, format, out, chunk_bytes, progress)
    else:
        dest = _build_fixed(files, format, out, record_size, header_size)
    log.info("indexed %d file(s) as %s in %.2fs -> %s", len(files), format, time.perf_counter() - t0, dest)
    return open_index(dest)


def build_index(paths, format: str = "auto", *, record_size: int | None = None, header_size: int = 0,
                out: str | None = None, progress: bool | None = None, chunk_bytes: int = 16 << 20) -> Index:
    """Scan ``paths`` (a file, a directory, or several files) and write the sidecar.

    Returns the opened :class:`Index`. See this module's docstring for the formats.
    """
    return build(paths, format=format, record_size=record_size, header_size=header_size, out=out,
                 progress=progress, chunk_bytes=chunk_bytes)
