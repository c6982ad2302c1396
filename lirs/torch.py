"""PyTorch adapter: lirs batches as torch tensors, over ranks and DataLoader workers, resumable. ::

    from lirs.torch import make_dataloader

    dl = make_dataloader("train.svm", batch_size=1024, num_workers=2)
    for epoch in range(10):
        dl.dataset.set_epoch(epoch)          # a fresh permutation, the same on every rank
        for b in dl:
            loss = model(b["X"], b["y"]) ...
        state = dl.state_dict()              # at any batch: {"epoch", "next_batch", ...}

**Ranks.** Rank ``r`` of ``R`` (from ``torch.distributed`` when it is initialized) reads its own
contiguous slice of the epoch's global order: the union over ranks is every record exactly once
(``drop_last=False``), with no communication (the order is a function of seed and epoch).

**Workers.** A rank's batches are exactly :class:`lirs.Loader`'s batches for that rank (same ids, order, sizes
and count) whatever ``num_workers``. Under :func:`make_dataloader` worker ``w`` of ``W`` delivers batches
``w, w + W, ...`` or, with window steps, the rows of windows ``w, w + W, ...`` (each window read once between the
workers), in bundles the main process puts back in order (:mod:`lirs.workers`); a hand-built DataLoader gets one
batch per item, worker ``w`` taking batches ``w, w + W, ...``. Each worker's pool is its share of the usable
cores (:func:`~lirs.workers.worker_threads`). Persistent workers deliver every pass the epoch the main process
chose (``set_epoch``, a loaded state, the next epoch), posted on a board each worker reads as its pass starts.
``device="cuda"`` moves each batch to the GPU on a side stream, from a thread of its own (:class:`lirs.tensors.Feeder`).

**Tensors** are built from the decoded arrays (a CSR tensor shares them) on the thread that consumes the batch
(cheaper than a task on the pool; a device feeder packs the arrays themselves); a ``transform`` runs on the pool.
They are: ids int64 (k,); X a ``torch.sparse_csr_tensor`` (default; indices int32 as the decoder
makes them, int64 when needed), a COO or a dense float tensor (k, n_features) for LIBSVM, a dense
tensor (k, *record_shape) for npy/fixed, a list of ``bytes`` for lines (without their line ends); y (k,) ``label_dtype`` or
None. torch's one-time notices (sparse CSR in beta, invariant checks off) are silenced on import.

**Resume.** ``state_dict()`` / ``load_state_dict(sd)`` on the dataset (and on the DataLoader that
:func:`make_dataloader` returns, a :class:`LirsDataLoader` that counts the batches the consumer received, so
that batches workers prefetched are not counted) resume mid-epoch exactly with any ``num_workers`` (the state
of a dataset whose pass the workers of a DataLoader built by hand deliver is a UsageError). With
torchdata's ``StatefulDataLoader(ds, batch_size=None, num_workers=W)`` the dataset's state is taken inside each
worker (then it names the worker, and resumes only there). A state saved with another world size (same global
batch ``batch_size * world_size``, or any) resumes *elastically*: the records of the epoch no old rank consumed
are split over the new ranks, each delivered once (:mod:`lirs.state`). A state from another seed, granularity or
dataset is refused. torch is imported by this module, :mod:`lirs.tensors`, :mod:`lirs.workers`, :mod:`lirs.ring` only.
"""
from __future__ import annotations

import inspect
import logging
import multiprocessing
import os
import weakref

import numpy as np

try:
    import torch
except ImportError as e:  # a bare "No module named 'torch'" says nothing of the extra
    raise ImportError("lirs.torch needs PyTorch: pip install 'lirs[torch]' (any torch >= 2.1)") from e
import torch.utils.data as tud

from .constants import BYTES_FORMATS
from .errors import UsageError
from .freshness import check_data_unmoved, check_identity, identity
from .inputs import absolute_source
from .loader import Loader
from .arena import install
from .passtimes import begun, timed_main
from .api import known_keywords, maybe_bool, positive_int, whole
from .loaderargs import check_loader_args
from .policies import POLICIES
from .state import ResumeState, states_of
from .tensors import Feeder, TorchBatch, check_device, check_label_dtype, check_outputs, to_tensors, tuples  # noqa: F401 - public here too
from .passboard import Fed, PassBoard, PassPosition, delivering, superseded, while_current
from .ring import BUNDLE_BATCHES
from .workererrors import Failed, failing_early, stops_at_error
from .torchchecks import check_tensor_records
from .workers import Bundler, bundled, Convert, before_fork, in_order, share_of, worker_of, worker_pool, worker_threads, workers_memory

