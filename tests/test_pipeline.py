"""Who runs a read step: the pool's threads, or the consumer while it waits; the extra threads."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import lirs
from lirs import loader as loader_mod
from lirs import pipeline
from lirs.errors import TransformError
from lirs.steps import SharedStep


def _write(path, n, seed=3):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            cols = np.sort(rng.choice(50, int(rng.integers(1, 8)), replace=False)) + 1
            f.write(f"{rng.choice([-1, 1])}" + "".join(f" {c}:{v}" for c, v in zip(cols, rng.integers(1, 9, len(cols))))
                    + "\n")
    return str(path)


@pytest.fixture
def svm(tmp_path):
    return _write(tmp_path / "d.svm", 3000)


def _runners(monkeypatch):
    """Who ran every step, in order of running: "primary" or "extra" (pool threads), or the name
    of the thread (the consumer's)."""
    names = []
    real = pipeline.Pipeline._read_decode

    def read_decode(self, step):
        extra = getattr(self._role, "extra", None)
        names.append(threading.current_thread().name if extra is None else ("extra" if extra else "primary"))
        return real(self, step)
    monkeypatch.setattr(pipeline.Pipeline, "_read_decode", read_decode)
    return names


def _plain_ids(ld, epoch):
    return [bp.ids for bp in ld.plan(epoch).batches(extents=False)]


@pytest.mark.parametrize("granularity", ["instance", "group"])
def test_the_consumer_runs_every_step_when_the_pool_takes_none(svm, monkeypatch, granularity):
    # the pool's threads claim nothing: a consumer that waits runs the queued steps itself, oldest
    # first, and the batches are exactly the plan's (reads that are copies: engine buffered)
    monkeypatch.setattr(pipeline.Pipeline, "_claim", lambda self, _=None: None)
    names = _runners(monkeypatch)
    with lirs.Loader(svm, 64, granularity=granularity, group_bytes=4096, seed=1, engine="buffered", direct=False) as ld:
        got = [b for b in ld.epoch(0)]
        want = _plain_ids(ld, 0)
        X, y = lirs.load_svmlight(svm, n_features=ld.n_features)
    assert len(got) == len(want)
    for b, ids in zip(got, want):
        assert np.array_equal(b.ids, ids)
        assert (b.X != X[b.ids]).nnz == 0 and np.array_equal(b.y, y[b.ids])
    assert names and set(names) == {threading.current_thread().name}


def test_an_error_in_a_step_the_consumer_ran_comes_at_its_batch(svm, monkeypatch):
    monkeypatch.setattr(pipeline.Pipeline, "_claim", lambda self, _=None: None)

    def transform(b):
        if b.index == 17:
            raise ValueError("no batch 17")
        return b.index
    with lirs.Loader(svm, 64, granularity="instance", seed=2, transform=transform, engine="buffered",
                     direct=False) as ld:
        got = []
        with pytest.raises(TransformError, match="batch 17 of epoch 0"):
            for i in ld.epoch(0):
                got.append(i)
    assert got == list(range(17))


def test_the_consumer_leaves_window_steps_to_the_pool(svm, monkeypatch):
    # a window is decoded by every core at once: the consumer delivers the current one's batches
    names = _runners(monkeypatch)
    with lirs.Loader(svm, 64, granularity="window", group_bytes=4096, window=4, seed=1) as ld:
        n = sum(len(b) for b in ld.epoch(0))
    assert n == 3000
    assert names and threading.current_thread().name not in names


def test_threads_beyond_the_primary_ones_wait_for_an_idle_core(svm, monkeypatch):
    monkeypatch.setattr(loader_mod, "usable_cores", lambda: 4)
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 4)
    with lirs.Loader(svm, 64, granularity="group", engine="buffered", direct=False) as ld:
        ld._ensure_started()
        p = ld._pipeline
        assert (p.workers, p.primary, p.cores) == (5, 3, 4)
        # the last window kept the 4 cores busy: no extra thread takes a step
        p._window = (time.perf_counter() - 0.05, time.process_time() - 0.05 * 4)
        assert not p._core_idle() and p.busy_cores > 3.5
        # one core and a half busy over a whole window: an extra thread may take a step
        p._window = (time.perf_counter() - 0.05, time.process_time() - 0.05 * 1.5)
        assert p._core_idle() and 1.0 < p.busy_cores < 2.0
        # the window just rolled: the last whole one's figure stands until the next one ends
        assert p._core_idle()


