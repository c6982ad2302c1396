"""The plain-LIBSVM kernels: the common case, small and quick to compile.

Most LIBSVM files hold nothing but ``LABEL INDEX:VALUE ...`` lines with short numbers: a label and
values of at most 15 digits with an optional sign and decimal point, indices of at most 8 digits.
:func:`libsvm_spans_plain` and :func:`libsvm_lines_plain` decode exactly that (SWAR: eight bytes
per step) and stop at the first record that is anything else. The caller then hands a stretch of
records from there to the full kernels of :mod:`lirs.kernels.libsvm` (which numba compiles only
when some data needs them: a first batch of plain data compiles this module alone), and goes on
with the plain kernels after it.

Values are ``w / 10**f`` with ``w < 2**53`` and ``f <= 15``: one correctly rounded IEEE division
(Clinger's fast path), hence bit-identical to Python's ``float()``.

Compile options (these kernels, :mod:`lirs.kernels.libsvm` and :mod:`lirs.kernels.numbers`):
``_nrt=False`` — they allocate nothing, and without numba's runtime an array passed to a callee
costs no atomic reference-count updates (with them, every token paid several, and threads
decoding one output fought over the array's count: 1.5x slower on one core, worse on several);
``inline="always"`` for the per-token parser (:func:`plain_pair`) — a numba call passes each
array as a 7-field struct and checks an error status: 1.4x slower as a call. Leaves on scalars are left to LLVM to inline.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .numbers import (HI4, LO4, M16, M32, SIXES, THREES, POW10, POW10_U64, PREFETCH_AHEAD, byte_at, load_u64,
                      prefetch_span, trailing_zeros)


@njit(cache=True, nogil=True, _nrt=False)
def is_space(c):
    # bytes.split() whitespace: space, \t \n \v \f \r
    return c == 32 or (9 <= c <= 13)


@njit(cache=True, nogil=True, _nrt=False)
def _word(buf, base, p):
    """The 8 bytes at p as a little-endian uint64, zeros for those past the end of buf (a zero
    byte ends every plain token, as the end of the span does)."""
    m = buf.shape[0]
    if p + 8 <= m:
        return load_u64(base + np.uint64(p))
    x = np.uint64(0)
    for i in range(min(m, p + 8) - 1, p - 1, -1):
        x = (x << np.uint64(8)) | np.uint64(byte_at(buf, i))
    return x


@njit(cache=True, nogil=True, _nrt=False)
def _swar_digits(x):
    """(count, value) of the leading ASCII digits of the 8 bytes in x (little-endian)."""
    bad = ((x & HI4) ^ THREES) | (((x + SIXES) & HI4) ^ THREES)
    k = 8 if bad == 0 else np.int64(trailing_zeros(bad)) >> 3
    if k == 0:
        return 0, np.uint64(0)
    z = (x & LO4) << np.uint64(8 * (8 - k))
    z = (z * np.uint64(2561)) >> np.uint64(8)
    z = ((z & M16) * np.uint64(6553601)) >> np.uint64(16)
    z = ((z & M32) * np.uint64(42949672960001)) >> np.uint64(32)
    return k, z


def _number_at(buf, base, p, hi):
    """``[+-]? D{1,8} (. D+)?`` (15 digits at most) at p, ended by whitespace before hi.

    Returns (end, value float64); end == p when the token is not of that form. Word loads may
    read past hi (within buf): the result never depends on those bytes."""
    if p >= hi:
        return p, 0.0
    q = p
    x = _word(buf, base, q)
    c = x & np.uint64(0xFF)
    neg = c == 45
    if c == 45 or c == 43:  # both words load at once: the sign test does not delay the digits
        q += 1
        x = _word(buf, base, q)
    k2, w = _swar_digits(x)
    q += k2
    if k2 == 0 or q >= hi:
        return p, 0.0
    c = byte_at(buf, q)
    f = 0
    if c == 46:
        q += 1
        k3, d = _swar_digits(_word(buf, base, q))
        q += k3
        if k3 == 0 or k2 + k3 > 15 or q >= hi:
            return p, 0.0
        w = w * POW10_U64[k3] + d
        f = k3
        c = byte_at(buf, q)
    if not is_space(c):
        return p, 0.0
    v = np.float64(np.int64(w))
    if f:
        v = v / POW10[f]
    return q, (-v if neg else v)


# numba inlines (inline="always") by copying a function's IR, and copies of copies (a number
# inlined into a pair inlined into a line, each with its word loads...) doubled the time to
# compile the kernel a first batch needs; so the scalar leaves are left to LLVM, which inlines
# them anyway, a label (once a line) is a call, and only a pair's number and a line's pairs are
# inlined
plain_number = njit(cache=True, nogil=True, _nrt=False)(_number_at)
_number_inlined = njit(cache=True, nogil=True, _nrt=False, inline="always")(_number_at)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def plain_pair(buf, base, p, hi):
    """``INDEX:VALUE`` at p: 1-8 index digits, ':', a :func:`plain_number`.

    Returns (end, index int64, value); end == p when the token is not of that form."""
    k1, idx = _swar_digits(_word(buf, base, p))
    q = p + k1
    if k1 == 0 or q >= hi or byte_at(buf, q) != 58:
        return p, np.int64(0), 0.0
    # a single digit (a binary feature's "1", the most common value of many datasets) is two
    # byte tests: no word load, no sign, no digit-run arithmetic (a fifth of a plain file's
    # decode time when most values are "1")
    if q + 2 < hi:
        d = np.int64(byte_at(buf, q + 1)) - 48
        if 0 <= d <= 9 and is_space(byte_at(buf, q + 2)):
            return q + 2, np.int64(idx), np.float64(d)
    e, v = _number_inlined(buf, base, q + 1, hi)
    if e == q + 1:
        return p, np.int64(0), 0.0
    return e, np.int64(idx), v


@njit(cache=True, nogil=True, _nrt=False)
def _plain_line(buf, base, p, hi, shift, n_features, indices, data, k):
    """A plain data line from its first byte p: (end past its newline or hi, k, label, ok).
    ok False: not plain (nothing is kept; the full kernels take the record)."""
    kcap = indices.shape[0]
    k0 = k
    p, label = plain_number(buf, base, p, hi)
    if p == hi or not is_space(byte_at(buf, p)):  # plain_number refused the label (p unchanged)
        return p, k0, 0.0, False
    prev = np.int64(-1)
    while True:
        while p < hi and (byte_at(buf, p) == 32 or byte_at(buf, p) == 9 or byte_at(buf, p) == 13):
            p += 1
        if p >= hi:
            return p, k, label, True
        if byte_at(buf, p) == 10:
            return p + 1, k, label, True
        if k >= kcap:
            return p, k0, 0.0, False
        q, idx, v = plain_pair(buf, base, p, hi)
        if q == p or idx <= prev or idx < shift or idx - shift >= n_features:
            return p, k0, 0.0, False
        prev = idx
        # unsigned positions, as in byte_at: no negative-index wraparound test on every store
        indices[np.uintp(k)] = idx - shift
        data[np.uintp(k)] = v
        k += 1
        p = q


@njit(cache=True, nogil=True, _nrt=False)
def libsvm_spans_plain(buf, starts, ends, j0, shift, n_features, indices, data, y, indptr):
    """Decode record spans (see :func:`lirs.kernels.libsvm.libsvm_spans`) from record j0 (its
    features from indptr[j0]; indptr[0] is set when j0 == 0) while they are plain.

    Returns j: records [j0, j) are decoded (indptr[:j+1], y[:j] set); record j is not plain and
    the full kernel must go on from it (at features indptr[j]). j == len(starts) when all were."""
    base = buf.ctypes.data
    if j0 == 0:
        indptr[0] = 0
    k = np.int64(indptr[j0])
    for j in range(j0, starts.shape[0]):
        prefetch_span(base, starts, ends, j + PREFETCH_AHEAD)
        p = starts[j]
        e = ends[j]
        while p < e and is_space(byte_at(buf, p)):
            p += 1
        if p >= e:
            return j
        p, k2, label, ok = _plain_line(buf, base, p, e, shift, n_features, indices, data, k)
        if not ok:
            return j
        while p < e and is_space(byte_at(buf, p)):
            p += 1
        if p < e:
            return j  # more than one data line (or a comment): the full kernel decides
        k = k2
        y[j] = label
        indptr[j + 1] = k
    return starts.shape[0]


@njit(cache=True, nogil=True, _nrt=False)
def libsvm_lines_plain(buf, a, b, shift, n_features, indices, data, k0, y, rec_end, r0):
    """Decode the data lines of buf[a:b] (see :func:`lirs.kernels.libsvm.libsvm_lines`) while
    they are plain. Returns (end, records, features, min index, max index): lines before ``end``
    are done; the line at ``end`` (< b) is not plain and the full kernel must go on from it.

    A plain record's first byte is not stored (the full kernel's ``rec_pos``): only a record left
    to Python needs it, and these never are plain; a whole file of plain records thus leaves
    that array untouched (never faulted in)."""
    base = buf.ctypes.data
    k = k0
    r = r0
    rcap = y.shape[0]
    imin = np.int64(np.iinfo(np.int64).max)
    imax = np.int64(-1)
    p = a
    while True:
        while p < b and is_space(byte_at(buf, p)):
            p += 1
        if p >= b or r >= rcap:
            break
        e, k2, label, ok = _plain_line(buf, base, p, b, shift, n_features, indices, data, k)
        if not ok:
            break
        y[r] = label
        rec_end[r] = k2
        if k2 > k:
            imin = min(imin, np.int64(indices[k]))
            imax = max(imax, np.int64(indices[k2 - 1]))
        k = k2
        r += 1
        p = e
    return p, r - r0, k - k0, imin, imax
