"""One resume contract for every stateful piece (the Loader, the torch dataset): save the state at
every batch boundary, restore it in a fresh object, and the rest of the epoch is byte for byte what
the uninterrupted run delivered. And the ResumeState that carries it."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lirs
from lirs.errors import UsageError
from lirs.policies import GRANULARITIES
from lirs.state import STATE_VERSION, ResumeState


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("contract")
    rng = np.random.default_rng(11)
    lines = []
    for i in range(900):
        cols = np.sort(rng.choice(60, rng.integers(1, 8), replace=False)) + 1
        lines.append(f"{int(rng.integers(0, 2)) * 2 - 1} " + " ".join(f"{c}:{rng.integers(1, 99)}" for c in cols))
    p = d / "c.svm"
    p.write_text("\n".join(lines) + "\n")
    lirs.build_index(str(p), progress=False)
    return str(p)


def _bytes(X) -> bytes:
    """Every array of a batch's X (CSR: data, indices, indptr; torch CSR: its three tensors)."""
    if hasattr(X, "indptr"):
        return X.data.tobytes() + X.indices.tobytes() + X.indptr.tobytes()
    if hasattr(X, "crow_indices"):
        return b"".join(t.numpy().tobytes() for t in (X.values(), X.col_indices(), X.crow_indices()))
    return np.asarray(X).tobytes()


class _LoaderSide:
    """The Loader as the harness drives it."""

    def __init__(self, path, kw):
        self.obj = lirs.Loader(path, 64, **kw)

    def batches(self, epoch):
        for b in self.obj.epoch(epoch):
            yield b.ids.tobytes() + _bytes(b.X) + b.y.tobytes()

    def close(self):
        self.obj.close()


class _DatasetSide:
    """The torch dataset (main process) as the harness drives it."""

    def __init__(self, path, kw):
        from lirs.torch import LirsIterableDataset

        self.obj = LirsIterableDataset(path, 64, **kw)

    def batches(self, epoch):
        self.obj.set_epoch(epoch)  # before the first batch is asked for, as a training loop does
        return (b["ids"].numpy().tobytes() + _bytes(b["X"]) + b["y"].numpy().tobytes() for b in self.obj)

    def close(self):
        self.obj.close()


SIDES = {"loader": _LoaderSide, "dataset": _DatasetSide}


@pytest.mark.parametrize("side", list(SIDES))
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_save_at_every_boundary_and_restore(data, side, granularity):
    if side == "dataset":
        pytest.importorskip("torch")
    kw = dict(granularity=granularity, seed=3, group_bytes=4096, window=3)
    make = SIDES[side]
    whole = make(data, kw)
    want = list(whole.batches(2))
    whole.close()
    assert len(want) > 5
    for k in range(len(want) + 1):
        first = make(data, kw)
        it = first.batches(2)
        for _ in range(k):
            next(it)
        state = first.obj.state_dict()
        it.close()
        first.close()
        # before the first batch is asked for, nothing of the epoch has started: no epoch yet
        assert state["version"] == STATE_VERSION and state["next_batch"] == k
        assert state["epoch"] == 2 or (k == 0 and state["epoch"] is None)
        again = make(data, kw)
        again.obj.load_state_dict(state)
        assert list(again.batches(2)) == want[k:], f"resumed at batch {k}"
        again.close()


def test_resume_state_round_trip_and_versions():
    s = ResumeState(3, 7, [[0, 10], [20, 25]], {"seed": 1})
    d = s.to_dict()
    assert d == {"version": STATE_VERSION, "epoch": 3, "next_batch": 7, "spans": [[0, 10], [20, 25]],
                 "config": {"seed": 1}}
    assert ResumeState.from_dict(d) == s and ResumeState.from_dict(d).config == {"seed": 1}
    old = {k: v for k, v in d.items() if k != "version"}  # states saved before the version existed
    assert ResumeState.from_dict(old) == s
    assert s.at(9).next_batch == 9 and s.at(9).spans == s.spans and s.at(0, epoch=4).epoch == 4
    assert s.to_dict(worker=True)["worker"] is None
    with pytest.raises(UsageError, match="version 99"):
        ResumeState.from_dict(dict(d, version=99))
    with pytest.raises(UsageError, match="unknown keys"):
        ResumeState.from_dict(dict(d, nxt=1))
    with pytest.raises(UsageError, match="next_batch >= 0"):
        ResumeState(0, -1)