log = logging.getLogger("lirs.torch")



def _dist_rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class LirsIterableDataset(PassPosition, tud.IterableDataset):
    """Batches of one lirs epoch as torch tensors (an ``IterableDataset`` of whole batches: use it
    with ``DataLoader(batch_size=None)``, or :func:`make_dataloader`).

    Parameters
    ----------
    path_or_index : str or Index
        As :class:`lirs.Loader` takes it.
    batch_size : int
        Records per batch (per rank).
    sparse : {"csr", "coo", "dense"}
        LIBSVM batches as ``torch.sparse_csr_tensor`` (default), a COO tensor, or a dense tensor
        (k, n_features) (only for small n_features). npy/fixed data is always dense.
    output : {"dict", "tuple"}
        ``{"ids", "X", "y"}`` or a :class:`TorchBatch` ``(X, y, ids)`` (a named tuple, kept by torch's collation).
    label_dtype : torch dtype of y (default float32); ids are int64.
    rank, world_size : int or None
        None: from ``torch.distributed`` when it is initialized, else 0 and 1.
    epoch : int
        First epoch (change it with :meth:`set_epoch`).
    transform : callable or None
        Applied to each output (dict or tuple) on the pool, after the tensors are built.
    **loader_kwargs
        Passed to :class:`lirs.Loader` (granularity, group_bytes, window, seed, engine, prefetch,
        drop_last, dtype, ...).

    Yields per batch: ids int64 (k,); X (k, n_features) sparse or dense for LIBSVM, (k, *record_shape)
    in the data's dtype for npy/fixed, a list of k bytes for lines/TFRecord; y ``label_dtype`` (k,) or None.
    """

    def __init__(self, path_or_index, batch_size: int, *, sparse: str = "csr", output: str = "dict",
                 label_dtype=torch.float32, rank: int | None = None, world_size: int | None = None,
                 epoch: int = 0, transform=None, **loader_kwargs):
        super().__init__()
        check_outputs(sparse, output, loader_kwargs.get("dtype", np.float32), loader_kwargs.get("zero_based", "auto"))
        known_keywords(Loader.__init__, loader_kwargs, "LirsIterableDataset")  # now, not at the first pass
        # the Loader's own checks, now: not at the first pass in a worker, after the data was indexed
        shard = check_loader_args(batch_size, rank=rank, world_size=world_size, shard_later=True, **loader_kwargs)
        if transform is not None and not callable(transform):
            raise UsageError(f"transform must be callable, got {transform!r}")
        path_or_index = absolute_source(path_or_index)  # a pass may follow a chdir
        self.source, self.batch_size = path_or_index, shard.batch_size
        self.epoch = whole("epoch", epoch)
        self.sparse, self.output, self.label_dtype, self.transform = sparse, output, check_label_dtype(label_dtype), transform
        check_tensor_records(path_or_index, loader_kwargs)  # after the arguments: it may index the data
        self._rank, self._world = shard.rank, shard.world_size  # checked ints, or None: torch.distributed's
        self.loader_kwargs = {k: v for k, v in loader_kwargs.items() if not (k == "threads" and v is None)}
        self._loader = self._loader_key = None
        self._pos = ResumeState(self.epoch)        # this process's deliveries (the consumer's position)
        self._shown: ResumeState | None = None  # while a device feeder's thread pulls ahead (None: _pos)
        self._chosen = True  # the epoch of the next pass was chosen (here, set_epoch, a loaded state)
        self._resume: ResumeState | None = None    # an exact Loader state the next iteration starts from
        self._dist = _dist_rank_world()  # for spawned workers (no group there); read again as a pass begins
        # persistent DataLoader workers keep their copy of this dataset across passes: the epoch and
        # resume point the main process chooses reach them through this shared board instead
        self._board = PassBoard()
        self._seen = 0          # the board's generation this copy's epoch and resume point match
        self._iter_pid = None   # the worker process that iterated this copy (None: none yet)
        self.publish()

    # ------------------------------------------------------------------ where and what
    def publish(self, owner=None) -> None:
        """Post this copy's epoch and resume point for its workers' next pass (main process only); ``owner``:
        the token of the :class:`LirsDataLoader` whose pass takes the resume point (None: the next pass)."""
        if tud.get_worker_info() is None:
            self._seen = self._board.post(self.epoch, self._resume, owner)

    def shard(self) -> tuple[int, int]:
        """(rank, world_size) this process reads for (its DataLoader workers split the rank's batches)."""
        rank, world = _dist_rank_world()  # a forked worker inherits the group's rank; a spawned one has none
        if (rank, world) == (0, 1):
            rank, world = self._dist  # a spawned worker: the main process's, as it started the worker
        rank = rank if self._rank is None else self._rank
        world = world if self._world is None else self._world
        if not 0 <= rank < world:
            raise UsageError(f"rank {rank} outside [0, {world})")
        return rank, world

    def loader(self) -> Loader:
        """The :class:`lirs.Loader` of this process and rank (made on first use; it starts no
        thread until it is iterated)."""
        rank, world = self.shard()
        key = (os.getpid(), rank, world)
        if self._loader is None or self._loader_key != key:
            source = self.source
            if self._loader is not None and self._loader_key[0] == os.getpid():
                self._loader.close()
            elif self._loader is not None and self._loader.index is not None:
                # a forked worker: the parent's index (memory maps, cached unit tables) serves here
                # as well, so a worker that starts every epoch does not open and scan it again
                source = self._loader.index
            # a user transform runs on the pool beside the decoding (it may be heavy); the tensors
            # alone are built where the batch is consumed (see _deliver)
            kw = worker_pool(worker_of()[1], self.loader_kwargs)  # a worker: its share of the cores
            self._loader = Loader(source, self.batch_size, rank=rank, world_size=world,
                                  transform=None if self.transform is None else self._converter(), **kw)
            check_identity(self._loader.index, self.__dict__.get("_opened"))  # a spawned worker's reopened index
            self._loader_key = key
        return self._loader

    @property
    def n(self) -> int:
        """Records in the dataset (all ranks)."""
        return int(self.loader().index.n)

    @property
    def n_features(self) -> int | None:
        """Columns of X: LIBSVM from the index (or ``n_features`` given), npy/fixed the row width, None for lines."""
        loader = self.loader()
        return loader.n_features if loader.n_features is not None else loader.index.n_features

    @property
    def labels(self) -> np.ndarray | None:
        """float64 (n,) labels of every record (by record ID), or None when the format has none."""
        return self.loader().index.labels

    def num_batches(self, epoch: int | None = None) -> int:
        """Batches of this rank in ``epoch`` (default: the current one)."""
        return self.loader().num_batches(self.epoch if epoch is None else epoch)

    def __len__(self) -> int:
        """Batches of this rank in the current epoch (what ``len(DataLoader)`` reports)."""
        return self.num_batches()

    def __repr__(self) -> str:
        kw = "".join(f", {k}={v!r}" for k, v in sorted(self.loader_kwargs.items()))
        return (f"LirsIterableDataset({self.source!r}, batch_size={self.batch_size}, epoch={self.epoch}, "
                f"sparse={self.sparse!r}, output={self.output!r}{kw})")

    def close(self) -> None:
        """Close this process's loader (a later iteration makes a new one)."""
        if self._loader is not None and self._loader_key[0] == os.getpid():
            self._loader.close()
        self._loader = None

    def __getstate__(self):  # workers build their own loader, checked to open the index this one did
        idx = None if self._loader is None else self._loader.index
        return {**self.__dict__, "_loader": None, "_loader_key": None,
                "_opened": self.__dict__.get("_opened") if idx is None else identity(idx),
                "_dist": self._dist if tud.get_worker_info() else _dist_rank_world()}

    # ------------------------------------------------------------------ state
    def state(self, *, counted: bool = False) -> ResumeState:
        """Where this process is: in the main process the batches it delivered (with
        :class:`LirsDataLoader`: the consumer received); in a DataLoader worker (torchdata's
        ``StatefulDataLoader``) that worker's next batch, ``worker = (id, num_workers)``. ``counted``:
        the caller counted what the consumer received (:meth:`LirsDataLoader.state_dict`), so a pass
        the workers of a DataLoader built by hand deliver over this dataset is no error."""
        worker = None if tud.get_worker_info() is None else worker_of()
        if worker is None and not counted:  # refused where workers this process cannot count deliver the pass
            self._board.check_counted(self._seen)
        pos = self._resume if self._resume is not None else self._shown if self._shown is not None else self._pos
        return pos.replace(config=self.loader().state().config, worker=worker)

    def state_dict(self) -> dict:
        """``{"version", "epoch", "next_batch", "spans", "config", "worker"}``: :meth:`state` as a
        plain dict."""
        return self.state().to_dict(worker=True)

    def load_state_dict(self, state: dict) -> None:
        """Make the next iteration go on where ``state`` left off (also a list of every old rank's
        main-process states, for an elastic resume). Raises UsageError for a state of another
        configuration, or a worker's state outside that worker."""
        loader = self.loader()
        states = states_of(state)
        one = states[0] if isinstance(state, (dict, ResumeState)) else None
        if one is not None and one.worker is not None:
            here = "the main process" if tud.get_worker_info() is None else "worker %d of %d" % worker_of()
            if tud.get_worker_info() is None or one.worker != worker_of():
                raise UsageError(f"this state was taken in DataLoader worker {one.worker[0]} of "
                                 f"{one.worker[1]}; it resumes only there (through the DataLoader's "
                                 f"own state), not in {here}")
        if one is None and any(s.worker is not None for s in states):
            raise UsageError("an elastic resume takes the main-process states of the old ranks")
        loader.load_state_dict([s.replace(worker=None) for s in states])
        self._shown = self._resume_for = None
        exact = loader.state()  # the loaded position, elastic remainders resolved
        if exact.epoch is None:
            self._resume = None
            return
        self._resume = exact.replace(worker=None if one is None else one.worker)
        self.epoch = exact.epoch
        self._chosen = True
        self._pos = self._resume.replace(config={}, worker=None)
        self.publish()

    def begin_pass(self) -> int:
        """A new pass over the dataset starts (in the main process): unless its epoch was chosen
        since the last pass (:meth:`set_epoch`, a loaded state), it is the next epoch, so that two
        passes never repeat an order by accident. Returns the pass's epoch."""
        self._shown = None
        self._dist = _dist_rank_world()  # the group may have been set up since this dataset was made
        if not self._chosen:
            self.set_epoch(self.epoch + 1)
        self._chosen = False
        return self.epoch

    # ------------------------------------------------------------------ iteration
    def __iter__(self):  # a LirsDataLoader's worker: an error before its walk is its first item, raised as is
        return failing_early(self.iterate, worker_of()[0]) if getattr(self, "_ordered", False) else self.iterate()

    def iterate(self, raw: bool = False, collate=None):
        """``iter(dataset)``; ``raw``: the Loader's Batch objects, no tensors (a device feeder's); ``collate``: a
        function each output goes through before the batch is counted (a LirsDataLoader's collate_fn)."""
        # eager (not a generator function): the position is known when the iterator is made, as
        # StatefulDataLoader reads the state before the first batch
        if tud.get_worker_info() is None:
            self.begin_pass()
        else:
            self._follow_board()
            install(getattr(self, "_arena", None), worker_of()[0])  # windows decoded into shared memory
        loader = self.loader()
        collate = getattr(self, "_collate", None) if collate is None else collate  # a pinning LirsDataLoader's
        res = self.resume_for(getattr(self, "_owner", None))
        if res is not None:  # taken by this pass: withdrawn, or a hand-built DataLoader's persistent workers take it too
            self._resume = self._resume_for = None
            self.publish()
        elif self._resume is not None:  # loaded through a LirsDataLoader: its pass takes it, in this epoch
            self._chosen = True
        w, nw = worker_of()
        if res is not None and res.epoch != self.epoch:
            log.warning("resume state is for epoch %d, epoch %d starts from its first batch", res.epoch, self.epoch)
            res = None
        by_window = self._by_window(loader, nw)
        if nw > 1 and w == 0 and not by_window and POLICIES[loader.granularity].uses_window and not self.__dict__.get("_said"):
            self._said = True  # once a worker: a persistent one said it again every pass
            log.warning("%d DataLoader workers with granularity=%r, one batch an item: each worker reads nearly every "
                        "window (%s)", nw, loader.granularity, "batches of bytes cross so" if loader.index.format in
                        BYTES_FORMATS else "make_dataloader's workers without a transform read their own windows")
        if res is None:
            start, off, spans = 0, 0 if by_window else w, None
            it = loader.epoch(self.epoch, 0, **share_of(by_window, w, nw))
        else:
            # a worker's own state names its next batch; from the rank's, worker w takes next + w
            start, off, spans = res.next_batch, 0 if res.worker or by_window else w, res.spans
            loader.load_state_dict(res.replace(worker=None))
            it = loader.epoch(self.epoch, **share_of(by_window, w if by_window else off, nw))
        nb = loader.plan(self.epoch, None if spans is None else [list(s) for s in spans]).num_batches
        self._pos = ResumeState(self.epoch, min(start + off, nb), spans)
        return self._deliver(it, loader, raw, collate)

    def _by_window(self, loader, workers: int) -> bool:
        """Whether this process is one of several workers of a :class:`LirsDataLoader` reading window steps: then
        each worker reads whole windows (``Loader.epoch(windows=)``) and sends the pieces of batches that span
        windows of other workers, joined in the main process; else worker w takes batches w, w + W, ..."""
        return workers > 1 and bool(getattr(self, "_bundle", 0)) and self.transform is None \
            and POLICIES[loader.granularity].uses_window and loader.index.format not in BYTES_FORMATS

    def _converter(self) -> "Convert":
        return Convert(self.sparse, self.output, self.label_dtype, self.transform, getattr(self, "_ring", None))

    def _deliver(self, it, loader, raw: bool = False, collate=None):
        # without a user transform the tensors are built here (a pool task costs more in hand-offs)
        bundler = self._bundler(loader)
        if bundler is not None:  # each step timed for LirsDataLoader.pass_times (the block inherited with the ring)
            yield from bundled(loader, it, bundler, self.sparse, self.label_dtype, getattr(self, "_times", None),
                               lambda: setattr(self, "_pos", loader.position))
            return
        convert = self._converter() if self.transform is None and not raw else None
        if getattr(self, "_ordered", False):  # a LirsDataLoader's worker: an error is an item at its batch
            it = stops_at_error(it, loader, worker_of()[0])
        for out in it:
            if convert is not None and type(out) is not Failed:
                out = convert(out)
            if collate is not None:
                out = collate(out)
            self._pos = loader.position  # counted once made: a batch whose collate_fn raised is served again on resume
            yield out

    def _bundler(self, loader):
        """In a :class:`LirsDataLoader`'s worker, the :class:`~lirs.workers.Bundler` its batches cross in, else None."""
        info = tud.get_worker_info()
        if info is None or not getattr(self, "_bundle", 0) or self.transform is not None \
                or loader.index.format in BYTES_FORMATS:
            return None
        return Bundler(self.output, getattr(self, "_ring", None), info.id, self._bundle, getattr(self, "_arena", None))


