"""The Loader: batches of a fresh random order every epoch, read and decoded ahead of the consumer.

The consumer's thread draws the batches' plans in order and hands each read step to a pool of threads,
``prefetch`` batches ahead; a pool thread reads the step's extents with the engine (io_uring or pread, no GIL
held) into a pooled buffer and decodes it (numba, no GIL) while the training step computes. Consecutive group
batches share a read step of at least STEP_MIN_BYTES (a step costs Python under the GIL), taken by the
consumer as one: one plan, one wait, then each batch's rows (:class:`~lirs.steps.SharedStep`). Batches arrive
in plan order; an error in any stage is raised in the consumer at the first batch of its read step; ``aepoch``
serves asyncio code. Memory stays about index + plan + the read steps that ``prefetch + 1`` batches span.

``transform=fn`` runs ``fn(batch)`` on the pool thread right after the batch is decoded, and the consumer
receives what it returns (the torch adapter builds its tensors there). numba kernels and most numpy/torch
calls release the GIL, so such transforms run in parallel with the training step; a pure-Python transform
holds the GIL and only overlaps the consumer's waits. An exception in ``fn`` reaches the consumer at that
batch as :class:`~lirs.errors.TransformError` (batch and epoch in the message, the original as ``__cause__``).

``epoch(e, stride=W, offset=w)`` delivers only batches ``w, w + W, ...`` (planning none of the others):
DataLoader worker ``w`` of ``W`` reads those, so a round robin over the workers gives this Loader's sequence.

Resume: :meth:`Loader.state_dict` says where the consumer is; a loaded state resumes exactly, or elastically
under another world size (:mod:`lirs.state`). A plain pass (``for batch in loader``) starts the next epoch.

::

    with lirs.Loader("train.svm", 1024, granularity="window") as loader:
        for epoch in range(10):
            for batch in loader.epoch(epoch):
                model.partial_fit(batch.X, batch.y)
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from concurrent import futures

import numpy as np

from .assemble import StepDecoder, rows_each
from .api import keyword_only, whole
from .batch import Batch, LoaderStats
from .constants import BLOCK, DEFAULT_GROUP_BYTES, DEFAULT_PREFETCH, DEFAULT_WINDOW
from .cores import usable_cores
from .engines import reads_are_copies
from .errors import UsageError
from .firstuse import open_source
from .pipeline import EpochRun, Pipeline
from .plan import check_args, plan_epoch
from .policies import DEFAULT_GRANULARITY, POLICIES
from .ranges import check_drop_last, over_spans, remainder
from .loaderargs import check_loader_args, check_windows, refuse_libsvm_options_of
from .recommendation import AUTO, auto_settings
from .state import ResumeState, check_config, ranks_progress, states_of
from .units import format_bytes
from .steps import SharedStep
from .windows import group_span, rank_reads, window_groups
from . import warmup
from .aepoch import Hop, batches as async_batches

log = logging.getLogger("lirs.loader")

_CONFIG_KEYS = ("batch_size", "granularity", "group_bytes", "window", "seed", "rank", "world_size",
                "drop_last", "permutation")
_ELASTIC_KEYS = ("batch_size", "rank", "world_size")  # may change between a save and an elastic resume
# what the Loader took by position before everything after batch_size became keyword-only
_OLD_POSITIONAL = ("granularity", "group_bytes", "window", "seed", "engine", "prefetch", "rank", "world_size",
                   "drop_last", "dtype", "permutation", "index")


class Loader:
    """Random batches of an indexed dataset, read with direct I/O and decoded ahead of the consumer.

    Parameters
    ----------
    source : str, list of str, or Index
        A data file, a directory, a ``.lirs`` sidecar, a one-element list of those, or an opened
        :class:`~lirs.index.Index` (several files: pass their sidecar or the Index). A data file
        or directory with no sidecar is indexed on first use (see ``index``).
    batch_size : int
        Records per batch (per rank).

    Every other parameter is keyword-only.

    granularity : {"window", "group", "page", "instance", "auto"}
        Shuffling unit of the planner (see :mod:`lirs.policies` and :func:`lirs.plan.plan_epoch`);
        default ``"window"``. ``"auto"``: the choice ``lirs bench DATA --auto`` saved for this
        dataset (with its group_bytes and window), or ``"window"`` when there is none.
    group_bytes : int, str or None
        Bytes of a group (granularity group and window), a multiple of 4096 (``"128K"`` too), at most
        2**62; None: 64 KiB, or with ``granularity="auto"`` the saved group size (one given wins over it).
    window : int or str
        Granularity ``window``: the memory its random groups are dealt from — ``"auto"`` (None: the
        default, 5% of the data within 16 MiB .. 256 MiB), a size such as ``"64M"``, a share of the
        data such as ``"5%"``, or a group count; with ``granularity="auto"`` a window given here is the
        memory budget and wins over the window ``lirs bench --auto`` saved. A group's records spread
        over about ``window / (batch_size x record bytes)`` batches, so a larger window makes batches
        closer to uniform; two windows are in flight (the consumed one and the next one, read), three
        where reads wait for a device or on 8 cores or more (:func:`lirs.policies.windows_in_flight`),
        each raw and then decoded: a 16 MiB window epoch held 7.5x its bytes (docs/results.md), records
        under 27 B ~200 B each (plans, step arrays: ``STEP_RECORD_COST``; ``"auto"`` holds fewer of them).
    permutation : ``"auto"``, ``"table"`` or ``"stateless"`` (see :mod:`lirs.permutation`).
    seed : int
        The epoch order is a function of ``(seed, epoch, rank, world_size)`` only.
    engine : str
        ``"auto"`` (``$LIRS_ENGINE`` or the best that works here), ``"uring"``, ``"threads"``,
        ``"aiofiles"`` or ``"buffered"`` (see :mod:`lirs.engines`).
    prefetch : int
        Batches read and decoded ahead of the consumer (>= 1); at least one per thread of the
        pool, which has a thread per usable core and one more, so that every core decodes.
    rank, world_size, drop_last : sharding over data-parallel workers.
    dtype : numpy dtype of LIBSVM values (npy/fixed keep the file's dtype).
    index : {"auto", "never"}
        ``"auto"``: a data file or directory without a sidecar is indexed on first use, as
        ``lirs index`` would (a progress bar on stderr for long scans); ``"never"``: it raises
        :class:`~lirs.errors.IndexFormatError` instead.
    n_features, zero_based : LIBSVM decoding (defaults: from the index, by sklearn's rule); set for
        another format, UsageError (its rows take their shape from it).
    depth : int or None
        Reads in flight per batch for the engine (its default when None).
    direct : O_DIRECT (bool), or None: when the filesystem allows it.
    transform : callable or None
        ``transform(batch: Batch) -> anything``, run on the pool right after decoding; the
        iterators then yield its results (see the module docstring for the GIL and errors).
    verify : bool
        TFRecord: check each record's payload CRC-32C as it is read (the length CRC always is).
    threads : int or None
        Threads of the read-and-decode pool; None: one per usable core and one more (a process that
        shares the cores with others, such as a DataLoader worker, takes its share); ``threads`` set,
        the loader keeps ``threads - 1`` cores busy. Where reads are copies (not a direct engine)
        on fewer than 8 cores, cores - 1 threads take steps whenever there are some, the others only
        while the consumer is away and a core is idle, and a consumer that waits runs steps itself.
    decode_threads : int or None
        Threads that decode one window at once; None: the loader's cores but one (the core left over
        is the consumer's; :func:`lirs.torch.make_dataloader`'s workers split the usable cores but one).
    """

    @keyword_only(_OLD_POSITIONAL)
    def __init__(self, source, batch_size, *, granularity=DEFAULT_GRANULARITY, group_bytes=None,
                 window=None, seed=0, engine="auto", prefetch=DEFAULT_PREFETCH, rank=0, world_size=1,
                 drop_last=False, dtype=np.float32, permutation="auto", index="auto", n_features=None,
                 zero_based="auto", depth=None, direct=None, transform=None, verify=False, threads=None,
                 decode_threads=None):
        # the keywords, and LIBSVM's against the format, checked before the source: it may be indexed
        a = check_loader_args(**{k: v for k, v in locals().items() if k not in ("self", "source")})
        refuse_libsvm_options_of(source, n_features, zero_based)
        self.index = open_source(source, index)
        self._owns_index = self.index is not source  # opened here: released by close()
        self.batch_size, self.prefetch, self.threads, self.seed = a.batch_size, a.prefetch, a.threads, a.seed
        self.rank, self.world_size, self.permutation, self.dtype = a.rank, a.world_size, a.permutation, a.dtype
        self.engine_name, self.depth, self.direct, self.transform = a.engine, a.depth, a.direct, transform
        granularity, gb, window = a.granularity, a.group_bytes, a.window  # None: not given
        if granularity == AUTO:  # what `lirs bench --auto` saved for this dataset, else the default
            granularity, gb, window = auto_settings(self.index, gb, window)
        self.granularity, self.group_bytes = granularity, DEFAULT_GROUP_BYTES if gb is None else gb
        # a group count, whatever the spec ("64M", "5%", 16; "auto" counts records too): plan, state, stats use it
        span = group_span(max(self.group_bytes, BLOCK), self.index.payload_bytes, self.index.n)  # a group's bytes
        self.window = window_groups(DEFAULT_WINDOW if window is None else window, span, self.index.payload_bytes, self.index.n)
        self.drop_last = check_drop_last(self.index.n, self.batch_size, self.world_size, a.drop_last)
        # the pool's threads are its cores and one more (a pool sized by hand: a DataLoader worker's share)
        self._decoder = StepDecoder(self.index, n_features=n_features, zero_based=zero_based, dtype=self.dtype,
                                    verify=a.verify, cores=None if self.threads is None else self.threads - 1,
                                    wide_threads=a.decode_threads)
        dec = self._decoder  # npy/fixed: the index's row width (a model is sized by it); lines: None
        self.n_features, self.zero_based = dec.index.n_features if dec.n_features is None else dec.n_features, dec.zero_based
        check_args(self.batch_size, granularity, self.group_bytes, self.window, self.rank, self.world_size,
                   self.seed, 0, BLOCK, self.permutation)  # what `lirs bench --auto` saved, the window's group count
        if self.world_size > 1 and self.rank == 0 and POLICIES[granularity].uses_window and (x := rank_reads(
                self.window, span, self.index.payload_bytes, self.world_size)) > 1.5:
            log.warning("with %d ranks and windows of %s, each rank reads up to %.1fx its share of the data; a window of "
                        "a quarter of the share or less keeps it near 1x (window=)", self.world_size,
                        format_bytes(min(self.window * span, self.index.payload_bytes)), x)
        self.stats = LoaderStats()
        self._cfg = self._make_config()
        self._pos = ResumeState()  # where the consumer is (epoch None: nothing delivered yet)
        self._moved = None  # (batch, epoch) delivered last, not folded into _pos yet (_position)
        self._resume: ResumeState | None = None  # a loaded state the next epoch(e) starts from
        self._next_epoch = 0  # the epoch a plain pass (``for b in loader``) starts
        self._stride, self._nb = 1, 0  # of the epoch being walked
        self._lock, self._hop = threading.Lock(), Hop()  # _hop: the thread aepoch begins and plans on
        self._pid, self._pipeline, self._closed, self._last_plan = None, None, False, None  # _pipeline: Pipeline
        # on an empty numba cache, read and decode kernels compile in a helper process meanwhile
        self._warm = warmup.start({"engine": engine, "depth": depth, "format": self.index.format,
                                   "dtype": self.dtype.str})

    # ------------------------------------------------------------------ setup / teardown
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
            if self._closed:  # meanwhile, by another thread (an aepoch begins on the Loader's helper)
                raise ValueError("this Loader is closed")
            if self._pid == pid:
                return
            # a forked child: the parent's pool threads and rings do not exist here; start over
            # a thread per usable core (affinity: taskset, containers) and one more, for a thread's wait on a read
            workers = self.threads if self.threads is not None else usable_cores() + 1
            self._pipeline = Pipeline(self.index, engine=self.engine_name, direct=self.direct,
                                      depth=self.depth, decode=self._decoder, workers=workers, stats=self.stats,
                                      warm=self._warm, cores=None if self.threads is None else self.threads - 1)
            self._pid = pid

    def close(self) -> None:
        """Stop the pool's and the engine's threads, close every file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed, self._last_plan = True, None  # the plan refers to the index (its maps' descriptors)
            if self._pid != os.getpid():  # before its first epoch here (or a forked child's): no pool of ours runs
                self._pid = None
            else:
                pipeline, self._pipeline = self._pipeline, None
                if pipeline is not None:
                    pipeline.close()
            self._warm.join_preload()  # closed before its first epoch: the preload of its kernels
            self._release_index()
        self._hop.close()  # outside the lock (a _begin running there may be waiting for it); none made after it

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
    def plan(self, epoch: int, spans=None):
        """The :class:`~lirs.plan.EpochPlan` of ``epoch`` for this loader's rank (the last one is
        cached); ``spans``: only those position ranges of the epoch (an elastic resume)."""
        if self._closed:  # its index is let go (num_batches() after close() failed on None)
            raise ValueError("this Loader is closed")
        key = (whole("epoch", epoch), None if spans is None else np.asarray(spans, np.int64).tobytes())
        if self._last_plan is not None and self._last_plan[0] == key:
            return self._last_plan[1]
        self._last_plan = None  # let go first: two epochs' unit permutations (4 B a unit) need not be held at once
        plan = self._make_plan(epoch, spans)
        self._last_plan = (key, plan)
        return plan

    @functools.cached_property
    def _copies(self) -> bool:
        """Whether this Loader's engine reads through the page cache (its plans read each record's
        bytes alone): asked once, with one O_DIRECT probe of the first file at most."""
        return reads_are_copies(self.engine_name, self.direct, self.index.paths)

    def _make_plan(self, epoch: int, spans=None):
        plan = plan_epoch(self.index, self.batch_size, self.granularity, seed=self.seed, epoch=int(epoch),
                          rank=self.rank, world_size=self.world_size, drop_last=self.drop_last,
                          group_bytes=self.group_bytes, window=self.window, permutation=self.permutation,
                          block=BLOCK, align=1 if self._copies else BLOCK)
        return plan if spans is None else over_spans(plan, spans)

    def num_batches(self, epoch: int = 0) -> int:
        """Batches of this loader's rank in ``epoch``."""
        return int(self.plan(epoch).num_batches)

    # ------------------------------------------------------------------ state
    def _make_config(self) -> dict:
        return {**{k: getattr(self, k) for k in _CONFIG_KEYS}, "n": int(self.index.n), "format": self.index.format,
                "layout": int(self.index.layout), "files": int(self.index.order)}  # which dataset, its files in order

    def _config(self) -> dict:
        return dict(self._cfg)

    @property
    def position(self) -> ResumeState:
        """Where the consumer is, without the configuration (cheap: read once per batch by the
        torch adapter); :meth:`state` has the whole state."""
        return self._position()

    def _position(self) -> ResumeState:
        """``_pos`` past the batch delivered last: folded in when asked for, not at each batch (a
        state object a batch was a few Python calls on the consumer's thread, under the GIL)."""
        if self._moved is not None:
            (j, e), self._moved = self._moved, None
            self._pos = self._pos.at(min(j + self._stride, self._nb), e)
        return self._pos

    def state(self) -> ResumeState:
        """Where the consumer is: the :class:`~lirs.state.ResumeState` of the next batch this loader
        would deliver (batches before it were received; with a stride, the next of its own
        sequence), or the loaded state it would start from, with this loader's configuration."""
        pos = self._position()
        if self._resume is not None and pos.epoch is None:
            pos = self._resume
        return pos.replace(config=self._config(), worker=None)

    def state_dict(self) -> dict:
        """``{"version", "epoch", "next_batch", "spans", "config"}``: :meth:`state` as a plain dict.
        ``spans``: None, or the position ranges of the epoch an elastic resume is walking (a list
        of ``[lo, hi)``)."""
        return self.state().to_dict()

    def load_state_dict(self, state) -> None:
        """Make the next ``epoch(state["epoch"])`` go on where ``state`` left off.

        ``state``: one :meth:`state_dict` (or :class:`~lirs.state.ResumeState`), or a list of every
        old rank's states. The same rank, world size and batch size resume exactly at
        ``next_batch``; others resume elastically (see the module docstring; one state stands for
        every old rank). Raises UsageError when a state was saved by a loader that plans another
        epoch (seed, granularity, dataset, ...; not a setting the granularity does not plan with).
        """
        states = states_of(state)
        if not states:
            raise UsageError("cannot resume from an empty list of states")
        unused = POLICIES[self.granularity].unused_settings  # "window: saved 256, now 1024" of a group epoch: same batches
        now = {k: v for k, v in self._config().items() if k not in unused}
        for st in states:
            check_config(st.config, now, _ELASTIC_KEYS)
        if len({st.epoch for st in states}) != 1 or states[0].epoch is None:
            if any(st.epoch is not None for st in states):
                raise UsageError("cannot resume: the states were saved in different epochs")
            self._resume = None
            return
        epoch, spans = states[0].epoch, states[0].spans
        if any(st.spans != spans for st in states):
            raise UsageError("cannot resume: the states walk different parts of the epoch (spans)")
        old = {k: states[0].config[k] for k in _ELASTIC_KEYS}
        if any({k: st.config[k] for k in ("batch_size", "world_size")} != {k: old[k] for k in
               ("batch_size", "world_size")} for st in states):
            raise UsageError("cannot resume: the states come from loaders of different world or batch sizes")
        if len(states) == 1 and old == {k: getattr(self, k) for k in _ELASTIC_KEYS}:
            self._resume = ResumeState(epoch, states[0].next_batch, spans)
        else:
            left = remainder(self.index.n, states[0].spans_list(), old["batch_size"], old["world_size"],
                             self.drop_last, ranks_progress(states, old["world_size"]))
            self._resume = ResumeState(epoch, 0, left)
        self._pos, self._moved = ResumeState(), None

    # ------------------------------------------------------------------ iteration
    def epoch(self, epoch: int, start: int | None = None, *, stride: int = 1, offset: int = 0,
              windows: tuple | None = None):
        """Iterate over the batches of ``epoch``: from batch ``start`` (or where a loaded state
        left off), plus ``offset``, then every ``stride``-th (``Batch`` objects, or what the
        transform returns). ``windows=(w, W)`` (granularity ``window``): only the rows of windows
        ``w, w + W, ...`` of each batch from ``start``; a batch with rows in other windows comes as
        a piece (:attr:`Batch.piece`), a batch of no rows with ``w`` 0, and the W walks together
        read each window once and deliver every batch once (what :mod:`lirs.torch`'s workers do)."""
        self._hop.drain()  # an async epoch's abandon still queued there ends before this one begins
        run = self._begin(epoch, start, stride, offset, windows)
        pipe = self._pipeline
        try:
            pipe.consumer_in = True
            while (item := self._next(run)) is not None:
                try:
                    results = run.wait(item)
                except Exception:
                    self._failed(run, item)
                    raise
                for out in self._delivered(run, item, results):
                    pipe.consumer_in = False  # away with the batch: the pool's extra threads may help
                    yield out
                    pipe.consumer_in = True
        finally:
            pipe.consumer_in = False
            run.abandon()

    def wait_idle(self) -> None:
        """Wait for the read steps of epochs left early: after a ``break`` those already started run to the end
        and count in :attr:`stats` (only the others are cancelled), so a reset after this counts what follows alone."""
        self._hop.drain()  # an async epoch's abandon, queued there
        if (pipe := self._pipeline) is not None and self._pid == os.getpid():
            futures.wait([f for f in list(pipe.active) if f.running()])  # the abandon cancelled the others

    def aepoch(self, epoch: int, start: int | None = None, *, stride: int = 1, offset: int = 0,
               windows: tuple | None = None):
        """``async for batch in loader.aepoch(e)``: the same batches as :meth:`epoch`; the caller's
        event loop only awaits: the pool's work, and the epoch's start and planning on a helper thread."""
        begin = functools.partial(self._begin, epoch, start, stride, offset, windows)
        return async_batches(self._hop, begin, self._next, self._delivered, self._failed)

    def _failed(self, run, item) -> None:
        """The position after ``item``'s wait raised: its batch (with windows=, not always the next)."""
        self._pos, self._moved = self._pos.at(item.plan.index, run.epoch), None

    def _next(self, run):
        """``run``'s next batch item (None: the end); once closed, ValueError, not the batches read ahead (however
        many); in a forked child, UsageError for an epoch begun before the fork (its reads were the parent's)."""
        if self._closed:
            raise ValueError("this Loader is closed")
        if run.pipeline is not self._pipeline or self._pid != os.getpid():
            raise UsageError("this epoch was begun in another process (before a fork): begin it again here, at the "
                             "batch this process is at (loader.epoch(e, start=...) or a loaded state)")
        return run.next()

    def __iter__(self):
        """A plain pass: each one starts the next epoch (0, 1, 2, ...), so that ``for batch in
        loader`` twice gives two fresh orders. :meth:`set_epoch` chooses the next pass's epoch; a
        loaded state resumes its own epoch; after ``epoch(e)`` the next pass is ``e + 1``."""
        return self.epoch(self._resume.epoch if self._resume is not None else self._next_epoch)

    def set_epoch(self, epoch: int) -> None:
        """Make the next plain pass (``for batch in loader``) deliver ``epoch``; a loaded state of
        another epoch is dropped, as the torch dataset's ``set_epoch`` drops it."""
        self._next_epoch = whole("epoch", epoch)
        if self._resume is not None and self._resume.epoch != self._next_epoch:
            log.warning("resume state is for epoch %d, epoch %d starts from its first batch", self._resume.epoch, epoch)
            self._resume = None
        if self._resume is None:  # a state saved now resumes that epoch, as the torch dataset's does
            self._pos, self._moved = ResumeState(self._next_epoch), None

    def _begin(self, epoch, start, stride=1, offset=0, windows=None):
        if self._closed:
            raise ValueError("this Loader is closed")
        epoch, stride, offset = whole("epoch", epoch), whole("stride", stride, None), whole("offset", offset, None)
        if stride < 1 or offset < 0:
            raise UsageError(f"stride must be >= 1 and offset >= 0, got stride={stride}, offset={offset}")
        spans, windows = None, check_windows(windows)
        if start is None:
            start = 0
            if self._resume is not None and self._resume.epoch == epoch:
                start, spans = self._resume.next_batch, self._resume.spans_list()
            elif self._resume is not None:
                log.warning("resume state is for epoch %d, starting epoch %d from its first batch",
                            self._resume.epoch, epoch)
        else:  # 1.5 started at batch 1, "1" failed with a bare TypeError
            start = whole("start", start)
        self._resume = None
        self._next_epoch = epoch + 1
        plan = self.plan(epoch, spans)
        nb = int(plan.num_batches)
        if not 0 <= start <= nb:
            raise UsageError(f"start batch {start} outside [0, {nb}] for epoch {epoch}")
        first = min(start + offset, nb)
        # the pipeline starts after planning: cold, the planning kernels compile while helpers compile the rest
        warmup.prime_walk(self._warm, plan, first, stride, windows)
        self._ensure_started()
        self._pos, self._moved, self._stride, self._nb = ResumeState(epoch, first, spans), None, stride, nb
        finish = None if self.transform is None else self._finisher(epoch)
        return EpochRun(self._pipeline, plan, epoch, first, self.prefetch, self._decoder.empty,
                        stride=stride, finish=finish, windows=windows, units=True)

    def _finisher(self, epoch: int):
        """finish(bp, X, y) for the pool: the batch through the transform (EpochRun names its errors)."""
        transform = self.transform

        def finish(bp, X, y):
            return transform(Batch(np.asarray(bp.ids, np.int64), X, y, epoch, bp.index, bp.piece))
        return finish

    def _delivered(self, run: EpochRun, item, results):
        """The one delivery of ``epoch`` and ``aepoch``: the batch (or the transform's result) of
        ``item`` from the results of its waits, or each batch of a shared step in turn (rows of the
        decoded step; the position moves past each as it is taken)."""
        if type(item.plan) is not SharedStep:
            return (self._made(run, item.plan, run.deliver(item, results)),)
        return self._shared(run, item, results)

    def _shared(self, run: EpochRun, item, results):
        """Each batch of a shared step (no transform: see EpochRun), as :meth:`_made` makes one,
        in one loop (a call less a batch, on the consumer's thread)."""
        run.release(item)
        plans, epoch, stats = item.plan.plans, run.epoch, self.stats
        cuts = [bp.parts[0].lo for bp in plans] + [plans[-1].parts[0].hi]
        for bp, (X, y) in zip(plans, rows_each(results[0], cuts)):
            if self._closed:  # the step's other batches are read ahead too
                raise ValueError("this Loader is closed")
            self._moved = (bp.index, epoch)
            stats.batches += 1
            stats.records += len(bp.ids)
            yield Batch(bp.ids, X, y, epoch, bp.index, bp.piece)

    def _made(self, run: EpochRun, bp, out):
        """Batch ``bp`` from its rows ``out`` = (X, y) (or the transform's result); the position
        moves past it."""
        if self.transform is None:
            out = Batch(np.asarray(bp.ids, np.int64), *out, run.epoch, bp.index, bp.piece)
        self._moved = (bp.index, run.epoch)
        self.stats.batches += 1
        self.stats.records += len(bp.ids)
        return out

    def __repr__(self):
        return (f"Loader({self.index!r}, batch_size={self.batch_size}, granularity={self.granularity!r}, "
                f"prefetch={self.prefetch}, engine={self.engine_name!r})")

