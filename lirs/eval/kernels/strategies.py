"""Kernels of the reference shuffle strategies (:mod:`lirs.eval.strategies`).

Randomness comes from the caller: either a uint64 ``key`` made from
``SeedSequence([seed, epoch, purpose])`` (driving the counter-based splitmix64 stream of
:mod:`lirs.kernels.plan`, one stream per segment) or uniforms in [0, 1) drawn by the caller.
Nothing here seeds anything; every output array is preallocated by the caller.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.plan import shuffle_inplace


@njit(cache=True, nogil=True)
def segment_shuffle(a, bounds, key):
    """Fisher-Yates of every segment ``a[bounds[k]:bounds[k+1]]`` in place, segment k with the
    stream (key, k). a int64 (n,), bounds int64 (m+1,) non-decreasing."""
    for k in range(bounds.shape[0] - 1):
        lo = bounds[k]
        hi = bounds[k + 1]
        if hi - lo > 1:
            shuffle_inplace(a[lo:hi], key, np.uint64(k))


@njit(cache=True, nogil=True)
def expand_spans(begin, end, out):
    """Concatenate ``range(begin[k], end[k])`` for every k into ``out`` (int64); returns the
    length written."""
    o = 0
    for k in range(begin.shape[0]):
        for v in range(begin[k], end[k]):
            out[o] = v
            o += 1
    return o


@njit(cache=True, nogil=True)
def gather_segments(src, begin, end, out, out_bounds):
    """Concatenate ``src[begin[k]:end[k]]`` for every k into ``out``; ``out_bounds`` int64 (m+1,)
    receives where each segment landed."""
    o = 0
    for k in range(begin.shape[0]):
        out_bounds[k] = o
        for p in range(begin[k], end[k]):
            out[o] = src[p]
            o += 1
    out_bounds[begin.shape[0]] = o


@njit(cache=True, nogil=True)
def bucket_sort(bucket, nbuckets, out, bounds):
    """Stable counting sort of record IDs 0..n-1 by ``bucket`` (int64 (n,) in [0, nbuckets)):
    ``out`` int64 (n,) the IDs grouped by bucket, ``bounds`` int64 (nbuckets+1,) the groups."""
    for b in range(nbuckets + 1):
        bounds[b] = 0
    for i in range(bucket.shape[0]):
        bounds[bucket[i] + 1] += 1
    for b in range(nbuckets):
        bounds[b + 1] += bounds[b]
    fill = bounds[:nbuckets].copy()
    for i in range(bucket.shape[0]):
        b = bucket[i]
        out[fill[b]] = i
        fill[b] += 1


@njit(cache=True, nogil=True)
def chunk_buffer_order(chunk_first, chunk_order, rec_bytes, buffer_bytes, u, out):
    """Deep Lake's loader: whole chunks, taken in ``chunk_order``, feed a buffer of
    ``buffer_bytes``; each output is a uniform slot of the buffer (``u`` float64 (n,) in [0, 1)).

    Before every draw, chunks are added while the buffer holds less than ``buffer_bytes`` (so it
    can overshoot by one chunk). chunk_first int64 (c+1,): the first record of every chunk (chunk
    k holds records chunk_first[k] .. chunk_first[k+1]-1); rec_bytes int64 (n,). out int64 (n,).
    Returns the peak buffered bytes.
    """
    n = out.shape[0]
    buf = np.empty(max(n, 1), np.int64)
    fill = 0
    held = 0
    peak = 0
    nxt = 0
    nchunks = chunk_order.shape[0]
    for j in range(n):
        while nxt < nchunks and (fill == 0 or held < buffer_bytes):
            c = chunk_order[nxt]
            for r in range(chunk_first[c], chunk_first[c + 1]):
                buf[fill] = r
                fill += 1
                held += rec_bytes[r]
            nxt += 1
        if held > peak:
            peak = held
        s = int(u[j] * fill)
        if s >= fill:
            s = fill - 1
        r = buf[s]
        out[j] = r
        held -= rec_bytes[r]
        fill -= 1
        buf[s] = buf[fill]
    return peak


@njit(cache=True, nogil=True)
def active_pages_order(arranged, page_first, page_order, active, u, out):
    """FFCV's QUASI_RANDOM traversal: pages enter an active set of at most ``active`` pages in
    ``page_order``; each output takes the next record of a uniformly chosen active page (``u``
    float64 (n,)); a page leaves when its records are used up.

    arranged int64 (n,): record IDs grouped by page (page p at page_first[p]:page_first[p+1]),
    already shuffled inside each page. out int64 (n,). Returns the most pages active at once.
    """
    n = out.shape[0]
    npages = page_order.shape[0]
    cur = np.empty(max(active, 1), np.int64)
    used = np.zeros(page_first.shape[0] - 1, np.int64)
    ncur = 0
    nxt = 0
    peak = 0
    for j in range(n):
        while nxt < npages and ncur < active:
            p = page_order[nxt]
            if page_first[p + 1] > page_first[p]:
                cur[ncur] = p
                ncur += 1
            nxt += 1
        if ncur > peak:
            peak = ncur
        s = int(u[j] * ncur)
        if s >= ncur:
            s = ncur - 1
        p = cur[s]
        out[j] = arranged[page_first[p] + used[p]]
        used[p] += 1
        if used[p] == page_first[p + 1] - page_first[p]:
            ncur -= 1
            cur[s] = cur[ncur]  # the choice is uniform over the set, so its order does not matter
    return peak


@njit(cache=True, nogil=True)
def proportional_merge(arranged, run_first, u, out):
    """terashuf's merge: each output comes from a run chosen with probability proportional to
    the records it has left (``u`` float64 (n,)), taking that run's next record.

    arranged int64 (n,): the runs' records back to back (run k at run_first[k]:run_first[k+1]),
    each run already shuffled. A Fenwick tree over the remaining counts makes a draw O(log runs).
    """
    m = run_first.shape[0] - 1
    tree = np.zeros(m + 1, np.int64)
    for k in range(m):
        c = run_first[k + 1] - run_first[k]
        i = k + 1
        while i <= m:
            tree[i] += c
            i += i & (-i)
    top = 1
    while top * 2 <= m:
        top *= 2
    used = np.zeros(max(m, 1), np.int64)
    left = run_first[m] - run_first[0]
    for j in range(out.shape[0]):
        t = int(u[j] * left)
        if t >= left:
            t = left - 1
        # the run holding the t-th remaining record (0-based): Fenwick descent
        pos = 0
        step = top
        while step > 0:
            q = pos + step
            if q <= m and tree[q] <= t:
                pos = q
                t -= tree[q]
            step //= 2
        k = pos  # 0-based run
        out[j] = arranged[run_first[k] + used[k]]
        used[k] += 1
        i = k + 1
        while i <= m:
            tree[i] -= 1
            i += i & (-i)
        left -= 1


@njit(cache=True, nogil=True)
def round_robin_merge(arranged, chunk_first, shuffle_rounds, key, out):
    """Round k takes record k of every chunk that has one, in chunk order, and appends them;
    with ``shuffle_rounds`` each round is shuffled first (stream (key, k)): the
    chunk-then-round-robin merge. Without it: a plain interleave of the chunks.

    arranged int64 (n,): chunks back to back (chunk c at chunk_first[c]:chunk_first[c+1]);
    chunk_first int64 (m+1,). out int64 (n,).
    """
    m = chunk_first.shape[0] - 1
    longest = 0
    for c in range(m):
        longest = max(longest, chunk_first[c + 1] - chunk_first[c])
    o = 0
    for k in range(longest):
        start = o
        for c in range(m):
            if chunk_first[c] + k < chunk_first[c + 1]:
                out[o] = arranged[chunk_first[c] + k]
                o += 1
        if shuffle_rounds and o - start > 1:
            shuffle_inplace(out[start:o], key, np.uint64(k))


@njit(cache=True, nogil=True)
def peak_live_units(order, unit_of, unit_bytes, nunits):
    """Most bytes of units (shards, chunks, pages) that must be held at once when a unit is
    fetched just before its first record is delivered and dropped after its last.

    order int64 (n,), unit_of int64 (n,) (unit of each record ID), unit_bytes int64 (nunits,).
    Returns (peak bytes, peak unit count).
    """
    first = np.full(nunits, -1, np.int64)
    last = np.full(nunits, -1, np.int64)
    for p in range(order.shape[0]):
        g = unit_of[order[p]]
        if first[g] < 0:
            first[g] = p
        last[g] = p
    delta = np.zeros(order.shape[0] + 1, np.int64)
    dcount = np.zeros(order.shape[0] + 1, np.int64)
    for g in range(nunits):
        if first[g] >= 0:
            delta[first[g]] += unit_bytes[g]
            delta[last[g] + 1] -= unit_bytes[g]
            dcount[first[g]] += 1
            dcount[last[g] + 1] -= 1
    cur = 0
    cnt = 0
    peak = 0
    peak_n = 0
    for p in range(order.shape[0]):
        cur += delta[p]
        cnt += dcount[p]
        if cur > peak:
            peak = cur
        if cnt > peak_n:
            peak_n = cnt
    return peak, peak_n

