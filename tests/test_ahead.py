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
