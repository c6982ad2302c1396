"""The Loader: batches of a fresh random order every epoch, read and decoded ahead of the consumer.

The consumer's thread draws each batch's plan (cheap, in order) and hands its read step to a small
pool of threads, ``prefetch`` batches ahead; a pool thread reads the step's extents with the engine
(io_uring or pread, no GIL held) into a pooled aligned buffer and decodes it (numba, no GIL), so
reading and decoding of the next batches run on the other cores while the training step computes.
One hand-off to the pool and one back per read step: no event loop sits between the consumer and
the reads. Batches arrive in plan order; an error in any stage is raised in the consumer at that
batch. ``aepoch`` serves asyncio code with the same pipeline (the caller's loop awaits the pool's
futures). Memory stays about index + plan + (prefetch + 1) read steps.

::

    with lirs.Loader("train.svm", batch_size=1024) as loader:
        for epoch in range(10):
            for batch in loader.epoch(epoch):
                model.partial_fit(batch.X, batch.y)
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import DataError, UsageError

log = logging.getLogger("lirs.loader")

_BLOCK = 4096


@dataclass
class Batch:
    """One batch: ``ids`` int64 (k,) global record IDs in delivery order; ``X`` a
    ``scipy.sparse.csr_matrix`` (k, n_features) for LIBSVM, an ndarray (k, *record_shape) for
    npy/fixed, a list of k ``bytes`` for lines; ``y`` float64 (k,) or None; ``epoch`` and ``index``
    (batch number within the epoch)."""

    ids: np.ndarray
    X: Any
    y: np.ndarray | None
    epoch: int = 0
    index: int = 0

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class LoaderStats:
    """Counters of a loader since it was made (or since :meth:`reset`).

    ``bytes_read``: bytes the engine read; ``payload_bytes``: bytes of the delivered records
    (amplification = bytes_read / payload_bytes); ``reads``: extents read; ``records`` and
    ``batches`` delivered; ``wait_s``: time the consumer spent waiting for a batch;
    ``io_s``/``decode_s``: time spent in engine reads and decoding (summed over concurrent work).
    """

    bytes_read: int = 0
    payload_bytes: int = 0
    reads: int = 0
    records: int = 0
    batches: int = 0
    wait_s: float = 0.0
    io_s: float = 0.0
    decode_s: float = 0.0

    def reset(self) -> None:
        for k, v in LoaderStats().__dict__.items():
            setattr(self, k, v)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["amplification"] = self.bytes_read / self.payload_bytes if self.payload_bytes else None
        return d


class _BufferPool:
    """Aligned read buffers, reused; grown when a step needs more. Shared by the pool's threads."""

    def __init__(self):
        self.free: list[np.ndarray] = []
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        from .engines import aligned_empty

        with self.lock:
            while self.free:
                buf = self.free.pop()
                if buf.shape[0] >= nbytes:
                    return buf
        # grow with headroom so that slightly larger batches do not reallocate every time
        cap = -(-int(nbytes * 1.25) // _BLOCK) * _BLOCK
        return aligned_empty(max(cap, _BLOCK))

    def give(self, buf: np.ndarray) -> None:
        with self.lock:
            self.free.append(buf)


@dataclass
class _EpochRun:
    epoch: int
    start: int
    plan: Any = None
    batches: Any = None  # iterator over BatchPlan from `start`
    steps: dict = field(default_factory=dict)  # read step number -> future of its decoded (X, y)
    pending: Any = field(default_factory=collections.deque)  # (BatchPlan, parts) submitted, in order


_CONFIG_KEYS = ("batch_size", "granularity", "group_bytes", "window", "seed", "rank", "world_size",
                "drop_last", "permutation")


class Loader:
    """Random batches of an indexed dataset, read with direct I/O and decoded ahead of the consumer.

    Parameters
    ----------
    paths : str, list of str, or Index
        A data file, a directory, a ``.lirs`` sidecar, a one-element list of those, or an opened
        :class:`~lirs.index.Index` (several files: pass their sidecar or the Index).
    batch_size : int
        Records per batch (per rank).
    granularity : {"instance", "page", "group", "window", "auto"}
        Shuffling unit of the planner (see :func:`lirs.plan.plan_epoch`). ``"auto"``: the choice
        ``lirs bench DATA --auto`` saved for this dataset (with its group_bytes and window), or
        ``"group"`` when there is none.
    group_bytes, window, permutation : planner options.
    seed : int
        The epoch order is a function of ``(seed, epoch, rank, world_size)`` only.
    engine : str
        ``"auto"`` (``$LIRS_ENGINE`` or the best that works here), ``"uring"``, ``"threads"``,
        ``"aiofiles"`` or ``"buffered"`` (see :mod:`lirs.engines`).
    prefetch : int
        Batches read and decoded ahead of the consumer (>= 1).
    rank, world_size, drop_last : sharding over data-parallel workers.
    dtype : numpy dtype of LIBSVM values (npy/fixed keep the file's dtype).
    index : Index or None
        Use this index instead of opening one from ``paths``.
    n_features, zero_based : LIBSVM decoding (defaults: from the index, by sklearn's rule).
    depth : int or None
        Reads in flight per batch for the engine (its default when None).
    direct : bool or None
        O_DIRECT: None = when the filesystem allows it.
    """

    def __init__(self, paths, batch_size, granularity="group", group_bytes=65536, window=16, seed=0,
                 engine="auto", prefetch=4, rank=0, world_size=1, drop_last=False, dtype=np.float32,
                 permutation="auto", index=None, *, n_features=None, zero_based="auto", depth=None,
                 direct=None):
        src = paths if index is None else index
        self.index = self._open_index(src)
        self._owns_index = self.index is not src  # opened here: released by close()
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {batch_size}")
        self.prefetch = int(prefetch)
        if self.prefetch < 1:
            raise UsageError(f"prefetch must be >= 1, got {prefetch}")
        if granularity == "auto":  # what `lirs bench --auto` saved for this dataset, else group
            from .recommendation import auto_settings

            granularity, group_bytes, window = auto_settings(self.index, group_bytes, window)
        self.granularity = granularity
        self.group_bytes = int(group_bytes)
        self.window = int(window)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.drop_last = bool(drop_last)
        self.permutation = permutation
        self.dtype = np.dtype(dtype)
        self.engine_name = engine
        self.depth = depth
        self.direct = direct
        if self.index.format == "libsvm":
            from .decode import resolve_libsvm_params

            self.n_features, self.zero_based = resolve_libsvm_params(self.index, zero_based, n_features)
        else:
            self.n_features, self.zero_based = None, None
        from .plan import check_args

        check_args(self.batch_size, granularity, self.group_bytes, self.window, self.rank, self.world_size,
                   self.seed, 0, _BLOCK, permutation)
        self.stats = LoaderStats()
        self._stats_lock = threading.Lock()
        self._cfg = self._make_config()
        self._pos = (None, 0)  # (epoch, next batch) as seen by the consumer
        self._resume: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._pid = None
        self._engine = None
        self._executor = None
        self._pool = None
        self._closed = False
        self._active: set = set()  # futures of batches in flight
        self._last_plan = None

    # ------------------------------------------------------------------ setup / teardown
    @staticmethod
    def _open_index(src):
        from .index import Index, open_index

        if isinstance(src, Index):
            return src
        if isinstance(src, (list, tuple)):
            if len(src) != 1:
                raise UsageError("several data files form one dataset: pass their .lirs sidecar "
                                 "(lirs index FILES -o NAME.lirs) or an opened Index")
            src = src[0]
        return open_index(os.fspath(src))

    @property
    def engine(self):
        """The engine of this process (created on first use; a forked child makes its own)."""
        self._ensure_started()
        return self._engine

    def _ensure_started(self):
        if self._closed:
            raise ValueError("this Loader is closed")
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._lock:
            if self._pid == pid:
                return
            if self._pid is not None:
                # forked child: the parent's pool threads and rings do not exist here; start over
                self._engine = self._executor = None
                self._active = set()
            from .engines import open_engine

            self._engine = open_engine(list(self.index.paths), self.engine_name, direct=self.direct,
                                       depth=self.depth)
            # one thread more than cores: a thread waiting on its read leaves a core to decoding
            workers = max(2, min(self.prefetch, (os.cpu_count() or 2) + 1))
            self._executor = ThreadPoolExecutor(workers, thread_name_prefix="lirs-loader")
            self._pool = _BufferPool()
            self._pid = pid

    def close(self) -> None:
        """Stop the pool's and the engine's threads, close every file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pid != os.getpid():
                self._pid = None
                if self._owns_index:
                    self.index = None
                return  # no thread of ours runs in this process
            if threading.current_thread() in _pool_threads(self._executor):
                # dropped from inside the pool (the last reference was held by a read step): a
                # thread cannot wait for itself; no other step runs (each holds a reference)
                self._executor.shutdown(wait=False)
                self._engine.close()
                return
            for f in list(self._active):
                f.cancel()
            self._active.clear()
            if self._executor is not None:
                # every step still reading into a pooled buffer finishes before the files close
                self._executor.shutdown(wait=True)
            if self._engine is not None:
                self._engine.close()
            self._engine = self._executor = self._pool = None
            self._last_plan = None
            if self._owns_index:
                self.index = None  # its memory maps hold descriptors of the sidecar

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            # at interpreter exit the daemon threads are frozen: waiting on them would hang
            if not self._closed and self._pid == os.getpid() and not sys.is_finalizing():
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ------------------------------------------------------------------ planning
    def plan(self, epoch: int):
        """The :class:`~lirs.plan.EpochPlan` of ``epoch`` for this loader's rank (the last one is cached)."""
        epoch = int(epoch)
        cached = self._last_plan
        if cached is not None and cached[0] == epoch:
            return cached[1]
        plan = self._make_plan(epoch)
        self._last_plan = (epoch, plan)
        return plan

    def _make_plan(self, epoch: int):
        from .plan import plan_epoch

        return plan_epoch(self.index, self.batch_size, self.granularity, seed=self.seed, epoch=int(epoch),
                          rank=self.rank, world_size=self.world_size, drop_last=self.drop_last,
                          group_bytes=self.group_bytes, window=self.window, permutation=self.permutation,
                          block=_BLOCK)

    def num_batches(self, epoch: int = 0) -> int:
        return int(self.plan(epoch).num_batches)

    # ------------------------------------------------------------------ state
    def _make_config(self) -> dict:
        c = {k: getattr(self, k) for k in _CONFIG_KEYS}
        c["n"] = int(self.index.n)
        c["format"] = self.index.format
        return c

    def _config(self) -> dict:
        return dict(self._cfg)

    def state_dict(self) -> dict:
        """``{"epoch", "next_batch", "config"}``: where the consumer is (batches it has received)."""
        epoch, nxt = self._pos
        if self._resume is not None and epoch is None:
            epoch, nxt = self._resume
        return {"epoch": epoch, "next_batch": int(nxt), "config": self._config()}

    def load_state_dict(self, state: dict) -> None:
        """Make the next ``epoch(state["epoch"])`` start at ``state["next_batch"]``.

        Raises UsageError when the state was saved by a loader with another configuration.
        """
        cfg = self._config()
        diff = {k: (state.get("config", {}).get(k), v) for k, v in cfg.items()
                if state.get("config", {}).get(k) != v}
        if diff:
            what = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, (a, b) in diff.items())
            raise UsageError(f"cannot resume: the loader's configuration differs ({what})")
        if state.get("epoch") is None:
            self._resume = None
            return
        self._resume = (int(state["epoch"]), int(state["next_batch"]))
        self._pos = (None, 0)

    # ------------------------------------------------------------------ iteration
    def epoch(self, epoch: int, start: int | None = None):
        """Iterate over the batches of ``epoch`` (from batch ``start``, or from a loaded state)."""
        run, nb = self._begin(epoch, start)
        try:
            while True:
                item = self._next_submitted(run)
                if item is None:
                    return
                bp, parts = item
                t = time.perf_counter()
                try:
                    got = [(f.result(), lo, hi, last, step) for f, lo, hi, last, step in parts]
                finally:
                    self.stats.wait_s += time.perf_counter() - t
                batch = self._assemble(run, bp, got)
                self._delivered(batch)
                yield batch
        finally:
            self._abandon(run)

    async def aepoch(self, epoch: int, start: int | None = None):
        """``async for batch in loader.aepoch(e)``: the same batches; the caller's event loop awaits
        the pool's work and stays free meanwhile."""
        run, nb = self._begin(epoch, start)
        try:
            while True:
                item = self._next_submitted(run)
                if item is None:
                    return
                bp, parts = item
                t = time.perf_counter()
                try:
                    got = []
                    for f, lo, hi, last, step in parts:
                        # shielded: a cancelled consumer must not cancel a step a later batch shares
                        got.append((await asyncio.shield(asyncio.wrap_future(f)), lo, hi, last, step))
                finally:
                    self.stats.wait_s += time.perf_counter() - t
                batch = self._assemble(run, bp, got)
                self._delivered(batch)
                yield batch
        finally:
            self._abandon(run)

    def __iter__(self):
        """Iterate over epoch 0 (use :meth:`epoch` for later epochs)."""
        return self.epoch(0)

    def _begin(self, epoch, start):
        self._ensure_started()
        epoch = int(epoch)
        if start is None:
            start = 0
            if self._resume is not None and self._resume[0] == epoch:
                start = self._resume[1]
            elif self._resume is not None:
                log.warning("resume state is for epoch %d, starting epoch %d from its first batch",
                            self._resume[0], epoch)
        self._resume = None
        plan = self.plan(epoch)
        nb = int(plan.num_batches)
        if not 0 <= start <= nb:
            raise UsageError(f"start batch {start} outside [0, {nb}] for epoch {epoch}")
        run = _EpochRun(epoch=epoch, start=int(start), plan=plan)
        self._pos = (epoch, int(start))
        return run, nb

    def _delivered(self, batch: Batch):
        self._pos = (batch.epoch, batch.index + 1)
        self.stats.batches += 1
        self.stats.records += len(batch.ids)

    # ------------------------------------------------------------------ the pipeline
    def _next_submitted(self, run: _EpochRun):
        """The oldest submitted batch, after topping up so that ``prefetch`` batches are in flight
        while it is waited for and consumed; None at the end of the epoch."""
        if run.batches is None:
            run.batches = iter(run.plan.batches(run.start))
        # prefetch + 1 read steps in flight (a window step feeds several batches)
        while len(run.steps) < self.prefetch + 1 or not run.pending:
            bp = next(run.batches, None)
            if bp is None:
                break
            run.pending.append(self._submit(run, bp))
        if not run.pending:
            return None
        return run.pending.popleft()

    def _submit(self, run: _EpochRun, bp):
        parts = []
        for step, lo, hi, last in bp.parts:
            fut = run.steps.get(step.number)
            if fut is None:
                fut = self._executor.submit(self._read_decode, step)
                self._active.add(fut)
                fut.add_done_callback(self._active.discard)
                run.steps[step.number] = fut
            parts.append((fut, lo, hi, last, step))
        return bp, parts

    def _assemble(self, run: _EpochRun, bp, got) -> Batch:
        for _, lo, hi, last, step in got:
            if last:
                run.steps.pop(step.number, None)
        if len(got) == 1 and got[0][1] == 0 and got[0][2] == len(got[0][4].ids):
            X, y = got[0][0]
        elif len(got) == 1:
            (X, y), lo, hi = got[0][0], got[0][1], got[0][2]
            X, y = _rows(X, lo, hi), None if y is None else y[lo:hi]
        elif not got:
            X, y = self._empty()
        else:
            X, y = _stack([_rows(X, lo, hi) for (X, _), lo, hi, _, _ in got],
                          None if got[0][0][1] is None else [yy[lo:hi] for (_, yy), lo, hi, _, _ in got])
        return Batch(np.asarray(bp.ids, np.int64), X, y, run.epoch, bp.index)

    def _abandon(self, run: _EpochRun) -> None:
        """The consumer left the epoch: cancel what has not started (started steps run to the end)."""
        for _, parts in run.pending:
            for f, *_ in parts:
                f.cancel()
        run.pending.clear()
        for f in run.steps.values():
            f.cancel()
        run.steps.clear()

    def _read_decode(self, step):
        """Read one step's extents into a pooled buffer and decode its records: (X, y). Runs on the
        pool; the buffer goes back to the pool only after the read has returned."""
        ext_nbytes = np.asarray(step.ext_nbytes, np.int64)
        if len(ext_nbytes) == 0:
            return self._decode_step(step, None, None, None)
        # extents back to back, each starting on a block boundary
        sizes = -(-ext_nbytes // _BLOCK) * _BLOCK
        buf_pos = np.zeros(len(sizes), np.int64)
        if len(sizes) > 1:
            np.cumsum(sizes[:-1], out=buf_pos[1:])
        pool = self._pool
        buf = pool.take(int(sizes.sum()))
        try:
            t0 = time.perf_counter()
            got = self._engine.read(step.ext_file, step.ext_offset, ext_nbytes, buf, buf_pos)
            t1 = time.perf_counter()
            out = self._decode_step(step, buf, buf_pos, got)
            t2 = time.perf_counter()
        finally:
            pool.give(buf)
        with self._stats_lock:
            st = self.stats
            st.io_s += t1 - t0
            st.decode_s += t2 - t1
            st.reads += len(ext_nbytes)
            st.bytes_read += int(got.sum())
            st.payload_bytes += int(np.asarray(step.rec_len, np.int64).sum())
        return out

    def _decode_step(self, step, buf, buf_pos, got):
        """Decode the records of a read step from ``buf``: (X, y) with one row per record."""
        idx = self.index
        ids = np.asarray(step.ids, np.int64)
        if len(ids) == 0:
            return self._empty()
        rext = np.asarray(step.rec_extent, np.int64)
        rpos = np.asarray(step.rec_pos, np.int64)
        rlen = np.asarray(step.rec_len, np.int64)
        # never hand out a record with missing bytes (file truncated or rewritten after indexing)
        short = np.flatnonzero(rpos + rlen > got[rext])
        if short.size:
            j = int(short[0])
            e = int(rext[j])
            f = int(step.ext_file[e])
            off = int(step.ext_offset[e])
            raise DataError(
                f"{idx.paths[f]}: record {int(ids[j])} needs bytes {off + int(rpos[j])}.."
                f"{off + int(rpos[j] + rlen[j])} but the file ends at byte {off + int(got[e])} "
                f"(truncated after indexing? re-run `lirs index`)")
        starts = buf_pos[rext] + rpos
        if idx.format == "libsvm":
            from .decode import decode_libsvm

            ends = starts + rlen
            file_offsets = np.asarray(step.ext_offset, np.int64)[rext] + rpos
            files = np.asarray(step.ext_file)[rext]
            one = idx.nfiles == 1 or (files == files[0]).all()
            source = idx.paths[int(files[0])] if len(files) and one else ""
            try:
                return decode_libsvm(buf, starts, ends, n_features=self.n_features, zero_based=self.zero_based,
                                     dtype=self.dtype, source=source, file_offsets=file_offsets, record_ids=ids)
            except DataError:
                if one:
                    raise
                # name the right file: decode the records of each file on its own to find the culprit
                for f in np.unique(files):
                    m = files == f
                    decode_libsvm(buf, starts[m], ends[m], n_features=self.n_features,
                                  zero_based=self.zero_based, dtype=self.dtype, source=idx.paths[int(f)],
                                  file_offsets=file_offsets[m], record_ids=ids[m])
                raise
        if idx.format in ("npy", "fixed"):
            from .decode import decode_fixed

            return decode_fixed(buf, starts, idx.record_dtype, idx.record_shape), idx.labels_of(ids)
        from .decode import decode_lines

        return decode_lines(buf, starts, starts + rlen), idx.labels_of(ids)

    def _empty(self):
        """(X, y) of zero records, shaped like any other batch of this dataset."""
        idx = self.index
        ids = np.empty(0, np.int64)
        if idx.format == "libsvm":
            import scipy.sparse as sp

            return (sp.csr_matrix((0, self.n_features), dtype=self.dtype), np.empty(0, np.float64))
        if idx.format in ("npy", "fixed"):
            return np.empty((0, *idx.record_shape), idx.record_dtype), idx.labels_of(ids)
        return [], idx.labels_of(ids)

    def __repr__(self):
        return (f"Loader({self.index!r}, batch_size={self.batch_size}, granularity={self.granularity!r}, "
                f"prefetch={self.prefetch}, engine={self.engine_name!r})")


def _rows(X, lo: int, hi: int):
    """Rows lo:hi of a decoded step. A CSR slice shares the step's arrays (no copy, no checks):
    the step is never modified and lives as long as a batch refers to it."""
    import scipy.sparse as sp

    if sp.issparse(X):
        from .decode import _csr

        a, b = int(X.indptr[lo]), int(X.indptr[hi])
        indptr = X.indptr[lo:hi + 1] - a if a else X.indptr[lo:hi + 1]
        return _csr(X.data[a:b], X.indices[a:b], indptr, (hi - lo, X.shape[1]))
    return X[lo:hi]


def _stack(Xs: list, ys):
    """Rows of several decoded steps as one batch: (X, y)."""
    first = Xs[0]
    y = None if ys is None else np.concatenate(ys)
    if isinstance(first, list):
        return [r for X in Xs for r in X], y
    if isinstance(first, np.ndarray):
        return np.concatenate(Xs, axis=0), y
    from .decode import _csr

    # CSR pieces end to end: the arrays concatenate, each indptr shifted by the values before it
    nnz = np.cumsum([0] + [int(X.indptr[-1]) for X in Xs])
    indptr = np.concatenate([Xs[0].indptr[:1]] + [X.indptr[1:] + off for X, off in zip(Xs, nnz[:-1])])
    return _csr(np.concatenate([X.data for X in Xs]), np.concatenate([X.indices for X in Xs]),
                indptr.astype(Xs[0].indptr.dtype, copy=False), (sum(X.shape[0] for X in Xs), first.shape[1])), y


def _pool_threads(executor) -> tuple:
    return tuple(getattr(executor, "_threads", ())) if executor is not None else ()
