"""The loaders lirs is measured against by ``lirs bench``, on the same file, in the same run.

Each peer is a *runner*: ``prepare()`` does its one-off work (timed as pre-processing),
``epoch(e)`` yields ``(ids int64 (k,), X, y)`` batches of ``batch_size`` records, ``close()``
deletes what it wrote. Runners count ``payload`` (bytes of the records they delivered) and, where
they issue the reads themselves, ``reads`` and ``bytes_read``.

==============  =======================================================================================
inmemory        the whole file in RAM, then a fresh in-memory permutation every epoch: LIBSVM with
                sklearn ``load_svmlight_file``, ``.npy``/fixed with numpy; only when it fits in memory
                (about half of what is available). A load that would take much longer than the budget
                loads a prefix (``length=``) and is scaled up (``sample_fraction``).
torch           what a user writes by hand: a map-style dataset reading each record by offset with
                ``os.pread`` (page cache), ``RandomSampler``, ``DataLoader(num_workers=2)``, a collate
                that decodes the batch (LIBSVM to CSR with :func:`lirs.decode.decode_libsvm`).
memmap          ``np.load(mmap_mode="r")`` (or ``np.memmap``) and fancy-indexed gathers of a random
                permutation, for dense records.
shuffle_buffer  tf.data / DALI style: the file read in order (runs of about 4 MiB, one ``O_DIRECT``
                read each, decoded on two threads, prefetched) through a buffer of 10,000 records.
bmf             block minimization (LIBLINEAR cdblock): once, rewrite the file as ``bmf_blocks`` random
                blocks laid out back to back; every epoch read whole blocks (one direct read each) in a
                fresh block order and deal each block's records in a random order.
external        a two-pass external shuffle (:func:`lirs.external.shuffle`, when that module exists)
                done once, then its output read in order like ``shuffle_buffer`` without the buffer.
==============  =======================================================================================

Buffered peers (``inmemory``, ``torch``, ``memmap``) read through the page cache: the benchmark
evicts the data file's pages before each of their epochs (and before ``prepare``).
"""
from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import UsageError

PEERS = ("inmemory", "torch", "memmap", "shuffle_buffer", "bmf", "external")

# SeedSequence([seed, epoch, purpose]) purposes of the peers (the shuffle buffer and BMF layout
# reuse lirs.train's own purposes, so their orders equal those of `lirs demo`)
PURPOSE_SAMPLER = 0xBE01   # torch RandomSampler / memmap permutation
PURPOSE_INMEMORY = 0xBE02  # in-memory permutation
PURPOSE_BMF_DEAL = 0xBE03  # order of a block's records

RUN_BYTES = 4 << 20        # sequential peers read runs of about this many bytes
SKLEARN_BYTES_PER_S = 40e6  # sklearn's parse rate here (README facts): sizes the prefix of a sampled load
_ALIGN = 4096

DESCRIPTIONS = {
    "inmemory": "whole file in RAM (sklearn load_svmlight_file / np.load), in-memory permutation",
    "torch": "torch DataLoader, map-style dataset, os.pread per record, RandomSampler, 2 workers",
    "memmap": "np.memmap, fancy-indexed gathers of a random permutation",
    "shuffle_buffer": "sequential reads through a shuffle buffer of 10,000 records (tf.data / DALI)",
    "bmf": "BMF: one-off rewrite into random blocks, whole-block reads in random block order",
    "external": "two-pass external shuffle once, then sequential reads of its output",
}

# what a peer gives up for its speed (said when it beats the recommended lirs configuration)
CAVEATS = {
    "inmemory": "but only while the whole data set fits in RAM",
    "torch": "",
    "memmap": "",
    "shuffle_buffer": "but its order is only locally random (a buffer of 10,000 records)",
    "bmf": "but only the block order changes between epochs (batch mates never change)",
    "external": "but every epoch repeats one order unless the shuffle is redone",
}

# what bounds a peer's epoch: ("iops", fio job) or ("bw", fio job); None: no device I/O per epoch
BOUNDS = {
    "inmemory": None,
    "torch": ("iops", "rand4k_qd1"),
    "memmap": ("iops", "rand4k_qd1"),
    "shuffle_buffer": ("bw", "seq1m_qd16"),
    "bmf": ("bw", "seq1m_qd16"),
    "external": ("bw", "seq1m_qd16"),
}
BUFFERED = {"inmemory": True, "torch": True, "memmap": True, "shuffle_buffer": False, "bmf": False,
            "external": False}


