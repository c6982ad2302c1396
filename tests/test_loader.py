"""Loader contract: for every engine and granularity, batches equal a plain Python reading of the file."""
from __future__ import annotations

import asyncio
import os
import pickle
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import lirs
from conftest import open_fds
from lirs.errors import DataError, StaleIndexError, UsageError
from lirs.loader import Batch, Loader
from lirs.policies import DEFAULT_GRANULARITY

GRANULARITIES = ("instance", "page", "group", "window")


# --------------------------------------------------------------------------- data


def _write_libsvm(path, n, seed, n_features=300):
    """Seeded LIBSVM text with comments and blank lines mixed in; records of ~10 B to ~6 KB."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("# a header comment\n")
        for i in range(n):
            k = int(rng.choice([0, 1, 3, 20, 400], p=[0.05, 0.2, 0.4, 0.3, 0.05]))
            cols = np.sort(rng.choice(n_features, min(k, n_features), replace=False)) + 1
            vals = rng.integers(-999, 999, len(cols)) / 8
            f.write(f"{rng.choice([-1, 1])}" + "".join(f" {c}:{v:g}" for c, v in zip(cols, vals)))
            f.write("  # tail comment\n" if i % 37 == 0 else "\n")
            if i % 53 == 0:
                f.write("\n")
    return str(path)


def _read_spans(index, ids):
    """Plain Python: each record's bytes by seek + read, straight from the index's spans."""
    f, s, e = index.spans(ids)
    out = []
    handles = [open(p, "rb") for p in index.paths]
    try:
        for fi, a, b in zip(f, s, e):
            h = handles[fi]
            h.seek(int(a))
            out.append(h.read(int(b - a)))
    finally:
        for h in handles:
            h.close()
    return out


@pytest.fixture(scope="module")
def svm(tmp_path_factory):
    d = tmp_path_factory.mktemp("svm")
    p = _write_libsvm(d / "train.svm", 3000, seed=11)
    idx = lirs.build_index(p, progress=False)
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(p, dtype=np.float32, n_features=300)
    return p, idx, X, y


def _collect(loader, epoch, **kw):
    return list(loader.epoch(epoch, **kw))


def _assert_libsvm_batches(batches, X, y, n):
    seen = np.concatenate([b.ids for b in batches])
    assert np.array_equal(np.sort(seen), np.arange(n)), "every record exactly once"
    for b in batches:
        assert isinstance(b, Batch) and b.ids.dtype == np.int64
        assert b.X.shape == (len(b.ids), X.shape[1]) and b.X.dtype == np.float32
        assert (b.X != X[b.ids]).nnz == 0
        assert b.y.dtype == np.float64 and np.array_equal(b.y, y[b.ids])


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_libsvm_batches_match_sklearn(svm, engine_name, granularity):
    p, idx, X, y = svm
    with Loader(p, 128, granularity=granularity, group_bytes=8192, window=4, seed=3, engine=engine_name,
                prefetch=3, n_features=300) as loader:
        assert loader.engine.name == engine_name
        batches = _collect(loader, 1)
        plan = loader.plan(1)
        assert [b.index for b in batches] == list(range(plan.num_batches))
        for b, bp in zip(batches, plan.batches()):
            assert np.array_equal(b.ids, bp.ids), "batches arrive in plan order"
        _assert_libsvm_batches(batches, X, y, idx.n)
        st = loader.stats
        assert st.records == idx.n and st.batches == len(batches)
        assert st.bytes_read >= st.payload_bytes > 0


def test_n_features_is_the_row_width_of_npy_and_fixed_records(tmp_path):
    """`Loader.n_features` was None for `.npy` and raw fixed records, so the README's
    `np.zeros(loader.n_features)` failed; the index and the torch dataset said the width."""
    p = tmp_path / "x.npy"
    np.save(p, np.arange(70, dtype=np.float32).reshape(10, 7))
    with lirs.Loader(str(p), 4) as ld:
        assert ld.n_features == 7 == ld.index.n_features
    r = tmp_path / "r.bin"
    r.write_bytes(bytes(80))
    with lirs.Loader(lirs.build_index(str(r), record_size=8, progress=False), 4) as ld:
        assert ld.n_features == ld.index.n_features == 8
    q = tmp_path / "l.jsonl"
    q.write_bytes(b"{}\n[]\n")
    with lirs.Loader(str(q), 1) as ld:
        assert ld.n_features is None


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_npy_and_lines_bytes_match(tmp_path, granularity):
    rng = np.random.default_rng(5)
    arr = rng.standard_normal((2000, 7)).astype(np.float32)
    pn = str(tmp_path / "dense.npy")
    np.save(pn, arr)
    lines = [("x" * int(rng.integers(0, 900))).encode() + b"%d" % i for i in range(1500)]
    pl = str(tmp_path / "text.jsonl")
    with open(pl, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    for p, fmt in ((pn, "npy"), (pl, "lines")):
        idx = lirs.build_index(p, format=fmt, progress=False)
        with Loader(p, 100, granularity=granularity, group_bytes=8192, window=3, seed=1) as loader:
            batches = _collect(loader, 0)
        seen = np.concatenate([b.ids for b in batches])
        assert np.array_equal(np.sort(seen), np.arange(idx.n))
        for b in batches:
            raw = _read_spans(idx, b.ids)
            if fmt == "npy":
                assert isinstance(b.X, np.ndarray) and b.X.shape == (len(b.ids), 7)
                assert b.X.tobytes() == b"".join(raw)
                assert np.array_equal(b.X, arr[b.ids])
            else:
                assert b.X == [r.rstrip(b"\n") for r in raw]
                assert b.X == [lines[i] for i in b.ids]


def test_several_files_through_their_sidecar(tmp_path, engine_name):
    a = _write_libsvm(tmp_path / "a.svm", 700, seed=1)
    b = _write_libsvm(tmp_path / "b.svm", 500, seed=2)
    side = str(tmp_path / "ab.lirs")
    idx = lirs.build_index([a, b], out=side, progress=False)
    from sklearn.datasets import load_svmlight_file

    Xa, ya = load_svmlight_file(a, dtype=np.float32, n_features=300)
    Xb, yb = load_svmlight_file(b, dtype=np.float32, n_features=300)
    import scipy.sparse as sp

    X, y = sp.vstack([Xa, Xb]).tocsr(), np.concatenate([ya, yb])
    with Loader(side, 64, granularity="group", group_bytes=4096, engine=engine_name, n_features=300) as loader:
        _assert_libsvm_batches(_collect(loader, 0), X, y, idx.n)
    with pytest.raises(UsageError, match="sidecar"):
        Loader([a, b], 64)


def test_resume_equals_uninterrupted(svm, engine_name):
    p, idx, X, y = svm
    kw = dict(granularity="window", group_bytes=8192, window=4, seed=9, engine=engine_name, n_features=300)
    with Loader(p, 100, **kw) as full:
        whole = _collect(full, 2)
    with Loader(p, 100, **kw) as first:
        it = first.epoch(2)
        head = [next(it) for _ in range(7)]
        state = pickle.loads(pickle.dumps(first.state_dict()))
        it.close()
    assert state["epoch"] == 2 and state["next_batch"] == 7
    with Loader(p, 100, **kw) as second:
        second.load_state_dict(state)
        tail = _collect(second, 2)
        assert second.state_dict()["next_batch"] == len(whole)
    assert len(head) + len(tail) == len(whole)
    for got, want in zip(head + tail, whole):
        assert got.index == want.index and np.array_equal(got.ids, want.ids)
        assert (got.X != want.X).nnz == 0 and np.array_equal(got.y, want.y)


@pytest.mark.parametrize("granularity", ["group", "window"])
def test_the_position_follows_every_batch_delivered_whoever_asks(svm, granularity):
    # the position moves past a batch when it is asked for, not at each batch: asked after every
    # batch, after some, or only at the end, with a stride and across epochs, it is the same
    p, _, _, _ = svm
    kw = dict(granularity=granularity, group_bytes=8192, window=4, seed=3, n_features=300)
    with Loader(p, 64, **kw) as ld:
        assert ld.position.epoch is None
        for e, (stride, offset) in enumerate([(1, 0), (3, 1), (2, 1)]):
            nb = ld.num_batches(e)
            seen = []
            for i, b in enumerate(ld.epoch(e, stride=stride, offset=offset)):
                if i % (e + 1) == 0:  # every batch, every second, every third
                    seen.append((ld.position.epoch, ld.position.next_batch, ld.state().next_batch))
                    assert seen[-1] == (e, min(b.index + stride, nb), min(b.index + stride, nb))
            assert (ld.position.epoch, ld.position.next_batch) == (e, nb)
            assert ld.state().next_batch == nb and seen
        it = ld.epoch(5)
        next(it), next(it)
        it.close()
        assert (ld.state().epoch, ld.state().next_batch) == (5, 2)
        next(ld.epoch(6))  # a new epoch starts: the last one's move is not carried into it
        assert (ld.position.epoch, ld.position.next_batch) == (6, 1)


def test_resume_refuses_another_configuration(svm):
    p, *_ = svm
    with Loader(p, 100, seed=1, n_features=300) as a:
        state = a.state_dict()
    with Loader(p, 100, seed=2, n_features=300) as b:
        with pytest.raises(UsageError, match="seed"):
            b.load_state_dict(state)


def test_aepoch_equals_epoch(svm, engine_name):
    p, idx, X, y = svm
    with Loader(p, 256, engine=engine_name, seed=4, n_features=300) as loader:
        sync = _collect(loader, 0)

        async def collect():
            return [b async for b in loader.aepoch(0)]

        asyn = asyncio.run(collect())
    assert len(sync) == len(asyn)
    for s, a in zip(sync, asyn):
        assert np.array_equal(s.ids, a.ids) and (s.X != a.X).nnz == 0


def test_a_filesystem_refusing_o_direct_makes_reads_copies(tmp_path, monkeypatch):
    """As on tmpfs: every engine that may use O_DIRECT reads through the page cache, so the
    Loader's default engine plans exact extents (an instance step holds several batches) and its
    batches are the aligned plan's."""
    from lirs.engines import reads_are_copies

    from test_engines import _refuse_o_direct

    p = _write_libsvm(tmp_path / "d.svm", 2000, seed=6)
    paths = [p]
    lirs.build_index(p, progress=False)
    kw = dict(granularity="instance", seed=2, n_features=300)
    with lirs.Loader(p, 40, **kw) as aligned:
        assert aligned.plan(0).align == lirs.constants.BLOCK and aligned.plan(0).batches_per_step == 1
        want = [(b.ids, b.X) for b in aligned.epoch(0)]
    monkeypatch.delenv("LIRS_ENGINE", raising=False)
    _refuse_o_direct(monkeypatch)
    assert reads_are_copies("auto", None, paths) and reads_are_copies("threads", None, paths)
    assert not reads_are_copies("auto", True, paths) and not reads_are_copies("auto", None, [])
    with lirs.Loader(p, 40, **kw) as copied:
        got = copied_batches(copied)
    assert_same_batches(got, want)