def test_a_pool_sized_by_hand_judges_idle_cores_by_its_share(svm, monkeypatch):
    # threads=3 (a DataLoader worker's share of 2 cores and one more) on 4 cores: the pool keeps 2
    # busy, and its own use of them, not of all 4, says whether a core is idle
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 4)
    with lirs.Loader(svm, 64, granularity="group", engine="buffered", direct=False, threads=3) as ld:
        ld._ensure_started()
        p = ld._pipeline
        assert (p.workers, p.primary, p.cores) == (3, 1, 2)
        p._window = (time.perf_counter() - 0.05, time.process_time() - 0.05 * 1.8)
        assert not p._core_idle()


@pytest.mark.parametrize("direct", [True, False])
def test_with_a_direct_engine_every_thread_reads_and_the_consumer_only_waits(svm, monkeypatch, direct):
    # reads from the device wait: every thread of the pool keeps a read in flight, and the consumer
    # keeps handing out batches and steps instead of reading one itself
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 4)
    names = _runners(monkeypatch)
    with lirs.Loader(svm, 64, granularity="group", group_bytes=4096, threads=5, direct=direct) as ld:
        ld._ensure_started()
        p = ld._pipeline
        if direct and not p.engine.direct:
            pytest.skip("O_DIRECT does not work on this filesystem")
        assert (p.primary, p.consumer_helps) == ((5, False) if direct else (3, True))
        assert sum(len(b) for b in ld.epoch(0)) == 3000
    if direct:
        assert threading.current_thread().name not in names


@pytest.mark.parametrize("cores", [2, 7, 8, 16])
def test_on_many_cores_every_thread_reads_and_the_consumer_only_waits(svm, monkeypatch, cores):
    # on POOL_ALONE_MIN_CORES (8) or more with copying reads, the consumer's own Python sets the rate:
    # it runs no step, and every thread of the pool claims steps; below, cores - 1 threads and the consumer
    monkeypatch.setattr(loader_mod, "usable_cores", lambda: cores)
    monkeypatch.setattr(pipeline, "usable_cores", lambda: cores)
    names = _runners(monkeypatch)
    with lirs.Loader(svm, 64, granularity="group", group_bytes=4096, seed=1, engine="buffered", direct=False) as ld:
        ld._ensure_started()
        p = ld._pipeline
        alone = cores >= 8
        assert (p.workers, p.primary, p.consumer_helps) == (cores + 1, cores + 1 if alone else cores - 1, not alone)
        got = [b.ids for b in ld.epoch(0)]
        want = _plain_ids(ld, 0)
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    if alone:
        assert names and threading.current_thread().name not in names


@pytest.mark.parametrize("granularity,cores,engine,ahead", [
    ("group", 2, "buffered", False), ("group", 8, "buffered", True), ("group", 16, "buffered", True),
    ("instance", 16, "buffered", False), ("group", 16, "auto", False)])
def test_group_steps_come_with_their_extents_on_many_cores(svm, monkeypatch, granularity, cores, engine, ahead):
    # on many cores with copying reads a group step's extents are found by the planning thread (the
    # pool's threads only read and decode); an instance step's, and any on few cores or with
    # direct reads, are found by the thread that reads the step
    monkeypatch.setattr(loader_mod, "usable_cores", lambda: cores)
    monkeypatch.setattr(pipeline, "usable_cores", lambda: cores)
    deferred = []
    real = pipeline.Pipeline.submit

    def submit(self, step, then=None, helpable=True):
        deferred.append(step.fill is not None)
        return real(self, step, then, helpable)
    monkeypatch.setattr(pipeline.Pipeline, "submit", submit)
    with lirs.Loader(svm, 64, granularity=granularity, group_bytes=4096, seed=1, engine=engine) as ld:
        ld._ensure_started()
        if engine == "auto" and not ld._pipeline.engine.direct:
            pytest.skip("this filesystem refuses O_DIRECT")
        got = [b.ids for b in ld.epoch(0)]
        want = _plain_ids(ld, 0)
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    assert len(deferred) > 1 and set(deferred) == {not ahead}


def test_pool_alone_and_walk_extents_follow_the_cores_and_the_engine():
    from lirs.policies import pool_alone, walk_extents

    assert [pool_alone(False, c) for c in (1, 2, 7, 8, 64)] == [False, False, False, True, True]
    assert pool_alone(True, 2)
    assert walk_extents("group", False, 8) is True and walk_extents("window", False, 16) is True
    assert {walk_extents("group", False, 7), walk_extents("group", True, 16), walk_extents("instance", False, 16),
            walk_extents("page", False, 16)} == {"defer"}


