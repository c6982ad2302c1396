"""Planning kernels: unit tables, permutations (table and stateless), walking the unit stream,
within-batch and within-window shuffles, and coalesced aligned extents.

Randomness is counter based: every kernel that draws gets a uint64 ``key`` (made by the caller
from ``SeedSequence([seed, epoch, purpose])``) and a counter; the stream is splitmix64 started at
``mix(key ^ mix(counter))``. The same (key, counter) always gives the same draws, in any process,
whatever was drawn before: that is what makes resume and rank sharding free of communication.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .io import EINTR, call_errno, call_pread

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_U32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def mix64(z):
    """splitmix64's finalizer: a bijective avalanche of a uint64."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def stream_start(key, counter):
    return mix64(np.uint64(key) ^ mix64(np.uint64(counter) + _GOLDEN))


@njit(cache=True, nogil=True)
def _next(state):
    state = state + _GOLDEN
    return state, mix64(state)


@njit(cache=True, nogil=True)
def bounded_draw(state, m):
    """A uniform integer in [0, m) (m >= 1, uint64) without modulo bias; returns (state, value)."""
    if m <= _U32 + np.uint64(1):
        # Lemire's multiply-shift on the high 32 bits, with rejection of the biased low part
        threshold = (np.uint64(1 << 32) - m) % m
        while True:
            state, x = _next(state)
            prod = (x >> np.uint64(32)) * m
            if (prod & _U32) >= threshold:
                return state, prod >> np.uint64(32)
    threshold = (np.uint64(0) - m) % m
    while True:
        state, x = _next(state)
        if x >= threshold:
            return state, x % m


@njit(cache=True, nogil=True)
def fisher_yates_table(out, key):
    """Fill ``out`` (unsigned ints, (m,)) with a uniform permutation of [0, m)."""
    m = out.shape[0]
    for i in range(m):
        out[i] = i
    state = stream_start(key, np.uint64(0))
    for i in range(m - 1, 0, -1):
        state, j = bounded_draw(state, np.uint64(i + 1))
        t = out[i]
        out[i] = out[j]
        out[j] = t


@njit(cache=True, nogil=True)
def shuffle_inplace(a, key, counter):
    """Fisher-Yates of ``a`` ((m,), any dtype) with the stream (key, counter)."""
    state = stream_start(key, counter)
    for i in range(a.shape[0] - 1, 0, -1):
        state, j = bounded_draw(state, np.uint64(i + 1))
        t = a[i]
        a[i] = a[j]
        a[j] = t


@njit(cache=True, nogil=True)
def run_heads(ids, out, keys, order, sort_max):
    """Where the runs of consecutive IDs of ``ids`` (int64 (k,)) start: their positions into
    ``out`` and their first IDs into ``keys`` (both int64 (k,)); returns how many, n
    (``np.flatnonzero(np.diff(ids, prepend=ids[0] - 2) != 1)``). The first IDs here spare the
    caller numpy's gather ``ids[heads]``, which lets the GIL go from 500 runs on (an instance step).

    When n <= ``sort_max`` (a group or page step's few dozen runs), ``order`` (int64, at least
    min(k, sort_max) long) gets the runs in the order of their first IDs (``np.argsort(keys[:n])``),
    sorted here by insertion: numpy's argsort lets the GIL go at any size, once more a step. Past
    ``sort_max`` (an instance step's thousands) ``order`` is left as it is."""
    n = 0
    for i in range(ids.shape[0]):
        if i == 0 or ids[i] - ids[i - 1] != 1:
            out[n] = i
            keys[n] = ids[i]
            n += 1
    if n <= sort_max:
        for i in range(n):
            r, v, p = i, keys[i], i - 1
            while p >= 0 and keys[order[p]] > v:
                order[p + 1] = order[p]
                p -= 1
            order[p + 1] = r
    return n


