"""`lirs shuffle`: an exact two-pass external shuffle of files larger than RAM.

    shuffle(inputs, out, *, shards=None, memory="2G", tmpdir=None, seed=0, index=False,
            progress=None, format="auto", record_size=None, header_size=0) -> dict
    plan_memory(input_bytes, mean_record_bytes, memory, ...) -> MemoryPlan

Pass 1 streams the inputs in large chunks and deals every record to one of M piles on disk, the
pile drawn uniformly at random for each record; each pile has a write buffer, so pile writes are
large. Pass 2 loads one pile at a time, shuffles its records in RAM (Fisher-Yates over the start
offsets) and appends them to the output: one file, or K shards of consecutive records. Reading,
dealing/gathering and writing overlap on threads (the kernels release the GIL); piles and output
are written with O_DIRECT in whole blocks where the filesystem takes it (probed), which keeps the
CPU out of the page cache, and through the page cache otherwise.

The output is a uniformly random permutation of the input records: choosing pile j for record i is
the first digit (base M) of a uniform key U_i, and the shuffle inside a pile sorts on the remaining
digits. The sizes of the piles carry no information about the order inside them, so a pile that
turns out too big for memory is split again (another pass over that pile alone, into sub-piles
with fresh draws) and never truncated: no bias.

Randomness follows the seed scheme: ``SeedSequence([seed, 0, PURPOSE_PILES], spawn_key=path)``
keys the pile draws of the top level (path ``()``) and of every re-split pile (its path of pile
numbers); ``PURPOSE_ORDER`` keys the shuffle inside each final pile. A record's pile depends only
on the key and the record's number in the input, not on chunk sizes, so the output is a function
of the input records, ``seed`` and the pile count M (``stats["piles"]``, chosen from ``memory``).

Records:

* ``lines``: every line is a record, empty lines included; its bytes (``\\r\\n`` too) are kept.
* ``libsvm``: a record is a line that is not blank or comment-only (the definition of
  :mod:`lirs.scan`); blank and comment-only lines are dropped (counted in ``stats``), a comment
  after a record's features stays on its line.
* text: the last line of an input without a trailing newline gets one (``\\n``) in the output, so
  records never merge (``stats["added_newlines"]``).
* ``npy``: records are rows; the output is a ``.npy`` with a header for its row count, and labels in
  ``INPUT.labels.npy`` follow their rows into ``OUT.labels.npy`` (``lirs.build.labels_path``).
* ``fixed``: records of ``record_size`` bytes after a ``header_size``-byte header in every input;
  the output holds the records only (no header).

The output is written under temporary names and renamed at the end; piles live in a temporary
directory under ``tmpdir`` (default: next to the output) that is removed on success, on error and
on Ctrl-C.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import resource
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..errors import DataError, LirsError, UsageError
from ..index import FORMATS, VARIABLE_FORMATS, Index, header_for
from ..sidecar import SidecarWriter, fingerprint, sidecar_path
from ..engines import aligned_empty
from ..kernels import external as K
from ..kernels import plan as KP
from ..kernels import scan as KS
from ..build import read_chunks
from ..units import format_bytes, parse_size

log = logging.getLogger("lirs.external")

# SeedSequence([seed, 0, purpose], spawn_key=pile path) purposes of this module
PURPOSE_PILES = 0x5301   # the pile of every record (top level and re-splits)
PURPOSE_ORDER = 0x5302   # the order of the records inside each final pile

DIRECT = True                  # O_DIRECT for piles and output where the filesystem allows it
BLOCK = 4096                   # O_DIRECT alignment of offsets, sizes and buffers
MAX_PILES = 1024               # piles written at once (one open file each); more data → re-splits
MAX_DEPTH = 24                 # re-split levels before giving up (each level at least halves a pile)
HEADROOM = 0.9                 # expected pile + 6 sd uses at most this share of the pile target
PILE_TARGET = 64 << 20         # piles beyond this size shuffle slower (page faults, TLB misses)
_MIN_CHUNK = 64 << 10
_MAX_CHUNK = 16 << 20
_MIN_WRITE_BUFFER = 16 << 10
_MAX_WRITE_BUFFER = 4 << 20    # large sequential pile writes, also on disks that seek
_MIN_OUT_BUFFER = 64 << 10
_MAX_OUT_BUFFER = 4 << 20      # below lirs.scan's 4 MiB split threshold: one scan slot per buffer
_MIN_VALIDATE_PIECE = 16 << 10  # LIBSVM check of pass 1 (--index) scans pieces of about this size
_MAX_VALIDATE_PIECE = 1 << 20
_OFFSET_BYTES = 8              # pass 2 keeps one int64 start offset per record of the pile


# --------------------------------------------------------------------------- memory plan


@dataclass(frozen=True)
class MemoryPlan:
    """How ``memory`` bytes are split between the buffers of both passes (all sizes in bytes).

    Pass 1 holds ``2 * chunk`` (read ahead) + ``(piles + 2) * write_buffer`` (two spare slots let
    dealing overlap writing) + ``validate``; pass 2 holds at most ``pile_cap`` of piles (a pile's
    bytes + 8 per record; the next pile is read ahead only when both fit) + ``out_fixed`` (two
    output buffers, their label buffers and the index scan arrays). ``reserve`` is left for the
    rest of the process. A text line longer than ``chunk`` is assembled in memory (about twice its
    size) on top of this.
    """

    memory: int
    chunk: int
    write_buffer: int
    piles: int
    pile_cap: int
    out_buffer: int
    out_fixed: int
    validate: int
    validate_piece: int
    reserve: int
    target: int                # pass-2 bytes a pile is planned for: min(pile_cap, PILE_TARGET)
    expected_records: int      # records per pile expected (estimate)
    expected_pile: int         # pass-2 bytes of an expected pile (estimate)
    capped: bool = False       # fewer piles than the cap needs (open files, buffer room): re-splits

    @property
    def pass1_bytes(self) -> int:
        return 2 * self.chunk + (self.piles + _Piles.SPARE_SLOTS) * self.write_buffer + self.validate

    @property
    def pass2_bytes(self) -> int:
        return self.pile_cap + self.out_fixed

    def split_piles(self, need: int, max_piles: int | None = None) -> tuple[int, int]:
        """Sub-piles and their write buffer to split a pile that needs ``need`` bytes in pass 2."""
        max_piles = max_piles or MAX_PILES
        m = max(2, math.ceil(need / (self.target * HEADROOM)) + 1)
        room = self.memory - self.reserve - 2 * self.chunk - self.validate
        m = int(min(m, max_piles, max(2, room // _MIN_WRITE_BUFFER - _Piles.SPARE_SLOTS)))
        w = int(min(_MAX_WRITE_BUFFER, room // (m + _Piles.SPARE_SLOTS)))
        return m, w - w % BLOCK


def _clamp(x, lo, hi):
    return int(max(lo, min(hi, x)))


def plan_memory(input_bytes: int, mean_record_bytes: float, memory, *, record_bytes: int = 0,
                label_ratio: float = 0.0, index: bool = False, validate: bool = False,
                max_piles: int | None = None) -> MemoryPlan:
    """Choose read chunk, pile count M, write buffers and the pass-2 pile cap for ``memory`` bytes.

    ``input_bytes``: bytes the piles will hold (records plus labels); ``mean_record_bytes``: an
    estimate of the bytes per record in a pile; ``record_bytes``: the size of every pile record for
    fixed formats (0 for text); ``label_ratio``: label bytes per data byte in the output (``.npy``
    with labels); ``index``: room for the index scan of each output buffer; ``validate``: room for
    the LIBSVM check of pass 1. M is the smallest count whose expected pile, plus six standard
    deviations of its record count, fits ``HEADROOM`` of the pile target (the pile cap, or
    ``PILE_TARGET`` when smaller: smaller piles shuffle faster); it is capped by ``max_piles``
    (default ``MAX_PILES``, lowered to what the open-file limit allows), beyond which piles are
    split again in pass 2. Raises :class:`UsageError` when ``memory`` cannot hold the buffers and
    one record.
    """
    mem = parse_size(memory)
    if mem <= 0:
        raise UsageError("--memory must be a positive size, like 2G")
    mean = max(1.0, float(mean_record_bytes))
    reserve = max(1 << 20, mem // 16)  # the interpreter, threads and small arrays outside the plan
    chunk = _clamp(mem // 16, _MIN_CHUNK, _MAX_CHUNK)
    if record_bytes:
        chunk = max(chunk, record_bytes)

    def blocks(x):
        return -(-int(x) // BLOCK) * BLOCK

    # O_DIRECT writes leave up to a block behind in a buffer: slots hold a record plus a block
    wmin = max(_MIN_WRITE_BUFFER, blocks(record_bytes + BLOCK)) if record_bytes else _MIN_WRITE_BUFFER
    # the index scan of an output buffer needs about 8.5 bytes per buffer byte: smaller buffers then
    out_buf = _clamp(mem // (128 if index else 32), _MIN_OUT_BUFFER, _MAX_OUT_BUFFER)
    if record_bytes:
        out_buf = max(out_buf, blocks(record_bytes + 2 * BLOCK))
    # LIBSVM: starts, labels, flags (17 B) for up to one record per 2 bytes; lines: 8 B per byte
    scan = max(17 * (out_buf // 2 + 2), 8 * (out_buf + 1)) if index else 0
    # two output buffers and their labels, the scan arrays, and the block a pile read rounds up to
    out_fixed = int(2 * out_buf * (1.0 + label_ratio)) + scan + BLOCK
    piece = _clamp(mem // 256, _MIN_VALIDATE_PIECE, _MAX_VALIDATE_PIECE)
    val = 17 * (piece // 2 + 2) if validate else 0
    pile_cap = mem - reserve - out_fixed
    room1 = mem - reserve - 2 * chunk - val
    smallest = max(64 << 10, record_bytes + _OFFSET_BYTES)
    need_mem = reserve + out_fixed + smallest
    slots = 2 + _Piles.SPARE_SLOTS  # write buffers of the smallest split (two piles)
    if pile_cap < smallest or room1 < slots * wmin:
        need = max(need_mem, reserve + 2 * chunk + val + slots * wmin)
        raise UsageError(f"--memory {format_bytes(mem)} is too small to hold one record plus the buffers "
                         f"of both passes; use at least {format_bytes(need * 1.05)}")
    per_record = mean + _OFFSET_BYTES
    target = int(min(pile_cap, PILE_TARGET))
    capacity = target * HEADROOM / per_record          # records a pile is planned to hold
    # largest mu with mu + 6 sqrt(mu) <= capacity
    root = (-6.0 + math.sqrt(36.0 + 4.0 * capacity)) / 2.0
    mu = max(1.0, root * root)
    n_est = max(1.0, input_bytes / mean)
    cap_piles = max(2, min(max_piles or MAX_PILES, room1 // wmin - _Piles.SPARE_SLOTS))
    want = max(1, math.ceil(n_est / mu))
    m = int(min(cap_piles, want))
    w = int(min(_MAX_WRITE_BUFFER, room1 // (m + _Piles.SPARE_SLOTS)))
    w -= w % BLOCK
    exp_records = int(math.ceil(n_est / m))
    return MemoryPlan(memory=mem, chunk=chunk, write_buffer=w, piles=m, pile_cap=int(pile_cap),
                      out_buffer=out_buf, out_fixed=out_fixed, validate=val, validate_piece=piece,
                      reserve=reserve, target=target,
                      expected_records=exp_records, expected_pile=int(exp_records * per_record),
                      capped=want > m)


def _fd_pile_limit() -> int:
    """Piles that may be open at once under the soft open-file limit (leaving room for the rest)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < MAX_PILES + 128 and (
                hard == resource.RLIM_INFINITY or hard > soft):
            want = MAX_PILES + 128 if hard == resource.RLIM_INFINITY else min(hard, MAX_PILES + 128)
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    except (ValueError, OSError):
        return MAX_PILES
    if soft == resource.RLIM_INFINITY:
        return MAX_PILES
    return int(max(2, min(MAX_PILES, soft - 128)))


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


