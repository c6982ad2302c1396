"""``Loader.aepoch``: asyncio code gets the batches of ``epoch``, its event loop only awaiting
(the epoch's start and its planning run on the Loader's helper thread), and a Loader closed under
a waiting consumer says so (a ValueError, never a cancellation nobody asked for)."""
from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import lirs
from lirs.pipeline import EpochRun

from test_loader import _write_libsvm


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    p = _write_libsvm(tmp_path_factory.mktemp("aepoch") / "d.svm", 2500, seed=5)
    lirs.build_index(p, progress=False)
    return p


async def _ids(loader, epoch, **kw) -> list:
    return [np.asarray(b.ids).copy() async for b in loader.aepoch(epoch, **kw)]


@pytest.mark.parametrize("granularity", ["window", "group", "instance"])
def test_the_event_loop_never_plans(data, monkeypatch, granularity):
    """Planning an epoch and taking each next batch (a window epoch plans a window's read step
    there: hundreds of ms on millions of records) ran on the loop's thread, stopping every other
    task; they run on the helper thread, and the batches are epoch()'s."""
    where = []
    take = EpochRun.next

    def recorded(run):
        where.append(threading.get_ident())
        return take(run)

    monkeypatch.setattr(EpochRun, "next", recorded)
    kw = dict(granularity=granularity, seed=3, n_features=300, window="64K")
    with lirs.Loader(data, 50, **kw) as loader:
        want = [np.asarray(b.ids).copy() for b in loader.epoch(1)]
        plan = loader.plan
        loader.plan = lambda *a: (where.append(threading.get_ident()), plan(*a))[1]
        where.clear()

        async def run():
            return threading.get_ident(), await _ids(loader, 1)

        loop_thread, got = asyncio.run(run())
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
        assert where and loop_thread not in where
        assert len(set(where)) == 1  # one helper: what an epoch does there stays in order
        assert all(np.array_equal(np.asarray(b.ids), w) for b, w in zip(loader.epoch(1), want))  # sync after it
    assert not [t for t in threading.enumerate() if t.name.startswith("lirs-aepoch")], "close() ends the helper"


def _slow(batch):
    time.sleep(0.1)
    return batch.index


def test_closed_under_a_waiting_consumer_is_a_value_error_not_a_cancellation(data):
    """Two consumers; the second waits for a step still queued behind the first's when another
    thread closes the Loader: close() cancels that step, and the consumer's task came out
    *cancelled* (async) or with concurrent.futures.CancelledError (threads)."""
    kw = dict(granularity="group", seed=3, n_features=300, transform=_slow, threads=1, prefetch=8)
    loader = lirs.Loader(data, 64, **kw)

    async def consume(e):
        async for _ in loader.aepoch(e):
            pass

    async def main():
        a = asyncio.create_task(consume(0))
        await asyncio.sleep(0.05)
        b = asyncio.create_task(consume(1))
        await asyncio.sleep(0.15)  # b now waits for its first batch
        threading.Thread(target=loader.close).start()
        return a, b, await asyncio.gather(a, b, return_exceptions=True)

    a, b, out = asyncio.run(main())
    assert not a.cancelled() and not b.cancelled()
    assert all(isinstance(e, ValueError) and str(e) == "this Loader is closed" for e in out), out

    loader = lirs.Loader(data, 64, **kw)
    errors = {}

    def each(e):
        try:
            for _ in loader.epoch(e):
                pass
        except BaseException as ex:  # noqa: BLE001 - what the consumer got
            errors[e] = ex

    ts = [threading.Thread(target=each, args=(e,)) for e in (0, 1)]
    ts[0].start(), time.sleep(0.05), ts[1].start(), time.sleep(0.15)
    loader.close()
    for t in ts:
        t.join(30)
    assert all(isinstance(e, ValueError) and str(e) == "this Loader is closed" for e in errors.values()), errors