def copied_batches(loader, epoch: int = 0) -> list:
    """(ids, X) of each batch of ``epoch`` from a Loader whose reads must be copies: its plan's
    extents exact (an instance step holds several batches), no O_DIRECT, only the records' bytes read."""
    assert loader.plan(epoch).align == 1 and loader.plan(epoch).batches_per_step > 1
    got = [(b.ids, b.X) for b in loader.epoch(epoch)]
    assert not loader.engine.direct
    assert loader.stats.bytes_read == loader.stats.payload_bytes
    return got


def assert_same_batches(got: list, want: list) -> None:
    """The same (ids, CSR X) batches, in the same order."""
    assert len(got) == len(want)
    assert all(np.array_equal(a[0], b[0]) and (a[1] != b[1]).nnz == 0 for a, b in zip(got, want))


@pytest.mark.parametrize("start", [0, 13])
def test_an_instance_epoch_of_copied_reads_reads_the_records_bytes_alone(svm, start):
    """Engine buffered (reads are copies): an instance step reads its records' bytes and nothing
    else (no block around each), so it holds several batches; the batches, from any start, are the
    ones a loader whose reads may be O_DIRECT delivers."""
    p, idx, X, y = svm
    kw = dict(granularity="instance", seed=3, n_features=300)
    # engine threads plans block-aligned reads whether or not this filesystem takes O_DIRECT
    with Loader(p, 50, engine="buffered", **kw) as copied, Loader(p, 50, engine="threads", **kw) as aligned:
        assert copied.plan(0).batches_per_step > 1 and aligned.plan(0).batches_per_step == 1
        got, want = _collect(copied, 0, start=start), _collect(aligned, 0, start=start)
        assert [b.index for b in got] == [b.index for b in want]
        for a, b in zip(got, want):
            assert np.array_equal(a.ids, b.ids) and (a.X != b.X).nnz == 0 and np.array_equal(a.y, b.y)
        assert copied.stats.bytes_read == copied.stats.payload_bytes > 0
        assert aligned.stats.bytes_read > 4 * aligned.stats.payload_bytes
    with Loader(p, 50, engine="buffered", **kw) as again:
        _assert_libsvm_batches(_collect(again, 1), X, y, len(y))