def mem_available() -> int:
    """MemAvailable from /proc/meminfo in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def inmemory_bytes(index) -> int:
    """Estimated peak bytes of loading the whole dataset in memory (sklearn: float64 values and
    int64 indices per non-zero, held twice while its arrays grow and convert; dense: the array)."""
    if index.format == "libsvm":
        nnz = int(index.meta.get("nnz") or index.payload_bytes // 8)
        return 2 * 16 * nnz + 16 * index.n
    if index.is_fixed:
        return int(index.n) * int(index.record_size)
    return 3 * int(index.payload_bytes)


def _has_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def skip_reason(name: str, index, *, workdir: str | None = None, memory: int | None = None) -> str | None:
    """Why peer ``name`` cannot run on this dataset here (None: it can)."""
    if name not in PEERS:
        raise UsageError(f"unknown peer {name!r}; expected some of {', '.join(PEERS)}")
    if index.nfiles != 1:
        return "peers read one file; this dataset has several"
    fmt = index.format
    if name == "inmemory":
        if fmt == "libsvm" and not _has_module("sklearn"):
            return "scikit-learn is not installed (pip install scikit-learn)"
        if fmt == "lines":
            return "no in-memory loader for line records"
        need = inmemory_bytes(index)
        have = mem_available() if memory is None else memory
        if need > have // 2:
            return f"does not fit in memory: needs about {need / 1e9:.1f} GB, {have / 1e9:.1f} GB available"
    if name == "torch" and not _has_module("torch"):
        return "torch is not installed (pip install 'lirs[torch]')"
    if name == "memmap" and not index.is_fixed:
        return "np.memmap gathers need fixed-size (dense) records"
    if name == "external":
        if not _has_module("lirs.external"):
            return "lirs.external (the two-pass shuffle) is not available in this version"
    if name in ("bmf", "external"):
        d = workdir or os.path.dirname(index.paths[0])
        try:
            st = os.statvfs(d)
            free = st.f_bavail * st.f_frsize
        except OSError:
            free = 0
        need = int(2.2 * os.path.getsize(index.paths[0])) if name == "external" else \
            int(1.1 * os.path.getsize(index.paths[0]))
        if free < need:
            return f"needs {need / 1e9:.1f} GB free in {d} for its copy of the data, has {free / 1e9:.1f} GB"
    return None


# ------------------------------------------------------------------------------ shared pieces


class _Records:
    """Where the records of one file lie and how to decode them.

    Variable formats keep ``starts``/``ends`` int64 (n,); fixed formats compute spans from
    ``first`` (offset of record 0) and ``rs`` (record size).
    """

    def __init__(self, index, path=None, starts=None, ends=None, first=None):
        self.index = index
        self.path = path or index.paths[0]
        self.fmt = index.format
        self.n = int(index.n)
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
            from ..decode import resolve_libsvm_params

            self.n_features, self.zero_based = resolve_libsvm_params(index)

    def span(self, a: int, b: int) -> tuple[int, int]:
        """Byte range [lo, hi) of records a..b-1 (back to back in the file)."""
        if self.rs is not None:
            return self.first + a * self.rs, self.first + b * self.rs
        return int(self.starts[a]), int(self.ends[b - 1])

    def decode(self, buf, lo: int, a: int, b: int, ids=None):
        """(X, y) of records a..b-1 found in ``buf`` (which starts at file byte ``lo``)."""
        ids = np.arange(a, b, dtype=np.int64) if ids is None else ids
        if self.rs is not None:
            from ..decode import decode_fixed

            st = self.first + np.arange(a, b, dtype=np.int64) * self.rs - lo
            return decode_fixed(buf, st, self.index.record_dtype, self.index.record_shape), None
        st = self.starts[a:b] - lo
        en = self.ends[a:b] - lo
        if self.fmt == "libsvm":
            from ..decode import decode_libsvm

            return decode_libsvm(buf, st, en, n_features=self.n_features, zero_based=self.zero_based,
                                 source=self.path, file_offsets=self.starts[a:b], record_ids=ids)
        from ..decode import decode_lines

        return decode_lines(buf, st, en), None


class _RunReader:
    """Reads runs of back-to-back records with one aligned direct read each and decodes them, on
    ``workers`` threads, ``depth`` runs ahead of the consumer, in order."""

    def __init__(self, recs: _Records, engine: str = "auto", workers: int = 2, depth: int = 4):
        from ..engines import open_engine

        self.recs = recs
        self.eng = open_engine([recs.path], engine)
        self.workers, self.depth = workers, depth
        self.reads = 0
        self.bytes_read = 0
        self._local = threading.local()
        self._lock = threading.Lock()

    def read(self, a: int, b: int, ids=None):
        """(X, y) of records a..b-1."""
        from ..engines import aligned_empty

        lo, hi = self.recs.span(a, b)
        alo = lo // _ALIGN * _ALIGN
        ahi = -(-hi // _ALIGN) * _ALIGN
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) < ahi - alo:
            buf = self._local.buf = aligned_empty(int((ahi - alo) * 1.25) // _ALIGN * _ALIGN + _ALIGN)
        got = self.eng.read(np.zeros(1, np.int32), np.array([alo], np.int64), np.array([ahi - alo], np.int64),
                            buf, np.zeros(1, np.int64))
        with self._lock:
            self.reads += 1
            self.bytes_read += int(got[0])
        return self.recs.decode(buf[:int(got[0])], alo, a, b, ids)

    def runs(self, ranges):
        """Yield ``(a, b, X, y)`` for every ``(a, b)`` of ``ranges``, in order."""
        ex = ThreadPoolExecutor(self.workers, thread_name_prefix="lirs-peer-read")
        futs = collections.deque()
        it = iter(ranges)
        try:
            for a, b in it:
                futs.append((a, b, ex.submit(self.read, a, b)))
                if len(futs) > self.depth:
                    a0, b0, f = futs.popleft()
                    yield (a0, b0, *f.result())
            while futs:
                a0, b0, f = futs.popleft()
                yield (a0, b0, *f.result())
        finally:
            for _, _, f in futs:
                f.cancel()
            ex.shutdown(wait=True)

    def close(self):
        self.eng.close()


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
    import scipy.sparse as sp

    from .kernels import train as K

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


def _labels(index, ids, y):
    return y if y is not None else index.labels_of(ids)


def _run_records(recs: _Records, batch_size: int) -> int:
    """Records per sequential run: a whole number of batches, about RUN_BYTES."""
    mean = max(1.0, recs.index.payload_bytes / max(recs.n, 1))
    return batch_size * max(1, int(RUN_BYTES // (batch_size * mean)))


# ------------------------------------------------------------------------------ runners


class Runner:
    """Base of the peers (see the module docstring)."""

    name = ""
    buffered = False

    def __init__(self, index, *, batch_size: int = 1024, seed: int = 0, engine: str = "auto",
                 workdir: str | None = None, budget_s: float = 20.0, buffer_records: int = 10_000,
                 bmf_blocks: int = 40, prefetch: int = 4):
        self.index = index
        self.n = int(index.n)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.engine = engine
        self.workdir = workdir or os.path.dirname(index.paths[0])
        self.budget_s = float(budget_s)
        self.buffer_records = int(buffer_records)
        self.bmf_blocks = int(bmf_blocks)
        self.prefetch = int(prefetch)
        self.reads = None
        self.bytes_read = None
        self.payload = 0
        self.sample_fraction = 1.0  # < 1: prepare() and every epoch cover only this share of the data
        self.what = DESCRIPTIONS.get(self.name, self.name)
        self.pre_what = None
        self.note = None

    def warm(self) -> None:
        """Load code paths (imports, compiled kernels) before anything is timed."""

    def prepare(self) -> None:
        """One-off work before the first epoch (timed by the caller as pre-processing)."""

    def epoch(self, e: int):
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _rng(self, e: int, purpose: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.seed, e, purpose]))


def _warm_decode(index):
    """Decode the first record once: loads the decoder's compiled kernels."""
    if index.n == 0:
        return
    recs = _Records(index) if not index.is_fixed else None
    f, s, e = index.spans(np.array([0]))
    with open(index.paths[0], "rb") as fh:
        fh.seek(int(s[0]))
        b = np.frombuffer(fh.read(int(e[0] - s[0])), np.uint8)
    if index.is_fixed:
        from ..decode import decode_fixed

        decode_fixed(b, np.zeros(1, np.int64), index.record_dtype, index.record_shape)
    elif index.format == "libsvm":
        from ..decode import decode_libsvm

        decode_libsvm(b, np.zeros(1, np.int64), np.array([len(b)]), n_features=recs.n_features,
                      zero_based=recs.zero_based)


