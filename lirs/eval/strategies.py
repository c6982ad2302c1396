"""Shuffle strategies: the record order each system delivers in an epoch, and what it costs.

Every strategy is a plain function with one signature, registered in :data:`STRATEGIES`::

    fn(source, *, seed=0, epoch=0, batch_size=1024, **params) -> StrategyOrder

``source`` is an :class:`~lirs.index.Index` (record sizes come from ``index.bounds()``; no data is
read) or a plain record count ``n`` (records of ``record_bytes`` each, 360 B by default, like
kdd). The result holds ``order``, int64 (n,), a permutation of ``[0, n)`` (the records in
delivery order), and ``cost``, a :class:`Cost`: memory needed, and the I/O pattern of an epoch
(sequential bytes, random reads and their sizes, bytes written) plus one-off costs.

Memory-bounded strategies share one budget, ``memory_bytes`` (default: 5% of the data), from which
their own sizes default: the shuffle buffer, Deep Lake's buffer, BMF's block count, Streaming's
shuffle block (and shards a tenth of it), FFCV's page size (2 x batch pages fill it), the piles of
the two-pass shuffle, terashuf's runs and the chunks of the round-robin merge. Any of those can
be set explicitly.

=================  ==========================================================================
name               what it delivers (uniform = every permutation equally likely, every epoch)
=================  ==========================================================================
sequential         file order, every epoch
bmf                once per run: each record to one of B blocks at random (block files);
                   every epoch: blocks in a random order, each block's records in a fresh
                   random order (LIBLINEAR cdblock visits a block's records in random order)
shuffle_buffer     tf.data ``shuffle(Q)`` / DALI: file order through a buffer of Q records
deeplake           chunks (contiguous spans of ``chunk_bytes``) in random order feed a buffer of
                   ``buffer_bytes``; each output is a uniform slot of the buffer
streaming_*        MosaicML Streaming on shards of ``shard_records`` consecutive records, shuffled
                   once per run and split over ``canonical_nodes``: py1s, py2s, py1b, py1br,
                   py1e, naive (see below)
ffcv_quasi_random  FFCV QUASI_RANDOM: records shuffled inside each page, pages in random order,
                   2 x batch pages active, each output from a uniformly chosen active page
two_pass           Jane Street's two-pass shuffle: records to random piles, each pile shuffled in
                   RAM, piles concatenated (uniform)
terashuf           runs of ``run_bytes`` shuffled in RAM, merged by picking a run with
                   probability proportional to its remaining records (uniform)
chunk_roundrobin   chunks shuffled, then round k emits the k-th record of every chunk, shuffled
                   (not uniform)
instance, page,    lirs (:func:`lirs.plan.plan_epoch`): a fresh permutation of records, pages,
group, window      groups or windows of groups every epoch
=================  ==========================================================================

Streaming (following its code): shards are shuffled once per run (``seed``) and the shard list is
cut into ``canonical_nodes`` equal sample ranges (a shard may be split); every epoch each node's
shard parts are put in a fresh order. ``py1s`` then shuffles inside each part; ``py2s`` also
shuffled each whole shard once per run before the split; ``py1b`` shuffles fixed blocks of
``block_records`` of each node's stream; ``py1br`` blocks of random sizes in [0.75, 1.25) x block
with a random stagger of the first block per node (here the blocks tile the node exactly;
Streaming's loop overlaps its first two blocks); ``py1e`` shuffles inside each part, then moves
every sample by a uniform shift of at most half a random block (minus the part) and sorts by the
new positions; ``naive`` is a global permutation. With several canonical nodes on one device the
node streams are interleaved round-robin (Streaming's partition); a node that runs out is skipped
(Streaming pads by repeating samples), so the result stays a permutation.

Two-pass, terashuf and chunk_roundrobin are one-off file rewrites in practice. As strategies they
are functions of (seed, epoch): a fresh shuffle every epoch, costing two rewrites of the file per
epoch; ``reshuffle_every_epoch=False`` gives the one-off use (the epoch-0 order every epoch; the
rewrite is counted once, in ``oneoff_*``).

Seeds: :mod:`lirs.seeds`, ``(seed, epoch, purpose)`` for per-epoch draws and ``(seed, 0,
purpose)`` for once-per-run layouts.
"""
from __future__ import annotations

import functools
import inspect
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from .. import seeds
from ..constants import BLOCK, DEFAULT_GROUP_BYTES
from ..errors import UsageError
from ..index import Index
from ..plan import plan_epoch
from ..units import format_bytes
from .kernels import strategies as K
from .reference import bmf_block_order, bmf_blocks, shuffle_buffer_order

