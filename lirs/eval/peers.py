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

import importlib.util
import os

import numpy as np

from .. import seeds
from ..build import build_index, labels_path
from ..decode import decode_fixed, decode_libsvm, decode_lines, resolve_libsvm_params
from ..errors import UsageError
from ..external import shuffle as external_shuffle
from ..index import open_index
from .reference import bmf_block_order, bmf_blocks, buffer_batches, shuffle_buffer_order
from .spans import Records, SpanReader, take_rows, write_blocks

PEERS = ("inmemory", "torch", "memmap", "shuffle_buffer", "bmf", "external")

RUN_BYTES = 4 << 20        # sequential peers read runs of about this many bytes
SKLEARN_BYTES_PER_S = 40e6  # sklearn's parse rate here (README facts): sizes the prefix of a sampled load

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


def _labels(index, ids, y):
    return y if y is not None else index.labels_of(ids)


def _run_records(recs: Records, batch_size: int) -> int:
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
        return seeds.rng(self.seed, e, purpose)


def _warm_decode(index):
    """Decode the first record once: loads the decoder's compiled kernels."""
    if index.n == 0:
        return
    recs = Records(index) if not index.is_fixed else None
    f, s, e = index.spans(np.array([0]))
    with open(index.paths[0], "rb") as fh:
        fh.seek(int(s[0]))
        b = np.frombuffer(fh.read(int(e[0] - s[0])), np.uint8)
    if index.is_fixed:
        decode_fixed(b, np.zeros(1, np.int64), index.record_dtype, index.record_shape)
    elif index.format == "libsvm":
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
        perm = self._rng(e, seeds.PEER_INMEMORY).permutation(self.k)
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
            lens = np.fromiter((len(b) for _, b in items), np.int64, len(items))
            ends = np.cumsum(lens)
            X, y = decode_libsvm(buf, ends - lens, ends, n_features=self.n_features, zero_based=self.zero_based)
        elif self.fmt == "lines":
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
        g.manual_seed(int(np.random.SeedSequence([self.seed, e, seeds.PEER_SAMPLER]).generate_state(1, np.uint64)[0]
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
        perm = self._rng(e, seeds.PEER_SAMPLER).permutation(self.n)
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
        self.rd = SpanReader(recs, self.engine)
        self.workers = workers
        self.depth = max(1, self.prefetch if depth is None else depth)
        self.run = _run_records(recs, self.batch_size)
        self.reads = 0
        self.bytes_read = 0

    def _runs(self, ranges):
        """``(a, b, X, y)`` of every run of ``ranges``, read ahead on the reader's threads."""
        return self.rd.runs(ranges, self.workers, self.depth)

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
        self._open_reader(Records(self.index))

    def epoch(self, e):
        order = shuffle_buffer_order(self.n, self.buffer_records, seed=self.seed, epoch=e)
        src = self._runs(self._ranges(self.n))
        # runs without labels in the file take them from the index (the buffer holds both)
        runs = ((X, y if y is not None else self.index.labels_of(np.arange(a, b))) for a, b, X, y in src)
        try:
            for ids, Xb, ys in buffer_batches(runs, order, self.run, self.batch_size):
                self.payload += self.recs.nbytes(ids)
                self._sync_counters()
                yield ids, Xb, ys
        finally:
            src.close()
            self._sync_counters()


class BMF(_Sequential):
    name = "bmf"

    def prepare(self):
        idx = self.index
        layout = bmf_blocks(self.n, self.bmf_blocks, seed=self.seed)
        self.first = np.concatenate([[0], np.cumsum([len(b) for b in layout])]).astype(np.int64)
        os.makedirs(self.workdir, exist_ok=True)
        self.path = os.path.join(self.workdir, os.path.basename(idx.paths[0]) + f".bmf{self.bmf_blocks}")
        self.order, recs = write_blocks(idx, layout, self.path, self.engine)  # record of each block-file position
        self.pre_what = (f"rewrite the file as {self.bmf_blocks} random blocks (read, write, fsync)")
        self._open_reader(recs, workers=1, depth=1)  # BMF holds one block while the next one loads

    def epoch(self, e):
        B = self.batch_size
        blocks = [int(b) for b in bmf_block_order(self.bmf_blocks, seed=self.seed, epoch=e)
                  if self.first[b + 1] > self.first[b]]
        rng = self._rng(e, seeds.PEER_BMF_DEAL)
        src = self._runs((int(self.first[b]), int(self.first[b + 1])) for b in blocks)
        try:
            for a, b, X, y in src:
                ids_blk = self.order[a:b]
                if y is None:
                    y = self.index.labels_of(ids_blk)
                perm = rng.permutation(b - a)
                for s in range(0, b - a, B):
                    p = perm[s:s + B]
                    self.payload += self.recs.nbytes(a + p)
                    self._sync_counters()
                    yield ids_blk[p], X[p], None if y is None else y[p]
        finally:
            src.close()
            self._sync_counters()

    def close(self):
        super().close()
        p = getattr(self, "path", None)
        if p and os.path.exists(p):
            os.unlink(p)


class External(_Sequential):
    name = "external"

    def prepare(self):
        path = self.index.paths[0]
        os.makedirs(self.workdir, exist_ok=True)
        base, dot, suf = os.path.basename(path).rpartition(".")
        name = f"{base}.shuffled.{suf}" if dot else f"{suf}.shuffled"
        self.path = os.path.join(self.workdir, name)
        size = os.path.getsize(path)
        # memory well below the file size, so that the shuffle really takes two passes
        mem = int(min(2 << 30, max(64 << 20, size // 4)))
        res = external_shuffle([path], self.path, memory=mem, tmpdir=self.workdir, seed=self.seed, index=True,
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
        self._open_reader(Records(idx))

    def epoch(self, e):
        n = int(self.out_index.n)
        B = self.batch_size
        src = self._runs(self._ranges(n))
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
