"""Training with lirs: a linear SVM trained batch by batch in any record order, and a tiny SGD loop.

:class:`LinearSVM` is an L2-regularized linear SVM without a bias term (LIBLINEAR's ``-B -1``),
solved by LIBLINEAR's dual coordinate descent (``-s 1``, squared hinge, by default; ``-s 3``, hinge,
with ``loss="hinge"``). Each delivered batch's records are visited in delivery order and the dual
variable of every record is kept by record ID, so the order can come from anywhere: a lirs
permutation, BMF blocks (each trained whole with a few inner passes, like LIBLINEAR cdblock),
a shuffle buffer or the file order::

    svm = LinearSVM(loader.n_features, loader.index.n, C=1.0)
    for epoch in range(10):
        for batch in loader.epoch(epoch):
            svm.partial_fit(batch.ids, batch.X, batch.y)
        f = svm.objective(X_all, y_all)        # primal objective of the whole data set

:func:`reference_objective` gives f*, the optimum used in the relative function value
difference ``(f - f*) / f*`` (the LIRS paper's Fig. 9 and Table 3).
"""
from __future__ import annotations

import os
import threading

import numpy as np
import scipy.sparse as sp

from ..errors import DataError, UsageError

LOSSES = ("squared_hinge", "hinge")

# SeedSequence purposes of this module (see the seed scheme in DESIGN.md)
PURPOSE_INNER = 81      # order of a block's records in each inner pass
PURPOSE_REFERENCE = 82  # order of the in-memory reference run


def as_pm1(y, source: str = "the labels") -> np.ndarray:
    """Binary labels as float64 (k,) in {-1, +1}; accepts -1/+1 and 0/1.

    Raises DataError naming the first other value (a multi-class or regression target).
    """
    y = np.asarray(y, dtype=np.float64)
    bad = ~((y == 1.0) | (y == -1.0) | (y == 0.0))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise DataError(f"{source}: label {float(y[j])!r} at position {j}; a binary SVM needs labels -1/+1 (or 0/1)")
    return np.where(y > 0, 1.0, -1.0)


def _loss_params(loss: str, C: float) -> tuple[float, float]:
    if loss == "squared_hinge":
        return 0.5 / C, np.inf
    if loss == "hinge":
        return 0.0, float(C)
    raise UsageError(f"loss must be one of {LOSSES}, got {loss!r}")


def _csr(X, n_features: int) -> sp.csr_matrix:
    X = X if sp.isspmatrix_csr(X) or isinstance(X, sp.csr_array) else sp.csr_matrix(X)
    if X.shape[1] > n_features:
        raise UsageError(f"X has {X.shape[1]} columns but the model has {n_features} features")
    return X


def margins(w: np.ndarray, X) -> np.ndarray:
    """w . x_r for every row: float64 (k,). X: CSR matrix or dense (k, d) with d <= len(w)."""
    from .kernels import train as K

    if sp.issparse(X):
        X = _csr(X, len(w))
        out = np.empty(X.shape[0], np.float64)
        K.csr_margins(X.indptr, X.indices, X.data, w, out)
        return out
    X = np.asarray(X)
    X = X.reshape(len(X), -1)
    return X @ w[: X.shape[1]].astype(X.dtype if X.dtype.kind == "f" else np.float64)


def primal_objective(w: np.ndarray, X, y, C: float = 1.0, loss: str = "squared_hinge") -> float:
    """``0.5 w.w + C sum_i loss(y_i w.x_i)`` over (X, y); w float64 (d,), y (k,) labels."""
    from .kernels import train as K

    _loss_params(loss, C)
    y = as_pm1(y)
    m = np.ascontiguousarray(margins(w, X), np.float64)
    return 0.5 * float(w @ w) + C * float(K.loss_sum(m, y, loss == "squared_hinge"))


def relative_difference(f, f_star: float):
    """The relative function value difference ``(f - f*) / f*`` (float or float64 array)."""
    return (np.asarray(f, np.float64) - f_star) / abs(f_star)


