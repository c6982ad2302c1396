"""Kernels of the two-pass external shuffle (`lirs shuffle`, :mod:`lirs.external`).

Pass 1 deals records into per-pile write buffers: each record draws its pile from the
counter-based stream of :mod:`lirs.kernels.plan` (``key`` made by the caller with
``lirs.seeds.key(seed, 0, SHUFFLE_PILES, spawn_key=pile path)``, counter = the record's number in
the input stream), so the piles do not depend on how the input was chunked. Kernels stop and hand control back to Python
whenever a pile buffer is full (Python writes it out), so no per-record arrays are ever built.

Pass 2 shuffles the start offsets of one pile's records (Fisher-Yates, ``shuffle_inplace``) and
gathers the records in that order into an output buffer.

Text piles hold newline-terminated lines only: a record ends at the first ``\\n`` after its start.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types

from .plan import bounded_draw, stream_start

# libc memchr/memcpy: SIMD-tuned, and declared by symbol name so the kernels stay cacheable.
memchr = types.ExternalFunction("memchr", types.uintp(types.uintp, types.intc, types.uintp))
memcpy = types.ExternalFunction("memcpy", types.uintp(types.uintp, types.uintp, types.uintp))

# status codes of the scatter kernels
DONE = 0    # the region is consumed
FLUSH = 1   # pile buffer `pile` is too full for the next record: write it out, call again at `pos`
BIG = 2     # the record [pos, end) is larger than a pile buffer: the caller streams it to `pile`

# info[] slots of scatter_lines
INFO_SKIPPED_LINES = 0   # blank / comment-only LIBSVM lines dropped
INFO_SKIPPED_BYTES = 1
INFO_ADDED_NEWLINES = 2  # last lines of files without a trailing newline


@njit(cache=True, nogil=True)
def _is_ws(c):
    # the whitespace of lirs.kernels.scan (bytes.split() whitespace other than the newline)
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True)
def find_newline(buf, lo, hi):
    """First ``\\n`` in buf[lo:hi] (uint8), or -1 (memchr)."""
    if hi <= lo:
        return -1
    ptr = np.int64(buf.ctypes.data)
    r = np.int64(memchr(ptr + lo, 10, hi - lo))
    return -1 if r == 0 else r - ptr


@njit(cache=True, nogil=True)
def draw_pile(key, counter, m):
    """The pile (in [0, m)) of record number ``counter`` under ``key`` (uint64)."""
    state = stream_start(key, np.uint64(counter))
    state, p = bounded_draw(state, np.uint64(m))
    return np.int64(p)


@njit(cache=True, nogil=True)
def draw_piles(key, counter0, m, out):
    """``out[i] = draw_pile(key, counter0 + i, m)`` (int64, (k,)); for tests and statistics."""
    for i in range(out.shape[0]):
        out[i] = draw_pile(key, counter0 + i, m)


@njit(cache=True, nogil=True)
def scatter_lines(buf, pos, hi, skip_blank, key, counter, m, piles, w, wmax, slots, fill, counts, nbytes,
                  info):
    """Deal the lines of buf[pos:hi] (uint8) to ``m`` pile buffers.

    ``piles`` uint8 (slots * w,): pile ``p`` buffers bytes in slot ``s = slots[p]`` (int64 (m,)),
    ``piles[s*w : s*w + fill[p]]``.
    ``fill``, ``counts``, ``nbytes`` int64 (m,): buffered bytes, records and bytes dealt per pile.
    ``info`` int64 (3,): see ``INFO_*``. Lines are ``\\n``-terminated except possibly the last one
    of the region, which gets a ``\\n`` in its pile (records must not merge). With ``skip_blank``
    (LIBSVM), lines whose first non-blank byte is ``#`` or the end of the line are not records and
    are dropped; otherwise every line is a record (``lines`` format, and re-split piles).
    ``counter`` is the running record number that keys the pile draws.

    Returns (pos, end, counter, status, pile): with ``DONE`` everything is dealt; ``FLUSH`` means
    pile ``pile`` must be emptied before the record at ``pos`` fits; ``BIG`` means the record
    ``buf[pos:end]`` (``counter`` not yet advanced) is longer than ``wmax`` (<= w, what a slot
    holds after a flush) and is streamed to pile ``pile`` by the caller.
    """
    ptr = np.int64(buf.ctypes.data)
    pb = np.int64(piles.ctypes.data)
    while pos < hi:
        r = np.int64(memchr(ptr + pos, 10, hi - pos))
        end = hi if r == 0 else r - ptr + 1
        if skip_blank:
            q = pos
            while q < end and _is_ws(buf[q]):
                q += 1
            if q >= end or buf[q] == 10 or buf[q] == 35:
                info[INFO_SKIPPED_LINES] += 1
                info[INFO_SKIPPED_BYTES] += end - pos
                pos = end
                continue
        ln = end - pos
        need = ln if buf[end - 1] == 10 else ln + 1
        p = draw_pile(key, counter, m)
        if need > wmax:
            return pos, end, counter, BIG, p
        if fill[p] + need > w:
            return pos, end, counter, FLUSH, p
        dst = slots[p] * w + fill[p]
        memcpy(pb + dst, ptr + pos, ln)
        if need > ln:
            piles[dst + ln] = 10
            info[INFO_ADDED_NEWLINES] += 1
        fill[p] += need
        counts[p] += 1
        nbytes[p] += need
        counter += 1
        pos = end
    return pos, pos, counter, DONE, -1


@njit(cache=True, nogil=True)
def scatter_fixed(buf, pos, nrec, rs, lab, ls, key, counter, m, piles, w, slots, fill, counts, nbytes):
    """Deal fixed-size records to ``m`` pile buffers (see :func:`scatter_lines`).

    ``buf`` uint8 holds ``nrec`` records of ``rs`` bytes from offset 0; record ``i`` goes to its
    pile followed by its ``ls`` label bytes ``lab[i*ls : (i+1)*ls]`` (uint8; empty when ``ls`` is 0).
    ``w`` >= rs + ls + (the bytes a flush may leave behind). Starts at record ``pos``; returns
    (pos, counter, status, pile) with status ``DONE`` or ``FLUSH``.
    """
    ptr = np.int64(buf.ctypes.data)
    lptr = np.int64(lab.ctypes.data)
    pb = np.int64(piles.ctypes.data)
    rr = rs + ls
    while pos < nrec:
        p = draw_pile(key, counter, m)
        if fill[p] + rr > w:
            return pos, counter, FLUSH, p
        dst = slots[p] * w + fill[p]
        memcpy(pb + dst, ptr + pos * rs, rs)
        if ls > 0:
            memcpy(pb + dst + rs, lptr + pos * ls, ls)
        fill[p] += rr
        counts[p] += 1
        nbytes[p] += rr
        counter += 1
        pos += 1
    return pos, counter, DONE, -1


@njit(cache=True, nogil=True)
def line_starts(buf, n, out):
    """Start offsets (int64) of the ``\\n``-terminated lines of buf[:n] into ``out``; returns the count."""
    if n <= 0:
        return 0
    ptr = np.int64(buf.ctypes.data)
    k = 0
    p = 0
    while p < n:
        out[k] = p
        k += 1
        r = np.int64(memchr(ptr + p, 10, n - p))
        if r == 0:
            break
        p = r - ptr + 1
    return k


@njit(cache=True, nogil=True)
def gather_lines(src, offs, i, i_end, out, pos):
    """Copy the lines starting at ``src[offs[i]]``, ``offs[i+1]``, ... (each ends at its first
    ``\\n``) into ``out[pos:]`` until ``i_end`` or until the next line does not fit.

    Returns (i, pos) after the last line copied.
    """
    sp = np.int64(src.ctypes.data)
    op = np.int64(out.ctypes.data)
    n = src.shape[0]
    cap = out.shape[0]
    while i < i_end:
        s = offs[i]
        r = np.int64(memchr(sp + s, 10, n - s))
        ln = (n - s) if r == 0 else r - sp - s + 1
        if pos + ln > cap:
            break
        memcpy(op + pos, sp + s, ln)
        pos += ln
        i += 1
    return i, pos


@njit(cache=True, nogil=True)
def gather_fixed(src, offs, i, i_end, rs, ls, out, pos, lab_out, lab_pos):
    """Copy fixed records ``src[offs[j] : offs[j] + rs]`` for j = i, i+1, ... into ``out[pos:]`` and
    their ``ls`` label bytes (which follow each record in ``src``) into ``lab_out[lab_pos:]``, until
    ``i_end`` or until ``out`` is full. Returns (i, pos, lab_pos)."""
    sp = np.int64(src.ctypes.data)
    op = np.int64(out.ctypes.data)
    lp = np.int64(lab_out.ctypes.data)
    cap = out.shape[0]
    while i < i_end and pos + rs <= cap:
        s = offs[i]
        memcpy(op + pos, sp + s, rs)
        if ls > 0:
            memcpy(lp + lab_pos, sp + s + rs, ls)
            lab_pos += ls
        pos += rs
        i += 1
    return i, pos, lab_pos
