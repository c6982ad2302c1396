"""Seeded synthetic datasets shaped like the LIRS paper's Table 1, for trying and benchmarking lirs.

    generate(profile, path, *, records=None, size=None, order="shuffled", seed=0, progress=None,
             workers=None) -> dict
    records_for_size(profile, size, *, seed=0) -> int
    sample(profile, records, *, seed=0, order="shuffled") -> (X, y)
    labels_path(path) -> str

Profiles (``PROFILES``):

========  =================================================================  ==============
profile   file                                                               bytes/record
========  =================================================================  ==============
kdd       LIBSVM text, 22-45 nnz (mean ~35) over 29,890,095 features         ~355
webspam   LIBSVM text, 1,500-4,200 nnz (mean ~2,900) over 16,609,143 feat.   ~44,600
higgs     ``.npy`` float32 (n, 28); labels in ``labels_path(path)``          112
epsilon   ``.npy`` float32 (n, 2000); labels in ``labels_path(path)``        8,000
lines     JSON lines ``{"id":J,"label":±1,"text":"..."}``, 50 B - 4 KB       ~900
========  =================================================================  ==============

Feature indices are drawn log-uniform over [1, dim] (a frequent head a small sample can learn;
50% of draws for kdd, 35% for webspam) or uniform (a long tail reaching tens of millions).

Labels are always ±1: ``+1``/``-1`` in LIBSVM, ``1``/``-1`` (JSON ints) in lines, and float64
``+1.0``/``-1.0`` in the ``.npy`` labels file. They come from a hidden linear model (seeded) plus
Gaussian noise sized so that the best linear classifier scores about 90%; a plain logistic
regression on a few thousand records already gets well above chance. LIBSVM indices are 1-based,
sorted and unique; values are ``1`` or short decimals (at most 6 places) that parse back exactly.

``order="shuffled"`` writes records in random order; ``order="sorted"`` writes the same records
(the file is an exact permutation of the shuffled one) grouped by label, all ``-1`` first — the
worst case for shuffle buffers. Output is byte-identical for a seed, whatever the batch size.
Files are written under a temporary name and renamed at the end (no partial file on Ctrl-C).
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .. import seeds
from ..errors import UsageError
from ..external.disk import free_bytes
from ..inputs import labels_path  # noqa: F401 - part of this module's API (see above)
from ..litter import out_dir, publishing, temp_name
from ..units import format_bytes, parse_size
from .genout import check_name, check_outputs
from .kernels import gen as K

ORDERS = ("shuffled", "sorted")

# What the profiles imitate; "target" is the mean bytes per record the parameters were tuned to.
PROFILES = {
    "kdd": dict(kind="sparse", ext=".svm", target=362, dim=29_890_095, kmin=25, kmax=45, p_head=0.5,
                p_one=0.6, qmin=1, qmax=3, signal=256,
                about="sparse LIBSVM like kdd2010 (bridge): ~35 nnz/record over 29.9M features"),
    "webspam": dict(kind="sparse", ext=".svm", target=44_560, dim=16_609_143, kmin=1660, kmax=4580,
                    p_head=0.35, p_one=0.0, qmin=4, qmax=6, signal=256,
                    about="sparse LIBSVM like webspam trigram: thousands of nnz/record over 16.6M features"),
    "higgs": dict(kind="dense", ext=".npy", target=112, dim=28, signal=28,
                  about="dense float32 x 28 in .npy (higgs-like)"),
    "epsilon": dict(kind="dense", ext=".npy", target=8000, dim=2000, signal=64,
                    about="dense float32 x 2000 in .npy (epsilon-like)"),
    "lines": dict(kind="lines", ext=".jsonl", target=900, lmin=50, lmax=4096, vocab=4096, signal=256,
                  about='JSON lines {"id","label","text"} of about 50 B to 4 KB'),
}

# Label noise sd as a fraction of the score's sd: 0.33 makes the Bayes-optimal linear
# classifier right ~90% of the time (accuracy = 1 - arccos(1/sqrt(1+r^2))/pi).
NOISE_RATIO = 0.33

# the uses of a profile's block of 16 seed purposes (seeds.GEN_BASE + 16 * profile number + use)
_USE_RECORDS, _USE_WEIGHTS, _USE_PILOT, _USE_VOCAB, _USE_SUPPORT = 0, 1, 2, 3, 4
_PILOT_BYTES = 4 << 20          # pilot sample used to center the model and estimate record size
_BATCH_BYTES = 8 << 20          # output produced per kernel call
_POW10 = 10.0 ** np.arange(19)

_JSON_ID, _JSON_LABEL, _JSON_TEXT, _JSON_END = b'{"id":', b',"label":', b',"text":"', b'"}\n'
_LINES_OVERHEAD = len(_JSON_ID) + 7 + len(_JSON_LABEL) + 1 + len(_JSON_TEXT) + len(_JSON_END)


def _purpose(profile: str, use: int) -> int:
    """The seed purpose of ``use`` for ``profile``: its own block of 16 in :mod:`lirs.seeds`."""
    return seeds.GEN_BASE + 16 * list(PROFILES).index(profile) + use


def _ndigits(v: int) -> int:
    return len(str(int(v)))


@dataclass
class _Model:
    """Everything the kernels need for one (profile, seed): keys, hidden weights, centering."""
    profile: str
    seed: int

    def __post_init__(self):
        p = self.p = PROFILES[self.profile]
        self.kind = p["kind"]
        self.key = np.uint64(seeds.key(self.seed, 0, _purpose(self.profile, _USE_RECORDS)))
        wkey = np.uint64(seeds.key(self.seed, 0, _purpose(self.profile, _USE_WEIGHTS)))
        if self.kind == "sparse":
            self.w = np.empty(p["signal"] + 1, np.float64)
            K.hashed_normals(wkey, self.w.shape[0], self.w)
            self.w[0] = 0.0                       # indices are 1-based
            k = p["kmax"]
            self.max_line = 3 + k * (2 + _ndigits(p["dim"]) + max(1, 2 + p["qmax"]))
        elif self.kind == "dense":
            w = np.empty(p["dim"], np.float64)
            K.hashed_normals(wkey, w.shape[0], w)
            if p["signal"] < p["dim"]:
                # a sparse ground truth: only `signal` random columns matter
                rng = seeds.rng(self.seed, 0, _purpose(self.profile, _USE_SUPPORT))
                keep = np.zeros(p["dim"], bool)
                keep[rng.choice(p["dim"], p["signal"], replace=False)] = True
                w[~keep] = 0.0
            self.w = w
            self.max_line = 4 * p["dim"]
        else:
            rng = seeds.rng(self.seed, 0, _purpose(self.profile, _USE_VOCAB))
            nv = p["vocab"]
            lens = 2 + np.minimum(rng.geometric(0.3, nv), 9)          # 3..11 letters, mostly short
            letters = rng.integers(ord("a"), ord("z") + 1, int(lens.sum()), dtype=np.uint8)
            self.vocab = letters
            self.vocab_off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            self.vocab_len = lens.astype(np.int64)
            self.w = np.empty(p["signal"], np.float64)
            K.hashed_normals(wkey, self.w.shape[0], self.w)
            self.ln = (np.log(p["lmin"]), np.log(p["lmax"]), _LINES_OVERHEAD, np.log(nv + 1.0))
            self.pieces = tuple(np.frombuffer(b, np.uint8) for b in (_JSON_ID, _JSON_LABEL, _JSON_TEXT, _JSON_END))
            self.max_line = _LINES_OVERHEAD + 13 + p["lmax"] + int(lens.max()) + 1
        self._tls = threading.local()
        self.center, self.noise_sd = self._calibrate()

    @property
    def scratch(self) -> tuple:
        """Per-thread work arrays of the kernels (threads format batches concurrently)."""
        sc = getattr(self._tls, "scratch", None)
        if sc is None:
            if self.kind == "sparse":
                k = self.p["kmax"]
                sc = (np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.int64))
            elif self.kind == "lines":
                sc = (np.empty(self.p["lmax"], np.int64),)
            else:
                sc = (np.empty((1, self.p["dim"]), np.float32),)
            self._tls.scratch = sc
        return sc

    # -- the hidden model's centering, from a pilot sample under its own key

    def _pilot_ids(self, calibrate: bool = False) -> np.ndarray:
        # scores are cheap (no formatting): calibrate on more records than the size estimate uses
        if calibrate:
            n = min(4096, max(512, 4_000_000 // self.p.get("kmax", 1)))
        else:
            n = max(64, min(4096, _PILOT_BYTES // self.p["target"]))
        return np.arange(n, dtype=np.int64)

    def _calibrate(self):
        if self.kind == "dense":
            # x ~ N(0, 1) iid: score ~ N(0, |w|^2)
            return 0.0, NOISE_RATIO * float(np.linalg.norm(self.w))
        ids = self._pilot_ids(calibrate=True)
        pkey = np.uint64(seeds.key(self.seed, 0, _purpose(self.profile, _USE_PILOT)))
        score, z = np.empty(ids.shape[0]), np.empty(ids.shape[0])
        if self.kind == "sparse":
            p = self.p
            K.sparse_scores(pkey, ids, p["kmin"], p["kmax"], p["dim"], p["p_head"], p["p_one"], p["qmin"],
                            p["qmax"], self.w, _POW10, *self.scratch, score, z)
        else:
            K.lines_scores(pkey, ids, *self.ln, self.vocab_len, self.w, *self.scratch, score, z)
        return float(np.median(score)), NOISE_RATIO * float(np.std(score))

    def mean_record_bytes(self) -> float:
        """Mean bytes per record, measured on the pilot sample (exact for dense profiles)."""
        if self.kind == "dense":
            return 4.0 * self.p["dim"]
        ids = self._pilot_ids()
        buf = np.empty(ids.shape[0] * self.max_line, np.uint8)
        lab = np.empty(ids.shape[0], np.int8)
        pkey = np.uint64(seeds.key(self.seed, 0, _purpose(self.profile, _USE_PILOT)))
        return self._text(pkey, ids, buf, lab) / ids.shape[0]

    # -- kernels

    def batch_records(self) -> int:
        return max(1, _BATCH_BYTES // self.p["target"])

    def labels(self, ids: np.ndarray) -> np.ndarray:
        """int8 ±1 labels of records ``ids`` (int64)."""
        out = np.empty(ids.shape[0], np.int8)
        p = self.p
        if self.kind == "sparse":
            K.sparse_labels(self.key, ids, p["kmin"], p["kmax"], p["dim"], p["p_head"], p["p_one"], p["qmin"],
                            p["qmax"], self.w, _POW10, self.center, self.noise_sd, *self.scratch, out)
        elif self.kind == "dense":
            K.dense_labels(self.key, ids, self.w, self.center, self.noise_sd, *self.scratch, out)
        else:
            K.lines_labels(self.key, ids, *self.ln, self.vocab_len, self.w, self.center, self.noise_sd,
                           *self.scratch, out)
        return out

    def _text(self, key, ids, buf, out_labels) -> int:
        p = self.p
        if self.kind == "sparse":
            return K.sparse_text(key, ids, p["kmin"], p["kmax"], p["dim"], p["p_head"], p["p_one"], p["qmin"],
                                 p["qmax"], self.w, _POW10, self.center, self.noise_sd, *self.scratch, buf, out_labels)
        return K.lines_text(key, ids, *self.ln, self.vocab, self.vocab_off, self.w, self.center, self.noise_sd,
                            *self.scratch, *self.pieces, buf, out_labels)

    def text(self, ids, buf, out_labels) -> int:
        """Format records ``ids`` (int64) into ``buf`` (uint8, >= len(ids)*max_line); returns bytes."""
        return self._text(self.key, ids, buf, out_labels)

    def rows(self, ids, out, out_labels) -> None:
        """Dense rows of records ``ids`` into ``out`` (float32, (len(ids), dim)), labels float64."""
        K.dense_rows(self.key, ids, self.w, self.center, self.noise_sd, out, out_labels)

    def csr(self, ids):
        """CSR arrays (indptr int64, 1-based indices int64, data float64) and int8 labels."""
        p = self.p
        n = ids.shape[0]
        indptr = np.empty(n + 1, np.int64)
        indices = np.empty(n * p["kmax"], np.int64)
        data = np.empty(n * p["kmax"], np.float64)
        lab = np.empty(n, np.int8)
        nnz = K.sparse_csr(self.key, ids, p["kmin"], p["kmax"], p["dim"], p["p_head"], p["p_one"], p["qmin"],
                           p["qmax"], self.w, _POW10, self.center, self.noise_sd, *self.scratch,
                           indptr, indices, data, lab)
        return indptr, indices[:nnz], data[:nnz], lab


def _split(k: int, parts: int) -> list[tuple[int, int]]:
    """[lo, hi) pieces of range(k), at most ``parts`` of them, none empty."""
    edges = np.linspace(0, k, min(parts, k) + 1).astype(int)
    return [(int(lo), int(hi)) for lo, hi in zip(edges[:-1], edges[1:])]


def _map(pool, fn, pieces):
    """Run ``fn(lo, hi)`` over the pieces, in ``pool`` when there is one; results in order."""
    if pool is None or len(pieces) == 1:
        return [fn(lo, hi) for lo, hi in pieces]
    return list(pool.map(lambda lh: fn(*lh), pieces))


def _id_batches(model: _Model, n: int, order: str, pool=None, workers: int = 1, bar_labels=None):
    """Yield int64 arrays of at most ``model.batch_records()`` record ids, in file order.

    ``shuffled``: records are i.i.d., so generation order 0..n-1 is already a random order.
    ``sorted``: one labels pass over all records (int8, n bytes of memory), then the ``-1``
    records and the ``+1`` records, each in id order.
    """
    b = model.batch_records()
    if order == "shuffled":
        for a in range(0, n, b):
            yield np.arange(a, min(n, a + b), dtype=np.int64)
        return
    lab = np.empty(n, np.int8)
    lb = max(b, 1 << 16)
    for a in range(0, n, lb):
        ids = np.arange(a, min(n, a + lb), dtype=np.int64)

        def one(lo, hi, ids=ids, a=a):
            lab[a + lo:a + hi] = model.labels(ids[lo:hi])

        _map(pool, one, _split(ids.shape[0], workers))
        if bar_labels is not None:
            bar_labels.update(ids.shape[0])
    if bar_labels is not None:
        bar_labels.close()
    for c in (-1, 1):
        # batches of exactly b ids (the last shorter): the output buffers hold b records
        rest = np.empty(0, np.int64)
        for a in range(0, n, b):
            sel = np.flatnonzero(lab[a:a + b] == c).astype(np.int64) + a
            rest = np.concatenate([rest, sel]) if rest.shape[0] else sel
            if rest.shape[0] >= b:
                yield rest[:b]
                rest = rest[b:]
        if rest.shape[0]:
            yield rest


def _check(profile, records, size, order, seed):
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    if order not in ORDERS:
        raise UsageError(f"unknown order {order!r}; expected 'shuffled' or 'sorted'")
    if (records is None) == (size is None):
        raise UsageError("give exactly one of records= (a count) or size= (bytes, or a string like '500MB')")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"seed must be a non-negative integer, got {seed!r}")
    if records is not None and (isinstance(records, bool) or not isinstance(records, (int, np.integer))
                                or records <= 0):
        raise UsageError(f"records must be a positive integer, got {records!r}")


def records_for_size(profile: str, size, *, seed: int = 0) -> int:
    """Number of records that makes a ``profile`` file about ``size`` bytes (int or '500MB')."""
    _check(profile, None, size, "shuffled", seed)
    return _records_for(_Model(profile, int(seed)), size)


def _records_for(model: "_Model", size) -> int:
    nbytes = parse_size(size)
    if nbytes <= 0:
        raise UsageError(f"size must be positive, got {size!r}")
    header = 128 if model.kind == "dense" else 0      # .npy header, padded to 64 bytes
    return max(1, int(round((nbytes - header) / model.mean_record_bytes())))


def _check_room(path: str, model: "_Model", n: int) -> None:
    """UsageError when the filesystem of ``path`` has not room for ``n`` records of ``model``
    (their mean size, labels included), before a byte is written."""
    need = int(n * (model.mean_record_bytes() + (8 if model.kind == "dense" else 0)))
    free = free_bytes(os.path.dirname(path))
    if need > free:
        raise UsageError(f"{path}: {n:,} records of {model.profile} need about {format_bytes(need)}, and its "
                         f"filesystem has {format_bytes(free)} free")


def _npy_header(f, shape, descr) -> None:
    np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})


def generate(profile: str, path, *, records: int | None = None, size=None, order: str = "shuffled",
             seed: int = 0, progress: bool | None = None, workers: int | None = None) -> dict:
    """Write a synthetic dataset of ``profile`` to ``path``.

    Give ``records`` (count) or ``size`` (bytes or a string like ``"500MB"``; the record count is
    chosen so the data file is about that size). ``progress``: None = tqdm bar when stderr is a
    tty, False/True = off/on. ``workers``: formatting threads (default: up to 2 of the CPUs);
    the bytes written do not depend on it. Returns a dict: ``path`` (data file), ``paths``
    (every file written, data first; dense profiles add ``labels_path``), ``records``,
    ``bytes`` (data file), ``seconds``, ``bytes_per_s``, ``profile``, ``order``, ``seed``,
    ``label_counts`` {"-1": int, "+1": int}. Raises UsageError on bad arguments.
    """
    _check(profile, records, size, order, seed)
    check_name(profile, PROFILES[profile]["ext"], os.fspath(path))
    if workers is None:
        workers = max(1, min(2, os.cpu_count() or 1))
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise UsageError(f"workers must be a positive integer, got {workers!r}")
    t0 = time.perf_counter()
    path = os.path.abspath(os.fspath(path))
    out_dir(path, "-o")
    seed = int(seed)
    model = _Model(profile, seed)
    n = int(records) if records is not None else _records_for(model, size)
    outs = check_outputs(path, labels=model.kind == "dense")
    _check_room(path, model, n)
    tmps = [temp_name(p) for p in outs]
    disable = None if progress is None else not progress
    counts = np.zeros(2, np.int64)
    bar_labels = None
    if order == "sorted":
        bar_labels = tqdm(total=n, unit="rec", unit_scale=True, desc=f"lirs gen {profile}: labels",
                          disable=disable, leave=False)
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        with tqdm(total=n, unit="rec", unit_scale=True, desc=f"lirs gen {profile}", disable=disable,
                  leave=False) as bar, ThreadPoolExecutor(1) as writer:
            files = [open(t, "wb") for t in tmps]
            try:
                if model.kind == "dense":
                    _npy_header(files[0], (n, model.p["dim"]), "<f4")
                    _npy_header(files[1], (n,), "<f8")
                _write_all(model, n, order, files, pool, workers, writer, bar, bar_labels, counts)
                for f in files:  # on the disk before the names are: a crash leaves the old file or the new
                    f.flush()
                    os.fsync(f.fileno())
            finally:
                for f in files:
                    f.close()
        # a run writing the same output publishes before or after this one, never between these
        # renames (its data beside our labels); an old labels file goes first: a run stopped between
        # the renames leaves data without labels (said at the next index), never new data beside old labels
        with publishing(path):
            for p in outs[1:]:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            for t, p in zip(tmps, outs):
                os.replace(t, p)
    except BaseException:
        # no partial output: drop the temp files whatever stopped us (Ctrl-C included)
        for t in tmps:
            try:
                os.unlink(t)
            except FileNotFoundError:
                pass
        raise
    finally:
        if bar_labels is not None:
            bar_labels.close()
        if pool is not None:
            pool.shutdown()
    secs = time.perf_counter() - t0
    nbytes = os.path.getsize(path)
    return {"profile": profile, "path": path, "paths": outs,
            "labels_path": outs[1] if len(outs) > 1 else None, "records": n, "bytes": nbytes,
            "seconds": secs, "bytes_per_s": nbytes / secs if secs > 0 else None, "order": order, "seed": seed,
            "label_counts": {"-1": int(counts[0]), "+1": int(counts[1])}}


def _write_all(model, n, order, files, pool, workers, writer, bar, bar_labels, counts):
    # Two sets of output buffers: the workers fill one (kernels release the GIL) while the
    # writer thread writes the other.
    b = model.batch_records()
    dense = model.kind == "dense"
    bufs = [np.empty((b, model.p["dim"]), np.float32) if dense else np.empty(b * model.max_line, np.uint8)
            for _ in range(2)]
    labs = [np.empty(b, np.float64 if dense else np.int8) for _ in range(2)]
    pending = []
    try:
        for i, ids in enumerate(_id_batches(model, n, order, pool, workers, bar_labels)):
            buf, lab = bufs[i % 2], labs[i % 2]
            k = ids.shape[0]
            if dense:
                _map(pool, lambda lo, hi: model.rows(ids[lo:hi], buf[lo:hi], lab[lo:hi]), _split(k, workers))
                chunks = [(files[0], buf[:k]), (files[1], lab[:k])]
            else:
                ml = model.max_line

                def one(lo, hi):
                    return lo * ml, model.text(ids[lo:hi], buf[lo * ml:hi * ml], lab[lo:hi])

                chunks = [(files[0], buf[off:off + nb]) for off, nb in _map(pool, one, _split(k, workers))]
            pos = int(np.count_nonzero(lab[:k] > 0))
            counts[1] += pos
            counts[0] += k - pos
            if pending:
                pending.pop().result()      # batch i-1 is written; its buffers are free for batch i+1
            pending.append(writer.submit(_write_chunks, chunks))
            bar.update(k)
        if pending:
            pending.pop().result()
    finally:
        # on any error (Ctrl-C too) let the last write finish before the caller closes the files
        for f in pending:
            f.exception()


def _write_chunks(chunks):
    for f, arr in chunks:
        f.write(memoryview(np.ascontiguousarray(arr)).cast("B"))


def sample(profile: str, records: int, *, seed: int = 0, order: str = "shuffled"):
    """The records ``generate`` would write, in memory (for tests and small experiments).

    Returns ``(X, y)`` with y float64 ±1 (n,): sparse profiles give X as a
    ``scipy.sparse.csr_matrix`` (float64, 0-based columns: column c is LIBSVM feature c+1, shape
    (n, dim)); dense profiles a float32 ndarray (n, dim); ``lines`` a list of ``bytes`` lines.
    """
    _check(profile, records, None, order, seed)
    model = _Model(profile, int(seed))
    ids = np.concatenate(list(_id_batches(model, int(records), order)))
    n = ids.shape[0]
    if model.kind == "dense":
        X = np.empty((n, model.p["dim"]), np.float32)
        y = np.empty(n, np.float64)
        model.rows(ids, X, y)
        return X, y
    if model.kind == "lines":
        buf = np.empty(n * model.max_line, np.uint8)
        lab = np.empty(n, np.int8)
        nb = model.text(ids, buf, lab)
        return buf[:nb].tobytes().splitlines(keepends=True), lab.astype(np.float64)
    import scipy.sparse as sp

    indptr, indices, data, lab = model.csr(ids)
    X = sp.csr_matrix((data, indices - 1, indptr), shape=(n, model.p["dim"]))
    return X, lab.astype(np.float64)
