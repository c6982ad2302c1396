"""Kernels of the shuffle-quality metrics (:mod:`lirs.eval.quality`): one pass over an epoch's order
each, with preallocated outputs and scratch arrays from the caller."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def distinct_curve(order, codes, ncodes, checkpoints, out):
    """out[j] = distinct ``codes`` among the first ``checkpoints[j]`` delivered records.

    order int64 (n,), codes int (n,) per record ID in [0, ncodes), checkpoints int64 (m,)
    ascending in [0, n], out int64 (m,).
    """
    seen = np.zeros(ncodes, np.bool_)
    distinct = 0
    j = 0
    m = checkpoints.shape[0]
    while j < m and checkpoints[j] <= 0:
        out[j] = 0
        j += 1
    for t in range(order.shape[0]):
        c = codes[order[t]]
        if not seen[c]:
            seen[c] = True
            distinct += 1
        while j < m and checkpoints[j] <= t + 1:
            out[j] = distinct
            j += 1
    while j < m:
        out[j] = distinct
        j += 1


@njit(cache=True, nogil=True)
def first_all_seen(order, codes, ncodes):
    """Records delivered until every code present in ``order`` was seen at least once."""
    seen = np.zeros(ncodes, np.bool_)
    present = 0
    for t in range(order.shape[0]):
        c = codes[order[t]]
        if not seen[c]:
            seen[c] = True
            present += 1
    seen[:] = False
    distinct = 0
    for t in range(order.shape[0]):
        c = codes[order[t]]
        if not seen[c]:
            seen[c] = True
            distinct += 1
            if distinct == present:
                return t + 1
    return 0


@njit(cache=True, nogil=True)
def batch_entropy(order, codes, ncodes, batch_size, out):
    """Label entropy in bits of each full batch: out float64 (n // batch_size,)."""
    counts = np.zeros(ncodes, np.int64)
    touched = np.empty(batch_size, np.int64)
    for b in range(out.shape[0]):
        nt = 0
        for t in range(b * batch_size, (b + 1) * batch_size):
            c = codes[order[t]]
            if counts[c] == 0:
                touched[nt] = c
                nt += 1
            counts[c] += 1
        h = 0.0
        for i in range(nt):
            p = counts[touched[i]] / batch_size
            h -= p * np.log2(p)
            counts[touched[i]] = 0
        out[b] = h


@njit(cache=True, nogil=True)
def displacement(order):
    """(sum over positions of |position - record ID|, sum of squared differences), float64: the
    mean normalized displacement and Spearman's rank correlation with file order follow."""
    s1 = 0.0
    s2 = 0.0
    for p in range(order.shape[0]):
        d = float(p - order[p])
        s1 += abs(d)
        s2 += d * d
    return s1, s2


@njit(cache=True, nogil=True)
def repeat_pairs(order_a, pos_b, batch_size):
    """Pairs of records sharing a batch of ``order_a`` (batches of ``batch_size`` consecutive
    positions) that share one again in the epoch whose inverse order is ``pos_b`` (pos_b[id] =
    position). Returns (pairs again, pairs in all)."""
    n = order_a.shape[0]
    tmp = np.empty(batch_size, np.int64)
    again = 0
    total = 0
    for lo in range(0, n, batch_size):
        hi = min(n, lo + batch_size)
        k = hi - lo
        for t in range(k):
            tmp[t] = pos_b[order_a[lo + t]] // batch_size
        s = np.sort(tmp[:k])
        run = 1
        for t in range(1, k):
            if s[t] == s[t - 1]:
                run += 1
            else:
                again += run * (run - 1) // 2
                run = 1
        again += run * (run - 1) // 2
        total += k * (k - 1) // 2
    return again, total


@njit(cache=True, nogil=True)
def diff_entropy(values, scratch):
    """Entropy in bits of the distribution of |values[t+1] - values[t]| (Streaming's shuffle
    quality measure). values int64 (n,); scratch int64 (>= max |difference| + 1,), zeroed here."""
    n = values.shape[0]
    if n < 2:
        return 0.0
    scratch[:] = 0
    for t in range(n - 1):
        d = values[t + 1] - values[t]
        if d < 0:
            d = -d
        scratch[d] += 1
    h = 0.0
    m = n - 1
    for i in range(scratch.shape[0]):
        c = scratch[i]
        if c:
            p = c / m
            h -= p * np.log2(p)
    return h


@njit(cache=True, nogil=True)
def map_values(order, table, out):
    """out[t] = table[order[t]] (int64)."""
    for t in range(order.shape[0]):
        out[t] = table[order[t]]


@njit(cache=True, nogil=True)
def same_group_neighbours(order, group_of, batch_size):
    """Neighbouring positions inside one batch whose records lie in the same group: returns
    (same, neighbour pairs in all)."""
    n = order.shape[0]
    same = 0
    total = 0
    for t in range(1, n):
        if t % batch_size == 0:
            continue  # the first record of a batch has no neighbour before it in its batch
        total += 1
        if group_of[order[t]] == group_of[order[t - 1]]:
            same += 1
    return same, total


@njit(cache=True, nogil=True)
def inverse(order, out):
    """out[order[p]] = p: the position of every record ID."""
    for p in range(order.shape[0]):
        out[order[p]] = p


@njit(cache=True, nogil=True)
def add_position_counts(pos, sample, n, bins, counts):
    """counts[i, b] += 1 where b = pos[sample[i]] * bins // n (the position bin of sampled record
    i in this epoch). counts int64 (len(sample), bins)."""
    for i in range(sample.shape[0]):
        counts[i, pos[sample[i]] * bins // n] += 1


@njit(cache=True, nogil=True)
def add_gap_counts(pos, first, second, edges, counts):
    """For every pair (first[j], second[j]) of record IDs: counts[b] += 1 for the bin b of
    |pos[first[j]] - pos[second[j]]| in ``edges`` int64 (bins+1,) ascending (bin b holds gaps in
    [edges[b], edges[b+1]))."""
    nb = edges.shape[0] - 1
    for j in range(first.shape[0]):
        d = pos[first[j]] - pos[second[j]]
        if d < 0:
            d = -d
        lo = 0
        hi = nb
        while hi - lo > 1:  # the last edge <= d
            mid = (lo + hi) // 2
            if edges[mid] <= d:
                lo = mid
            else:
                hi = mid
        counts[lo] += 1


@njit(cache=True, nogil=True)
def batch_table_stat(order_a, pos_b, unit):
    """Pearson's statistic of the table N[i, j] = records in run i of epoch a and run j of epoch b
    (runs of ``unit`` consecutive positions, the last one taking the rest: n // unit runs, the last
    of ``unit`` to ``2 unit - 1``; pos_b[id] = position in epoch b) against independence:
    sum_ij N_ij^2 n / (s_i s_j) - n, with s the run sizes."""
    n = order_a.shape[0]
    nb = max(1, n // unit)
    last = n - (nb - 1) * unit  # size of the last run
    tmp = np.empty(max(last, unit), np.int64)
    acc = 0.0
    for i in range(nb):
        lo = i * unit
        hi = n if i == nb - 1 else lo + unit
        k = hi - lo
        for t in range(k):
            tmp[t] = min(pos_b[order_a[lo + t]] // unit, nb - 1)
        s = np.sort(tmp[:k])
        run = 1
        for t in range(1, k + 1):
            if t < k and s[t] == s[t - 1]:
                run += 1
            else:
                sj = last if s[t - 1] == nb - 1 else unit
                acc += run * run * (n / (k * sj))
                run = 1
    return acc - n
