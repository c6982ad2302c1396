"""How batches cross from DataLoader worker processes to the main process (:mod:`lirs.torch`).

In a worker a batch's tensors are packed into one buffer: a batch alone (:class:`Packed`, a
hand-built DataLoader's item) or up to ``BUNDLE_BATCHES`` of a worker's batches together
(:class:`Bundle`, :func:`lirs.torch.make_dataloader`'s item), in a slot of a shared ring
(:class:`~lirs.ring.SlotRing`) when one is free, so that only the slot's number goes through torch's queue.
A window worker's CSR values and indices stay where it decoded them, in its part of a shared
arena (:mod:`lirs.arena`), and cross as their place there. The main process rebuilds the batches
as views of the buffer and the arena (:func:`lirs.tensors.unpack_many`) and puts a
pass's bundles back in batch order, joining the pieces of a batch that spans two workers' windows
(:func:`in_order`). The main process posts each pass's epoch and resume point on a board the
workers read (:class:`lirs.passboard.PassBoard`).
"""
from __future__ import annotations

import collections
import pickle
from typing import NamedTuple

import numpy as np
import torch
import torch.utils.data as tud

from . import warmup
from .cores import usable_cores
from .arena import arena_for, arena_of
from .passtimes import PassTimes, timed_worker
from .ring import BUNDLE_BATCHES, BUNDLE_SLOT_BYTES, INBAND_BYTES, crossing, ring_for, ring_of  # noqa: F401 - INBAND_BYTES: public here
from .workererrors import Failed, stops_at_error, with_cause  # noqa: F401 - Failed, stops_at_error: public here
from .tensors import (ALIGN, TorchBatch, array_spans, batch_arrays, pack_arrays, pack_into, pack_spans, to_tensors,
                      torch_dtype, unpack, unpack_many, x_parts)


