"""``Loader.aepoch``: an epoch for asyncio code, whose event loop only ever awaits.

Beginning an epoch (planning it, starting the pool, the kernels of a first use) and taking a window
epoch's next batch (planning a window's read step: gathering its records and their extents, or
waiting for the planning thread) run Python and kernels for as long as a window's records take. On the
caller's loop they would stop every other task meanwhile; they run on the Loader's one helper
thread (:class:`Hop`) instead, and the loop awaits them as it awaits the pool's reads. One thread,
so that what an epoch does there stays in order: an epoch a cancelled consumer left is abandoned
after the call still running for it, and the next epoch begins after that.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor


class Hop:
    """The Loader's helper thread for its ``aepoch`` calls (made on first use; a forked child,
    which has none of its parent's threads, makes its own)."""

    def __init__(self):
        self._ex, self._pid, self._lock, self._closed = None, None, threading.Lock(), False

    def _executor(self) -> ThreadPoolExecutor | None:
        """The helper thread's executor; None once closed (a call then runs here: no thread is made
        again for a closed Loader, which a generator finalised after close() or a later aepoch did)."""
        with self._lock:
            if self._closed:
                return None
            if self._ex is None or self._pid != os.getpid():
                self._ex, self._pid = ThreadPoolExecutor(1, thread_name_prefix="lirs-aepoch"), os.getpid()
            return self._ex

    async def call(self, fn, *args, undo=None):
        """``fn(*args)`` on the helper thread, awaited: its result, or its exception raised here
        (once closed, run here). ``undo(result)``, on that thread, where the await is cancelled while
        ``fn`` runs: what it made that nobody will take (an epoch's run begun for a cancelled task)."""
        ex = self._executor()
        try:
            fut = None if ex is None else ex.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile (the Loader was closed)
            fut = None
        if fut is None:
            return fn(*args)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            if undo is not None and not fut.cancel():  # running (not started: cancelled, never runs)
                fut.add_done_callback(lambda f: f.exception() is None and self.later(undo, f.result()))
            raise

    def later(self, fn, *args) -> None:
        """``fn(*args)`` on the helper thread after what runs there now (here, once it is closed)."""
        ex = self._executor()
        try:
            if ex is not None:
                ex.submit(fn, *args)
                return
        except RuntimeError:  # shut down meanwhile (the Loader was closed): nothing runs there any more
            pass
        fn(*args)

    def drain(self) -> None:
        """Wait for what was left to the helper thread (a synchronous epoch after an async one)."""
        ex = self._ex
        if ex is not None and self._pid == os.getpid():
            try:
                ex.submit(int).result()
            except RuntimeError:
                pass

    def close(self) -> None:
        """Stop the helper thread once what was left to it has run."""
        with self._lock:
            ex, self._ex, self._closed = self._ex, None, True
        if ex is not None and self._pid == os.getpid():
            ex.shutdown(wait=True)


async def batches(hop: Hop, begin, take, delivered, failed):
    """The batches of one epoch for ``async for``: ``begin()`` the epoch's run and ``take(run)``
    each next item on ``hop``'s thread, the pool's work awaited on the loop, ``delivered(run,
    item, results)`` the batches of each item (cheap: views of decoded rows); ``failed(run,
    item)`` where waiting for an item raised (the position names its batch)."""
    run = await hop.call(begin, undo=lambda r: r.abandon())  # cancelled while it begins: no run left planning
    try:
        while (item := await hop.call(take, run)) is not None:
            try:
                results = await await_parts(run, item)
            except Exception:
                failed(run, item)
                raise
            for out in delivered(run, item, results):
                yield out
    finally:
        hop.later(run.abandon)  # after a take still running there: a cancelled await does not stop it


async def await_parts(run, item) -> list:
    """:meth:`lirs.pipeline.EpochRun.wait` for an event loop: the results of ``item``'s waits,
    the loop free while the pool works."""
    t = time.perf_counter()
    out = []
    try:
        for f in item.waits():
            try:  # shielded: a cancelled consumer must not cancel a step a later batch shares
                out.append(await asyncio.shield(asyncio.wrap_future(f)))
            except asyncio.CancelledError:
                if f.cancelled():  # the step was (only close() does that), not the consumer's task
                    raise ValueError("this Loader is closed") from None
                raise
        return out
    finally:
        run.pipeline.stats.wait_s += time.perf_counter() - t
