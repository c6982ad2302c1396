"""A read step's planning in one kernel call: the runs of its records, their extents and the
records in delivery order (:func:`lirs.kernels.plan.run_heads`, :func:`~lirs.kernels.plan.extents`,
:func:`~lirs.kernels.plan.gather_records` run one after the other).

Every call of a kernel without the GIL lets it go and takes it back. Where a pool of many threads
holds the GIL in turns (16 cores), taking it back is a wait, and a group epoch's planning thread,
which set the epoch's rate there, waited once for each of the three calls of every step.
"""
from __future__ import annotations

from numba import njit

from .plan import extents, gather_records, run_heads


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
