"""LIBSVM text -> CSR arrays: the drivers around :mod:`lirs.kernels.libsvm`.

* :func:`decode_spans` — record spans (the loader's path): a batch in one kernel call on the
  calling thread; a window (many megabytes) cut into runs of consecutive records that threads
  decode at once, as regions of a file;
* :func:`decode_file` — a whole file in memory, cut at line ends into regions that threads decode
  at once (the kernels release the GIL), each writing straight into its slice of the output.

Both end in :func:`_finish`: Python's ``float()`` for the few tokens the kernels could not round
exactly, and sklearn's own grammar (:func:`lirs.svmlight.parse_record`) for the records they left
(comments inside spans, odd tokens, errors), spliced back in record order. Errors come out for
the first bad record in file order, as sklearn would raise them.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .constants import INT32_MAX, RECYCLE_STEP_MIN_BYTES
from .cores import usable_cores
from .kernels import libsvm as K
from .kernels import libsvm_plain as KP
from . import memory
from .parallel import on_cores
from .memory import output_empty
from .svmlight import parse_record

_FB_CAP = 1 << 16       # fallback tokens per kernel call; past it, records go to Python whole
_MIN_REGION = 4 << 20   # bytes of a region below which another thread costs more than it saves
# the full kernel's first stretch after a record that is not plain (then the plain kernel goes on)
_STRETCH_RECORDS = 64
_STRETCH_BYTES = 16 << 10
_FEATURE_MIN_BYTES = 4  # a blank and an I:V token: the fewest bytes a feature takes in a line


def _work_dtype(dtype):
    return np.float32 if np.dtype(dtype) == np.float32 else np.float64


def _fallbacks(n):
    return [np.empty(max(1, min(_FB_CAP, n)), np.int64) for _ in range(3)]


def nnz_bound(nbytes: int) -> int:
    """A bound on the features of LIBSVM records of ``nbytes`` bytes in all that native code
    decodes: a feature is a token ``I:V`` (3 bytes at least) after a blank, and a line starts with
    its label, so a record of L bytes holds at most (L - 1) // 4 of them."""
    return int(nbytes) // _FEATURE_MIN_BYTES + 1


def decode_spans(buf, starts, ends, n_features, zero_based, dtype, query_id, where, index_dtype, threads=None,
                 cap=None):
    """Records buf[starts[j]:ends[j]] -> (indptr (k+1,), indices, data, y float64 (k,),
    qid int64 (k,), has_qid uint8 (k,)); qid and has_qid are None when ``query_id`` is False and
    the plain kernel took every record. ``where(j, pos)`` names a position for errors. indptr is
    int32 when ``index_dtype`` is and the features fit (scipy's rule), else int64.

    Spans of many bytes (a window of the loader) are cut into runs of consecutive records that
    ``threads`` threads (default: the CPUs this process may use) decode at once, each into its
    slice of the output; a batch-sized input is one run, decoded on the calling thread, into
    outputs of ``cap`` features (None: the spans' ':' counted; a record past it goes to Python)."""
    k = len(starts)
    # the spans' bytes are summed only where they may fill two regions: spans inside a buffer
    # smaller than that (a loader's batch or group step) do not
    parts = 1 if not may_split(len(buf)) else span_parts(int((ends - starts).sum()) if k else 0, k, threads)
    if parts > 1:
        return _decode_spans_parallel(buf, starts, ends, n_features, zero_based, dtype, query_id, where,
                                      index_dtype, parts)
    cap = int(K.span_colons(buf, starts, ends)) if cap is None else max(0, int(cap))
    y = np.empty(k, np.float64)
    indices, data = _feature_arrays(cap, index_dtype, _work_dtype(dtype))
    indptr, nnz, nfb, fb, rec = _spans_run(buf, starts, ends, zero_based, n_features, query_id, indices, data, y)
    if rec is None:
        rec = _record_arrays(k) if query_id else (None, None, None)
    qid, has_qid, status = rec
    out = [indptr, indices[:nnz], data[:nnz], y, qid, has_qid]
    if fb is None:  # the plain kernel took every record: no token for float(), no record to re-parse
        return out
    return _finish(buf, lambda j: (int(starts[j]), int(ends[j])), status, out, fb, nfb,
                   zero_based, query_id, n_features, where)