class InMemory(Runner):
    name = "inmemory"
    buffered = True

    def prepare(self):
        idx = self.index
        path = idx.paths[0]
        size = os.path.getsize(path)
        if idx.format == "libsvm":
            from sklearn.datasets import load_svmlight_file

            from ..decode import resolve_libsvm_params

            nf, zb = resolve_libsvm_params(idx)
            limit = max(1 << 20, int(self.budget_s * SKLEARN_BYTES_PER_S))
            length = -1 if size <= 2 * limit else limit
            X, y = load_svmlight_file(path, n_features=nf, zero_based=zb, length=length)
            self.pre_what = "sklearn load_svmlight_file" + ("" if length < 0 else f" of the first {length:,} bytes")
        else:
            k = self.n
            if size > 2 * max(1 << 20, int(self.budget_s * 300e6)):
                k = max(1, int(self.budget_s * 300e6) // idx.record_size)
            if idx.format == "npy":
                mm = np.load(path, mmap_mode="r")
                X = np.array(mm[:k]) if k < self.n else np.load(path)
            else:
                X = np.fromfile(path, np.uint8, count=k * idx.record_size,
                                offset=int(idx.header_sizes[0])).reshape(k, idx.record_size)
            y = idx.labels_of(np.arange(k))
            self.pre_what = ("np.load" if idx.format == "npy" else "np.fromfile") + \
                ("" if k == self.n else f" of the first {k:,} records")
        self.X, self.y = X, y
        self.k = X.shape[0]
        self.sample_fraction = self.k / max(self.n, 1)
        if self.k < self.n:
            self.note = (f"loaded {self.sample_fraction:.1%} of the file (the whole load would take far longer "
                         f"than the budget); load and epoch times scaled up")

    def epoch(self, e):
        perm = self._rng(e, PURPOSE_INMEMORY).permutation(self.k)
        B = self.batch_size
        for s in range(0, self.k, B):
            ids = perm[s:s + B]
            yield ids, self.X[ids], None if self.y is None else self.y[ids]

    def close(self):
        self.X = self.y = None


class _RecordFile:
    """Map-style dataset: item i is ``(i, bytes of record i)``, read with ``os.pread`` (the file is
    opened once per process: DataLoader workers are forked)."""

    def __init__(self, path, starts, lens):
        self.path, self.starts, self.lens = path, starts, lens
        self._fd = None
        self._pid = None

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        if self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDONLY)
            self._pid = os.getpid()
        return i, os.pread(self._fd, int(self.lens[i]), int(self.starts[i]))


