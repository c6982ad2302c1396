"""Pass 1 of `lirs shuffle` (and every re-split): deal records to piles on disk.

A record's pile is drawn by the kernels from (key, record number) alone, so the piles do not depend
on chunk or buffer sizes. :class:`Piles` owns the pile files and their write buffers,
:class:`Dealer` streams the inputs through them.
"""
from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..inputs import read_chunks
from ..constants import BLOCK
from ..errors import UsageError
from ..index import VARIABLE_FORMATS
from ..kernels import external as K
from ..kernels import scan as KS
from ..kernels import tfrecord as KT
from ..tfrecord import TFRecordScanner
from ..units import format_bytes
from .disk import alloc, create, pwrite_all, round_up
from .formats import Source, libsvm_checker
from .memory import SPARE_SLOTS


class Piles:
    """``m`` pile files (``DIR/NAME-j.pile``) with their write buffers; ``counts`` (records) and
    ``nbytes`` (true bytes) per pile, int64 (m,).

    There are ``m + SPARE_SLOTS`` buffer slots of ``w`` bytes (one uint8 array ``buf``): a full pile buffer goes to a writer
    thread and the pile continues in a free slot, so dealing overlaps writing. With ``direct``
    the files are written with O_DIRECT in whole 4 KiB blocks (no page-cache copy: on this class of
    machine buffered writes are the slowest step): a buffer's partial last block moves to the
    pile's next slot, and each pile's final block is zero-padded (``nbytes`` is the true length).
    """

    def __init__(self, dirpath: str, name: str, m: int, w: int, direct: bool = False):
        self.block = BLOCK if direct else 1
        self.m = int(m)
        self.w = round_up(w, self.block)
        self.paths = [os.path.join(dirpath, f"{name}-{j}.pile") for j in range(self.m)]
        self.fds: list[int] = []
        nslots = self.m + SPARE_SLOTS
        self.buf = alloc(nslots * self.w, direct)
        self.slots = np.arange(self.m, dtype=np.int64)     # pile -> the slot it fills
        self.free = list(range(self.m, nslots))
        self.pending: list = []                            # (future, slot) in submission order
        self.fill = np.zeros(self.m, np.int64)
        self.counts = np.zeros(self.m, np.int64)
        self.nbytes = np.zeros(self.m, np.int64)
        self.off = [0] * self.m                            # bytes written to each pile file
        self.writer = ThreadPoolExecutor(1)
        try:
            for p in self.paths:
                self.fds.append(create(p, direct, 0o600))
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
        self.pending.append((self.writer.submit(pwrite_all, self.fds[p], self.buf[s * w:s * w + n], self.off[p]),
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
        """Wait for every write handed to the writer thread."""
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
        """Write what the slots still hold (the last block zero-padded) and close the files."""
        for p in range(self.m):
            n = int(self.fill[p])
            if n:
                padded = round_up(n, self.block)
                s = int(self.slots[p])
                self.buf[s * self.w + n:s * self.w + padded] = 0
                self.fill[p] = padded
                self._submit(p, padded)
        self.drain()
        self.close()

    def close(self) -> None:
        """Stop the writer thread and close the files (also after an error); keeps the files."""
        self.writer.shutdown(wait=True)
        self.pending = []
        while self.fds:
            os.close(self.fds.pop())
        self.buf = None


class Dealer:
    """Pass 1 (and every re-split): stream sources and deal their records to a set of piles.

    ``key`` (uint64) seeds the pile draws; record i of the stream (``counter``, across sources) goes
    to the pile the kernels draw for (key, i). Text: ``skip_blank`` drops blank and comment-only
    lines (LIBSVM), ``validate`` (a piece size in bytes, 0 = off) checks LIBSVM syntax on the way,
    ``max_record`` bounds a line. Fixed: ``rs`` record bytes followed by ``ls`` label bytes in the
    piles. ``info`` int64 (3,): skipped lines, skipped bytes, added newlines (``K.INFO_*``).
    """

    def __init__(self, fmt: str, piles: Piles, key: int, chunk: int, *, skip_blank=False, rs=0, ls=0,
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
            self.validator = libsvm_checker(self.piece, pool)

    # ---- text ---------------------------------------------------------------------------
    def _check(self, path, buf, lo, hi, base):
        """LIBSVM check of complete lines (errors name the input file, line and byte)."""
        a = lo
        while a < hi:
            b = hi
            if hi - a > self.piece:
                nl = K.find_newline(buf, a + self.piece, hi)
                b = hi if nl < 0 else nl + 1
            self.validator.scan_region(path, buf, a, b, base)
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

    def deal_text(self, src: Source) -> None:
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
    def deal_fixed(self, src: Source) -> None:
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

    # ---- tfrecord -----------------------------------------------------------------------
    def deal_tfrecord(self, src: Source) -> None:
        """Deal whole TFRecord records (framing and both CRCs checked on the way: a corrupt input
        stops the shuffle with the file, record and byte)."""
        sc = TFRecordScanner("tfrecord", None, None, self.chunk, self.bar, None,
                             sink=lambda buf, base, starts, end: self._records(src.path, buf, base, starts, end))
        sc.scan_range(src.path, src.start, src.end)

    def _records(self, path, buf, base, starts, end):
        P = self.piles
        i, k = 0, starts.shape[0]
        while i < k:
            i, self.counter, status, p = KT.scatter_records(
                buf, starts, i, k, base, end, self.key, self.counter, P.m, P.buf, P.w, P.wmax, P.slots,
                P.fill, P.counts, P.nbytes)
            if status == K.DONE:
                return
            if status == K.FLUSH:
                P.flush(p)
                continue
            s, e = int(starts[i]), int(starts[i + 1]) if i + 1 < k else end
            if self.max_record and e - s > self.max_record:
                raise UsageError(f"{path}: the record at byte {s} has {format_bytes(e - s)}, more than --memory "
                                 f"{format_bytes(self.memory)} can shuffle; raise --memory")
            P.write_big(p, buf[s - base:e - base], False)
            self.counter += 1
            i += 1

    def deal(self, src: Source) -> None:
        """Deal every record of ``src`` to the piles (their writes may still be in flight)."""
        if self.fmt == "tfrecord":
            self.deal_tfrecord(src)
        elif self.fmt in VARIABLE_FORMATS:
            self.deal_text(src)
        else:
            self.deal_fixed(src)

    def _progress(self, nb):
        if self.bar is not None:
            self.bar.update(nb)
