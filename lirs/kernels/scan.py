"""Scanning kernels for `lirs index`: record starts, labels and feature-index range of text formats."""
from __future__ import annotations

import numpy as np
from numba import njit, types

# libc's memchr is SIMD-tuned (several GB/s on this machine class, 5-8x a byte loop in numba).
# Declared by symbol name, so kernels that call it can still be cached; NULL comes back as 0.
memchr = types.ExternalFunction("memchr", types.uintp(types.uintp, types.intc, types.uintp))

# error kinds returned by libsvm_scan
ERR_NONE = 0
ERR_INDEX = 1      # feature token without a valid INDEX before ':'
ERR_NUL = 2        # a NUL byte: binary data, not text
ERR_NEGATIVE = 3   # negative feature index

_POW10 = np.array([1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                   1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22])


@njit(cache=True, nogil=True, inline="always")
def _is_ws(c):
    # bytes.split() whitespace other than the newline, which ends a line
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True)
def parse_float_exact(buf, p, q, pow10):
    """Parse buf[p:q] as a decimal float when the result is provably the correctly rounded one.

    Clinger's fast path: at most 15 significant digits and a power of ten in [-22, 22] make
    ``m * 10**e`` (or ``m / 10**-e``) a single correctly rounded IEEE operation, equal to Python's
    ``float()``. Returns (value, ok); ok == False means "let Python parse it".
    """
    if p >= q:
        return 0.0, False
    neg = False
    c = buf[p]
    if c == 43 or c == 45:
        neg = c == 45
        p += 1
    mant = 0
    sig = 0
    exp10 = 0
    digits = 0
    while p < q and 48 <= buf[p] <= 57:
        d = buf[p] - 48
        if sig > 0 or d != 0:
            sig += 1
            if sig > 15:
                return 0.0, False
            mant = mant * 10 + d
        digits += 1
        p += 1
    if p < q and buf[p] == 46:
        p += 1
        while p < q and 48 <= buf[p] <= 57:
            d = buf[p] - 48
            if sig > 0 or d != 0:
                sig += 1
                if sig > 15:
                    return 0.0, False
                mant = mant * 10 + d
            exp10 -= 1
            digits += 1
            p += 1
    if digits == 0:
        return 0.0, False
    if p < q and (buf[p] == 101 or buf[p] == 69):
        p += 1
        eneg = False
        if p < q and (buf[p] == 43 or buf[p] == 45):
            eneg = buf[p] == 45
            p += 1
        e = 0
        nd = 0
        while p < q and 48 <= buf[p] <= 57:
            if e < 10000:
                e = e * 10 + (buf[p] - 48)
            nd += 1
            p += 1
        if nd == 0:
            return 0.0, False
        exp10 += -e if eneg else e
    if p != q:
        return 0.0, False
    if mant == 0:
        return (-0.0 if neg else 0.0), True
    if exp10 < -22 or exp10 > 22:
        return 0.0, False
    v = float(mant)
    if exp10 >= 0:
        v = v * pow10[exp10]
    else:
        v = v / pow10[-exp10]
    return (-v if neg else v), True


@njit(cache=True, nogil=True)
def find_byte(buf, lo, hi, value):
    """First position of ``value`` in buf[lo:hi], or -1."""
    for i in range(lo, hi):
        if buf[i] == value:
            return i
    return -1


@njit(cache=True, nogil=True)
def rfind_byte(buf, lo, hi, value):
    """Last position of ``value`` in buf[lo:hi], or -1."""
    for i in range(hi - 1, lo - 1, -1):
        if buf[i] == value:
            return i
    return -1