# --------------------------------------------------------------------------- I/O helpers


def _write_all(fd: int, data) -> None:
    mv = memoryview(data).cast("B")
    while mv.nbytes:
        n = os.write(fd, mv)
        mv = mv[n:]


def _pwrite_all(fd: int, data, off: int) -> None:
    mv = memoryview(data).cast("B")
    while mv.nbytes:
        n = os.pwrite(fd, mv, off)
        mv = mv[n:]
        off += n


def _read_all(path: str, nbytes: int, out: np.ndarray, block: int = 1) -> None:
    """Read the first ``nbytes`` of ``path`` into ``out``; with ``block`` > 1 by O_DIRECT in whole
    blocks (``out`` aligned, room for ``nbytes`` rounded up to a block)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if block > 1 else 0))
    try:
        want = -(-nbytes // block) * block
        mv = memoryview(out)[:want]
        got = 0
        while got < nbytes:
            r = os.preadv(fd, [mv[got:]], got)
            if r == 0:
                raise LirsError(f"{path}: pile file is shorter than written ({got} of {nbytes} bytes)")
            got += r
    finally:
        os.close(fd)


def _direct_ok(dirpath: str) -> bool:
    """Whether files in ``dirpath`` take O_DIRECT writes and reads (tmpfs and some overlay
    filesystems refuse them, sometimes only at the first I/O: probe with a real one)."""
    if not DIRECT or not hasattr(os, "O_DIRECT"):
        return False
    fd = -1
    try:
        tmp_fd, probe = tempfile.mkstemp(prefix=".lirs-direct-", dir=dirpath)
        os.close(tmp_fd)
        fd = os.open(probe, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
        buf = aligned_empty(BLOCK)
        buf[:] = 7
        back = aligned_empty(BLOCK)
        ok = os.pwrite(fd, buf, 0) == BLOCK and os.preadv(fd, [back], 0) == BLOCK and bool((back == 7).all())
    except OSError:
        ok = False
    finally:
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(probe)
        except (OSError, UnboundLocalError):
            pass
    return ok


def _free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize)


def _check_space(pile_dir: str, out_dir: str, pile_bytes: int, out_bytes: int) -> None:
    """Raise when the pile and output directories cannot hold the piles and the output."""
    need = {}
    for d, b in ((pile_dir, pile_bytes), (out_dir, out_bytes)):
        dev = os.stat(d).st_dev
        need.setdefault(dev, [d, 0])[1] += b
    for dev, (d, b) in need.items():
        free = _free_bytes(d)
        if free < b:
            raise LirsError(f"not enough free disk space on {d}: the shuffle needs about {format_bytes(b)} "
                            f"(piles {format_bytes(pile_bytes)} + output {format_bytes(out_bytes)} "
                            f"where they share a filesystem), {format_bytes(free)} free; use --tmpdir "
                            "for the piles elsewhere")


# --------------------------------------------------------------------------- pass 1: piles


class _Piles:
    """``m`` pile files (``DIR/NAME-j.pile``) with their write buffers; counts per pile.

    There are ``m + SPARE_SLOTS`` buffer slots of ``w`` bytes: a full pile buffer goes to a writer
    thread and the pile continues in a free slot, so dealing overlaps writing. With ``direct``
    the files are written with O_DIRECT in whole 4 KiB blocks (no page-cache copy: on this class of
    machine buffered writes are the slowest step): a buffer's partial last block moves to the
    pile's next slot, and each pile's final block is zero-padded (``nbytes`` is the true length).
    """

    SPARE_SLOTS = 2

    def __init__(self, dirpath: str, name: str, m: int, w: int, direct: bool = False):
        self.block = BLOCK if direct else 1
        self.m = int(m)
        self.w = -(-int(w) // self.block) * self.block
        self.paths = [os.path.join(dirpath, f"{name}-{j}.pile") for j in range(self.m)]
        self.fds: list[int] = []
        nslots = self.m + self.SPARE_SLOTS
        self.buf = aligned_empty(nslots * self.w) if direct else np.empty(nslots * self.w, np.uint8)
        self.slots = np.arange(self.m, dtype=np.int64)     # pile -> the slot it fills
        self.free = list(range(self.m, nslots))
        self.pending: list = []                            # (future, slot) in submission order
        self.fill = np.zeros(self.m, np.int64)
        self.counts = np.zeros(self.m, np.int64)
        self.nbytes = np.zeros(self.m, np.int64)
        self.off = [0] * self.m                            # bytes written to each pile file
        self.writer = ThreadPoolExecutor(1)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (os.O_DIRECT if direct else 0)
        try:
            for p in self.paths:
                self.fds.append(os.open(p, flags, 0o600))
        except BaseException:
            self.close()
            raise

    @property
    def wmax(self) -> int:
        """Largest record that fits a slot after a flush (a partial block may stay behind)."""
        return self.w - self.block + 1

    def _reap(self, block: bool) -> None:
        while self.pending and (block or self.pending[0][0].done()):
            fut, slot = self.pending.pop(0)
            fut.result()  # a write error surfaces here
            self.free.append(slot)
            if block:
                return

    def _submit(self, p: int, n: int) -> None:
        """Write the first ``n`` bytes (whole blocks) of pile ``p``'s slot; the rest moves to a free slot."""
        s, w = int(self.slots[p]), self.w
        self.pending.append((self.writer.submit(_pwrite_all, self.fds[p], self.buf[s * w:s * w + n], self.off[p]),
                             s))
        self.off[p] += n
        self._reap(False)
        if not self.free:
            self._reap(True)
        new = self.free.pop()
        tail = int(self.fill[p]) - n
        if tail > 0:
            self.buf[new * w:new * w + tail] = self.buf[s * w + n:s * w + n + tail]
        self.slots[p] = new
        self.fill[p] = max(tail, 0)

    def flush(self, p: int) -> None:
        """Make room in pile ``p``'s slot: hand its whole blocks to the writer."""
        n = int(self.fill[p])
        n -= n % self.block
        if n:
            self._submit(p, n)

    def drain(self) -> None:
        while self.pending:
            self._reap(True)

    def write_big(self, p: int, data: np.ndarray, newline: bool) -> None:
        """A record larger than a slot: stream it (and a missing newline) through pile ``p``'s slots."""
        w, pos, n = self.w, 0, int(data.size)
        while pos < n:
            s, f = int(self.slots[p]), int(self.fill[p])
            k = min(w - f, n - pos)
            self.buf[s * w + f:s * w + f + k] = data[pos:pos + k]
            self.fill[p] += k
            pos += k
            if self.fill[p] == w:
                self.flush(p)
        if newline:
            if self.fill[p] == w:
                self.flush(p)
            self.buf[int(self.slots[p]) * w + int(self.fill[p])] = 10
            self.fill[p] += 1
        self.counts[p] += 1
        self.nbytes[p] += n + int(newline)

    def finish(self) -> None:
        for p in range(self.m):
            n = int(self.fill[p])
            if n:
                padded = -(-n // self.block) * self.block
                s = int(self.slots[p])
                self.buf[s * self.w + n:s * self.w + padded] = 0
                self.fill[p] = padded
                self._submit(p, padded)
        self.drain()
        self.close()

    def close(self) -> None:
        self.writer.shutdown(wait=True)
        self.pending = []
        while self.fds:
            os.close(self.fds.pop())
        self.buf = None


class _Discard:
    """Sidecar-writer stand-in for the LIBSVM check of pass 1: the scanner's starts are not kept."""

    def append(self, arr) -> None:
        pass


class _Dealer:
    """Pass 1 (and every re-split): stream sources and deal their records to a set of piles."""

    def __init__(self, fmt: str, piles: _Piles, key: int, chunk: int, *, skip_blank=False, rs=0, ls=0,
                 validate=0, max_record=None, bar=None, memory=0, pool=None):
        self.fmt, self.piles, self.key = fmt, piles, np.uint64(key)
        self.chunk, self.skip_blank, self.rs, self.ls = chunk, skip_blank, rs, ls
        self.max_record = max_record
        self.bar = bar
        self.memory = memory
        self.counter = 0
        self.info = np.zeros(3, np.int64)
        self.validator = None
        self.piece = int(validate)
        if validate:  # the piece size in bytes
            from ..build import VarScanner

            self.validator = VarScanner("libsvm", _Discard(), None, self.piece, None, pool)

    # ---- text ---------------------------------------------------------------------------
    def _check(self, path, buf, lo, hi, base):
        """LIBSVM check of complete lines (errors name the input file, line and byte)."""
        a = lo
        while a < hi:
            b = hi
            if hi - a > self.piece:
                nl = K.find_newline(buf, a + self.piece, hi)
                b = hi if nl < 0 else nl + 1
            self.validator._region(path, buf, a, b, base)
            if b - a > 2 * self.piece:  # a long line grew the scan arrays: drop them
                self.validator._out = [None, None]
            a = b

    def _lines(self, path, buf, lo, hi, base):
        if hi <= lo:
            return
        if self.validator is not None:
            self._check(path, buf, lo, hi, base)
        P = self.piles
        pos = lo
        while True:
            pos, end, self.counter, status, p = K.scatter_lines(
                buf, pos, hi, self.skip_blank, self.key, self.counter, P.m, P.buf, P.w, P.wmax, P.slots,
                P.fill, P.counts, P.nbytes, self.info)
            if status == K.DONE:
                return
            if status == K.FLUSH:
                P.flush(p)
                continue
            newline = bool(buf[end - 1] != 10)
            P.write_big(p, buf[pos:end], newline)
            if newline:
                self.info[K.INFO_ADDED_NEWLINES] += 1
            self.counter += 1
            pos = end

    def _too_long(self, path, base, size):
        raise UsageError(f"{path}: the line at byte {base} is longer than {format_bytes(self.max_record)}, "
                         f"more than --memory {format_bytes(self.memory)} can shuffle; raise --memory")

    def deal_text(self, src: _Source) -> None:
        with contextlib.closing(read_chunks(src.path, src.start, src.end, self.chunk)) as chunks:
            self._deal_chunks(src, chunks)

    def _deal_chunks(self, src, chunks):
        carry: list = []       # pieces of a line that continues into the next chunk
        carry_size = 0
        carry_base = 0
        for buf, nb, base in chunks:
            lo = 0
            if carry:
                f = K.find_newline(buf, 0, nb)
                carry.append(buf[:nb if f < 0 else f + 1].copy())
                carry_size += carry[-1].size
                if self.max_record and carry_size > self.max_record:
                    self._too_long(src.path, carry_base, carry_size)
                if f < 0:
                    self._progress(nb)
                    continue
                joined = np.concatenate(carry)
                carry, carry_size = [], 0
                self._lines(src.path, joined, 0, joined.size, carry_base)
                del joined
                lo = f + 1
            last = KS.rfind_byte(buf, lo, nb, 10)
            if last < 0:
                carry, carry_size, carry_base = [buf[lo:nb].copy()], nb - lo, base + lo
            else:
                self._lines(src.path, buf, lo, last + 1, base)
                if last + 1 < nb:
                    carry, carry_size, carry_base = [buf[last + 1:nb].copy()], nb - last - 1, base + last + 1
            self._progress(nb)
        if carry:  # the last line has no trailing newline: still a record
            joined = np.concatenate(carry)
            if self.max_record and joined.size > self.max_record:
                self._too_long(src.path, carry_base, joined.size)
            self._lines(src.path, joined, 0, joined.size, carry_base)

    # ---- fixed --------------------------------------------------------------------------
    def deal_fixed(self, src: _Source) -> None:
        q = max(1, self.chunk // (self.rs + self.ls))  # records per read; their labels come along
        with contextlib.closing(read_chunks(src.path, src.start, src.end, q * self.rs)) as chunks:
            for buf, nb, off in chunks:
                self._deal_fixed_chunk(src, buf, nb, off)

    def _deal_fixed_chunk(self, src, buf, nb, off):
        rs, ls, P = self.rs, self.ls, self.piles
        nrec = nb // rs
        if src.labels is not None and ls:
            i0 = (off - src.start) // rs
            lab = np.ascontiguousarray(src.labels[i0:i0 + nrec]).reshape(-1).view(np.uint8)
        else:
            lab = np.empty(0, np.uint8)
        pos = 0
        while True:
            pos, self.counter, status, p = K.scatter_fixed(
                buf, pos, nrec, rs, lab, ls, self.key, self.counter, P.m, P.buf, P.w, P.slots, P.fill,
                P.counts, P.nbytes)
            if status == K.DONE:
                break
            P.flush(p)
        self._progress(nb)

    def deal(self, src: _Source) -> None:
        if self.fmt in VARIABLE_FORMATS:
            self.deal_text(src)
        else:
            self.deal_fixed(src)

    def _progress(self, nb):
        if self.bar is not None:
            self.bar.update(nb)


# --------------------------------------------------------------------------- pass 2: output


class _Tap:
    """Sidecar-writer proxy: streams record starts to the sidecar and accumulates their size
    statistics exactly as :mod:`lirs.scan` does (record i ends where record i+1 starts)."""

    def __init__(self, w):
        self.w = w
        self.n = 0
        self.prev = -1
        self.st = np.array([np.inf, 0.0, 0.0, 0.0, 0.0])

    def append(self, starts) -> None:
        starts = np.asarray(starts, np.int64)
        if starts.size == 0:
            return
        self.w.append(starts)
        if self.prev >= 0:
            KS.span_stats(np.array([self.prev], np.int64), int(starts[0]), self.st)
        KS.span_stats(starts[:-1], int(starts[-1]), self.st)
        self.prev = int(starts[-1])
        self.n += int(starts.size)

    def finish(self, data_end: int) -> None:
        if self.prev >= 0:
            KS.span_stats(np.array([self.prev], np.int64), int(data_end), self.st)
            self.prev = -1


class _TextIndexer:
    """Builds the sidecar of one text output file from its buffers as they are written; the result
    is the sidecar ``lirs index`` would write for the finished file."""

    def __init__(self, fmt: str, data_tmp: str, final_path: str, sidecar_tmp_dest: str,
                 sidecar_final: str, scratch: str, out_buffer: int, pool, label_block: int):
        from ..build import VarScanner

        self.fmt = fmt
        self.out_buffer = out_buffer
        self.data_tmp, self.final_path = data_tmp, final_path
        self.sidecar_final = sidecar_final
        self.label_block = max(1 << 12, int(label_block))
        self.w = SidecarWriter(sidecar_tmp_dest)
        self.tap = _Tap(self.w)
        self.lab = None
        self.sc = None
        self.starts = None
        try:
            if fmt == "libsvm":
                self.lab = tempfile.TemporaryFile(dir=scratch)
                self.sc = VarScanner("libsvm", self.tap, self.lab, out_buffer, None, pool)
            self.w.begin("offsets", np.int64)
        except BaseException:
            self.abort()
            raise

    def add(self, buf: np.ndarray, n: int, base: int) -> None:
        """Index buf[:n] (complete lines) written at byte ``base`` of the output."""
        if self.sc is not None:
            self.sc._region(self.data_tmp, buf, 0, n, base)
            if n > self.out_buffer:  # a long line grew the scan arrays (~8.5 B per byte): drop them
                self.sc._out = [None, None]
        else:
            k = KS.count_byte(buf, 0, n, 10) + 1
            if self.starts is None or self.starts.size < k:
                self.starts = np.empty(k, np.int64)
            k = KS.lines_scan(buf, 0, n, base, self.starts)
            self.tap.append(self.starts[:k])
            if n > self.out_buffer:
                self.starts = None

    def commit(self, data_end: int, data_path: str) -> str:
        """Finish the sidecar and rename it into place; ``data_path`` is the complete, closed data
        file (its fingerprint goes into the sidecar; a rename keeps it)."""
        w, tap = self.w, self.tap
        tap.finish(data_end)
        w._open = None
        n = tap.n
        w.add("file_starts", np.asarray([0, n], np.int64))
        w.add("data_ends", np.asarray([data_end], np.int64))
        w.add("header_sizes", np.asarray([0], np.int64))
        st = tap.st
        meta = {
            "record_bytes_min": int(st[0]), "record_bytes_max": int(st[1]),
            "record_bytes_mean": float(st[2] / n), "records_under_4k": int(st[3]),
            "records_straddling_4k": int(st[4]),
        }
        if self.fmt == "libsvm":
            sc = self.sc
            meta.update(min_index=int(sc.stats[0]) if sc.stats[1] >= 0 else 0,
                        max_index=int(sc.stats[1]) if sc.stats[1] >= 0 else -1,
                        qid_records=sc._qid)
            self.lab.flush()
            labels = np.memmap(self.lab, dtype=np.float64, mode="r", shape=(n,))
            blk = self.label_block
            if sc.distinct is not None:
                values = np.unique(np.array(list(sc.distinct), np.float64))
                dt = np.uint8 if len(values) <= 256 else np.uint16
                w.add("label_values", values)
                w.begin("label_codes", dt)
                for c0 in range(0, n, blk):
                    w.append(np.searchsorted(values, labels[c0:c0 + blk]).astype(dt))
                w._open = None
            else:
                w.begin("label_values", np.float64)
                for c0 in range(0, n, blk):
                    w.append(np.asarray(labels[c0:c0 + blk]))
                w._open = None
            del labels
        shell = Index(format=self.fmt, paths=(self.final_path,), n=n, file_starts=np.asarray([0, n], np.int64),
                      data_ends=np.asarray([data_end], np.int64), header_sizes=np.asarray([0], np.int64),
                      fingerprints=(fingerprint(data_path),), meta=meta)
        try:
            dest = w.commit(header_for(shell, self.sidecar_final))
        finally:
            self._close_labels()
        return dest

    def _close_labels(self):
        if self.lab is not None:
            self.lab.close()
            self.lab = None

    def abort(self) -> None:
        try:
            self.w.abort()
        finally:
            self._close_labels()


@dataclass
class _Shard:
    final: str               # where the data file ends up
    tmp: str                 # where it is written
    count: int               # records
    labels_final: str | None = None
    labels_tmp: str | None = None
    sidecar: str | None = None
    indexer: object = None    # _TextIndexer waiting for the data to be in place
    data_end: int = 0


class _Output:
    """Pass 2's sink: gathers shuffled records into output buffers, splits them into shards, writes
    on a background thread (one buffer fills while the other is written) and feeds the indexers.

    With ``direct`` the files are written with O_DIRECT in whole blocks: the partial last block of
    a buffer moves to the front of the next one, and the file's last block is padded, then cut to
    its true size with ftruncate. Records in ``buf[rec0:pos]`` are not indexed yet.
    """

    def __init__(self, fmt, shards: list[_Shard], plan: MemoryPlan, *, rs=0, ls=0, dtype=None, shape=None,
                 linfo=None, index=False, scratch=None, pool=None, sidecar_tmp=None, direct=False):
        self.fmt, self.shards, self.plan = fmt, shards, plan
        self.text = fmt in VARIABLE_FORMATS
        self.rs, self.ls, self.dtype, self.shape, self.linfo = rs, ls, dtype, shape, linfo
        self.index, self.scratch, self.pool = index and self.text, scratch, pool
        self.sidecar_tmp = sidecar_tmp or (lambda s: s.sidecar)
        self.direct = direct
        self.block = BLOCK if direct else 1
        ob = max(plan.out_buffer, rs + 2 * self.block)
        ob = -(-ob // self.block) * self.block
        self.cap = ob
        make = aligned_empty if direct else (lambda n: np.empty(n, np.uint8))
        self.bufs = [make(ob), make(ob)]
        nl = (ob // rs + 1) * ls if (not self.text and ls) else 0
        self.lbufs = [np.empty(nl, np.uint8), np.empty(nl, np.uint8)]
        self.cur = 0
        self.pos = 0            # bytes in the current buffer
        self.rec0 = 0           # first byte of the current buffer not indexed yet
        self.lpos = 0
        self.fileoff = 0        # file offset of the current buffer's first byte
        self.k = -1             # current shard
        self.left = 0           # records still to write into it
        self.fd = self.lfd = None
        self.indexer = None
        self.pending = [None, None]
        self.writer = ThreadPoolExecutor(1)
        self.done: list[_Shard] = []
        self.records = 0

    # ---- shard files --------------------------------------------------------------------
    def _open_shard(self):
        self.k += 1
        s = self.shards[self.k]
        self.left = s.count
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (os.O_DIRECT if self.direct else 0)
        self.fd = os.open(s.tmp, flags, 0o644)
        self.fileoff = self.pos = self.rec0 = self.lpos = 0
        if self.fmt == "npy":
            hdr = np.frombuffer(_npy_header(self.dtype, (s.count,) + tuple(self.shape)), np.uint8)
            self.bufs[self.cur][:hdr.size] = hdr
            self.pos = self.rec0 = int(hdr.size)
        if self.linfo is not None:
            ldt, lshape, _ = self.linfo
            self.lfd = os.open(s.labels_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            _write_all(self.lfd, _npy_header(ldt, (s.count,) + tuple(lshape)))
        if self.index:
            self.indexer = _TextIndexer(self.fmt, s.tmp, s.final, self.sidecar_tmp(s), s.sidecar, self.scratch,
                                        self.plan.out_buffer, self.pool,
                                        label_block=max(1 << 12, self.plan.out_buffer // 8))

    def _close_shard(self):
        size = self.fileoff + self.pos
        self._flush(final=True)
        self._wait()
        s = self.shards[self.k]
        if self.direct and size % self.block:
            os.ftruncate(self.fd, size)  # drop the padding of the last block
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        if self.lfd is not None:
            os.fsync(self.lfd)
            os.close(self.lfd)
            self.lfd = None
        s.indexer, self.indexer = self.indexer, None
        s.data_end = size
        self.done.append(s)

    # ---- buffers ------------------------------------------------------------------------
    @staticmethod
    def _job(fd, buf, n, off, indexer, lo, hi, lfd, lbuf, ln):
        if indexer is not None and hi > lo:
            indexer.add(buf[lo:hi], hi - lo, off + lo)
        if n:
            _pwrite_all(fd, buf[:n], off)
        if lfd is not None and ln:
            _write_all(lfd, lbuf[:ln])

    def _flush(self, final: bool = False):
        """Hand the current buffer's whole blocks (all of it, padded, when ``final``) to the writer;
        the rest moves to the other buffer once that one is on disk."""
        n = self.pos
        if final:
            a = -(-n // self.block) * self.block
            self.bufs[self.cur][n:a] = 0
        else:
            a = n - n % self.block
        if a == 0 and self.rec0 == n and not self.lpos:
            return
        i = self.cur
        self.pending[i] = self.writer.submit(self._job, self.fd, self.bufs[i], a, self.fileoff, self.indexer,
                                             self.rec0, n, self.lfd, self.lbufs[i], self.lpos)
        o = 1 - i
        f = self.pending[o]
        if f is not None:  # the other buffer must be on disk before it is refilled
            self.pending[o] = None
            f.result()
        tail = n - a if n > a else 0
        if tail:
            self.bufs[o][:tail] = self.bufs[i][a:n]
        self.cur = o
        self.fileoff += a
        self.pos = self.rec0 = tail
        self.lpos = 0

    def _wait(self):
        for i in (0, 1):
            f = self.pending[i]
            if f is not None:
                self.pending[i] = None
                f.result()

    def _long_line(self, src, s, e):
        """A line longer than the output buffer: index it whole, then stream it through the buffers."""
        self._flush()
        self._wait()  # the index sees records in order
        if self.indexer is not None:
            self.indexer.add(src[s:e], e - s, self.fileoff + self.pos)
        while s < e:
            k = min(self.cap - self.pos, e - s)
            self.bufs[self.cur][self.pos:self.pos + k] = src[s:s + k]
            self.pos += k
            self.rec0 = self.pos
            s += k
            if self.pos == self.cap:
                self._flush()

    def put(self, src: np.ndarray, offs: np.ndarray) -> None:
        """Append the records of ``src`` (a loaded pile) in the order of ``offs`` (int64 starts)."""
        i, r = 0, offs.shape[0]
        while i < r:
            if self.left == 0:
                self._open_shard()
            i_end = min(r, i + self.left)
            buf = self.bufs[self.cur]
            if self.text:
                i2, self.pos = K.gather_lines(src, offs, i, i_end, buf, self.pos)
            else:
                i2, self.pos, self.lpos = K.gather_fixed(src, offs, i, i_end, self.rs, self.ls, buf, self.pos,
                                                         self.lbufs[self.cur], self.lpos)
            if i2 == i:
                if self.pos >= self.block or self.pos > self.rec0:
                    self._flush()  # room for the next record
                    continue
                s = int(offs[i])
                nl = K.find_newline(src, s, src.shape[0])
                self._long_line(src, s, src.shape[0] if nl < 0 else nl + 1)
                i2 = i + 1
            self.left -= i2 - i
            self.records += i2 - i
            i = i2
            if i < i_end:
                self._flush()
            if self.left == 0:
                self._close_shard()

    def close(self):
        self.writer.shutdown(wait=True)
        for fd in (self.fd, self.lfd):
            if fd is not None:
                os.close(fd)
        self.fd = self.lfd = None
        if self.indexer is not None:
            self.indexer.abort()
            self.indexer = None


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


# --------------------------------------------------------------------------- the shuffle


def _key(seed: int, purpose: int, path: tuple) -> int:
    ss = np.random.SeedSequence([seed, 0, purpose], spawn_key=tuple(int(x) for x in path))
    return int(ss.generate_state(1, np.uint64)[0])


class _Run:
    """State of one shuffle: plan, pile directory, stats; pass 2 recursion over piles."""

    def __init__(self, fmt, plan, seed, pile_dir, out: _Output, rs, ls, bar, max_piles, direct):
        self.fmt, self.plan, self.seed, self.pile_dir = fmt, plan, seed, pile_dir
        self.direct = direct
        self.block = BLOCK if direct else 1
        self.out, self.bar = out, bar
        self.max_piles = max_piles
        self.rr = (rs or 0) + (ls or 0)
        self.splits = 0
        self.split_bytes = 0
        self.max_depth = 0
        self.peak_pile = 0
        self.loader = ThreadPoolExecutor(1)

    def _split(self, piles: _Piles, j: int, path: tuple) -> _Piles:
        """Deal pile ``j`` again into sub-piles (fresh draws keyed by its path)."""
        need = int(piles.nbytes[j]) + _OFFSET_BYTES * int(piles.counts[j])
        m, w = self.plan.split_piles(need, self.max_piles)
        if self.rr:
            w = max(w, self.rr + self.block)
        name = "p" + ".".join(str(x) for x in path)
        sub = _Piles(self.pile_dir, name, m, w, self.direct)
        try:
            d = _Dealer(self.fmt if self.rr else "lines", sub, _key(self.seed, PURPOSE_PILES, path), self.plan.chunk,
                        rs=self.rr, ls=0)
            d.deal(_Source(piles.paths[j], 0, int(piles.nbytes[j])))
            sub.finish()
        except BaseException:
            sub.close()
            raise
        if int(sub.counts.sum()) != int(piles.counts[j]):
            raise LirsError(f"{piles.paths[j]}: re-split found {int(sub.counts.sum())} records, "
                            f"expected {int(piles.counts[j])}")
        self.splits += 1
        self.split_bytes += int(piles.nbytes[j])
        return sub

    def _alloc(self, nbytes: int) -> np.ndarray:
        return aligned_empty(nbytes) if self.direct else np.empty(nbytes, np.uint8)

    def _load(self, piles: _Piles, j: int, path: tuple, buf: np.ndarray) -> np.ndarray:
        """Read pile ``j`` into ``buf`` and return its record starts (int64) in shuffled order."""
        r, nb = int(piles.counts[j]), int(piles.nbytes[j])
        _read_all(piles.paths[j], nb, buf, self.block)
        os.unlink(piles.paths[j])
        offs = np.empty(r, np.int64)
        if self.rr:
            np.multiply(np.arange(r, dtype=np.int64), self.rr, out=offs)
        else:
            k = K.line_starts(buf, nb, offs)
            if k != r:
                raise LirsError(f"{piles.paths[j]}: pile holds {k} lines, expected {r}")
        KP.shuffle_inplace(offs, np.uint64(_key(self.seed, PURPOSE_ORDER, path)), np.uint64(0))
        return offs

    def emit(self, piles: _Piles, path: tuple = (), depth: int = 0) -> None:
        """Pass 2 over ``piles`` in order: shuffle each in RAM, or split it again when too big.

        While a pile is written, the next one is read and shuffled on the loader thread when both
        fit the pile cap together.
        """
        self.max_depth = max(self.max_depth, depth)
        cap = self.plan.pile_cap
        js = []
        for j in range(piles.m):
            if piles.counts[j]:
                js.append(j)
            else:
                os.unlink(piles.paths[j])
        r = [int(x) for x in piles.counts]
        nb = [int(x) for x in piles.nbytes]
        room = [-(-x // self.block) * self.block for x in nb]
        bufs = [None, None]   # the pile being written, the pile being read ahead
        ahead = None          # (future, slot) of js[i] when it was read ahead
        for i, j in enumerate(js):
            pj = path + (j,)
            need = nb[j] + _OFFSET_BYTES * r[j]
            if need > cap:
                if r[j] == 1:
                    raise UsageError(f"a record of {format_bytes(nb[j])} does not fit --memory "
                                     f"{format_bytes(self.plan.memory)} with the buffers; raise --memory")
                if depth + 1 > MAX_DEPTH:
                    raise LirsError(f"pile {pj} still needs {format_bytes(need)} after {MAX_DEPTH} re-splits; "
                                    "raise --memory")
                bufs = [None, None]
                sub = self._split(piles, j, pj)
                os.unlink(piles.paths[j])
                self.emit(sub, pj, depth + 1)
                continue
            if ahead is not None:
                (fut, a), ahead = ahead, None
                offs = fut.result()
            else:
                a = 0
                bufs[1] = None
                if bufs[0] is None or bufs[0].size < room[j] or bufs[0].size + _OFFSET_BYTES * r[j] > cap:
                    bufs[0] = None
                    bufs[0] = self._alloc(room[j])
                offs = self._load(piles, j, pj, bufs[0])
            held = bufs[a].size + _OFFSET_BYTES * r[j]
            if i + 1 < len(js):
                jn, o = js[i + 1], 1 - a
                size_o = bufs[o].size if bufs[o] is not None and bufs[o].size >= room[jn] else room[jn]
                both = held + size_o + _OFFSET_BYTES * r[jn]
                if nb[jn] + _OFFSET_BYTES * r[jn] <= cap and both <= cap:
                    if size_o != (bufs[o].size if bufs[o] is not None else -1):
                        bufs[o] = None
                        bufs[o] = self._alloc(size_o)
                    ahead = (self.loader.submit(self._load, piles, jn, path + (jn,), bufs[o]), o)
                    held = both
                else:
                    bufs[o] = None
            self.peak_pile = max(self.peak_pile, held)
            self.out.put(bufs[a][:nb[j]], offs)
            del offs
            if self.bar is not None:
                self.bar.update(nb[j])

    def close(self) -> None:
        self.loader.shutdown(wait=True)


def _max_line(plan: MemoryPlan, index: bool) -> int:
    """Longest text record the plan can shuffle: it must fit a pile alone, and with ``index`` a
    line longer than the output buffer is also scanned whole (about 8.5 bytes per byte)."""
    if index:
        return int((plan.pile_cap - _OFFSET_BYTES) / 9.5)
    return plan.pile_cap - _OFFSET_BYTES


def _shard_names(out: str, shards: int, ext: str) -> list[str]:
    width = max(5, len(str(shards - 1)))
    return [f"part-{k:0{width}d}{ext}" for k in range(shards)]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def shuffle(inputs, out, *, shards=None, memory="2G", tmpdir=None, seed=0, index=False, progress=None,
            format="auto", record_size=None, header_size=0, _max_piles=None) -> dict:
    """Write a uniformly random permutation of the records of ``inputs`` to ``out``.

    Parameters
    ----------
    inputs : path or list of paths
        Data files (or a directory of them) of one format; several inputs concatenate into one
        dataset before shuffling.
    out : path
        The output file; with ``shards=K`` a directory (created; must not exist or be empty) that
        receives ``part-00000.EXT`` ... ``part-{K-1}.EXT``, each holding consecutive records of the
        shuffled order (record counts differ by at most one).
    memory : int or str
        The memory cap, like ``"2G"``: read chunks, pile write buffers and the pile being shuffled
        stay within it (see :class:`MemoryPlan`).
    tmpdir : path, optional
        Where the pile directory goes (default: the output's directory). Needs about the input's
        size in free space, the output directory as much again.
    seed : int
        Same inputs, seed and memory plan (pile count) → byte-identical output.
    index : bool
        Also write each output's lirs sidecar (``OUT.lirs``, or ``part-*.lirs`` per shard),
        identical to what ``lirs index`` would write; text formats build it from the output
        buffers as they are written (and LIBSVM inputs are checked in pass 1).
    progress : bool or None
        tqdm bars for both passes; None = only when stderr is a terminal.
    format : "auto", "libsvm", "lines", "npy" or "fixed"
        As in ``lirs index``; ``record_size`` (and ``header_size``) select raw fixed records.

    Returns
    -------
    dict with ``records``, ``bytes`` (input record bytes), ``output_bytes``, ``format``, ``piles``
    (M), ``splits`` (piles split again), ``seconds_pass1``, ``seconds_pass2``, ``seconds``,
    ``memory``, ``peak_memory_estimate`` (bytes of buffers held at the fullest point),
    ``outputs`` (paths), ``labels`` (label files, npy), ``sidecars`` (with ``index``),
    ``skipped_lines``/``skipped_bytes`` (LIBSVM blank and comment-only lines),
    ``added_newlines``, ``seed`` and the memory plan.
    """
    from tqdm import tqdm

    from ..build import expand_paths, labels_path

    t_start = time.perf_counter()
    if shards is not None:
        if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
            raise UsageError(f"--shards must be a positive integer, got {shards!r}")
        shards = int(shards)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    if record_size is not None and (isinstance(record_size, bool) or int(record_size) <= 0):
        raise UsageError("--record-size must be a positive number of bytes")
    mem = parse_size(memory)
    if not out:
        raise UsageError("name the output with -o OUT")
    out = os.path.abspath(os.fspath(out))
    files = expand_paths(inputs)
    fmt = _detect(files, format, record_size)
    srcs, rs, dtype, shape, linfo = _sources(files, fmt, record_size, header_size)
    text = fmt in VARIABLE_FORMATS
    ls = linfo[2] if linfo else 0

    # where things go
    for p in files:
        if _same_file(p, out) or (linfo and _same_file(labels_path(out), p)):
            raise UsageError(f"output {out} is one of the inputs; write the shuffle to a new file")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise FileNotFoundError(2, "No such file or directory", parent)
    if shards is None:
        if os.path.isdir(out):
            raise UsageError(f"output {out} is a directory; name a file, or write shards into it with --shards K")
    else:
        if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
            raise UsageError(f"output {out} exists and is not an empty directory; --shards writes a new "
                             "directory of part files")
        for p in files:
            if os.path.commonpath([p, out]) == out:
                raise UsageError(f"input {p} lies inside the output directory {out}")
    tmpdir = os.path.abspath(tmpdir) if tmpdir else parent
    if not os.path.isdir(tmpdir):
        raise FileNotFoundError(2, "No such file or directory", tmpdir)

    # memory plan
    in_bytes = sum(s.end - s.start for s in srcs)
    if text:
        mean = _mean_text_record(srcs[0].path, srcs[0].end)
        pile_bytes = in_bytes + len(srcs)   # a newline may be added per input
        rr = 0
    else:
        rr = rs + ls
        mean = rr
        pile_bytes = sum(s.n for s in srcs) * rr
    max_piles = int(_max_piles or _fd_pile_limit())
    plan = plan_memory(pile_bytes, mean, mem, record_bytes=rr, label_ratio=(ls / rs if rs else 0.0),
                       index=index and text, validate=index and fmt == "libsvm", max_piles=max_piles)
    out_bytes = in_bytes + (sum(s.n for s in srcs) * ls if ls else 0) + (len(srcs) if text else 1 << 16)
    _check_space(tmpdir, parent, pile_bytes, out_bytes)

    disable = None if progress is None else not progress
    pid = os.getpid()
    pile_dir = tempfile.mkdtemp(prefix=".lirs-shuffle-", dir=tmpdir)
    direct_piles = _direct_ok(pile_dir)
    direct_out = _direct_ok(parent)
    block = BLOCK if direct_piles else 1
    stage = None                    # sharded output: the directory being filled
    shard_list: list[_Shard] = []
    output = None
    run = None
    pool = ThreadPoolExecutor(2) if index and text else None
    try:
        # ---- pass 1
        t1 = time.perf_counter()
        piles = _Piles(pile_dir, "p", plan.piles, max(plan.write_buffer, rr + block), direct_piles)
        try:
            with tqdm(total=in_bytes, unit="B", unit_scale=True, desc="lirs shuffle pass 1", disable=disable,
                      leave=False) as bar:
                dealer = _Dealer(fmt, piles, _key(seed, PURPOSE_PILES, ()), plan.chunk,
                                 skip_blank=(fmt == "libsvm"), rs=rs or 0, ls=ls,
                                 validate=plan.validate_piece if index and fmt == "libsvm" else 0,
                                 max_record=_max_line(plan, index) if text else None,
                                 bar=bar, memory=mem, pool=pool)
                for s in srcs:
                    dealer.deal(s)
            piles.finish()
        except BaseException:
            piles.close()
            raise
        t_pass1 = time.perf_counter() - t1
        n = int(piles.counts.sum())
        if n == 0:
            raise DataError(f"{files[0]}: no records found (only blank or comment lines)")
        if shards is not None and shards > n:
            raise UsageError(f"--shards {shards} is more than the {n} records")

        # ---- outputs
        ext = os.path.splitext(files[0])[1] if fmt != "npy" else ".npy"
        if shards is None:
            counts = [n]
            finals = [out]
            tmps = [os.path.join(parent, f".{os.path.basename(out)}.tmp-{pid}")]
        else:
            counts = [n // shards + (1 if k < n % shards else 0) for k in range(shards)]
            stage = os.path.join(parent, f".{os.path.basename(out)}.tmp-{pid}")
            os.mkdir(stage)
            names = _shard_names(out, shards, ext)
            finals = [os.path.join(out, nm) for nm in names]
            tmps = [os.path.join(stage, nm) for nm in names]
        for f, t, c in zip(finals, tmps, counts):
            sh = _Shard(final=f, tmp=t, count=c)
            if linfo is not None:
                sh.labels_final = labels_path(f)
                sh.labels_tmp = labels_path(t) if stage else os.path.join(
                    parent, f".{os.path.basename(labels_path(f))}.tmp-{pid}")
            if index:
                sh.sidecar = sidecar_path(f)
            shard_list.append(sh)

        def sidecar_tmp(s: _Shard) -> str:
            # sharded sidecars are written inside the staging directory, single ones in place
            return os.path.join(stage, os.path.basename(s.sidecar)) if stage else s.sidecar

        output = _Output(fmt, shard_list, plan, rs=rs or 0, ls=ls, dtype=dtype, shape=shape, linfo=linfo,
                         index=index, scratch=pile_dir, pool=pool, sidecar_tmp=sidecar_tmp, direct=direct_out)

        # ---- pass 2
        t2 = time.perf_counter()
        with tqdm(total=int(piles.nbytes.sum()), unit="B", unit_scale=True, desc="lirs shuffle pass 2",
                  disable=disable, leave=False) as bar:
            run = _Run(fmt, plan, seed, pile_dir, output, rs or 0, ls, bar, max_piles, direct_piles)
            run.emit(piles)
        if output.records != n or len(output.done) != len(shard_list):
            raise LirsError(f"wrote {output.records} of {n} records; the piles were changed during the shuffle")
        output.close()
        t_pass2 = time.perf_counter() - t2

        # ---- into place: labels before data, data before sidecars
        if stage is not None:
            for s in shard_list:  # sidecars inside the staging directory, naming the final paths
                if s.indexer is not None:
                    s.indexer, ix = None, s.indexer
                    ix.commit(s.data_end, s.tmp)
            os.replace(stage, out)
            stage = None
        else:
            for s in shard_list:
                if s.labels_tmp:
                    os.replace(s.labels_tmp, s.labels_final)
                os.replace(s.tmp, s.final)
        _fsync_dir(parent)
        for s in shard_list:
            if s.indexer is not None:
                s.indexer, ix = None, s.indexer
                ix.commit(s.data_end, s.final)
        if index and not text:
            from ..build import build  # nothing to scan: header, record size and count, labels

            for s in shard_list:
                build(s.final, format=fmt, record_size=rs if fmt == "fixed" else None,
                      out=s.sidecar, progress=False)
    except BaseException:
        if output is not None:
            try:
                output.close()
            except Exception:  # the original error matters more
                pass
        for s in shard_list:
            if s.indexer is not None:
                s.indexer.abort()
                s.indexer = None
            for p in (s.tmp, s.labels_tmp):
                if p and stage is None:
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        if run is not None:
            run.close()
        shutil.rmtree(pile_dir, ignore_errors=True)
        if pool is not None:
            pool.shutdown(wait=True)

    secs = time.perf_counter() - t_start
    peak1 = plan.pass1_bytes
    peak2 = run.peak_pile + plan.out_fixed
    stats = {
        "records": n,
        "bytes": int(in_bytes),
        "output_bytes": int(sum(os.path.getsize(s.final) for s in shard_list)),
        "format": fmt,
        "inputs": files,
        "outputs": [s.final for s in shard_list],
        "shards": shards,
        "seed": seed,
        "piles": plan.piles,
        "splits": run.splits,
        "split_bytes": run.split_bytes,
        "depth": run.max_depth,
        "direct_io": {"piles": direct_piles, "output": direct_out},
        "seconds_pass1": round(t_pass1, 4),
        "seconds_pass2": round(t_pass2, 4),
        "seconds": round(secs, 4),
        "memory": plan.memory,
        "peak_memory_estimate": int(max(peak1, peak2)),
        "pass1_memory_estimate": int(peak1),
        "pass2_memory_estimate": int(peak2),
        "plan": {"chunk": plan.chunk, "write_buffer": plan.write_buffer, "piles": plan.piles,
                 "pile_cap": plan.pile_cap, "out_buffer": plan.out_buffer,
                 "expected_pile": plan.expected_pile},
        "skipped_lines": int(dealer.info[K.INFO_SKIPPED_LINES]),
        "skipped_bytes": int(dealer.info[K.INFO_SKIPPED_BYTES]),
        "added_newlines": int(dealer.info[K.INFO_ADDED_NEWLINES]),
    }
    if linfo is not None:
        stats["labels"] = [s.labels_final for s in shard_list]
    if index:
        stats["sidecars"] = [s.sidecar for s in shard_list]
    log.info("shuffled %d records (%s) into %d file(s) in %.2fs (pass 1 %.2fs, pass 2 %.2fs, %d piles)",
             n, format_bytes(in_bytes), len(shard_list), secs, t_pass1, t_pass2, plan.piles)
    return stats


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
