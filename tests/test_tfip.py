"""TFIP (exact pre-shuffle, then a shuffle buffer every epoch) and the buffer-only stream: the
order they deliver, every record once per epoch, determinism by seed, the pre-processing counted."""
from __future__ import annotations

import numpy as np
import pytest

import lirs
from lirs.errors import UsageError
from lirs.eval.reference import shuffle_buffer_order
from lirs.eval.tfip import TFIP, BufferStream, pre_shuffle
from lirs.inputs import labels_path


def _id_npy(d, n=5000, width=160):
    """An .npy whose row i holds i in column 0 (so a batch tells which records it holds) and labels
    i % 2 (float64, in the labels file)."""
    X = np.zeros((n, width), np.float32)
    X[:, 0] = np.arange(n)
    X[:, 1:] = np.random.default_rng(5).random((n, width - 1))
    p = str(d / "ids.npy")
    np.save(p, X)
    np.save(labels_path(p), (np.arange(n) % 2).astype(np.float64))
    return p, X


def _epoch_ids(src, e):
    ids, pos, ys = [], [], []
    for p, X, y in src.epoch(e):
        ids.append(X[:, 0].astype(np.int64))
        pos.append(p)
        ys.append(y)
    return np.concatenate(ids), np.concatenate(pos), np.concatenate(ys)


def test_tfip_is_the_preshuffled_file_through_the_buffer(tmp_path):
    path, X = _id_npy(tmp_path)
    n = len(X)
    with TFIP(path, str(tmp_path / "shuf.npy"), 64, buffer_records=300, seed=4, memory="1500K") as t:
        st = t.prepare()
        shuffled = np.load(str(tmp_path / "shuf.npy"))[:, 0].astype(np.int64)
        # the pre-processing is an exact permutation of the records, and it is counted
        assert np.array_equal(np.sort(shuffled), np.arange(n))
        assert not np.array_equal(shuffled, np.arange(n))
        assert st["records"] == n and st["piles"] > 1  # the two-pass route, as on a big file
        assert t.pre_s == st["pre_s"] > 0 and st["index_s"] >= 0
        assert st["bytes_written"] >= 2 * n * X.itemsize * X.shape[1]
        for e in range(2):
            ids, pos, y = _epoch_ids(t, e)
            order = shuffle_buffer_order(n, 300, seed=4, epoch=e)
            assert np.array_equal(pos, order)  # positions of the copy, as the buffer emits them
            assert np.array_equal(ids, shuffled[order])  # ... holding these records
            assert np.array_equal(np.sort(ids), np.arange(n))  # every record exactly once
            assert np.array_equal(y, ids % 2)  # labels followed their rows
        assert not np.array_equal(_epoch_ids(t, 0)[0], _epoch_ids(t, 1)[0])


def test_tfip_is_deterministic_by_seed(tmp_path):
    path, _ = _id_npy(tmp_path, n=2000)
    got = []
    for k, seed in enumerate((1, 1, 2)):
        with TFIP(path, str(tmp_path / f"s{k}.npy"), 50, buffer_records=100, seed=seed, memory="1500K") as t:
            t.prepare()
            got.append(_epoch_ids(t, 3)[0])
    assert np.array_equal(got[0], got[1])
    assert not np.array_equal(got[0], got[2])


def test_buffer_only_reads_the_file_as_stored(tmp_path):
    path, X = _id_npy(tmp_path, n=3000)
    idx = lirs.build_index(path)
    with BufferStream(idx, 128, buffer_records=200, seed=9) as s:
        ids, pos, _ = _epoch_ids(s, 0)
        assert np.array_equal(ids, pos)  # no pre-shuffle: positions are the record IDs
        assert np.array_equal(ids, shuffle_buffer_order(3000, 200, seed=9, epoch=0))
        # a buffer of 200 moves a record at most ~ a few buffers from its place: only local mixing
        assert np.abs(ids[:1000] - np.arange(1000)).max() < 3000 // 2
        assert s.bytes_read >= 3000 * X.itemsize * X.shape[1]


def test_buffer_stream_on_libsvm_keeps_labels(tmp_path):
    p = tmp_path / "a.svm"
    rng = np.random.default_rng(0)
    lab = rng.choice([-1, 1], 700)
    p.write_text("".join(f"{lab[i]} 1:{i} 3:0.5\n" for i in range(700)))
    idx = lirs.build_index(str(p))
    with BufferStream(idx, 64, buffer_records=50, seed=0) as s:
        for pos, X, y in s.epoch(1):
            assert np.array_equal(X[:, 0].toarray().ravel().astype(np.int64), pos)
            assert np.array_equal(y, lab[pos])


def test_bad_arguments(tmp_path):
    path, _ = _id_npy(tmp_path, n=100)
    with pytest.raises(UsageError, match="own input"):
        TFIP(path, path, 10)
    t = TFIP(path, str(tmp_path / "o.npy"), 10)
    with pytest.raises(UsageError, match="prepare"):
        t.order(0)
    idx = lirs.build_index(path)
    with pytest.raises(UsageError, match="buffer_records"):
        BufferStream(idx, 10, buffer_records=0)
    with pytest.raises(UsageError, match="own input|output"):
        pre_shuffle(path, path)


@pytest.mark.slow
def test_bench_paper_smoke(tmp_path):
    """benchmarks/bench_paper.py on tiny files: both parts, a total per method, and the reductions."""
    import json
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "paper.json"
    r = subprocess.run([sys.executable, os.path.join(repo, "benchmarks", "bench_paper.py"), "--smoke", "--dir",
                        str(tmp_path), "--json", str(out), "--envelopes", "nvme"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    for part, base in (("svm", "bmf"), ("dnn", "tfip")):
        rows = res[part]["devices"]["nvme"]
        assert rows[base]["epochs_to_target"] and rows[base]["total_to_target_s"] > rows[base]["pre_s"] > 0
        assert all(k in rows for k in ("lirs-instance", "lirs-window"))
        assert set(res["reductions"][part]) >= {"lirs-instance", "lirs-window"}
    assert res["dnn"]["dataset"]["methods"]["tfip"]["pre_stats"]["bytes_written"] > 0
    assert (tmp_path / "paper.png").exists()
