"""Kernels of `lirs gen`: counter-based random records, formatted straight into byte buffers.

Every record ``j`` draws its randomness from its own stream, started by hashing ``(key, j)``
(splitmix64). Its content therefore depends only on the key and ``j`` — not on the batch it is
generated in, the chunk size, or the output order — so a ``sorted`` file is an exact permutation
of the ``shuffled`` file of the same seed, and any record can be regenerated alone. Keys come from
``numpy.random.SeedSequence`` in :mod:`lirs.eval.gen`; nothing here seeds anything.

The hidden linear model: a record's ``score`` is ``w · x``; its label is
``+1 if score - center + noise_sd * z > 0 else -1`` with ``z`` a standard normal from the
record's own stream. :func:`label_of` is the single place that decides it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_SALT = np.uint64(0x632BE59BD9B4E019)
_U10 = np.uint64(10)
_S11 = np.uint64(11)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53
_TWO_PI = 6.283185307179586

# bytes used when formatting
_SPACE, _COLON, _NL, _DOT, _ZERO, _PLUS, _MINUS, _QUOTE = 32, 58, 10, 46, 48, 43, 45, 34


# --------------------------------------------------------------------------- random streams

@njit(cache=True, nogil=True, inline="always")
def mix64(z):
    """splitmix64 finalizer: a bijection of uint64 with good avalanche."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True, inline="always")
def stream_start(key, j):
    """State of record ``j``'s stream (uint64). Distinct ``j`` give distinct, scattered states."""
    return mix64(key ^ (np.uint64(j) * _GOLDEN + _SALT))


@njit(cache=True, nogil=True, inline="always")
def uniform(s):
    """(new state, float64 uniform in [0, 1))."""
    s = s + _GOLDEN
    return s, float(mix64(s) >> _S11) * _INV53


@njit(cache=True, nogil=True, inline="always")
def normal(s):
    """(new state, float64 standard normal) by Box-Muller (one of the pair)."""
    s, u1 = uniform(s)
    s, u2 = uniform(s)
    return s, np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(_TWO_PI * u2)


@njit(cache=True, nogil=True)
def label_of(score, center, noise_sd, z):
    """The hidden model's label: +1.0 or -1.0 (float64)."""
    return 1.0 if (score - center) + noise_sd * z > 0.0 else -1.0


@njit(cache=True, nogil=True)
def hashed_normals(key, n, out):
    """Fill ``out[:n]`` (float64) with standard normals, element i from stream (key, i)."""
    for i in range(n):
        s = stream_start(key, i)
        s, z = normal(s)
        out[i] = z


# --------------------------------------------------------------------------- integer formatting

@njit(cache=True, nogil=True, inline="always")
def _ndigits(v):
    # a comparison tree: ids and feature indices are mostly 1-8 digits
    if v < 10000:
        if v < 100:
            return 1 if v < 10 else 2
        return 3 if v < 1000 else 4
    if v < 100000000:
        if v < 1000000:
            return 5 if v < 100000 else 6
        return 7 if v < 10000000 else 8
    n = 9
    p = 1000000000
    while v >= p and n < 18:
        p *= 10
        n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _put_uint(buf, pos, v):
    """Write non-negative int ``v`` in decimal at ``buf[pos:]``; return the new position."""
    n = _ndigits(v)
    e = pos + n
    p = e - 1
    u = np.uint64(v)      # unsigned: no sign fix-ups around each division (a third faster)
    while p >= pos:
        buf[p] = np.uint8(_ZERO + (u % _U10))
        u //= _U10
        p -= 1
    return e


@njit(cache=True, nogil=True, inline="always")
def _put_value(buf, pos, m, q):
    """Write the decimal ``m / 10**q`` (``q == 0``: integer ``m``; else ``0 < m < 10**q``)."""
    if q == 0:
        return _put_uint(buf, pos, m)
    buf[pos] = _ZERO
    buf[pos + 1] = _DOT
    pos += 2
    e = pos + q
    p = e - 1
    u = np.uint64(m)
    while p >= pos:
        buf[p] = np.uint8(_ZERO + (u % _U10))
        u //= _U10
        p -= 1
    return e


# --------------------------------------------------------------------------- sparse (LIBSVM) records

