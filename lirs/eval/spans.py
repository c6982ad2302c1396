"""Sequential I/O of the baselines, in one place: where the records of one file lie
(:class:`Records`), reading runs of back-to-back records with one aligned direct read each
(:class:`SpanReader`), running those reads ahead of the consumer on threads (:class:`Ahead`,
:class:`Prefetch`), gathering rows of several runs into one batch (:func:`take_rows`) and BMF's
one-off rewrite of the file into blocks (:func:`write_blocks`).

Used by the peers of ``lirs bench`` (:mod:`lirs.eval.peers`) and the SVM baselines
(:mod:`lirs.eval.compare`): both read the same way, so they are measured the same way.
"""
from __future__ import annotations

import collections
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from ..constants import BLOCK
from ..decode import decode_fixed, decode_libsvm, decode_lines, decode_tfrecord, resolve_libsvm_params
from ..engines import aligned_empty, open_engine
from ..errors import DataError
from ..litter import remove_quietly, temp_name
from .kernels import train as K


def run_ranges(n: int, per: int):
    """``(a, b)`` of consecutive runs of ``per`` records covering [0, n) (the last one shorter)."""
    for a in range(0, n, per):
        yield a, min(n, a + per)


def records_per_run(index, run_bytes: int) -> int:
    """Records in a run of about ``run_bytes`` (at the mean record size; at least 1)."""
    return max(1, int(run_bytes // max(1.0, index.payload_bytes / max(index.n, 1))))


class Records:
    """Where the records of one file lie and how to decode them.

    Variable formats keep ``starts``/``ends`` int64 (n,) (default: the index's own bounds); fixed
    formats compute spans from ``first`` (offset of record 0) and ``rs`` (record size). ``path``
    (default: the index's file) may name a rewritten copy, with its own ``starts``/``ends``.
    LIBSVM values decode as ``dtype``.
    """

    def __init__(self, index, path=None, starts=None, ends=None, first=None, dtype=np.float32):
        self.index = index
        self.path = path or index.paths[0]
        self.fmt = index.format
        self.n = int(index.n)
        self.dtype = dtype
        if index.is_fixed:
            self.rs = int(index.record_size)
            self.first = int(index.header_sizes[0]) if first is None else int(first)
            self.starts = self.ends = None
        else:
            self.rs = None
            if starts is None:
                starts, ends = index.bounds()
            self.starts = np.ascontiguousarray(starts, np.int64)
            self.ends = np.ascontiguousarray(ends, np.int64)
        if self.fmt == "libsvm":
            self.n_features, self.zero_based = resolve_libsvm_params(index)

    def span(self, a: int, b: int) -> tuple[int, int]:
        """Byte range [lo, hi) of records a..b-1 (back to back in the file)."""
        if self.rs is not None:
            return self.first + a * self.rs, self.first + b * self.rs
        return int(self.starts[a]), int(self.ends[b - 1])

    def bounds(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """int64 (b-a,) starts and ends of records a..b-1."""
        if self.rs is not None:
            s = self.first + np.arange(a, b, dtype=np.int64) * self.rs
            return s, s + self.rs
        return self.starts[a:b], self.ends[a:b]

    def nbytes(self, pos: np.ndarray) -> int:
        """Bytes of the records at positions ``pos`` (int64 array)."""
        if self.rs is not None:
            return len(pos) * self.rs
        return int((self.ends[pos] - self.starts[pos]).sum())

    def decode(self, buf, lo: int, a: int, b: int, ids=None):
        """(X, y) of records a..b-1 found in ``buf`` (which starts at file byte ``lo``); ``ids``
        int64 (b-a,) names them in error messages (default a..b-1). y is None where the format
        holds no labels."""
        ids = np.arange(a, b, dtype=np.int64) if ids is None else ids
        st, en = self.bounds(a, b)
        if self.rs is not None:
            return decode_fixed(buf, st - lo, self.index.record_dtype, self.index.record_shape), None
        if self.fmt == "libsvm":
            return decode_libsvm(buf, st - lo, en - lo, n_features=self.n_features, zero_based=self.zero_based,
                                 dtype=self.dtype, source=self.path, file_offsets=st, record_ids=ids)
        if self.fmt == "tfrecord":  # the payloads, as the Loader serves them (length CRCs checked)
            return decode_tfrecord(buf, st - lo, en - lo, source=self.path, file_offsets=st, record_ids=ids), None
        return decode_lines(buf, st - lo, en - lo), None


class SpanReader:
    """Reads runs of back-to-back records with one aligned direct read each and decodes them.
    Safe to call from several threads at once (one read buffer per thread); counts ``reads`` and
    ``bytes_read``."""

    def __init__(self, recs: Records, engine: str = "auto"):
        self.recs = recs
        self.eng = open_engine([recs.path], engine)
        self.reads = 0
        self.bytes_read = 0
        self._local = threading.local()
        self._lock = threading.Lock()

    def read_raw(self, a: int, b: int, buf=None):
        """The bytes of records a..b-1: ``(buf, lo)``, ``buf`` uint8 starting at file byte ``lo``
        (aligned down to the block). Raises DataError when the file ends early."""
        lo, hi = self.recs.span(a, b)
        alo = lo // BLOCK * BLOCK
        ahi = -(-hi // BLOCK) * BLOCK
        if buf is None:
            buf = getattr(self._local, "buf", None)
            if buf is None or len(buf) < ahi - alo:
                # a quarter more than asked: runs vary in size, and each growth is a fresh allocation
                buf = self._local.buf = aligned_empty(int((ahi - alo) * 1.25) // BLOCK * BLOCK + BLOCK)
        got = int(self.eng.read(np.zeros(1, np.int32), np.array([alo], np.int64), np.array([ahi - alo], np.int64),
                                buf, np.zeros(1, np.int64))[0])
        with self._lock:
            self.reads += 1
            self.bytes_read += got
        if alo + got < hi:
            raise DataError(f"{self.recs.path}: needs bytes up to {hi} but the file ends at {alo + got} "
                            "(changed after indexing?)")
        return buf[:got], alo

    def read(self, a: int, b: int, ids=None):
        """(X, y) of records a..b-1 (``ids``: their record IDs, for error messages)."""
        buf, lo = self.read_raw(a, b)
        return self.recs.decode(buf, lo, a, b, ids)

    def runs(self, ranges, workers: int = 2, depth: int = 4):
        """Generator of ``(a, b, X, y)`` for every ``(a, b)`` of ``ranges``, in order, read on
        ``workers`` threads ``depth`` runs ahead of the consumer."""
        return iter(Ahead(((lambda a=a, b=b: (a, b, *self.read(a, b))) for a, b in ranges), workers, depth))

    def close(self):
        self.eng.close()


class Ahead:
    """Run zero-argument callables on ``workers`` threads, up to ``depth`` ahead of the consumer,
    and yield their results in submission order (read + decode overlapping compute, parallel like
    the Loader's). ``wait_s``: time the consumer spent waiting for results."""

    def __init__(self, tasks, workers: int = 2, depth: int = 4):
        self.tasks = iter(tasks)
        self.workers = max(1, int(workers))
        self.depth = max(1, int(depth))
        self.wait_s = 0.0

    def __iter__(self):
        ex = ThreadPoolExecutor(self.workers, thread_name_prefix="lirs-eval-read")
        futs = collections.deque()
        try:
            for task in self.tasks:
                futs.append(ex.submit(task))
                if len(futs) > self.depth:  # keep `depth` loading while the consumer works
                    yield self._take(futs)
            while futs:
                yield self._take(futs)
        finally:
            for f in futs:
                f.cancel()
            ex.shutdown(wait=True)

    def _take(self, futs):
        t = time.perf_counter()
        r = futs.popleft().result()
        self.wait_s += time.perf_counter() - t
        return r


class Prefetch:
    """Run a generator on a thread, ``depth`` items ahead of the consumer (loading overlaps compute,
    as the Loader's prefetch does for lirs). ``wait_s``: time the consumer spent waiting."""

    _END = object()

    def __init__(self, gen, depth: int = 4):
        self.q = queue.Queue(max(1, depth))
        self.stop = threading.Event()
        self.wait_s = 0.0
        self.t = threading.Thread(target=self._run, args=(gen,), daemon=True, name="lirs-train-prefetch")
        self.t.start()

    def _run(self, gen):
        try:
            for item in gen:
                if self.stop.is_set():
                    break
                self.q.put((True, item))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self.q.put((False, e))
            return
        finally:
            gen.close()
        self.q.put((True, self._END))

    def __iter__(self):
        done = False
        try:
            while True:
                t = time.perf_counter()
                ok, item = self.q.get()
                self.wait_s += time.perf_counter() - t
                if not ok:
                    done = True
                    raise item
                if item is self._END:
                    done = True
                    return
                yield item
        finally:
            self.stop.set()
            # left early: take items until the producer, which sees `stop` after at most one more
            # item, says it ended (it may be blocked on the full queue)
            while not done:
                ok, item = self.q.get()
                done = not ok or item is self._END
            self.t.join()


def take_rows(parts, k: int, like):
    """Rows gathered from several decoded pieces into one batch of ``k`` rows.

    ``parts``: list of ``(X, rows int64 (m,), dest int64 (m,))``: row ``rows[i]`` of ``X`` goes to
    output row ``dest[i]``. ``like``: one of the X (gives the kind, dtype and width).
    CSR matrices (via a kernel), ndarrays (k, ...) and lists are supported.
    """
    if isinstance(like, list):
        out = [None] * k
        for X, rows, dest in parts:
            for r, d in zip(rows.tolist(), dest.tolist()):
                out[d] = X[r]
        return out
    if isinstance(like, np.ndarray):
        out = np.empty((k, *like.shape[1:]), like.dtype)
        for X, rows, dest in parts:
            out[dest] = X[rows]
        return out
    lens = np.empty(k, np.int64)
    for X, rows, dest in parts:
        lens[dest] = X.indptr[rows + 1] - X.indptr[rows]
    indptr = np.zeros(k + 1, np.int64)
    np.cumsum(lens, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), like.indices.dtype)
    data = np.empty(int(indptr[-1]), like.data.dtype)
    for X, rows, dest in parts:
        K.csr_take_rows(X.indptr, X.indices, X.data, rows, dest, indptr, indices, data)
    return sp.csr_matrix((data, indices, indptr), shape=(k, like.shape[1]))


def rewrite(src: Records, dst_of: np.ndarray, out_path: str, engine: str = "auto", run_bytes: int = 8 << 20) -> None:
    """Write every record of ``src`` to byte ``dst_of[i]`` (int64 (n,)) of ``out_path``: the file is
    read in order (direct reads of about ``run_bytes``), each run's records are sorted by
    destination and written as contiguous stretches; then fsync. Atomic: a temporary name of this
    process and thread (:func:`lirs.litter.temp_name`), then rename: two runs rewriting one file
    never write into each other's temporary, and one a killed run leaves is removed by the next."""
    rd = SpanReader(src, engine)
    tmp = temp_name(out_path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    ok = False
    try:
        buf = aligned_empty(BLOCK)
        for a, b in run_ranges(src.n, records_per_run(src.index, run_bytes)):
            lo, hi = src.span(a, b)
            need = -(-hi // BLOCK) * BLOCK - lo // BLOCK * BLOCK
            if len(buf) < need:
                buf = aligned_empty(need)
            data, alo = rd.read_raw(a, b, buf)
            _scatter(fd, data, alo, *src.bounds(a, b), dst_of[a:b])
        os.fsync(fd)
        ok = True
    finally:
        os.close(fd)
        rd.close()
        if ok:
            os.replace(tmp, out_path)
        else:
            remove_quietly(tmp)


def _scatter(fd: int, buf, lo: int, starts, ends, dst) -> None:
    """Write records [starts[i], ends[i]) of ``buf`` (file byte ``lo`` at buf[0]) to ``dst[i]`` of
    ``fd``, sorted by destination so that back-to-back destinations become one write."""
    o = np.argsort(dst, kind="stable")
    ss, ee, dst = starts[o] - lo, ends[o] - lo, dst[o]
    out = np.empty(int((ee - ss).sum()), np.uint8)
    K.gather_spans(buf, ss, ee, out)
    ln = ee - ss
    brk = np.flatnonzero(dst[1:] != dst[:-1] + ln[:-1]) + 1
    cuts = np.concatenate([[0], brk, [len(dst)]])
    off = np.concatenate([[0], np.cumsum(ln)])
    for c0, c1 in zip(cuts[:-1], cuts[1:]):
        os.pwrite(fd, memoryview(out[off[c0]:off[c1]]), int(dst[c0]))


def write_blocks(index, layout: list, path: str, engine: str = "auto") -> tuple[np.ndarray, Records]:
    """BMF's one-off pre-processing: rewrite the (single) file of ``index`` as the blocks of
    ``layout`` (:func:`lirs.eval.reference.bmf_blocks`) laid out back to back at ``path``.

    Returns ``(order, recs)``: int64 (n,) the record ID at each position of the block file, and
    the :class:`Records` of the block file (position p holds record ``order[p]``).
    """
    src = Records(index)
    n = src.n
    order = np.concatenate(layout) if layout else np.zeros(0, np.int64)
    dst_of = np.empty(n, np.int64)  # where record i goes in the block file
    if src.rs is not None:
        new_starts = new_ends = None
        dst_of[order] = np.arange(n, dtype=np.int64) * src.rs
    else:
        lens = src.ends - src.starts
        new_starts = np.zeros(n, np.int64)
        if n:
            np.cumsum(lens[order][:-1], out=new_starts[1:])
        new_ends = new_starts + lens[order]
        dst_of[order] = new_starts
    rewrite(src, dst_of, path, engine)
    return order, Records(index, path=path, starts=new_starts, ends=new_ends, first=0, dtype=src.dtype)
