"""Content checksums of a data file: one CRC-32C per block of SUM_BLOCK bytes, computed while the
index scan reads the file anyway, and checked again (a sequential read at device bandwidth) when
the file's size or modification time moved since it was indexed.

An exact answer at the cost of one read: a same-size edit anywhere (a digit, a label, a moved
newline) changes its block's CRC, ``touch`` or a byte-identical copy does not. The last block of a
file is summed over the bytes it has (a partial block), so an append is told from an edit: every
block of the old length still matches.
"""
from __future__ import annotations

import logging
import os
import threading

import numpy as np

from .constants import BLOCK
from .inputs import cached
from .preads import pread_into

log = logging.getLogger("lirs.index")

SUM_BLOCK = 1 << 20  # bytes per checksum: 4 B of sidecar per MiB of data
_VERIFY_CHUNK = 16 << 20  # per read with O_DIRECT: large, for the device
_CACHED_CHUNK = 4 << 20  # per pread from the page cache: small enough to be summed from the CPU cache
_BAR_BYTES = 256 << 20  # a progress bar only for files whose check takes a noticeable time


def _crc_kernel():
    from .kernels import tfrecord as K  # numba loads only when a file is summed

    return K


def block_count(size: int) -> int:
    """Checksums of a file of ``size`` bytes (the last block may be partial)."""
    return (int(size) + SUM_BLOCK - 1) // SUM_BLOCK


class BlockSums:
    """CRC-32C of consecutive SUM_BLOCK blocks of a stream fed in order from byte ``start`` (a
    multiple of SUM_BLOCK) with :meth:`feed`; :meth:`finish` sums the last, partial block.
    ``sums``: the completed checksums (uint32), block ``start // SUM_BLOCK`` first."""

    def __init__(self, start: int = 0):
        if start % SUM_BLOCK:
            raise ValueError(f"sums start at a block boundary, not {start}")
        self.K = _crc_kernel()
        self.pos = int(start)  # next byte expected
        self.crc = 0
        self.out: list[int] = []

    def feed(self, buf: np.ndarray, lo: int, hi: int, off: int) -> None:
        """Sum buf[lo:hi] (uint8), the bytes of the file at ``off``; bytes before :attr:`pos` are
        skipped (a chunk read from an aligned start before the first byte wanted)."""
        if off < self.pos:
            lo += self.pos - off
            off = self.pos
        if off != self.pos:
            raise ValueError(f"sums fed out of order: byte {off}, expected {self.pos}")
        K = self.K
        whole = (hi - lo - (-self.pos % SUM_BLOCK)) // SUM_BLOCK if self.pos % SUM_BLOCK == 0 else 0
        if whole >= 2:  # whole blocks are independent: one per core (the kernel releases the GIL)
            starts = [lo + i * SUM_BLOCK for i in range(whole)]
            self.out += list(_pool().map(lambda a: int(K.crc32c_update(K.TABLE, K.HW, buf, a, a + SUM_BLOCK, 0)),
                                         starts))
            lo += whole * SUM_BLOCK
            self.pos += whole * SUM_BLOCK
        while lo < hi:
            room = SUM_BLOCK - self.pos % SUM_BLOCK
            take = min(room, hi - lo)
            self.crc = int(K.crc32c_update(K.TABLE, K.HW, buf, lo, lo + take, self.crc))
            lo += take
            self.pos += take
            if take == room:
                self.out.append(self.crc)
                self.crc = 0

    def finish(self) -> np.ndarray:
        """The checksums of all blocks fed (uint32 (k,)), the partial last one included."""
        if self.pos % SUM_BLOCK:
            self.out.append(self.crc)
            self.crc = 0
            self.pos += SUM_BLOCK - self.pos % SUM_BLOCK
        return np.asarray(self.out, np.uint32)


_LOCAL = threading.local()


def _cores() -> int:
    from .cores import usable_cores

    return max(1, usable_cores())


def _pool(kind: str = "crc"):
    """Threads that checksum whole blocks in parallel (one per usable core); ``kind`` "check":
    those of the checks of old bytes, apart, so that a scan's sums never wait behind a check
    running beside it (:func:`check_in_background`)."""
    from .parallel import shared_pool

    return shared_pool(kind)


def _bar(total: int, desc: str):
    from .units import progress_bar

    return progress_bar(total, desc, min_total=_BAR_BYTES)  # long files only, never into a log or a pipe