DEFAULT_RECORD_BYTES = 360        # kdd-like records when only a count is given
DEFAULT_MEMORY_FRACTION = 0.05    # the shared memory budget when none is given
LOADER_STEPS_IN_FLIGHT = 5        # lirs Loader default: prefetch 4 + the batch being decoded

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Cost:
    """What one epoch of a strategy costs (computed from record sizes, nothing is read).

    memory_bytes: RAM the strategy holds at its peak (buffers, blocks, live shards, plan tables,
    lirs' offset index), with ``memory_what`` saying what. Per epoch: ``seq_read_bytes`` read in
    long sequential streams, ``rand_reads`` random reads of ``rand_read_bytes`` in all (median
    ``median_read_bytes``), ``write_bytes`` written. ``oneoff_read_bytes``/``oneoff_write_bytes``:
    once per run (BMF's block files, a one-off rewrite). ``payload_bytes``: the records' bytes.
    """

    memory_bytes: int
    memory_what: str
    payload_bytes: int
    seq_read_bytes: int = 0
    rand_reads: int = 0
    rand_read_bytes: int = 0
    median_read_bytes: float | None = None
    write_bytes: int = 0
    oneoff_read_bytes: int = 0
    oneoff_write_bytes: int = 0
    notes: str = ""

    @property
    def read_bytes(self) -> int:
        """Bytes read per epoch (sequential + random)."""
        return int(self.seq_read_bytes + self.rand_read_bytes)

    @property
    def read_amplification(self) -> float | None:
        """Bytes read per epoch over the payload."""
        return self.read_bytes / self.payload_bytes if self.payload_bytes else None

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["read_bytes"] = self.read_bytes
        d["read_amplification"] = self.read_amplification
        return d


@dataclass(eq=False)
class StrategyOrder:
    """One epoch of one strategy: ``order`` int64 (n,) (record IDs in delivery order, a
    permutation of [0, n)), ``cost`` (a :class:`Cost`, computed on first access), ``params``
    (the effective parameters), ``exact`` (every permutation equally likely, fresh every epoch)
    and ``reshuffles`` (the order changes from epoch to epoch)."""

    name: str
    order: np.ndarray
    params: dict
    exact: bool
    reshuffles: bool
    _cost_fn: object = field(default=None, repr=False)
    _cost: Cost | None = field(default=None, repr=False)

    @property
    def cost(self) -> Cost:
        if self._cost is None:
            self._cost = self._cost_fn()
        return self._cost


# --------------------------------------------------------------------------- sources


@dataclass(eq=False)
class _Source:
    n: int
    rec_bytes: np.ndarray    # int64 (n,)
    pos: np.ndarray          # int64 (n+1,): byte position of each record in the files laid end to end
    record_bytes: int | None  # the fixed size when built from a count

    @property
    def payload(self) -> int:
        return int(self.pos[-1])

    @property
    def mean(self) -> float:
        return self.payload / self.n if self.n else 0.0


# record sizes per index (dropped with the index) and per (count, size), a few at a time
_INDEX_SOURCES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_COUNT_SOURCES: dict = {}


def _source(source, record_bytes: int = DEFAULT_RECORD_BYTES) -> _Source:
    if isinstance(source, Index):
        hit = _INDEX_SOURCES.get(source)
        if hit is not None:
            return hit
        if source.n == 0:
            raise UsageError("the dataset has no records")
        starts, ends = source.bounds()
        rec = (ends - starts).astype(np.int64)
        src = _Source(int(source.n), rec, np.concatenate([[0], np.cumsum(rec)]).astype(np.int64), None)
        _INDEX_SOURCES[source] = src
        return src
    try:
        n = int(source)
    except (TypeError, ValueError):
        raise UsageError(f"a strategy needs an Index or a record count, got {type(source).__name__}") from None
    if n < 1 or n != source:
        raise UsageError(f"the record count must be a positive integer, got {source!r}")
    if int(record_bytes) < 1:
        raise UsageError(f"record_bytes must be >= 1, got {record_bytes}")
    key = (n, int(record_bytes))
    hit = _COUNT_SOURCES.get(key)
    if hit is None:
        rec = np.full(n, int(record_bytes), np.int64)
        hit = _Source(n, rec, np.arange(n + 1, dtype=np.int64) * int(record_bytes), int(record_bytes))
        if len(_COUNT_SOURCES) >= 4:
            _COUNT_SOURCES.pop(next(iter(_COUNT_SOURCES)))
        _COUNT_SOURCES[key] = hit
    return hit


def synthetic_index(n: int, record_bytes: int = DEFAULT_RECORD_BYTES, labels=None):
    """An in-memory LIBSVM-format :class:`~lirs.index.Index` of ``n`` records of ``record_bytes``
    each, back to back in one (absent) file, with ``labels`` float64 (n,) if given. Planning and
    the strategies work on it; nothing is ever read."""
    n, rb = int(n), int(record_bytes)
    if n < 1 or rb < 1:
        raise UsageError(f"need n >= 1 and record_bytes >= 1, got {n}, {rb}")
    return Index.from_arrays([f"<{n} records of {rb} B>"], "libsvm", offsets=np.arange(n, dtype=np.int64) * rb,
                             data_ends=[n * rb], labels=labels)


