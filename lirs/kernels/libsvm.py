"""LIBSVM decoding kernels: record spans of text -> CSR arrays, with sklearn's exact semantics.

Two passes over each batch. ``libsvm_count`` finds the one data line of every record and counts
its features; the caller allocates exact-size outputs; ``libsvm_fill`` parses labels, ``qid`` and
``INDEX:VALUE`` pairs into them. The kernels only take the common, provably exact path; anything
else (a record that is not exactly one data line, an odd token, an invalid or unsorted index, a
number Clinger's fast path cannot round exactly) is flagged and handed back to Python, which
parses it with Python's own ``int``/``float`` and raises the precise error. So the fast path is
bit-identical to ``sklearn.datasets.load_svmlight_file`` and the rare cases are too.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils  # noqa: F401 - keeps numba's lowering helpers loaded for the intrinsic
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

# libc's SIMD memchr finds line ends several times faster than a byte loop; declared by symbol
# name so that kernels calling it can still be cached. NULL comes back as 0.
memchr = types.ExternalFunction("memchr", types.uintp(types.uintp, types.intc, types.uintp))

# status codes of a record after a pass
OK = 0
NOT_ONE_DATA_LINE = 1   # zero or several data lines in the span: nnz unknown, Python parses it
NEEDS_PYTHON = 2        # the fill pass met something it does not handle: Python re-parses the record

# a value slot that Python must parse with float(); labels use slot -1 - record
POW10 = np.array([1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                  1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22])

_TWO53 = 1 << 53
_MAX_DIGITS = 18        # int64 holds any 18-digit decimal
_POW10_INT = np.array([10 ** i for i in range(19)], np.int64)

# SWAR constants: eight ASCII bytes tested and converted at once
_HI4 = np.uint64(0xF0F0F0F0F0F0F0F0)
_LO4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_THREES = np.uint64(0x3030303030303030)
_SIXES = np.uint64(0x0606060606060606)
_M16 = np.uint64(0x00FF00FF00FF00FF)
_M32 = np.uint64(0x0000FFFF0000FFFF)


@intrinsic
def _load_u64(typingctx, addr):
    """Unaligned little-endian 8-byte load at integer address ``addr``."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        a = context.cast(builder, args[0], sig.args[0], types.uint64)
        ptr = builder.inttoptr(a, ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return types.uint64(addr), codegen


@njit(cache=True, nogil=True, inline="always")
def _digit_run(buf, base, p, hi):
    """Value and length of the run of ASCII digits at buf[p:hi] (stops at the first other byte).

    Eight bytes at a time (SWAR) while they lie inside ``buf``; a length above 18 means "too long
    for int64 here" (the value is then meaningless). ``base`` is the address of buf[0].
    """
    m = buf.shape[0]
    v = np.int64(0)
    n = 0
    while p < hi:
        if p + 8 <= m:
            x = _load_u64(base + np.uint64(p))
            bad = ((x & _HI4) ^ _THREES) | (((x + _SIXES) & _HI4) ^ _THREES)
            k = 8 if bad == 0 else np.int64(trailing_zeros(bad)) >> 3
            if k > hi - p:
                k = hi - p
            if k == 0:
                return v, n
            z = (x & _LO4) << np.uint64(8 * (8 - k))
            z = (z * np.uint64(2561)) >> np.uint64(8)
            z = ((z & _M16) * np.uint64(6553601)) >> np.uint64(16)
            z = ((z & _M32) * np.uint64(42949672960001)) >> np.uint64(32)
            if n + k <= _MAX_DIGITS:
                v = v * _POW10_INT[k] + np.int64(z)
            n += k
            p += k
            if k < 8 or n > _MAX_DIGITS:
                return v, n
        else:
            d = np.int64(buf[p]) - 48
            if d < 0 or d > 9:
                return v, n
            if n < _MAX_DIGITS:
                v = v * 10 + d
            n += 1
            p += 1
    return v, n


@njit(cache=True, nogil=True, inline="always")
def _is_space(c):
    # bytes.split() whitespace: space, \t \n \v \f \r
    return c == 32 or (9 <= c <= 13)


@njit(cache=True, nogil=True, inline="always")
def _content_end(buf, a, b):
    """End of the non-comment part of line buf[a:b] (no newline inside).

    sklearn cuts at the first '#' found by C ``strchr``, which stops at a NUL byte: a '#' behind a
    NUL is not a comment."""
    for p in range(a, b):
        c = buf[p]
        if c == 35:
            return p
        if c == 0:
            return b
    return b


@njit(cache=True, nogil=True, inline="always")
def _exponent(buf, p, hi):
    """An optional ``[eE][+-]?D+`` at buf[p:hi]: (exponent, ok, end). No exponent: (0, True, p);
    "1e" with no digit: ok False ("1e" is not a number for float())."""
    if p < hi and (buf[p] == 101 or buf[p] == 69):
        q = p + 1
        eneg = False
        if q < hi and (buf[q] == 43 or buf[q] == 45):
            eneg = buf[q] == 45
            q += 1
        e = 0
        ne = 0
        while q < hi:
            d = np.int64(buf[q]) - 48
            if d < 0 or d > 9:
                break
            if e < 100000:
                e = e * 10 + d
            ne += 1
            q += 1
        if ne == 0:
            return 0, False, q
        return (-e if eneg else e), True, q
    return 0, True, p


@njit(cache=True, nogil=True, inline="always")
def _round_exact(mant, exp10, neg, p, pow10):
    """``mant * 10**exp10`` (signed) as (value, exact, p): exact when Clinger's fast path applies."""
    if mant == 0:
        return (-0.0 if neg else 0.0), True, p
    while mant > _TWO53 and mant % 10 == 0:
        mant //= 10
        exp10 += 1
    if mant > _TWO53:
        return 0.0, False, p
    while exp10 > 22 and mant * 10 <= _TWO53:
        # an exact integer times 10**22 is still a single rounding
        mant *= 10
        exp10 -= 1
    if exp10 > 22 or exp10 < -22:
        return 0.0, False, p
    v = float(mant)
    if exp10 >= 0:
        v = v * pow10[exp10]
    else:
        v = v / pow10[-exp10]
    return (-v if neg else v), True, p


@njit(cache=True, nogil=True)
def _scan_number_slow(buf, p, hi, pow10):
    """Parse the longest prefix of buf[p:hi] that follows ``[+-]? (D+ [. D*] | . D+) ([eE] [+-]? D+)?``.

    Returns (value float64, exact bool, end int64). ``exact`` is True when the prefix is a number
    whose value Clinger's fast path rounds exactly as Python's ``float()`` does: the decimal
    mantissa (trailing zeros folded into the exponent) is at most 2**53 and the power of ten is
    within [-22, 22], so one IEEE multiply or divide gives the correctly rounded result.
    """
    neg = False
    if p < hi:
        c = buf[p]
        if c == 45:
            neg = True
            p += 1
        elif c == 43:
            p += 1
    nd = 0
    while p < hi and buf[p] == 48:  # leading zeros carry no significance
        p += 1
        nd += 1
    mant = np.int64(0)
    sig = 0
    while p < hi:
        d = np.int64(buf[p]) - 48
        if d < 0 or d > 9:
            break
        mant = mant * 10 + d  # may wrap past 18 digits; then sig says "not exact"
        sig += 1
        p += 1
    nd += sig
    exp10 = 0
    if p < hi and buf[p] == 46:
        p += 1
        if sig == 0:
            f0 = p
            while p < hi and buf[p] == 48:
                p += 1
            nd += p - f0
            exp10 -= p - f0
        while p < hi:
            d = np.int64(buf[p]) - 48
            if d < 0 or d > 9:
                break
            mant = mant * 10 + d
            sig += 1
            nd += 1
            exp10 -= 1
            p += 1
    if nd == 0:
        return 0.0, False, p
    e, ok, p = _exponent(buf, p, hi)
    if not ok:
        return 0.0, False, p
    exp10 += e
    if sig > _MAX_DIGITS:
        return 0.0, False, p
    return _round_exact(mant, exp10, neg, p, pow10)


@njit(cache=True, nogil=True, inline="always")
def _scan_number(buf, base, p, hi, pow10):
    """:func:`_scan_number_slow` with digit runs read eight bytes at a time. Numbers of more than
    18 digits (leading zeros included) go to the slow scanner, so results are identical."""
    t = p
    neg = False
    if p < hi:
        c = buf[p]
        if c == 45:
            neg = True
            p += 1
        elif c == 43:
            p += 1
    mant, nd = _digit_run(buf, base, p, hi)
    if nd > _MAX_DIGITS:
        return _scan_number_slow(buf, t, hi, pow10)
    p += nd
    exp10 = 0
    if p < hi and buf[p] == 46:
        p += 1
        f, nf = _digit_run(buf, base, p, hi)
        if nd + nf > _MAX_DIGITS:
            return _scan_number_slow(buf, t, hi, pow10)
        if nf:
            mant = mant * _POW10_INT[nf] + f
        nd += nf
        exp10 = -nf
        p += nf
    if nd == 0:
        return 0.0, False, p
    e, ok, p = _exponent(buf, p, hi)
    if not ok:
        return 0.0, False, p
    exp10 += e
    return _round_exact(mant, exp10, neg, p, pow10)


@njit(cache=True, nogil=True)
def parse_float(buf, p, q, pow10):
    """Parse the whole token buf[p:q] as Python ``float()`` would, when provably exact.

    Returns (value float64, ok bool); ok False means "let Python's float() parse this token"."""
    if p >= q:
        return 0.0, False
    v, ok, end = _scan_number(buf, buf.ctypes.data, p, q, pow10)
    return v, ok and end == q


@njit(cache=True, nogil=True)
def libsvm_count(buf, starts, ends, line_lo, line_hi, nnz, status):
    """Pass 1: locate the data line of every record and count its features.

    buf uint8 (m,); starts, ends int64 (k,): record j is buf[starts[j]:ends[j]].
    Fills line_lo, line_hi int64 (k,) (the data line without its comment and newline),
    nnz int64 (k,) and status int8 (k,) (OK or NOT_ONE_DATA_LINE). Returns the number of records
    not OK. The count is that of ':' on the data line less those of a leading ``qid*`` token:
    exact for every valid record; for an invalid one the fill pass notices the mismatch.
    """
    bad = 0
    for j in range(starts.shape[0]):
        s = starts[j]
        e = ends[j]
        # common case, one vectorizable sweep: a single line without '#' or NUL
        ncolon = 0
        nnl = 0
        nodd = 0
        for p in range(s, e):
            c = buf[p]
            ncolon += c == 58
            nnl += c == 10
            nodd += (c == 35) | (c == 0)
        if nodd == 0 and (nnl == 0 or (nnl == 1 and buf[e - 1] == 10)):
            lo = s
            hi = e - nnl
            while lo < hi and _is_space(buf[lo]):
                lo += 1
            ndata = 1 if lo < hi else 0
        else:
            ndata = 0
            lo = s
            hi = s
            a = s
            while a < e:
                b = a
                while b < e and buf[b] != 10:
                    b += 1
                ce = _content_end(buf, a, b)
                p = a
                while p < ce and _is_space(buf[p]):
                    p += 1
                if p < ce:
                    ndata += 1
                    lo = p
                    hi = ce
                a = b + 1
            if ndata == 1:
                ncolon = 0
                for p in range(lo, hi):
                    ncolon += buf[p] == 58
        line_lo[j] = lo
        line_hi[j] = hi
        if ndata != 1:
            status[j] = NOT_ONE_DATA_LINE
            nnz[j] = 0
            bad += 1
            continue
        status[j] = OK
        # sklearn treats a first feature token starting with b"qid" apart
        p = lo
        while p < hi and not _is_space(buf[p]):
            p += 1
        while p < hi and _is_space(buf[p]):
            p += 1
        if p + 3 <= hi and buf[p] == 113 and buf[p + 1] == 105 and buf[p + 2] == 100:
            while p < hi and not _is_space(buf[p]):
                ncolon -= buf[p] == 58
                p += 1
        nnz[j] = ncolon
    return bad


@njit(cache=True, nogil=True)
def libsvm_fill(buf, line_lo, line_hi, status, indptr, zero_based, query_id, n_features, pow10,
                indices, data, y, qid, has_qid, fb_slot, fb_lo, fb_hi):
    """Pass 2: parse the data lines located by ``libsvm_count`` into preallocated CSR arrays.

    indptr int64 (k+1,) (cumulative nnz). Outputs: indices (int32/int64, (nnz,)), data
    (float32/float64, (nnz,)), y float64 (k,), qid int64 (k,), has_qid uint8 (k,). Records whose
    status is not OK are skipped; a record that cannot be finished exactly gets status
    NEEDS_PYTHON. Tokens that are well-formed but not fast-path floats are listed in
    fb_slot/fb_lo/fb_hi (int64, capacity nnz + k; slot -1 - j is the label of record j) for
    Python's ``float()``. Returns the number of fallback tokens.
    """
    nfb = 0
    shift = 0 if zero_based else 1
    base = buf.ctypes.data
    for j in range(line_lo.shape[0]):
        if status[j] != OK:
            continue
        p = line_lo[j]
        hi = line_hi[j]
        t = p
        v, ok, p = _scan_number(buf, base, p, hi, pow10)
        if not (ok and (p == hi or _is_space(buf[p]))):
            while p < hi and not _is_space(buf[p]):
                p += 1
            fb_slot[nfb] = -1 - j
            fb_lo[nfb] = t
            fb_hi[nfb] = p
            nfb += 1
        y[j] = v
        has_qid[j] = 0
        k = indptr[j]
        kend = indptr[j + 1]
        prev = np.int64(-1)
        first = True
        bad = False
        while True:
            while p < hi and _is_space(buf[p]):
                p += 1
            if p >= hi:
                break
            t = p
            if first and p + 3 <= hi and buf[p] == 113 and buf[p + 1] == 105 and buf[p + 2] == 100:
                first = False
                while p < hi and not _is_space(buf[p]):
                    p += 1
                c = t + 3
                while c < p and buf[c] != 58:
                    c += 1
                if c >= p:
                    bad = True
                    break
                has_qid[j] = 1
                if query_id:
                    r = c + 1
                    qneg = False
                    if r < p and (buf[r] == 43 or buf[r] == 45):
                        qneg = buf[r] == 45
                        r += 1
                    qv = np.int64(0)
                    nd = 0
                    while r < p and 48 <= buf[r] <= 57 and nd < _MAX_DIGITS:
                        qv = qv * 10 + (np.int64(buf[r]) - 48)
                        nd += 1
                        r += 1
                    if nd == 0 or r != p:
                        bad = True
                        break
                    qid[j] = -qv if qneg else qv
                continue
            first = False
            if k >= kend:
                bad = True
                break
            ineg = False
            if buf[p] == 43 or buf[p] == 45:
                ineg = buf[p] == 45
                p += 1
            idx, nd = _digit_run(buf, base, p, hi)
            p += nd
            if nd == 0 or nd > _MAX_DIGITS or p >= hi or buf[p] != 58:
                bad = True
                break
            if ineg:
                idx = -idx
            if idx < shift or idx <= prev or idx - shift >= n_features:
                bad = True  # negative, 0 when one-based, unsorted, duplicate or out of range
                break
            prev = idx
            indices[k] = idx - shift
            p += 1
            t = p
            v, ok, p = _scan_number(buf, base, p, hi, pow10)
            if not (ok and (p == hi or _is_space(buf[p]))):
                while p < hi and not _is_space(buf[p]):
                    p += 1
                fb_slot[nfb] = k
                fb_lo[nfb] = t
                fb_hi[nfb] = p
                nfb += 1
            data[k] = v
            k += 1
        if bad or k != kend:
            status[j] = NEEDS_PYTHON
    return nfb


@njit(cache=True, nogil=True)
def libsvm_data_lines(buf, out_lo, out_hi):
    """Spans of the lines of buf (uint8 (m,)) that hold data, as sklearn's loader sees them.

    out_lo, out_hi int64 (capacity >= number of lines): line start and end (just past its
    newline, or m). Blank and comment-only lines are left out. Returns the number of spans.
    """
    m = buf.shape[0]
    base = buf.ctypes.data
    n = 0
    a = 0
    while a < m:
        # a line holds data iff its first non-space byte is neither '#' nor the newline
        # (a NUL counts as data: strchr would stop there before any '#')
        p = a
        while p < m and buf[p] != 10 and _is_space(buf[p]):
            p += 1
        nxt = m
        if p < m:
            hit = memchr(base + np.uintp(p), 10, np.uintp(m - p))
            if hit != 0:
                nxt = np.int64(hit - base) + 1
        if p < m and buf[p] != 10 and buf[p] != 35:
            out_lo[n] = a
            out_hi[n] = nxt
            n += 1
        a = nxt
    return n


@njit(cache=True, nogil=True)
def gather_fixed(buf, starts, record_size, out):
    """Copy buf[starts[j] : starts[j] + record_size] into out[j] (uint8 (k, record_size))."""
    for j in range(starts.shape[0]):
        s = starts[j]
        for i in range(record_size):
            out[j, i] = buf[s + i]
