"""The peers that read through the page cache: the whole file in memory, a torch DataLoader
reading each record with ``os.pread``, and ``np.memmap`` gathers."""
from __future__ import annotations

import os

import numpy as np

from ... import seeds
from ...constants import BYTES_FORMATS
from ...decode import decode_libsvm, decode_lines, decode_tfrecord, resolve_libsvm_params
from .base import SKLEARN_BYTES_PER_S, Runner, labels, warm_decode


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
        elif self.fmt in BYTES_FORMATS:
            lens = np.fromiter((len(b) for _, b in items), np.int64, len(items))
            ends = np.cumsum(lens)
            X, y = (decode_lines if self.fmt == "lines" else decode_tfrecord)(buf, ends - lens, ends), None
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
                coll = _Collate(idx.format)
        self.ds = _RecordFile(idx.paths[0], np.asarray(starts, np.int64), lens)
        self.collate = coll
        self.reads = 0
        self.bytes_read = 0

    def warm(self):
        import torch  # noqa: F401 - imported before anything is timed
        from torch.utils.data import DataLoader  # noqa: F401

        warm_decode(self.index)
        self.collate([self.ds[0]])

    def epoch(self, e):
        import torch
        from torch.utils.data import DataLoader, RandomSampler

        g = torch.Generator()
        g.manual_seed(seeds.key(self.seed, e, seeds.PEER_SAMPLER) >> 1)  # torch seeds are signed 64-bit
        dl = DataLoader(self.ds, batch_size=self.batch_size, sampler=RandomSampler(self.ds, generator=g),
                        num_workers=self.workers, collate_fn=self.collate)
        it = iter(dl)
        try:
            for ids, X, y, nbytes in it:
                self.reads += len(ids)
                self.bytes_read += nbytes
                self.payload += nbytes
                yield ids, X, labels(self.index, ids, y)
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
