"""Strategies that stream the file (or its chunks, pages, blocks) through a bounded buffer:
sequential, BMF, the shuffle buffer, Deep Lake and FFCV quasi-random."""
from __future__ import annotations

import functools

import numpy as np

from ... import seeds
from ...constants import BLOCK
from ..kernels import strategies as K
from ..reference import bmf_block_order, bmf_blocks, shuffle_buffer_order
from .base import (DEFAULT_RECORD_BYTES, Cost, check_choice, StrategyOrder, aligned_bytes, budget_bytes, byte_units, check_common,
                   fmt, large_read_bytes, median_or_none, positive_param, strategy_result, as_source, unit_sizes, unit_of_record)


def sequential(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
               record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """File order every epoch: one sequential read of the file, no memory beyond a read buffer."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    order = np.arange(src.n, dtype=np.int64)
    return strategy_result("sequential", src, order, {}, False, False,
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
    
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    check_choice("inner", inner)
    M = budget_bytes(src, memory_bytes)
    nb = positive_param("blocks", blocks) if blocks is not None else max(1, -(-src.payload // M))
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
                          f"file whole, one sequential stream each ({fmt(float(np.median(block_bytes)))} median)")

    return strategy_result("bmf", src, order, params, False, True, cost)


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
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    M = budget_bytes(src, memory_bytes)
    Q = positive_param("buffer_records", buffer_records) if buffer_records is not None else max(1, int(M // max(src.mean, 1)))
    order = shuffle_buffer_order(src.n, Q, seed=seed, epoch=epoch)
    params = {"buffer_records": Q}
    return strategy_result("shuffle_buffer", src, order, params, False, True,
                   lambda: Cost(int(round(min(Q, src.n) * src.mean)), f"a buffer of {Q:,} records", src.payload,
                                seq_read_bytes=src.payload, notes="one sequential pass over the file"))


def deeplake(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, buffer_bytes: int | None = None,
             chunk_bytes: int | None = None, memory_bytes: int | None = None,
             record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """Deep Lake's loader: chunks (the records starting in each span of ``chunk_bytes``) in a random
    order feed a shuffle buffer of ``buffer_bytes`` (default ``memory_bytes``); each output is a
    uniform slot; whole chunks are added while the buffer holds less than its size. Default
    chunk: 1/128 of the buffer (Deep Lake's defaults: a 2 GB buffer, chunks of about 16 MB)."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    buf = positive_param("buffer_bytes", buffer_bytes) if buffer_bytes is not None else budget_bytes(src, memory_bytes)
    chunk = positive_param("chunk_bytes", chunk_bytes) if chunk_bytes is not None else max(BLOCK, buf // 128)
    first = byte_units(src, chunk)
    nch = len(first) - 1
    corder = seeds.rng(seed, epoch, seeds.DL_CHUNKS).permutation(nch).astype(np.int64)
    u = seeds.rng(seed, epoch, seeds.DL_SLOTS).random(src.n)
    order = np.empty(src.n, np.int64)
    peak = int(K.chunk_buffer_order(first, corder, src.rec_bytes, int(buf), u, order))
    params = {"buffer_bytes": int(buf), "chunk_bytes": int(chunk), "chunks": nch}

    def cost():
        reads = aligned_bytes(src, first)
        return Cost(peak, f"a buffer of {fmt(buf)} filled with whole chunks (peak)", src.payload,
                    rand_reads=nch, rand_read_bytes=int(reads.sum()), median_read_bytes=median_or_none(reads),
                    large_rand_read_bytes=large_read_bytes(reads),
                    notes=f"{nch:,} chunks of about {fmt(chunk)}, each read whole, in random order")

    return strategy_result("deeplake", src, order, params, False, True, cost)



def ffcv_quasi_random(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024,
                      page_bytes: int | None = None, active_pages: int | None = None,
                      memory_bytes: int | None = None, record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """FFCV's QUASI_RANDOM order: a page holds the records that start in one span of ``page_bytes``;
    every epoch the records of each page are shuffled and the pages permuted; at most
    ``active_pages`` (default 2 x batch_size, FFCV's rule) are open, each output takes the next
    record of a uniformly chosen open page. Default page size: the multiple of 4 KiB at which the
    open pages fill ``memory_bytes`` (FFCV's writer defaults to 4 MiB pages)."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    active = positive_param("active_pages", active_pages) if active_pages is not None else 2 * int(batch_size)
    if page_bytes is None:
        page = max(BLOCK, budget_bytes(src, memory_bytes) // active // BLOCK * BLOCK)
    else:
        page = positive_param("page_bytes", page_bytes)
    first = byte_units(src, page)
    npg = len(first) - 1
    arranged = np.arange(src.n, dtype=np.int64)
    K.segment_shuffle(arranged, first, np.uint64(seeds.key(seed, epoch, seeds.PAGE_SAMPLES)))
    porder = seeds.rng(seed, epoch, seeds.PAGES).permutation(npg).astype(np.int64)
    u = seeds.rng(seed, epoch, seeds.PAGE_PICKS).random(src.n)
    order = np.empty(src.n, np.int64)
    K.active_pages_order(arranged, first, porder, active, u, order)
    params = {"page_bytes": int(page), "active_pages": active, "pages": npg}

    def cost():
        reads = aligned_bytes(src, first)
        peak, live = K.peak_live_units(order, unit_of_record(first, src.n), unit_sizes(src, first), npg)
        return Cost(int(peak), f"open pages: up to {int(live):,} of {npg:,}", src.payload, rand_reads=npg,
                    rand_read_bytes=int(reads.sum()), median_read_bytes=median_or_none(reads),
                    large_rand_read_bytes=large_read_bytes(reads),
                    notes=f"every page read once, in random order ({fmt(page)} pages)")

    return strategy_result("ffcv_quasi_random", src, order, params, False, True, cost)