def worker_of() -> tuple[int, int]:
    """(id, num_workers) of this DataLoader worker process; (0, 1) outside one."""
    info = tud.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def worker_threads(num_workers: int) -> int | None:
    """Pool threads of a :class:`lirs.Loader` in one of ``num_workers`` DataLoader worker
    processes: its share of the usable cores and one more (a thread waiting on its read leaves a
    core to decoding), so that W workers do not start W pools each sized to every core. None in
    the main process: the Loader's default."""
    if tud.get_worker_info() is None:
        return None
    return max(1, usable_cores() // max(1, int(num_workers))) + 1


def worker_pool(num_workers: int, given: dict) -> dict:
    """The Loader keywords of one of ``num_workers`` DataLoader worker processes, the user's
    ``given`` ones first: ``threads`` :func:`worker_threads`, and ``decode_threads`` (the threads
    decoding one window) the usable cores but one split between the workers, rounded up: the core
    left over is the main process's consumer's, not one a worker (whose delivering thread mostly
    waits for torch to ask), which on 16 cores left 8 workers one decoding thread each. ``given``
    as it is in the main process, or when it sizes the pool itself."""
    if tud.get_worker_info() is None or given.get("threads") is not None:
        return dict(given)
    nw = max(1, int(num_workers))
    return {"threads": worker_threads(nw), "decode_threads": max(1, -(-(usable_cores() - 1) // nw)), **given}


def share_of(by_window: bool, w: int, nw: int) -> dict:
    """The ``Loader.epoch`` keywords of worker ``w`` of ``nw``: its windows, or its batches."""
    return dict(windows=(w, nw)) if by_window else dict(stride=nw, offset=w)



#: How the workers' items reached this process (a DataLoader's main process) since it started, by
#: way: ``slot`` (a slot of the ring: only its number crossed), ``inband`` (in the pickle stream),
#: ``segment`` (a shared-memory segment of its own, made, mapped and faulted in afresh for the
#: item: an item finds no free slot when the main process holds the slots' batches back to put
#: them in order); ``arena`` (each block of a worker's arena an item's values and
#: indices were left in, viewed where the worker decoded them: :mod:`lirs.arena`). ``benchmarks/bench_torch.py`` records it for each run.
CROSSED = collections.Counter()


class Convert:
    """The Loader transform of a dataset: a Batch to its torch output (picklable, stateless). In a
    DataLoader worker the output travels packed in one buffer (see :class:`Packed`)."""

    def __init__(self, sparse, output, label_dtype, user, ring=None):
        self.sparse, self.output, self.label_dtype, self.user = sparse, output, label_dtype, user
        self.ring = ring

    def __call__(self, b):
        ids, X, y = to_tensors(b, self.sparse, self.label_dtype)
        if self.user is not None:
            return self.user({"ids": ids, "X": X, "y": y} if self.output == "dict" else TorchBatch(X, y, ids))
        info = tud.get_worker_info()
        if isinstance(X, torch.Tensor) and info is not None:
            return Packed(ids, X, y, self.output, self.ring, info.id)
        return {"ids": ids, "X": X, "y": y} if self.output == "dict" else TorchBatch(X, y, ids)


class Packed:
    """A batch on its way from a DataLoader worker to the main process: every tensor of it (ids, y,
    the arrays of X) copied into one uint8 buffer, so that the batch crosses processes in the
    pickle stream (up to ``INBAND_BYTES``) or as one shared-memory segment, not as one segment
    and one file descriptor per tensor (about a millisecond each). The main process rebuilds the
    output from views of the buffer, without copying (:func:`unpack`)."""

    __slots__ = ("buf", "meta", "slot")

    def __init__(self, ids, X, y, output, ring=None, worker=0):
        parts, head = packed_parts(X, ids, y)
        spans, o = pack_spans(parts)
        self.buf, self.slot = slot_or_buffer(ring, worker, o)
        pack_into(self.buf.numpy(), parts, spans)
        self.meta = (*head, output, spans)

    def __reduce__(self):
        if self.slot is not None:
            return unpack_slot, (*self.slot, self.buf.numel(), self.meta)
        # a small batch is cheaper in the pickle stream; a large one as one shared-memory segment
        buf = crossing(self.buf)
        return (unpack_array, (buf, self.meta)) if isinstance(buf, np.ndarray) else (unpack_segment, (buf, self.meta))


def workers_memory(loader, epoch: int, workers: int, prefetch: int, bundle: int, by_window: bool,
                   persistent: bool) -> tuple:
    """``(ring, times, arena)``: the shared memory of one set of ``workers`` DataLoader workers
    over ``loader`` (a :class:`lirs.Loader`; its plan of ``epoch`` sizes it), made in the main
    process before they start and inherited by them: the :class:`~lirs.ring.SlotRing` their items
    cross in (``prefetch`` items asked of each, bundles of up to ``bundle`` batches or 0: one batch
    an item; ``by_window``: each reads whole windows), their
    :class:`~lirs.passtimes.PassTimes`, and the :class:`~lirs.arena.Arena` persistent window
    workers decode into (None otherwise). Never shared with another set of workers: two processes
    taking a free slot at once would both write it."""
    ring = ring_for(loader, epoch, workers, prefetch, bundle, by_window)
    return ring, PassTimes(workers), arena_for(loader, epoch, workers, ring, persistent and by_window)


def slot_or_buffer(ring, worker: int, nbytes: int):
    """(uint8 tensor of ``nbytes``, ``(ring token, slot)`` or None): a free slot of ``worker`` in
    ``ring`` when there is one (then only its number crosses), else a private buffer."""
    s = None if ring is None else ring.take(worker, nbytes)
    if s is None:
        return torch.empty(max(nbytes, 1), dtype=torch.uint8), None
    return ring.view(s)[:max(nbytes, 1)], (ring.token, s)


def packed_parts(X, ids, y) -> tuple[list, tuple]:
    """The tensors of a batch in packing order ``[ids, (y), *parts of X]`` and its head
    ``(kind, shape, has_y)``: what :func:`unpack` needs besides the output form and the spans."""
    kind, parts = x_parts(X)
    return [ids] + ([] if y is None else [y]) + parts, (kind, tuple(X.shape), y is not None)


class Bundle:
    """Consecutive batches of one DataLoader worker that cross to the main process as one item
    (:mod:`lirs.torch`): torch's fixed cost per item (an index queue, a result queue, a pickle
    and a pipe each way: tens of microseconds in each process) is then paid once for up to
    ``BUNDLE_BATCHES`` batches instead of once each. Their tensors are packed back to back into
    one buffer (a slot of the worker's :class:`~lirs.ring.SlotRing` when one is free), each batch laid out
    as :class:`Packed` lays out one; the main process gets ``(indices, outputs)``: each batch's
    number in the epoch and its output, views of that buffer (:func:`unpack_bundle`)."""

    __slots__ = ("buf", "metas", "indices", "slot", "shared")

    def __init__(self, items: list, output: str, ring, worker: int, nbytes: int, arena=None):
        # items: [(batch number, tensors in packing order, head, spans, spans in the arena)]
        # (Bundler.add), each batch's spans laid out after the one before it; ``nbytes``: where
        # the last one ends
        self.buf, self.slot = slot_or_buffer(ring, worker, nbytes)
        host = self.buf.numpy()
        metas, indices, blocks = [], [], {}
        for index, parts, head, spans, left in items:
            # a Batch's own numpy arrays in one kernel call (Bundler.add_batch), else its tensors
            (pack_arrays if isinstance(parts[0], np.ndarray) else pack_into)(host, parts[:len(spans)], spans)
            if left:  # its values and indices stay where the worker decoded them (lirs.arena)
                spans = spans + left
                for a, nb, _, _, b in left:  # each block's bytes the bundle's parts span
                    lo, hi = blocks.get(b, (a, a))
                    blocks[b] = (min(lo, a), max(hi, a + nb))
            metas.append((*head, output, spans))
            indices.append(index)
        self.metas, self.indices = metas, indices
        self.shared = None
        if blocks:
            # counted before the item leaves: the worker writes a block again only once the main
            # process has let go of every item counted here
            sent = arena.sent[worker]
            for b in blocks:
                sent[b] += 1
            self.shared = (arena.token, int(worker), [(b, lo, hi) for b, (lo, hi) in blocks.items()])

    def __reduce__(self):
        if self.slot is not None:
            return unpack_bundle_slot, (*self.slot, self.buf.numel(), self.metas, self.indices, self.shared)
        # no free slot: in the pickle stream when small, else as one shared-memory segment
        return unpack_bundle, (crossing(self.buf), self.metas, self.indices, self.shared)


class Bundler:
    """A DataLoader worker's batches of one pass gathered into :class:`Bundle` items: :meth:`add`
    returns a full bundle, :meth:`flush` what is left at the end of the pass. The pass's bundles
    hold 1, 2, 4, ... batches up to ``max_batches`` (or as many as fit a slot of ``ring``): the
    consumer's first batch waits for one batch of each worker, not for a whole bundle."""

    def __init__(self, output: str, ring=None, worker: int = 0, max_batches: int = 0, arena=None):
        self.output, self.ring, self.worker = output, ring, int(worker)
        self.arena = arena if arena is not None and arena.outputs is not None else None
        self.max_batches = int(max_batches or BUNDLE_BATCHES)
        self.cap = BUNDLE_SLOT_BYTES if ring is None else ring.slot_bytes
        self.items, self.nbytes = [], 0
        self.size = 1  # batches of the next bundle

    def add(self, index: int, ids, X, y) -> list:
        """Add batch ``index`` (its tensors); the bundles completed by it (none, or one)."""
        parts, head = packed_parts(X, ids, y)
        return self._add(index, parts, head, pack_spans)

    def add_batch(self, index, b, sparse: str, label_dtype) -> list:
        """:meth:`add` of a :class:`lirs.loader.Batch` ``b``: its numpy arrays are packed as they
        are where :func:`~lirs.tensors.batch_arrays` carries them (no tensors made only to be taken
        apart: each torch call lets the worker's GIL go and waits to take it back), else its tensors."""
        got = batch_arrays(b, sparse, label_dtype)
        if got is None:
            return self.add(index, *to_tensors(b, sparse, label_dtype))
        kind, shape, arrays = got
        head = (kind, shape, b.y is not None)
        if self.arena is not None and kind == "csr":
            left = self._left(arrays[-2:])
            if left:
                return self._add(index, arrays, head, array_spans, left)
        return self._add(index, arrays, head, array_spans)

    def _left(self, arrays) -> list:
        """The spans ``(byte in the arena, nbytes, dtype, shape, block)`` of a CSR batch's indices
        and values when both lie in this worker's arena (:mod:`lirs.arena`), else []."""
        where = self.arena.outputs.where
        at = [where(a) for a in arrays]
        if None in at:
            return []
        return [(p, a.nbytes, torch_dtype(a.dtype), a.shape, blk) for a, (blk, p) in zip(arrays, at)]

    def _add(self, index, parts, head, lay, left=()) -> list:
        # laid out where the bundle's last batch ends (lay: pack_spans or array_spans), so that
        # the bundle packs each batch where it lies, without laying them out again. ``left``: the
        # spans of the last parts, which stay in the worker's arena; the item keeps them (their
        # block is written again only once the bundle is counted as sent: Bundle)
        packed = parts[:len(parts) - len(left)]
        spans, end = lay(packed, self.nbytes)
        done = []
        if self.items and end > self.cap:
            done.append(self.flush())  # it would not fit the slot with the others: send them first
            spans, end = lay(packed, 0)
        self.items.append((index, parts, head, spans, left))
        self.nbytes = end
        if len(self.items) >= self.size:
            done.append(self.flush())
        return done

    def flush(self):
        """The bundle of the batches added since the last one (None when there are none)."""
        if not self.items:
            return None
        b = Bundle(self.items, self.output, self.ring, self.worker, self.nbytes, self.arena)
        self.items, self.nbytes = [], 0
        self.size = min(self.size * 2, self.max_batches)
        return b


def bundled(loader, batches, bundler: "Bundler", sparse: str, label_dtype, times, moved):
    """A DataLoader worker's items of a pass: the :class:`lirs.loader.Batch` objects ``batches``
    (a walk of ``loader``) added to ``bundler`` as they come (a piece of a batch keyed
    ``(number, *piece)``), each bundle it completes, then what is left; each step timed into
    ``times`` (:func:`lirs.passtimes.timed_worker`). ``moved()`` records the worker's position as
    an item leaves, not at each batch (a resume state a batch was a few Python calls). An error
    ends the walk: the bundle of what was delivered, then the :class:`Failed` item."""
    def make(b):
        if type(b) is Failed:
            return [x for x in (last(), b) if x is not None]
        done = bundler.add_batch(b.index if b.piece is None else (b.index, *b.piece), b, sparse, label_dtype)
        if done:
            moved()
        return done

    def last():
        moved()
        return bundler.flush()
    return timed_worker(stops_at_error(batches, loader, bundler.worker), make, last, times, bundler.worker)


def before_fork(loader, epoch: int, share: dict | None = None) -> None:
    """Ready this process for DataLoader workers about to fork: ``loader``'s plan of ``epoch`` made
    (the workers inherit the index and its unit tables), its walk's kernels (:func:`lirs.warmup.walk_first`)
    and the read and decode kernels (:func:`lirs.warmup.settle`) compiled or loaded here: the workers
    inherit them instead of each compiling or loading its own. ``share``: a worker's walk
    (:func:`share_of`), whose kernels differ from a whole walk's (every stride-th batch's records
    are taken one batch at a time, not by the kernel that plans a step of consecutive ones)."""
    share = share or {}
    warmup.walk_first(loader.plan(epoch), share.get("offset", 0), share.get("stride", 1), share.get("windows"))
    warmup.settle()


def unpack_slot(token, s, nbytes, meta):
    """The output of a batch a worker packed into slot ``s`` of the ring ``token``."""
    CROSSED["slot"] += 1
    return unpack(ring_of(token).view(s, nbytes, free_when_gone=True), meta)


def unpack_array(a: np.ndarray, meta):
    CROSSED["inband"] += 1
    return unpack(torch.from_numpy(a), meta)


def unpack_segment(buf, meta):
    CROSSED["segment"] += 1
    return unpack(buf, meta)


def unpack_bundle_slot(token, s, nbytes, metas, indices, shared=None):
    """``(indices, outputs)`` of a :class:`Bundle` packed into slot ``s`` of the ring ``token``."""
    CROSSED["slot"] += 1
    return _unbundled(ring_of(token).view(s, nbytes, free_when_gone=True), metas, indices, shared)


def unpack_bundle(buf, metas, indices, shared=None):
    """``(indices, outputs)`` of a :class:`Bundle` that crossed in the pickle stream (``buf`` a
    numpy array) or as a shared-memory segment (a tensor)."""
    inband = isinstance(buf, np.ndarray)
    CROSSED["inband" if inband else "segment"] += 1
    return _unbundled(torch.from_numpy(buf) if inband else buf, metas, indices, shared)


def _unbundled(buf, metas, indices, shared=None):
    """Every output of a bundle views ``buf`` (a slot is free again once the last of them is gone)
    and, where its worker left them in its arena, the arena (``shared``: see :func:`arena_views`)."""
    return Unbundled(indices, unpack_many(buf, metas, None if shared is None else arena_views(shared)))


def arena_views(shared) -> dict:
    """``{block: (uint8 tensor, its first byte in the arena)}``: one view a block over the parts of
    a bundle's batches its worker left in that block of its arena (``shared``: ``(arena token,
    worker, [(block, first byte, end), ...])``), counted as freed for the block once the last
    tensor viewing it is gone."""
    token, worker, blocks = shared
    arena = arena_of(token)
    out = {}
    for b, lo, hi in blocks:
        # from an ALIGN boundary to one (inside the block, whose start and size are whole pages):
        # each part then lies at a multiple of its dtype's size from the view's start
        a = lo // ALIGN * ALIGN
        out[b] = (torch.from_numpy(arena.view(worker, b, a, -(-hi // ALIGN) * ALIGN)), a)
    CROSSED["arena"] += len(blocks)
    return out


class Unbundled(NamedTuple):
    """A :class:`Bundle` in the main process: the key of each batch (its number in the epoch, or
    for a piece of a batch ``(number, first window, records of the whole batch)``) and their
    outputs, in order."""

    indices: list
    outputs: list


def output_rows(out) -> int:
    """Records in a batch output (dict or tuple)."""
    return len(out["ids"] if isinstance(out, dict) else out[2])


def join_outputs(outs: list):
    """One batch output from the outputs of its pieces, in order (dict or tuple, as they are):
    ids and y concatenated, X stacked by rows (CSR: the row pointers of each piece shifted by the
    values before it; COO: the row indices by the rows before it; dense: concatenated). Joined by
    numpy on this thread (:func:`_cat`), not by torch's intra-op threads."""
    if len(outs) == 1:
        return outs[0]
    as_dict = isinstance(outs[0], dict)
    parts = [(o["ids"], o["X"], o["y"]) if as_dict else (o[2], o[0], o[1]) for o in outs]
    ids = _cat([p[0] for p in parts])
    y = None if parts[0][2] is None else _cat([p[2] for p in parts])
    X = _stack_rows([p[1] for p in parts])
    return {"ids": ids, "X": X, "y": y} if as_dict else TorchBatch(X, y, ids)


def _cat(ts: list, dtype=None):
    """CPU tensors ``ts`` (1-d, or of one shape past the first dimension) concatenated by numpy
    (as ``dtype`` when given). ``torch.cat`` of a batch's values splits the copy over torch's
    intra-op threads, and in the main process of busy DataLoader workers it waited for a thread
    to be scheduled (``benchmarks/bench_joins.py``: an epoch's slowest join 5.4 ms against 0.7)."""
    try:
        a = np.concatenate([t.numpy() for t in ts])
    except TypeError:  # a dtype numpy lacks (bfloat16 labels): torch's own
        return torch.cat(ts)
    return torch.from_numpy(a if dtype is None or a.dtype == dtype else a.astype(dtype))


def _stack_rows(Xs: list):
    rows = sum(int(X.shape[0]) for X in Xs)
    shape = (rows, *Xs[0].shape[1:])
    if Xs[0].layout == torch.sparse_csr:
        crows, cols, vals, at = [Xs[0].crow_indices()[:1].numpy()], [], [], 0
        for X in Xs:
            c = X.crow_indices().numpy()
            crows.append(c[1:] + np.int64(at))  # int64: past 2**31 values the sum is not cut short
            cols.append(X.col_indices())
            vals.append(X.values())
            at += int(c[-1])
        wide = any(X.col_indices().dtype == torch.int64 for X in Xs) or at > np.iinfo(np.int32).max
        dt = np.int64 if wide else crows[0].dtype
        return torch.sparse_csr_tensor(torch.from_numpy(np.concatenate(crows).astype(dt, copy=False)),
                                       _cat(cols, dt), _cat(vals), size=shape, check_invariants=False)
    if Xs[0].layout == torch.sparse_coo:
        idx, vals, at = [], [], 0
        for X in Xs:
            i = X._indices().numpy().copy()
            i[0] += at
            idx.append(i)
            vals.append(X._values())
            at += int(X.shape[0])
        return torch.sparse_coo_tensor(torch.from_numpy(np.concatenate(idx, 1)), _cat(vals), shape, is_coalesced=True,
                                       check_invariants=False)
    return _cat(Xs)


def _unbundle(item: "Unbundled", held: dict, pieces: dict) -> None:
    """Put a bundle's batches in ``held`` (by number) and its pieces of batches in ``pieces``,
    joining a batch's pieces (in the order of their windows) into ``held`` once all are there."""
    for key, out in zip(item.indices, item.outputs):
        if not isinstance(key, (tuple, list)):  # (a list: torch's pin thread rebuilds tuples as lists)
            held[key] = out
            continue
        j, window, total = key
        got = pieces.setdefault(j, [])
        got.append((window, out))
        if sum(output_rows(o) for _, o in got) == total:
            held[j] = join_outputs([o for _, o in sorted(got, key=lambda p: p[0])])
            del pieces[j]


def in_order(items, first: int):
    """The batches of a pass from DataLoader ``items``: a worker's bundle
    (:class:`Unbundled`) holds its batches ``i, i + W, ...``, or with window steps
    the batches and pieces of batches of its windows, so the bundles of the W workers (in torch's
    round robin) are held until each next batch ``first, first + 1, ...`` has arrived, whole or
    as every one of its pieces (joined in the order of their windows); an item of one batch is
    already in order (counted). A worker's :class:`Failed` error is raised once every batch before its
    batch was yielded (the earliest, when several workers fail)."""
    held, pieces, k, failed = {}, {}, int(first), None
    for item in items:
        if type(item) is Failed:
            failed = item if failed is None or item.batch < failed.batch else failed
            item = Unbundled([], [])
        if not isinstance(item, Unbundled):
            yield item
            k += 1
        else:
            _unbundle(item, held, pieces)
        while k in held:
            yield held.pop(k)
            k += 1
        if failed is not None and k >= failed.batch:
            raise with_cause(failed.error)
    if failed is not None:
        raise with_cause(failed.error)
    if held or pieces:
        some = f" and pieces of {sorted(pieces)[:4]}" if pieces else ""
        raise RuntimeError(f"the DataLoader workers sent batches {sorted(held)[:4]}{some} but not "
                           f"all of batch {k}")