def first_changed_block(path: str, sums: np.ndarray, size: int, *, direct: bool | None = None) -> int | None:
    """Read the first ``size`` bytes of ``path`` (its length when indexed) and compare them with
    their checksums ``sums`` (uint32, ``block_count(size)``); the number of the first block that
    differs, or None when all match. Stops at the first difference. OSError of a failed read names
    the file and byte; a file now shorter than ``size`` differs at its end. ``direct``: O_DIRECT
    reads (None: unless the file is in the page cache, :func:`cached`)."""
    from .inputs import read_chunks

    now = os.path.getsize(path)
    end = min(int(size), now)
    if direct is None:
        direct = not cached(path, end)
    if not direct:
        return _first_changed_cached(path, sums, size, end)
    acc = BlockSums()
    checked = 0
    with _bar(end, f"lirs: checking {os.path.basename(path)}") as bar:
        for buf, nb, off in read_chunks(path, 0, end, _VERIFY_CHUNK, direct=direct):
            acc.feed(buf, 0, nb, off)
            while checked < len(acc.out):
                if acc.out[checked] != int(sums[checked]):
                    return checked
                checked += 1
            bar.update(nb)
    if end < size:
        return end // SUM_BLOCK  # the file was cut: its first missing byte
    last = acc.finish()
    for b in range(checked, len(last)):
        if int(last[b]) != int(sums[b]):
            return b
    return None


_CHECKER = None


def _forget_threads() -> None:
    """In a forked child: the parent's checker thread does not exist here, and a pool that believes
    it does would queue work nobody runs (a DataLoader worker indexing on first use would hang;
    the shared pools are forgotten by :mod:`lirs.parallel`)."""
    global _CHECKER
    _CHECKER = None


os.register_at_fork(after_in_child=_forget_threads)


def check_in_background(path: str, sums: np.ndarray, size: int):
    """:func:`first_changed_block` of ``path`` started on a thread of its own; a Future of its
    answer (the incremental index goes on as if nothing changed and asks before it commits)."""
    global _CHECKER
    if _CHECKER is None:
        from concurrent.futures import ThreadPoolExecutor

        _CHECKER = ThreadPoolExecutor(1, thread_name_prefix="lirs-check")
    return _CHECKER.submit(first_changed_block, path, sums, size)


def _chunk_sums(fd: int, path: str, lo: int, hi: int) -> list[int]:
    """The checksums of the blocks of bytes [lo, hi) of ``fd`` (lo a block boundary), read with
    pread (short reads continued; a failed one names the file and byte)."""
    K = _crc_kernel()
    # one block-sized buffer per thread, kept: fresh memory costs a page fault per 4 KiB, and a
    # block copied out of the cache is summed while it is still in the CPU's cache
    buf = getattr(_LOCAL, "buf", None)
    if buf is None:
        buf = _LOCAL.buf = np.empty(SUM_BLOCK, np.uint8)
    out = []
    view = memoryview(buf)
    cut = False  # the file ended before hi: the blocks past its end differ
    for a in range(lo, hi, SUM_BLOCK):
        want = min(SUM_BLOCK, hi - a)
        got = 0 if cut else pread_into(fd, view[:want], a, path)
        out.append(int(K.crc32c_update(K.TABLE, K.HW, buf, 0, got, 0)) if got else -1)
        cut = got < want
    return out


def _first_changed_cached(path: str, sums: np.ndarray, size: int, end: int) -> int | None:
    """:func:`first_changed_block` of a file in the page cache: chunks read and summed by one
    thread per core (the copy out of the cache and the CRC both run in parallel)."""
    step = _CACHED_CHUNK
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        pool = _pool("check")
        starts = list(range(0, end, step))
        ahead = 2 * _cores()
        futs = {i: pool.submit(_chunk_sums, fd, path, starts[i], min(starts[i] + step, end))
                for i in range(min(ahead, len(starts)))}
        with _bar(end, f"lirs: checking {os.path.basename(path)}") as bar:
            for i, lo in enumerate(starts):
                got = futs.pop(i).result()
                if i + ahead < len(starts):
                    j = i + ahead
                    futs[j] = pool.submit(_chunk_sums, fd, path, starts[j], min(starts[j] + step, end))
                for k, c in enumerate(got):
                    b = lo // SUM_BLOCK + k
                    if c != int(sums[b]):
                        for f in futs.values():
                            f.cancel()
                        for f in futs.values():  # none may read fd after it is closed
                            if not f.cancelled():
                                f.exception()
                        return b
                bar.update(min(step, end - lo))
    finally:
        os.close(fd)
    return end // SUM_BLOCK if end < size else None


def sum_file(path: str, *, direct: bool = True) -> np.ndarray:
    """The checksums of the whole file ``path`` (uint32 (block_count(size),)): for formats whose
    index needs no scan (npy, fixed records), one sequential read."""
    from .inputs import read_chunks

    size = os.path.getsize(path)
    acc = BlockSums()
    with _bar(size, f"lirs: summing {os.path.basename(path)}") as bar:
        for buf, nb, off in read_chunks(path, 0, size, _VERIFY_CHUNK, direct=direct):
            acc.feed(buf, 0, nb, off)
            bar.update(nb)
    return acc.finish()


def changed_range(block: int, size: int) -> str:
    """The byte range of checksum block ``block`` in a file of ``size`` bytes, for messages."""
    lo = block * SUM_BLOCK
    hi = min(lo + SUM_BLOCK, int(size))
    return f"bytes {lo}-{max(lo, hi - 1)}"


assert SUM_BLOCK % BLOCK == 0  # verify reads start aligned for O_DIRECT
