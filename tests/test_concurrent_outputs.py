"""Runs at once writing one output, or sharing a working directory: `lirs shuffle` and `lirs gen`
publish one at a time (the last run's data, labels and sidecar win together), a run is not failed by
another's removal of the old output nor left with a temporary's name in its error, and the
temporaries of `lirs demo`'s block file, the benchmark's TFRecord files and the O_DIRECT probe are
named per process (with the mark the crash cleaner looks for). The interleavings are forced with
threads and a module's ``os`` wrapped, as a second process would make them."""
from __future__ import annotations

import contextlib
import os
import re
import threading
import types

import numpy as np
import pytest

from lirs.errors import LirsError
from lirs.inputs import labels_path
from lirs.litter import LITTER_PATTERN

DS = types.SimpleNamespace(fmt="npy", given=True, text=False)  # what Layout.commit reads of a dataset


class _Os:
    """A module's ``os``, passing everything through except what a test overrides."""

    def __getattr__(self, k):
        return getattr(os, k)


def _threads(*fns):
    """Run each ``(name, fn)`` in its own thread; re-raise the first error."""
    errors = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed to the test
                errors.append(e)
        return run

    ts = [threading.Thread(target=wrap(fn), name=name) for name, fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if errors:
        raise errors[0]


def _is_litter(path):
    """Whether the crash cleaner takes ``path`` for a temporary of this process."""
    m = re.fullmatch(LITTER_PATTERN, os.path.basename(path), re.DOTALL)
    return m is not None and os.getpid() in {int(v) for v in m.groupdict().values() if v}


def _layout(out, tag, **kw):
    """A Layout of one shuffle into ``out`` with its temporaries written (``tag`` their content)."""
    from lirs.external.outputs import Layout

    lay = Layout(out, os.path.dirname(out), None, ".npy", 1, index=False, **kw)
    s = lay.shards[0]
    for p in (s.tmp, s.labels_tmp):
        if p:
            with open(p, "w") as f:
                f.write(tag)
    return lay


def test_two_shuffles_into_one_output_leave_one_runs_data_and_labels(tmp_path, monkeypatch):
    """Run A has renamed its labels and not yet its data when run B publishes: B waited for A
    (its output then replaced A's whole), where B's labels were left beside A's data."""
    from lirs.external import outputs

    out = str(tmp_path / "out.npy")
    a_paused, b_done = threading.Event(), threading.Event()

    class Slow(_Os):
        def replace(self, src, dst):
            if dst == out and threading.current_thread().name == "A":
                a_paused.set()
                b_done.wait(1.0)  # B, waiting for A's lock, never finishes meanwhile
            return os.replace(src, dst)

    monkeypatch.setattr(outputs, "os", Slow())

    def run_a():
        _layout(out, "A", labels=True).commit(DS, False)

    def run_b():
        lay = _layout(out, "B", labels=True)
        assert a_paused.wait(20)
        lay.commit(DS, False)
        b_done.set()

    _threads(("A", run_a), ("B", run_b))
    with open(out) as f, open(labels_path(out)) as g:
        assert (f.read(), g.read()) == ("B", "B")
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (out, labels_path(out)))


def test_an_output_removed_meanwhile_fails_no_run(tmp_path, monkeypatch):
    """The old output, seen, is removed by another run before this one removes it: "no such file"
    naming the output failed the run after its whole shuffle."""
    from lirs.external import outputs

    out = str(tmp_path / "out.npy")
    with open(out, "w") as f:
        f.write("old")

    class Path:
        def __getattr__(self, k):
            return getattr(os.path, k)

        def exists(self, p):
            there = os.path.exists(p)
            if p == out and there:
                os.unlink(p)  # another run's removal, just after this check
            return there

    class Racing(_Os):
        path = Path()

    lay = _layout(out, "new", labels=True)
    monkeypatch.setattr(outputs, "os", Racing())
    lay.commit(DS, False)
    with open(out) as f, open(labels_path(out)) as g:
        assert (f.read(), g.read()) == ("new", "new")


def test_a_sharded_output_made_by_another_run_meanwhile_is_named(tmp_path):
    """The output directory, absent at the start, was made by another run: the error named the
    staging directory ("Directory not empty"), not -o OUTDIR nor what happened."""
    from lirs.external.outputs import Layout

    out = str(tmp_path / "outd")
    lay = Layout(out, str(tmp_path), 2, ".jsonl", 4, labels=False, index=False)
    for sh in lay.shards:  # this run's parts, written
        with open(sh.tmp, "w") as f:
            f.write("this run's\n")
    os.mkdir(out)
    with open(os.path.join(out, "part-00000.jsonl"), "w") as f:
        f.write("the other run's\n")
    with pytest.raises(LirsError, match=re.escape(f"-o {out} was created by another run while this one ran")):
        lay.commit(DS, False)
    lay.abort()
    assert sorted(os.listdir(tmp_path)) == ["outd"], "the staging directory is removed"
    assert os.listdir(out) == ["part-00000.jsonl"]