@njit(cache=True, nogil=True)
def libsvm_scan(buf, lo, hi, base, starts, labels, needs_python, pow10, out_stats):
    """Scan complete LIBSVM lines in buf[lo:hi] (file offset of buf[0] is ``base``).

    Fills ``starts[k]`` (int64 file offset of each record's line), ``labels[k]`` (float64, exact when
    ``needs_python[k] == 0``; otherwise Python must parse the label token) for k < count.
    ``out_stats`` (int64, 4): running [min_index, max_index, nnz, qid_records], updated in place.
    Returns (count, err_kind, err_pos_in_buf). Comment-only and blank lines are not records.
    """
    k = 0
    i = lo
    min_idx = out_stats[0]
    max_idx = out_stats[1]
    nnz = out_stats[2]
    nqid = out_stats[3]
    while i < hi:
        ls = i
        p = i
        while p < hi and _is_ws(buf[p]):
            p += 1
        if p >= hi or buf[p] == 10 or buf[p] == 35:
            # blank or comment-only line: skip it whole
            while p < hi and buf[p] != 10:
                if buf[p] == 0:
                    return k, ERR_NUL, p
                p += 1
            i = p + 1
            continue
        starts[k] = base + ls
        q = p
        while q < hi and not _is_ws(buf[q]) and buf[q] != 10 and buf[q] != 35:
            if buf[q] == 0:
                return k, ERR_NUL, q
            q += 1
        v, ok = parse_float_exact(buf, p, q, pow10)
        labels[k] = v
        needs_python[k] = 0 if ok else 1
        r = q
        first = True
        while True:
            while r < hi and _is_ws(buf[r]):
                r += 1
            if r >= hi or buf[r] == 10 or buf[r] == 35:
                break
            t = r
            # sklearn treats a leading "qid:" token specially
            if first and r + 4 <= hi and buf[r] == 113 and buf[r + 1] == 105 and buf[r + 2] == 100 \
                    and buf[r + 3] == 58:
                nqid += 1
                r += 4
                while r < hi and not _is_ws(buf[r]) and buf[r] != 10 and buf[r] != 35:
                    if buf[r] == 0:
                        return k, ERR_NUL, r
                    r += 1
                first = False
                continue
            first = False
            neg = False
            if buf[r] == 43 or buf[r] == 45:
                neg = buf[r] == 45
                r += 1
            idx = 0
            nd = 0
            while r < hi and 48 <= buf[r] <= 57:
                idx = idx * 10 + (buf[r] - 48)
                nd += 1
                r += 1
            if nd == 0 or r >= hi or buf[r] != 58:
                if r < hi and buf[r] == 0:
                    return k, ERR_NUL, r
                return k, ERR_INDEX, t
            if neg and idx != 0:
                return k, ERR_NEGATIVE, t
            if idx < min_idx:
                min_idx = idx
            if idx > max_idx:
                max_idx = idx
            nnz += 1
            r += 1
            while r < hi and not _is_ws(buf[r]) and buf[r] != 10 and buf[r] != 35:
                if buf[r] == 0:
                    return k, ERR_NUL, r
                r += 1
        while r < hi and buf[r] != 10:
            if buf[r] == 0:
                return k, ERR_NUL, r
            r += 1
        k += 1
        i = r + 1
    out_stats[0] = min_idx
    out_stats[1] = max_idx
    out_stats[2] = nnz
    out_stats[3] = nqid
    return k, ERR_NONE, -1


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


@njit(cache=True, nogil=True)
def libsvm_scan_fast(buf, lo, hi, base, starts, labels, needs_python, pow10, out_stats):
    """Like :func:`libsvm_scan` for regions known to hold no '#' and no NUL byte.

    Lines are found with memchr; only the label and the first and last feature tokens of each line
    are parsed (a valid line has sorted indices, so they bound the index range). Every token is
    validated later by the decoder. ``out_stats[2]`` (nnz) is not updated. Returns (count, err, pos).
    """
    ptr = np.int64(buf.ctypes.data)
    k = 0
    i = lo
    min_idx = out_stats[0]
    max_idx = out_stats[1]
    nqid = out_stats[3]
    while i < hi:
        ls = i
        r0 = np.int64(memchr(ptr + i, 10, hi - i))
        j = hi if r0 == 0 else r0 - ptr
        e = j
        while e > i and _is_ws(buf[e - 1]):
            e -= 1
        p = i
        while p < e and _is_ws(buf[p]):
            p += 1
        if p >= e:
            i = j + 1
            continue
        starts[k] = base + ls
        q = p
        while q < e and not _is_ws(buf[q]):
            q += 1
        v, ok = parse_float_exact(buf, p, q, pow10)
        labels[k] = v
        needs_python[k] = 0 if ok else 1
        k += 1
        r = q
        while r < e and _is_ws(buf[r]):
            r += 1
        if r < e and r + 4 <= e and buf[r] == 113 and buf[r + 1] == 105 and buf[r + 2] == 100 \
                and buf[r + 3] == 58:
            nqid += 1
            while r < e and not _is_ws(buf[r]):
                r += 1
            while r < e and _is_ws(buf[r]):
                r += 1
        if r < e:
            t = e
            while t > r and not _is_ws(buf[t - 1]):
                t -= 1
            for tok in (r, t):
                s = tok
                neg = False
                if buf[s] == 43 or buf[s] == 45:
                    neg = buf[s] == 45
                    s += 1
                idx = 0
                nd = 0
                while s < e and 48 <= buf[s] <= 57:
                    idx = idx * 10 + (buf[s] - 48)
                    nd += 1
                    s += 1
                if nd == 0 or s >= e or buf[s] != 58:
                    return k - 1, ERR_INDEX, tok
                if neg and idx != 0:
                    return k - 1, ERR_NEGATIVE, tok
                if idx < min_idx:
                    min_idx = idx
                if idx > max_idx:
                    max_idx = idx
        i = j + 1
    out_stats[0] = min_idx
    out_stats[1] = max_idx
    out_stats[3] = nqid
    return k, ERR_NONE, -1


@njit(cache=True, nogil=True)
def span_stats(offsets, data_end, out):
    """Accumulate record-size statistics of consecutive records of one file.

    ``offsets`` int64 (m,), record m-1 ends at ``data_end``. ``out`` float64 (5,), updated in place:
    [min_size, max_size, sum_size, count_under_4k, count_straddling_4k].
    """
    m = offsets.shape[0]
    for i in range(m):
        s = offsets[i]
        e = offsets[i + 1] if i + 1 < m else data_end
        size = e - s
        if size < out[0]:
            out[0] = size
        if size > out[1]:
            out[1] = size
        out[2] += size
        if size < 4096:
            out[3] += 1
        if size > 0 and (s >> 12) != ((e - 1) >> 12):
            out[4] += 1