def may_split(nbytes: int) -> bool:
    """Whether spans inside a buffer of ``nbytes`` may be decoded by more than one thread (they
    fill two regions at most when it is that large)."""
    return int(nbytes) >= 2 * _MIN_REGION


def span_parts(nbytes: int, k: int, threads=None) -> int:
    """Runs of records :func:`decode_spans` cuts ``k`` records of ``nbytes`` bytes into (one per
    thread, default: the CPUs this process may use); 1: decoded on the calling thread."""
    regions = int(nbytes) // _MIN_REGION
    if regions <= 1 or k <= 1:
        return 1  # a batch's step: no need to ask the OS for the affinity mask (a syscall per step)
    threads = usable_cores() if threads is None else max(1, int(threads))
    return max(1, min(threads, regions, int(k)))


def _record_arrays(k):
    """qid int64, has_qid uint8, status int8 (all (k,), zeros): what the full kernel writes of k
    records besides their labels."""
    return np.zeros(k, np.int64), np.zeros(k, np.uint8), np.zeros(k, np.int8)


def _feature_arrays(cap, index_dtype, work_dtype):
    """(indices index_dtype (cap,), data work_dtype (cap,)) of a step, in one recycled block.

    A loader decodes a step like the one before: its arrays take that one's memory again (numpy's
    would go back to the system, on the consumer's thread, when its last batch did). Each is
    written from its start: of a block sized by a bound, only the pages its uses reached are ever
    touched. One block for both: each Python call on a step's path costs several microseconds
    there (the step's bytes have just gone through the caches), and a block is a dozen of them."""
    return memory.OUTPUTS.empties(cap, (index_dtype, work_dtype), RECYCLE_STEP_MIN_BYTES)


def _spans_run(buf, starts, ends, zero_based, n_features, query_id, indices, data, y, rec=None):
    """Both kernels over one run of spans, writing from indices[0], data[0] and y[0] (views of the
    caller's arrays). ``rec``: (qid, has_qid, status) views of the caller's, or None: made here
    (:func:`_record_arrays`) once the full kernel runs. Returns (indptr (k+1,), nnz, fallbacks,
    fallback arrays, rec), rec None when the plain kernel took every record. indptr is int32 where
    ``indices`` are and their room fits (the features of the run cannot pass it): a read step's
    row pointers then need no narrowing before its CSR matrix is built (a pass over them under
    the GIL, a step's slowest Python line), else int64.

    The plain kernel goes as far as it can; the full kernel takes a stretch of records from the
    one it stopped at, then the plain kernel goes on. A stretch doubles while the plain kernel
    stops at once after it (data that is never plain costs a few calls, not one per record)."""
    k = len(starts)
    shift = 0 if zero_based else 1
    nf = np.int64(n_features)
    indptr = np.empty(k + 1, np.int32 if indices.dtype == np.int32 and len(indices) <= INT32_MAX else np.int64)
    j, nfb, fb, stretch = 0, 0, None, _STRETCH_RECORDS
    while True:
        j2 = KP.libsvm_spans_plain(buf, starts, ends, j, shift, nf, indices, data, y, indptr)
        if j2 >= k:
            break
        stretch = stretch * 2 if j2 == j and j else _STRETCH_RECORDS
        j = min(k, j2 + stretch)
        if fb is None:
            fb = _fallbacks(len(indices) + k)
        if rec is None:
            rec = _record_arrays(k)
        _, n = K.libsvm_spans(buf, starts[:j], ends[:j], j2, shift, nf, bool(query_id), indices, data, y, *rec[:2],
                              indptr, rec[2], *(f[nfb:] for f in fb))
        nfb += int(n)
        if j >= k:
            break
    return indptr, int(indptr[k]), nfb, fb, rec


