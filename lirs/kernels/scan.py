"""Scanning kernels for `lirs index`: record starts, labels and feature-index range of text formats,
and the validating LIBSVM scan (every token checked, no value converted but the label)."""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.cpython.unsafe.numbers import trailing_zeros

from .libsvm import digit_run, parse_float
from .numbers import HI4, LO4, M16, M32, SIXES, THREES, load_u64
from .plan import offset_at

# libc's memchr is SIMD-tuned (several GB/s on this machine class, 5-8x a byte loop in numba).
# Declared by symbol name, so kernels that call it can still be cached; NULL comes back as 0.
memchr = types.ExternalFunction("memchr", types.uintp(types.uintp, types.intc, types.uintp))

# libsvm_validate's verdict on each record (the ``needs`` output)
CHECKED = 0        # every token matched the fast grammar; label exact
LABEL_FLOAT = 1    # the rest of the line is checked; Python's float() must parse the label token
LINE_PYTHON = 2    # something outside the fast grammar: Python must check the whole line



@njit(cache=True, nogil=True)
def _is_ws(c):
    # bytes.split() whitespace other than the newline, which ends a line
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


_L7F = np.uint64(0x7F7F7F7F7F7F7F7F)
_H80 = np.uint64(0x8080808080808080)
_5F = np.uint64(0x5F5F5F5F5F5F5F5F)
_46 = np.uint64(0x4646464646464646)
_50 = np.uint64(0x5050505050505050)
_2E = np.uint64(0x2E2E2E2E2E2E2E2E)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, nogil=True)
def _le20(x):
    """High bit of each byte of u64 ``x`` set exactly when the byte is <= 0x20 (space, controls)."""
    return ~(((x & _L7F) + _5F) | x) & _H80


@njit(cache=True, nogil=True)
def _nondigit(x):
    """High bit of each byte of u64 ``x`` set exactly when the byte is not an ASCII digit."""
    t = x & _L7F
    return ((t + _46) | ~(t + _50) | x) & _H80


@njit(cache=True, nogil=True)
def _zero(x):
    """High bit of each byte of u64 ``x`` set exactly when the byte is 0."""
    return ~(((x & _L7F) + _L7F) | x) & _H80


@njit(cache=True, nogil=True)
def _digit_len(buf, addr, p, hi):
    """Length of the run of ASCII digits at buf[p:hi], eight bytes at a time (SWAR) while the load
    stays inside ``buf`` (``addr`` is the address of buf[0])."""
    m = buf.shape[0]
    n = 0
    while p < hi:
        if p + 8 <= m:
            x = load_u64(addr + np.uint64(p))
            bad = ((x & HI4) ^ THREES) | (((x + SIXES) & HI4) ^ THREES)
            k = 8 if bad == 0 else np.int64(trailing_zeros(bad)) >> 3
            if k > hi - p:
                k = hi - p
            n += k
            p += k
            if k < 8:
                return n
        else:
            c = buf[p]
            if c < 48 or c > 57:
                return n
            n += 1
            p += 1
    return n


@njit(cache=True, nogil=True)
def find_byte(buf, lo, hi, value):
    """First position of ``value`` in buf[lo:hi], or -1 (memchr)."""
    if hi <= lo:
        return -1
    ptr = np.int64(buf.ctypes.data)
    r = np.int64(memchr(ptr + lo, value, hi - lo))
    return -1 if r == 0 else r - ptr


@njit(cache=True, nogil=True)
def rfind_byte(buf, lo, hi, value):
    """Last position of ``value`` in buf[lo:hi], or -1."""
    for i in range(hi - 1, lo - 1, -1):
        if buf[i] == value:
            return i
    return -1