@njit(cache=True, nogil=True)
def batch_orders(out, cuts, key, counters, ids, dealt):
    """The deal orders of consecutive batches in one call: ``out[cuts[i]:cuts[i + 1]]`` (int64) is
    ``cuts[i] + `` a Fisher-Yates of ``arange(cuts[i + 1] - cuts[i])`` with the stream (key,
    ``counters[i]``), as :func:`shuffle_inplace` draws it for one batch; and ``dealt[r] =
    ids[out[r]]`` (int64 (cuts[-1],), or empty for none): the records in delivery order, gathered
    here without the GIL instead of by numpy's fancy index with it."""
    for i in range(counters.shape[0]):
        a, b = cuts[i], cuts[i + 1]
        for r in range(a, b):
            out[r] = r
        shuffle_inplace(out[a:b], key, counters[i])
        if dealt.shape[0] > 0:  # empty: the caller gathers them with their extents
            for r in range(a, b):
                dealt[r] = ids[out[r]]


@njit(cache=True, nogil=True)
def _feistel(x, keys, half, mask):
    left = x >> half
    right = x & mask
    for r in range(keys.shape[0]):
        f = mix64(right ^ keys[r]) & mask
        left, right = right, left ^ f
    return (left << half) | right


@njit(cache=True, nogil=True)
def feistel_range(keys, half, n, p0, out):
    """``out[i] = perm(p0 + i)`` for the keyed bijection ``perm`` of [0, n): a balanced Feistel
    network on 2*half bits (``keys`` uint64 round keys) with cycle walking back into [0, n)."""
    for i in range(out.shape[0]):
        out[i] = feistel_at(p0 + i, keys, half, n)


@njit(cache=True, nogil=True, inline='always')
def feistel_at(p, keys, half, n):
    """``perm(p)`` (int64) of :func:`feistel_range`'s bijection."""
    h = np.uint64(half)
    mask = (np.uint64(1) << h) - np.uint64(1)
    nn = np.uint64(n)
    x = _feistel(np.uint64(p), keys, h, mask)
    while x >= nn:
        x = _feistel(x, keys, h, mask)
    return np.int64(x)


@njit(cache=True, nogil=True)
def locate(units, ufirst, remaining):
    """Walk ``units`` (unit numbers in stream order) until ``remaining`` records are passed.

    Returns (i, within): the record at stream offset ``remaining`` is record ``within`` of unit
    ``units[i]``; i == len(units) when the chunk holds fewer records (``within`` then is what is
    left to skip).
    """
    for i in range(units.shape[0]):
        u = units[i]
        c = ufirst[u + 1] - ufirst[u]
        if remaining < c:
            return i, remaining
        remaining -= c
    return units.shape[0], remaining


@njit(cache=True, nogil=True)
def fill_records(units, ufirst, i, within, out, o):
    """Append records of ``units[i:]`` (from record ``within`` of unit ``units[i]``) to ``out[o:]``
    until it is full or the chunk ends. Returns (i, within, o) after the last record taken."""
    m = out.shape[0]
    while o < m and i < units.shape[0]:
        u = units[i]
        a = ufirst[u] + within
        b = ufirst[u + 1]
        take = min(b - a, m - o)
        for t in range(take):
            out[o + t] = a + t
        o += take
        if a + take == b:
            i += 1
            within = 0
        else:
            within += take
    return i, within, o


_SHIFT = 10  # records per offset block (lirs.index.OFFSET_SHIFT)
_MASK = (1 << _SHIFT) - 1


@njit(cache=True, nogil=True, inline='always')
def _offset(base, src, shift, wide, i):
    """Start of record i of a compact offset table whose ``rel`` value lies at ``src[i - shift]``."""
    b = base[i >> _SHIFT]
    if b >= 0:
        return b + np.int64(src[i - shift])
    return wide[(-b - 1) * (_MASK + 1) + (i & _MASK)]


@njit(cache=True, nogil=True)
def offset_at(base, rel, wide, i):
    """Start of record i in a compact offset table (see lirs.offsets.OffsetTable)."""
    return _offset(base, rel, 0, wide, i)