def _lines_run(buf, a, b, shift, bound, query_id, indices, data, k0, rec, r0, fb_cap):
    """Both kernels over the region buf[a:b], writing features from k0 and records from r0, as
    :func:`_spans_run` alternates them (stretches of bytes here). Returns (records, features,
    fallbacks, min index, max index, end, fallback arrays or None); end < b: record slots ran out."""
    y, _, _, rec_end, _, _ = rec
    p, nr, nk, nfb, lo, hi = a, 0, 0, 0, np.iinfo(np.int64).max, -1
    fb, stretch, full_end = None, _STRETCH_BYTES, -1
    while True:
        p, r1, k1, lo1, hi1 = KP.libsvm_lines_plain(buf, p, b, shift, bound, indices, data, k0 + nk, y, rec_end,
                                                    r0 + nr)
        nr, nk, lo, hi = nr + r1, nk + k1, min(lo, lo1), max(hi, hi1)
        if p >= b:
            break
        stretch = stretch * 2 if p == full_end else _STRETCH_BYTES
        q = int(K.next_line(buf, min(b, p + stretch), b))
        if fb is None:
            fb = _fallbacks(fb_cap)
        r2, k2, n, lo2, hi2, full_end = K.libsvm_lines(buf, p, q, shift, bound, bool(query_id), indices, data,
                                                       k0 + nk, *rec, r0 + nr, *(f[nfb:] for f in fb))
        nr, nk, nfb, lo, hi, p = nr + r2, nk + k2, nfb + int(n), min(lo, lo2), max(hi, hi2), int(full_end)
        if p < q or p >= b:
            break
    return nr, nk, nfb, lo, hi, p, fb


