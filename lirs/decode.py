"""Decoders: bytes read from the data file -> training arrays.

* :func:`decode_libsvm` — LIBSVM/SVMlight record spans -> ``scipy.sparse.csr_matrix`` + labels, with
  the exact semantics of ``sklearn.datasets.load_svmlight_file`` (comments, blank lines, ``qid``,
  one- or zero-based indices, Python ``float()`` rounding, the same inputs rejected).
* :func:`load_svmlight` — a whole file, as ``load_svmlight_file`` would load it (its CSR index
  arrays int32 where they fit, as scipy chooses).
* :func:`resolve_libsvm_params` — ``n_features`` and ``zero_based`` of an indexed dataset, by
  sklearn's rule, from the index's feature-index range.
* :func:`decode_fixed` — fixed-size records -> ndarray; :func:`decode_lines` — records -> bytes;
  :func:`decode_tfrecord` — whole TFRecord records -> their payloads (bytes), CRCs checked
  (:mod:`lirs.tfrecord`).

The hot path is one numba pass per record (``lirs.kernels.libsvm``, driven by ``lirs.svmdecode``)
that releases the GIL; a whole file is decoded by every core at once. Numbers are rounded exactly
(Clinger / Eisel-Lemire). Records or tokens the kernels cannot finish exactly (rare: underscores
in numbers, ``inf``/``nan``, more than 19 significant digits, errors) are parsed in Python, token
by token as sklearn does, so results are bit-identical and every error names the file, the byte
offset, the record and the token.

One deliberate extension: sklearn stores feature indices in a C ``int`` and fails with
``OverflowError`` beyond 2**31 - 1; lirs accepts any index below ``n_features`` and returns int64
``indices`` when ``n_features > 2**31 - 1``.
"""
from __future__ import annotations

import errno
import os

import numpy as np
import scipy.sparse as sp

from .api import positive_int, strict_bool, whole
from .constants import INT32_MAX, INT64_MAX
from .errors import DataError, UsageError
from .kernels import libsvm as K
from .kernels.rows import rebase_into
from .svmdecode import decode_file, decode_spans
from .svmlight import Where, WhereLine, line_number
from .tfrecord import payloads as decode_tfrecord

__all__ = ["decode_libsvm", "decode_fixed", "decode_lines", "decode_tfrecord", "load_svmlight",
           "resolve_libsvm_params", "NO_QID"]

#: ``qid`` given to records without a ``qid:`` token by :func:`decode_libsvm` (``query_id=True``).
NO_QID = np.iinfo(np.int64).min


def _as_u8(buf) -> np.ndarray:
    """A read-only uint8 (m,) view (one array type for the kernels: one compiled variant)."""
    a = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
    if a.dtype != np.uint8 or a.ndim != 1:
        a = a.reshape(-1).view(np.uint8)
    return _ro(a)


def _ro(a: np.ndarray) -> np.ndarray:
    a = a.view()
    a.flags.writeable = False
    return a


def _csr_checked(data, indices, indptr, shape):
    """csr_matrix of these arrays through scipy's constructor (its checks run on an empty matrix;
    the arrays are put in afterwards, so scipy does not downcast them)."""
    X = sp.csr_matrix(shape, dtype=data.dtype)
    X.data, X.indices, X.indptr = data, indices, indptr
    return X


def _csr_template():
    """The instance attributes scipy's constructor sets besides the arrays and the shape (``maxprint``
    in scipy 1.10-1.17), or None when a matrix built from them would differ from a constructed one
    (a scipy that stores its state differently): then :func:`csr_batch` goes through the constructor."""
    try:
        ref = _csr_checked(np.zeros(2, np.float32), np.array([0, 2], np.int32), np.array([0, 1, 2], np.int32), (2, 3))
        base = {k: v for k, v in vars(ref).items() if k not in _CSR_OWN}
        X = object.__new__(sp.csr_matrix)
        X.__dict__.update(base, data=ref.data, indices=ref.indices, indptr=ref.indptr, _shape=(2, 3))
        X.check_format(full_check=True)
        if vars(X).keys() != vars(ref).keys() or X.shape != ref.shape or X.nnz != 2 or X.format != "csr":
            return None
        if not (X.toarray() == ref.toarray()).all() or not X.has_sorted_indices:
            return None
    except Exception:  # noqa: BLE001 - any surprise: the checked constructor, as before
        return None
    return base