@functools.lru_cache(maxsize=2)
def _synthetic_cached(n: int, record_bytes: int):
    return synthetic_index(n, record_bytes)


def _index_of(source, src: _Source):
    return source if isinstance(source, Index) else _synthetic_cached(src.n, src.record_bytes)


def _budget(src: _Source, memory_bytes) -> int:
    if memory_bytes is None:
        return max(BLOCK, int(src.payload * DEFAULT_MEMORY_FRACTION))
    m = int(memory_bytes)
    if m < 1:
        raise UsageError(f"memory_bytes must be >= 1, got {memory_bytes}")
    return m


def _check_common(seed, epoch, batch_size) -> None:
    if int(seed) < 0 or int(epoch) < 0:
        raise UsageError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    if int(batch_size) < 1:
        raise UsageError(f"batch_size must be >= 1, got {batch_size}")


def _positive(name: str, value) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name} must be a positive integer, got {value!r}") from None
    if v < 1 or v != value:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    return v


def _byte_units(src: _Source, unit_bytes: int) -> np.ndarray:
    """int64 (u+1,): first record of each non-empty unit, where a unit holds the records whose
    start lies in one span of ``unit_bytes`` of the files laid end to end; then n."""
    which = src.pos[:-1] // int(unit_bytes)
    first = np.flatnonzero(np.concatenate([[True], which[1:] != which[:-1]]))
    return np.concatenate([first, [src.n]]).astype(np.int64)


def _count_units(n: int, size: int) -> np.ndarray:
    """int64 (u+1,): first record of units of ``size`` consecutive records (last one shorter)."""
    return np.concatenate([np.arange(0, n, size, dtype=np.int64), [n]]).astype(np.int64)


def _unit_bytes(src: _Source, first: np.ndarray) -> np.ndarray:
    return (src.pos[first[1:]] - src.pos[first[:-1]]).astype(np.int64)


