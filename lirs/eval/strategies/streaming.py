"""MosaicML Streaming's shuffles (py1s, py2s, py1b, py1br, py1e, naive) over shards split across
canonical nodes (see the package docstring)."""
from __future__ import annotations

import functools

import numpy as np

from ... import seeds
from ...errors import UsageError
from ..kernels import strategies as K
from .base import (DEFAULT_RECORD_BYTES, Cost, StrategyOrder, aligned_bytes, budget_bytes, check_common, count_units,
                   large_read_bytes, median_or_none, positive_param, strategy_result, as_source, unit_sizes, unit_of_record)


@functools.lru_cache(maxsize=4)
def _streaming_layout(n: int, shard_records: int, nodes: int, seed: int, within_shard: bool):
    """Once per run: shards (spans of ``shard_records`` consecutive records) in a random order,
    their records laid end to end in ``base`` (each whole shard shuffled when ``within_shard``:
    py2s), cut into ``nodes`` equal sample ranges. Returns (base, part_begin, part_end, node_parts,
    part_shard): the parts are ranges of ``base``; node k owns parts node_parts[k]:node_parts[k+1]."""
    first = count_units(n, shard_records)
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
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    n = src.n
    M = budget_bytes(src, memory_bytes)
    block = positive_param("block_records", block_records) if block_records is not None else max(1, int(M // max(src.mean, 1)))
    shard = positive_param("shard_records", shard_records) if shard_records is not None else max(1, block // 10)
    nodes = positive_param("canonical_nodes", canonical_nodes)
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
        first = count_units(n, shard)
        unit_of = unit_of_record(first, n)
        nbytes = unit_sizes(src, first)
        peak, live = K.peak_live_units(order, unit_of, nbytes, len(nbytes))
        reads = aligned_bytes(src, first)
        return Cost(int(peak), f"live shards: up to {int(live):,} of {len(nbytes):,} held at once "
                               f"(fetched before their first sample, dropped after their last)", src.payload,
                    rand_reads=len(nbytes), rand_read_bytes=int(reads.sum()), median_read_bytes=median_or_none(reads),
                    large_rand_read_bytes=large_read_bytes(reads),
                    notes=f"every shard read whole once per epoch ({shard:,} records each)")

    return strategy_result(name, src, order, params, algo == "naive", True, cost)


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