@njit(cache=True, nogil=True)
def sparse_record(key, j, kmin, kmax, dim, p_head, p_one, qmin, qmax, pow10, idx, m, q):
    """Draw record ``j``'s features into ``idx`` (int64, >= kmax), ``m`` (int64), ``q`` (int64);
    ``pow10`` (float64) holds 10**i.

    Draws k in [kmin, kmax] indices, each (about) log-uniform over [1, dim] with probability ``p_head``
    (a frequent head, so a small sample sees features often enough to learn them) else uniform
    over [1, dim]; sorts and drops repeats. Values are ``1`` with probability ``p_one``, else the
    decimal ``m / 10**q`` with q in [qmin, qmax] digits, trailing zeros folded so the text is short
    and parses back to exactly ``m / 10**q`` as float64. Returns (nnz, z) with z the record's
    label-noise normal.
    """
    s = stream_start(key, j)
    s, u = uniform(s)
    k = kmin + int(u * (kmax - kmin + 1))
    log2_dim = np.log2(float(dim))
    for t in range(k):
        # one uniform picks head or tail and, rescaled, the index within it
        s, u = uniform(s)
        if u < p_head:
            # 2**y for y uniform in [0, log2(dim)), linear within each octave: log-uniform up
            # to a factor < 1.07 in density, and no exp() (a third of the record's cost)
            y = (u / p_head) * log2_dim
            e = int(y)
            v = int((1.0 + (y - e)) * float(1 << e))
        else:
            v = 1 + int(((u - p_head) / (1.0 - p_head)) * dim)
        if v < 1:
            v = 1
        elif v > dim:
            v = dim
        idx[t] = v
    if k <= 64:
        # insertion sort: numba's generic sort costs ~1 us per call, the whole record budget
        for t in range(1, k):
            v = idx[t]
            i = t - 1
            while i >= 0 and idx[i] > v:
                idx[i + 1] = idx[i]
                i -= 1
            idx[i + 1] = v
    else:
        idx[:k].sort()
    n = 0
    for t in range(k):
        if n == 0 or idx[t] != idx[n - 1]:
            idx[n] = idx[t]
            n += 1
    for t in range(n):
        s, u = uniform(s)
        if u < p_one:
            m[t] = 1
            q[t] = 0
        else:
            # one 64-bit draw: low bits pick the number of places, high bits the digits
            s = s + _GOLDEN
            r64 = mix64(s)
            qq = qmin + ((int(r64 & np.uint64(65535)) * (qmax - qmin + 1)) >> 16)
            p10 = int(pow10[qq])
            mm = 1 + int(float(r64 >> _S11) * _INV53 * (p10 - 1))
            while mm % 10 == 0:
                mm //= 10
                qq -= 1
            m[t] = mm
            q[t] = qq
    s, z = normal(s)
    return n, z


@njit(cache=True, nogil=True, inline="always")
def _sparse_score(n, idx, m, q, w, pow10):
    # w[i] is the weight of feature i for i < len(w); features beyond carry no signal
    h = w.shape[0]
    score = 0.0
    for t in range(n):
        i = idx[t]
        if i < h:
            score += w[i] * (m[t] / pow10[q[t]])
    return score


@njit(cache=True, nogil=True)
def sparse_scores(key, ids, kmin, kmax, dim, p_head, p_one, qmin, qmax, w, pow10,
                  idx, m, q, out_score, out_z):
    """Raw scores ``w · x`` (float64) and noise normals (float64) of records ``ids`` (int64)."""
    for r in range(ids.shape[0]):
        n, z = sparse_record(key, ids[r], kmin, kmax, dim, p_head, p_one, qmin, qmax, pow10, idx, m, q)
        out_score[r] = _sparse_score(n, idx, m, q, w, pow10)
        out_z[r] = z


@njit(cache=True, nogil=True)
def sparse_labels(key, ids, kmin, kmax, dim, p_head, p_one, qmin, qmax, w, pow10, center, noise_sd,
                  idx, m, q, out_labels):
    """Labels (int8 ±1) of records ``ids`` (int64), without formatting them."""
    for r in range(ids.shape[0]):
        n, z = sparse_record(key, ids[r], kmin, kmax, dim, p_head, p_one, qmin, qmax, pow10, idx, m, q)
        out_labels[r] = np.int8(label_of(_sparse_score(n, idx, m, q, w, pow10), center, noise_sd, z))


