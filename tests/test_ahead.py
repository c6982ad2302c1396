"""Batch plans made ahead on a thread of their own (lirs.ahead): the walk's items in order, an
error where it was raised, a bounded lead, and a thread that stops when the epoch is left."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import lirs
from lirs.ahead import PlanAhead


def _planners():
    return [t for t in threading.enumerate() if t.name == "lirs-plan" and t.is_alive()]


def test_items_come_in_order_then_the_end():
    p = PlanAhead(lambda: iter(range(1000)), chunk=16, ahead=2)
    assert list(p) == list(range(1000))
    with pytest.raises(StopIteration):
        next(p)
    p.close()


def test_an_error_comes_out_after_the_items_before_it():
    def make():
        yield from range(37)
        raise OSError("the index went away at item 37")

    p = PlanAhead(make, chunk=8)
    got = []
    with pytest.raises(OSError, match="item 37"):
        for x in p:
            got.append(x)
    assert got == list(range(37))
    p.close()


def test_the_lead_is_bounded_and_close_stops_the_thread():
    made = []

    def make():
        for i in range(10**6):
            made.append(i)
            yield i

    p = PlanAhead(make, chunk=4, ahead=2)
    assert next(p) == 0
    time.sleep(0.2)
    # the first item, then a chunk handed over, two waiting, one being filled: 1 + 1 + 2 + 4 + 4 at most
    assert len(made) <= 1 + 2 + 4 + 4 + 4 + 1
    p.close()
    assert not p._thread.is_alive()
    with pytest.raises(ValueError, match="stopped"):
        next(p)


@pytest.mark.parametrize("batches", [100, 10**6, 14])
def test_a_count_of_plans_sets_the_lead(batches):
    # a window epoch's consumer takes a window's plans at once: the planner runs that many ahead,
    # up to PLAN_AHEAD_MAX_BATCHES, still bounded; a few items (a window's units, many batches
    # each) come in chunks of one, so that the bound stays a few items past the count
    from lirs.constants import PLAN_AHEAD_MAX_BATCHES
    made = []

    def make():
        for i in range(10**7):
            made.append(i)
            yield i

    p = PlanAhead(make, chunk=8, ahead=2, batches=batches)
    try:
        assert next(p) == 0
        want = min(batches, PLAN_AHEAD_MAX_BATCHES)
        deadline = time.monotonic() + 10
        while len(made) < want and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        # at least ``want`` ahead; at most the chunks that cover them, three more, one being filled
        c = max(1, min(8, want // 8))
        assert want <= len(made) <= 1 + want + c + 3 * c + c
    finally:
        p.close()


def test_a_window_epoch_plans_a_window_ahead(tmp_path):
    from lirs.policies import POLICIES, plans_ahead

    path = str(tmp_path / "w.svm")
    rng = np.random.default_rng(5)
    with open(path, "w") as f:
        for i in range(4000):
            f.write(f"{i % 2} {int(rng.integers(1, 40))}:1 {int(rng.integers(41, 80))}:2\n")
    with lirs.Loader(path, 32, granularity="window", group_bytes=4096, window=8, threads=6) as ld:
        plan = ld.plan(0)
        per = plans_ahead(plan)
        batch_bytes = 32 * ld.index.payload_bytes / ld.index.n
        assert per == -int(-8 * 4096 // batch_bytes) and per > 16  # more than the default two chunks
        # the Loader's walk hands a window's batches out a few at a time (lirs.walker.WindowSteps.units):
        # its planner keeps the items those plans come in ahead
        unit = POLICIES["window"].batches_per_unit(plan)
        items = plans_ahead(plan, units=True)
        assert items == -(-per // unit) + 2
        run = ld._begin(0, 0)
        try:
            assert isinstance(run.batches, PlanAhead) and run.batches._q.maxsize * 8 >= items
        finally:
            run.abandon()
    with lirs.Loader(path, 32, granularity="window", group_bytes=4096, window=8, threads=6) as ld:
        assert sum(len(b.ids) for b in ld.epoch(1)) == 4000
        assert ld.stats.planner_busy_s > 0  # the epoch's planning thread reports to the Loader's stats
    with lirs.Loader(path, 32, granularity="group", group_bytes=4096, threads=3) as ld:
        assert plans_ahead(ld.plan(0)) == 0
        assert sum(len(b.ids) for b in ld.epoch(1)) == 4000
        assert ld.stats.planner_busy_s == ld.stats.planner_full_s == 0.0  # planned on the consumer's thread


def test_close_closes_the_iterator_on_the_closing_thread():
    # what the iterator holds (an epoch, a device feeder's source) is released at close, not when
    # the iterator is collected, and on the thread that closes (the thread that ran it has stopped)
    closed = []

    def make():
        try:
            yield from range(10**6)
        finally:
            closed.append(threading.get_ident())

    p = PlanAhead(make, chunk=2, ahead=1)
    assert [next(p) for _ in range(5)] == list(range(5))
    p.close()
    assert closed == [threading.get_ident()] and not p._thread.is_alive()


def test_close_from_another_thread_during_the_first_item():
    # Loader.close from another thread while the consumer's thread makes the first plan: the
    # iterator is running there, so close leaves it (closing it would raise "generator already
    # executing"); the consumer still gets its item and no thread outlives the stop
    started, release, got = threading.Event(), threading.Event(), []

    def make():
        started.set()
        release.wait(5)
        yield from range(10**6)

    p = PlanAhead(make, chunk=2, ahead=1)
    consumer = threading.Thread(target=lambda: got.append(next(p)))
    consumer.start()
    assert started.wait(5)
    p.close()
    release.set()
    consumer.join(5)
    assert got == [0]
    p._thread.join(5)
    assert not p._thread.is_alive()


@pytest.mark.parametrize("threads", [6, 2])
def test_a_loader_leaves_no_planning_thread_behind(tmp_path, threads):
    """A pool of 5 threads or more plans on a thread of its own, a smaller one on the consumer's;
    either way the same batches, no thread left once the epoch is left, and a Loader closed
    during an epoch ends it with an error, not silently."""
    from lirs.constants import PLAN_AHEAD_MIN_THREADS
    from lirs.eval.gen import generate

    path = str(tmp_path / "k.svm")
    generate("kdd", path, records=3000, seed=1, progress=False)
    with lirs.Loader(path, 16, granularity="instance", seed=2) as ld:  # a step per batch: 188 of them
        whole = [b.ids for b in ld.epoch(0)]
    with lirs.Loader(path, 16, granularity="instance", seed=2, threads=threads) as ld:
        it = ld.epoch(0)
        first = [next(it).ids for _ in range(3)]
        assert bool(_planners()) == (threads >= PLAN_AHEAD_MIN_THREADS)
        assert all(np.array_equal(a, b) for a, b in zip(first, whole))
        assert all(np.array_equal(a, b) for a, b in zip(list(b.ids for b in it), whole[3:]))
        assert not _planners()
        it = ld.epoch(0)
        next(it)
        it.close()  # the consumer leaves the epoch
        assert not _planners()
        it = ld.epoch(1)
        next(it)
    # closed with an epoch under way: its planner is stopped and the epoch cannot go on
    assert not _planners()
    with pytest.raises(ValueError, match="closed|stopped"):
        for _ in it:
            pass


def test_the_planning_thread_counts_its_time_making_plans_and_waiting_for_room():
    """LoaderStats.planner_busy_s / planner_full_s: a slow planner shows as busy (its sleeps are a
    floor), one held back by a slow consumer as full; nothing else counts."""
    from lirs.batch import LoaderStats

    def make(pause):
        for i in range(12):
            time.sleep(pause)
            yield i

    slow = LoaderStats()
    assert list(PlanAhead(lambda: make(0.01), ahead=1, chunk=1, stats=slow)) == list(range(12))
    assert slow.planner_busy_s >= 0.1  # 11 items planned on the thread, 10 ms each
    held = LoaderStats()
    got = []
    for i in PlanAhead(lambda: make(0.0), ahead=1, chunk=1, stats=held):
        time.sleep(0.01)  # the consumer is the slow one: the planner waits with its chunk ready
        got.append(i)
    assert got == list(range(12)) and held.planner_full_s > 0.05 and held.planner_busy_s < held.planner_full_s
    assert slow.plan_s == held.plan_s == 0.0 and slow.wait_s == 0.0
