"""LinearSVM (dual coordinate descent by record ID) against sklearn's LIBLINEAR, order invariance,
the in-loop SGD example, and the training benchmarks' smoke runs."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from lirs.errors import DataError, UsageError
from lirs.eval.gen import sample
from lirs.loader import Batch
from lirs.eval.train import (LinearSVM, as_pm1, fit_in_memory, primal_objective, reference_objective,
                        relative_difference, train_sgd)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def kdd():
    X, y = sample("kdd", 1500, seed=3)
    # keep w small in tests: only the columns that occur
    cols = np.unique(X.indices)
    remap = np.zeros(X.shape[1], np.int64)
    remap[cols] = np.arange(len(cols))
    X = sp.csr_matrix((X.data, remap[X.indices], X.indptr), shape=(X.shape[0], len(cols)))
    return X, y


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_matches_liblinear_objective(kdd, loss):
    from sklearn.svm import LinearSVC

    X, y = kdd
    C = 0.5
    svm, hist = fit_in_memory(X, y, C, loss, epochs=3000, tol=1e-9, seed=1)
    ref = LinearSVC(C=C, loss=loss, dual=True, fit_intercept=False, tol=1e-10, max_iter=100000).fit(X, y)
    f_sk = primal_objective(ref.coef_.ravel().astype(np.float64), X, y, C, loss)
    assert svm.objective(X, y) == pytest.approx(f_sk, rel=1e-6)
    assert np.allclose(svm.w, ref.coef_.ravel(), atol=1e-3 * np.abs(ref.coef_).max())
    # the objective never rises under exact coordinate descent
    assert np.all(np.diff(hist) <= 1e-9 * abs(hist[0]))


def test_batches_by_id_equal_one_pass_in_the_same_order(kdd):
    X, y = kdd
    n = X.shape[0]
    order = np.random.default_rng(7).permutation(n)
    whole = LinearSVM(X.shape[1], n, C=1.0)
    for _ in range(3):
        whole.partial_fit(order, X[order], y[order])
    batched = LinearSVM(X.shape[1], n, C=1.0)
    for _ in range(3):
        for s in range(0, n, 97):
            ids = order[s:s + 97]
            batched.partial_fit(ids, X[ids], y[ids])
    assert np.array_equal(whole.w, batched.w)
    assert np.array_equal(whole.alpha, batched.alpha)
    assert batched.updates == 3 * n


@pytest.mark.parametrize("how", ["sequential", "sorted_blocks", "random_batches"])
def test_any_order_reaches_the_optimum(kdd, how):
    X, y = kdd
    n = X.shape[0]
    f_star = reference_objective(X, y, 1.0, epochs=3000, tol=1e-9)
    svm = LinearSVM(X.shape[1], n, C=1.0)
    srt = np.argsort(y, kind="stable")  # label-sorted: the hard case for file order
    rng = np.random.default_rng(np.random.SeedSequence([0, 0, 5]))
    for e in range(400):
        if how == "sequential":
            svm.partial_fit(srt, X[srt], y[srt])
        elif how == "sorted_blocks":
            for blk in np.array_split(srt, 6):
                svm.partial_fit(blk, X[blk], y[blk], passes=2, rng=rng)
        else:
            p = rng.permutation(n)
            for ids in np.array_split(p, 13):
                svm.partial_fit(ids, X[ids], y[ids])
    assert relative_difference(svm.objective(X, y), f_star) < 1e-4


def test_dense_and_sparse_agree():
    X, y = sample("higgs", 600, seed=2)
    Xs = sp.csr_matrix(X.astype(np.float64))
    ids = np.arange(600)
    a = LinearSVM(X.shape[1], 600, C=0.1, loss="hinge")
    b = LinearSVM(X.shape[1], 600, C=0.1, loss="hinge")
    for _ in range(2):
        a.partial_fit(ids, X, y)
        b.partial_fit(ids, Xs, y)
    assert np.allclose(a.w, b.w, rtol=1e-5, atol=1e-7)
    assert a.objective(X, y) == pytest.approx(b.objective(Xs, y), rel=1e-5)
    assert 0.5 < a.score(X, y) <= 1.0


def test_objective_of_batches_equals_whole(kdd):
    X, y = kdd
    svm, _ = fit_in_memory(X, y, 2.0, epochs=3)
    parts = [Batch(np.arange(s, min(s + 400, len(y))), X[s:s + 400], y[s:s + 400])
             for s in range(0, len(y), 400)]
    assert svm.objective_of_batches(parts) == pytest.approx(svm.objective(X, y), rel=1e-12)


def test_labels_and_arguments_are_checked(kdd):
    X, y = kdd
    assert np.array_equal(as_pm1([0, 1, 0, 1.0]), [-1, 1, -1, 1])
    assert np.array_equal(as_pm1([-1, 1, 1.0]), [-1, 1, 1])
    with pytest.raises(DataError, match="label 2.0 at position 1"):
        as_pm1([1, 2])
    # -1 beside 0 is three classes (it trained as two, 0 merged into -1): the later of the two first ones is named
    with pytest.raises(DataError, match=r"label 0.0 at position 2 after -1.0 at position 1.*not both"):
        as_pm1([1, -1, 0, 5])
    with pytest.raises(DataError, match="label 5.0 at position 1"):
        as_pm1([0, 5, -1])
    svm = LinearSVM(X.shape[1], 10)
    with pytest.raises(UsageError, match="record IDs"):
        svm.partial_fit(np.arange(20), X[:20], y[:20])
    with pytest.raises(UsageError, match="disagree"):
        svm.partial_fit(np.arange(5), X[:6], y[:6])
    with pytest.raises(UsageError, match="loss"):
        LinearSVM(3, 3, loss="log")
    with pytest.raises(UsageError, match="columns"):
        LinearSVM(3, 30).partial_fit(np.arange(5), X[:5], y[:5])


class _FakeLoader:
    """Duck-typed loader: a fresh permutation per epoch, batches of 64 (the SGD loop needs no I/O)."""

    def __init__(self, X, y):
        self.X, self.y, self.n_features = X, y, X.shape[1]

    def epoch(self, e):
        p = np.random.default_rng(np.random.SeedSequence([0, e, 9])).permutation(len(self.y))
        for b, s in enumerate(range(0, len(p), 64)):
            ids = p[s:s + 64]
            yield Batch(ids, self.X[ids], self.y[ids], e, b)


def test_sgd_example_learns(kdd):
    X, y = kdd
    tr, te = slice(0, 1200), slice(1200, None)
    w = train_sgd(_FakeLoader(X[tr], y[tr]), 8, lr=0.5, l2=1e-4)
    acc = np.mean(np.where(X[te] @ w > 0, 1, -1) == y[te])
    base = max(np.mean(y[te] > 0), np.mean(y[te] < 0))
    assert acc > base + 0.05, (acc, base)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_svm.py", "train_dnn.py"])
def test_training_benchmarks_smoke(tmp_path, script):
    pytest.importorskip("torch") if script == "train_dnn.py" else None
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", script), "--smoke", "--dir",
                        str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    res = json.loads(out.read_text())
    assert res["command"]
    dsets = res["datasets"] if script == "train_svm.py" else {"": res}
    assert dsets
    for d in dsets.values():
        assert d["methods"]
        for name, m in d["methods"].items():
            assert len(m["per_epoch"]) == 2, name
            key = "objective" if script == "train_svm.py" else "val_loss"
            assert all(np.isfinite(p[key]) for p in m["per_epoch"]), name


def test_three_classes_are_refused_at_their_line(tmp_path):
    """Labels -1, 0 and +1 trained silently as two classes (0 taken for -1); the error names the
    file and the line (blank and comment lines counted: not the record number)."""
    import lirs
    from lirs.eval.compare import compare_svm

    p = tmp_path / "tern.svm"
    p.write_text("# three classes\n-1 1:1\n\n+1 2:1\n# more\n1 3:0.5\n0 1:0.5\n-1 2:2\n")
    idx = lirs.build_index(str(p), progress=False)
    with pytest.raises(DataError, match=rf"^{p}: label 0.0 at line 7 after -1.0 at line 2; .*-1/\+1 or 0/1"):
        compare_svm(idx, ("sequential",), epochs=1, batch_size=2, workdir=str(tmp_path), reference_epochs=1)


def test_epoch_budget_extrapolates_cut_epochs(tmp_path):
    """compare_svm with a time budget stops each epoch early and scales its time to the whole epoch."""
    import lirs
    from lirs.eval.gen import generate
    from lirs.eval.compare import compare_svm

    p = str(tmp_path / "k.svm")
    generate("kdd", p, records=6000, seed=2, progress=False)
    idx = lirs.build_index(p, progress=False)
    res = compare_svm(idx, ("lirs-instance", "sequential", "bmf"), epochs=1, batch_size=500, workdir=str(tmp_path),
                      f_star=1.0, reference_epochs=1, epoch_budget_s=0.0, bmf_blocks_n=6)
    for m, r in res["methods"].items():
        e = r["per_epoch"][0]
        assert e["extrapolated"] and 0 < e["records"] < idx.n, m
        assert e["epoch_s"] == pytest.approx(e["measured_s"] * idx.n / e["records"])
    full = compare_svm(idx, ("sequential",), epochs=1, batch_size=500, workdir=str(tmp_path), f_star=1.0)
    e = full["methods"]["sequential"]["per_epoch"][0]
    assert not e["extrapolated"] and e["records"] == idx.n