def test_extra_threads_take_steps_while_the_consumer_sleeps(svm, monkeypatch):
    # a consumer away on a (GPU) training step leaves the cores idle: the extra threads read too
    monkeypatch.setattr(loader_mod, "usable_cores", lambda: 2)
    monkeypatch.setattr(pipeline, "usable_cores", lambda: 2)
    names = _runners(monkeypatch)
    with lirs.Loader(svm, 16, granularity="instance", engine="buffered", direct=False, prefetch=8) as ld:
        for _ in ld.epoch(0):
            time.sleep(0.004)
    assert "extra" in names, sorted(set(names))


def test_extra_threads_leave_steps_to_a_consumer_inside_the_loader(svm, monkeypatch):
    # the consumer inside Loader.epoch runs queued steps itself when it would wait: an extra thread
    # takes none then, idle cores or not; once the consumer is away with its batch, it may
    from concurrent.futures import Future

    monkeypatch.setattr(pipeline, "usable_cores", lambda: 2)
    monkeypatch.setattr(pipeline.Pipeline, "_core_idle", lambda self: True)
    inside, away, lds = [], [], []
    real = loader_mod.rows_each

    def rows_each(step_rows, cuts):  # a shared step's batches cut, on the consumer's thread
        inside.append(lds[0]._pipeline.consumer_in)
        return real(step_rows, cuts)
    monkeypatch.setattr(loader_mod, "rows_each", rows_each)
    with lirs.Loader(svm, 64, granularity="group", engine="buffered", direct=False) as ld:
        lds.append(ld)
        for _ in ld.epoch(0):
            away.append(ld._pipeline.consumer_in)
        p = ld._pipeline
        assert inside and all(inside) and not any(away) and not p.consumer_in
        time.sleep(0.1)  # the pool's threads are done with the epoch's steps
        p.consumer_in = True
        ran = threading.Event()
        fut = Future()
        with p.claims_lock:
            p.unclaimed[fut] = ran.set

        def extra():
            p._role.extra = True
            p._claim()
        t = threading.Thread(target=extra)
        t.start()
        assert not ran.wait(0.05) and fut in p.unclaimed
        p.consumer_in = False
        assert ran.wait(5)
        t.join(5)


def test_threads_beyond_the_primary_ones_read_windows_at_once(svm, monkeypatch):
    # the consumer never runs a window: the next one is read by any thread while this one decodes
    from concurrent.futures import Future

    monkeypatch.setattr(pipeline, "usable_cores", lambda: 4)
    with lirs.Loader(svm, 64, granularity="window", engine="buffered", direct=False) as ld:
        ld._ensure_started()
        p = ld._pipeline
        a, b = Future(), Future()
        with p.claims_lock:
            p.unclaimed[a] = lambda: 1
            p.unclaimed[b] = lambda: 2
            p.pool_only.add(b)
        assert not p._pool_only_next()
        with p.claims_lock:
            del p.unclaimed[a]
        assert p._pool_only_next()
        with p.claims_lock:
            p.unclaimed.clear()


@pytest.mark.parametrize("threads", [1, 8])  # planned on the consumer's thread, and on a thread of its own
def test_time_spent_getting_plans_is_counted_apart_from_waiting_for_reads(svm, monkeypatch, threads):
    """LoaderStats.plan_s: the consumer's time getting batch plans (a slow planner shows there, not
    in wait_s, which counts the waits for read steps)."""
    from lirs import plan as plan_mod

    real = plan_mod.EpochPlan.batches

    def slow(self, *a, **kw):
        for bp in real(self, *a, **kw):  # 4 ms a batch (a shared step's batches come as one item)
            time.sleep(0.004 * (len(bp.plans) if isinstance(bp, SharedStep) else 1))
            yield bp

    with lirs.Loader(svm, 100, granularity="group", group_bytes=4096, threads=threads, seed=0) as ld:
        list(ld.epoch(9))
        ld.stats.reset()
        fast = sum(1 for _ in ld.epoch(0))
        fast_plan = ld.stats.plan_s
        monkeypatch.setattr(plan_mod.EpochPlan, "batches", slow)
        ld.stats.reset()
        t = time.perf_counter()
        n = sum(1 for _ in ld.epoch(1))
        took = time.perf_counter() - t
    assert n == fast == 30
    st = ld.stats
    assert st.plan_s >= 0.8 * 0.004 * n and st.plan_s + st.wait_s <= took
    assert fast_plan < st.plan_s  # the planner's own time is counted too, not only the sleeps