# what csr_batch sets itself; the sortedness flags stay unset, computed by scipy when first asked for
_CSR_OWN = frozenset({"data", "indices", "indptr", "_shape", "_has_sorted_indices", "_has_canonical_format"})
_CSR_BASE = _csr_template()


def csr_batch(data, indices, indptr, shape):
    """``scipy.sparse.csr_matrix`` holding exactly these arrays, without scipy's validation.

    data (nnz,), indices int32/int64 (nnz,), indptr (k+1,) with indptr[0] == 0, shape (k, n): valid
    by construction (the decoders and row slicing make them). scipy's constructor costs ~10 us a
    call, most of it Python holding the GIL (``issparse``, ``_get_index_dtype``, ``check_format``)
    on the consumer's thread once per batch; this costs ~1 us. ``has_sorted_indices`` is computed
    by scipy when asked, as for a constructed matrix. indptr int64 becomes int32 when indices are
    int32 and it fits (scipy's rule: one index dtype, the smallest that fits)."""
    if indices.dtype == np.int32 and indptr.dtype != np.int32 and (len(indptr) == 0 or indptr[-1] <= INT32_MAX):
        # cast by a kernel that keeps the GIL (a read step's pointers: numpy's astype lets it go
        # over 500 values, and the pool thread then waits behind the others to take it back)
        narrow = np.empty(len(indptr), np.int32)
        if len(indptr):
            rebase_into(indptr, 0, narrow)  # indptr[0] == 0: the same values
        indptr = narrow
    if _CSR_BASE is None:
        return _csr_checked(data, indices, indptr, shape)
    X = object.__new__(sp.csr_matrix)
    X.__dict__.update(_CSR_BASE, data=data, indices=indices, indptr=indptr, _shape=(int(shape[0]), int(shape[1])))
    return X


def owned(X):
    """``X`` (a CSR matrix, an ndarray or a list of ``bytes``) with arrays of its own, sharing none
    with the read step it was cut from; a CSR matrix's three arrays are copied (``X.copy()`` goes
    through scipy's constructor, which refuses float16 values)."""
    if hasattr(X, "indptr"):
        return csr_batch(X.data.copy(), X.indices.copy(), X.indptr.copy(), X.shape)
    return X.copy() if isinstance(X, np.ndarray) else list(X)


def csr_pieces(data, indices, indptr, at: list, sizes: list, n: int) -> list:
    """:func:`csr_batch` of consecutive pieces of three arrays: piece i has ``sizes[i]`` rows (k),
    values and indices ``[at[i], at[i + 1])`` of ``data``/``indices``, and the next k + 1 row
    pointers of ``indptr`` (each piece's back to back, starting at 0, in their final dtype: none is
    narrowed). The pieces of a shared read step, made in one call: a Python call a batch is
    microseconds on the consumer's thread, under the GIL."""
    if _CSR_BASE is None:
        out, o = [], 0
        for i, k in enumerate(sizes):
            out.append(csr_batch(data[at[i]:at[i + 1]], indices[at[i]:at[i + 1]], indptr[o:o + k + 1], (k, n)))
            o += k + 1
        return out
    new, base, csr, n = object.__new__, _CSR_BASE, sp.csr_matrix, int(n)
    out, o = [], 0
    for i, k in enumerate(sizes):
        X = new(csr)
        a, b = at[i], at[i + 1]
        X.__dict__.update(base, data=data[a:b], indices=indices[a:b], indptr=indptr[o:o + k + 1], _shape=(k, n))
        out.append(X)
        o += k + 1
    return out