class LinearSVM:
    """L2-regularized linear SVM (no bias) trained by dual coordinate descent, batch by batch.

    Parameters
    ----------
    n_features : int
        Length of w (columns of the data).
    n_records : int
        Records in the data set: one dual variable per record ID in [0, n_records).
    C : float
        Cost of the loss (LIBLINEAR ``-c``).
    loss : {"squared_hinge", "hinge"}
        LIBLINEAR ``-s 1`` (default) or ``-s 3``.

    Attributes: ``w`` float64 (n_features,), ``alpha`` float64 (n_records,), ``updates`` (records
    visited so far).
    """

    def __init__(self, n_features: int, n_records: int, C: float = 1.0, loss: str = "squared_hinge"):
        if int(n_features) < 1 or int(n_records) < 1:
            raise UsageError(f"n_features and n_records must be >= 1, got {n_features}, {n_records}")
        if not C > 0:
            raise UsageError(f"C must be > 0, got {C}")
        self.C = float(C)
        self.loss = loss
        self.diag, self.upper = _loss_params(loss, self.C)
        self.w = np.zeros(int(n_features), np.float64)
        self.alpha = np.zeros(int(n_records), np.float64)
        self.updates = 0

    def partial_fit(self, ids, X, y, passes: int = 1, rng: np.random.Generator | None = None) -> float:
        """Visit the records of one batch: once in the given order (``passes=1``, no ``rng``), or
        ``passes`` times, each in a fresh random order drawn from ``rng`` (a BMF block).

        ids int64 (k,) record IDs; X CSR (k, d) or dense (k, d); y (k,) labels -1/+1 or 0/1.
        Returns the largest |projected gradient| of the last pass (a convergence hint).
        """
        from .kernels import train as K

        ids = np.ascontiguousarray(ids, np.int64)
        k = len(ids)
        if X.shape[0] != k or len(y) != k:
            raise UsageError(f"ids, X and y disagree in length: {k}, {X.shape[0]}, {len(y)}")
        if k and (ids.min() < 0 or ids.max() >= len(self.alpha)):
            raise UsageError(f"record IDs must lie in [0, {len(self.alpha)}); got {ids.min()}..{ids.max()}")
        y = as_pm1(y)
        if passes < 1:
            raise UsageError(f"passes must be >= 1, got {passes}")
        sparse = sp.issparse(X)
        if sparse:
            X = _csr(X, len(self.w))
        else:
            X = np.ascontiguousarray(X).reshape(k, -1)
            if X.shape[1] > len(self.w):
                raise UsageError(f"X has {X.shape[1]} columns but the model has {len(self.w)} features")
        maxpg = 0.0
        for _ in range(int(passes)):
            rows = np.arange(k, dtype=np.int64) if rng is None else rng.permutation(k).astype(np.int64)
            if sparse:
                maxpg = K.dcd_csr(X.indptr, X.indices, X.data, y, ids, rows, self.alpha, self.w,
                                  self.diag, self.upper)
            else:
                maxpg = K.dcd_dense(X, y, ids, rows, self.alpha, self.w[: X.shape[1]], self.diag, self.upper)
            self.updates += k
        return float(maxpg)

    def decision_function(self, X) -> np.ndarray:
        """w . x for every row: float64 (k,)."""
        return margins(self.w, X)

    def predict(self, X) -> np.ndarray:
        """+1/-1 float64 (k,)."""
        return np.where(self.decision_function(X) > 0, 1.0, -1.0)

    def score(self, X, y) -> float:
        """Accuracy on (X, y)."""
        return float(np.mean(self.predict(X) == as_pm1(y)))

    def objective(self, X, y) -> float:
        """Primal objective of the data set (X, y) (all records: the data set's objective)."""
        return primal_objective(self.w, X, y, self.C, self.loss)

    def objective_of_batches(self, batches) -> float:
        """Primal objective summed over an iterable of batches (each with ``.X`` and ``.y``) that
        together hold every record once: for data sets that do not fit in memory."""
        from .kernels import train as K

        s = 0.0
        for b in batches:
            m = np.ascontiguousarray(margins(self.w, b.X), np.float64)
            s += float(K.loss_sum(m, as_pm1(b.y), self.loss == "squared_hinge"))
        return 0.5 * float(self.w @ self.w) + self.C * s


def fit_in_memory(X, y, C: float = 1.0, loss: str = "squared_hinge", *, epochs: int = 1000,
                  tol: float = 1e-6, seed: int = 0, order: str = "random",
                  history: bool = True) -> tuple[LinearSVM, list]:
    """Dual coordinate descent on the whole data set in memory, a fresh random permutation every
    epoch (LIBLINEAR's own scheme, without shrinking), until the largest projected gradient of an
    epoch is below ``tol`` or ``epochs`` ran.

    Returns (model, objectives per epoch (only the last one when not ``history``)).
    ``order="file"`` visits records in file order instead.
    """
    X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
    y = as_pm1(y)
    n = X.shape[0]
    svm = LinearSVM(X.shape[1], n, C, loss)
    ids = np.arange(n, dtype=np.int64)
    hist = []
    from .kernels import train as K

    for e in range(int(epochs)):
        if order == "random":
            rows = np.random.default_rng(np.random.SeedSequence([seed, e, PURPOSE_REFERENCE])).permutation(n)
        elif order == "file":
            rows = ids
        else:
            raise UsageError(f"order must be 'random' or 'file', got {order!r}")
        maxpg = K.dcd_csr(X.indptr, X.indices, X.data, y, ids, rows.astype(np.int64), svm.alpha, svm.w,
                          svm.diag, svm.upper)
        svm.updates += n
        if history:
            hist.append(svm.objective(X, y))
        if maxpg < tol:
            break
    if not history:
        hist.append(svm.objective(X, y))
    return svm, hist