class _Collate:
    """Batch of ``(i, bytes)`` items -> ``(ids, X, y, nbytes)`` decoded like the Loader's batches."""

    def __init__(self, fmt, n_features=None, zero_based=None, dtype=None, shape=None):
        self.fmt, self.n_features, self.zero_based, self.dtype, self.shape = fmt, n_features, zero_based, dtype, shape

    def __call__(self, items):
        ids = np.fromiter((i for i, _ in items), np.int64, len(items))
        raw = b"".join(b for _, b in items)
        buf = np.frombuffer(raw, np.uint8)
        if self.fmt == "libsvm":
            from ..decode import decode_libsvm

            lens = np.fromiter((len(b) for _, b in items), np.int64, len(items))
            ends = np.cumsum(lens)
            X, y = decode_libsvm(buf, ends - lens, ends, n_features=self.n_features, zero_based=self.zero_based)
        elif self.fmt == "lines":
            from ..decode import decode_lines

            lens = np.fromiter((len(b) for _, b in items), np.int64, len(items))
            ends = np.cumsum(lens)
            X, y = decode_lines(buf, ends - lens, ends), None
        else:
            X, y = np.frombuffer(raw, self.dtype).reshape(len(items), *self.shape).copy(), None
        return ids, X, y, len(raw)