@njit(cache=True, nogil=True)
def sparse_text(key, ids, kmin, kmax, dim, p_head, p_one, qmin, qmax, w, pow10, center, noise_sd,
                idx, m, q, buf, out_labels):
    """Format records ``ids`` (int64) as LIBSVM lines ``±1 i:v i:v ...\\n`` into ``buf`` (uint8).

    ``buf`` must hold ``len(ids) * max_line`` bytes (see :func:`sparse_max_line`). Labels go to
    ``out_labels`` (int8). Returns the number of bytes written.
    """
    pos = 0
    for r in range(ids.shape[0]):
        n, z = sparse_record(key, ids[r], kmin, kmax, dim, p_head, p_one, qmin, qmax, pow10, idx, m, q)
        lab = label_of(_sparse_score(n, idx, m, q, w, pow10), center, noise_sd, z)
        out_labels[r] = np.int8(lab)
        buf[pos] = _PLUS if lab > 0 else _MINUS
        buf[pos + 1] = _ZERO + 1
        pos += 2
        for t in range(n):
            buf[pos] = _SPACE
            pos = _put_uint(buf, pos + 1, idx[t])
            buf[pos] = _COLON
            pos = _put_value(buf, pos + 1, m[t], q[t])
        buf[pos] = _NL
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def sparse_csr(key, ids, kmin, kmax, dim, p_head, p_one, qmin, qmax, w, pow10, center, noise_sd,
               idx, m, q, indptr, indices, data, out_labels):
    """The same records as :func:`sparse_text`, as CSR: ``indptr`` (int64, len(ids)+1), 1-based
    ``indices`` (int64) and ``data`` (float64) sized ``len(ids) * kmax``. Returns nnz."""
    pos = 0
    indptr[0] = 0
    for r in range(ids.shape[0]):
        n, z = sparse_record(key, ids[r], kmin, kmax, dim, p_head, p_one, qmin, qmax, pow10, idx, m, q)
        out_labels[r] = np.int8(label_of(_sparse_score(n, idx, m, q, w, pow10), center, noise_sd, z))
        for t in range(n):
            indices[pos] = idx[t]
            data[pos] = m[t] / pow10[q[t]]
            pos += 1
        indptr[r + 1] = pos
    return pos


# --------------------------------------------------------------------------- dense records

@njit(cache=True, nogil=True)
def dense_rows(key, ids, w, center, noise_sd, out, out_labels):
    """Rows ``out[r]`` (float32, d) of standard normals for records ``ids`` (int64), and labels
    (float64 ±1) from the float32 values actually stored."""
    d = out.shape[1]
    for r in range(ids.shape[0]):
        s = stream_start(key, ids[r])
        score = 0.0
        for c in range(0, d, 2):
            # both Box-Muller outputs: dense profiles draw many normals
            s, u1 = uniform(s)
            s, u2 = uniform(s)
            rad = np.sqrt(-2.0 * np.log(1.0 - u1))
            x0 = np.float32(rad * np.cos(_TWO_PI * u2))
            out[r, c] = x0
            score += w[c] * x0
            if c + 1 < d:
                x1 = np.float32(rad * np.sin(_TWO_PI * u2))
                out[r, c + 1] = x1
                score += w[c + 1] * x1
        s, z = normal(s)
        out_labels[r] = label_of(score, center, noise_sd, z)


@njit(cache=True, nogil=True)
def dense_labels(key, ids, w, center, noise_sd, row, out_labels):
    """Labels (int8 ±1) of records ``ids`` using ``row`` (float32, (1, d)) as scratch."""
    lab = np.empty(1, np.float64)
    one = np.empty(1, np.int64)
    for r in range(ids.shape[0]):
        one[0] = ids[r]
        dense_rows(key, one, w, center, noise_sd, row, lab)
        out_labels[r] = np.int8(lab[0])


# --------------------------------------------------------------------------- JSON lines records

