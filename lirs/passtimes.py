"""Where a pass of a :class:`lirs.torch.LirsDataLoader` with workers spends its time.

With ``num_workers > 0`` a pass that is slower than the same pass with none can be held up in
three places: a worker waiting for its Loader's batches (too few threads for its windows, or a
slow disk), a worker packing them, or a worker waiting for the main process to ask for its next
item (the main process is the bound: it takes the workers' items in turn, rebuilds them and hands
them to the consumer). :class:`PassTimes` records each for every worker, and for the main process
the time it waited for the workers' items, in one block of shared memory made before the workers
start (inherited by forked workers, passed to spawned ones). Clock: ``time.monotonic`` (one clock
for every process of the machine), so the workers' starts and ends are on the main process's
time line. Read with :meth:`lirs.torch.LirsDataLoader.pass_times`.
"""
from __future__ import annotations

import ctypes
import time
from multiprocessing.context import get_spawning_popen

import numpy as np

from .memory import shared_raw

#: One row a process (row 0 the main process, row 1 + w worker w), these columns (seconds unless said).
FIELDS = ("start", "first", "end", "wait_s", "pack_s", "torch_s", "cpu_s", "batches", "items")
_COL = {f: i for i, f in enumerate(FIELDS)}


class PassTimes:
    """The last pass's times: float64 ``(workers + 1, len(FIELDS))`` in shared memory.

    A worker's ``wait_s`` is its time waiting for its Loader's next batch, ``pack_s`` making a
    batch's tensors and packing them into its item, ``torch_s`` its time between handing an item
    to torch and being asked for the next one (torch's send, and the wait for the main process to
    ask); the main process's ``wait_s`` is its time waiting for the workers' next item (received
    and rebuilt). ``cpu_s``: CPU seconds of the whole process (all its threads) over the pass.
    ``batches``: batches (or pieces of batches) made, ``items``: items sent or received."""

    __slots__ = ("raw", "a")

    def __init__(self, workers: int, raw=None):
        n = (int(workers) + 1) * len(FIELDS)
        self.raw = shared_raw(ctypes.c_double, n) if raw is None else raw
        self.a = np.frombuffer(self.raw, np.float64).reshape(-1, len(FIELDS))

    def __reduce__(self):
        if get_spawning_popen() is None:  # a user's copy: a block of its own, shared with nobody
            return PassTimes, (len(self.a) - 1,)
        return PassTimes, (len(self.a) - 1, self.raw)

    def begin(self) -> None:
        """In the main process, before its workers start a pass: every row cleared, its own started."""
        self.a[:] = 0.0
        self.a[0, _COL["start"]] = time.monotonic()

    def report(self) -> dict:
        """``{"main": {...}, "workers": [{...}, ...]}`` of the last pass: starts, firsts and ends in
        seconds after the main process's start (None where a process has not got there), the other
        columns as recorded; ``{}`` before any pass."""
        t0 = float(self.a[0, _COL["start"]])
        if t0 == 0.0:
            return {}
        rows = [_row(r, t0) for r in self.a]
        return {"main": rows[0], "workers": rows[1:]}


def begun(times: PassTimes | None) -> PassTimes | None:
    """``times`` with a pass begun (:meth:`PassTimes.begin`; None: none kept)."""
    if times is not None:
        times.begin()
    return times


def _row(r, t0: float) -> dict:
    d = {}
    for f, v in zip(FIELDS, r.tolist()):
        if f in ("start", "first", "end"):
            d[f] = None if v == 0.0 else v - t0
        else:
            d[f] = int(v) if f in ("batches", "items") else v
    return d


def timed_worker(batches, make, flush, times: PassTimes | None, worker: int):
    """Worker ``worker``'s items of a pass: ``make(batch)`` gives the items each batch of the
    iterable ``batches`` completes (a list), ``flush()`` the last one (or None); each step timed
    into ``times`` (None, or no row for ``worker``: untimed)."""
    if times is None or not 0 <= int(worker) < len(times.a) - 1:  # a dataset reused by more workers
        for b in batches:
            yield from make(b)
        last = flush()
        if last is not None:
            yield last
        return
    row, cpu0 = times.a[1 + int(worker)], time.process_time()
    row[:] = 0.0
    row[_COL["start"]] = t = time.monotonic()
    # summed here, written to the shared row as each item leaves and at the end: a numpy element
    # a batch was a few calls more in every batch of the worker
    wait = pack = sent = 0.0
    made = 0
    it = iter(batches)
    while True:
        b = next(it, _END)
        t1 = time.monotonic()
        wait += t1 - t
        items = [flush()] if b is _END else make(b)
        t = time.monotonic()
        pack += t - t1
        made += b is not _END
        for item in items:
            if item is None:
                continue
            if row[_COL["first"]] == 0.0:
                row[_COL["first"]] = t
            row[_COL["items"]] += 1
            row[_COL["wait_s"]], row[_COL["pack_s"]], row[_COL["torch_s"]], row[_COL["batches"]] = wait, pack, sent, made
            yield item
            t2 = time.monotonic()
            sent += t2 - t
            t = t2
        if b is _END:
            break
    row[_COL["wait_s"]], row[_COL["pack_s"]], row[_COL["torch_s"]], row[_COL["batches"]] = wait, pack, sent, made
    row[_COL["cpu_s"]] = time.process_time() - cpu0
    row[_COL["end"]] = time.monotonic()


_END = object()


def timed_main(items, times: PassTimes | None):
    """The main process's items of a pass (torch's iterator ``items``), the wait for each timed
    into ``times`` (None: as they come)."""
    if times is None:
        yield from items
        return
    row, cpu0 = times.a[0], time.process_time()
    it = iter(items)
    while True:
        t = time.monotonic()
        item = next(it, _END)
        t1 = time.monotonic()
        row[_COL["wait_s"]] += t1 - t
        if item is _END:
            break
        if row[_COL["first"]] == 0.0:
            row[_COL["first"]] = t1
        row[_COL["items"]] += 1
        keys = getattr(item, "indices", None)  # a bundle's batch keys (a list), else one batch
        row[_COL["batches"]] += len(keys) if isinstance(keys, list) else 1
        yield item
    row[_COL["cpu_s"]] = time.process_time() - cpu0
    row[_COL["end"]] = time.monotonic()