class TorchLoader(Runner):
    name = "torch"
    buffered = True
    workers = 2

    def __init__(self, index, **kw):
        super().__init__(index, **kw)
        idx = index
        if idx.is_fixed:
            ids = np.arange(self.n, dtype=np.int64)
            starts = int(idx.header_sizes[0]) + ids * int(idx.record_size)
            lens = np.full(self.n, int(idx.record_size), np.int32)
            coll = _Collate(idx.format, dtype=idx.record_dtype, shape=idx.record_shape)
        else:
            starts, ends = idx.bounds()
            lens = (ends - starts).astype(np.int32)
            if idx.format == "libsvm":
                from ..decode import resolve_libsvm_params

                nf, zb = resolve_libsvm_params(idx)
                coll = _Collate("libsvm", n_features=nf, zero_based=zb)
            else:
                coll = _Collate("lines")
        self.ds = _RecordFile(idx.paths[0], np.asarray(starts, np.int64), lens)
        self.collate = coll
        self.reads = 0
        self.bytes_read = 0

    def warm(self):
        import torch  # noqa: F401 - imported before anything is timed
        from torch.utils.data import DataLoader  # noqa: F401

        _warm_decode(self.index)
        self.collate([self.ds[0]])

    def epoch(self, e):
        import torch
        from torch.utils.data import DataLoader, RandomSampler

        g = torch.Generator()
        g.manual_seed(int(np.random.SeedSequence([self.seed, e, PURPOSE_SAMPLER]).generate_state(1, np.uint64)[0]
                          >> 1))
        dl = DataLoader(self.ds, batch_size=self.batch_size, sampler=RandomSampler(self.ds, generator=g),
                        num_workers=self.workers, collate_fn=self.collate)
        it = iter(dl)
        try:
            for ids, X, y, nbytes in it:
                self.reads += len(ids)
                self.bytes_read += nbytes
                self.payload += nbytes
                yield ids, X, _labels(self.index, ids, y)
        finally:
            # stop the worker processes now (they would linger until garbage collection)
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            del it


class Memmap(Runner):
    name = "memmap"
    buffered = True

    def _open(self):
        idx = self.index
        if idx.format == "npy":
            return np.load(idx.paths[0], mmap_mode="r")
        return np.memmap(idx.paths[0], np.uint8, mode="r", offset=int(idx.header_sizes[0]),
                         shape=(self.n, int(idx.record_size)))

    def warm(self):
        self._open()[:1].copy()

    def epoch(self, e):
        X = self._open()  # opened per epoch: the mapping starts cold like the page cache
        perm = self._rng(e, PURPOSE_SAMPLER).permutation(self.n)
        rs = int(self.index.record_size)
        B = self.batch_size
        for s in range(0, self.n, B):
            ids = perm[s:s + B]
            Xb = X[ids]
            self.payload += len(ids) * rs
            yield ids, Xb, self.index.labels_of(ids)
        del X


class _Sequential(Runner):
    """Shared by the peers that read a file in order: runs of whole batches, direct reads."""

    def _open_reader(self, recs, workers=2, depth=None):
        self.recs = recs
        depth = self.prefetch if depth is None else depth
        self.rd = _RunReader(recs, self.engine, workers=workers, depth=max(1, depth))
        self.run = _run_records(recs, self.batch_size)
        self.reads = 0
        self.bytes_read = 0

    def _ranges(self, n):
        return ((a, min(n, a + self.run)) for a in range(0, n, self.run))

    def _sync_counters(self):
        self.reads, self.bytes_read = self.rd.reads, self.rd.bytes_read

    def warm(self):
        _warm_decode(self.index)

    def close(self):
        rd = getattr(self, "rd", None)
        if rd is not None:
            rd.close()
            self.rd = None


class ShuffleBuffer(_Sequential):
    name = "shuffle_buffer"

    def prepare(self):
        self._open_reader(_Records(self.index))

    def epoch(self, e):
        from .train import shuffle_buffer_order

        n, B, run = self.n, self.batch_size, self.run
        order = shuffle_buffer_order(n, self.buffer_records, seed=self.seed, epoch=e)
        runs = {}  # run number -> [X, y, records of it not yet delivered]
        src = self.rd.runs(self._ranges(n))
        nxt = 0
        try:
            for s in range(0, n, B):
                ids = order[s:s + B]
                need = int(ids.max()) // run
                while nxt <= need:
                    a, b, X, y = next(src)
                    runs[nxt] = [X, y if y is not None else self.index.labels_of(np.arange(a, b)), b - a]
                    nxt += 1
                r = ids // run
                local = ids - r * run
                parts, ys = [], np.empty(len(ids), np.float64) if runs[int(r[0])][1] is not None else None
                for k in np.unique(r).tolist():
                    sel = np.flatnonzero(r == k)
                    X, y, _ = runs[k]
                    parts.append((X, local[sel], sel.astype(np.int64)))
                    if ys is not None:
                        ys[sel] = y[local[sel]]
                    runs[k][2] -= len(sel)
                    if runs[k][2] == 0:
                        del runs[k]
                Xb = take_rows(parts, len(ids), parts[0][0])
                self.payload += self._payload(ids)
                self._sync_counters()
                yield ids, Xb, ys
        finally:
            src.close()
            self._sync_counters()

    def _payload(self, ids):
        if self.recs.rs is not None:
            return len(ids) * self.recs.rs
        return int((self.recs.ends[ids] - self.recs.starts[ids]).sum())


