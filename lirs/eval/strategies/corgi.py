"""CorgiPile and Corgi²: blocks in a random order through a buffer of whole blocks, shuffled and
emitted buffer by buffer; Corgi² first rewrites the file once by the same shuffle, block-sized.

CorgiPile (Xu et al., SIGMOD 2022): every epoch the blocks (records whose start lies in one span of
``group_bytes`` of the files laid end to end, as Deep Lake's chunks and FFCV's pages) come in a
fresh random order; they are read one by one into a buffer of ``buffer_blocks`` blocks; when the
buffer is full (or the blocks run out) its records are shuffled and emitted, and the buffer is
emptied. This is the order of lirs ``window`` with ``window = buffer_blocks`` groups, drawn from
its own seeds and on blocks of the files laid end to end.

Corgi² (Livne et al., 2023) adds one offline pass: blocks in a random order, ``offline_blocks`` at
a time, are read, their records shuffled together and written out back to back as a new file
(whose blocks each mix records of that many original blocks); training then runs CorgiPile on
the new file. The offline pass is drawn once per run (epoch 0 of its seeds) and its I/O is
counted in ``oneoff_read_bytes`` / ``oneoff_write_bytes``.
"""
from __future__ import annotations

import weakref

import numpy as np

from ... import seeds
from ...constants import DEFAULT_GROUP_BYTES
from ...windows import group_span
from ..kernels import strategies as K
from .base import (DEFAULT_RECORD_BYTES, Cost, check_choice, StrategyOrder, aligned_bytes, budget_bytes, byte_units, check_common,
                   fmt, large_read_bytes, median_or_none, positive_param, strategy_result, Source, as_source, unit_sizes)

# the Corgi² rewritten file of a source, per (group_bytes, offline_blocks, seed); dropped with it,
# a few per source (each holds three arrays of n)
_LAYOUTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LAYOUTS_PER_SOURCE = 2