def test_two_gens_into_one_output_leave_one_runs_data_and_labels(tmp_path, monkeypatch):
    """`lirs gen higgs` (data and labels): A has renamed its data and not yet its labels when B
    publishes; A's labels were left beside B's data."""
    from lirs.eval import gen

    ref = {}
    for seed in (1, 2):
        p = tmp_path / f"ref{seed}.npy"
        gen.generate("higgs", str(p), records=50, seed=seed, progress=False, workers=1)
        ref[seed] = (p.read_bytes(), open(labels_path(str(p)), "rb").read())
    out = str(tmp_path / "out.npy")
    a_paused, b_done = threading.Event(), threading.Event()

    class Slow(_Os):
        def replace(self, src, dst):
            if dst == labels_path(out) and threading.current_thread().name == "A":
                a_paused.set()
                b_done.wait(1.0)
            return os.replace(src, dst)

    monkeypatch.setattr(gen, "os", Slow())

    def run_b():
        assert a_paused.wait(20)
        gen.generate("higgs", out, records=50, seed=2, progress=False, workers=1)
        b_done.set()

    _threads(("A", lambda: gen.generate("higgs", out, records=50, seed=1, progress=False, workers=1)),
             ("B", run_b))
    with open(out, "rb") as f, open(labels_path(out), "rb") as g:
        assert (f.read(), g.read()) == ref[2]


def _npy_index(tmp_path, n=2000):
    import lirs

    X = np.arange(n * 8, dtype=np.float32).reshape(n, 8)
    p = tmp_path / "x.npy"
    np.save(p, X)
    return lirs.build_index(str(p), progress=False), X


def test_block_rewrites_at_once_each_write_their_own_temporary(tmp_path, monkeypatch):
    """Two rewrites of one block file at once (two `lirs demo` runs sharing --out): B truncated the
    one fixed temporary A was about to rename, and failed on it ("no such file ... .tmp")."""
    from lirs.eval import spans

    index, X = _npy_index(tmp_path)
    dest = str(tmp_path / "blocks")
    a_ready, b_opened = threading.Event(), threading.Event()

    class Slow(_Os):
        def replace(self, src, dst):
            if threading.current_thread().name == "A":
                a_ready.set()
                b_opened.wait(1.0)
            return os.replace(src, dst)

        def open(self, p, flags, mode=0o777):
            if threading.current_thread().name == "B":
                assert a_ready.wait(20)
                fd = os.open(p, flags, mode)
                b_opened.set()
                return fd
            return os.open(p, flags, mode)

    monkeypatch.setattr(spans, "os", Slow())
    rng = np.random.default_rng(0)
    layouts = {name: [np.sort(b) for b in np.array_split(rng.permutation(index.n), 4)] for name in "AB"}
    got = {}

    def run(name):
        got[name] = spans.write_blocks(index, layouts[name], dest, "threads")[0]

    _threads(("A", lambda: run("A")), ("B", lambda: run("B")))
    rows = np.load(str(tmp_path / "x.npy"), mmap_mode="r")
    body = np.fromfile(dest, np.float32).reshape(-1, 8)
    # whichever renamed last: its blocks whole (B may finish before A's rename wakes up)
    assert body.shape == X.shape and any(np.array_equal(body, rows[got[k]]) for k in "AB")
    assert not [nm for nm in os.listdir(tmp_path) if ".lirs-tmp-" in nm], "no temporary left"


def test_bmf_block_file_is_a_temporary_of_this_process(tmp_path, monkeypatch):
    """BMF's block file had one fixed name in the working directory (shared by `lirs demo` runs
    with one --out), and kept no PID: one a killed run left was never removed."""
    from lirs.eval import compare

    import lirs
    from lirs.eval.gen import generate

    p = tmp_path / "small.svm"
    generate("kdd", str(p), records=300, seed=2, progress=False, workers=1)
    index = lirs.build_index(str(p), progress=False)
    dead = tmp_path / ".small.svm.bmf-blocks.lirs-tmp-999999999-1"  # a killed run's (no such PID)
    dead.write_bytes(b"old blocks")
    seen = []
    real = compare.write_blocks

    def spy(idx, layout, path, engine="auto"):
        seen.append(path)
        assert not dead.exists(), "a killed run's block file is removed first"
        return real(idx, layout, path, engine)

    monkeypatch.setattr(compare, "write_blocks", spy)
    compare.compare_svm(index, ("bmf",), epochs=1, batch_size=100, reference_epochs=2, workdir=str(tmp_path),
                        bmf_blocks_n=4)
    assert len(seen) == 1 and _is_litter(seen[0]), seen
    assert not os.path.exists(seen[0]), "removed at the end"