class BMF(_Sequential):
    name = "bmf"

    def prepare(self):
        from .train import bmf_blocks

        idx = self.index
        src = _Records(idx)
        layout = bmf_blocks(self.n, self.bmf_blocks, seed=self.seed)
        order = np.concatenate(layout) if layout else np.zeros(0, np.int64)
        self.order = order  # record of each position in the block file
        self.first = np.concatenate([[0], np.cumsum([len(b) for b in layout])]).astype(np.int64)
        os.makedirs(self.workdir, exist_ok=True)
        self.path = os.path.join(self.workdir, os.path.basename(idx.paths[0]) + f".bmf{self.bmf_blocks}")
        if src.rs is not None:
            lens = None
            new_starts = new_ends = None
            dst_of = np.empty(self.n, np.int64)
            dst_of[order] = np.arange(self.n, dtype=np.int64) * src.rs
        else:
            lens = src.ends - src.starts
            new_starts = np.zeros(self.n, np.int64)
            if self.n:
                np.cumsum(lens[order][:-1], out=new_starts[1:])
            new_ends = new_starts + lens[order]
            dst_of = np.empty(self.n, np.int64)
            dst_of[order] = new_starts
        _rewrite(src, dst_of, self.path, self.engine)
        self.pre_what = (f"rewrite the file as {self.bmf_blocks} random blocks (read, write, fsync)")
        recs = _Records(idx, path=self.path, starts=new_starts, ends=new_ends, first=0)
        self._open_reader(recs, workers=1, depth=1)  # BMF holds one block while the next one loads

    def epoch(self, e):
        from .train import bmf_block_order

        B = self.batch_size
        blocks = [int(b) for b in bmf_block_order(self.bmf_blocks, seed=self.seed, epoch=e)
                  if self.first[b + 1] > self.first[b]]
        rng = self._rng(e, PURPOSE_BMF_DEAL)
        src = self.rd.runs((int(self.first[b]), int(self.first[b + 1])) for b in blocks)
        try:
            for a, b, X, y in src:
                ids_blk = self.order[a:b]
                if y is None:
                    y = self.index.labels_of(ids_blk)
                perm = rng.permutation(b - a)
                for s in range(0, b - a, B):
                    p = perm[s:s + B]
                    self.payload += self._payload(a, p)
                    self._sync_counters()
                    yield ids_blk[p], X[p], None if y is None else y[p]
        finally:
            src.close()
            self._sync_counters()

    def _payload(self, a, p):
        if self.recs.rs is not None:
            return len(p) * self.recs.rs
        pos = a + p
        return int((self.recs.ends[pos] - self.recs.starts[pos]).sum())

    def close(self):
        super().close()
        p = getattr(self, "path", None)
        if p and os.path.exists(p):
            os.unlink(p)


