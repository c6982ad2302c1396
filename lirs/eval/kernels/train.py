"""Training kernels: LIBLINEAR-style dual coordinate descent for an L2-regularized linear SVM.

The dual of ``min_w 0.5 w.w + C sum_i loss(y_i w.x_i)`` is solved one coordinate (record) at a
time, in whatever order the caller gives (Hsieh et al., ICML 2008; LIBLINEAR ``-s 1`` / ``-s 3``):

    G = y_i w.x_i - 1 + diag * a_i          (gradient of the dual in a_i)
    a_i <- clip(a_i - G / (x_i.x_i + diag), 0, upper);   w += (a_i - a_old) y_i x_i

``diag = 1/(2C)``, ``upper = inf`` for the squared hinge (L2 loss); ``diag = 0``, ``upper = C`` for
the hinge (L1 loss). The dual variable of record ``ids[r]`` is ``alpha[ids[r]]``, so any delivery
order of the records can drive the solver.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _dual_step(a, g, q, upper):
    """LIBLINEAR's update of one dual variable ``a`` in [0, upper] with gradient ``g`` and
    curvature ``q``: returns (the new value, |projected gradient|)."""
    pg = g
    if a == 0.0:
        pg = min(g, 0.0)
    elif a >= upper:
        pg = max(g, 0.0)
    if pg < 0.0:
        pg = -pg
    na = a - g / q
    if na < 0.0:
        na = 0.0
    elif na > upper:
        na = upper
    return na, pg


@njit(cache=True, nogil=True)
def dcd_csr(indptr, indices, data, y, ids, rows, alpha, w, diag, upper):
    """One dual coordinate descent step per entry of ``rows`` (positions in this CSR batch).

    indptr int64 (k+1,), indices int (nnz,), data float (nnz,), y float64 (k,) in {-1, +1},
    ids int64 (k,) global record IDs, rows int64 (m,) batch positions in visiting order,
    alpha float64 (n,) and w float64 (d,) updated in place. Returns the largest |projected
    gradient| seen (0 when every visited coordinate was already optimal).
    """
    maxpg = 0.0
    for t in range(rows.shape[0]):
        r = rows[t]
        p0 = indptr[r]
        p1 = indptr[r + 1]
        yi = y[r]
        i = ids[r]
        dot = 0.0
        sq = 0.0
        for p in range(p0, p1):
            v = np.float64(data[p])
            dot += w[indices[p]] * v
            sq += v * v
        q = sq + diag
        if q <= 0.0:
            continue  # an empty record under the hinge loss: its dual variable does not move w
        na, pg = _dual_step(alpha[i], yi * dot - 1.0 + diag * alpha[i], q, upper)
        if pg > maxpg:
            maxpg = pg
        if pg > 1e-12:
            step = (na - alpha[i]) * yi
            alpha[i] = na
            for p in range(p0, p1):
                w[indices[p]] += step * np.float64(data[p])
    return maxpg


@njit(cache=True, nogil=True)
def dcd_dense(X, y, ids, rows, alpha, w, diag, upper):
    """:func:`dcd_csr` for a dense batch ``X`` float (k, d)."""
    maxpg = 0.0
    d = X.shape[1]
    for t in range(rows.shape[0]):
        r = rows[t]
        yi = y[r]
        i = ids[r]
        dot = 0.0
        sq = 0.0
        for j in range(d):
            v = np.float64(X[r, j])
            dot += w[j] * v
            sq += v * v
        q = sq + diag
        if q <= 0.0:
            continue
        na, pg = _dual_step(alpha[i], yi * dot - 1.0 + diag * alpha[i], q, upper)
        if pg > maxpg:
            maxpg = pg
        if pg > 1e-12:
            step = (na - alpha[i]) * yi
            alpha[i] = na
            for j in range(d):
                w[j] += step * np.float64(X[r, j])
    return maxpg


@njit(cache=True, nogil=True)
def csr_margins(indptr, indices, data, w, out):
    """out[r] = w . x_r for every row of a CSR matrix; out float64 (k,)."""
    for r in range(indptr.shape[0] - 1):
        s = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            s += w[indices[p]] * np.float64(data[p])
        out[r] = s


@njit(cache=True, nogil=True)
def loss_sum(margins, y, squared):
    """sum_i max(0, 1 - y_i m_i) (squared when ``squared``); margins, y float64 (k,)."""
    s = 0.0
    for r in range(margins.shape[0]):
        h = 1.0 - y[r] * margins[r]
        if h > 0.0:
            s += h * h if squared else h
    return s


@njit(cache=True, nogil=True)
def shuffle_buffer_order(n, size, u, out):
    """Delivery order of a shuffle buffer of ``size`` records over the stream 0..n-1 (tf.data
    ``shuffle``): fill the buffer, then each output takes a uniform slot (``u`` float64 (n,) in
    [0, 1), drawn by the caller) and the next stream record takes its place. out int64 (n,)."""
    fill = min(size, n)
    buf = np.empty(max(fill, 1), np.int64)
    for i in range(fill):
        buf[i] = i
    nxt = fill
    j = 0
    while fill > 0:
        s = int(u[j] * fill)
        if s >= fill:
            s = fill - 1
        out[j] = buf[s]
        if nxt < n:
            buf[s] = nxt
            nxt += 1
        else:
            fill -= 1
            buf[s] = buf[fill]
        j += 1


@njit(cache=True, nogil=True)
def gather_spans(src, starts, ends, dst):
    """Copy src[starts[i]:ends[i]] for every i, back to back, into dst; returns bytes written."""
    p = 0
    for i in range(starts.shape[0]):
        for q in range(starts[i], ends[i]):
            dst[p] = src[q]
            p += 1
    return p


@njit(cache=True, nogil=True)
def csr_take_rows(indptr, indices, data, rows, dest, out_indptr, out_indices, out_data):
    """Copy rows ``rows`` of a CSR matrix to output rows ``dest`` of a CSR matrix whose
    ``out_indptr`` is already filled (rows, dest int64 (m,))."""
    for t in range(rows.shape[0]):
        r = rows[t]
        p = out_indptr[dest[t]]
        for q in range(indptr[r], indptr[r + 1]):
            out_indices[p] = indices[q]
            out_data[p] = data[q]
            p += 1