def _lines(path, n, seed, width):
    rng = np.random.default_rng(seed)
    rows = [f"{int(rng.integers(0, 2)) * 2 - 1} " + " ".join(f"{c}:{rng.random():.{width}f}" for c in (1, 5, 9))
            for _ in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_a_state_is_refused_after_a_directorys_equal_shards_are_renamed_into_another_order(tmp_path):
    """Shards of equal layout renamed into another order and indexed again move records to other ids
    while every offset stays: a state saved before resumed into the new order, serving records twice
    and losing others. Refused now; a directory moved whole, its names kept, resumes; a state of a
    release that saved no file names is taken as before."""
    import shutil

    d = tmp_path / "ds"
    d.mkdir()
    for i in range(3):
        np.save(d / f"part-{i}.npy", np.arange(i * 100, i * 100 + 40, dtype=np.float32).reshape(40, 1))
    lirs.build_index(str(d), progress=False)
    kw = dict(granularity="instance", seed=3, engine="buffered")
    with lirs.Loader(str(d), 8, **kw) as ld:
        it = ld.epoch(0)
        head = [next(it).X[:, 0].copy() for _ in range(4)]
        state = ld.state_dict()
        rest = [b.X[:, 0].copy() for b in it]
    moved = tmp_path / "moved"
    shutil.copytree(d, moved, ignore=shutil.ignore_patterns("*.lirs"))
    lirs.build_index(str(moved), progress=False)
    with lirs.Loader(str(moved), 8, **kw) as ld:  # the same names in a new place: the same records
        ld.load_state_dict(state)
        got = [b.X[:, 0].copy() for b in ld.epoch(0)]
    assert all(np.array_equal(x, y) for x, y in zip(got, rest)) and len(got) == len(rest)
    os.rename(d / "part-0.npy", d / "part-3.npy")  # the first shard's records now come last
    lirs.build_index(str(d), progress=False)
    with lirs.Loader(str(d), 8, **kw) as ld:
        with pytest.raises(UsageError, match=r"records lie elsewhere \(its files are others, or in another order"):
            ld.load_state_dict(state)
        ld.load_state_dict(dict(state, config={k: v for k, v in state["config"].items() if k != "files"}))
    assert len(np.unique(np.concatenate(head + rest))) == 120


def test_a_state_resumes_only_where_its_records_lie(tmp_path):
    """A state names batches of a plan, and a plan of where the records lie: on another dataset
    of the same count and format (other record sizes) it is refused, not resumed into other
    records (some lost, some twice); on the same data indexed again, or with labels edited in
    place (the records where they were), it resumes exactly; a state of an older release (no
    layout saved) is taken as before."""
    a, b = _lines(tmp_path / "a.svm", 3000, 1, 3), _lines(tmp_path / "b.svm", 3000, 2, 5)
    for p in (a, b):
        lirs.build_index(p, progress=False)
    kw = dict(granularity="group", group_bytes=8192, seed=7)
    with lirs.Loader(a, 100, **kw) as ld:
        it = ld.epoch(2)
        head = [next(it).ids.copy() for _ in range(10)]
        state = ld.state_dict()
        rest = [x.ids.copy() for x in it]
    with lirs.Loader(b, 100, **kw) as other:
        with pytest.raises(UsageError, match="records lie elsewhere"):
            other.load_state_dict(state)
    lirs.build_index(a, progress=False)  # indexed again, and labels edited in place
    data = open(a, "rb").read().replace(b"\n1 ", b"\n3 ")
    with open(a, "wb") as f:
        f.write(data)
    lirs.build_index(a, progress=False)
    for st in (state, dict(state, config={k: v for k, v in state["config"].items() if k != "layout"})):
        with lirs.Loader(a, 100, **kw) as again:
            again.load_state_dict(st)
            got = [x.ids.copy() for x in again.epoch(2)]
        assert len(got) == len(rest) and all(np.array_equal(x, y) for x, y in zip(got, rest))
    assert len(np.unique(np.concatenate(head + rest))) == 3000