def decode_libsvm(buf, starts, ends, *, n_features: int, zero_based: bool, dtype=np.float32,
                  source: str = "", file_offsets=None, query_id: bool = False, record_ids=None, threads=None,
                  trusted: bool = False, where=None, nnz_bound: int | None = None):
    """Decode LIBSVM records into a CSR matrix, with ``load_svmlight_file``'s semantics.

    Parameters
    ----------
    buf : uint8 ndarray (m,) (or any buffer)
        Bytes holding the records.
    starts, ends : int64 (k,)
        Record j is ``buf[starts[j]:ends[j]]``: one data line, possibly followed (or preceded) by
        blank or comment-only lines, which are skipped. Any order, overlaps allowed.
    n_features : int
        Columns of X; an index at or beyond it (after the one-based shift) is a DataError.
    zero_based : bool
        False: indices in the text are one-based, shifted down by one, and 0 is rejected.
    dtype : float32 (default) or float64 (other dtypes: parsed as float64, then cast)
    source : str
        File name used in error messages.
    file_offsets : int64 (k,) or None
        File offset of ``buf[starts[j]]``, for error messages; None: ``starts`` are file offsets.
    query_id : bool
        Also return the ``qid`` of every record (int64 (k,), ``NO_QID`` where absent).
    record_ids : int64 (k,) or None
        Global record IDs, for error messages (default: the position j in this call).
    threads : int or None
        Threads that decode runs of records at once when the spans hold many bytes (a loader
        window); default: the CPUs this process may use. Batch-sized inputs use the calling thread.
    trusted : bool
        The spans are known to lie in ``buf`` (a Loader's, from its index and its reads): their
        O(k) bounds check is skipped. False (the default) checks them.
    where : callable or None
        ``where(j, pos) -> str`` naming byte ``pos`` of ``buf`` in record j for error messages,
        instead of ``source``, ``file_offsets`` and ``record_ids`` (a Loader's read step, whose
        records may come from several files, works out only the one an error names).
    nnz_bound : int or None
        A bound on the stored values, that sizes the outputs instead of a pass counting the spans'
        ``:`` (a Loader's read step passes :func:`lirs.svmdecode.nnz_bound` of its records' bytes).
        A record whose values would pass it is decoded by Python's parser: a bound too low costs
        time, never a value. Spans decoded by several threads count their ``:`` regardless.

    Returns
    -------
    X : scipy.sparse.csr_matrix (k, n_features)
        ``indptr`` and ``indices`` int32 (int64 if n_features or the number of stored values
        exceeds 2**31 - 1, as scipy chooses), ``data`` dtype;
        indices sorted within each row; explicit zeros kept (as sklearn keeps them).
    y : float64 (k,)
    qid : int64 (k,), only when ``query_id``.

    Raises
    ------
    DataError (a ValueError) naming ``source``, the file byte offset, the record and the token.
    """
    buf = _as_u8(buf)
    starts = _ro(np.ascontiguousarray(starts, np.int64))  # read-only: one compiled variant
    ends = _ro(np.ascontiguousarray(ends, np.int64))
    if starts.ndim != 1 or starts.shape != ends.shape:
        raise UsageError(f"starts and ends must be 1-D of the same length, got {starts.shape} and "
                         f"{ends.shape}")
    n_features = check_n_features(n_features)
    if len(starts) and not trusted and (starts.min() < 0 or ends.max() > len(buf) or np.any(ends < starts)):
        raise UsageError(f"record spans must satisfy 0 <= start <= end <= len(buf) = {len(buf)}")
    if file_offsets is not None:
        file_offsets = np.asarray(file_offsets, np.int64)
        if file_offsets.shape != starts.shape:
            raise UsageError("file_offsets must have the shape of starts")
    index_dtype = np.int32 if n_features <= INT32_MAX else np.int64
    if where is None:
        where = Where(source, starts, file_offsets, record_ids)
    indptr, indices, data, y, qid, has_qid = decode_spans(buf, starts, ends, n_features, bool(zero_based),
                                                          dtype, query_id, where, index_dtype, threads, nnz_bound)
    if query_id:
        qid[has_qid == 0] = NO_QID
    X = _csr_of(indptr, indices, data, dtype, (len(starts), n_features))
    return (X, y, qid) if query_id else (X, y)


def _csr_of(indptr, indices, data, dtype, shape):
    """The CSR matrix of decoded arrays, its values cast to ``dtype`` where the decode worked in
    another (float32 and float64 are decoded as they are)."""
    if data.dtype != dtype:
        with np.errstate(over="ignore"):
            data = np.asarray(data, dtype=dtype)
    return csr_batch(data, indices, indptr, shape)