def reference_objective(X, y, C: float = 1.0, loss: str = "squared_hinge", *, epochs: int = 1000,
                        tol: float = 1e-6, seed: int = 0) -> float:
    """f*: the primal objective after a long in-memory random-order run of the same solver
    (:func:`fit_in_memory`): an upper bound of the optimum, tight once the run has converged (exact
    coordinate descent never raises the objective, so the last value is the best)."""
    _, hist = fit_in_memory(X, y, C, loss, epochs=epochs, tol=tol, seed=seed, history=False)
    return float(min(hist))


def train_sgd(loader, epochs: int, *, lr: float = 0.1, l2: float = 1e-4) -> np.ndarray:
    """Mini-batch SGD for L2-regularized logistic regression in plain numpy/scipy: the whole
    "use lirs in your loop" example. ``loader`` is a :class:`lirs.Loader` (any granularity);
    returns w float64 (n_features,).

    ::

        w = np.zeros(n_features)
        for epoch in range(epochs):
            for b in loader.epoch(epoch):                 # a fresh permutation every epoch
                y = (b.y > 0).astype(float)               # labels -1/+1 -> 0/1
                p = 1 / (1 + np.exp(-(b.X @ w)))
                grad = b.X.T @ (p - y) / len(y) + l2 * w
                w -= lr * grad
    """
    d = loader.n_features if loader.n_features is not None else int(np.prod(loader.index.record_shape))
    w = np.zeros(d, np.float64)
    for epoch in range(int(epochs)):
        step = lr / np.sqrt(1.0 + epoch)  # a slowly decaying step keeps late epochs from bouncing
        for b in loader.epoch(epoch):
            X = b.X if sp.issparse(b.X) else np.asarray(b.X, np.float64).reshape(len(b.ids), -1)
            t = (as_pm1(b.y) > 0).astype(np.float64)
            z = np.clip(X @ w, -30.0, 30.0)
            p = 1.0 / (1.0 + np.exp(-z))
            grad = np.asarray(X.T @ (p - t)).ravel() / len(t) + l2 * w
            w -= step * grad
    return w


# ---------------------------------------------------------------------------------------------
# Comparing record orders on a real file: lirs (Loader) against BMF, a shuffle buffer and the
# file order, each with its own real I/O pattern. Used by `lirs demo` and benchmarks/train_svm.py.

LIRS_METHODS = ("lirs-instance", "lirs-page", "lirs-group", "lirs-window")
BASELINES = ("bmf", "shuffle_buffer", "sequential")
METHODS = LIRS_METHODS + BASELINES

PURPOSE_BMF_LAYOUT = 84   # once per run: the block of every record
PURPOSE_BMF_ORDER = 85    # every epoch: the order of the blocks
PURPOSE_BUFFER = 86       # every epoch: the shuffle buffer's slot draws

_ALIGN = 4096


def shuffle_buffer_order(n: int, buffer_records: int, *, seed: int = 0, epoch: int = 0) -> np.ndarray:
    """int64 (n,): the order in which a shuffle buffer of ``buffer_records`` delivers a stream read
    in file order (records 0..n-1)."""
    from .kernels import train as K

    if buffer_records < 1:
        raise UsageError(f"buffer_records must be >= 1, got {buffer_records}")
    u = np.random.default_rng(np.random.SeedSequence([seed, epoch, PURPOSE_BUFFER])).random(n)
    out = np.empty(n, np.int64)
    K.shuffle_buffer_order(int(n), int(buffer_records), u, out)
    return out


def bmf_blocks(n: int, blocks: int, *, seed: int = 0) -> list:
    """BMF's one-off layout: every record assigned to one of ``blocks`` blocks at random; returns a
    list of int64 arrays (the record IDs of each block, in file order)."""
    if blocks < 1:
        raise UsageError(f"blocks must be >= 1, got {blocks}")
    b = np.random.default_rng(np.random.SeedSequence([seed, 0, PURPOSE_BMF_LAYOUT])).integers(0, blocks, n)
    order = np.argsort(b, kind="stable")
    cuts = np.searchsorted(b[order], np.arange(1, blocks))
    return [a.astype(np.int64) for a in np.split(order, cuts)]