@njit(cache=True, nogil=True)
def lines_record(key, j, ln_lmin, ln_lmax, overhead, ln_vocab, vocab_len, words):
    """Draw record ``j``'s words (int64 vocabulary ids, log-uniform: a Zipf-like head) into
    ``words`` until the text reaches a line length log-uniform in [lmin, lmax] bytes.
    Returns (nwords, text_bytes, z)."""
    s = stream_start(key, j)
    s, u = uniform(s)
    target = int(np.exp(ln_lmin + u * (ln_lmax - ln_lmin))) - overhead
    nv = vocab_len.shape[0]
    nw = 0
    tb = 0
    while nw < words.shape[0] and (nw == 0 or tb < target):
        s, u = uniform(s)
        v = int(np.exp(u * ln_vocab)) - 1
        if v >= nv:
            v = nv - 1
        words[nw] = v
        tb += vocab_len[v] + (1 if nw > 0 else 0)
        nw += 1
    s, z = normal(s)
    return nw, tb, z


@njit(cache=True, nogil=True, inline="always")
def _lines_score(nw, words, w):
    h = w.shape[0]
    score = 0.0
    for t in range(nw):
        if words[t] < h:
            score += w[words[t]]
    # per-word average scale, so short and long texts are equally decidable
    return score / np.sqrt(float(nw))


@njit(cache=True, nogil=True)
def lines_scores(key, ids, ln_lmin, ln_lmax, overhead, ln_vocab, vocab_len, w, words, out_score, out_z):
    """Raw scores (float64) and noise normals of JSON-lines records ``ids`` (int64)."""
    for r in range(ids.shape[0]):
        nw, tb, z = lines_record(key, ids[r], ln_lmin, ln_lmax, overhead, ln_vocab, vocab_len, words)
        out_score[r] = _lines_score(nw, words, w)
        out_z[r] = z


@njit(cache=True, nogil=True)
def lines_labels(key, ids, ln_lmin, ln_lmax, overhead, ln_vocab, vocab_len, w, center, noise_sd,
                 words, out_labels):
    """Labels (int8 ±1) of JSON-lines records ``ids`` (int64), without formatting them."""
    for r in range(ids.shape[0]):
        nw, tb, z = lines_record(key, ids[r], ln_lmin, ln_lmax, overhead, ln_vocab, vocab_len, words)
        out_labels[r] = np.int8(label_of(_lines_score(nw, words, w), center, noise_sd, z))


@njit(cache=True, nogil=True, inline="always")
def _put_ascii(buf, pos, text):
    for i in range(text.shape[0]):
        buf[pos + i] = text[i]
    return pos + text.shape[0]


@njit(cache=True, nogil=True)
def lines_text(key, ids, ln_lmin, ln_lmax, overhead, ln_vocab, vocab, vocab_off, w, center, noise_sd,
               words, p_id, p_label, p_text, p_end, buf, out_labels):
    """Format records ``ids`` (int64) as ``{"id":J,"label":±1,"text":"w w ..."}\\n`` into ``buf``
    (uint8, ``len(ids) * max_line`` bytes). ``vocab`` (uint8) holds the words back to back, word v
    is ``vocab[vocab_off[v]:vocab_off[v+1]]``; ``p_*`` (uint8) are the fixed JSON pieces.
    Labels go to ``out_labels`` (int8). Returns bytes written."""
    nv = vocab_off.shape[0] - 1
    vocab_len = vocab_off[1:] - vocab_off[:nv]
    pos = 0
    for r in range(ids.shape[0]):
        nw, tb, z = lines_record(key, ids[r], ln_lmin, ln_lmax, overhead, ln_vocab, vocab_len, words)
        lab = label_of(_lines_score(nw, words, w), center, noise_sd, z)
        out_labels[r] = np.int8(lab)
        pos = _put_ascii(buf, pos, p_id)
        pos = _put_uint(buf, pos, ids[r])
        pos = _put_ascii(buf, pos, p_label)
        if lab < 0:
            buf[pos] = _MINUS
            pos += 1
        buf[pos] = _ZERO + 1
        pos += 1
        pos = _put_ascii(buf, pos, p_text)
        for t in range(nw):
            if t > 0:
                buf[pos] = _SPACE
                pos += 1
            v = words[t]
            for i in range(vocab_off[v], vocab_off[v + 1]):
                buf[pos] = vocab[i]
                pos += 1
        pos = _put_ascii(buf, pos, p_end)
    return pos
