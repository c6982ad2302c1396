"""LIBSVM decoding kernels: LIBSVM text -> CSR arrays, with sklearn's exact semantics.

One pass per record: :func:`_record` parses a data line (label, optional ``qid``, ``INDEX:VALUE``
pairs) straight into the output arrays. Two drivers share it: :func:`libsvm_spans` (record spans
of a batch, as the loader reads them) and :func:`libsvm_lines` (a region of a whole file, every
data line a record; a file is cut into regions that threads decode at once).

The kernels only take the common, provably exact path; anything else (a record that is not
exactly one data line, an odd token, an invalid or unsorted index) marks the record for Python,
which parses it with Python's own ``int``/``float`` and raises the precise error. Numbers go
through :mod:`lirs.kernels.numbers` (Clinger / Eisel-Lemire, correctly rounded); the few it
cannot decide are listed as fallback tokens for ``float()``. So results are bit-identical to
``sklearn.datasets.load_svmlight_file``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, types

from .libsvm_plain import is_space, plain_pair
from .numbers import POW10, PREFETCH_AHEAD, byte_at, digit_run_u64, prefetch_span, scan_float  # noqa: F401 - POW10: parse_float's table


# libc's SIMD memchr finds line ends several times faster than a byte loop; declared by symbol
# name so that kernels calling it can still be cached. NULL comes back as 0.
memchr = types.ExternalFunction("memchr", types.uintp(types.uintp, types.intc, types.uintp))

# status codes of a record after a pass
OK = 0
NOT_ONE_DATA_LINE = 1   # zero or several data lines in the span: Python parses it
NEEDS_PYTHON = 2        # the kernel met something it does not handle: Python re-parses the record

_MAX_DIGITS = 18        # int64 holds any 18-digit decimal


@njit(cache=True, nogil=True, _nrt=False)
def digit_run(buf, base, p, hi):
    """Value (int64) and length of the run of ASCII digits at buf[p:hi] (stops at the first other
    byte); a length above 18 means "too long for int64 here" (the value is then 0): callers hand
    such a token to Python. ``base`` is the address of buf[0]."""
    v, n = digit_run_u64(buf, base, p, hi)
    return (np.int64(v) if n <= _MAX_DIGITS else np.int64(0)), n


@njit(cache=True, nogil=True, _nrt=False)
def parse_float(buf, p, q, pow10):
    """Parse the whole token buf[p:q] as Python ``float()`` would, when provably exact.

    Returns (value float64, ok bool); ok False means "let Python's float() parse this token".
    ``pow10`` is unused (kept for callers of the former signature)."""
    if p >= q:
        return 0.0, False
    v, ok, end = scan_float(buf, buf.ctypes.data, p, q)
    return v, ok and end == q


@njit(cache=True, nogil=True, _nrt=False)
def _ends_token(c):
    # a token ends at whitespace or where a comment starts
    return c == 32 or (9 <= c <= 13) or c == 35


@njit(cache=True, nogil=True, _nrt=False)
def _line_end(buf, base, p, hi):
    """Position just past the next newline at or after p, or hi."""
    if p >= hi:
        return hi
    r = memchr(base + np.uintp(p), 10, np.uintp(hi - p))
    return hi if r == 0 else np.int64(r - base) + 1


@njit(cache=True, nogil=True, _nrt=False)
def _skip_blank(buf, base, p, hi):
    """First data byte at or after p (whitespace, blank and comment-only lines skipped), or hi.

    A '#' met here is the first non-space byte of its line: a comment-only line. A NUL is data
    (sklearn's ``strchr`` stops there before any '#')."""
    while p < hi:
        c = byte_at(buf, p)
        if is_space(c):
            p += 1
        elif c == 35:
            p = _line_end(buf, base, p, hi)
        else:
            return p
    return hi


@njit(cache=True, nogil=True, _nrt=False)
def _fallback(fb_slot, fb_lo, fb_hi, nfb, slot, lo, hi):
    """List token buf[lo:hi] for Python's float(); returns the new count, -1 when full."""
    if nfb >= fb_slot.shape[0]:
        return -1
    fb_slot[nfb] = slot
    fb_lo[nfb] = lo
    fb_hi[nfb] = hi
    return nfb + 1


@njit(cache=True, nogil=True, _nrt=False)
def _token_end(buf, p, hi):
    while p < hi and not _ends_token(byte_at(buf, p)):
        p += 1
    return p


@njit(cache=True, nogil=True, _nrt=False)
def _qid(buf, t, p, query_id):
    """The ``qid*`` token buf[t:p]: (ok, value). sklearn needs a ':'; the value is an integer
    only checked (here: up to 18 digits, else Python) with ``query_id``."""
    c = t + 3
    while c < p and byte_at(buf, c) != 58:
        c += 1
    if c >= p:
        return False, 0
    if not query_id:
        return True, 0
    r = c + 1
    neg = False
    if r < p and (byte_at(buf, r) == 43 or byte_at(buf, r) == 45):
        neg = byte_at(buf, r) == 45
        r += 1
    v = np.int64(0)
    nd = 0
    while r < p and 48 <= byte_at(buf, r) <= 57 and nd < _MAX_DIGITS:
        v = v * 10 + (np.int64(byte_at(buf, r)) - 48)
        nd += 1
        r += 1
    if nd == 0 or r != p:
        return False, 0
    return True, (-v if neg else v)


@njit(cache=True, nogil=True, _nrt=False)
def _record(buf, base, p, hi, shift, n_features, query_id, indices, data, k,
            fb_slot, fb_lo, fb_hi, nfb, j):
    """Parse the data line starting at buf[p] (its first non-space byte) up to its newline or hi.

    Features go to indices[k:], data[k:]; a value or label (slot -1 - j) that only ``float()``
    can round is listed in fb_*. Returns (status, end, k, nfb, label, qid, has_qid) with ``end``
    just past the line; on NEEDS_PYTHON, k and nfb are those given (nothing kept).
    """
    k0 = k
    nfb0 = nfb
    kcap = indices.shape[0]
    t = p
    label, ok, p = scan_float(buf, base, p, hi)
    if not (ok and (p >= hi or _ends_token(byte_at(buf, p)))):
        p = _token_end(buf, p, hi)
        nfb = _fallback(fb_slot, fb_lo, fb_hi, nfb, -1 - j, t, p)
    qv = np.int64(0)
    hq = 0
    prev = np.int64(-1)
    first = True
    good = nfb >= 0
    while good:
        while p < hi and (byte_at(buf, p) == 32 or byte_at(buf, p) == 9 or 11 <= byte_at(buf, p) <= 13):
            p += 1
        if p >= hi:
            break
        c = byte_at(buf, p)
        if c == 10 or c == 35:
            break
        t = p
        if first and c == 113 and p + 3 <= hi and byte_at(buf, p + 1) == 105 and byte_at(buf, p + 2) == 100:
            first = False
            p = _token_end(buf, p, hi)
            good, qv = _qid(buf, t, p, query_id)
            hq = 1
            continue
        first = False
        if k >= kcap:
            good = False
            break
        q, idx, v = plain_pair(buf, base, p, hi)  # the common token first (libsvm_plain)
        if q > p and idx > prev and idx >= shift and idx - shift < n_features:
            prev = idx
            indices[k] = idx - shift
            data[k] = v
            k += 1
            p = q
            continue
        ineg = False
        if c == 43 or c == 45:
            ineg = c == 45
            p += 1
        idx, nd = digit_run(buf, base, p, hi)
        p += nd
        if nd == 0 or nd > _MAX_DIGITS or p >= hi or byte_at(buf, p) != 58:
            good = False
            break
        if ineg:
            idx = -idx
        if idx < shift or idx <= prev or idx - shift >= n_features:
            good = False  # negative, 0 when one-based, unsorted, duplicate or out of range
            break
        prev = idx
        indices[k] = idx - shift
        p += 1
        t = p
        v, ok, p = scan_float(buf, base, p, hi)
        if not (ok and (p >= hi or _ends_token(byte_at(buf, p)))):
            p = _token_end(buf, p, hi)
            nfb = _fallback(fb_slot, fb_lo, fb_hi, nfb, k, t, p)
            good = nfb >= 0
        data[k] = v
        k += 1
    end = _line_end(buf, base, p, hi)
    if not good:
        return NEEDS_PYTHON, end, k0, nfb0, 0.0, np.int64(0), 0
    return OK, end, k, nfb, label, qv, hq


@njit(cache=True, nogil=True, _nrt=False)
def libsvm_spans(buf, starts, ends, j0, shift, n_features, query_id, indices, data, y, qid, has_qid,
                 indptr, status, fb_slot, fb_lo, fb_hi):
    """Decode record spans: record j is buf[starts[j]:ends[j]], one data line (blank and comment
    lines around it allowed).

    buf uint8 (m,); starts, ends int64 (k,); shift 0 or 1 (one-based indices); n_features: bound
    of the shifted indices. Outputs: indices int32/int64 and data float32/float64 (capacity >= the
    number of features), y float64 (k,), qid int64 (k,) (0 where absent or not asked),
    has_qid uint8 (k,), indptr int64 (k+1,), status int8 (k,) (OK, NOT_ONE_DATA_LINE or
    NEEDS_PYTHON: such a record holds no feature here). Fallback tokens for ``float()`` go to
    fb_slot/fb_lo/fb_hi int64 (slot -1 - j is the label of record j). Starts at record j0, whose
    features begin at indptr[j0] (records before it were decoded by libsvm_spans_plain).
    Returns (nnz, fallbacks).
    """
    base = buf.ctypes.data
    # np.int64, not a literal 0: a literal would compile the callees once more for Literal[int]
    k = np.int64(indptr[j0])
    nfb = np.int64(0)
    for j in range(j0, starts.shape[0]):
        prefetch_span(base, starts, ends, j + PREFETCH_AHEAD)
        e = ends[j]
        p = _skip_blank(buf, base, starts[j], e)
        st = NOT_ONE_DATA_LINE
        if p < e:
            st, p, k2, nfb2, label, qv, hq = _record(buf, base, p, e, shift, n_features, query_id,
                                                     indices, data, k, fb_slot, fb_lo, fb_hi, nfb, j)
            if st == OK and _skip_blank(buf, base, p, e) < e:
                st = NOT_ONE_DATA_LINE  # a second data line
            if st == OK:
                k = k2
                nfb = nfb2
                y[j] = label
                qid[j] = qv
                has_qid[j] = hq
        status[j] = st
        indptr[j + 1] = k
    return k, nfb


@njit(cache=True, nogil=True, _nrt=False)
def libsvm_lines(buf, a, b, shift, n_features, query_id, indices, data, k0, y, qid, has_qid,
                 rec_end, rec_pos, status, r0, fb_slot, fb_lo, fb_hi):
    """Decode every data line of buf[a:b] (whole lines) as one record, as a file load does.

    Records are written from r0 (y, qid, has_qid, rec_end int64 = position in indices just past
    the record's features, rec_pos int64 = offset of its first byte, status int8), features from
    k0 (indices, data: the region's capacity, e.g. its ':' count). Fallback tokens: slots are
    global positions in data (or -1 - record). A record that is NEEDS_PYTHON holds no feature here.
    Returns (records, features, fallbacks, min index, max index, end); ``end`` < b only if the
    record arrays ran full.
    """
    base = buf.ctypes.data
    k = k0
    r = r0
    rcap = y.shape[0]
    nfb = np.int64(0)
    imin = np.int64(np.iinfo(np.int64).max)
    imax = np.int64(-1)
    p = a
    while True:
        p = _skip_blank(buf, base, p, b)
        if p >= b or r >= rcap:
            break
        rec_pos[r] = p
        st, p, k2, nfb, label, qv, hq = _record(buf, base, p, b, shift, n_features, query_id,
                                                indices, data, k, fb_slot, fb_lo, fb_hi, nfb, r)
        status[r] = st
        y[r] = label
        qid[r] = qv
        has_qid[r] = hq
        rec_end[r] = k2
        if k2 > k:
            imin = min(imin, np.int64(indices[k]))
            imax = max(imax, np.int64(indices[k2 - 1]))
        k = k2
        r += 1
    return r - r0, k - k0, nfb, imin, imax, p


@njit(cache=True, nogil=True, _nrt=False)
def libsvm_census(buf, a, b):
    """(':' count, '\\n' count) of buf[a:b]: capacities of a region's features and records."""
    nc = 0
    nl = 0
    for p in range(a, b):
        c = byte_at(buf, p)
        nc += c == 58
        nl += c == 10
    return nc, nl


@njit(cache=True, nogil=True, _nrt=False)
def span_colons(buf, starts, ends):
    """Number of ':' in all spans buf[starts[j]:ends[j]] (a bound on their features)."""
    n = 0
    base = buf.ctypes.data
    for j in range(starts.shape[0]):
        prefetch_span(base, starts, ends, j + PREFETCH_AHEAD)
        for p in range(starts[j], ends[j]):
            n += byte_at(buf, p) == 58
    return n


@njit(cache=True, nogil=True, _nrt=False)
def next_line(buf, p, hi):
    """Position just past the first newline at or after p in buf[:hi], or hi."""
    return _line_end(buf, buf.ctypes.data, p, hi)


@njit(cache=True, nogil=True, _nrt=False)
def gather_fixed(buf, starts, record_size, out):
    """Copy buf[starts[j] : starts[j] + record_size] into out[j] (uint8 (k, record_size))."""
    for j in range(starts.shape[0]):
        s = starts[j]
        for i in range(record_size):
            out[j, i] = byte_at(buf, s + i)