def bmf_block_order(blocks: int, *, seed: int = 0, epoch: int = 0) -> np.ndarray:
    """The order in which BMF visits its blocks in ``epoch``: int64 (blocks,)."""
    return np.random.default_rng(np.random.SeedSequence([seed, epoch, PURPOSE_BMF_ORDER])).permutation(blocks)


class _Prefetch:
    """Run a generator on a thread, ``depth`` items ahead of the consumer (loading overlaps compute,
    as the Loader's prefetch does for lirs)."""

    _END = object()

    def __init__(self, gen, depth: int = 4):
        import queue
        import threading

        self.q = queue.Queue(max(1, depth))
        self.stop = threading.Event()
        self.wait_s = 0.0
        self.t = threading.Thread(target=self._run, args=(gen,), daemon=True, name="lirs-train-prefetch")
        self.t.start()

    def _run(self, gen):
        try:
            for item in gen:
                if self.stop.is_set():
                    break
                self.q.put((True, item))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self.q.put((False, e))
            return
        finally:
            gen.close()
        self.q.put((True, self._END))

    def __iter__(self):
        import time

        done = False
        try:
            while True:
                t = time.perf_counter()
                ok, item = self.q.get()
                self.wait_s += time.perf_counter() - t
                if not ok:
                    done = True
                    raise item
                if item is self._END:
                    done = True
                    return
                yield item
        finally:
            self.stop.set()
            # left early: take items until the producer, which sees `stop` after at most one more
            # item, says it ended (it may be blocked on the full queue)
            while not done:
                ok, item = self.q.get()
                done = not ok or item is self._END
            self.t.join()


class _Ahead:
    """Run zero-argument callables on ``workers`` threads, up to ``depth`` ahead of the consumer,
    and yield their results in submission order (the baselines' read + decode, parallel like the
    Loader's, overlapping compute)."""

    def __init__(self, tasks, workers: int = 2, depth: int = 4):
        self.tasks = iter(tasks)
        self.workers = max(1, int(workers))
        self.depth = max(1, int(depth))
        self.wait_s = 0.0

    def __iter__(self):
        import collections
        import time
        from concurrent.futures import ThreadPoolExecutor

        ex = ThreadPoolExecutor(self.workers, thread_name_prefix="lirs-train-read")
        futs = collections.deque()
        try:
            for task in self.tasks:
                futs.append(ex.submit(task))
                if len(futs) > self.depth:  # keep `depth` loading while the consumer works
                    yield self._take(futs, time)
            while futs:
                yield self._take(futs, time)
        finally:
            for f in futs:
                f.cancel()
            ex.shutdown(wait=True)

    def _take(self, futs, time):
        t = time.perf_counter()
        r = futs.popleft().result()
        self.wait_s += time.perf_counter() - t
        return r