@njit(cache=True, nogil=True)
def libsvm_validate(buf, lo, hi, base, starts, labels, needs, pow10, out_stats):
    """Validate every LIBSVM line of buf[lo:hi] (file offset of buf[0] is ``base``) and find records.

    The fast grammar, a subset of what ``sklearn.datasets.load_svmlight_file`` accepts, is checked
    byte by byte without converting any value: lines split at '\\n'; a comment from '#'; tokens
    split at space \\t \\v \\f \\r; a label; an optional first token ``qid*:*``; then
    ``[+-]?D+ ':' [+-]?(D+[.D*]|.D+)([eE][+-]?D+)?`` pairs (at most 18 index digits) with strictly
    increasing, non-negative indices. A line outside it is not an error here: it is flagged for
    Python, which checks it with sklearn's own ``int()``/``float()`` rules.

    Outputs, for k < count (capacity: one per line of the region, plus one):
    ``starts[k]`` int64, file offset of record k's line; ``labels[k]`` float64, exact when
    ``needs[k] == CHECKED``; ``needs[k]`` uint8, CHECKED / LABEL_FLOAT / LINE_PYTHON.
    ``out_stats`` int64 (4,): running [min index, max index, unused, qid lines], over CHECKED and
    LABEL_FLOAT lines only (Python adds the LINE_PYTHON ones). ``pow10`` float64 1e0..1e22.
    Blank and comment-only lines are not records. Returns (count, lines ended by '\\n').
    """
    ptr = np.int64(buf.ctypes.data)
    addr = buf.ctypes.data
    m = buf.shape[0]
    k = 0
    nl = 0
    i = lo
    min_idx = out_stats[0]
    max_idx = out_stats[1]
    nqid = out_stats[3]
    while i < hi:
        r0 = np.int64(memchr(ptr + i, 10, hi - i))
        if r0 == 0:
            j = hi
        else:
            j = r0 - ptr
            nl += 1
        p = i
        while p < j and _is_ws(buf[p]):
            p += 1
        if p >= j or buf[p] == 35:  # blank or comment-only: not a record
            i = j + 1
            continue
        starts[k] = base + i
        t = p
        while p < j and not _is_ws(buf[p]) and buf[p] != 35:
            p += 1
        v, ok = parse_float(buf, t, p, pow10)
        labels[k] = v
        state = CHECKED if ok else LABEL_FLOAT
        prev = np.int64(-1)
        lmin = np.int64(-1)
        first = True
        qid = False
        while True:
            while p < j and _is_ws(buf[p]):
                p += 1
            if p >= j or buf[p] == 35:
                break
            c = buf[p]
            if first and c == 113 and p + 3 <= j and buf[p + 1] == 105 and buf[p + 2] == 100:
                # sklearn: a first feature token starting with b"qid" needs a ':'; its value is
                # not read. A NUL inside would stop strchr from seeing a later '#': Python decides.
                colon = False
                while p < j and not _is_ws(buf[p]) and buf[p] != 35:
                    colon |= buf[p] == 58
                    if buf[p] == 0:
                        colon = False
                        break
                    p += 1
                if not colon:
                    state = LINE_PYTHON
                    break
                qid = True
                first = False
                continue
            first = False
            # Fast path, eight bytes at a time: a token 'D{1,8}:V' with V digits and at most one '.'
            # (at least one digit, at most 8 bytes), then one space. The next token's start depends
            # only on the bytes <= 0x20 (a short chain); the checks run beside it. Anything else
            # (signs, exponents, long tokens, tabs, runs of spaces) takes the byte path below.
            while p + 24 <= m:
                x = load_u64(addr + np.uint64(p))
                y = load_u64(addr + np.uint64(p + 8))
                lx = _le20(x)
                ly = _le20(y)
                e = (np.int64(trailing_zeros(lx)) if lx != 0 else 64 + np.int64(trailing_zeros(ly))) >> 3
                cc = np.int64(trailing_zeros(_nondigit(x))) >> 3
                z = ((x & LO4) << np.uint64(64 - 8 * cc)) if cc > 0 else np.uint64(0)
                z = (z * np.uint64(2561)) >> np.uint64(8)
                z = ((z & M16) * np.uint64(6553601)) >> np.uint64(16)
                idx = np.int64(((z & M32) * np.uint64(42949672960001)) >> np.uint64(32))
                w = load_u64(addr + np.uint64(p + cc + 1))
                vl = e - cc - 1
                vmask = _ALL if vl >= 8 else (np.uint64(1) << np.uint64(8 * vl if vl > 0 else 0)) - np.uint64(1)
                ndw = _nondigit(w) & vmask
                dw = _zero(w ^ _2E) & vmask
                # no byte <= 0x20 in the 16 loaded: the token goes on past them (e is 16 then, not its end)
                ok = (lx != 0) | (ly != 0)
                ok &= (cc >= 1) & (vl >= 1) & (vl <= 8) & (p + e <= j) & (buf[p + cc] == 58) & (idx > prev)
                ok &= ((ndw & ~dw) == 0) & ((dw & (dw - np.uint64(1))) == 0) & ((dw == 0) | (vl >= 2))
                if not ok:
                    break
                lmin = idx if prev < 0 else lmin
                prev = idx
                p += e
                if p >= j or buf[p] != 32:
                    break
                p += 1
            while p < j and _is_ws(buf[p]):
                p += 1
            if p >= j or buf[p] == 35:
                break
            c = buf[p]
            neg = False
            if c == 43 or c == 45:
                neg = c == 45
                p += 1
            idx, nd = digit_run(buf, addr, p, j)
            p += nd
            if nd == 0 or nd > 18 or p >= j or buf[p] != 58 or (neg and idx != 0) or idx <= prev:
                state = LINE_PYTHON
                break
            if prev < 0:
                lmin = idx
            prev = idx
            p += 1
            if p < j and (buf[p] == 43 or buf[p] == 45):
                p += 1
            nd = _digit_len(buf, addr, p, j)
            p += nd
            if p < j and buf[p] == 46:
                p += 1
                nf = _digit_len(buf, addr, p, j)
                p += nf
                nd += nf
            if nd == 0:
                state = LINE_PYTHON
                break
            if p < j and (buf[p] == 101 or buf[p] == 69):
                p += 1
                if p < j and (buf[p] == 43 or buf[p] == 45):
                    p += 1
                ne = _digit_len(buf, addr, p, j)
                if ne == 0:
                    state = LINE_PYTHON
                    break
                p += ne
            if p < j and not _is_ws(buf[p]) and buf[p] != 35:
                state = LINE_PYTHON
                break
        needs[k] = state
        if state != LINE_PYTHON:
            if prev >= 0:
                if lmin < min_idx:
                    min_idx = lmin
                if prev > max_idx:
                    max_idx = prev
            if qid:
                nqid += 1
        k += 1
        i = j + 1
    out_stats[0] = min_idx
    out_stats[1] = max_idx
    out_stats[3] = nqid
    return k, nl


