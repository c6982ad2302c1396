"""Per-format batch assembly: the bytes of one read step -> (X, y), and rows of steps -> a batch.

A read step (:class:`lirs.steps.ReadStep`) is a set of extents read into one aligned buffer and the
records they hold. :class:`StepDecoder` turns that buffer into the step's rows: a CSR matrix for
LIBSVM, an ndarray for ``npy``/``fixed``, a list of ``bytes`` for ``lines`` and ``tfrecord`` (the
payloads, framing and CRCs checked); :func:`rows` and
:func:`stack` cut and join steps into batches without copying CSR arrays when one step feeds one
batch. The decoders themselves (:mod:`lirs.decode`) know buffers, not files or plans.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .constants import INT32_MAX
from .cores import usable_cores
from .decode import (SpanDecoder, csr_batch, csr_pieces, decode_fixed, decode_libsvm, decode_lines, decode_tfrecord,
                     owned, refuse_libsvm_options, resolve_libsvm_params)
from .dirfiles import first_few
from .errors import DataError
from .kernels import io as KI
from .kernels import rows as KR
from .svmdecode import may_split, nnz_bound, span_parts
from .svmlight import Where


class StepDecoder:
    """Decodes the read steps of one index with fixed options (thread-safe: no mutable state).

    ``n_features``/``zero_based``: LIBSVM options (None/"auto": by sklearn's rule from the index);
    ``dtype``: numpy dtype of LIBSVM values (``npy``/``fixed`` keep the file's dtype); ``verify``:
    check the payload CRC of every TFRecord record read (the length CRC is always checked);
    ``cores``: the cores the loader may use (None: the usable cores, as they are at each step);
    ``wide_threads``: the threads that decode a wide step (None: as below).

    A wide step (a LIBSVM window) is decoded by ``cores - 1`` threads: the core left over is the
    consumer's. With every core decoding, a consumer delivering the previous window's batches was
    preempted while it held the GIL (2 cores, from /dev/shm, three runs each way in turn: window
    epochs ran 2.46-2.65M records/s with every core decoding, 2.70-2.83M with a core left over).
    """

    def __init__(self, index, *, n_features=None, zero_based="auto", dtype=np.float32, verify=False, cores=None,
                 wide_threads=None):
        self.index = index
        self.cores = None if cores is None else max(1, int(cores))
        self.wide_threads = None if wide_threads is None else max(1, int(wide_threads))
        self.dtype = np.dtype(dtype)
        self.verify = bool(verify)
        if index.format == "libsvm":
            self.n_features, self.zero_based = resolve_libsvm_params(index, zero_based, n_features)
            self._spans = SpanDecoder(self.n_features, self.zero_based, self.dtype)
        else:
            refuse_libsvm_options(first_few(index.paths), index.format, n_features, zero_based)
            self.n_features, self.zero_based = None, None

    def __call__(self, step, buf, buf_pos, got):
        """(X, y) of the records of ``step``: ``buf`` uint8 holds its extents at ``buf_pos`` int64
        (e,), ``got`` int64 (e,) the bytes each extent read returned. Raises DataError naming the
        file, byte and record when a record's bytes are missing or malformed."""
        ids = np.asarray(step.ids, np.int64)
        if len(ids) == 0:
            return self.empty()
        rext = np.asarray(step.rec_extent, np.int32)
        rpos = np.asarray(step.rec_pos, np.int64)
        rlen = np.asarray(step.rec_len, np.int64)
        # where each record lies in the buffer and whether the reads returned all of it, in one
        # native pass (a group step holds ~10k records: numpy's gathers cost ~40 us under the GIL)
        starts, ends = np.empty(len(ids), np.int64), np.empty(len(ids), np.int64)
        short, payload = KI.record_spans(np.asarray(buf_pos, np.int64), np.asarray(got, np.int64), rext, rpos,
                                         rlen, starts, ends)
        if short >= 0:
            raise _incomplete(self.index, step, ids, rext, rpos, rlen, got, short)
        fmt = self.index.format
        if fmt == "libsvm":
            return self._libsvm(step, buf, ids, rext, rpos, starts, ends, payload)
        if fmt in ("npy", "fixed"):
            return (decode_fixed(buf, starts, self.index.record_dtype, self.index.record_shape),
                    self.index.labels_of(ids, checked=False))
        if fmt == "tfrecord":
            # errors name the record within its file, as the index scan does
            files = np.asarray(step.ext_file)[rext]
            local = ids - np.asarray(self.index.file_starts, np.int64)[files]
            try:  # its framing was checked whole when indexed: an error now is the index and data disagreeing
                return self._by_file(decode_tfrecord, step, buf, local, rext, rpos, starts, ends,
                                     verify=self.verify), None
            except DataError as e:
                raise _disagreeing(e)
        return decode_lines(buf, starts, ends), self.index.labels_of(ids, checked=False)

    def wide(self, step, nbytes: int | None = None) -> bool:
        """Whether decoding ``step`` spreads over several cores by itself (a LIBSVM window).
        ``nbytes``: its buffer's size when known, a bound on its records' bytes (the records of a
        buffer too small to split are not summed)."""
        if self.index.format != "libsvm" or (nbytes is not None and not may_split(nbytes)):
            return False
        return span_parts(step.payload_bytes, len(step.ids), self.decode_threads()) > 1

    def decode_threads(self) -> int:
        """Threads that decode a wide step: ``wide_threads`` when given, else the loader's cores but
        one (at least one)."""
        if self.wide_threads is not None:
            return self.wide_threads
        return max(1, (usable_cores() if self.cores is None else self.cores) - 1)

    def _libsvm(self, step, buf, ids, rext, rpos, starts, ends, payload):
        # the spans lie in the buffer: the extents were read whole (record_spans) around them. A
        # step's outputs are sized from its records' bytes (``payload``), not from a pass counting
        # them; a window's by that count still: sized by the bound, its outputs were the size of
        # the read buffers and took their recycled blocks, every page of them already touched
        where = StepWhere(self.index, step, ids, rext, rpos, starts)
        try:
            if may_split(len(buf)):
                return decode_libsvm(buf, starts, ends, n_features=self.n_features, zero_based=self.zero_based,
                                     dtype=self.dtype, trusted=True, where=where, threads=self.decode_threads())
            # a batch-sized step (a group's, an instance batch's) on this thread: arrays made here are
            # marked read-only in place (the kernels' types), not viewed
            starts.flags.writeable = ends.flags.writeable = False
            return self._spans(buf, starts, ends, where, nnz_bound(payload))
        except DataError as e:
            raise _disagreeing(e)

    def _by_file(self, decode, step, buf, ids, rext, rpos, starts, ends, **opts):
        """``decode(buf, starts, ends, source=, file_offsets=, record_ids=, **opts)`` of a step whose
        errors name the file of the bad record."""
        idx = self.index
        file_offsets = np.asarray(step.ext_offset, np.int64)[rext] + rpos
        files = np.asarray(step.ext_file)[rext]
        one = idx.nfiles == 1 or (files == files[0]).all()
        source = idx.paths[int(files[0])] if len(files) and one else ""
        try:
            return decode(buf, starts, ends, source=source, file_offsets=file_offsets, record_ids=ids, **opts)
        except DataError:
            if one:
                raise
            # name the right file: decode the records of each file on its own to find the culprit
            for f in np.unique(files):
                m = files == f
                decode(buf, starts[m], ends[m], source=idx.paths[int(f)], file_offsets=file_offsets[m],
                       record_ids=ids[m], **opts)
            raise

    def empty(self):
        """(X, y) of zero records, shaped like any other batch of this dataset."""
        idx = self.index
        ids = np.empty(0, np.int64)
        if idx.format == "libsvm":  # as the decoder makes one (scipy's constructor refuses float16)
            it = np.int32 if self.n_features <= INT32_MAX else np.int64
            X = csr_batch(np.empty(0, self.dtype), np.empty(0, it), np.zeros(1, it), (0, self.n_features))
            return X, np.empty(0, np.float64)
        if idx.format in ("npy", "fixed"):
            return np.empty((0, *idx.record_shape), idx.record_dtype), idx.labels_of(ids)
        return [], idx.labels_of(ids)


class StepWhere:
    """``where(j, pos)`` of the records of a read step, for error messages: the file record ``j``
    came from, the line and byte of ``pos`` (a position in the step's buffer) in it, and the
    record's ID. Worked out only when an error is raised (a step of one file or many)."""

    def __init__(self, index, step, ids, rext, rpos, starts):
        self.index, self.step, self.ids, self.rext, self.rpos, self.starts = index, step, ids, rext, rpos, starts

    def __call__(self, j: int, pos: int) -> str:
        e = int(self.rext[j])
        f = int(self.step.ext_file[e])
        at = np.array([int(self.step.ext_offset[e]) + int(self.rpos[j])], np.int64)
        return Where(self.index.paths[f], self.starts[j:j + 1], at, self.ids[j:j + 1])(0, pos)


# errors of a Loader's own options (n_features, zero_based), not of the records' grammar
_OPTION_ERRORS = ("for n_features=", "indices are one-based here")


def _disagreeing(e: DataError) -> DataError:
    """``e``, a record's grammar (or TFRecord framing) error in a Loader's step, saying what it
    means: the index scan found every record well formed, so the index no longer places records
    where the data has them (a file changed without a size or mtime to show it, a corrupt offset
    word that looked plausible). An error of the Loader's own options is left as it is."""
    msg = str(e)
    if not any(s in msg for s in _OPTION_ERRORS):
        e.args = (f"{msg}; it was well formed when indexed, so the index and the data disagree: "
                  "`lirs index --check` says whether the file changed or its sidecar is corrupt",)
    return e


def _incomplete(idx, step, ids, rext, rpos, rlen, got, j: int) -> DataError:
    """The error for record ``j`` of a step, whose bytes a read did not return (the file was
    truncated or rewritten after indexing): never hand out a record with missing bytes."""
    e = int(rext[j])
    f = int(step.ext_file[e])
    off = int(step.ext_offset[e])
    return DataError(
        f"{idx.paths[f]}: record {int(ids[j])} needs bytes {off + int(rpos[j])}.."
        f"{off + int(rpos[j] + rlen[j])} but the file ends at byte {off + int(got[e])} "
        f"(truncated after indexing? re-run `lirs index`)")


def rows(X, lo: int, hi: int):
    """Rows lo:hi of a decoded step: :func:`cut_rows` of one piece (a kernel of its own: this runs
    once a batch for window batches)."""
    # the type first: issparse's isinstance goes through the ABC machinery, once per batch
    if type(X) is sp.csr_matrix or sp.issparse(X):
        ip, ind = X.indptr, X.indices
        a, b = int(ip[lo]), int(ip[hi])
        indptr = _row_pointers(X, b - a, hi - lo + 1)
        KR.rebase_into(ip, lo, indptr)
        return csr_batch(X.data[a:b], ind[a:b], indptr, (hi - lo, X.shape[1]))
    return X[lo:hi]


def cut_rows(X, cuts: list) -> list:
    """Rows ``cuts[i]:cuts[i + 1]`` of a decoded step for each i (``cuts``: ints, ascending). A CSR
    piece shares the step's data and indices (no copy, no checks): the step is never modified and
    lives as long as a batch refers to it. The pieces' row pointers are rebased to start at 0
    (int32 where the indices are and they fit, as :func:`~lirs.decode.csr_batch` makes them), all
    of them by one call of a kernel that keeps the GIL (:mod:`lirs.kernels.rows`)."""
    if not (type(X) is sp.csr_matrix or sp.issparse(X)):
        return [X[lo:hi] for lo, hi in zip(cuts[:-1], cuts[1:])]
    ip, ind, data, n = X.indptr, X.indices, X.data, X.shape[1]
    c = np.asarray(cuts, np.int64)
    at = ip[c].tolist()  # each cut's first value: one gather, not two numpy scalars a piece
    indptr = _row_pointers(X, at[-1] - at[0], cuts[-1] - cuts[0] + len(cuts) - 1)
    KR.rebase_each(ip, c, indptr)
    return csr_pieces(data, ind, indptr, at, [hi - lo for lo, hi in zip(cuts[:-1], cuts[1:])], n)


def _row_pointers(X, nnz: int, n: int) -> np.ndarray:
    """An empty array of ``n`` row pointers for rows of CSR ``X`` holding ``nnz`` values: int32
    where the indices are and they fit (scipy's rule, as :func:`~lirs.decode.csr_batch` keeps),
    else the step's own dtype."""
    small = X.indices.dtype == np.int32 and nnz <= INT32_MAX
    return np.empty(n, np.int32 if small else X.indptr.dtype)


def detached(step_rows, lo: int, hi: int):
    """(X, y) of rows lo:hi of a decoded step ``step_rows`` = (X, y), sharing no array with it
    (the step's memory can go while these rows wait for the rest of their batch)."""
    X, y = step_rows
    return owned(rows(X, lo, hi)), None if y is None else y[lo:hi].copy()


def stack(Xs: list, ys):
    """Rows of several decoded steps as one batch: (X, y)."""
    first = Xs[0]
    y = None if ys is None else np.concatenate(ys)
    if isinstance(first, list):
        return [r for X in Xs for r in X], y
    if isinstance(first, np.ndarray):  # into the file's dtype: concatenate makes >f4 native, packs padded records
        out = np.empty((sum(len(X) for X in Xs), *first.shape[1:]), first.dtype)
        return np.concatenate(Xs, axis=0, out=out), y
    # CSR pieces end to end: the arrays concatenate, each indptr shifted by the values before it
    # int64 pointers: the pieces' values together may pass int32 where no piece's do (cast back to
    # the pieces' dtype, they wrapped negative); csr_batch narrows them to int32 where they fit
    nnz = np.cumsum([0] + [int(X.indptr[-1]) for X in Xs], dtype=np.int64)
    indptr = np.concatenate([Xs[0].indptr[:1].astype(np.int64)] + [X.indptr[1:] + off for X, off in zip(Xs, nnz[:-1])])
    indices = np.concatenate([X.indices for X in Xs])
    if indptr[-1] > INT32_MAX:  # scipy's rule: one index dtype, int64 once the values pass int32
        indices = indices.astype(np.int64)
    return csr_batch(np.concatenate([X.data for X in Xs]), indices, indptr,
                     (sum(X.shape[0] for X in Xs), first.shape[1])), y


def rows_of(step_rows, lo: int, hi: int):
    """(X, y) of rows lo:hi of one decoded step ``step_rows`` = (X, y): the step itself when that
    is all of it, else slices sharing its arrays (:func:`batch_of` of one part)."""
    X, y = step_rows
    if lo == 0 and hi == _nrows(X):
        return X, y
    return rows(X, lo, hi), None if y is None else y[lo:hi]


def rows_each(step_rows, cuts: list) -> list:
    """:func:`rows_of` of rows ``cuts[i]:cuts[i + 1]`` of one decoded step for each i (the batches
    of a shared step, cut in one pass): a list of (X, y)."""
    if len(cuts) == 2:
        return [rows_of(step_rows, cuts[0], cuts[1])]
    X, y = step_rows
    Xs = cut_rows(X, cuts)
    if y is None:
        return [(x, None) for x in Xs]
    return [(x, y[lo:hi]) for x, lo, hi in zip(Xs, cuts[:-1], cuts[1:])]


def batch_of(got: list, empty):
    """(X, y) of one batch from its parts ``got``: a list of ``((X, y), lo, hi)``, rows lo:hi of
    decoded steps in order; ``empty()`` gives the (X, y) of a batch with no records."""
    if not got:
        return empty()
    if len(got) == 1:
        return rows_of(*got[0])
    ys = None if got[0][0][1] is None else [yy[lo:hi] for (_, yy), lo, hi in got]
    return stack([rows(X, lo, hi) for (X, _), lo, hi in got], ys)


def _nrows(X) -> int:
    return len(X) if isinstance(X, list) else X.shape[0]