class _SpanReader:
    """Reads runs of records that lie back to back in one file, one aligned direct read per run,
    and decodes them (the I/O of the sequential, shuffle-buffer and BMF baselines)."""

    def __init__(self, path: str, n_features: int, zero_based: bool, engine: str = "auto", dtype=np.float32):
        from ..engines import open_engine

        self.path = path
        self.eng = open_engine([path], engine)
        self.n_features, self.zero_based, self.dtype = n_features, zero_based, dtype
        self.bytes_read = 0
        self._local = threading.local()  # one read buffer per reading thread
        self._lock = threading.Lock()

    def read(self, starts: np.ndarray, ends: np.ndarray, ids: np.ndarray):
        """Records [starts[i], ends[i]) of the file (back to back, increasing): (X csr, y)."""
        from ..decode import decode_libsvm
        from ..engines import aligned_empty

        lo = int(starts[0]) // _ALIGN * _ALIGN
        hi = -(-int(ends[-1]) // _ALIGN) * _ALIGN
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) < hi - lo:
            buf = self._local.buf = aligned_empty(int((hi - lo) * 1.25) // _ALIGN * _ALIGN + _ALIGN)
        got = self.eng.read(np.zeros(1, np.int32), np.array([lo], np.int64), np.array([hi - lo], np.int64),
                            buf, np.zeros(1, np.int64))
        with self._lock:
            self.bytes_read += int(got[0])
        if lo + int(got[0]) < int(ends[-1]):
            raise DataError(f"{self.path}: needs bytes up to {int(ends[-1])} but the file ends at "
                            f"{lo + int(got[0])} (changed after indexing?)")
        return decode_libsvm(buf, starts - lo, ends - lo, n_features=self.n_features,
                             zero_based=self.zero_based, dtype=self.dtype, source=self.path,
                             file_offsets=starts, record_ids=ids)

    def close(self):
        self.eng.close()


def _record_bounds(index):
    starts, ends = index.bounds()
    return np.asarray(starts, np.int64), np.asarray(ends, np.int64)


def _sequential_runs(n: int, run_records: int):
    for s in range(0, n, run_records):
        yield s, min(n, s + run_records)


def load_all(index, *, engine: str = "auto", dtype=np.float32, run_bytes: int = 8 << 20):
    """The whole (single-file LIBSVM) data set in memory, read in file order: (X csr, y float64)."""
    from ..decode import resolve_libsvm_params

    _check_single_libsvm(index)
    nf, zb = resolve_libsvm_params(index)
    starts, ends = _record_bounds(index)
    per = max(1, int(run_bytes // max(1.0, index.payload_bytes / max(index.n, 1))))
    rd = _SpanReader(index.paths[0], nf, zb, engine, dtype)
    try:
        parts = [rd.read(starts[s:e], ends[s:e], np.arange(s, e)) for s, e in _sequential_runs(index.n, per)]
    finally:
        rd.close()
    return sp.vstack([p[0] for p in parts], format="csr"), np.concatenate([p[1] for p in parts])


def _check_single_libsvm(index):
    if index.format != "libsvm":
        raise UsageError(f"SVM training needs LIBSVM data; {index.paths[0]} is {index.format}")
    if index.nfiles != 1:
        raise UsageError("the baselines (BMF, shuffle buffer, sequential) read one file; this index has "
                         f"{index.nfiles} files")


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def compare_svm(index, methods=("lirs-group", "lirs-window", "bmf", "shuffle_buffer", "sequential"), *,
                epochs: int = 5, batch_size: int = 1024, C: float = 1.0, loss: str = "squared_hinge",
                seed: int = 0, bmf_blocks_n: int = 40, bmf_passes: int = 3, buffer_records: int = 10_000,
                group_bytes: int = 65536, window: int = 16, prefetch: int = 4, engine: str = "auto",
                workdir: str | None = None, f_star: float | None = None, reference_epochs: int = 200,
                reference_tol: float = 1e-3, data=None, index_s: float | None = None, progress=None,
                log_fn=None, epoch_budget_s: float | None = None) -> dict:
    """Train the same SVM under several record orders, each read from the file with its own I/O
    pattern, and record the objective after every epoch.

    Methods: ``lirs-instance|page|group|window`` (a :class:`lirs.Loader` of that granularity),
    ``bmf`` (pre-processing rewrites the file with ``bmf_blocks_n`` random blocks laid out one
    after the other; every epoch reads the blocks in a fresh order, one direct read each, and
    trains each whole with ``bmf_passes`` inner passes in random order, as LIBLINEAR cdblock),
    ``shuffle_buffer`` (file order through a buffer of ``buffer_records``), ``sequential`` (file
    order). The baselines read runs of ``batch_size`` records (BMF: whole blocks) with one aligned
    direct read each, ``prefetch`` runs ahead on a thread, so loading overlaps compute for all.

    ``data``: (X, y) of the whole set in memory (read here when None) for the objective; ``f_star``:
    the optimum (from :func:`reference_objective` with ``reference_epochs``/``reference_tol`` when
    None). ``index_s``: time the index took (lirs's pre-processing). ``epoch_budget_s``: stop an
    epoch after that many seconds and extrapolate its time from the records it trained on (entries
    then say ``"extrapolated": true``; for slow device envelopes, where only the time is wanted).
    Returns a JSON-able dict.
    """
    import time

    from ..decode import resolve_libsvm_params

    _check_single_libsvm(index)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UsageError(f"unknown methods {unknown}; expected some of {', '.join(METHODS)}")
    say = log_fn or (lambda msg: None)
    n = index.n
    nf, zb = resolve_libsvm_params(index)
    t = time.perf_counter()
    X, y = data if data is not None else load_all(index, engine=engine)
    load_all_s = time.perf_counter() - t
    y = as_pm1(y, index.paths[0])
    ref_s = 0.0
    if f_star is None:
        t = time.perf_counter()
        f_star = reference_objective(X, y, C, loss, epochs=reference_epochs, tol=reference_tol, seed=seed)
        ref_s = time.perf_counter() - t
        say(f"reference objective f* = {f_star:.6g} ({ref_s:.1f}s)")
    starts, ends = _record_bounds(index)
    mean_rec = index.payload_bytes / max(n, 1)
    out = {"n": int(n), "n_features": int(nf), "payload_bytes": int(index.payload_bytes), "C": C, "loss": loss,
           "batch_size": batch_size, "seed": seed, "f_star": f_star, "reference_s": ref_s,
           "load_all_s": load_all_s, "methods": {}}
    for m in methods:
        svm = LinearSVM(nf, n, C, loss)
        rec = {"per_epoch": [], "pre_s": 0.0}
        say(f"{m}: training {epochs} epochs")
        if m.startswith("lirs-"):
            from ..loader import Loader

            rec["pre_s"] = index_s
            rec["pre_what"] = "lirs index (scan once)"
            gran = m.split("-", 1)[1]
            with Loader(index, batch_size, granularity=gran, group_bytes=group_bytes, window=window, seed=seed,
                        engine=engine, prefetch=prefetch, n_features=nf, zero_based=zb) as ld:
                for e in range(epochs):
                    ld.stats.reset()
                    t = time.perf_counter()
                    comp = 0.0
                    done = 0
                    for b in ld.epoch(e):
                        c = time.perf_counter()
                        svm.partial_fit(b.ids, b.X, b.y)
                        comp += time.perf_counter() - c
                        done += len(b.ids)
                        if epoch_budget_s is not None and time.perf_counter() - t > epoch_budget_s:
                            break
                    wall = time.perf_counter() - t
                    st = ld.stats.as_dict()
                    rec["per_epoch"].append({"epoch": e, "epoch_s": wall, "compute_s": comp, "wait_s": st["wait_s"],
                                             "bytes_read": st["bytes_read"], "amplification": st["amplification"]})
                    _extrapolate(rec["per_epoch"][-1], done, n)
                    _objective(rec, svm, X, y, f_star)
                plan_bytes = ld.plan(epochs - 1).nbytes
            idx_bytes = index.index_bytes()  # compact offsets + label codes
            # a window is read once and feeds several batches: it is the unit held in memory
            step = batch_size * mean_rec if gran != "window" else max(batch_size * mean_rec, window * group_bytes)
            rec["memory_bytes"] = int(idx_bytes + plan_bytes + (prefetch + 1) * step *
                                      (rec["per_epoch"][-1]["amplification"] or 1.0))
            rec["memory_what"] = (f"index ({idx_bytes / n:.1f} B/record) + plan ({plan_bytes / n:.2f} B/record) "
                                  "+ (prefetch+1) read steps")
        else:
            _run_baseline(m, rec, svm, index, X, y, f_star, starts, ends, nf, zb, epochs=epochs,
                          batch_size=batch_size, seed=seed, blocks=bmf_blocks_n, passes=bmf_passes,
                          buffer_records=buffer_records, prefetch=prefetch, engine=engine, workdir=workdir,
                          mean_rec=mean_rec, budget=epoch_budget_s)
        rec["final_objective"] = rec["per_epoch"][-1]["objective"]
        rec["train_accuracy"] = svm.score(X, y)
        out["methods"][m] = rec
        say(f"{m}: objective {rec['final_objective']:.6g}, rel. diff {rec['per_epoch'][-1]['rel_diff']:.3g}")
    _summarize(out)
    return out


def _objective(rec, svm, X, y, f_star):
    f = svm.objective(X, y)
    rec["per_epoch"][-1]["objective"] = f
    rec["per_epoch"][-1]["rel_diff"] = float(relative_difference(f, f_star))


def _run_baseline(m, rec, svm, index, X, y, f_star, starts, ends, nf, zb, *, epochs, batch_size, seed, blocks,
                  passes, buffer_records, prefetch, engine, workdir, mean_rec, budget=None):
    import time

    n = index.n
    path = index.paths[0]
    if m == "bmf":
        if workdir is None:
            raise UsageError("BMF needs a workdir for its block file")
        t = time.perf_counter()
        layout = bmf_blocks(n, blocks, seed=seed)
        bpath, bstarts, bends = _write_bmf_file(index, layout, workdir, engine=engine)
        rec["pre_s"] = time.perf_counter() - t
        rec["pre_what"] = f"rewrite the file as {blocks} random blocks (read + write + fsync)"
        rec["blocks"] = blocks
        rec["inner_passes"] = passes
        sizes = []
        pos = 0
        for b in layout:
            k = len(b)
            sizes.append(int(bends[pos + k - 1] - bstarts[pos]) if k else 0)
            pos += k
        rec["memory_bytes"] = int(max(sizes))
        rec["memory_what"] = "the largest block (raw bytes)"
        first = np.concatenate([[0], np.cumsum([len(b) for b in layout])])
        rd = _SpanReader(bpath, nf, zb, engine)
        try:
            for e in range(epochs):
                rng = np.random.default_rng(np.random.SeedSequence([seed, e, PURPOSE_INNER]))
                order = bmf_block_order(blocks, seed=seed, epoch=e)

                def task(bi):
                    s, f = int(first[bi]), int(first[bi + 1])
                    return layout[bi], rd.read(bstarts[s:f], bends[s:f], layout[bi])

                # one block ahead: BMF holds one block while the next one loads
                src = _Ahead((lambda bi=bi: task(bi) for bi in order if first[bi + 1] > first[bi]), 2, 1)
                _epoch_loop(rec, svm, src, src, rd, passes, rng, X, y, f_star, budget)
        finally:
            rd.close()
            try:
                os.unlink(bpath)
            except OSError:
                pass
        return
    rec["pre_what"] = "none"
    workers = max(2, prefetch)  # as many decoding threads as the Loader's pool
    rd = _SpanReader(path, nf, zb, engine)
    try:
        if m == "sequential":
            rec["memory_bytes"] = int((prefetch + 1) * batch_size * mean_rec)
            rec["memory_what"] = "(prefetch+1) read runs"
            for e in range(epochs):
                src = _Ahead((lambda s=s, f=f: _run(rd, starts, ends, s, f)
                              for s, f in _sequential_runs(n, batch_size)), workers, prefetch)
                _epoch_loop(rec, svm, src, src, rd, 1, None, X, y, f_star, budget)
        else:
            rec["buffer_records"] = buffer_records
            rec["memory_bytes"] = int((buffer_records + (prefetch + 1) * batch_size) * mean_rec)
            rec["memory_what"] = "shuffle buffer + (prefetch+1) read runs (raw bytes)"
            for e in range(epochs):
                order = shuffle_buffer_order(n, buffer_records, seed=seed, epoch=e)
                src = _Ahead((lambda s=s, f=f: _run(rd, starts, ends, s, f)[1]
                              for s, f in _sequential_runs(n, batch_size)), workers, prefetch)
                _epoch_loop(rec, svm, _buffer_batches(iter(src), order, batch_size), src, rd, 1, None, X, y,
                            f_star, budget)
    finally:
        rd.close()


def _run(rd, starts, ends, s, f):
    ids = np.arange(s, f, dtype=np.int64)
    return ids, rd.read(starts[s:f], ends[s:f], ids)


def _buffer_batches(runs_in, order, batch_size):
    """Batches of a shuffle buffer: the file is read in runs of ``batch_size`` records, in order,
    and each output batch takes its records (already read: the buffer holds them) from the runs
    still alive; a run is dropped once all its records have left the buffer."""
    from .kernels import train as K

    n = len(order)
    runs = {}   # run number -> [X, y, records not yet delivered]
    next_run = 0
    for s in range(0, n, batch_size):
        ids = order[s:s + batch_size]
        need = int(ids.max()) // batch_size
        while next_run <= need:
            X, y = next(runs_in)  # runs arrive in file order
            runs[next_run] = [X, y, X.shape[0]]
            next_run += 1
        r = ids // batch_size
        local = ids - r * batch_size
        k_ = len(ids)
        lens = np.empty(k_, np.int64)
        yb = np.empty(k_, np.float64)
        groups = []
        for k in np.unique(r).tolist():
            sel = np.flatnonzero(r == k)
            X, y, _ = runs[k]
            lens[sel] = X.indptr[local[sel] + 1] - X.indptr[local[sel]]
            yb[sel] = y[local[sel]]
            groups.append((k, sel))
        indptr = np.zeros(k_ + 1, np.int64)
        np.cumsum(lens, out=indptr[1:])
        first = runs[groups[0][0]][0]
        indices = np.empty(int(indptr[-1]), first.indices.dtype)
        data = np.empty(int(indptr[-1]), first.data.dtype)
        for k, sel in groups:
            X = runs[k][0]
            K.csr_take_rows(X.indptr, X.indices, X.data, local[sel], sel.astype(np.int64), indptr, indices, data)
            runs[k][2] -= len(sel)
            if runs[k][2] == 0:
                del runs[k]
        yield ids, (sp.csr_matrix((data, indices, indptr), shape=(k_, first.shape[1])), yb)


def _extrapolate(entry: dict, done: int, n: int) -> None:
    """An epoch cut short by its time budget: scale its time to the whole epoch (and say so)."""
    entry["records"] = int(done)
    entry["extrapolated"] = bool(0 < done < n)
    if entry["extrapolated"]:
        entry["measured_s"] = entry["epoch_s"]
        entry["epoch_s"] = entry["epoch_s"] * n / done


def _epoch_loop(rec, svm, batches, waiter, rd, passes, rng, X, y, f_star, budget=None):
    import time

    b0 = rd.bytes_read
    t = time.perf_counter()
    comp = 0.0
    done = 0
    for ids, (Xb, yb) in batches:
        c = time.perf_counter()
        svm.partial_fit(ids, Xb, yb, passes=passes, rng=rng)
        comp += time.perf_counter() - c
        done += len(ids)
        if budget is not None and time.perf_counter() - t > budget:
            break
    if hasattr(batches, "close"):
        batches.close()  # a generator left early: stop its reads now
    wall = time.perf_counter() - t
    rd_bytes = rd.bytes_read - b0
    rec["per_epoch"].append({"epoch": len(rec["per_epoch"]), "epoch_s": wall, "compute_s": comp,
                             "wait_s": waiter.wait_s, "bytes_read": rd_bytes, "amplification": None})
    _extrapolate(rec["per_epoch"][-1], done, len(svm.alpha))
    _objective(rec, svm, X, y, f_star)


def _write_bmf_file(index, layout, workdir, *, engine="auto", run_bytes: int = 8 << 20):
    """BMF pre-processing: read the file in order and write every record into its block's region of
    a new file (blocks back to back), in buffered appends per block; fsync. Returns (path,
    starts int64 (n,), ends int64 (n,)) of the records in block-file order."""
    from ..engines import aligned_empty, open_engine
    from .kernels import train as K

    starts, ends = _record_bounds(index)
    n = index.n
    lens = ends - starts
    order = np.concatenate(layout) if layout else np.zeros(0, np.int64)
    new_starts = np.zeros(n, np.int64)
    if n:
        np.cumsum(lens[order][:-1], out=new_starts[1:])
    new_ends = new_starts + lens[order]
    pos_of = np.empty(n, np.int64)  # where record i goes in the block file
    pos_of[order] = new_starts
    os.makedirs(workdir, exist_ok=True)
    bpath = os.path.join(workdir, os.path.basename(index.paths[0]) + ".bmf-blocks")
    per = max(1, int(run_bytes // max(1.0, index.payload_bytes / max(n, 1))))
    eng = open_engine([index.paths[0]], engine)
    fd = os.open(bpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        buf = aligned_empty(_ALIGN)
        for s, f in _sequential_runs(n, per):
            lo = int(starts[s]) // _ALIGN * _ALIGN
            hi = -(-int(ends[f - 1]) // _ALIGN) * _ALIGN
            if len(buf) < hi - lo:
                buf = aligned_empty(hi - lo)
            eng.read(np.zeros(1, np.int32), np.array([lo], np.int64), np.array([hi - lo], np.int64), buf,
                     np.zeros(1, np.int64))
            # records of this run, sorted by destination: contiguous stretches become one write each
            o = np.argsort(pos_of[s:f], kind="stable")
            src_s = starts[s:f][o] - lo
            src_e = ends[s:f][o] - lo
            dst = pos_of[s:f][o]
            out = np.empty(int((src_e - src_s).sum()), np.uint8)
            K.gather_spans(buf, src_s, src_e, out)
            # split where destinations stop being back to back
            l = src_e - src_s
            brk = np.flatnonzero(dst[1:] != dst[:-1] + l[:-1]) + 1
            cuts = np.concatenate([[0], brk, [len(dst)]])
            off = np.concatenate([[0], np.cumsum(l)])
            for a, b in zip(cuts[:-1], cuts[1:]):
                os.pwrite(fd, memoryview(out[off[a]:off[b]]), int(dst[a]))
        os.fsync(fd)
    finally:
        os.close(fd)
        eng.close()
    return bpath, new_starts, new_ends


def _summarize(out: dict) -> None:
    """Table 3 analog: epochs each method needs to reach BMF's best objective (or, without BMF,
    the best of the shuffle buffer), and the total time T_pre + epochs x mean epoch time."""
    ms = out["methods"]
    base = "bmf" if "bmf" in ms else ("shuffle_buffer" if "shuffle_buffer" in ms else None)
    out["target_method"] = base
    if base is None:
        return
    target = min(r["objective"] for r in ms[base]["per_epoch"])
    out["target_objective"] = target
    out["target_rel_diff"] = float(relative_difference(target, out["f_star"]))
    for m, r in ms.items():
        objs = [p["objective"] for p in r["per_epoch"]]
        hit = next((i + 1 for i, f in enumerate(objs) if f <= target * (1 + 1e-12)), None)
        r["epochs_to_target"] = hit
        mean_epoch = float(np.mean([p["epoch_s"] for p in r["per_epoch"]]))
        r["mean_epoch_s"] = mean_epoch
        r["total_to_target_s"] = None if hit is None else float((r["pre_s"] or 0.0) + hit * mean_epoch)