class SpanDecoder:
    """:func:`decode_libsvm` of a loader's read steps: spans known to lie in their buffer, decoded
    on the calling thread, with the options fixed once (no query IDs).

    ``decoder(buf, starts, ends, where, nnz_bound)`` -> (X, y): ``buf`` a uint8 (m,) array,
    ``starts``/``ends`` read-only int64 (k,) arrays (the types the kernels are compiled for),
    ``where`` and ``nnz_bound`` as for :func:`decode_libsvm`. It skips what :func:`decode_libsvm`
    does for any caller's arguments (conversions, checks, the choice of dtypes): each Python call
    on a read step's path costs microseconds (the step's bytes have just gone through the caches)."""

    def __init__(self, n_features: int, zero_based: bool, dtype):
        self.n_features, self.zero_based, self.dtype = int(n_features), bool(zero_based), np.dtype(dtype)
        self.index_dtype = np.int32 if self.n_features <= INT32_MAX else np.int64

    def __call__(self, buf, starts, ends, where, nnz_bound: int):
        indptr, indices, data, y, _, _ = decode_spans(_as_u8(buf), starts, ends, self.n_features, self.zero_based,
                                                      self.dtype, False, where, self.index_dtype, 1, nnz_bound)
        return _csr_of(indptr, indices, data, self.dtype, (len(starts), self.n_features)), y


def _map_file(path) -> np.ndarray:
    """The file's bytes, mapped read-only and pre-faulted (no copy out of the page cache, which
    costs a sixth of a whole-file decode); a plain read where mapping is not possible."""
    import mmap
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0 or not hasattr(mmap, "MAP_POPULATE"):
            return np.fromfile(f, np.uint8)
        try:
            mm = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
        except (OSError, ValueError):  # not mappable (a pipe, some FUSE filesystems)
            return np.fromfile(f, np.uint8)
    return np.frombuffer(mm, np.uint8)


def _read_file(path) -> np.ndarray:
    path = os.fspath(path)
    ext = os.path.splitext(path)[1]
    try:
        if ext == ".gz":
            import gzip
            with gzip.open(path, "rb") as f:
                return np.frombuffer(f.read(), np.uint8)
        if ext == ".bz2":
            import bz2
            with bz2.open(path, "rb") as f:
                return np.frombuffer(f.read(), np.uint8)
        return _map_file(path)
    except FileNotFoundError:
        # as scikit-learn's load_svmlight_file and the Loader do: a missing file is not bad data
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a LIBSVM file") from None


def load_svmlight(path, *, n_features=None, dtype=np.float64, zero_based="auto", query_id=False,
                  threads=None):
    """Load a whole LIBSVM/SVMlight file as ``sklearn.datasets.load_svmlight_file`` does: the same
    values, shape, dtype, labels and qids, the same inputs refused. One documented difference: the
    CSR index arrays (``indptr``, ``indices``) are int32 where they fit, as scipy chooses, where
    sklearn's may be int64 (recent releases).

    Parameters mirror sklearn's: ``n_features`` None (inferred: max index + 1 after the shift, or
    1 when there is no feature) or an int >= that; ``zero_based`` True, False or "auto" (one-based
    iff there is at least one feature and no index 0); ``.gz``/``.bz2`` are decompressed.
    ``threads``: parts of the file decoded at once, an int >= 1 (None: every CPU this process may use).

    Returns
    -------
    X : scipy.sparse.csr_matrix (n, n_features), indptr and indices int32 (int64 if needed, as
        scipy chooses: see above), data ``dtype``
    y : float64 (n,)
    qid : int64 (number of records with a qid,), only when ``query_id`` (as sklearn: the qids of
        the records that have one, in file order)
    """
    zero_based, dtype = check_zero_based(zero_based), check_dtype(dtype)
    if n_features is not None:
        n_features = check_n_features(n_features)
    # before the file is read: threads=0 or "2" was taken as 1 or 2 parts, query_id="no" as true
    query_id = strict_bool("query_id", query_id)
    threads = None if threads is None else positive_int("threads", threads)
    path = os.fspath(path)
    buf = _as_u8(_read_file(path))
    # "auto" parses as zero-based (0 allowed) and shifts afterwards when every index is > 0
    indptr, indices, data, y, qid, has_qid, (lo, hi) = decode_file(
        buf, zero_based=zero_based, dtype=dtype, query_id=query_id, where=WhereLine(path, buf),
        threads=threads)
    if zero_based == "auto" and lo > 0:
        np.subtract(indices, 1, out=indices)
        hi -= 1
    n_f = hi + 1 if hi >= 0 else 1
    if n_features is None:
        n_features = n_f
    elif int(n_features) < n_f:
        raise DataError(f"{path}: n_features was set to {n_features}, but the file contains "
                        f"{n_f} features")
    n_features = int(n_features)
    if n_features > INT32_MAX:
        indices = indices.astype(np.int64)
    if data.dtype != dtype:
        with np.errstate(over="ignore"):
            data = np.asarray(data, dtype=dtype)
    X = csr_batch(data, indices, indptr, (len(y), n_features))
    if query_id:
        return X, y, qid[has_qid.astype(bool)]
    return X, y


