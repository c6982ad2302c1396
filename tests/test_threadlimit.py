"""A process at its limit of threads (`ulimit -u`, a cgroup's pids.max): the threads lirs can do
without (the planning thread, a window's decode pool, the kernel preload, the pool's threads past
the first) are left out and the epoch serves the same batches; where no thread of the loader's pool
can start, the error names the limit. The limit is simulated: ``Thread.start`` raises as CPython's
does there, for threads of the names given."""
from __future__ import annotations

import collections
import logging
import threading

import numpy as np
import pytest

import lirs
from conftest import kdd_indexed
from lirs import ahead, parallel, warmup
from lirs.errors import ThreadLimitError

REFUSED = "can't start new thread"


@pytest.fixture(scope="module")
def kdd(tmp_path_factory):
    return kdd_indexed(tmp_path_factory, 6000, seed=11)


@pytest.fixture
def cores16(monkeypatch):
    """16 usable cores, a window decoded in parts, and pools and warnings of this test's own."""
    from lirs import assemble, cores, loader, pipeline, svmdecode

    for mod in (cores, assemble, loader, parallel, pipeline, svmdecode):
        monkeypatch.setattr(mod, "usable_cores", lambda: 16)
    monkeypatch.setattr(svmdecode, "_MIN_REGION", 1 << 16)
    monkeypatch.setattr(parallel, "_SAID", set(), raising=False)  # said once per process
    monkeypatch.setattr(ahead, "_SAID", set(), raising=False)  # said once per process
    monkeypatch.setattr(parallel, "_POOLS", {})  # the process's own pools are left as they are
    yield
    _fresh_pools(monkeypatch)


def _fresh_pools(monkeypatch) -> None:
    """The pools this test made stopped, and none left for the next use."""
    for pool in parallel._POOLS.values():
        pool.shutdown(wait=True)
    monkeypatch.setattr(parallel, "_POOLS", {})


def _limit(monkeypatch, allowed: dict, when=lambda: True) -> collections.Counter:
    """``Thread.start`` refuses a thread whose name starts with a key of ``allowed`` once that many
    of them have started (while ``when()``); the refusals, counted by key."""
    real, started, refused, lock = threading.Thread.start, collections.Counter(), collections.Counter(), threading.Lock()

    def start(self):
        for prefix, n in allowed.items():
            if self.name.startswith(prefix):
                with lock:
                    if started[prefix] >= n and when():
                        refused[prefix] += 1
                        raise RuntimeError(REFUSED)
                    started[prefix] += 1
        real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return refused


def _epochs(path: str, granularity: str) -> list:
    with lirs.Loader(path, 64, granularity=granularity, group_bytes=16384, window="256K", seed=3) as ld:
        return [[b.ids for b in ld.epoch(e)] for e in range(2)]


