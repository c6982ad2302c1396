"""One-off file rewrites used as strategies: the two-pass shuffle, terashuf and the
chunk-then-round-robin merge; and the lirs granularities, planned by :func:`lirs.plan.plan_epoch`."""
from __future__ import annotations

import math

import numpy as np

from ...policies import POLICIES
from ... import seeds
from ...constants import DEFAULT_GROUP_BYTES, DEFAULT_PREFETCH
from ...cores import usable_cores
from ...policies import steps_in_flight, windows_in_flight
from ...plan import plan_epoch
from ...steps import file_ends
from ...windows import group_span
from ..kernels import strategies as K
from .base import (DEFAULT_RECORD_BYTES, Cost, StrategyOrder, budget_bytes, byte_units,
                   check_common, count_units, index_of, large_read_bytes, median_or_none, positive_param, strategy_result, rewrite_cost,
                   as_source, unit_sizes)


def two_pass(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, piles: int | None = None,
             memory_bytes: int | None = None, reshuffle_every_epoch: bool = True,
             record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """Jane Street's two-pass external shuffle (exact): pass 1 appends every record to one of
    ``piles`` piles chosen uniformly; pass 2 shuffles each pile in RAM and concatenates them.
    Default piles: enough that the expected pile is 80% of ``memory_bytes`` (headroom for
    unlucky piles; an oversized pile would be redone, which adds no bias)."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    M = budget_bytes(src, memory_bytes)
    m = positive_param("piles", piles) if piles is not None else max(1, math.ceil(1.25 * src.payload / M))
    e = int(epoch) if reshuffle_every_epoch else 0
    pile = seeds.rng(seed, e, seeds.PILES).integers(0, m, src.n).astype(np.int64)
    order = np.empty(src.n, np.int64)
    bounds = np.empty(m + 1, np.int64)
    K.bucket_sort(pile, m, order, bounds)
    K.segment_shuffle(order, bounds, np.uint64(seeds.key(seed, e, seeds.PILE_SHUFFLE)))
    params = {"piles": m, "reshuffle_every_epoch": bool(reshuffle_every_epoch)}

    def cost():
        pb = np.bincount(pile, weights=src.rec_bytes, minlength=m)
        return rewrite_cost(src, reshuffle_every_epoch, int(pb.max()), f"the largest of {m} piles, shuffled in RAM",
                             f"pass 1 appends to {m} pile files, pass 2 shuffles each in RAM")

    return strategy_result("two_pass", src, order, params, bool(reshuffle_every_epoch), bool(reshuffle_every_epoch), cost)


def terashuf(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, run_bytes: int | None = None,
             memory_bytes: int | None = None, reshuffle_every_epoch: bool = True,
             record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
    """terashuf (exact): the input is cut into runs of ``run_bytes`` (default ``memory_bytes``),
    each shuffled in RAM and written out; the merge picks a run with probability proportional to
    the records it has left and emits its next record."""
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    R = positive_param("run_bytes", run_bytes) if run_bytes is not None else budget_bytes(src, memory_bytes)
    first = byte_units(src, R)
    e = int(epoch) if reshuffle_every_epoch else 0
    arranged = np.arange(src.n, dtype=np.int64)
    K.segment_shuffle(arranged, first, np.uint64(seeds.key(seed, e, seeds.RUNS)))
    u = seeds.rng(seed, e, seeds.MERGE).random(src.n)
    order = np.empty(src.n, np.int64)
    K.proportional_merge(arranged, first, u, order)
    runs = len(first) - 1
    params = {"run_bytes": int(R), "runs": runs, "reshuffle_every_epoch": bool(reshuffle_every_epoch)}
    return strategy_result("terashuf", src, order, params, bool(reshuffle_every_epoch), bool(reshuffle_every_epoch),
                   lambda: rewrite_cost(src, reshuffle_every_epoch, int(unit_sizes(src, first).max()),
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
    check_common(seed, epoch, batch_size)
    src = as_source(source, record_bytes)
    M = budget_bytes(src, memory_bytes)
    c = positive_param("chunk_records", chunk_records) if chunk_records is not None else max(1, int(M // max(src.mean, 1)))
    first = count_units(src.n, c)
    e = int(epoch) if reshuffle_every_epoch else 0
    arranged = np.arange(src.n, dtype=np.int64)
    K.segment_shuffle(arranged, first, np.uint64(seeds.key(seed, e, seeds.CHUNKS)))
    order = np.empty(src.n, np.int64)
    K.round_robin_merge(arranged, first, True, np.uint64(seeds.key(seed, e, seeds.ROUNDS)), order)
    chunks = len(first) - 1
    params = {"chunk_records": c, "chunks": chunks, "reshuffle_every_epoch": bool(reshuffle_every_epoch)}
    return strategy_result("chunk_roundrobin", src, order, params, False, bool(reshuffle_every_epoch),
                   lambda: rewrite_cost(src, reshuffle_every_epoch, int(unit_sizes(src, first).max()),
                                         "one chunk, shuffled in RAM",
                                         f"{chunks} shuffled chunks merged round by round"))


def lirs_strategy(granularity: str):
    def fn(source, *, seed: int = 0, epoch: int = 0, batch_size: int = 1024, group_bytes: int = DEFAULT_GROUP_BYTES,
           window=None, permutation: str = "auto", record_bytes: int = DEFAULT_RECORD_BYTES) -> StrategyOrder:
        check_common(seed, epoch, batch_size)
        src = as_source(source, record_bytes)
        index = index_of(source, src)
        # the window spec goes to the planner as given (None: its default); plan.window is the group count
        spec = {} if window is None else {"window": window if isinstance(window, str) else int(window)}
        plan = plan_epoch(index, int(batch_size), granularity, seed=int(seed), epoch=int(epoch),
                          group_bytes=int(group_bytes), permutation=permutation, **spec)
        order = plan.order()
        params = {}
        pol = POLICIES[granularity]
        if pol.uses_window:
            params = {"group_bytes": int(group_bytes), "window": int(plan.window),
                      "window_bytes": int(plan.window) * group_span(int(group_bytes), src.payload, src.n)}
        elif pol.uses_group_bytes:
            params = {"group_bytes": int(group_bytes)}

        def cost():
            reads = _plan_reads(plan)
            steps = max(1, -(-plan.units // int(plan.window)) if pol.uses_window else plan.num_batches)
            step_bytes = int(reads.sum()) / steps
            idx_bytes = 8 * src.n  # the offset table the planner and reads need
            # as the Loader keeps them, reading with O_DIRECT
            in_flight = min(steps, steps_in_flight(plan, DEFAULT_PREFETCH, windows=windows_in_flight(True, usable_cores())))
            mem = int(idx_bytes + plan.nbytes + in_flight * step_bytes)
            amp = int(reads.sum()) / src.payload
            return Cost(mem, f"offset index (8 B/record) + plan tables + {in_flight} read steps "
                             f"in flight", src.payload, rand_reads=len(reads), rand_read_bytes=int(reads.sum()),
                        median_read_bytes=median_or_none(reads), large_rand_read_bytes=large_read_bytes(reads),
                        notes=f"coalesced aligned direct reads, amplification {amp:.3f}x")

        return strategy_result(granularity, src, order, params, pol.unit == "record", True, cost)

    fn.__name__ = fn.__qualname__ = f"lirs_{granularity}"
    fn.__doc__ = (f"lirs ``{granularity}`` granularity: :func:`lirs.plan.plan_epoch` order of the epoch; "
                  "its cost from the plan's statistics (reads, bytes, amplification) plus the memory of "
                  "the offset index, the plan tables and the Loader's read steps in flight.")
    return fn


def _plan_reads(plan) -> np.ndarray:
    """int64 (reads,): the bytes of every aligned read of an epoch plan, in plan order, up to the
    end of its file as the Loader counts them and as the plan's statistics do (the plan is walked
    with its extents; nothing is read)."""
    ends = file_ends(plan.index)
    sizes = [s.extents_within(ends) for b in plan.batches() for s in b.new_steps]
    return np.concatenate(sizes).astype(np.int64) if sizes else np.empty(0, np.int64)