@njit(cache=True, nogil=True)
def compact_blocks(a, bases, spans, rel):
    """Split int64 ``a`` (m,) into blocks of 1024 (the last may be shorter): per block its smallest
    value (``bases`` int64), largest minus smallest (``spans`` int64), and ``rel`` (uint32 (m,))
    = ``a`` minus the block's smallest (its low 32 bits where a span reaches 2**32)."""
    m = a.shape[0]
    for j in range(bases.shape[0]):
        lo = j << _SHIFT
        hi = min(lo + _MASK + 1, m)
        mn = a[lo]
        mx = a[lo]
        for i in range(lo + 1, hi):
            v = a[i]
            if v < mn:
                mn = v
            if v > mx:
                mx = v
        bases[j] = mn
        spans[j] = mx - mn
        for i in range(lo, hi):
            rel[i] = np.uint32((a[i] - mn) & 0xFFFFFFFF)


@njit(cache=True, nogil=True)
def offsets_range(base, rel, wide, a, out):
    """Starts of records a, a+1, ... of a compact offset table into ``out`` (int64 (m,))."""
    for j in range(out.shape[0]):
        out[j] = _offset(base, rel, 0, wide, a + j)


@njit(cache=True, nogil=True)
def units_variable(base, rel, wide, file_starts, unit_bytes, out):
    """First record of every unit of a variable-length format: records whose start lies in the same
    aligned span of ``unit_bytes`` of one file. Writes up to len(out) entries, returns the count
    (call with an empty ``out`` to count)."""
    c = 0
    cap = out.shape[0]
    for f in range(file_starts.shape[0] - 1):
        prev = -1
        for i in range(file_starts[f], file_starts[f + 1]):
            k = offset_at(base, rel, wide, i) // unit_bytes
            if k != prev:
                if c < cap:
                    out[c] = i
                c += 1
                prev = k
    return c


@njit(cache=True, nogil=True)
def units_fixed(file_starts, header_sizes, record_size, unit_bytes, out):
    """:func:`units_variable` for fixed-size records (record i of file f starts at
    ``header_sizes[f] + i * record_size``): one step per span, not per record."""
    c = 0
    cap = out.shape[0]
    for f in range(file_starts.shape[0] - 1):
        cnt = file_starts[f + 1] - file_starts[f]
        if cnt == 0:
            continue
        h = header_sizes[f]
        k0 = h // unit_bytes
        k1 = (h + (cnt - 1) * record_size) // unit_bytes
        for k in range(k0, k1 + 1):
            lo = k * unit_bytes - h
            i = 0 if lo <= 0 else (lo + record_size - 1) // record_size
            if i < cnt and (h + i * record_size) // unit_bytes == k:
                if c < cap:
                    out[c] = file_starts[f] + i
                c += 1
    return c


@njit(cache=True, nogil=True, inline='always')
def _run_stop(heads, order, t, k):
    """End (exclusive, in ``ids``) of run ``order[t]``."""
    r = order[t]
    return k if r == heads.shape[0] - 1 else heads[r + 1]


@njit(cache=True, nogil=True, inline='always')
def _cluster(ids, heads, order, t, nrel, gap, span):
    """Runs ``order[t:t1]`` whose offsets one read of ``rel[lo:hi]`` covers (a run needs the start
    of the record after it too): the next ones while they begin within ``gap`` records of the
    span so far and keep it within ``span`` records (a longer run alone is taken whole).
    Returns (t1, lo, hi)."""
    k = ids.shape[0]
    lo = ids[heads[order[t]]]
    hi = min(ids[_run_stop(heads, order, t, k) - 1] + 2, nrel)
    t1 = t + 1
    while t1 < order.shape[0]:
        b = min(ids[_run_stop(heads, order, t1, k) - 1] + 2, nrel)
        if ids[heads[order[t1]]] > hi + gap or b - lo > span:
            break
        hi = max(hi, b)
        t1 += 1
    return t1, lo, hi


