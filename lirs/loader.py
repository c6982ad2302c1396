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

import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .assemble import StepDecoder
from .constants import BLOCK
from .errors import UsageError
from .index import Index, open_index
from .pipeline import EpochRun, Pipeline
from .plan import check_args, plan_epoch
from .recommendation import auto_settings

log = logging.getLogger("lirs.loader")


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
    verify : bool
        TFRecord: check each record's payload CRC-32C as it is read (the length CRC always is).
    """

    def __init__(self, paths, batch_size, granularity="group", group_bytes=65536, window=16, seed=0,
                 engine="auto", prefetch=4, rank=0, world_size=1, drop_last=False, dtype=np.float32,
                 permutation="auto", index=None, *, n_features=None, zero_based="auto", depth=None,
                 direct=None, verify=False):
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
        self._decoder = StepDecoder(self.index, n_features=n_features, zero_based=zero_based, dtype=self.dtype,
                                    verify=verify)
        self.n_features, self.zero_based = self._decoder.n_features, self._decoder.zero_based
        check_args(self.batch_size, granularity, self.group_bytes, self.window, self.rank, self.world_size,
                   self.seed, 0, BLOCK, permutation)
        self.stats = LoaderStats()
        self._cfg = self._make_config()
        self._pos = (None, 0)  # (epoch, next batch) as seen by the consumer
        self._resume: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self._pid = None
        self._pipeline: Pipeline | None = None
        self._closed = False
        self._last_plan = None

    # ------------------------------------------------------------------ setup / teardown
    @staticmethod
    def _open_index(src):
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
        return self._pipeline.engine

    def _ensure_started(self):
        if self._closed:
            raise ValueError("this Loader is closed")
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._lock:
            if self._pid == pid:
                return
            # a forked child: the parent's pool threads and rings do not exist here; start over
            # one thread more than cores: a thread waiting on its read leaves a core to decoding
            workers = max(2, min(self.prefetch, (os.cpu_count() or 2) + 1))
            self._pipeline = Pipeline(self.index.paths, engine=self.engine_name, direct=self.direct,
                                      depth=self.depth, decode=self._decoder, workers=workers, stats=self.stats)
            self._pid = pid

    def close(self) -> None:
        """Stop the pool's and the engine's threads, close every file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pid != os.getpid():
                self._pid = None
                self._release_index()
                return  # no thread of ours runs in this process
            pipeline, self._pipeline = self._pipeline, None
            if pipeline is not None:
                pipeline.close()
            self._last_plan = None
            self._release_index()

    def _release_index(self) -> None:
        if self._owns_index:
            # its memory maps hold descriptors of the sidecar (the decoder refers to it too)
            self.index = self._decoder = None

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
        return plan_epoch(self.index, self.batch_size, self.granularity, seed=self.seed, epoch=int(epoch),
                          rank=self.rank, world_size=self.world_size, drop_last=self.drop_last,
                          group_bytes=self.group_bytes, window=self.window, permutation=self.permutation,
                          block=BLOCK)

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
        run = self._begin(epoch, start)
        try:
            while (item := run.next()) is not None:
                bp, parts = item
                yield self._deliver(run, bp, parts, run.wait(parts))
        finally:
            run.abandon()

    async def aepoch(self, epoch: int, start: int | None = None):
        """``async for batch in loader.aepoch(e)``: the same batches; the caller's event loop awaits
        the pool's work and stays free meanwhile."""
        run = self._begin(epoch, start)
        try:
            while (item := run.next()) is not None:
                bp, parts = item
                yield self._deliver(run, bp, parts, await run.await_parts(parts))
        finally:
            run.abandon()

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
        self._pos = (epoch, int(start))
        return EpochRun(self._pipeline, plan, epoch, int(start), self.prefetch, self._decoder.empty)

    def _deliver(self, run: EpochRun, bp, parts, results) -> Batch:
        X, y = run.assemble(bp, parts, results)
        batch = Batch(np.asarray(bp.ids, np.int64), X, y, run.epoch, bp.index)
        self._pos = (batch.epoch, batch.index + 1)
        self.stats.batches += 1
        self.stats.records += len(batch.ids)
        return batch

    def __repr__(self):
        return (f"Loader({self.index!r}, batch_size={self.batch_size}, granularity={self.granularity!r}, "
                f"prefetch={self.prefetch}, engine={self.engine_name!r})")