class LirsDataLoader(tud.DataLoader):
    """A ``DataLoader(batch_size=None)`` over a :class:`LirsIterableDataset` that knows how many
    batches the consumer received: ``state_dict()`` / ``load_state_dict()`` resume there exactly,
    whatever ``num_workers`` (batches workers prefetched are not counted). Each batch goes through ``collate_fn``
    before it is counted (a state taken after it raised resumes at that batch): with ``num_workers=0`` as the dataset
    steps; with workers, whose items are bundles of batches, in the main process, once the batches are back in order."""

    device = None  # make_dataloader(device=...): where the consumer gets the batches (None: as made)

    def __init__(self, dataset, *args, **kwargs):
        """As ``torch.utils.data.DataLoader(dataset, batch_size=None, ...)``; UsageError for a
        ``batch_size`` (torch's default is 1) or a ``batch_sampler``: the dataset's items are whole batches."""
        given = inspect.signature(tud.DataLoader.__init__).bind_partial(self, dataset, *args, **kwargs).arguments
        bad = [f"{k}={given.get(k, d)!r}" for k, d in (("batch_size", 1), ("batch_sampler", None)) if given.get(k, d) is not None]
        if bad:  # torch would collate that many of the dataset's batches into one: a bare KeyError at the first batch
            raise UsageError(f"LirsDataLoader takes whole batches from its dataset (sized by its batch_size): pass "
                             f"batch_size=None and no batch_sampler, not {', '.join(bad)} (torch's default batch_size is 1)")
        super().__init__(dataset, *args, **kwargs)

    def __iter__(self):
        if self.device is None or self.device.type == "cpu":
            return tuples(delivering(self.dataset, self._batches()), self.dataset, self.collate_fn is tud.default_convert)
        ds = self.dataset
        raw = self.num_workers == 0 and not self.pin_memory and ds.transform is None \
            and self.collate_fn is tud.default_convert  # else the batches go through the user's collate_fn first
        fed = Fed(iter(Feeder(tuples(delivering(ds, self._batches(raw)), ds, self.collate_fn is tud.default_convert), self.device,
                              position=(lambda: ds._pos, ds.handed_out), convert=ds._converter() if raw else None)))
        self.__dict__.setdefault("_feeds", weakref.WeakSet()).add(fed)  # the passes a newer one stops (_batches)
        return fed

    def _batches(self, raw: bool = False):
        ds = self.dataset
        if self.num_workers == 0:  # the dataset iterates in this process and counts itself (torch pins: pin_memory)
            if not self.pin_memory:  # torch's iterator would only add its cost a batch; its one RNG draw is kept
                torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            ds._owner, collate = id(self), self.collate_fn  # while the pass starts: a state loaded here is its own
            if self.pin_memory:  # torch's fetcher would collate after the dataset counted: the dataset collates
                ds._collate, self.collate_fn = collate, lambda b: b
            try:  # raw: the Loader's batches (a device feeder's)
                it = super().__iter__() if self.pin_memory else ds.iterate(raw, None if raw else collate)
            finally:
                ds._owner, ds._collate, self.collate_fn = None, None, collate
            yield from it
            return
        for fed in list(getattr(self, "_feeds", ()) if self.persistent_workers else ()):
            fed.stop()  # an older pass's feeder thread: off torch's iterator over the workers before this pass resets it
        ds.begin_pass()  # the workers get a copy of the dataset: choose the pass's epoch here
        ds.publish(id(self))  # and post it: persistent workers read it as their pass starts, its resume point theirs alone
        res = ds._resume  # the loaded state the pass starts from (None: the epoch's first batch)
        ctx = self.multiprocessing_context or multiprocessing.get_context()
        fresh = not (self.persistent_workers and self._iterator is not None)  # workers start with this pass
        if fresh:  # a data file changed since the index's open: the error each worker would meet, raised before they start
            check_data_unmoved(ds.loader().index)
        if ctx.get_start_method() == "fork" and fresh:
            # the workers inherit the plan's tables and the kernels of their walk
            before_fork(ds.loader(), ds.epoch, share_of(ds._by_window(ds.loader(), self.num_workers), 0, self.num_workers))
        if fresh:  # shared memory for these workers alone, lent to their copies: two sets never share a slot
            ds._bundle, ds._ordered = BUNDLE_BATCHES if ds.transform is None else 0, True  # in bundles; in_order
            ds._owner = id(self)  # the posts whose resume point its persistent workers take (not a later hand-built's)
            self._ring, self._times, self._arena = ds._ring, ds._times, ds._arena = workers_memory(
                ds.loader(), ds.epoch, self.num_workers, self.prefetch_factor or 2, ds._bundle,
                ds._by_window(ds.loader(), self.num_workers), self.persistent_workers)
        kept = self._ring, self._arena  # this pass's items name them (ring_of, arena_of): kept while the pass is
        times = begun(self._times)  # before the workers start the pass
        # torch's workers send their items as they are (bundles, which default_convert leaves): the
        # user's collate_fn takes each batch below, in order
        collate, self.collate_fn = self.collate_fn, tud.default_convert
        try:
            it = timed_main(super().__iter__(), times)  # the workers start here, with the loaded state
        finally:  # taken back once they have their copies, or failed to start: a hand-built DataLoader's send plain batches
            self.collate_fn = collate
            ds._bundle, ds._ordered, ds._ring, ds._times, ds._arena, ds._owner = 0, False, None, None, None, None
        epoch, self._passes = ds.epoch, getattr(self, "_passes", 0) + 1
        k, spans = (res.next_batch, res.spans) if res is not None and res.epoch == epoch else (0, None)
        ds.begin_at(start := ResumeState(epoch, k, spans))
        mine = self._passes if self.persistent_workers else None  # they serve the newest pass: an older one stops
        for b in in_order(it if mine is None else while_current(it, lambda: self._passes, mine), k):
            if mine is not None and self._passes != mine:  # batches it held before a newer pass took them
                raise superseded()
            b = b if collate is tud.default_convert else collate(b)  # counted once collated: a raise is no delivery
            k += 1
            ds.delivered(start, k)
            yield b

    def pass_times(self) -> dict:
        """Where the last pass with workers spent its time, in seconds: ``{"main": {...}, "workers":
        [...]}`` (:class:`lirs.passtimes.PassTimes`); ``{}`` without workers or before a pass."""
        times = getattr(self, "_times", None)
        return {} if times is None else times.report()

    def state_dict(self) -> dict:
        """The dataset's state: the batch the consumer gets next (see :meth:`LirsIterableDataset.state_dict`),
        by this DataLoader's own count, even after a pass of a hand-built DataLoader over the dataset."""
        return self.dataset.state(counted=True).to_dict(worker=True)

    def load_state_dict(self, state) -> None:
        """Resume this DataLoader's next pass at ``state`` (see :meth:`LirsIterableDataset.load_state_dict`);
        another DataLoader's pass over the dataset meanwhile (an evaluation's) delivers that epoch whole."""
        self.dataset.load_state_dict(state)
        self.dataset.own_resume(id(self))