@njit(cache=True, nogil=True, inline='always')
def _pread_rel(fn_pread, fn_errno, fd, rel_off, lo, hi, dst, pos):
    """Read ``rel[lo:hi]`` (uint32) from ``fd`` at byte ``rel_off`` into ``dst[pos:]``: 0, an
    errno, or -1 when the file ends first."""
    want = (hi - lo) * 4
    done = 0
    addr = dst.ctypes.data + pos * 4
    while done < want:
        r = call_pread(fn_pread, fd, addr + done, want - done, rel_off + lo * 4 + done)
        if r < 0:
            en = call_errno(fn_errno)
            if en == EINTR:
                continue
            return np.int64(en)
        if r == 0:
            return np.int64(-1)
        done += r
    return np.int64(0)


@njit(cache=True, nogil=True, inline='always')
def _runs_extents(ids, heads, order, src, shifts, base, wide, file_starts, data_ends, header_sizes, record_size,
                  block, ext_file, ext_off, ext_nb, rec_ext, rec_pos, rec_len, e, cur_f, cur_end):
    """The records of runs ``order`` into the extents, run t's offsets looked up in ``src`` from
    record ``shifts[t]`` on (see :func:`_offset`); returns (e, cur_f, cur_end)."""
    k = ids.shape[0]
    for t in range(order.shape[0]):
        h = heads[order[t]]
        shift = shifts[t]
        rid = ids[h]
        lo = 0
        hi = file_starts.shape[0] - 2
        while lo < hi:  # last file whose first record <= rid
            mid = (lo + hi + 1) // 2
            if file_starts[mid] <= rid:
                lo = mid
            else:
                hi = mid - 1
        f = lo
        for j in range(h, _run_stop(heads, order, t, k)):
            rid = ids[j]
            while file_starts[f + 1] <= rid:  # a run may cross into the next (non-empty) file
                f += 1
            if record_size > 0:
                a0 = header_sizes[f] + (rid - file_starts[f]) * record_size
                b0 = a0 + record_size
            else:
                a0 = _offset(base, src, shift, wide, rid)
                b0 = _offset(base, src, shift, wide, rid + 1) if rid + 1 < file_starts[f + 1] else data_ends[f]
            a = a0 - a0 % block
            b = b0 + (block - b0 % block) % block
            if f != cur_f or a > cur_end:
                e += 1
                ext_file[e] = f
                ext_off[e] = a
                cur_f = f
                cur_end = b
            elif b > cur_end:
                cur_end = b
            ext_nb[e] = cur_end - ext_off[e]
            rec_ext[j] = e
            rec_pos[j] = a0 - ext_off[e]
            rec_len[j] = b0 - a0
    return e, cur_f, cur_end


