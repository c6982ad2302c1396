"""The scanners of `lirs index` for text formats: LIBSVM (validated line by line with sklearn's
rules) and raw lines, fed the chunks of one sequential read; the record starts stream into the
sidecar through :class:`Tap`, labels into a scratch file (:func:`write_labels`).

A LIBSVM scan also leaves marks: at every checksum block boundary of a file (lirs.content), the
feature-index range, qid count and record count of the records that start before it, so an
incremental index (lirs.incremental) restarts at a block's first record with the exact state a
full scan has there.
"""
from __future__ import annotations

import os

import numpy as np

from .content import SUM_BLOCK, block_count
from .cores import usable_cores
from .errors import DataError
from .inputs import read_chunks
from .labelcodes import label_bits, sorted_values
from .offsets import OFFSET_SHIFT
from .sidecar import SidecarWriter
from .svmlight import TokenError, line_number, line_tokens, parse_tokens
from .kernels import scan as K
from .kernels.numbers import POW10

# --------------------------------------------------------------------------- variable formats


def _unterminated_at(path: str, off: int, most: int = 1 << 20) -> bool:
    """Whether byte ``off`` of ``path`` lies on its last line and that line has no line end (a
    writer midway through it), looked for in the ``most`` bytes from ``off`` (a CR there: CR-only
    line ends, said otherwise)."""
    try:
        with open(path, "rb") as f:
            f.seek(off)
            tail = f.read(most)
    except OSError:
        return False
    return len(tail) < most and b"\n" not in tail and b"\r" not in tail


def _line_of(path: str, offset: int) -> int:
    """1-based line number of byte ``offset`` of ``path`` (error path only)."""
    line = line_number(path, offset)
    return 1 if line is None else line


def _hold(path: str, at: int, make):
    """``make()``: a copy or a join of the pieces of the line at byte ``at`` of ``path``, held whole
    while it is scanned; out of memory (a line of GiBs under ulimit -v), a DataError naming the file
    and the line, not numpy's "Unable to allocate" traceback."""
    try:
        return make()
    except MemoryError:
        raise DataError(f"{path}: byte {at}: the line there is too long to hold in memory (a line "
                        f"longer than a chunk is held whole, twice, while it is indexed): split "
                        f"it, or raise the memory limit (ulimit -v)") from None