def test_truncated_file_raises_in_consumer(tmp_path, engine_name):
    """A file truncated after the Loader opened its index: the first epoch's open of the file finds
    it (StaleIndexError naming it); were the engine's size check off, the reads come back short and
    the records they miss are a DataError naming the byte where the file ends, never served."""
    p = _write_libsvm(tmp_path / "t.svm", 2000, seed=3)
    data = open(p, "rb").read()
    lirs.build_index(p, progress=False)
    with Loader(p, 50, granularity="instance", engine=engine_name, prefetch=2) as loader:
        os.truncate(p, len(data) // 2)  # after indexing: the index still promises the whole file
        with pytest.raises(StaleIndexError, match=r"t\.svm changed since its index was checked.*size changed"):
            for _ in loader.epoch(0):
                pass
    with open(p, "wb") as f:
        f.write(data)
    lirs.build_index(p, progress=False)
    with Loader(p, 50, granularity="instance", engine=engine_name, prefetch=2) as loader:
        loader.engine.check_changes = False  # the last line of defence alone
        os.truncate(p, len(data) // 2)
        with pytest.raises(DataError) as ei:
            for _ in loader.epoch(0):
                pass
    msg = str(ei.value)
    assert p in msg and "byte" in msg and "ends at byte" in msg


@pytest.mark.parametrize("granularity", ["group", "instance"])
def test_a_bad_record_in_a_step_of_two_files_names_its_file_line_and_record(tmp_path, granularity):
    # a byte rewritten in place while the loader is open, size and modification time kept
    # (nothing the checks on open and after each read can see): the decode error names b.svm, the
    # line and byte in it, and the record's global ID, in a step that mixes records of both files
    a, b = tmp_path / "a.svm", tmp_path / "b.svm"
    a.write_bytes(b"".join(b"1 1:1 2:0.5\n" for _ in range(300)))
    b.write_bytes(b"".join(b"-1 3:1 4:0.25\n" for _ in range(200)))
    side = str(tmp_path / "ab.lirs")
    lirs.build_index([str(a), str(b)], out=side, progress=False)
    line = 50  # 0-based: record 300 + 50 of the dataset
    with Loader(side, 64, granularity=granularity, group_bytes=4096, n_features=10, engine="buffered") as loader:
        st = os.stat(b)
        raw = bytearray(b.read_bytes())
        at = raw.index(b"3:1", line * 14)
        raw[at + 2:at + 3] = b"x"
        with open(b, "r+b") as f:
            f.write(bytes(raw))
        os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
        with pytest.raises(DataError) as ei:
            _collect(loader, 0)
    assert str(ei.value).startswith(f"{b}: line {line + 1}, byte {at} (record {300 + line}): ")


def test_read_error_raises_in_consumer(svm, engine_name):
    from lirs.engines import ReadError

    p, *_ = svm
    with Loader(p, 64, engine=engine_name, n_features=300) as loader:
        eng = loader.engine
        real = int(eng.fds[0])
        eng.fds[0] = 1 << 20  # every read now fails with EBADF
        try:
            with pytest.raises(ReadError) as ei:
                _collect(loader, 0)
        finally:
            eng.fds[0] = real
        assert ei.value.filename == p and "offset" in str(ei.value)
        # the loader still works after the failure
        assert len(_collect(loader, 0)) == loader.num_batches(0)


@pytest.mark.parametrize("own_index", [False, True])
def test_close_leaves_nothing_behind(svm, engine_name, own_index):
    import gc

    p, idx, *_ = svm
    before_fds, before_threads = open_fds(), set(threading.enumerate())
    loader = Loader(p if own_index else idx, 64, engine=engine_name, prefetch=4, n_features=300)
    it = loader.epoch(0)
    for _ in range(3):
        next(it)  # abandon the epoch with batches in flight
    loader.close()
    loader.close()
    del it
    gc.collect()
    assert set(threading.enumerate()) - before_threads == set()
    assert set(open_fds().items()) - set(before_fds.items()) == set()
    with pytest.raises(ValueError, match="closed"):
        next(loader.epoch(0))


def test_forked_child_makes_its_own_engine(svm):
    p, *_ = svm
    with Loader(p, 200, seed=6, n_features=300) as loader:
        parent = [b.ids for b in loader.epoch(0)]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = b"0"
            try:
                child = [b.ids for b in loader.epoch(0)]
                ok = b"1" if all(np.array_equal(a, c) for a, c in zip(parent, child)) and \
                    len(child) == len(parent) else b"2"
                loader.close()
            finally:
                os.write(w, ok)
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
        os.close(r)
        # the parent's loader is untouched by the child's
        assert all(np.array_equal(a, b.ids) for a, b in zip(parent, loader.epoch(0)))


def test_bad_arguments(svm):
    p, *_ = svm
    with pytest.raises(UsageError):
        Loader(p, 0)
    with pytest.raises(UsageError):
        Loader(p, 10, prefetch=0)
    # drop_last with no full batch: every epoch would be empty, silently
    with pytest.raises(UsageError, match="leaves every epoch empty.*3000 records"):
        Loader(p, 3001, drop_last=True)
    with pytest.raises(UsageError, match="world_size must be >= 1, got 0"):
        Loader(p, 10, world_size=0)
    with pytest.raises(UsageError, match="on 2 ranks.*per rank"):
        Loader(p, 1501, drop_last=True, world_size=2)
    with Loader(p, 1500, drop_last=True, world_size=2, n_features=300) as loader:
        assert sum(len(b.ids) for b in loader.epoch(0)) == 1500
    with Loader(p, 100, n_features=300) as loader:
        with pytest.raises(UsageError, match="start batch"):
            next(loader.epoch(0, start=10**6))


def test_epoch_command(svm, capsys):
    import json

    from lirs.cli import main

    p, idx, *_ = svm
    assert main(["epoch", p, "--batch-size", "256", "--compute-ms", "1", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["records"] == idx.n and res["batches"] == -(-idx.n // 256)
    assert 0 <= res["stall_fraction"] <= 1 and res["amplification"] >= 1
    assert res["engine"] in ("uring", "threads", "buffered", "aiofiles") and res["peak_rss_bytes"] > 0
    assert res["read_ahead_counted"] is False
    assert main(["epoch", p, "--max-batches", "2", "--engine", "buffered"]) == 0
    out = capsys.readouterr().out
    assert "records/s" in out and "stall" in out and "buffered" in out
    # cut short, the counters hold what was read ahead of the last batch: said, not passed off as its reads
    assert "with the steps read ahead of the last batch" in out
    assert main(["epoch", p, "--max-batches", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["read_ahead_counted"] is True
    assert main(["epoch", p, "--engine", "nope"]) == 2
    capsys.readouterr()
    assert main(["epoch", p, "--granularity", "auto", "--max-batches", "1", "--json"]) == 0  # what auto chose
    assert json.loads(capsys.readouterr().out)["granularity"] == DEFAULT_GRANULARITY
    for bad in ("nan", "inf", "-1", "1e308"):  # no sleep(NaN) traceback: one line, a usage error
        assert main(["epoch", p, "--compute-ms", bad]) == 2
        err = capsys.readouterr().err
        assert "--compute-ms must be a number of milliseconds" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("cmd", ["epoch", "order"])
@pytest.mark.parametrize("granularity,flag,value", [("instance", "--window", "64M"), ("group", "--window", "8"),
                                                    ("page", "--window", "5%"), ("instance", "--group-bytes", "128K"),
                                                    ("page", "--group-bytes", "8K")])
def test_an_option_the_granularity_does_not_use_is_refused(svm, tmp_path, capsys, cmd, granularity, flag, value):
    """`--granularity instance --window 64M` ran an instance epoch and reported it as asked: the
    window, unused, was ignored in silence. Refused before any work (the file is not even indexed)."""
    import shutil

    from lirs.cli import main

    p = str(tmp_path / "fresh.svm")
    shutil.copy(svm[0], p)
    assert main([cmd, p, "--granularity", granularity, flag, value]) == 2
    err = capsys.readouterr().err
    takers = "window" if flag == "--window" else "group or window"
    assert f"{flag} {value} applies to --granularity {takers} only" in err and f"--granularity {granularity}" in err, err
    assert not os.path.exists(p + ".lirs"), "refused before the file was indexed"


def test_the_options_a_granularity_uses_and_auto_are_taken(svm, capsys):
    import json

    from lirs.cli import main

    p = svm[0]
    for argv, want in ((["--granularity", "group", "--group-bytes", "8K"], ("group", 8192, None)),
                       (["--granularity", "window", "--group-bytes", "8K", "--window", "4"], ("window", 8192, 4)),
                       (["--granularity", "auto", "--group-bytes", "8K", "--window", "4"], (DEFAULT_GRANULARITY, 8192, 4)),
                       (["--granularity", "instance"], ("instance", 65536, None))):  # the default, as before
        assert main(["epoch", p, *argv, "--max-batches", "1", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["granularity"] == want[0] and got["group_bytes"] == want[1], got
        assert want[2] is None or got["window_groups"] == want[2], got


def test_epoch_text_counts_the_short_last_batch_as_it_is(svm, capsys):
    """3,000 records in batches of 1,024 printed "3 x 1024 records": 3,072, not the 3,000 served."""
    from lirs.cli import main

    p, idx, *_ = svm
    assert idx.n == 3000
    assert main(["epoch", p, "--batch-size", "1024"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("batches"))
    assert "3,000 records" in line and "x 1024" not in line, line
    assert main(["epoch", p, "--batch-size", "1000", "--max-batches", "2"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("batches"))
    assert "2,000 records" in line, line


def test_dropped_loader_is_freed(svm):
    import gc
    import weakref

    p, idx, *_ = svm
    before_threads = set(threading.enumerate())
    loader = Loader(idx, 64, n_features=300)
    next(iter(loader.epoch(0)))  # leaves batches in flight: they hold the loader until they finish
    freed = threading.Event()
    weakref.finalize(loader, freed.set)
    del loader
    gc.collect()
    assert freed.wait(timeout=30), "an unclosed loader must not be kept alive by its own threads"
    for t in set(threading.enumerate()) - before_threads:
        t.join(timeout=10)
    assert set(t for t in threading.enumerate() if t.is_alive()) - before_threads == set()


# --------------------------------------------------------------------------- transforms, strides


@pytest.mark.parametrize("granularity", ["group", "window"])
def test_transform_runs_on_the_pool(svm, granularity):
    p, idx, X, y = svm
    kw = dict(granularity=granularity, group_bytes=8192, window=4, seed=6, n_features=300)
    threads = []

    def fn(b):
        threads.append(threading.get_ident())
        return b.index, b.ids.copy(), b.X.sum()

    with Loader(p, 128, **kw) as plain:
        want = _collect(plain, 1)
    with Loader(p, 128, transform=fn, **kw) as loader:
        got = _collect(loader, 1)

        async def collect():
            return [b async for b in loader.aepoch(1)]

        agot = asyncio.run(collect())
        assert loader.state_dict()["next_batch"] == len(want)
    assert threading.get_ident() not in threads, "the transform never runs on the consumer's thread"
    assert len(threads) == 2 * len(want)
    for g in (got, agot):
        assert [i for i, _, _ in g] == [b.index for b in want]
        for (_, ids, s), b in zip(g, want):
            assert np.array_equal(ids, b.ids) and s == pytest.approx(b.X.sum())


def test_transform_error_reaches_the_consumer_at_its_batch(svm):
    p, *_ = svm
    from lirs.errors import TransformError

    def fn(b):
        if b.index == 3:
            raise KeyError("no such column")
        return b.index

    with Loader(p, 100, transform=fn, n_features=300) as loader:
        it = loader.epoch(0)
        assert [next(it) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(TransformError, match="KeyError on batch 3 of epoch 0") as e:
            next(it)
        assert isinstance(e.value.__cause__, KeyError)
    with pytest.raises(UsageError, match="callable"):
        Loader(p, 100, transform=3, n_features=300)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_stride_and_offset_give_every_wth_batch(svm, granularity):
    p, idx, X, y = svm
    kw = dict(granularity=granularity, group_bytes=8192, window=3, seed=2, n_features=300)
    with Loader(p, 90, **kw) as loader:
        whole = _collect(loader, 0)
        for W in (2, 3):
            for w in range(W):
                sub = list(loader.epoch(0, stride=W, offset=w))
                assert [b.index for b in sub] == [b.index for b in whole[w::W]]
                for a, b in zip(sub, whole[w::W]):
                    assert np.array_equal(a.ids, b.ids) and (a.X != b.X).nnz == 0
                assert loader.state_dict()["next_batch"] == len(whole)
        tail = list(loader.epoch(0, 5, stride=2, offset=1))
        assert [b.index for b in tail] == list(range(6, len(whole), 2))


def test_transform_keeps_prefetch_bounded(svm):
    import time

    p, *_ = svm
    calls = []
    with Loader(p, 50, prefetch=2, transform=lambda b: calls.append(b.index) or b.index, n_features=300) as loader:
        it = loader.epoch(0)
        assert next(it) == 0
        time.sleep(0.5)  # time enough for the pool to run ahead, were it not bounded
        assert len(calls) <= 2 + 2, f"{len(calls)} batches transformed ahead of a consumer at batch 0"
        assert list(it) == list(range(1, loader.num_batches(0)))


@pytest.mark.parametrize("transform", [False, True])
def test_batches_of_a_step_shared_by_several_batches(svm, monkeypatch, transform):
    """Read steps feeding 1, a few, or all batches: the same batches, matching sklearn, with and
    without a transform; every decoding thread has a step, and a transform stays prefetch-bounded."""
    from test_windows import _max_steps_in_flight


    p, idx, X, y = svm
    batch_bytes = 100 * idx.payload_bytes / idx.n
    ref = None
    for step_bytes in (1, int(3.5 * batch_bytes), 10**12):
        monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", step_bytes)
        done = []
        fn = (lambda b: done.append(b.index) or b) if transform else None
        with Loader(p, 100, granularity="group", group_bytes=8192, seed=2, prefetch=2, transform=fn,
                    n_features=300) as loader:
            per = loader.plan(0).batches_per_step
            batches = _collect(loader, 0)
            transformed = sorted(done)
            workers = loader._pipeline.workers
            most = _max_steps_in_flight(monkeypatch, loader, epoch=1)[0]
        _assert_libsvm_batches(batches, X, y, idx.n)
        ids = [b.ids for b in batches]
        if ref is None:
            ref = ids
        assert all(np.array_equal(a, b) for a, b in zip(ref, ids)) and len(ref) == len(ids)
        assert (per > 1) == (step_bytes > 1)
        if 1 < per < len(batches):
            assert most >= min(workers + 1, -(-len(batches) // per))
        assert transformed == (list(range(len(batches))) if transform else [])


def _one_wait_an_item(svm, monkeypatch, batches_a_unit: float, kw: dict):
    """A Loader epoch of ``svm`` whose steps hold ``batches_a_unit`` batches of 50 (STEP_MIN_BYTES
    set so): (plan, its batches, the state after each, the items the consumer waited for), the
    batches checked to be the plan's and to match sklearn."""
    from lirs.pipeline import EpochRun

    p, idx, X, y = svm
    monkeypatch.setattr(_policies(), "STEP_MIN_BYTES", int(batches_a_unit * 50 * idx.payload_bytes / idx.n))
    waits = []
    real = EpochRun.wait
    monkeypatch.setattr(EpochRun, "wait", lambda self, item: waits.append(item) or real(self, item))
    with Loader(p, 50, **kw) as loader:
        plan = loader.plan(0)
        batches, states = [], []
        for b in loader.epoch(0):
            batches.append(b)
            states.append(loader.state_dict())
    assert [b.index for b in batches] == list(range(plan.num_batches))
    for b, bp in zip(batches, plan.batches(extents=False)):
        assert np.array_equal(b.ids, bp.ids)
    _assert_libsvm_batches(batches, X, y, idx.n)
    return plan, batches, states, waits


def _resumes_after(svm, kw: dict, batches: list, state, k: int) -> None:
    """A Loader resumed at ``state`` (saved after batch ``k``) gives exactly ``batches[k + 1:]``."""
    with Loader(svm[0], 50, **kw) as loader:
        loader.load_state_dict(state)
        rest = list(loader.epoch(0))
    assert [b.index for b in rest] == list(range(k + 1, len(batches)))
    for a, b in zip(rest, batches[k + 1:]):
        assert np.array_equal(a.ids, b.ids) and (a.X != b.X).nnz == 0 and np.array_equal(a.y, b.y)


@pytest.mark.parametrize("granularity", ["group", "instance"])
def test_a_shared_steps_batches_come_from_one_wait_and_resume_inside_it(svm, monkeypatch, granularity):
    """The consumer takes a shared step's batches as one: one wait a step, not a batch; the
    batches are the plan's, matching sklearn, and a state saved between two batches of one step
    resumes with exactly the batches after it."""
    kw = dict(granularity=granularity, group_bytes=8192, seed=5, engine="buffered", direct=False, n_features=300)
    plan, batches, states, waits = _one_wait_an_item(svm, monkeypatch, 4.5, kw)
    steps = [bp.parts[0].step.number for bp in plan.batches(extents=False)]
    assert plan.batches_per_step > 1 and len(waits) == len(set(steps)) < len(batches)
    k = next(i for i in range(1, len(steps) - 1) if steps[i] == steps[i + 1] == steps[i - 1])
    _resumes_after(svm, kw, batches, states[k], k)


@pytest.mark.parametrize("prefetch", [1, 3])
def test_a_windows_batches_come_a_few_from_one_wait_and_resume_inside_them(svm, monkeypatch, prefetch):
    """Window epochs: the consumer takes consecutive batches of one window step as one item (one
    wait for them, lirs.walker.WindowSteps.units), and a batch that spans two windows alone; the
    batches are the plan's, matching sklearn, and a state saved between two batches of one item
    resumes with exactly the batches after it."""
    from lirs.steps import SharedStep

    kw = dict(granularity="window", group_bytes=8192, window=5, seed=5, engine="buffered", direct=False,
              n_features=300, prefetch=prefetch)
    plan, batches, states, waits = _one_wait_an_item(svm, monkeypatch, 3.5, kw)
    items = list(plan.batches(extents=False, units=True))
    assert len(waits) == len(items) < len(batches)
    assert [type(w.plan) for w in waits] == [type(u) for u in items]
    first = [u.plans[0].index for u in items if isinstance(u, SharedStep)]
    k = first[len(first) // 2]  # the first batch of an item, its next one in the same item
    _resumes_after(svm, kw, batches, states[k], k)


def test_the_last_plan_is_let_go_before_the_next_is_made(svm):
    """Two epochs' permutations (4 B a unit each) are never held at once by the Loader's cache."""
    import weakref

    p, idx, X, y = svm
    with lirs.Loader(idx, 64, granularity="group", group_bytes=4096) as L:
        first = weakref.ref(L.plan(1))
        alive = []
        make = L._make_plan
        L._make_plan = lambda epoch, spans=None: (alive.append(first() is not None), make(epoch, spans))[1]
        assert L.plan(1) is first()  # cached
        L.plan(2)
        assert alive == [False]


def _policies():
    """The module whose STEP_MIN_BYTES sizes a group read step."""
    from lirs import policies
    return policies


@pytest.mark.parametrize("kw,said", [
    (dict(rank=1.5, world_size=2), "rank must be an int"), (dict(world_size=2.7), "world_size must be an int"),
    (dict(seed=1.5), "seed must be an int"), (dict(group_bytes=4096.5), "group_bytes must be an int"),
    (dict(granularity="group", group_bytes=2**64), r"group_bytes must be at most 2\*\*62"),
    (dict(window=2.5), "window must be a group count"), (dict(depth=0), "depth must be >= 1"),
    (dict(depth=1.5), "depth must be an int"), (dict(depth=33000), "depth must be at most 4096"),
    (dict(direct=0), "direct must be True, False or None, got 0"), (dict(direct="no"), "direct must be"),
    (dict(engine="bogus"), "unknown engine 'bogus'"),  # at construction, not at the first epoch
])
def test_a_float_where_an_int_is_wanted_is_refused_not_truncated(svm, kw, said):
    """rank=1.5 would have read rank 1's batches, window=2.5 one group, depth=0 the default:
    each is a UsageError naming the argument, at construction. A size string for group_bytes is
    taken as the CLI takes it."""
    p, *_ = svm
    with pytest.raises(UsageError, match=said):
        Loader(p, 64, **kw)
    with Loader(p, 64, group_bytes="64K") as ld:
        assert ld.group_bytes == 65536
        with pytest.raises(UsageError, match="epoch must be an int"):
            ld.set_epoch(1.5)
        with pytest.raises(UsageError, match="epoch must be an int"):
            next(iter(ld.epoch(1.5)))


def test_the_torch_dataset_checks_its_arguments_when_made(svm):
    """LirsIterableDataset and make_dataloader refuse what the Loader would refuse at the first pass
    (an unknown keyword, a granularity name, a float batch size or worker count) when they are made."""
    pytest.importorskip("torch")
    from lirs.torch import LirsIterableDataset, make_dataloader

    p, *_ = svm
    for args, kw, err, said in [((p, 16.9), {}, UsageError, "batch_size must be an int"),
                                ((p, "16"), {}, UsageError, "batch_size must be an int"),
                                ((p, 4), dict(granularity="bogus"), UsageError, "granularity must be one of"),
                                ((p, 4), dict(foo=1), TypeError, "unexpected keyword argument 'foo'"),
                                ((p, 4), dict(epoch=1.5), UsageError, "epoch must be an int")]:
        with pytest.raises(err, match=said):
            LirsIterableDataset(*args, **kw)
    with pytest.raises(UsageError, match="num_workers must be an int"):
        make_dataloader(p, 4, num_workers=1.7)


@pytest.mark.parametrize("granularity", ["instance", "group", "window"])
def test_a_loader_closed_mid_epoch_stops_its_epoch_at_once(svm, granularity):
    """close() during an epoch: the epoch's next batch is ValueError("this Loader is closed"),
    not the batches read ahead before (how many there were is no business of the loop), the
    other batches of a step several share included."""
    p, *_ = svm
    ld = Loader(p, 16, granularity=granularity, prefetch=8, group_bytes=65536, window="128K")
    it = ld.epoch(0)
    next(it)
    ld.close()
    with pytest.raises(ValueError, match="this Loader is closed"):
        next(it)


def test_an_epoch_begun_before_a_fork_is_refused_in_the_child(svm):
    """Its reads were the parent's pool threads', which the child has not: going on with it hung
    for ever. A UsageError in the child; the parent's epoch and a new epoch in the child are whole."""
    p, *_ = svm
    with Loader(p, 64, granularity="group", seed=7, n_features=300) as loader:
        want = [b.ids for b in loader.epoch(0)]
        it = loader.epoch(0)
        got = [next(it).ids for _ in range(3)]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = b"0"
            try:
                signal.alarm(60)  # a hang fails the test instead of blocking it
                try:
                    next(it)
                except UsageError as e:
                    ok = b"1" if "begun in another process" in str(e) else b"2"
                again = [b.ids for b in loader.epoch(0, start=3)]
                ok += b"1" if all(np.array_equal(a, b) for a, b in zip(again, want[3:])) else b"0"
            finally:
                os.write(w, ok)
                os._exit(0)
        os.close(w)
        got += [b.ids for b in it]
        os.waitpid(pid, 0)
        assert os.read(r, 2) == b"11"
        os.close(r)
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_a_closed_loader_says_so_when_asked_for_a_plan(svm):
    """num_batches() or plan() after close() failed on the index it let go (AttributeError on None)."""
    p, *_ = svm
    ld = Loader(p, 64)
    n = ld.num_batches()
    ld.close()
    for ask in (ld.num_batches, lambda: ld.plan(1)):
        with pytest.raises(ValueError, match="this Loader is closed"):
            ask()
    assert n >= 1


def test_close_lets_go_of_the_sidecar_and_the_preload_without_a_gc(svm):
    """close() leaves no descriptor of the sidecar open (a reference cycle through the pool's
    thread initializer kept the index's maps until a collection) and no preload thread (a Loader
    closed before its first epoch left it running)."""
    import gc

    p, *_ = svm

    def sidecar_fds():
        fds = (os.path.join("/proc/self/fd", f) for f in os.listdir("/proc/self/fd"))
        return sum(1 for f in fds if os.path.exists(f) and os.readlink(f).endswith(".lirs"))

    gc.collect()
    before = sidecar_fds()
    gc.disable()
    try:
        for _ in range(3):
            with Loader(p, 256, granularity="group") as loader:
                next(iter(loader.epoch(0)))
            del loader
        assert sidecar_fds() == before
        with Loader(p, 256, granularity="group") as kept:  # only planned, no epoch: its plan held the maps
            assert kept.num_batches() > 0
        assert sidecar_fds() == before
    finally:
        gc.enable()
    # a fresh process (its kernels not loaded yet: a preload thread starts with the Loader)
    code = ("import sys, threading, lirs; lirs.Loader(sys.argv[1], 256, granularity='group').close(); "
            "print([t.name for t in threading.enumerate() if t.name.startswith('lirs-preload')])")
    out = subprocess.run([sys.executable, "-c", code, p], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr[-2000:])


def test_close_of_an_epoch_left_early_lets_go_of_the_index_without_a_gc(tmp_path):
    """An epoch left by a break or the loop body's exception, reads through the page cache: close()
    left the cancelled queued steps' tasks in the pipeline's queue, each holding its step, plan
    and index (3 sidecar descriptors), until a cyclic collection, never with gc disabled (which
    queued step is left unclaimed at the close is timing: forty Loaders leave several behind)."""
    import gc
    import weakref

    rng = np.random.default_rng(5)
    p = tmp_path / "train.svm"
    with open(p, "w") as f:
        for i in range(20000):
            js = np.sort(rng.choice(1000, 10, replace=False)) + 1
            f.write(f"{i % 2} " + " ".join(f"{j}:{v:.3f}" for j, v in zip(js, rng.random(10))) + "\n")
    lirs.build_index(str(p), progress=False)
    gc.collect()
    gc.disable()
    try:
        refs = []
        for i in range(40):
            try:
                with Loader(str(p), 256, granularity=("group", "instance")[i % 2], engine="buffered") as ld:
                    refs.append(weakref.ref(ld.index))
                    for _ in ld.epoch(i):
                        if i % 3:
                            raise KeyError("the loop body failed")
                        break
            except KeyError:
                pass
            del ld
        assert sum(r() is not None for r in refs) == 0
    finally:
        gc.enable()


def test_close_of_a_loader_with_a_transform_lets_go_of_the_index_without_a_gc(svm):
    """With a transform, a batch's finish was queued by callbacks its parts' futures keep, and the
    finish held those futures, the step, plan and index: close() left the index (3 sidecar
    descriptors) to a cyclic collection, whole epochs or not."""
    import gc
    import weakref

    p, *_ = svm
    gc.collect()
    gc.disable()
    try:
        refs = []
        for i, gran in enumerate(("group", "window", "instance") * 2):
            with Loader(p, 64, granularity=gran, seed=i, transform=lambda b: b) as ld:
                refs.append(weakref.ref(ld.index))
                assert sum(len(b.ids) for b in ld.epoch(0)) == 3000
            del ld
        assert sum(r() is not None for r in refs) == 0
    finally:
        gc.enable()


def test_a_file_named_twice_is_refused(tmp_path):
    """The same file twice in a dataset's list (or once through a link) would serve each of its
    records twice: refused, naming it."""
    p = _write_libsvm(tmp_path / "a.svm", 20, seed=1)
    os.symlink(p, tmp_path / "b.svm")
    for files in ([p, p], [p, str(tmp_path / "b.svm")]):
        with pytest.raises(UsageError, match="named twice"):
            lirs.build_index(files, out=str(tmp_path / "ab.lirs"), progress=False)


def test_set_epoch_after_a_loaded_state_of_another_epoch_drops_it(svm, caplog):
    """A plain pass after load_state_dict(state of epoch 2) then set_epoch(4) delivered the rest of
    epoch 2, silently: set_epoch wins, as the torch dataset's does, with a warning; set_epoch of the
    state's own epoch keeps the resume."""
    p, *_ = svm
    kw = dict(granularity="group", seed=5, n_features=300)
    with Loader(p, 100, **kw) as a:
        it = a.epoch(2)
        for _ in range(3):
            next(it)
        state = a.state_dict()
        want4 = [b.ids.copy() for b in a.epoch(4)]
        rest2 = [b.ids.copy() for b in a.epoch(2, start=3)]
    with Loader(p, 100, **kw) as b:
        b.load_state_dict(state)
        b.set_epoch(2)
        assert all(np.array_equal(x.ids, y) for x, y in zip(b, rest2)) and b.stats.batches == len(rest2)
        b.load_state_dict(state)
        with caplog.at_level("WARNING", logger="lirs.loader"):
            b.set_epoch(4)
        assert "resume state is for epoch 2, epoch 4 starts from its first batch" in caplog.text
        got = [x.ids.copy() for x in b]
        assert len(got) == len(want4) and all(np.array_equal(x, y) for x, y in zip(got, want4))


def test_a_state_saved_after_set_epoch_resumes_that_epoch(svm):
    """`set_epoch(7)` then `state_dict()` said epoch None, and a Loader restored from it started
    its plain pass at epoch 0 (the torch dataset's said 7): the state names the chosen epoch."""
    p, *_ = svm
    kw = dict(granularity="group", seed=5, n_features=300)
    with Loader(p, 100, **kw) as a:
        a.set_epoch(7)
        state = a.state_dict()
        want = [b.ids.copy() for b in a.epoch(7)]
    assert (state["epoch"], state["next_batch"]) == (7, 0)
    with Loader(p, 100, **kw) as b:
        b.load_state_dict(state)
        got = [x.ids.copy() for x in b]
    assert len(got) == len(want) and all(np.array_equal(x, y) for x, y in zip(got, want))


def test_window_batches_spanning_windows_keep_float16_and_the_file_s_dtype(tmp_path):
    """A batch spanning two windows copies the earlier window's rows: float16 values went through
    scipy's constructor (which refuses them, mid-epoch), and .npy rows through np.concatenate
    (big-endian rows came back native, padded structured rows packed) in those batches only."""
    p = _write_libsvm(tmp_path / "a.svm", 3000, seed=2)
    with Loader(p, 100, granularity="window", window=1, group_bytes=4096, dtype=np.float16) as L:
        batches = list(L.epoch(0))
    assert sum(len(b.ids) for b in batches) == 3000 and {b.X.dtype for b in batches} == {np.dtype(np.float16)}
    padded = np.dtype({"names": ["a", "b"], "formats": ["<i2", "<f4"], "offsets": [0, 8], "itemsize": 16})
    for dt in (np.dtype(">f4"), padded):
        x = np.zeros(2000, dt)
        x[x.dtype.names[0] if x.dtype.names else ...] = np.arange(2000)
        np.save(tmp_path / "x.npy", x)
        with Loader(str(tmp_path / "x.npy"), 100, granularity="window", window=1, group_bytes=4096,
                    index="auto") as L:
            got = list(L.epoch(0))
        assert {b.X.dtype for b in got} == {dt}
        ids = np.concatenate([b.ids for b in got])
        rows = np.concatenate([b.X for b in got])
        assert np.array_equal(np.sort(ids), np.arange(2000)) and np.array_equal(rows, x[ids])
        os.unlink(tmp_path / "x.npy.lirs")


def test_a_copied_batch_holds_its_rows_alone(tmp_path):
    """A kept window batch keeps the window it was decoded in (its arrays are views of it):
    `copy()` gives the same batch with arrays of its own, float16 included."""
    p = _write_libsvm(tmp_path / "a.svm", 2000, seed=3)
    for dtype in (np.float32, np.float16):
        with Loader(p, 50, granularity="window", dtype=dtype) as L:
            b = next(iter(L.epoch(0)))
            c = b.copy()
        step = b.X.data.base if b.X.data.base is not None else b.X.data
        assert step.nbytes > 4 * b.X.data.nbytes  # the window's, here
        assert c.X.data.base is None and c.X.indices.base is None and c.ids.base is None
        assert (c.X != b.X).nnz == 0 and c.X.dtype == dtype and np.array_equal(c.ids, b.ids)
        assert np.array_equal(c.y, b.y) and (c.epoch, c.index) == (b.epoch, b.index)


@pytest.mark.parametrize("args,kw,said", [
    ((16,), dict(rank=5, world_size=2), r"rank 5 outside \[0, 2\)"), ((16,), dict(seed=-1), "seed must be >= 0"),
    ((16,), dict(granularity="bogus"), "granularity must be one of"), ((16,), dict(prefetch=0), "prefetch must be >= 1"),
    ((16,), dict(window=-1), "window must be a group count"), ((0,), {}, "batch_size must be >= 1"),
    ((16,), dict(dtype="str"), "dtype must be a numpy dtype"), ((16,), dict(engine="nope"), "unknown engine 'nope'"),
    ((16,), dict(granularity="auto", group_bytes=65536.9), "group_bytes must be an int"),
    ((16,), dict(transform=3), "transform must be callable"), ((16,), dict(threads=0), "threads must be >= 1"),
])
def test_bad_arguments_are_refused_before_the_data_is_indexed(tmp_path, args, kw, said):
    """A file without an index is scanned whole on first use: an argument that cannot work is refused
    before that (no sidecar written), by the Loader and by the torch dataset as it is made, not at its
    first pass."""
    p = _write_libsvm(tmp_path / "a.svm", 200, seed=5)
    with pytest.raises(UsageError, match=said):
        Loader(p, *args, **kw)
    assert not os.path.exists(p + ".lirs"), "refused only after the data was indexed"
    pytest.importorskip("torch")
    from lirs.torch import LirsIterableDataset, make_dataloader

    if "transform" not in kw:  # the dataset's transform is its own keyword
        for make in (LirsIterableDataset, make_dataloader):
            with pytest.raises(UsageError, match=said):
                make(p, *args, **kw)
    assert not os.path.exists(p + ".lirs"), "refused only after the data was indexed"


def test_granularity_auto_takes_group_bytes_as_a_size(tmp_path):
    """group_bytes="64K" is parsed before granularity="auto" reads its settings (it was a bare
    ValueError there, and 65536.9 was truncated)."""
    p = _write_libsvm(tmp_path / "a.svm", 200, seed=5)
    with Loader(p, 16, granularity="auto", group_bytes="64K") as L:
        assert (L.granularity, L.group_bytes) == (DEFAULT_GRANULARITY, 65536)


def test_the_torch_dataset_checks_rank_and_world_size_when_made(svm):
    """rank=1.9, "1" or True read as rank 1, world_size=0 said "rank 0 outside [0, 0)", each only at the
    first pass: each is refused as the dataset is made; one given alone waits for torch.distributed's other."""
    pytest.importorskip("torch")
    from lirs.torch import LirsIterableDataset

    p, *_ = svm
    for kw, said in [(dict(rank=1.9, world_size=2.5), "rank must be an int"),
                     (dict(rank="1", world_size=2), "rank must be an int"),
                     (dict(rank=True, world_size=2), "rank must be an int"),
                     (dict(world_size=2.0), "world_size must be an int"),
                     (dict(world_size=0), "world_size must be >= 1"),
                     (dict(rank=-1), "rank must be >= 0"),
                     (dict(rank=2, world_size=2), r"rank 2 outside \[0, 2\)")]:
        with pytest.raises(UsageError, match=said):
            LirsIterableDataset(p, 16, **kw)
    alone = LirsIterableDataset(p, 16, rank=3)  # taken: its world size comes from torch.distributed, at a pass
    with pytest.raises(UsageError, match=r"rank 3 outside \[0, 1\)"):
        alone.shard()
    assert LirsIterableDataset(p, 16, rank=np.int64(1), world_size=2).shard() == (1, 2)

def test_drop_last_and_verify_are_true_or_false(svm):
    """drop_last="False" is true to Python: it dropped the epoch's tail. It and verify are refused unless
    a bool, by the Loader, the planner and the torch dataset (np.bool_ is a bool)."""
    p, idx, *_ = svm
    for kw in (dict(drop_last="False"), dict(drop_last=1), dict(drop_last=None), dict(verify="no")):
        with pytest.raises(UsageError, match=f"{next(iter(kw))} must be True or False"):
            Loader(p, 64, **kw)
    with pytest.raises(UsageError, match="drop_last must be True or False"):
        lirs.plan.plan_epoch(idx, 64, drop_last="False")
    with Loader(p, 64, drop_last=np.bool_(False), n_features=300) as L:
        assert L.drop_last is False and sum(len(b) for b in L.epoch(0)) == 3000
    pytest.importorskip("torch")
    from lirs.torch import LirsIterableDataset

    with pytest.raises(UsageError, match="drop_last must be True or False"):
        LirsIterableDataset(p, 64, drop_last="False")

def test_start_epoch_and_windows_are_whole_numbers(svm):
    """epoch(0, start=1.5) started at batch 1, start="1" was a bare TypeError, num_batches(1.7) and
    plan(1.7) planned epoch 1, windows=(0.5, 2) was taken and windows=3 a bare TypeError."""
    p, *_ = svm
    with Loader(p, 16, n_features=300) as L:
        for kw, said in [(dict(start=1.5), "start must be an int"), (dict(start="1"), "start must be an int"),
                         (dict(windows=(0.5, 2)), "windows' w must be an int"),
                         (dict(windows=(0, 2.0)), "windows' W must be an int"),
                         (dict(windows=3), r"windows must be a pair \(w, W\)"),
                         (dict(windows=(2, 2)), r"needs 0 <= w < W, got \(2, 2\)")]:
            with pytest.raises(UsageError, match=said):
                next(iter(L.epoch(0, **kw)))
        for ask in (L.num_batches, L.plan):
            with pytest.raises(UsageError, match="epoch must be an int"):
                ask(1.7)
        assert next(iter(L.epoch(0, start=np.int64(2)))).index == 2

@pytest.mark.parametrize("granularity,other", [("group", dict(window="64M")), ("page", dict(window="64M", group_bytes=8192)),
                                               ("instance", dict(window=3, group_bytes=8192))])
def test_a_state_resumes_under_settings_its_granularity_does_not_plan_with(svm, granularity, other):
    """A group, page or instance epoch's batches do not depend on the window (nor a page or instance
    epoch's on group_bytes): its state resumes under a Loader whose differ, at the same batch."""
    p, *_ = svm
    with Loader(p, 100, granularity=granularity, n_features=300) as a, \
            Loader(p, 100, granularity=granularity, n_features=300, **other) as b:
        want = [bt.ids for bt in a.epoch(1)]
        it = a.epoch(1)
        next(it), next(it)
        b.load_state_dict(a.state_dict())
        got = [bt.ids for bt in b.epoch(1)]
    assert len(got) == len(want) - 2 and all(np.array_equal(x, y) for x, y in zip(got, want[2:]))


@pytest.mark.parametrize("granularity,other,said", [("window", dict(window="64M"), "window: saved"),
                                                    ("window", dict(group_bytes=8192), "group_bytes: saved"),
                                                    ("group", dict(group_bytes=8192), "group_bytes: saved")])
def test_a_state_is_refused_under_settings_its_granularity_plans_with(svm, granularity, other, said):
    p, *_ = svm
    with Loader(p, 100, granularity=granularity, n_features=300) as a, \
            Loader(p, 100, granularity=granularity, n_features=300, **other) as b:
        state = a.state_dict()
        with pytest.raises(UsageError, match=said):
            b.load_state_dict(state)


@pytest.mark.parametrize("kw, said", [({"n_features": 10}, "n_features=10 applies"),
                                      ({"zero_based": False}, "zero_based=False applies"),
                                      ({"n_features": 3, "zero_based": True}, "n_features=3 and zero_based=True apply")])
def test_libsvm_options_for_another_format_are_refused(tmp_path, kw, said):
    """``n_features``/``zero_based`` shape LIBSVM rows only: given for a .npy or a lines file they
    were ignored unseen (a user's n_features=10 over 2-column rows got 2 columns); refused, naming
    the file and its format. Before the source is opened: an unindexed one was indexed whole (a
    sidecar written) only for the setting to be refused after."""
    npy, lines = tmp_path / "x.npy", tmp_path / "l.jsonl"
    np.save(npy, np.arange(12, dtype=np.float32).reshape(6, 2))
    lines.write_text('{"a": 1}\n{"a": 2}\n')
    for p, fmt in ((npy, "npy"), (lines, "lines")):
        with pytest.raises(UsageError, match=re.escape(said) + f" to LIBSVM data only; {re.escape(str(p))} is {fmt}"):
            lirs.Loader(str(p), 2, **kw)
        assert not os.path.exists(f"{p}.lirs")  # refused before the first-use index
    with lirs.Loader(str(npy), 2) as ld:  # unset: served as the file's own rows
        assert next(iter(ld.epoch(0))).X.shape == (2, 2)