def resolve_libsvm_params(index, zero_based="auto", n_features=None):
    """``(n_features, zero_based)`` of an indexed LIBSVM dataset, by ``load_svmlight_file``'s rule.

    Uses ``index.meta["min_index"]`` and ``["max_index"]`` (raw indices as written; the scanner
    records them, ``max_index < 0`` meaning no feature at all; ``min_index`` is 0 where a file of
    several has no feature, as ``load_svmlight_files`` then reads them zero-based, and
    ``["least_index"]``, where recorded, is the smallest index written). ``zero_based="auto"``:
    zero-based iff some index is 0 or some file of records has none (a file of no records counts as an
    empty one: not at all); ``False`` refuses a real index 0.
    ``n_features`` defaults to ``max_index + 1`` (zero-based) or ``max_index`` (one-based), at
    least 1; a smaller explicit value is an error.
    """
    zero_based = check_zero_based(zero_based)
    meta = getattr(index, "meta", None) or {}
    src = ", ".join(getattr(index, "paths", ()) or ()) or "the dataset"
    if "min_index" not in meta or "max_index" not in meta:
        raise UsageError(f"the index of {src} does not record the feature-index range "
                         f"(min_index/max_index); re-run `lirs index` to rebuild it")
    lo, hi = int(meta["min_index"]), int(meta["max_index"])
    has_features = hi >= 0
    if zero_based == "auto":
        zero_based = (not has_features) or lo == 0
    # an index built before least_index was recorded says 0 for a featureless file too: refused as then
    elif zero_based is False and has_features and int(meta.get("least_index", lo)) == 0:
        raise DataError(_where_index_zero(index) or f"{src}: zero_based=False, but the data holds feature index 0")
    if not has_features:
        n_f = 1
    else:
        n_f = hi + 1 if zero_based else hi
    if n_features is None:
        n_features = n_f
    elif check_n_features(n_features) < n_f:
        raise UsageError(f"n_features was set to {n_features}, but {src} contains {n_f} features")
    return int(n_features), bool(zero_based)


def refuse_libsvm_options(src: str, fmt: str, n_features=None, zero_based="auto") -> None:
    """UsageError where ``n_features`` or ``zero_based`` is set for data of ``src`` (its files, named)
    whose format ``fmt`` is not LIBSVM: its records take their shape from that format, and the
    setting would be ignored unseen."""
    given = [f"{k}={v!r}" for k, v, unset in (("n_features", n_features, None), ("zero_based", zero_based, "auto"))
             if v != unset]
    if given and fmt != "libsvm":
        raise UsageError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to LIBSVM data only; "
                         f"{src} is {fmt}, whose records its own format shapes: leave {'them' if len(given) > 1 else 'it'} unset")