@njit(cache=True, nogil=True)
def has_byte(buf, lo, hi, value):
    """True if ``value`` occurs in buf[lo:hi] (memchr)."""
    if hi <= lo:
        return False
    p = buf.ctypes.data
    return np.int64(memchr(p + lo, value, hi - lo)) != 0


@njit(cache=True, nogil=True)
def count_byte(buf, lo, hi, value):
    """Occurrences of ``value`` in buf[lo:hi] (memchr hops)."""
    base = np.int64(buf.ctypes.data)
    p = base + lo
    end = base + hi
    k = 0
    while p < end:
        r = np.int64(memchr(p, value, end - p))
        if r == 0:
            break
        k += 1
        p = r + 1
    return k


@njit(cache=True, nogil=True)
def lines_scan(buf, lo, hi, base, starts):
    """Every line of buf[lo:hi] is a record: fill starts (int64 file offsets); return count."""
    if hi <= lo:
        return 0
    ptr = np.int64(buf.ctypes.data)
    starts[0] = base + lo
    k = 1
    p = ptr + lo
    end = ptr + hi
    while p < end:
        r = np.int64(memchr(p, 10, end - p))
        if r == 0 or r + 1 >= end:
            break
        starts[k] = base + (r + 1 - ptr)
        k += 1
        p = r + 1
    return k


