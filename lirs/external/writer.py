"""Pass 2's sink: the output writer (shards, O_DIRECT whole blocks, labels, indexers)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..constants import BLOCK
from ..engines import aligned_empty
from ..index import VARIABLE_FORMATS
from ..kernels import external as K
from .disk import _pwrite_all, _write_all
from .formats import _npy_header
from .indexer import _TextIndexer
from .memory import MemoryPlan


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