def _said(caplog, logger: str) -> int:
    return sum(r.name == logger and r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize("granularity", ["window", "group"])
def test_threads_that_cannot_start_leave_the_same_batches(kdd, cores16, monkeypatch, caplog, granularity):
    """No planning thread, no decode thread and one of the pool's 17: every record once per epoch,
    in the order of an unlimited run, each thread left out said once (not per epoch or batch)."""
    whole = _epochs(kdd, granularity)
    _fresh_pools(monkeypatch)
    refused = _limit(monkeypatch, {"lirs-plan": 0, "lirs-decode": 0, "lirs-loader": 1})
    with caplog.at_level(logging.WARNING):
        got = _epochs(kdd, granularity)
    assert refused["lirs-plan"] == 2 and refused["lirs-loader"] == 1
    assert refused["lirs-decode"] >= (granularity == "window")  # a window is decoded in parts
    for a, b in zip(whole, got):
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
        ids = np.concatenate(b)
        assert np.array_equal(np.sort(ids), np.arange(6000))
    assert _said(caplog, "lirs.ahead") == 1 and _said(caplog, "lirs.parallel") == min(1, refused["lirs-decode"])
    assert "started 1 of 17 threads" in caplog.text and "ulimit -u" in caplog.text


def test_a_pool_with_no_thread_names_the_limit(kdd, cores16, monkeypatch):
    refused = _limit(monkeypatch, {"lirs-loader": 0})
    with lirs.Loader(kdd, 64, granularity="group", seed=3) as ld:
        with pytest.raises(ThreadLimitError, match=r"none of the 17 threads.*ulimit -u.*pids\.max") as e:
            next(ld.epoch(0))
    assert isinstance(e.value, RuntimeError) and REFUSED in str(e.value) and refused["lirs-loader"] >= 1


def test_the_pool_starts_once_the_kernel_preload_has_ended(kdd, monkeypatch):
    """One thread left besides the main one (`ulimit -u 2`), taken by the kernel preload: the pool's
    first thread starts once the preload has ended, and the epoch is served."""
    refused_once = threading.Event()

    def busy() -> bool:
        alive = any(t.name == "lirs-preload" and t.is_alive() for t in threading.enumerate())
        if alive:
            refused_once.set()
        return alive

    monkeypatch.setenv(warmup.ENV, "1")
    monkeypatch.setattr(warmup, "cold_groups", lambda opts: [])  # cached: no helper process
    # a preload that runs until the pool's first thread was refused
    monkeypatch.setattr(warmup, "GROUPS", {"read": (lambda o: [object()], lambda o: refused_once.wait(30))})
    monkeypatch.setattr(warmup, "loaded", lambda k: False)
    refused = _limit(monkeypatch, {"lirs-loader": 0}, when=busy)
    with lirs.Loader(kdd, 64, granularity="group", seed=3) as ld:
        ids = np.concatenate([b.ids for b in ld.epoch(0)])
    assert refused["lirs-loader"] >= 1 and np.array_equal(np.sort(ids), np.arange(6000))


def test_a_preload_that_cannot_start_is_left_out(monkeypatch):
    """`ulimit -u 1`: the Loader is made without its preload thread (the kernels load at first use),
    and a fork's wait for the preload threads has none to wait for."""
    monkeypatch.setenv(warmup.ENV, "1")
    monkeypatch.setattr(warmup, "cold_groups", lambda opts: [])
    monkeypatch.setattr(warmup, "GROUPS", {"read": (lambda o: [object()], lambda o: None)})
    monkeypatch.setattr(warmup, "loaded", lambda k: False)
    refused = _limit(monkeypatch, {"lirs-preload": 0})
    w = warmup.start({"engine": "threads"})
    assert refused["lirs-preload"] == 1 and w.preload is None
    assert not any(t.name == "lirs-preload" for t in warmup._PRELOADS)
    warmup.join_preloads()


def test_parts_that_no_thread_can_take_run_on_the_calling_thread(monkeypatch, caplog):
    me = threading.current_thread().name
    monkeypatch.setattr(parallel, "_POOLS", {})
    monkeypatch.setattr(parallel, "_SAID", set(), raising=False)  # said once per process
    refused = _limit(monkeypatch, {"lirs-nothreads": 0})
    who = []

    def fn(i):
        who.append(threading.current_thread().name)
        return i * i
    with caplog.at_level(logging.DEBUG, logger="lirs.parallel"):
        for _ in range(3):
            assert parallel.on_cores(fn, list(range(5)), "nothreads") == [i * i for i in range(5)]
    assert refused["lirs-nothreads"] == 3 and set(who) == {me} and len(who) == 15
    assert _said(caplog, "lirs.parallel") == 1 and "ulimit -u" in caplog.text


def test_planning_goes_on_on_the_consumers_thread():
    """The planning thread refused: the same items in order, an error where it was raised."""
    def make():
        yield from range(50)
        raise ValueError("stopped at 50")

    real = threading.Thread.start

    def refuse(self):
        if self.name == "lirs-plan-test":
            raise RuntimeError(REFUSED)
        real(self)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(threading.Thread, "start", refuse)
        p = ahead.PlanAhead(make, chunk=4, ahead=2, name="lirs-plan-test")
        got = []
        with pytest.raises(ValueError, match="stopped at 50"):
            for item in p:
                got.append(item)
        p.close()
    assert got == list(range(50)) and p._thread is None