def test_a_failed_batch_leaves_the_same_position_as_epoch(data):
    """With windows=(w, W) the batch that failed is not always the next one: epoch() moved the
    position to it, aepoch left it behind (a resume there re-delivered batches)."""
    bad = []

    def fail(b):
        if b.index in bad:
            raise RuntimeError("boom")
        return b.index

    kw = dict(granularity="window", seed=3, n_features=300, window="64K", transform=fail)
    with lirs.Loader(data, 16, **kw) as loader:
        for w, W in ((1, 2), (1, 3)):
            seen = list(loader.epoch(1, windows=(w, W)))
            bad[:] = [next(b for a, b in zip(seen, seen[1:]) if b > a + 1)]  # batches between are others'
            with pytest.raises(lirs.errors.TransformError):
                list(loader.epoch(1, windows=(w, W)))
            sync = loader.state_dict()["next_batch"]

            async def run():
                async for _ in loader.aepoch(1, windows=(w, W)):
                    pass

            with pytest.raises(lirs.errors.TransformError):
                asyncio.run(run())
            assert loader.state_dict()["next_batch"] == sync == bad[0]
            bad.clear()


def test_cancelled_consumers_leave_every_later_epoch_exact(data):
    """A task cancelled at any await (while the helper may still be taking its next batch) leaves
    the Loader whole: the next epochs, async and sync, are exact."""
    kw = dict(granularity="window", seed=7, n_features=300, window="64K")
    with lirs.Loader(data, 40, **kw) as loader:
        want = {e: [np.asarray(b.ids).copy() for b in loader.epoch(e)] for e in (0, 1)}

        async def main():
            for k in range(8):
                t = asyncio.create_task(_ids(loader, 0))
                for _ in range(k):
                    await asyncio.sleep(0)
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
            return await _ids(loader, 1)

        got = asyncio.run(main())
        assert all(np.array_equal(a, b) for a, b in zip(got, want[1])) and len(got) == len(want[1])
        assert all(np.array_equal(np.asarray(b.ids), w) for b, w in zip(loader.epoch(0), want[0]))


def _helpers() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("lirs-aepoch")]


def test_a_closed_loader_makes_no_helper_again(data):
    """A generator finalised after close() (a `break` inside `with`), and an aepoch called on a
    closed Loader, ran on a helper thread made anew, left running until the Loader was collected."""
    loader = lirs.Loader(data, 50, granularity="group", seed=1, n_features=300)

    async def leave_early():
        with loader:
            async for _ in loader.aepoch(0):
                break
        await asyncio.sleep(0)  # the generator, dropped, is finalised here: after close()

    asyncio.run(leave_early())
    assert not _helpers()
    with pytest.raises(ValueError, match="closed"):
        asyncio.run(_ids(loader, 1))
    assert not _helpers()
    unused = lirs.Loader(data, 50, granularity="group", seed=1, n_features=300)
    unused.close()  # before any epoch: close() returned before closing its helper
    with pytest.raises(ValueError, match="closed"):
        asyncio.run(_ids(unused, 0))
    assert not _helpers()


def test_a_task_cancelled_while_its_epoch_begins_leaves_no_planning_run(data, monkeypatch):
    """Cancelled while the helper was still beginning its epoch, the task never got the run to
    abandon: its planner stayed registered with the pipeline until close()."""
    with lirs.Loader(data, 40, granularity="window", seed=2, n_features=300, window="64K") as loader:
        begin = loader._begin

        def slow_begin(*a):
            time.sleep(0.2)
            return begin(*a)

        monkeypatch.setattr(loader, "_begin", slow_begin)

        async def main():
            t = asyncio.create_task(_ids(loader, 0))
            await asyncio.sleep(0.05)  # the helper is inside slow_begin
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t

        asyncio.run(main())
        loader._hop.drain()  # the abandon queued behind the begin has run
        assert not loader._pipeline.planners
        monkeypatch.undo()
        want = [np.asarray(b.ids).copy() for b in loader.epoch(3)]
        got = asyncio.run(_ids(loader, 3))
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