SCAN_CORES = usable_cores()
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
        self.qid_count = 0
        self.n = 0
        # the distinct labels as bits (uint64 ints): -0.0 and 0.0, NaNs of either sign, equal as
        # floats, are labels of their own, as sklearn and the decoded batches keep them
        self.distinct: set | None = set()
        self.scratch_out = [None] * SCAN_CORES
        self.pool = pool
        # lines of the current file before the next region; None: regions do not come in file
        # order from its start (callers other than scan_file), so errors count lines in the file
        self._line_base: int | None = None
        # rows (file-local: min index, max index, qid records, records) at every checksum block
        # boundary of every file scanned (list of lists); None: not kept (set [] to keep them)
        self.marks: list | None = None
        self._next_mark = 0
        self._size = 0
        self._n0 = self._qid0 = 0

    def _arrays(self, slot: int, buf, lo: int, hi: int):
        """Reusable output arrays for the records of buf[lo:hi]: (starts int64, labels float64,
        flags uint8), the last two None for `lines` (it finds starts alone). Untouched pages of
        np.empty cost no memory, but they count against an address-space limit (ulimit -v)."""
        # a `lines` record can be one byte (an empty line), a LIBSVM record needs two ("1\n")
        per = 1 if self.fmt == "lines" else 2
        cap = (hi - lo) // per + 2
        a = self.scratch_out[slot]
        if a is not None and a[0].size >= cap:
            return a
        if cap > self.chunk_bytes // per + 2:
            # more than a chunk: a long line joined whole (or a caller's large buffer). Sized by
            # its bytes, a 512 MiB line asked for 8.5 GiB of arrays; a record ends at a newline
            cap = min(cap, K.count_byte(buf, lo, hi, 10) + 2)
            if a is not None and a[0].size >= cap:
                return a
        cap = max(cap, self.chunk_bytes // per + 2)
        starts = np.empty(cap, np.int64)
        a = (starts, None, None) if per == 1 else (starts, np.empty(cap, np.float64), np.empty(cap, np.uint8))
        self.scratch_out[slot] = a
        return a

    def _kernel(self, slot, buf, lo, hi, base):
        """Scan buf[lo:hi] (complete lines) into output slot ``slot``; runs on the pool (nogil)."""
        starts, labels, needs = self._arrays(slot, buf, lo, hi)
        if self.fmt == "lines":
            return K.lines_scan(buf, lo, hi, base, starts), 0, None
        stats = self.stats.copy()
        stats[3] = 0
        k, nl = K.libsvm_validate(buf, lo, hi, base, starts, labels, needs, POW10, stats)
        return k, nl, stats

    def scan_region(self, path, buf, lo, hi, base):
        """Scan buf[lo:hi], complete lines at file offset ``base``; raise DataError at the first
        line that ``load_svmlight_file`` would refuse. Parts are cut at the first line start after
        every checksum block boundary (marks are taken there) and for the cores."""
        if hi <= lo:
            return
        marks_at = self._block_cuts(buf, lo, hi, base) if self.marks is not None else {}
        bounds = sorted({lo, hi, *marks_at})
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:]):
            parts += _split_lines(buf, a, b, min(SCAN_CORES, max(1, (b - a) // _MIN_PART)))
        for g in range(0, len(parts), SCAN_CORES):
            grp = parts[g:g + SCAN_CORES]
            if len(grp) == 1:
                results = [self._kernel(0, buf, grp[0][0], grp[0][1], base)]
            else:  # one part per core: the kernels release the GIL
                futs = [self.pool.submit(self._kernel, s, buf, a, b, base) for s, (a, b) in enumerate(grp)]
                results = [f.result() for f in futs]
            for slot, ((a, b), (k, nl, stats)) in enumerate(zip(grp, results)):
                for m in marks_at.get(a, ()):
                    self.keep_mark(m)
                self._emit(path, buf, a, b, base, slot, k, stats)
                if self._line_base is not None:
                    self._line_base += nl

    def _block_cuts(self, buf, lo: int, hi: int, base: int) -> dict:
        """{position in buf: [block boundaries]}: the first line start at or after each boundary
        ``m * SUM_BLOCK`` of the file that lies in buf[lo:hi] (a boundary whose line start falls
        later waits for a later region)."""
        out: dict = {}
        while self._next_mark * SUM_BLOCK < self._size:
            bpos = self._next_mark * SUM_BLOCK - base
            if bpos <= lo:
                cut = lo
            else:
                if bpos >= hi:
                    break
                nl = K.find_byte(buf, bpos - 1, hi, 10)
                if nl < 0 or nl + 1 >= hi:
                    break
                cut = nl + 1
            out.setdefault(cut, []).append(self._next_mark)
            self._next_mark += 1
        return out

    def begin_stream(self) -> None:
        """Scan one file that is written while it is scanned (``lirs shuffle``'s inline index): its
        size is not known yet, and its marks start at its first byte."""
        self.marks, self._size, self._n0, self._qid0, self._next_mark = [], 1 << 62, 0, 0, 1
        self.keep_mark(0)

    def close_marks(self, size: int) -> None:
        """The marks of the boundaries after the last line start of a file of ``size`` bytes, then
        the file's total."""
        while self._next_mark < block_count(size):
            self.keep_mark(self._next_mark)
            self._next_mark += 1
        self.keep_mark(self._next_mark)

    def keep_mark(self, m: int) -> None:
        """Keep the state of the file's records before block boundary ``m``."""
        self.marks.append([int(self.stats[0]), int(self.stats[1]), self.qid_count - self._qid0, self.n - self._n0])

    def _fail(self, path, buf, lo, base, pos, message):
        """Raise the DataError of the byte buf[pos]: file, line, byte, message (one line)."""
        off = base + pos
        if self._line_base is not None:  # lines before this region are counted as we go
            line = self._line_base + K.count_byte(buf, lo, pos, 10) + 1
        else:
            line = _line_of(path, off)
        hint = " (on the last line, which has no line end: is the file still being written?)" \
            if _unterminated_at(path, off) else ""
        raise DataError(f"{path}: line {line}, byte {off}: {message}{hint}")

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
        elif tok and tok[0].startswith(b"\xef\xbb\xbf") and base + s + err.at == 0:
            msg += " (a UTF-8 byte-order mark starts the file: save it without one)"
        self._fail(path, buf, lo, base, s + err.at, msg)

    def _emit(self, path, buf, lo, hi, base, slot, k, stats):
        starts, labels, needs = self.scratch_out[slot]
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
        self.qid_count += int(stats[3])
        self.w.append(starts[:k])
        if self.labels_file is not None:
            self.labels_file.write(labels.tobytes())
            if self.distinct is not None:
                self.distinct.update(label_bits(labels).tolist())
                if len(self.distinct) > 65535:
                    self.distinct = None
        self.n += k

    def scan_file(self, path: str, start: int = 0, skip_to: int = 0, mark=None,
                  next_mark: int = 1) -> tuple[int, int, int]:
        """Scan one file; returns (records, first record offset, data end). Incremental: read from
        ``start`` (a multiple of SUM_BLOCK, for the checksums) and scan from ``skip_to`` (a record
        start), the file's records before it already given to the writer; ``mark`` (int64 (4,):
        min index, max index, qid records, records before ``skip_to``) their state, the marks of
        boundaries below ``next_mark`` already kept."""
        self._path = path
        self._line_base = 0 if skip_to == 0 else None
        # an empty file among several holds no records, as a comment-only one and a directory's
        # empty shard do (a dataset of nothing but empty files: refused by expand_paths)
        size = self._size = os.path.getsize(path)
        if mark is None:
            self.stats[:2] = (np.iinfo(np.int64).max, -1)
            self._n0, self._qid0, self._next_mark = self.n, self.qid_count, 1
            if self.marks is not None:
                self.keep_mark(0)
        else:
            self.stats[:2] = mark[:2]
            self._n0, self._qid0, self._next_mark = self.n - int(mark[3]), self.qid_count - int(mark[2]), next_mark
        # the pieces of a line not ended yet, joined once when its newline comes (joining them anew
        # with every chunk copied a long line over and over: quadratic in its length)
        carry: list = []
        carry_base = 0
        for buf, nb, base in read_chunks(path, start, size, self.chunk_bytes, direct=True):
            if base + nb <= skip_to:  # read for the checksums only
                self.bar.update(nb)
                continue
            lo = max(0, skip_to - base)
            if carry:
                f = K.find_byte(buf, 0, nb, 10)
                if f < 0:
                    carry.append(_hold(path, carry_base, lambda: buf[:nb].copy()))  # read into again
                    self.bar.update(nb)
                    continue
                joined = _hold(path, carry_base, lambda: np.concatenate([*carry, buf[:f + 1]]))
                carry = []
                self.scan_region(path, joined, 0, joined.size, carry_base)
                lo = f + 1
            last = K.rfind_byte(buf, lo, nb, 10)
            cut = lo if last < 0 else last + 1
            if last >= 0:
                self.scan_region(path, buf, lo, last + 1, base)
            carry, carry_base = ([buf[cut:nb].copy()] if nb > cut else []), base + cut
            self.bar.update(nb)
        if carry:  # last line without a trailing newline: still a record
            joined = _hold(path, carry_base, lambda: np.concatenate(carry))
            self.scan_region(path, joined, 0, joined.size, carry_base)
        self._line_base = None
        if self.marks is not None:
            self.close_marks(size)
        # a file of blank or comment lines holds no record: in a dataset of several files, it is
        # one of none, as an empty file is (the build refuses a dataset of no records at all)
        return self.n - self._n0, -1, size


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

    def append_blocks(self, base, rel, wide, a: int, b: int) -> None:
        """Stream records [a, b) of a compact offset table (base int64, rel uint32, wide int64)
        as they are: whole blocks (``a`` and ``b`` multiples of 1024, none wide), the output at
        a block boundary. Their statistics come from the table, their words are copied."""
        from .kernels.plan import offset_at

        first = int(offset_at(base, rel, wide, a))
        if self.prev >= 0:
            K.span_stats(np.array([self.prev], np.int64), first, self.st)
        K.span_stats_table(base, rel, wide, a, b, self.st)
        self.w.append_blocks(base[a >> OFFSET_SHIFT:b >> OFFSET_SHIFT], rel[a:b])
        self.prev = int(offset_at(base, rel, wide, b - 1))
        self.n += b - a

    def finish(self, data_end: int) -> None:
        """Count the last record, which ends at ``data_end``."""
        if self.prev >= 0:
            K.span_stats(np.array([self.prev], np.int64), int(data_end), self.st)
            self.prev = -1


_LABEL_STEP = 1 << 22  # labels converted per step (32 MiB of float64)


def write_labels(w: SidecarWriter, lab_tmp, n: int, distinct, pool, step: int = _LABEL_STEP,
                 kept=()) -> None:
    """Write the ``n`` labels of the dataset to the sidecar: as codes (uint8/uint16) into the sorted
    values whose bits (uint64 ints) are ``distinct``, or whole when ``distinct`` is None (too
    many). The scanned ones are float64 in the scratch file ``lab_tmp``, in order; ``kept``: (position, old index, a, b) per
    run of records [a, b) of an old index placed at ``position`` (incremental), their codes
    translated, not their labels scanned again. Steps of ``step`` scanned labels are converted
    on ``pool`` (None: this thread), one per core at a time (the kernel releases the GIL; memory
    stays a few steps), and written in order."""
    lab_tmp.flush()
    scanned = n - sum(b - a for _, _, a, b in kept)
    labels = np.memmap(lab_tmp, dtype=np.float64, mode="r", shape=(scanned,)) if scanned else \
        np.empty(0, np.float64)
    values = dt = None
    if distinct is not None:
        values = sorted_values(distinct)
        dt = np.uint8 if len(values) <= 256 else np.uint16
        w.add("label_values", values)
        w.begin("label_codes", dt)
    else:
        w.begin("label_values", np.float64)
    at = q = 0  # the next label written; the next scanned one
    for pos, old, a, b in [*kept, (n, None, 0, 0)]:
        if pos > at:
            _write_scanned(w, labels[q:q + pos - at], values, dt, pool, step)
            q += pos - at
        if old is not None:
            _write_kept(w, old, a, b, values, dt)
        at = pos + b - a
    w.end()
    del labels


def _write_scanned(w: SidecarWriter, labels, values, dt, pool, step: int) -> None:
    """Write float64 ``labels`` as codes into ``values`` (dtype ``dt``), or whole (``values`` None)."""
    steps = range(0, len(labels), step)
    if values is None:
        for c0 in steps:
            w.append(np.asarray(labels[c0:c0 + step]))
        return

    def code(c0):
        lab = np.ascontiguousarray(labels[c0:c0 + step])
        out = np.empty(lab.size, dt)
        K.label_codes(values, lab, out)  # np.searchsorted's answer, 7x faster on class labels
        return out

    run = map if pool is None else pool.map
    for g in range(0, len(steps), SCAN_CORES):
        for codes in run(code, steps[g:g + SCAN_CORES]):
            w.append(codes)


def _write_kept(w: SidecarWriter, old, a: int, b: int, values, dt, step: int = 1 << 20) -> None:
    """Write the labels of records [a, b) of the index ``old`` as codes into ``values`` (dtype
    ``dt``; an old code is translated through a table of its values' new codes), or whole."""
    old_values = np.ascontiguousarray(old.label_values, np.float64)  # the kernel views its bits
    if old.label_codes is None:  # the old index kept whole labels
        _write_scanned(w, old_values[a:b], values, dt, None, step)
        return
    if values is None:
        for c0 in range(a, b, step):
            w.append(old_values[np.asarray(old.label_codes[c0:min(b, c0 + step)])])
        return
    table = np.empty(len(old_values), dt)
    K.label_codes(values, old_values, table)
    same = np.dtype(dt) == old.label_codes.dtype and np.array_equal(table, np.arange(len(table)))
    for c0 in range(a, b, step):
        codes = np.asarray(old.label_codes[c0:min(b, c0 + step)])
        w.append(codes if same else table[codes])