@njit(cache=True, nogil=True)
def extents(ids, heads, order, base, rel, wide, fn_pread, fn_errno, fd, rel_off, gap, span, file_starts, data_ends,
            header_sizes, record_size, block, ext_file, ext_off, ext_nb, rec_ext, rec_pos, rec_len, state, src):
    """Aligned, coalesced read extents covering the records ``ids`` (int64 (k,), distinct, k >= 1).

    Record IDs follow file order (file by file, offsets increasing), so records are visited in
    ID order: runs of consecutive IDs (a page or group unit) are visited as runs, not one by one.
    ``heads`` (int64 (nruns,)) are the runs' starts and ``order`` (int64 (m,)) the runs to visit,
    sorted by first ID — sorted by the caller with numpy, because numba's sort costs seconds of
    compilation on every fresh machine. ``order`` may be a slice of the sorted runs: a caller that
    visits them in pieces (releasing the index pages between calls) passes the same outputs and
    ``state`` to every call, and gets the extents of one call over all the runs.
    ``state`` int64 (4,): the last extent, its file and its end, updated in place ((-1, -1, -1)
    before the first piece), then an error: 0, the errno of a failed offset read, -1 when the
    index file ended early, -2 when ``src`` is too small (the extents are then not filled).
    Each record covers [start rounded down, end rounded up) to ``block``; overlapping or touching
    spans of one file merge into one extent. Offsets (``base``, ``rel``, ``wide``: a compact offset
    table) are empty for fixed formats (``record_size`` > 0), else ``record_size`` is 0. The ``rel``
    values the runs need are first gathered, a few runs' worth per piece (:func:`_cluster`, by
    ``gap`` and ``span``): with ``fd`` >= 0 not from ``rel`` (a memory map) but with pread (libc's
    at address ``fn_pread``, ``errno`` through ``fn_errno``) from ``fd`` at byte ``rel_off``
    (``rel``'s position in that file), so no page of the table is mapped.
    Fills the extent arrays (capacity >= k) and, per record (in the order of ``ids``) of the visited
    runs, the extent holding it, its position there and its length. Returns the number of extents so far.
    ``src`` uint32: where the offsets are gathered, room for every run's records and the one after
    it and the gaps merged reads take in, at most the table once and a record a run (the reads are
    disjoint); the caller's, reused from step to step (written from its start, its pages stay).
    """
    nrel = rel.shape[0]
    m = order.shape[0]
    shifts = np.empty(m, np.int64)  # run t's offsets are src[rid - shifts[t]]
    pos = 0
    t = 0
    while t < m:
        if record_size > 0:
            shifts[t] = 0
            t += 1
            continue
        t1, lo, hi = _cluster(ids, heads, order, t, nrel, gap, span)
        if pos + hi - lo > src.shape[0]:  # never (the caller's bound): not a write past its end
            state[3] = -2
            return state[0] + 1
        if fd >= 0:
            err = _pread_rel(fn_pread, fn_errno, fd, rel_off, lo, hi, src, pos)
            if err != 0:
                state[3] = err
                return state[0] + 1
        else:
            for i in range(hi - lo):
                src[pos + i] = rel[lo + i]
        for tt in range(t, t1):
            shifts[tt] = lo - pos
        pos += hi - lo
        t = t1
    e, cur_f, cur_end = _runs_extents(ids, heads, order, src, shifts, base, wide, file_starts, data_ends,
                                      header_sizes, record_size, block, ext_file, ext_off, ext_nb, rec_ext, rec_pos,
                                      rec_len, state[0], state[1], state[2])
    state[0] = e
    state[1] = cur_f
    state[2] = cur_end
    return e + 1


@njit(cache=True, nogil=True)
def gather_records(order, ids, rec_extent, rec_pos, rec_len):
    """A read step's record arrays put in delivery order in one pass without the GIL: ``ids[order]``
    int64, ``rec_extent[order]`` int32, ``rec_pos[order]`` and ``rec_len[order]`` int64 (all (k,);
    numpy's four gathers let the GIL go and took it back four times). ``order`` int64 (k,) is a
    permutation of ``range(k)`` made by the planner: unchecked, as in the other planning kernels."""
    k = order.shape[0]
    i2, x2 = np.empty(k, ids.dtype), np.empty(k, rec_extent.dtype)
    p2, l2 = np.empty(k, rec_pos.dtype), np.empty(k, rec_len.dtype)
    for i in range(k):
        j = order[i]
        i2[i] = ids[j]
        x2[i] = rec_extent[j]
        p2[i] = rec_pos[j]
        l2[i] = rec_len[j]
    return i2, x2, p2, l2


@njit(cache=True, nogil=True)
def check_offsets(base, rel, wide, file_starts, data_ends):
    """The first record whose start in a compact offset table is impossible (before the previous
    record's of its file, or at or past its file's data end; a wide block pointing outside
    ``wide``), or -1 when every start is plausible: what a flipped word of a sidecar turns into
    before it reaches a read."""
    nw = wide.shape[0]
    for f in range(file_starts.shape[0] - 1):
        prev = np.int64(-1)
        for i in range(file_starts[f], file_starts[f + 1]):
            b = base[i >> _SHIFT]
            if b >= 0:
                o = b + np.int64(rel[i])
            else:
                w = (-b - 1) * (_MASK + 1) + (i & _MASK)
                if w >= nw:
                    return i
                o = wide[w]
            if o <= prev or o >= data_ends[f]:
                return i
            prev = o
    return np.int64(-1)