def _aligned_bytes(src: _Source, first: np.ndarray) -> np.ndarray:
    """Bytes of an aligned read covering each unit (4 KiB blocks)."""
    a = src.pos[first[:-1]] // BLOCK * BLOCK
    b = -(-src.pos[first[1:]] // BLOCK) * BLOCK
    return (b - a).astype(np.int64)


def _unit_of(first: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.arange(len(first) - 1, dtype=np.int64), np.diff(first))


def _median(a) -> float | None:
    return float(np.median(a)) if len(a) else None


def _rewrite_cost(src: _Source, reshuffle: bool, memory: int, what: str, notes: str) -> Cost:
    """Cost of an external shuffle that rewrites the file twice (input -> temporary files ->
    output) and is then read sequentially by training."""
    P = src.payload
    if reshuffle:
        return Cost(memory, what, P, seq_read_bytes=3 * P, write_bytes=2 * P,
                    notes=notes + "; per epoch: read input, write + read temporary files, write the "
                                  "shuffled file, read it for training")
    return Cost(memory, what, P, seq_read_bytes=P, oneoff_read_bytes=2 * P, oneoff_write_bytes=2 * P,
                notes=notes + "; one-off rewrite (read input, write + read temporary files, write the "
                              "shuffled file), then a sequential read per epoch")


def _result(name, src, order, params, exact, reshuffles, cost_fn) -> StrategyOrder:
    assert len(order) == src.n
    return StrategyOrder(name=name, order=order, params=params, exact=exact, reshuffles=reshuffles,
                         _cost_fn=cost_fn)


# --------------------------------------------------------------------------- the strategies


def sequential(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
               record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """File order every epoch: one sequential read of the file, no memory beyond a read buffer."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    order = np.arange(src.n, dtype=np.int64)
    return _result("sequential", src, order, {}, False, False,
                   lambda: Cost(0, "nothing beyond a read buffer", src.payload, seq_read_bytes=src.payload,
                                notes="one sequential pass over the file"))


def bmf(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, blocks: int | None = None,
        memory_bytes: int | None = None, inner: str = "shuffle",
        record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """Block minimization (LIBLINEAR cdblock): once per run every record goes to one of ``blocks``
    blocks at random (:func:`lirs.eval.reference.bmf_blocks`; default: as many blocks as it takes for one
    to fit ``memory_bytes``) and the blocks are written out as files; every epoch the blocks come
    in a random order (:func:`lirs.eval.reference.bmf_block_order`) and each is trained whole.

    Inside a block: ``inner="shuffle"`` (default) a fresh random order every epoch, as cdblock
    visits a block's records; ``inner="file"`` the block file's order (IDs ascending).
    """
    
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    if inner not in ("shuffle", "file"):
        raise UsageError(f"inner must be 'shuffle' or 'file', got {inner!r}")
    M = _budget(src, memory_bytes)
    nb = _positive("blocks", blocks) if blocks is not None else max(1, -(-src.payload // M))
    nb = min(nb, src.n)
    members = _bmf_layout(src.n, nb, int(seed))
    sizes = np.array([len(m) for m in members], np.int64)
    visit = bmf_block_order(nb, seed=seed, epoch=epoch)
    order = np.concatenate([members[b] for b in visit]).astype(np.int64)
    if inner == "shuffle":
        bounds = np.concatenate([[0], np.cumsum(sizes[visit])]).astype(np.int64)
        K.segment_shuffle(order, bounds, np.uint64(seeds.key(seed, epoch, seeds.BMF_INNER)))
    params = {"blocks": nb, "inner": inner, "memory_bytes": M}

    def cost():
        block_bytes = np.array([int(src.rec_bytes[m].sum()) for m in members], np.int64)
        return Cost(int(block_bytes.max()), f"the largest of {nb} blocks, trained whole in memory", src.payload,
                    seq_read_bytes=src.payload, oneoff_read_bytes=src.payload, oneoff_write_bytes=src.payload,
                    notes=f"one-off: read the file, write {nb} block files; per epoch: read every block "
                          f"file whole, one sequential stream each ({_fmt(float(np.median(block_bytes)))} median)")

    return _result("bmf", src, order, params, False, True, cost)


@functools.lru_cache(maxsize=4)
def _bmf_layout(n: int, blocks: int, seed: int) -> list:
    return bmf_blocks(n, blocks, seed=seed)


def shuffle_buffer(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
                   buffer_records: int | None = None, memory_bytes: int | None = None,
                   record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """tf.data ``shuffle(buffer_records)`` / DALI ``initial_fill``: the file read in order through a
    buffer; each output is a uniform slot, refilled by the next record
    (:func:`lirs.eval.reference.shuffle_buffer_order`). Default size: as many mean-sized records as fit
    ``memory_bytes``."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    M = _budget(src, memory_bytes)
    Q = _positive("buffer_records", buffer_records) if buffer_records is not None else max(1, int(M // max(src.mean, 1)))
    order = shuffle_buffer_order(src.n, Q, seed=seed, epoch=epoch)
    params = {"buffer_records": Q}
    return _result("shuffle_buffer", src, order, params, False, True,
                   lambda: Cost(int(round(min(Q, src.n) * src.mean)), f"a buffer of {Q:,} records", src.payload,
                                seq_read_bytes=src.payload, notes="one sequential pass over the file"))


def deeplake(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, buffer_bytes: int | None = None,
             chunk_bytes: int | None = None, memory_bytes: int | None = None,
             record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """Deep Lake's loader: chunks (the records starting in each span of ``chunk_bytes``) in a random
    order feed a shuffle buffer of ``buffer_bytes`` (default ``memory_bytes``); each output is a
    uniform slot; whole chunks are added while the buffer holds less than its size. Default
    chunk: 1/128 of the buffer (Deep Lake's defaults: a 2 GB buffer, chunks of about 16 MB)."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    buf = _positive("buffer_bytes", buffer_bytes) if buffer_bytes is not None else _budget(src, memory_bytes)
    chunk = _positive("chunk_bytes", chunk_bytes) if chunk_bytes is not None else max(BLOCK, buf // 128)
    first = _byte_units(src, chunk)
    nch = len(first) - 1
    corder = seeds.rng(seed, epoch, seeds.DL_CHUNKS).permutation(nch).astype(np.int64)
    u = seeds.rng(seed, epoch, seeds.DL_SLOTS).random(src.n)
    order = np.empty(src.n, np.int64)
    peak = int(K.chunk_buffer_order(first, corder, src.rec_bytes, int(buf), u, order))
    params = {"buffer_bytes": int(buf), "chunk_bytes": int(chunk), "chunks": nch}

    def cost():
        reads = _aligned_bytes(src, first)
        return Cost(peak, f"a buffer of {_fmt(buf)} filled with whole chunks (peak)", src.payload,
                    rand_reads=nch, rand_read_bytes=int(reads.sum()), median_read_bytes=_median(reads),
                    notes=f"{nch:,} chunks of about {_fmt(chunk)}, each read whole, in random order")

    return _result("deeplake", src, order, params, False, True, cost)


# ---- MosaicML Streaming


@functools.lru_cache(maxsize=4)
def _streaming_layout(n: int, shard_records: int, nodes: int, seed: int, within_shard: bool):
    """Once per run: shards (spans of ``shard_records`` consecutive records) in a random order,
    their records laid end to end in ``base`` (each whole shard shuffled when ``within_shard``:
    py2s), cut into ``nodes`` equal sample ranges. Returns (base, part_begin, part_end, node_parts,
    part_shard): the parts are ranges of ``base``; node k owns parts node_parts[k]:node_parts[k+1]."""
    first = _count_units(n, shard_records)
    nsh = len(first) - 1
    perm = seeds.rng(seed, 0, seeds.SHARDS).permutation(nsh)
    sb, se = first[:-1][perm], first[1:][perm]
    base = np.empty(n, np.int64)
    K.expand_spans(sb, se, base)
    pos = np.concatenate([[0], np.cumsum(se - sb)]).astype(np.int64)
    if within_shard:
        K.segment_shuffle(base, pos, np.uint64(seeds.key(seed, 0, seeds.SHARD_SAMPLES)))
    # cut at the node boundaries n*(k+1)//nodes (Streaming's divide_spans): a shard may split
    cuts = np.array([n * (k + 1) // nodes for k in range(nodes - 1)], np.int64)
    edges = np.unique(np.concatenate([pos, cuts]))
    part_begin, part_end = edges[:-1], edges[1:]
    part_begin, part_end = part_begin[part_end > part_begin], part_end[part_end > part_begin]
    node_bounds = np.array([n * k // nodes for k in range(nodes + 1)], np.int64)
    node_parts = np.searchsorted(part_begin, node_bounds).astype(np.int64)
    part_shard = perm[np.searchsorted(pos, part_begin, side="right") - 1].astype(np.int64)
    return base, part_begin.astype(np.int64), part_end.astype(np.int64), node_parts, part_shard


def _streaming(algo: str, source, seed, epoch, batch_size, shard_records, canonical_nodes, block_records,
               memory_bytes, record_bytes) -> StrategyOrder:
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    n = src.n
    M = _budget(src, memory_bytes)
    block = _positive("block_records", block_records) if block_records is not None else max(1, int(M // max(src.mean, 1)))
    shard = _positive("shard_records", shard_records) if shard_records is not None else max(1, block // 10)
    nodes = _positive("canonical_nodes", canonical_nodes)
    if nodes > n:
        raise UsageError(f"canonical_nodes ({nodes}) exceeds the number of records ({n})")
    params = {"shard_records": shard, "canonical_nodes": nodes, "block_records": block}
    name = f"streaming_{algo}"

    if algo == "naive":
        stream = seeds.rng(seed, epoch, seeds.NAIVE).permutation(n).astype(np.int64)
        node_bounds = np.array([n * k // nodes for k in range(nodes + 1)], np.int64)
    else:
        base, pb, pe, node_parts, _ = _streaming_layout(n, shard, nodes, int(seed), algo == "py2s")
        # every epoch: each node's parts in a fresh order
        rng = seeds.rng(seed, epoch, seeds.SPANS)
        perm = np.empty(len(pb), np.int64)
        for k in range(nodes):
            a, b = int(node_parts[k]), int(node_parts[k + 1])
            perm[a:b] = a + rng.permutation(b - a)
        stream = np.empty(n, np.int64)
        bounds = np.empty(len(pb) + 1, np.int64)
        K.gather_segments(base, pb[perm], pe[perm], stream, bounds)
        node_bounds = np.array([n * k // nodes for k in range(nodes + 1)], np.int64)
        skey = np.uint64(seeds.key(seed, epoch, seeds.SAMPLES))
        brng = seeds.rng(seed, epoch, seeds.BLOCKS)
        lo, hi = int(0.75 * block), int(1.25 * block)
        hi = max(hi, lo + 1)
        if algo in ("py1s", "py2s"):
            K.segment_shuffle(stream, bounds, skey)
        elif algo == "py1b":
            cuts = [np.arange(node_bounds[k], node_bounds[k + 1], block) for k in range(nodes)]
            K.segment_shuffle(stream, np.concatenate(cuts + [[n]]).astype(np.int64), skey)
        elif algo == "py1br":
            stagger = brng.integers(0, max(1, int(0.75 * block)), nodes)
            cuts = []
            for k in range(nodes):
                a, b = int(node_bounds[k]), int(node_bounds[k + 1])
                # enough sizes to tile the node: each is at least max(1, lo)
                sizes = np.maximum(1, brng.integers(lo, hi, (b - a + int(stagger[k])) // max(1, lo) + 2))
                ends = a + np.cumsum(sizes) - int(stagger[k])
                ends = ends[ends > a]
                ends = ends[ends < b]
                cuts.append(np.concatenate([[a], ends]))
            K.segment_shuffle(stream, np.concatenate(cuts + [[n]]).astype(np.int64), skey)
        elif algo == "py1e":
            K.segment_shuffle(stream, bounds, skey)
            sizes = (bounds[1:] - bounds[:-1]).astype(np.int64)
            shift = np.empty(n, np.float64)
            # parts of node k: node_parts[k] .. node_parts[k+1]; offsets relative to the node start
            for k in range(nodes):
                a, b = int(node_parts[k]), int(node_parts[k + 1])
                na, nbnd = int(node_bounds[k]), int(node_bounds[k + 1])
                sz = sizes[a:b]
                off = bounds[a:b] - na
                rb = brng.integers(lo, hi, b - a)
                cutoff = np.maximum(0.0, (rb - sz) / 2.0)
                low = np.maximum(-cutoff, -off.astype(np.float64))
                high = np.minimum(cutoff, (nbnd - na) - off - sz).astype(np.float64)
                u = brng.random(nbnd - na)
                shift[na:nbnd] = np.repeat(low, sz) + u * np.repeat(high - low, sz)
            for k in range(nodes):
                na, nbnd = int(node_bounds[k]), int(node_bounds[k + 1])
                posn = np.arange(nbnd - na, dtype=np.float64) + shift[na:nbnd]
                stream[na:nbnd] = stream[na:nbnd][np.argsort(posn, kind="stable")]
        else:  # pragma: no cover - the registry only holds the names above
            raise UsageError(f"unknown Streaming algorithm {algo!r}")
    if nodes > 1:
        order = np.empty(n, np.int64)
        K.round_robin_merge(stream, node_bounds, False, np.uint64(0), order)
    else:
        order = stream

    def cost():
        first = _count_units(n, shard)
        unit_of = _unit_of(first, n)
        nbytes = _unit_bytes(src, first)
        peak, live = K.peak_live_units(order, unit_of, nbytes, len(nbytes))
        reads = _aligned_bytes(src, first)
        return Cost(int(peak), f"live shards: up to {int(live):,} of {len(nbytes):,} held at once "
                               f"(fetched before their first sample, dropped after their last)", src.payload,
                    rand_reads=len(nbytes), rand_read_bytes=int(reads.sum()), median_read_bytes=_median(reads),
                    notes=f"every shard read whole once per epoch ({shard:,} records each)")

    return _result(name, src, order, params, algo == "naive", True, cost)


def _streaming_fn(algo: str, doc: str):
    def fn(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, shard_records: int | None = None,
           canonical_nodes: int = 1, block_records: int | None = None, memory_bytes: int | None = None,
           record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
        return _streaming(algo, source, seed, epoch, batch_size, shard_records, canonical_nodes, block_records,
                          memory_bytes, record_bytes)

    fn.__name__ = fn.__qualname__ = f"streaming_{algo}"
    fn.__doc__ = (f"MosaicML Streaming ``{algo}``: {doc}\n\nShards are ``shard_records`` consecutive "
                  "records (default: a tenth of the block); ``block_records`` (Streaming's "
                  "shuffle_block_size; default: as many records as fit ``memory_bytes``); "
                  "``canonical_nodes`` (default 1). See the module docstring.")
    return fn


streaming_py1s = _streaming_fn("py1s", "each node's shard parts in a fresh order, shuffled inside each part.")
streaming_py2s = _streaming_fn("py2s", "as py1s, and each whole shard shuffled once per run before the node split.")
streaming_py1b = _streaming_fn("py1b", "each node's stream of shard parts shuffled in fixed blocks.")
streaming_py1br = _streaming_fn("py1br", "blocks of random sizes in [0.75, 1.25) x block, staggered start per node.")
streaming_py1e = _streaming_fn("py1e", "parts shuffled inside, then each sample shifted by at most half a "
                                       "random block (minus its part) and the node re-sorted by position.")
streaming_naive = _streaming_fn("naive", "a fresh global permutation every epoch.")


def ffcv_quasi_random(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
                      page_bytes: int | None = None, active_pages: int | None = None,
                      memory_bytes: int | None = None, record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """FFCV's QUASI_RANDOM order: a page holds the records that start in one span of ``page_bytes``;
    every epoch the records of each page are shuffled and the pages permuted; at most
    ``active_pages`` (default 2 x batch_size, FFCV's rule) are open, each output takes the next
    record of a uniformly chosen open page. Default page size: the multiple of 4 KiB at which the
    open pages fill ``memory_bytes`` (FFCV's writer defaults to 4 MiB pages)."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    active = _positive("active_pages", active_pages) if active_pages is not None else 2 * int(batch_size)
    if page_bytes is None:
        page = max(BLOCK, _budget(src, memory_bytes) // active // BLOCK * BLOCK)
    else:
        page = _positive("page_bytes", page_bytes)
    first = _byte_units(src, page)
    npg = len(first) - 1
    arranged = np.arange(src.n, dtype=np.int64)
    K.segment_shuffle(arranged, first, np.uint64(seeds.key(seed, epoch, seeds.PAGE_SAMPLES)))
    porder = seeds.rng(seed, epoch, seeds.PAGES).permutation(npg).astype(np.int64)
    u = seeds.rng(seed, epoch, seeds.PAGE_PICKS).random(src.n)
    order = np.empty(src.n, np.int64)
    K.active_pages_order(arranged, first, porder, active, u, order)
    params = {"page_bytes": int(page), "active_pages": active, "pages": npg}

    def cost():
        reads = _aligned_bytes(src, first)
        peak, live = K.peak_live_units(order, _unit_of(first, src.n), _unit_bytes(src, first), npg)
        return Cost(int(peak), f"open pages: up to {int(live):,} of {npg:,}", src.payload, rand_reads=npg,
                    rand_read_bytes=int(reads.sum()), median_read_bytes=_median(reads),
                    notes=f"every page read once, in random order ({_fmt(page)} pages)")

    return _result("ffcv_quasi_random", src, order, params, False, True, cost)


def two_pass(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, piles: int | None = None,
             memory_bytes: int | None = None, reshuffle_every_epoch: bool = True,
             record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """Jane Street's two-pass external shuffle (exact): pass 1 appends every record to one of
    ``piles`` piles chosen uniformly; pass 2 shuffles each pile in RAM and concatenates them.
    Default piles: enough that the expected pile is 80% of ``memory_bytes`` (headroom for
    unlucky piles; an oversized pile would be redone, which adds no bias)."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    M = _budget(src, memory_bytes)
    m = _positive("piles", piles) if piles is not None else max(1, math.ceil(1.25 * src.payload / M))
    e = int(epoch) if reshuffle_every_epoch else 0
    pile = seeds.rng(seed, e, seeds.PILES).integers(0, m, src.n).astype(np.int64)
    order = np.empty(src.n, np.int64)
    bounds = np.empty(m + 1, np.int64)
    K.bucket_sort(pile, m, order, bounds)
    K.segment_shuffle(order, bounds, np.uint64(seeds.key(seed, e, seeds.PILE_SHUFFLE)))
    params = {"piles": m, "reshuffle_every_epoch": bool(reshuffle_every_epoch)}

    def cost():
        pb = np.bincount(pile, weights=src.rec_bytes, minlength=m)
        return _rewrite_cost(src, reshuffle_every_epoch, int(pb.max()), f"the largest of {m} piles, shuffled in RAM",
                             f"pass 1 appends to {m} pile files, pass 2 shuffles each in RAM")

    return _result("two_pass", src, order, params, bool(reshuffle_every_epoch), bool(reshuffle_every_epoch), cost)


def terashuf(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, run_bytes: int | None = None,
             memory_bytes: int | None = None, reshuffle_every_epoch: bool = True,
             record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """terashuf (exact): the input is cut into runs of ``run_bytes`` (default ``memory_bytes``),
    each shuffled in RAM and written out; the merge picks a run with probability proportional to
    the records it has left and emits its next record."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    R = _positive("run_bytes", run_bytes) if run_bytes is not None else _budget(src, memory_bytes)
    first = _byte_units(src, R)
    e = int(epoch) if reshuffle_every_epoch else 0
    arranged = np.arange(src.n, dtype=np.int64)
    K.segment_shuffle(arranged, first, np.uint64(seeds.key(seed, e, seeds.RUNS)))
    u = seeds.rng(seed, e, seeds.MERGE).random(src.n)
    order = np.empty(src.n, np.int64)
    K.proportional_merge(arranged, first, u, order)
    runs = len(first) - 1
    params = {"run_bytes": int(R), "runs": runs, "reshuffle_every_epoch": bool(reshuffle_every_epoch)}
    return _result("terashuf", src, order, params, bool(reshuffle_every_epoch), bool(reshuffle_every_epoch),
                   lambda: _rewrite_cost(src, reshuffle_every_epoch, int(_unit_bytes(src, first).max()),
                                         "one run, shuffled in RAM",
                                         f"{runs} shuffled runs merged as {runs} interleaved streams"))


def chunk_roundrobin(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
                     chunk_records: int | None = None, memory_bytes: int | None = None,
                     reshuffle_every_epoch: bool = True, record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """The chunk-then-round-robin merge (not uniform): the file is cut into chunks of
    ``chunk_records`` consecutive records (default: as many as fit ``memory_bytes``; the last
    chunk is shorter), each chunk shuffled; round k takes the k-th record of every chunk that
    still has one and writes them in a random order. Records of a short last chunk come early,
    and two records of one chunk never share a round."""
    _check_common(seed, epoch, batch_size)
    src = _source(source, record_bytes)
    M = _budget(src, memory_bytes)
    c = _positive("chunk_records", chunk_records) if chunk_records is not None else max(1, int(M // max(src.mean, 1)))
    first = _count_units(src.n, c)
    e = int(epoch) if reshuffle_every_epoch else 0
    arranged = np.arange(src.n, dtype=np.int64)
    K.segment_shuffle(arranged, first, np.uint64(seeds.key(seed, e, seeds.CHUNKS)))
    order = np.empty(src.n, np.int64)
    K.round_robin_merge(arranged, first, True, np.uint64(seeds.key(seed, e, seeds.ROUNDS)), order)
    chunks = len(first) - 1
    params = {"chunk_records": c, "chunks": chunks, "reshuffle_every_epoch": bool(reshuffle_every_epoch)}
    return _result("chunk_roundrobin", src, order, params, False, bool(reshuffle_every_epoch),
                   lambda: _rewrite_cost(src, reshuffle_every_epoch, int(_unit_bytes(src, first).max()),
                                         "one chunk, shuffled in RAM",
                                         f"{chunks} shuffled chunks merged round by round"))


def _lirs(granularity: str):
    def fn(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, group_bytes: int = DEFAULT_GROUP_BYTES,
           window: int = 16, permutation: str = "auto", record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
        _check_common(seed, epoch, batch_size)
        src = _source(source, record_bytes)
        index = _index_of(source, src)
        plan = plan_epoch(index, int(batch_size), granularity, seed=int(seed), epoch=int(epoch),
                          group_bytes=int(group_bytes), window=int(window), permutation=permutation)
        order = plan.order()
        params = {}
        if granularity == "window":
            params = {"group_bytes": int(group_bytes), "window": int(window)}
        elif granularity == "group":
            params = {"group_bytes": int(group_bytes)}

        def cost():
            st = plan.stats()
            steps = max(1, -(-st["units"] // int(window)) if granularity == "window" else st["batches"])
            step_bytes = st["bytes_read"] / steps
            idx_bytes = 8 * src.n  # the offset table the planner and reads need
            mem = int(idx_bytes + st["plan_table_bytes"] + LOADER_STEPS_IN_FLIGHT * step_bytes)
            return Cost(mem, f"offset index (8 B/record) + plan tables + {LOADER_STEPS_IN_FLIGHT} read steps "
                             f"in flight", src.payload, rand_reads=int(st["reads"]),
                        rand_read_bytes=int(st["bytes_read"]), median_read_bytes=st["median_read_bytes"],
                        notes=f"coalesced aligned direct reads, amplification {st['amplification']:.3f}x")

        return _result(granularity, src, order, params, granularity == "instance", True, cost)

    fn.__name__ = fn.__qualname__ = f"lirs_{granularity}"
    fn.__doc__ = (f"lirs ``{granularity}`` granularity: :func:`lirs.plan.plan_epoch` order of the epoch; "
                  "its cost from the plan's statistics (reads, bytes, amplification) plus the memory of "
                  "the offset index, the plan tables and the Loader's read steps in flight.")
    return fn


def _fmt(b) -> str:
    return format_bytes(float(b))


STRATEGIES = {
    "sequential": sequential,
    "bmf": bmf,
    "shuffle_buffer": shuffle_buffer,
    "deeplake": deeplake,
    "streaming_py1s": streaming_py1s,
    "streaming_py2s": streaming_py2s,
    "streaming_py1b": streaming_py1b,
    "streaming_py1br": streaming_py1br,
    "streaming_py1e": streaming_py1e,
    "streaming_naive": streaming_naive,
    "ffcv_quasi_random": ffcv_quasi_random,
    "two_pass": two_pass,
    "terashuf": terashuf,
    "chunk_roundrobin": chunk_roundrobin,
    "instance": _lirs("instance"),
    "page": _lirs("page"),
    "group": _lirs("group"),
    "window": _lirs("window"),
}
"""name -> strategy function (one signature: see the module docstring)."""

LIRS_STRATEGIES = ("instance", "page", "group", "window")
EXACT_STRATEGIES = ("streaming_naive", "two_pass", "terashuf", "instance")
_COMMON = ("seed", "epoch", "batch_size")


def strategy_params(name: str) -> tuple:
    """The keyword parameters strategy ``name`` accepts besides seed, epoch and batch_size."""
    fn = _get(name)
    return tuple(p for p in inspect.signature(fn).parameters if p not in _COMMON and p != "source")


def all_params() -> set:
    """Every parameter name some strategy accepts."""
    return {p for name in STRATEGIES for p in strategy_params(name)}


def _get(name: str):
    fn = STRATEGIES.get(name)
    if fn is None:
        raise UsageError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return fn


def run_strategy(name: str, source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
                 **params) -> StrategyOrder:
    """Call strategy ``name`` with the parameters it accepts out of ``params``; parameters meant
    for other strategies are ignored (one shared dict can drive them all), names no strategy
    knows raise :class:`~lirs.errors.UsageError`."""
    fn = _get(name)
    unknown = set(params) - all_params()
    if unknown:
        raise UsageError(f"unknown strategy parameter(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted(all_params()))}")
    mine = strategy_params(name)
    return fn(source, seed=seed, epoch=epoch, batch_size=batch_size,
              **{k: v for k, v in params.items() if k in mine and v is not None})
