"""`lirs gen`: valid files per profile, shapes near the paper's, determinism, order, learnability, CLI."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lirs.eval import gen as G
from lirs.cli import main
from lirs.errors import UsageError
from lirs.eval.gen import PROFILES, generate, labels_path, sample

SMALL = {"kdd": 1500, "webspam": 40, "higgs": 1500, "epsilon": 100, "lines": 800}


def _gen(tmp_path, profile, name=None, **kw):
    kw.setdefault("records", SMALL[profile])
    path = tmp_path / (name or f"{profile}{PROFILES[profile]['ext']}")
    return generate(profile, path, progress=False, **kw)


def _bytes(res):
    return b"".join(open(p, "rb").read() for p in res["paths"])


def _libsvm_lines(path):
    return [ln for ln in open(path, "rb").read().split(b"\n") if ln]


def _check_libsvm_tokens(path, dim):
    for ln in _libsvm_lines(path):
        toks = ln.split(b" ")
        assert toks[0] in (b"+1", b"-1")
        idx = np.array([int(t.split(b":")[0]) for t in toks[1:]])
        assert idx.size > 0
        assert idx[0] >= 1 and idx[-1] <= dim
        assert np.all(np.diff(idx) > 0), "indices must be sorted and unique"
        for t in toks[1:]:
            v = t.split(b":")[1]
            assert v == b"1" or (v.startswith(b"0.") and len(v) <= 8 and not v.endswith(b"0")), v


# --------------------------------------------------------------------------- valid files, shapes

@pytest.mark.parametrize("profile", ["kdd", "webspam"])
def test_libsvm_profiles_parse_with_sklearn_exactly(tmp_path, profile):
    from sklearn.datasets import load_svmlight_file

    res = _gen(tmp_path, profile, seed=3)
    dim = PROFILES[profile]["dim"]
    X, y = load_svmlight_file(res["path"], n_features=dim)
    Xs, ys = sample(profile, res["records"], seed=3)
    assert X.shape == (res["records"], dim)
    np.testing.assert_array_equal(y, ys)
    assert set(np.unique(y)) == {-1.0, 1.0}
    # what sklearn reads back is exactly what the generator meant (values, indices, per row)
    np.testing.assert_array_equal(X.indptr, Xs.indptr)
    np.testing.assert_array_equal(X.indices, Xs.indices)
    np.testing.assert_array_equal(X.data, Xs.data)
    _check_libsvm_tokens(res["path"], dim)
    assert res["label_counts"]["-1"] + res["label_counts"]["+1"] == res["records"]
    assert res["label_counts"]["+1"] == int((y > 0).sum())


def test_kdd_record_shape_near_table1(tmp_path):
    res = _gen(tmp_path, "kdd", records=3000, seed=5)
    per = res["bytes"] / res["records"]
    assert 300 <= per <= 430, per                   # paper: 362 B/record
    nnz = np.array([ln.count(b":") for ln in _libsvm_lines(res["path"])])
    assert 15 <= nnz.mean() <= 45 and nnz.min() >= 5
    idx = np.concatenate([[int(t.split(b":")[0]) for t in ln.split()[1:]] for ln in _libsvm_lines(res["path"])])
    assert idx.max() > 10_000_000                   # indices reach tens of millions


def test_webspam_record_shape_near_table1(tmp_path):
    res = _gen(tmp_path, "webspam", records=40, seed=5)
    per = res["bytes"] / res["records"]
    assert 33_000 <= per <= 56_000, per             # paper: 44,560 B/record
    nnz = np.array([ln.count(b":") for ln in _libsvm_lines(res["path"])])
    assert nnz.min() >= 1000


@pytest.mark.parametrize("profile", ["higgs", "epsilon"])
def test_dense_profiles_npy_and_labels(tmp_path, profile):
    res = _gen(tmp_path, profile, seed=2)
    d = PROFILES[profile]["dim"]
    X = np.load(res["path"])
    y = np.load(labels_path(res["path"]))
    assert res["labels_path"] == labels_path(res["path"]) == res["path"] + ".labels.npy"
    assert X.dtype == np.float32 and X.shape == (res["records"], d)
    assert y.dtype == np.float64 and y.shape == (res["records"],)
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert np.isfinite(X).all()
    assert abs(float(X.mean())) < 0.1 and 0.8 < float(X.std()) < 1.2
    Xs, ys = sample(profile, res["records"], seed=2)
    np.testing.assert_array_equal(X, Xs)
    np.testing.assert_array_equal(y, ys)


def test_lines_profile_is_json_of_mixed_length(tmp_path):
    res = _gen(tmp_path, "lines", records=1500, seed=4)
    raw = open(res["path"], "rb").read()
    lines = raw.split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == res["records"]
    objs = [json.loads(ln) for ln in lines[:-1]]
    assert [o["id"] for o in objs] == list(range(res["records"]))
    assert {o["label"] for o in objs} == {-1, 1}
    assert all(isinstance(o["text"], str) and o["text"] for o in objs)
    lens = np.array([len(ln) + 1 for ln in lines[:-1]])
    assert lens.min() < 150 and lens.max() > 2500 and lens.max() <= 4096 + 64
    assert 500 <= lens.mean() <= 1400
    lines_s, y = sample("lines", res["records"], seed=4)
    assert b"".join(lines_s) == raw
    np.testing.assert_array_equal(y, [o["label"] for o in objs])


def test_index_reads_generated_files(tmp_path):
    import lirs

    res = _gen(tmp_path, "kdd", seed=8)
    idx = lirs.build_index(res["path"], progress=False)
    _, y = sample("kdd", res["records"], seed=8)
    assert idx.n == res["records"]
    np.testing.assert_array_equal(idx.labels, y)
    res = _gen(tmp_path, "higgs", seed=8)
    idx = lirs.build_index(res["path"], progress=False)
    assert idx.n == res["records"] and idx.record_size == 4 * 28


# --------------------------------------------------------------------------- determinism

@pytest.mark.parametrize("profile", list(PROFILES))
def test_same_seed_same_bytes_other_seed_differs(tmp_path, profile):
    a = _bytes(_gen(tmp_path, profile, "a", seed=11, records=SMALL[profile] // 2))
    b = _bytes(_gen(tmp_path, profile, "b", seed=11, records=SMALL[profile] // 2))
    c = _bytes(_gen(tmp_path, profile, "c", seed=12, records=SMALL[profile] // 2))
    assert a == b
    assert a != c


@pytest.mark.parametrize("profile", ["kdd", "lines", "higgs"])
@pytest.mark.parametrize("order", ["shuffled", "sorted"])
def test_bytes_do_not_depend_on_batching_or_threads(tmp_path, monkeypatch, profile, order):
    ref = _bytes(_gen(tmp_path, profile, "ref", seed=6, order=order, workers=1))
    monkeypatch.setattr(G, "_BATCH_BYTES", 5_000)   # many small batches, uneven thread splits
    other = _bytes(_gen(tmp_path, profile, "other", seed=6, order=order, workers=3))
    assert other == ref


def test_records_are_a_prefix_property(tmp_path):
    # record j depends only on (seed, j): a longer file starts with the shorter one
    short = open(_gen(tmp_path, "kdd", "s", seed=9, records=300)["path"], "rb").read()
    long = open(_gen(tmp_path, "kdd", "l", seed=9, records=900)["path"], "rb").read()
    assert long.startswith(short) and len(long) > len(short)


# --------------------------------------------------------------------------- order

def _file_labels(res, profile):
    if PROFILES[profile]["kind"] == "dense":
        return np.load(res["labels_path"])
    if profile == "lines":
        return np.array([json.loads(ln)["label"] for ln in open(res["path"], "rb")], float)
    return np.array([float(ln.split(b" ", 1)[0]) for ln in _libsvm_lines(res["path"])])


def _records(res, profile):
    if PROFILES[profile]["kind"] == "dense":
        return sorted(map(bytes, np.load(res["path"])))
    return sorted(open(res["path"], "rb").read().splitlines())


@pytest.mark.parametrize("profile", list(PROFILES))
def test_sorted_is_grouped_permutation_of_shuffled(tmp_path, profile):
    n = SMALL[profile]
    sh = _gen(tmp_path, profile, "sh", seed=21, records=n, order="shuffled")
    so = _gen(tmp_path, profile, "so", seed=21, records=n, order="sorted")
    ysh, yso = _file_labels(sh, profile), _file_labels(so, profile)
    # sorted: every -1 before every +1, both classes present
    assert np.all(np.diff(yso) >= 0) and yso[0] == -1 and yso[-1] == 1
    # shuffled: classes interleave (a grouped file would have 1 change)
    changes = int(np.count_nonzero(np.diff(ysh)))
    assert changes > n // 4
    # the same records, only reordered
    assert sorted(ysh) == sorted(yso)
    assert _records(sh, profile) == _records(so, profile)
    assert so["label_counts"] == sh["label_counts"]


def test_sample_sorted_matches_file(tmp_path):
    res = _gen(tmp_path, "kdd", seed=2, order="sorted")
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(res["path"], n_features=PROFILES["kdd"]["dim"])
    Xs, ys = sample("kdd", res["records"], seed=2, order="sorted")
    np.testing.assert_array_equal(y, ys)
    assert (X != Xs).nnz == 0


# --------------------------------------------------------------------------- learnable labels

def _accuracy(X, y):
    from sklearn.linear_model import LogisticRegression

    half = X.shape[0] // 2
    clf = LogisticRegression(max_iter=1000).fit(X[:half], y[:half])
    return clf.score(X[half:], y[half:])


def _frequent_columns(X, min_count):
    # a small sample cannot learn features it has seen once; keep the frequent ones
    df = np.bincount(X.indices, minlength=X.shape[1])
    return X[:, np.flatnonzero(df >= min_count)]


@pytest.mark.parametrize("profile,n,floor", [("kdd", 6000, 0.7), ("higgs", 2000, 0.8), ("epsilon", 3000, 0.6)])
def test_labels_are_learnable(profile, n, floor):
    X, y = sample(profile, n, seed=31)
    assert 0.4 < (y > 0).mean() < 0.6
    if profile == "kdd":
        X = _frequent_columns(X, 5)
    acc = _accuracy(X, y)
    assert acc > floor, acc
    # and the signal is in the labels, not in the classifier: shuffled labels give chance
    rng = np.random.default_rng(0)
    assert _accuracy(X, rng.permutation(y)) < 0.6


def test_lines_labels_are_learnable():
    from sklearn.feature_extraction.text import CountVectorizer

    lines, y = sample("lines", 3000, seed=31)
    X = CountVectorizer().fit_transform([json.loads(ln)["text"] for ln in lines])
    assert _accuracy(X, y) > 0.7


@pytest.mark.slow
def test_webspam_labels_are_learnable():
    X, y = sample("webspam", 800, seed=31)
    assert _accuracy(_frequent_columns(X, 40), y) > 0.6


# --------------------------------------------------------------------------- --size

@pytest.mark.parametrize("profile,size", [("kdd", "3MB"), ("lines", "3MB"), ("epsilon", "2MB"), ("higgs", "1MB"),
                                          ("webspam", "16MB")])
def test_size_hits_target(tmp_path, profile, size):
    from lirs.units import parse_size

    res = generate(profile, tmp_path / f"s{PROFILES[profile]['ext']}", size=size, seed=1, progress=False)
    target = parse_size(size)
    assert abs(res["bytes"] - target) <= 0.1 * target, (res["bytes"], target)
    assert res["bytes"] == os.path.getsize(res["path"])


# --------------------------------------------------------------------------- errors, atomicity, CLI

def test_bad_arguments(tmp_path):
    p = tmp_path / "x.svm"
    with pytest.raises(ValueError, match="profile"):
        generate("mnist", p, records=10)
    with pytest.raises(ValueError, match="order"):
        generate("kdd", p, records=10, order="random")
    with pytest.raises(ValueError, match="exactly one"):
        generate("kdd", p, records=10, size="1MB")
    with pytest.raises(ValueError, match="exactly one"):
        generate("kdd", p)
    with pytest.raises(ValueError, match="records"):
        generate("kdd", p, records=0)
    with pytest.raises(ValueError, match="seed"):
        generate("kdd", p, records=10, seed=-1)
    with pytest.raises(ValueError, match="size"):
        generate("kdd", p, size="lots")
    with pytest.raises(UsageError, match="its directory .*missing does not exist"):
        generate("kdd", tmp_path / "missing" / "x.svm", records=10)
    assert not p.exists()


def test_an_output_named_for_another_format_is_refused_before_writing(tmp_path, capsys):
    """higgs rows written to h.svm, kdd text to k.npy: lirs read them back as the extension says and
    failed to index what it had just written. Refused before any byte, naming the extension."""
    for profile, name, named, fmt, ext in (("higgs", "h.svm", "libsvm", "npy", ".npy"),
                                          ("kdd", "k.npy", "npy", "libsvm", ".svm"),
                                          ("lines", "l.tfrecord", "tfrecord", "lines", ".jsonl")):
        with pytest.raises(UsageError, match=rf"{name} would be read back as {named} \(its extension\), but "
                                             rf"{profile} writes {fmt}: name it with \{ext}$"):
            generate(profile, tmp_path / name, records=5, progress=False)
    assert main(["gen", "--profile", "higgs", "--records", "5", "-o", str(tmp_path / "h.svm"), "--quiet"]) == 2
    assert "name it with .npy" in capsys.readouterr().err
    for name, said in (("k.svm.gz", "compressed"), ("k.lirs", "a lirs index")):  # written plain, not as named
        with pytest.raises(UsageError, match=rf"{name} would be read back as {said} .*name it with \.svm$"):
            generate("kdd", tmp_path / name, records=5, progress=False)
    assert os.listdir(tmp_path) == []
    # no extension, one of no known format, or another name of the same format: written as asked
    for profile, name in (("kdd", "k"), ("kdd", "k.txt"), ("kdd", "k.libsvm"), ("lines", "l.csv")):
        generate(profile, tmp_path / name, records=5, progress=False)
        assert os.path.getsize(tmp_path / name) > 0


@pytest.mark.parametrize("profile", ["kdd", "higgs"])
def test_interrupted_generation_leaves_nothing(tmp_path, monkeypatch, profile):
    out = tmp_path / "out"
    out.mkdir()
    calls = []

    def boom(chunks):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(chunks)

    real = G._write_chunks
    monkeypatch.setattr(G, "_BATCH_BYTES", 20_000)
    monkeypatch.setattr(G, "_write_chunks", boom)
    with pytest.raises(KeyboardInterrupt):
        generate(profile, out / "data", records=2000, progress=False)
    assert len(calls) == 2
    assert os.listdir(out) == []


def test_a_killed_runs_temporaries_are_removed_and_room_is_checked_first(tmp_path):
    """A run killed past its clean-up (SIGKILL) leaves `.NAME.lirs-tmp-PID` files: the next run on
    that name removes those of dead processes. A dataset larger than the free space is refused
    before a byte is written."""
    from lirs.errors import UsageError

    dead = tmp_path / ".d.npy.lirs-tmp-999999"
    dead.write_bytes(b"x" * 100)
    live = tmp_path / f".d.npy.lirs-tmp-{os.getpid()}-other"
    live.write_bytes(b"")
    generate("higgs", tmp_path / "d.npy", records=50, progress=False)
    assert not dead.exists() and live.exists()
    with pytest.raises(UsageError, match=r"e\.npy: 10,000,000,000,000 records of epsilon need about .* free"):
        generate("epsilon", tmp_path / "e.npy", records=10**13, progress=False)
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, "d.npy", "d.npy.labels.npy"])


def test_a_run_stopped_between_its_renames_never_pairs_new_data_with_old_labels(tmp_path, monkeypatch):
    """A dense dataset is two files renamed one after the other: a run stopped between the two
    left the new data beside the old data's labels, which the next index took as its labels. The
    old labels file goes first: the data is then without labels (said at the next index)."""
    import lirs.eval.gen as G

    p = tmp_path / "d.npy"
    generate("higgs", p, records=40, seed=1, progress=False)
    real, calls = os.replace, []

    def stopped(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise KeyboardInterrupt  # between the data's rename and the labels'
        return real(a, b)

    monkeypatch.setattr(G.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        generate("higgs", p, records=60, seed=2, progress=False)
    assert np.load(p).shape[0] == 60 and not os.path.exists(labels_path(str(p)))
    assert [x for x in os.listdir(tmp_path)] == ["d.npy"]


def test_overwrite_replaces_whole_file(tmp_path):
    p = tmp_path / "d.svm"
    p.write_bytes(b"x" * 10_000_000)
    res = generate("kdd", p, records=50, progress=False)
    assert os.path.getsize(p) == res["bytes"] < 10_000_000


def test_cli_exit_codes(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    assert main(["gen", "--profile", "lines", "--records", "20", "--seed", "3", "-o", str(out), "--quiet"]) == 0
    assert len(open(out, "rb").read().splitlines()) == 20
    assert "20 lines records" in capsys.readouterr().out
    assert main(["gen", "--profile", "higgs", "--size", "10K", "-o", str(tmp_path / "h.npy"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert os.path.exists(res["labels_path"]) and res["records"] == np.load(res["path"]).shape[0]
    for bad in (["--profile", "bogus", "--records", "5"],
                ["--profile", "kdd"],                                   # no count
                ["--profile", "kdd", "--records", "5", "--size", "1M"],  # both
                ["--profile", "kdd", "--records", "5", "--order", "random"]):
        with pytest.raises(SystemExit) as e:
            main(["gen", *bad, "-o", str(tmp_path / "b.svm")])
        assert e.value.code == 2
    assert main(["gen", "--profile", "kdd", "--records", "0", "-o", str(tmp_path / "b.svm")]) == 2
    assert main(["gen", "--profile", "kdd", "--size", "12XB", "-o", str(tmp_path / "b.svm")]) == 2
    assert main(["gen", "--profile", "kdd", "--records", "5", "-o", str(tmp_path / "no" / "b.svm")]) == 2
    assert "its directory" in capsys.readouterr().err
    assert not (tmp_path / "b.svm").exists()


def test_gen_refuses_a_labels_file_beside_the_output_it_does_not_write(tmp_path, capsys):
    """`lirs gen --profile higgs -o h.npy` beside an old h.labels.npy wrote h.npy.labels.npy and
    succeeded; `lirs index h.npy` then failed ("two labels files beside it"). Refused up front now,
    naming the stray file, as `lirs shuffle` refuses it; nothing is written."""
    import lirs

    stray = tmp_path / "h.labels.npy"
    np.save(stray, np.zeros(3))
    out = tmp_path / "h.npy"
    assert main(["gen", "--profile", "higgs", "--records", "100", "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{stray} lies beside -o {out}" in err and f"{out}.labels.npy" in err, err
    assert sorted(os.listdir(tmp_path)) == ["h.labels.npy"]
    stray.unlink()  # gone, the run goes through and its output is indexed
    assert main(["gen", "--profile", "higgs", "--records", "100", "-o", str(out), "--quiet"]) == 0
    assert lirs.build_index(str(out), progress=False).n == 100
    # the labels of data that is not .npy are never read beside it: nothing to refuse
    (tmp_path / "k.labels.npy").write_bytes(b"x")
    assert main(["gen", "--profile", "kdd", "--records", "10", "-o", str(tmp_path / "k.svm"), "--quiet"]) == 0


def test_gen_names_a_directory_in_the_way_of_its_labels_as_the_labels_file(tmp_path, capsys):
    """A directory X.npy.labels.npy was refused as "-o .../X.npy.labels.npy is a directory", blaming
    -o for a name the user never gave; it is named as the labels file gen writes for -o X.npy."""
    (tmp_path / "X.npy.labels.npy").mkdir()
    out = tmp_path / "X.npy"
    assert main(["gen", "--profile", "higgs", "--records", "10", "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out}.labels.npy is a directory, and it is where gen writes the labels of -o {out}" in err, err
    assert f"-o {out}.labels.npy" not in err and not out.exists()


@pytest.mark.parametrize("args, said", [
    (["--size", "0"], "--size: must be positive, got '0'"),
    (["--size", "12x"], "--size: cannot read size '12x'"),
    (["--records", "5", "--workers", "0"], "--workers: must be >= 1, got 0")])
def test_gen_usage_errors_name_the_option(tmp_path, capsys, args, said):
    """--size 0 said "size must be positive", --size 12x "cannot read size '12x'", --workers 0
    "workers must be a positive integer": the Python API's parameter, not the option typed."""
    assert main(["gen", "--profile", "kdd", *args, "-o", str(tmp_path / "a.svm")]) == 2
    assert f"lirs gen: error: {said}" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