def _rewrite(src: _Records, dst_of: np.ndarray, out_path: str, engine: str, run_bytes: int = 8 << 20) -> None:
    """Write every record of ``src`` to byte ``dst_of[i]`` of ``out_path``: the file is read in
    order (direct reads of about ``run_bytes``), each run's records are sorted by destination and
    written as contiguous stretches; then fsync. Atomic: temp name, then rename."""
    from .kernels import train as K

    n = src.n
    per = max(1, int(run_bytes // max(1.0, src.index.payload_bytes / max(n, 1))))
    rd = _RunReader(src, engine)
    tmp = out_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    ok = False
    try:
        from ..engines import aligned_empty

        buf = aligned_empty(_ALIGN)
        for a in range(0, n, per):
            b = min(n, a + per)
            lo, hi = src.span(a, b)
            alo = lo // _ALIGN * _ALIGN
            ahi = -(-hi // _ALIGN) * _ALIGN
            if len(buf) < ahi - alo:
                buf = aligned_empty(ahi - alo)
            rd.eng.read(np.zeros(1, np.int32), np.array([alo], np.int64), np.array([ahi - alo], np.int64), buf,
                        np.zeros(1, np.int64))
            if src.rs is not None:
                s_ = src.first + np.arange(a, b, dtype=np.int64) * src.rs
                e_ = s_ + src.rs
            else:
                s_, e_ = src.starts[a:b], src.ends[a:b]
            o = np.argsort(dst_of[a:b], kind="stable")
            ss, ee, dst = s_[o] - alo, e_[o] - alo, dst_of[a:b][o]
            out = np.empty(int((ee - ss).sum()), np.uint8)
            K.gather_spans(buf, ss, ee, out)
            ln = ee - ss
            brk = np.flatnonzero(dst[1:] != dst[:-1] + ln[:-1]) + 1
            cuts = np.concatenate([[0], brk, [len(dst)]])
            off = np.concatenate([[0], np.cumsum(ln)])
            for c0, c1 in zip(cuts[:-1], cuts[1:]):
                os.pwrite(fd, memoryview(out[off[c0]:off[c1]]), int(dst[c0]))
        os.fsync(fd)
        ok = True
    finally:
        os.close(fd)
        rd.close()
        if ok:
            os.replace(tmp, out_path)
        elif os.path.exists(tmp):
            os.unlink(tmp)


class External(_Sequential):
    name = "external"

    def prepare(self):
        import lirs.external as ext

        from ..build import build_index
        from ..index import open_index

        path = self.index.paths[0]
        os.makedirs(self.workdir, exist_ok=True)
        base, dot, suf = os.path.basename(path).rpartition(".")
        name = f"{base}.shuffled.{suf}" if dot else f"{suf}.shuffled"
        self.path = os.path.join(self.workdir, name)
        size = os.path.getsize(path)
        # memory well below the file size, so that the shuffle really takes two passes
        mem = int(min(2 << 30, max(64 << 20, size // 4)))
        res = ext.shuffle([path], self.path, memory=mem, tmpdir=self.workdir, seed=self.seed, index=True,
                          progress=False)
        try:
            idx = open_index(self.path)
            how = ""
        except Exception:  # noqa: BLE001 - no sidecar written: index it here (timed too)
            idx = build_index(self.path, progress=False)
            how = ", then lirs index of its output"
        self.out_index = idx
        self.pre_what = f"two-pass external shuffle (memory {mem >> 20} MiB{how})"
        if isinstance(res, dict) and res.get("piles"):
            self.pre_what += f", {res['piles']} piles"
        self._open_reader(_Records(idx))

    def epoch(self, e):
        n = int(self.out_index.n)
        B = self.batch_size
        src = self.rd.runs(self._ranges(n))
        try:
            for a, b, X, y in src:
                if y is None:
                    y = self.out_index.labels_of(np.arange(a, b))
                for s in range(a, b, B):
                    t = min(b, s + B)
                    self.payload += self._payload(s, t)
                    self._sync_counters()
                    # IDs are positions in the shuffled file (the output does not keep the originals)
                    yield np.arange(s, t, dtype=np.int64), X[s - a:t - a], None if y is None else y[s - a:t - a]
        finally:
            src.close()
            self._sync_counters()

    def _payload(self, s, t):
        lo, hi = self.recs.span(s, t)
        return hi - lo

    def close(self):
        super().close()
        idx = getattr(self, "out_index", None)
        self.out_index = None
        p = getattr(self, "path", None)
        if p:
            from ..build import labels_path

            for q in (p, getattr(idx, "sidecar", None) or p + ".lirs", labels_path(p)):
                if q and os.path.exists(q):
                    os.unlink(q)


RUNNERS = {"inmemory": InMemory, "torch": TorchLoader, "memmap": Memmap, "shuffle_buffer": ShuffleBuffer,
           "bmf": BMF, "external": External}


def make_runner(name: str, index, **kw) -> Runner:
    """The runner of peer ``name`` (see :data:`PEERS`); keyword arguments as :class:`Runner`."""
    if name not in RUNNERS:
        raise UsageError(f"unknown peer {name!r}; expected some of {', '.join(PEERS)}")
    return RUNNERS[name](index, **kw)