@njit(cache=True, nogil=True, inline="always")
def _span(s, e, lo, hi, total, small, straddle):
    """The statistics of span_stats with one more record, [s, e)."""
    size = e - s
    if size < lo:
        lo = size
    if size > hi:
        hi = size
    total += size
    if size < 4096:
        small += 1
    if size > 0 and (s >> 12) != ((e - 1) >> 12):
        straddle += 1
    return lo, hi, total, small, straddle


@njit(cache=True, nogil=True)
def span_stats(offsets, data_end, out):
    """Accumulate record-size statistics of consecutive records of one file.

    ``offsets`` int64 (m,), record m-1 ends at ``data_end``. ``out`` float64 (5,), updated in place:
    [min_size, max_size, sum_size, count_under_4k, count_straddling_4k].
    """
    m = offsets.shape[0]
    lo, hi, total, small, straddle = out[0], out[1], out[2], out[3], out[4]
    # in locals: stores into ``out`` every record would keep them in memory (6x slower)
    for i in range(m):
        e = offsets[i + 1] if i + 1 < m else data_end
        lo, hi, total, small, straddle = _span(offsets[i], e, lo, hi, total, small, straddle)
    out[0], out[1], out[2], out[3], out[4] = lo, hi, total, small, straddle


@njit(cache=True, nogil=True)
def span_stats_table(base, rel, wide, a, b, out):
    """:func:`span_stats` of records a .. b-2 of a compact offset table (each ends where the next
    starts; record b-1, whose end is not known here, is left out)."""
    lo, hi, total, small, straddle = out[0], out[1], out[2], out[3], out[4]
    if b - a >= 2:
        s = offset_at(base, rel, wide, a)
        for i in range(a + 1, b):
            e = offset_at(base, rel, wide, i)
            lo, hi, total, small, straddle = _span(s, e, lo, hi, total, small, straddle)
            s = e
    out[0], out[1], out[2], out[3], out[4] = lo, hi, total, small, straddle


@njit(cache=True, nogil=True)
def codes_seen(codes, seen):
    """Mark in ``seen`` (bool (k,)) every code of ``codes`` (unsigned ints (m,))."""
    for i in range(codes.shape[0]):
        seen[codes[i]] = True


@njit(cache=True, nogil=True)
def label_codes(values, labels, out):
    """The code of each label: the position in ``values`` (float64 (k,), C-contiguous, in
    :func:`lirs.labelcodes.value_order`; every label is one of them) of its bits, so that -0.0 and
    0.0, NaNs of either sign, keep codes of their own. ``labels`` float64 (m,) C-contiguous,
    ``out`` unsigned ints (m,)."""
    n = k = values.shape[0]
    vb, lb = values.view(np.uint64), labels.view(np.uint64)
    while k > 0 and values[k - 1] != values[k - 1]:
        k -= 1  # NaNs: compared apart, they sort after every number
    for i in range(labels.shape[0]):
        x = labels[i]
        a = 0
        if x != x:
            a = k
        elif k <= 16:  # few values (class labels): count those below, without a branch to mispredict
            for c in range(k):
                a += values[c] < x
        else:
            b = k
            while a < b:
                c = (a + b) >> 1
                if values[c] < x:
                    a = c + 1
                else:
                    b = c
        # values equal to x (NaNs when x is one) follow the first, told apart by their bits; a
        # label whose bits are not there (not one of the values) gets np.searchsorted's code
        j = a
        while j + 1 < n and vb[j] != lb[i] and (values[j + 1] == x or x != x):
            j += 1
        out[i] = j if j < n and vb[j] == lb[i] else a