def _span_runs(starts, ends, parts):
    """[0, k) cut into ``parts`` runs of consecutive records holding about equal bytes: [(j0, j1)]."""
    csum = np.cumsum(ends - starts)
    cuts = np.searchsorted(csum, csum[-1] * np.arange(1, parts) / parts, side="right")
    cuts = np.unique(np.concatenate([[0], cuts, [len(starts)]]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def _decode_spans_parallel(buf, starts, ends, n_features, zero_based, dtype, query_id, where, index_dtype,
                           parts):
    """:func:`decode_spans` by runs of records on threads: ':' counts size each run's slice of
    one output; the slices are then joined (no copy when every ':' was a feature)."""
    runs = _span_runs(starts, ends, parts)
    k = len(starts)
    y = np.empty(k, np.float64)
    qid, has_qid, status = _record_arrays(k)
    caps = on_cores(lambda r: int(K.span_colons(buf, starts[r[0]:r[1]], ends[r[0]:r[1]])), runs, "decode")
    kofs = np.concatenate([[0], np.cumsum(caps)]).astype(np.int64)
    # a loader decodes a window like the one it just let go: the memory of that one's arrays
    # is taken again (lirs.memory.Recycler), its pages in place
    indices, data = memory.OUTPUTS.empties(int(kofs[-1]), (index_dtype, _work_dtype(dtype)))

    def run(i):
        (a, b), ka, kb = runs[i], int(kofs[i]), int(kofs[i + 1])
        return _spans_run(buf, starts[a:b], ends[a:b], zero_based, n_features, query_id, indices[ka:kb],
                          data[ka:kb], y[a:b], (qid[a:b], has_qid[a:b], status[a:b]))

    # the shared threads, the caller taking the first run: no threads started and joined per window
    res = on_cores(run, list(range(len(runs))), "decode")
    nk = np.array([r[1] for r in res], np.int64)
    new_k = np.concatenate([[0], np.cumsum(nk)])
    indptr = np.concatenate([[0]] + [r[0][1:b - a + 1] + new_k[i] for i, (r, (a, b)) in enumerate(zip(res, runs))])
    fb = _run_fallbacks(res, runs, new_k)
    small = indices.dtype == np.int32 and int(new_k[-1]) <= INT32_MAX  # as a run's own (_spans_run)
    out = [indptr.astype(np.int32 if small else np.int64, copy=False), _compact(indices, kofs, nk),
           _compact(data, kofs, nk), y, qid, has_qid]
    return _finish(buf, lambda j: (int(starts[j]), int(ends[j])), status, out, fb, len(fb[0]),
                   zero_based, query_id, n_features, where)


def _run_fallbacks(res, runs, new_k):
    """Fallback tokens of all runs, their slots made global: a feature slot moves by the features
    of the runs before it, a label slot -1 - j by the records before it."""
    return _shift_fallbacks([(r[2], r[3]) for r in res], new_k[:len(res)], [run[0] for run in runs])


def _shift_fallbacks(parts, kshift, rshift):
    """Concatenated (slots, lo, hi) of the fallback tokens of ``parts`` ([(count, (slots, lo, hi)), ...]):
    part i's feature slots (>= 0) move up by ``kshift[i]``, its label slots (-1 - record) down by
    ``rshift[i]`` (records before it)."""
    slots, los, his = [np.empty(0, np.int64)], [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for i, (n, tokens) in enumerate(parts):
        if not n:
            continue
        s, lo, hi = tokens
        s = s[:n].copy()
        feat = s >= 0
        s[feat] += kshift[i]
        s[~feat] -= rshift[i]
        slots.append(s)
        los.append(lo[:n])
        his.append(hi[:n])
    return [np.concatenate(x) for x in (slots, los, his)]


def _regions(buf, parts):
    """[0, len(buf)) cut into ``parts`` regions of whole lines, of about equal size."""
    m = len(buf)
    cuts = [0]
    for q in range(1, parts):
        c = int(K.next_line(buf, max(cuts[-1], m * q // parts), m))
        if c >= m:
            break
        cuts.append(c)
    cuts.append(m)
    return list(zip(cuts[:-1], cuts[1:]))


def decode_file(buf, *, zero_based, dtype, query_id, where, threads=None):
    """A whole LIBSVM file in ``buf`` -> (indptr, indices, data, y, qid, has_qid, (min, max) index).

    ``zero_based`` True or "auto": indices stored as written; False: shifted down by one (0
    refused). Indices are int32 when every stored one fits, else int64. ``threads``: regions
    decoded at once (default: the CPUs this process may use).
    """
    threads = usable_cores() if threads is None else max(1, int(threads))
    regions = _regions(buf, max(1, min(threads, len(buf) // _MIN_REGION)))
    with ThreadPoolExecutor(len(regions)) as pool:
        census = list(pool.map(lambda r: K.libsvm_census(buf, r[0], r[1]), regions))
        kcap = np.array([c[0] for c in census], np.int64)
        rcap = _record_caps(buf, regions, census)
        kofs = np.concatenate([[0], np.cumsum(kcap)])
        rofs = np.concatenate([[0], np.cumsum(rcap)])
        n_rec, n_feat = int(rofs[-1]), int(kofs[-1])
        indices = output_empty(n_feat, np.int32)
        data = output_empty(n_feat, _work_dtype(dtype))
        ends, rec = _record_outputs(n_rec)
        shift = 0 if zero_based else 1
        bound = np.int64(INT32_MAX) + 1

        def run(i):
            a, b = regions[i]
            return _lines_run(buf, a, b, shift, bound, query_id, indices, data, int(kofs[i]), rec, int(rofs[i]),
                              int(kcap[i] + rcap[i]))

        res = list(pool.map(run, range(len(regions))))
    if any(r[5] < b for r, (_, b) in zip(res, regions)):
        raise AssertionError("LIBSVM region ran out of record slots")  # census bounds them
    nr = np.array([r[0] for r in res], np.int64)
    nk = np.array([r[1] for r in res], np.int64)
    fb = _merge_fallbacks(res, kofs, rofs, nk, nr)
    indptr = _indptr(ends, rofs, nr, kofs, nk)
    y, qid, has_qid, rec_pos, status = (_compact(rec[i], rofs, nr) for i in (0, 1, 2, 4, 5))
    indices, data = _compact(indices, kofs, nk), _compact(data, kofs, nk)
    mins = [r[3] for r in res if r[1]]
    maxs = [r[4] for r in res if r[1]]
    m = len(buf)
    out = [indptr, indices, data, y, qid, has_qid]
    out = _finish(buf, lambda j: (int(rec_pos[j]), int(K.next_line(buf, int(rec_pos[j]), m))),
                  status, out, fb, len(fb[0]), zero_based is not False, query_id, None, where,
                  bounds=(mins, maxs))
    lo = min(mins) if mins else -1
    hi = max(maxs) if maxs else -1
    return (*out, (lo, hi))


def _record_caps(buf, regions, census):
    """Records each region may hold (int64 (regions,)): its newlines, one more where it ends in a
    line without one (only the file's last region can). Exact for a file of data lines, so that
    the regions' records then lie one after another and nothing is compacted."""
    return np.array([nl + int(b > a and buf[b - 1] != 10) for (_, nl), (a, b) in zip(census, regions)], np.int64)


def _record_outputs(n_rec):
    """(ends int64 (n_rec + 1,), [y, qid, has_qid, rec_end, rec_pos, status] (n_rec,) each).

    ``rec_end`` is ``ends[1:]`` with ends[0] = 0: the record kernels write each record's end in
    the features, so that ``ends`` is the CSR indptr as written when nothing is compacted (no
    count-and-cumsum pass). y is written for every record and rec_pos only for records the full
    kernel decodes (the only ones Python may re-parse), so both stay unfilled (np.empty: pages
    never touched stay unmapped)."""
    ends = output_empty(n_rec + 1, np.int64)
    ends[0] = 0
    return ends, [output_empty(n_rec, np.float64), np.zeros(n_rec, np.int64), np.zeros(n_rec, np.uint8), ends[1:],
                  np.empty(n_rec, np.int64), np.zeros(n_rec, np.int8)]


def _indptr(ends, rofs, nr, kofs, nk):
    """CSR indptr int64 (records + 1,) from ``ends`` (:func:`_record_outputs`) of regions whose
    records start at rofs[i] (nr[i] of them) and features at kofs[i] (nk[i] of them): a view of
    ends when both lie one after another; else each region's ends moved down by the gaps before
    it, joined."""
    total = int(nr.sum())
    if np.array_equal(rofs[1:-1], (rofs[:-1] + nr)[:-1]) and np.array_equal(kofs[1:-1], (kofs[:-1] + nk)[:-1]):
        return ends[:total + 1]
    new_k = np.concatenate([[0], np.cumsum(nk)])
    parts = [ends[1 + o:1 + o + c] - (k - nkk) for o, c, k, nkk in
             zip(rofs[:-1].tolist(), nr.tolist(), kofs[:-1].tolist(), new_k[:-1].tolist())]
    return np.concatenate([np.zeros(1, np.int64)] + parts)


def _merge_fallbacks(res, kofs, rofs, nk, nr):
    """Fallback tokens of all regions, their slots moved to the compacted arrays."""
    new_k = np.concatenate([[0], np.cumsum(nk)])
    new_r = np.concatenate([[0], np.cumsum(nr)])
    return _shift_fallbacks([(r[2], r[6]) for r in res], [new_k[i] - kofs[i] for i in range(len(res))],
                            [new_r[i] - rofs[i] for i in range(len(res))])


def _compact(a, ofs, counts):
    """Region i's items a[ofs[i]:ofs[i]+counts[i]], one after another (a view when they are)."""
    total = int(counts.sum())
    if np.array_equal(ofs[:-1][1:], (ofs[:-1] + counts)[:-1]):
        return a[:total]
    return np.concatenate([a[o:o + c] for o, c in zip(ofs[:-1].tolist(), counts.tolist())])


def _finish(buf, span, status, out, fb, nfb, zero_based, query_id, n_features, where, bounds=None):
    """Python's ``float()`` for the fallback tokens, sklearn's parser for the records left, in
    record order (the first error raised is the first in the data). ``span(j)`` -> (start, end)
    of record j in buf. ``bounds`` (lists of min and max index), when given, take in the
    indices of the re-parsed records."""
    indptr, indices, data, y, qid, has_qid = out
    fb_err = None
    fb_slot, fb_lo, fb_hi = fb if nfb else (None, None, None)
    for i in range(nfb):
        slot, lo, hi = int(fb_slot[i]), int(fb_lo[i]), int(fb_hi[i])
        try:
            v = float(bytes(buf[lo:hi]))
        except ValueError:
            fb_err = -1 - slot if slot < 0 else int(np.searchsorted(indptr, slot, side="right")) - 1
            break
        if slot < 0:
            y[-1 - slot] = v
        else:
            with np.errstate(over="ignore"):  # to float32: overflow gives inf, as in sklearn
                data[slot] = v
    redo = np.flatnonzero(status != K.OK)
    if fb_err is not None:
        redo = np.union1d(redo, [fb_err]).astype(np.int64)
    slow = {}
    for j in redo.tolist():
        s, e = span(j)
        slow[j] = parse_record(buf, j, s, e, zero_based, query_id, n_features, where)
    if fb_err is not None:  # the re-parse must have raised; never accept a token float() refused
        raise AssertionError(f"token of record {fb_err} was refused by float() but re-parsed fine")
    if not slow:
        return out
    if indices.dtype == np.int32 and any(c and c[-1] > INT32_MAX for _, _, c, _ in slow.values()):
        indices = indices.astype(np.int64)  # whole-file loads: an index past int32 widens them all
    for j, (label, q, cols, vals) in slow.items():
        y[j] = label
        has_qid[j] = q is not None
        if q is not None:
            qid[j] = q
        if cols and bounds is not None:
            bounds[0].append(cols[0])
            bounds[1].append(cols[-1])
    indptr, indices, data = _splice(indptr, indices, data, slow)
    return [indptr, indices, data, y, qid, has_qid]


def _splice(indptr, indices, data, slow):
    """Insert the features of re-parsed records (``slow``: {j: (label, qid, cols, vals)}; they
    hold none yet) into the CSR arrays. Returns new (indptr, indices, data)."""
    add = np.zeros(len(indptr) - 1, np.int64)
    for j, r in slow.items():
        add[j] = len(r[2])
    if not add.any():
        return indptr, indices, data
    np.cumsum(add, out=add)
    # int32 pointers (a run's) widen where the re-parsed features take them past int32
    new_ptr = indptr.astype(np.int64 if int(indptr[-1]) + int(add[-1]) > INT32_MAX else indptr.dtype)
    new_ptr[1:] += add
    new_ind = np.empty(int(new_ptr[-1]), indices.dtype)
    new_dat = np.empty(int(new_ptr[-1]), data.dtype)
    prev = 0
    for j in sorted(slow) + [len(indptr) - 1]:
        a, b, na = indptr[prev], indptr[j], new_ptr[prev]
        new_ind[na:na + b - a] = indices[a:b]
        new_dat[na:na + b - a] = data[a:b]
        if j < len(indptr) - 1:
            cols, vals = slow[j][2], slow[j][3]
            new_ind[new_ptr[j]:new_ptr[j + 1]] = cols
            with np.errstate(over="ignore"):
                new_dat[new_ptr[j]:new_ptr[j + 1]] = vals
        prev = j + 1
    return new_ptr, new_ind, new_dat