def make_dataloader(path_or_index, batch_size: int, *, num_workers: int = 0, pin_memory: bool = False,
                    prefetch_factor: int | None = None, multiprocessing_context=None, worker_init_fn=None,
                    timeout: float = 0, persistent_workers: bool = True, device=None, **dataset_kwargs) -> LirsDataLoader:
    """A ready :class:`LirsDataLoader` (``batch_size=None``) over a :class:`LirsIterableDataset`.

    ``dataset_kwargs`` go to :class:`LirsIterableDataset` (and from it to :class:`lirs.Loader`;
    ``threads=`` sizes each worker's pool, by default its share of the usable cores); the DataLoader's own
    keywords above go to it (``worker_init_fn``, ``timeout`` and the like only with workers); its others
    (``collate_fn``, ``generator``, ...) are a UsageError: build a :class:`LirsDataLoader` for them.
    ``persistent_workers`` (default True with workers): the workers, their Loaders and pools start once and
    serve every pass, each pass the epoch the main process chose (``set_epoch``, a loaded state, the next one).
    ``device``: None or ``"cpu"`` hands the batches out as made; a CUDA device (``"cuda"``, ``"cuda:1"``,
    a ``torch.device``) moves each batch there from pinned memory on a side stream while the
    consumer's previous step runs (:class:`lirs.tensors.Feeder`); UsageError without CUDA.
    """
    others = sorted(set(dataset_kwargs) & set(inspect.signature(tud.DataLoader.__init__).parameters)
                    - set(inspect.signature(Loader.__init__).parameters))  # drop_last is the Loader's
    if others:  # else the dataset's "unexpected keyword argument", which names no DataLoader
        raise UsageError(f"make_dataloader does not take the DataLoader options {', '.join(others)}: build "
                         "LirsDataLoader(LirsIterableDataset(...), batch_size=None, ...) for them")
    dev = check_device(device)
    # now: torch refuses a prefetch_factor of 0 only as the first pass starts its workers
    prefetch = None if prefetch_factor is None else positive_int("prefetch_factor", prefetch_factor)
    pin_memory, persistent_workers = maybe_bool("pin_memory", pin_memory), maybe_bool("persistent_workers", persistent_workers)
    num_workers = whole("num_workers", num_workers)  # these before the dataset, which may index the data
    ds = LirsIterableDataset(path_or_index, batch_size, **dataset_kwargs)
    kw = {k: v for k, v in (("prefetch_factor", prefetch),
                            ("multiprocessing_context", multiprocessing_context), ("worker_init_fn", worker_init_fn),
                            ("timeout", timeout or None)) if v is not None and num_workers > 0}
    dl = LirsDataLoader(ds, batch_size=None, num_workers=num_workers, pin_memory=bool(pin_memory),
                        persistent_workers=bool(persistent_workers) and num_workers > 0, **kw)
    dl.device = dev
    return dl
