"""Pass 2's sink: shuffled records gathered into output buffers and written to the output files.

:class:`BlockWriter` writes one file at a time from two buffers (O_DIRECT in whole blocks where the
filesystem takes it); :class:`Output` gathers the records of each loaded pile into it, splits the
stream into shards and opens each shard's files: data, ``.npy`` labels, the sidecar's indexer.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..constants import BLOCK
from ..kernels import external as K
from ..kernels import tfrecord as KT
from .disk import alloc, create, pwrite_all, round_up, write_all
from .formats import Dataset, npy_header
from .indexer import TextIndexer
from .memory import MemoryPlan


@dataclass
class Shard:
    """One output file: where it is written, where it ends up, its record count and companions."""

    final: str               # where the data file ends up
    tmp: str                 # where it is written
    count: int               # records
    labels_final: str | None = None
    labels_tmp: str | None = None
    sidecar: str | None = None       # where the sidecar ends up (--index)
    sidecar_tmp: str | None = None   # where the sidecar is written (sealed before the renames)
    indexer: TextIndexer | None = None  # waits for the data to be in place
    data_end: int = 0
    size: int = 0            # the data file's bytes as written (taken before it is published)


class BlockWriter:
    """Writes one file at a time from two buffers on a background thread: one buffer fills while
    the other is written.

    With ``direct`` the file is written with O_DIRECT in whole blocks: the partial last block of a
    buffer is carried to the front of the other buffer, and the file's last block is zero-padded,
    then cut to its true size with ftruncate. Two label buffers (uint8, ``label_cap`` bytes) travel
    with the data buffers and go to their own file; the indexer, when set, sees the bytes
    ``buf[rec0:pos]`` of each buffer before they are written, in file order.
    """

    def __init__(self, cap: int, label_cap: int, direct: bool):
        self.direct = direct
        self.block = BLOCK if direct else 1
        self.cap = round_up(cap, self.block)
        self.bufs = [alloc(self.cap, direct), alloc(self.cap, direct)]
        self.lbufs = [np.empty(label_cap, np.uint8), np.empty(label_cap, np.uint8)]
        self.cur = 0
        self.pos = 0            # bytes in the current buffer
        self.rec0 = 0           # first byte of the current buffer not indexed yet
        self.lpos = 0           # bytes in the current label buffer
        self.fileoff = 0        # file offset of the current buffer's first byte
        self.fd = self.lfd = None
        self.indexer: TextIndexer | None = None
        self.pending = [None, None]
        self.thread = ThreadPoolExecutor(1)

    def start(self, fd: int, head: bytes = b"") -> None:
        """Write a new file to ``fd``, beginning with ``head`` (not indexed)."""
        self.fd = fd
        self.fileoff = self.pos = self.rec0 = self.lpos = 0
        if head:
            h = np.frombuffer(head, np.uint8)
            self.bufs[self.cur][:h.size] = h
            self.pos = self.rec0 = int(h.size)

    def end(self) -> int:
        """Write the rest of the file, cut its padding, fsync and close it and its label file;
        returns the file's size."""
        size = self.fileoff + self.pos
        self.flush(final=True)
        self.wait()
        if self.direct and size % self.block:
            os.ftruncate(self.fd, size)  # drop the padding of the last block
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        if self.lfd is not None:
            os.fsync(self.lfd)
            os.close(self.lfd)
            self.lfd = None
        return size

    @staticmethod
    def _job(fd, buf, n, off, indexer, lo, hi, lfd, lbuf, ln):
        if indexer is not None and hi > lo:
            indexer.add(buf[lo:hi], hi - lo, off + lo)
        if n:
            pwrite_all(fd, buf[:n], off)
        if lfd is not None and ln:
            write_all(lfd, lbuf[:ln])

    def flush(self, final: bool = False) -> None:
        """Hand the current buffer's whole blocks (all of it, padded, when ``final``) to the writer;
        the rest moves to the other buffer once that one is on disk."""
        n = self.pos
        if final:
            a = round_up(n, self.block)
            self.bufs[self.cur][n:a] = 0
        else:
            a = n - n % self.block
        if a == 0 and self.rec0 == n and not self.lpos:
            return
        i = self.cur
        self.pending[i] = self.thread.submit(self._job, self.fd, self.bufs[i], a, self.fileoff, self.indexer,
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

    def wait(self) -> None:
        """Wait for both buffers' writes (a write error surfaces here)."""
        for i in (0, 1):
            f = self.pending[i]
            if f is not None:
                self.pending[i] = None
                f.result()

    def long_line(self, src: np.ndarray, s: int, e: int) -> None:
        """A line ``src[s:e]`` longer than a buffer: index it whole, then stream it through the
        buffers."""
        self.flush()
        self.wait()  # the index sees records in order
        if self.indexer is not None:
            self.indexer.add(src[s:e], e - s, self.fileoff + self.pos)
        while s < e:
            k = min(self.cap - self.pos, e - s)
            self.bufs[self.cur][self.pos:self.pos + k] = src[s:s + k]
            self.pos += k
            self.rec0 = self.pos
            s += k
            if self.pos == self.cap:
                self.flush()

    def close(self) -> None:
        """Stop the thread, close what is open and drop an unfinished index (also after an error)."""
        self.thread.shutdown(wait=True)
        for fd in (self.fd, self.lfd):
            if fd is not None:
                os.close(fd)
        self.fd = self.lfd = None
        if self.indexer is not None:
            self.indexer.abort()
            self.indexer = None


class Output:
    """Pass 2's sink: gathers shuffled records into the :class:`BlockWriter`'s buffers, starts a
    new shard after every ``Shard.count`` records, and feeds the indexers (text outputs with
    ``index``). Finished shards are in ``done``, with their indexer waiting for the data to be in
    place.
    """

    def __init__(self, ds: Dataset, shards: list[Shard], plan: MemoryPlan, *, index: bool = False,
                 scratch: str | None = None, pool=None, direct: bool = False):
        self.ds, self.shards, self.plan = ds, shards, plan
        self.text, self.rs, self.ls = ds.text, ds.rs, ds.ls
        self.index, self.scratch, self.pool = index and ds.text, scratch, pool
        self.direct = direct
        block = BLOCK if direct else 1
        ob = round_up(max(plan.out_buffer, self.rs + 2 * block), block)
        nl = (ob // self.rs + 1) * self.ls if (not self.text and self.ls) else 0
        self.w = BlockWriter(ob, nl, direct)
        self.k = -1             # current shard
        self.left = 0           # records still to write into it
        self.done: list[Shard] = []
        self.records = 0

    def _open_shard(self) -> None:
        self.k += 1
        s = self.shards[self.k]
        self.left = s.count
        ds, w = self.ds, self.w
        head = npy_header(ds.dtype, (s.count,) + tuple(ds.shape)) if ds.fmt == "npy" else b""
        w.start(create(s.tmp, self.direct), head)
        if ds.linfo is not None:
            ldt, lshape, _ = ds.linfo
            w.lfd = create(s.labels_tmp, False)
            write_all(w.lfd, npy_header(ldt, (s.count,) + tuple(lshape)))
        if self.index:
            w.indexer = TextIndexer(ds.fmt, s.tmp, s.final, s.sidecar_tmp, s.sidecar, self.scratch,
                                    self.plan.out_buffer, self.pool,
                                    label_block=max(1 << 12, self.plan.out_buffer // 8),
                                    format_given=ds.fmt if ds.given else None)

    def _close_shard(self) -> None:
        s = self.shards[self.k]
        s.data_end = self.w.end()
        s.indexer, self.w.indexer = self.w.indexer, None
        self.done.append(s)

    def put(self, src: np.ndarray, offs: np.ndarray) -> None:
        """Append the records of ``src`` (a loaded pile, uint8) in the order of ``offs`` (int64
        record starts in ``src``)."""
        w = self.w
        i, r = 0, offs.shape[0]
        while i < r:
            if self.left == 0:
                self._open_shard()
            i_end = min(r, i + self.left)
            buf = w.bufs[w.cur]
            if self.text:
                i2, w.pos = K.gather_lines(src, offs, i, i_end, buf, w.pos)
            elif self.ds.fmt == "tfrecord":
                i2, w.pos = KT.gather_records(src, offs, i, i_end, buf, w.pos)
            else:
                i2, w.pos, w.lpos = K.gather_fixed(src, offs, i, i_end, self.rs, self.ls, buf, w.pos,
                                                   w.lbufs[w.cur], w.lpos)
            if i2 == i:
                if w.pos >= w.block or w.pos > w.rec0:
                    w.flush()  # room for the next record
                    continue
                s = int(offs[i])
                if self.ds.fmt == "tfrecord":
                    w.long_line(src, s, s + int(KT.record_length(src, s)))
                else:
                    nl = K.find_newline(src, s, src.shape[0])
                    w.long_line(src, s, src.shape[0] if nl < 0 else nl + 1)
                i2 = i + 1
            self.left -= i2 - i
            self.records += i2 - i
            i = i2
            if i < i_end:
                w.flush()
            if self.left == 0:
                self._close_shard()

    def close(self) -> None:
        """Release the writer (files still open after an error are closed, an unfinished index
        dropped)."""
        self.w.close()