class _Spy(_Os):
    """Records the temporaries a module renames or removes."""

    def __init__(self):
        self.seen = []

    def replace(self, src, dst):
        self.seen.append(src)
        return os.replace(src, dst)

    def unlink(self, p):
        self.seen.append(p)
        return os.unlink(p)


def test_tfrecord_files_are_written_to_a_temporary_of_this_process(tmp_path, monkeypatch):
    """`write_random` wrote PATH.tmp: one name for every run writing PATH, kept forever after a kill."""
    from lirs.eval import tfrecords

    spy = _Spy()
    monkeypatch.setattr(tfrecords, "os", spy)
    tfrecords.write_random(str(tmp_path / "r.tfrecord"), 10_000, mean=100, spread=10)
    assert len(spy.seen) == 1 and _is_litter(spy.seen[0]), spy.seen
    assert os.listdir(tmp_path) == ["r.tfrecord"]


def test_direct_probe_file_carries_the_mark_the_crash_cleaner_takes(tmp_path, monkeypatch):
    """The O_DIRECT probe was .lirs-direct-XXXX (random, no PID): one a kill left stayed forever."""
    from lirs.engines import base

    spy = _Spy()
    monkeypatch.setattr(base, "os", spy)
    base.probe_direct_write(str(tmp_path))
    assert len(spy.seen) == 1 and _is_litter(spy.seen[0]), spy.seen
    assert os.listdir(tmp_path) == []


def test_direct_probe_never_follows_a_link_at_its_name(tmp_path):
    """The probe's name is known in advance (PID and thread id): a symlink planted there had its
    target truncated and overwritten with the aligned test block; the probe now makes a file of
    its own (O_EXCL, O_NOFOLLOW), removing the link, never its target."""
    import threading as th

    from lirs.constants import TEMP_MARK
    from lirs.engines import base

    target = tmp_path / "precious"
    target.write_bytes(b"precious data\n")
    d = tmp_path / "out"
    d.mkdir()
    os.symlink(target, d / f".lirs-direct{TEMP_MARK}{os.getpid()}-{th.get_native_id()}")
    base.probe_direct_write(str(d))
    assert target.read_bytes() == b"precious data\n"
    assert os.listdir(d) == []


def test_a_publish_inside_a_job_holding_its_directory_s_flock_goes_on(tmp_path):
    """`flock OUTDIR lirs shuffle … -o OUTDIR/s.svm` (a job serialised on its directory) hung
    forever at its publish, which locked the directory; the publish locks a file of its own,
    removed once it is done, and a second publish of one output waits for the first."""
    import fcntl

    from lirs.litter import publishing

    held = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    out = str(tmp_path / "s.svm")
    second_done, order, finished = threading.Event(), [], threading.Event()

    def second():
        with publishing(out):
            order.append("second")
        second_done.set()

    def first():  # on a thread of its own: the old lock never returned
        with publishing(out):
            t = threading.Thread(target=second, daemon=True)
            t.start()
            order.append("first" if not second_done.wait(0.3) else "second ran inside the first")
        second_done.wait(10)
        finished.set()

    try:
        threading.Thread(target=first, daemon=True).start()
        assert finished.wait(10), "a publish waited for its directory's flock"
    finally:
        os.close(held)
    assert order == ["first", "second"]
    assert os.listdir(tmp_path) == []  # no lock file left behind


def test_an_output_named_near_the_name_limit_still_publishes_under_its_lock(tmp_path):
    """The lock's name adds to the output's: one of 250 bytes made a name past NAME_MAX, and the
    publish went on unlocked; a long name is cut as temporaries' names are."""
    from lirs.litter import publishing

    out = tmp_path / ("x" * 246 + ".svm")
    with publishing(str(out)):
        locks = [n for n in os.listdir(tmp_path) if n.endswith(".lirs-publish")]
        assert len(locks) == 1 and len(os.fsencode(locks[0])) <= 255
    assert os.listdir(tmp_path) == []


def test_a_run_whose_output_another_run_replaced_just_after_its_publish_succeeds(tmp_path, monkeypatch):
    """The run's statistics sized the output by its final name after the publish lock was let go:
    another run's publish, removing the old output first, failed it with "no such file" (exit 1)
    though its files had been published; the sizes are taken before."""
    from lirs import litter
    from lirs.external import outputs, shuffle

    src, out = tmp_path / "x.npy", tmp_path / "out.npy"
    np.save(src, np.arange(4000, dtype=np.float32).reshape(1000, 4))
    real = litter.publishing

    @contextlib.contextmanager
    def then_another_run(path):
        with real(path):
            yield
        os.unlink(out)  # the next run's publish: its old output goes first

    monkeypatch.setattr(outputs, "publishing", then_another_run)
    st = shuffle(str(src), str(out), memory="64M", seed=1)
    assert st["records"] == 1000 and st["output_bytes"] == os.path.getsize(src)
