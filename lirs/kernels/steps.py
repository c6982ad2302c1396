"""A read step's planning in one kernel call: the runs of its records, their extents and the
records in delivery order (:func:`lirs.kernels.plan.run_heads`, :func:`~lirs.kernels.plan.extents`,
:func:`~lirs.kernels.plan.gather_records` run one after the other); for a step of consecutive
batches (:func:`span_step`), its records taken from the unit stream and each batch's deal first.

Every call of a kernel without the GIL lets it go and takes it back. Where a pool of many threads
holds the GIL in turns (16 cores), taking it back is a wait, and a group epoch's planning thread,
which set the epoch's rate there, waited once for each of the three calls of every step.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .plan import batch_orders, extents, feistel_at, gather_records, run_heads


@njit(cache=True, nogil=True)
def step_extents(ids, deal, heads, keys, runs, sort_max, base, rel, wide, fn_pread, fn_errno, fd, rel_off, gap,
                 span, file_starts, data_ends, header_sizes, record_size, block, ext_file, ext_off, ext_nb, rec_ext,
                 rec_pos, rec_len, state, src):
    """The extents of the records ``ids`` (int64 (k,), k >= 1) in one pass, as :func:`run_heads`
    then :func:`extents` over all the runs fill them (same arguments and outputs), then, where
    ``deal`` (int64: a permutation of ``range(k)``, or empty for none) is given and ``state`` holds
    no error, the record arrays gathered in delivery order by :func:`gather_records`.

    Returns ``(n, ne, ids, rec_ext, rec_pos, rec_len)``: the number of runs, of extents, and the
    record arrays (gathered, or the ones given). Past ``sort_max`` runs (an instance step's
    thousands, sorted by the caller with numpy) only ``heads`` and ``keys`` are filled: ``ne`` is 0
    and the caller finds the extents itself."""
    n = run_heads(ids, heads, keys, runs, sort_max)
    if n > sort_max:
        return n, 0, ids, rec_ext, rec_pos, rec_len
    ne = extents(ids, heads[:n], runs[:n], base, rel, wide, fn_pread, fn_errno, fd, rel_off, gap, span, file_starts,
                 data_ends, header_sizes, record_size, block, ext_file, ext_off, ext_nb, rec_ext, rec_pos, rec_len,
                 state, src)
    if state[3] != 0 or deal.shape[0] == 0:
        return n, ne, ids, rec_ext, rec_pos, rec_len
    i2, x2, p2, l2 = gather_records(deal, ids, rec_ext, rec_pos, rec_len)
    return n, ne, i2, x2, p2, l2


@njit(cache=True, nogil=True, inline='always')
def _unit_at(table, width, fkeys, half, n, p):
    """The unit at stream position ``p``: of a table of ``width``-byte units (``table`` its bytes,
    uint8), or (``width`` 0) of the keyed bijection :func:`~lirs.kernels.plan.feistel_at`."""
    if width == 1:
        return np.int64(table[p])
    if width == 2:
        return np.int64(table.view(np.uint16)[p])
    if width == 4:
        return np.int64(table.view(np.uint32)[p])
    if width == 8:
        return np.int64(table.view(np.uint64)[p])
    return feistel_at(p, fkeys, half, n)


@njit(cache=True, nogil=True)
def span_records(table, width, fkeys, half, n, ufirst, upos, within, ids, cuts, key, counters, order, dealt):
    """Fill ``ids`` (int64 (k,)) with the unit stream's next k records from record ``within`` of the
    unit at position ``upos`` (units as :func:`_unit_at` finds them, ``n`` of them; the records of
    unit u are ``ufirst[u] .. ufirst[u + 1] - 1``, or u alone where ``ufirst`` (int64) is empty),
    as :func:`~lirs.kernels.plan.fill_records` does from units taken first. Then, where
    ``counters`` (uint64) is not empty, deal batches ``cuts[i]:cuts[i + 1]`` into ``order`` (and
    ``dealt``) as :func:`~lirs.kernels.plan.batch_orders` does. Returns ``(upos, within, o)``: the
    place after the records, and how many were filled (o < k: the stream ended first)."""
    k, o = ids.shape[0], 0
    while o < k and upos < n:
        u = _unit_at(table, width, fkeys, half, n, upos)
        if ufirst.shape[0] == 0:
            ids[o] = u
            o += 1
            upos += 1
            continue
        a, b = ufirst[u] + within, ufirst[u + 1]
        take = min(b - a, k - o)
        for t in range(take):
            ids[o + t] = a + t
        o += take
        if a + take == b:
            upos, within = upos + 1, 0
        else:
            within += take
    if o == k and counters.shape[0] > 0:
        batch_orders(order, cuts, key, counters, ids, dealt)
    return upos, within, o


@njit(cache=True, nogil=True)
def span_step(table, width, fkeys, half, n, ufirst, upos, within, ids, cuts, key, counters, order, heads, keys, runs,
              sort_max, base, rel, wide, fn_pread, fn_errno, fd, rel_off, gap, span, file_starts, data_ends,
              header_sizes, record_size, block, ext_file, ext_off, ext_nb, rec_ext, rec_pos, rec_len, state, src):
    """:func:`span_records` (no ``dealt``: ``order`` is the deal, or empty for none) then
    :func:`step_extents` of the records, in one call: a step of consecutive batches (a group
    epoch's) let the GIL go once to be planned instead of three times.

    Returns ``(upos, within, n, ne, ids, rec_ext, rec_pos, rec_len)``: the stream's place after the
    records, then :func:`step_extents`'s; n is -1 where the stream ended before ``ids`` was full."""
    upos, within, o = span_records(table, width, fkeys, half, n, ufirst, upos, within, ids, cuts, key, counters,
                                   order, order[:0])
    if o < ids.shape[0]:
        return upos, within, -1, 0, ids, rec_ext, rec_pos, rec_len
    nr, ne, i2, x2, p2, l2 = step_extents(ids, order, heads, keys, runs, sort_max, base, rel, wide, fn_pread,
                                          fn_errno, fd, rel_off, gap, span, file_starts, data_ends, header_sizes,
                                          record_size, block, ext_file, ext_off, ext_nb, rec_ext, rec_pos, rec_len,
                                          state, src)
    return upos, within, nr, ne, i2, x2, p2, l2