def _buffer_blocks(src: Source, group_bytes: int, buffer_blocks, memory_bytes) -> int:
    """The buffer in blocks: ``buffer_blocks``, or as many whole blocks as ``memory_bytes`` holds."""
    if buffer_blocks is not None:
        return positive_param("buffer_blocks", buffer_blocks)
    # a block is a group: of the mean record's bytes where records are larger (lirs.windows.group_span)
    return max(1, budget_bytes(src, memory_bytes) // group_span(group_bytes, src.payload, src.n))


def _pile(first: np.ndarray, nbuf: int, block_order: np.ndarray, key: int, remainder: str = "last"):
    """One CorgiPile pass over blocks ``first`` (int64 (b+1,), block k = records first[k] ..
    first[k+1]-1 of the layout): the blocks in ``block_order``, cut into buffers of ``nbuf``
    blocks (``remainder="last"``: the last one short) or into max(1, b // nbuf) buffers of
    equal size, one block apart at most (``"spread"``), each buffer's records shuffled (stream
    (key, buffer number)).

    Returns (stream int64 (n,): layout positions in delivery order, buffer_bytes_first int64:
    the first block position of every buffer, for its size)."""
    n = int(first[-1])
    sb, se = first[:-1][block_order], first[1:][block_order]
    stream = np.empty(n, np.int64)
    K.expand_spans(sb, se, stream)
    cum = np.concatenate([[0], np.cumsum(se - sb)]).astype(np.int64)
    nb = len(block_order)
    if remainder == "spread":
        k = max(1, nb // nbuf)
        starts = (np.arange(k, dtype=np.int64) * nb) // k
    else:
        starts = np.arange(0, nb, nbuf, dtype=np.int64)
    bounds = np.concatenate([cum[starts], [n]]).astype(np.int64)
    K.segment_shuffle(stream, bounds, np.uint64(key))
    return stream, starts


def _peak_buffer(block_bytes: np.ndarray, block_order: np.ndarray, starts: np.ndarray) -> int:
    """Bytes of the largest buffer (whole blocks of ``block_bytes`` taken in ``block_order``)."""
    return int(np.add.reduceat(block_bytes[block_order], starts).max()) if len(starts) else 0


def _online(src: Source, group_bytes: int, nbuf: int, seed: int, epoch: int, remainder: str):
    """CorgiPile's epoch on the layout ``src``: (stream, first, peak buffer bytes)."""
    first = byte_units(src, group_bytes)
    nb = len(first) - 1
    perm = seeds.rng(seed, epoch, seeds.CORGI_BLOCKS).permutation(nb).astype(np.int64)
    stream, starts = _pile(first, nbuf, perm, seeds.key(seed, epoch, seeds.CORGI_BUFFER), remainder)
    return stream, first, _peak_buffer(unit_sizes(src, first), perm, starts)


def corgipile(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
              group_bytes: int = DEFAULT_GROUP_BYTES, buffer_blocks: int | None = None,
              memory_bytes: int | None = None, remainder: str = "last",
              record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """CorgiPile: every epoch the blocks of ``group_bytes`` in a random order, read whole into a
    buffer of ``buffer_blocks`` blocks (default: as many as ``memory_bytes`` holds), whose records
    are shuffled and emitted when it is full (see the module docstring). ``remainder="spread"``
    cuts the epoch's blocks into max(1, blocks // buffer_blocks) buffers of equal size (one block
    apart at most, so up to ``buffer_blocks`` + ceil(rest / buffers) blocks) instead of leaving a
    short last buffer (``"last"``, CorgiPile's)."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    gb = positive_param("group_bytes", group_bytes)
    nbuf = _buffer_blocks(src, gb, buffer_blocks, memory_bytes)
    _check_remainder(remainder)
    order, first, peak = _online(src, gb, nbuf, int(seed), int(epoch), remainder)
    nb = len(first) - 1
    params = {"group_bytes": gb, "buffer_blocks": nbuf, "buffer_bytes": nbuf * gb, "blocks": nb,
              "remainder": remainder}

    def cost():
        reads = aligned_bytes(src, first)
        return Cost(peak, f"a buffer of {min(nbuf, nb):,} whole blocks (the largest)", src.payload,
                    rand_reads=nb, rand_read_bytes=int(reads.sum()), median_read_bytes=median_or_none(reads),
                    large_rand_read_bytes=large_read_bytes(reads),
                    notes=f"{nb:,} blocks of {fmt(gb)}, each read whole once per epoch, in random order")

    return strategy_result("corgipile", src, order, params, False, True, cost)


def _check_remainder(remainder) -> None:
    check_choice("remainder", remainder)


def _rewritten(src: Source, group_bytes: int, m: int, seed: int):
    """Corgi²'s offline pass (once per run): (layout int64 (n,): the record IDs of the new file in
    file order, the new file as a :class:`Source`, the peak offline buffer bytes, the original
    blocks' first records)."""
    per = _LAYOUTS.setdefault(src, {})
    key = (int(group_bytes), int(m), int(seed))
    hit = per.get(key)
    if hit is not None:
        return hit
    first = byte_units(src, group_bytes)
    nb = len(first) - 1
    perm = seeds.rng(seed, 0, seeds.CORGI2_BLOCKS).permutation(nb).astype(np.int64)
    layout, starts = _pile(first, m, perm, seeds.key(seed, 0, seeds.CORGI2_BUFFER))
    rec = src.rec_bytes[layout]
    new = Source(src.n, rec, np.concatenate([[0], np.cumsum(rec)]).astype(np.int64), src.record_bytes)
    hit = (layout, new, _peak_buffer(unit_sizes(src, first), perm, starts), first)
    if len(per) >= _LAYOUTS_PER_SOURCE:
        per.pop(next(iter(per)))
    per[key] = hit
    return hit


def corgi2(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, group_bytes: int = DEFAULT_GROUP_BYTES,
           buffer_blocks: int | None = None, offline_blocks: int | None = None, memory_bytes: int | None = None,
           record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """Corgi²: once per run, the file rewritten by one CorgiPile pass with a buffer of
    ``offline_blocks`` blocks (default: ``buffer_blocks``), its output written back to back as
    new blocks; every epoch, CorgiPile with ``buffer_blocks`` blocks (default: as many as
    ``memory_bytes`` holds) on the rewritten file (see the module docstring)."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    gb = positive_param("group_bytes", group_bytes)
    nbuf = _buffer_blocks(src, gb, buffer_blocks, memory_bytes)
    m = positive_param("offline_blocks", offline_blocks) if offline_blocks is not None else nbuf
    layout, new, off_peak, old_first = _rewritten(src, gb, m, int(seed))
    stream, first, peak = _online(new, gb, nbuf, int(seed), int(epoch), "last")
    order = layout[stream]
    nb = len(first) - 1
    params = {"group_bytes": gb, "buffer_blocks": nbuf, "buffer_bytes": nbuf * gb, "offline_blocks": m,
              "blocks": nb}

    def cost():
        reads = aligned_bytes(new, first)
        once = aligned_bytes(src, old_first)
        return Cost(max(peak, off_peak), f"a buffer of whole blocks (the largest, online {min(nbuf, nb):,} "
                                         f"blocks, offline {min(m, len(once)):,})", src.payload,
                    rand_reads=nb, rand_read_bytes=int(reads.sum()), median_read_bytes=median_or_none(reads),
                    large_rand_read_bytes=large_read_bytes(reads), oneoff_read_bytes=int(once.sum()),
                    oneoff_write_bytes=src.payload,
                    notes=f"one-off: {len(once):,} blocks read in random order, their records shuffled "
                          f"{m:,} blocks at a time and written out as a new file; per epoch: CorgiPile on "
                          f"the new file ({nb:,} blocks of {fmt(gb)}, each read whole once)")

    return strategy_result("corgi2", src, order, params, False, True, cost)