def _where_index_zero(index) -> str:
    """``"FILE: line L, byte B: ... '0:1' ..."`` of the first feature index 0 of an indexed LIBSVM
    dataset, or "" where the index keeps no scan marks (error path only: the marks at every MiB
    hold the least index so far, so one MiB of records is read and parsed)."""
    from .preads import read_at
    from .svmlight import TokenError, line_tokens, parse_tokens

    for f, path in enumerate(index.paths):
        marks = index.file_marks(f)
        if marks is None:
            return ""
        hit = np.flatnonzero(marks[:, 0] == 0)
        first, a = int(index.file_starts[f]), 0
        if not len(hit) or (hit[0] and marks[hit[0] - 1, 0] == 0):
            continue  # none here, or the least index so far was 0 before this file
        if hit[0]:
            a = int(marks[hit[0] - 1, 3])
        b = int(marks[hit[0], 3])
        if b <= a:
            continue
        _, s, e = index.spans(np.arange(first + a, first + b))
        data = read_at(path, int(e[-1] - s[0]), int(s[0]))
        at = 0
        for line in data.split(b"\n"):
            toks = line_tokens(line)
            try:
                if toks:
                    parse_tokens(toks, zero_based=False, values=False)
            except TokenError as t:
                if "index 0" in t.message:
                    off = int(s[0]) + at + t.at
                    return f"{path}: line {line_number(path, off)}, byte {off}: {t.message}"
            at += len(line) + 1
    return ""


def check_zero_based(value):
    """``zero_based`` as True, False or "auto" (a numpy bool as the bool it is), or UsageError: an
    int 0 or 1 would read as one bool where it is tested for identity and as the other where it is
    tested for truth (sklearn's ``load_svmlight_file`` refuses them too)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value == "auto":
        return value
    raise UsageError(f"zero_based must be True, False or 'auto', got {value!r} ({type(value).__name__})")


def check_dtype(value) -> np.dtype:
    """``dtype`` (of LIBSVM values) as a numpy dtype of numbers (bool, integer, float, complex), or
    UsageError naming it: a torch dtype, a string or an object dtype holds no decoded value."""
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is None or dt.kind not in "biufc":
        hint = " (a torch dtype: give its numpy one, e.g. np.float32)" if "torch" in str(type(value)) else ""
        raise UsageError(f"dtype must be a numpy dtype of numbers (np.float32, 'float64', ...), got {value!r}{hint}")
    return dt


def check_n_features(value) -> int:
    """``n_features`` as an int in [1, 2**63 - 1], or UsageError (a float such as 4.9, a string, a
    value no int64 index holds), as sklearn refuses them; not truncated or converted."""
    n = whole("n_features", value, 1)
    if n > INT64_MAX:
        raise UsageError(f"n_features must be <= 2**63 - 1 (indices are int64), got {n}")
    return n


def decode_fixed(buf, starts, dtype, shape):
    """Copy fixed-size records out of ``buf``.

    buf uint8 (m,); starts int64 (k,) (byte offset of each record in buf); dtype, shape: one
    record's layout (record size = itemsize * prod(shape)). Returns a new ndarray (k, *shape) of
    ``dtype`` (byte order kept as given).
    """
    buf = _as_u8(buf)
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    starts = np.ascontiguousarray(starts, np.int64)
    rs = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    k = len(starts)
    if k and (starts.min() < 0 or starts.max() + rs > len(buf)):
        raise UsageError(f"a record of {rs} bytes at offset {int(starts.max())} runs past the "
                         f"buffer of {len(buf)} bytes")
    out = np.empty((k, *shape), dtype)
    if rs and k:  # no records: nothing to copy (reshape(0, -1) has no width to infer)
        K.gather_fixed(buf, starts, rs, out.reshape(k, -1).view(np.uint8))
    return out


def decode_lines(buf, starts, ends, *, keep_newline=False):
    """Records as bytes: ``[bytes(buf[s:e]) for s, e in zip(starts, ends)]``.

    The record's line terminator (``\\n`` or ``\\r\\n``) is removed unless ``keep_newline``.
    Returns list[bytes] of length k.
    """
    buf = _as_u8(buf)
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    mv = memoryview(buf)
    out = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        b = mv[s:e].tobytes()
        if not keep_newline and b.endswith(b"\n"):
            b = b[:-2] if b.endswith(b"\r\n") else b[:-1]
        out.append(b)
    return out
