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
difference ``(f - f*) / f*`` (the LIRS paper's Fig. 9 and Table 3). Training the same model
under lirs, BMF, a shuffle buffer and the file order, each with its real reads:
:func:`lirs.eval.compare.compare_svm`.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .. import seeds
from ..errors import DataError, UsageError
from .kernels import train as K

LOSSES = ("squared_hinge", "hinge")


def as_pm1(y, source: str = "the labels", where=None) -> np.ndarray:
    """Binary labels as float64 (k,) in {-1, +1}; accepts -1/+1 or 0/1, not both (-1 beside 0 is three classes).

    Raises DataError naming the first label that makes them not binary (a multi-class or regression
    target) and where it is: ``where(j)`` for position ``j`` (such as "line 12"), else "position j".
    """
    y = np.asarray(y, dtype=np.float64)
    at = where or (lambda j: f"position {j}")
    bad = ~((y == 1.0) | (y == -1.0) | (y == 0.0))
    j = int(np.flatnonzero(bad)[0]) if bad.any() else len(y)
    neg, zero = y[:j] == -1.0, y[:j] == 0.0
    if neg.any() and zero.any():  # before any other value: the later of the first -1 and the first 0 is the third class
        a, b = sorted((int(np.argmax(neg)), int(np.argmax(zero))))
        raise DataError(f"{source}: label {float(y[b])!r} at {at(b)} after {float(y[a])!r} at {at(a)}; a binary "
                        "SVM needs labels -1/+1 or 0/1, not both")
    if j < len(y):
        raise DataError(f"{source}: label {float(y[j])!r} at {at(j)}; a binary SVM needs labels -1/+1 (or 0/1)")
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
    for e in range(int(epochs)):
        if order == "random":
            rows = seeds.rng(seed, e, seeds.TRAIN_REFERENCE).permutation(n)
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
