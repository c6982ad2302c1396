"""An epoch's batch plans made ahead on a thread of their own.

Planning a batch (the walker: the records of its units, their random order, the extents of its
read step) is kernels that release the GIL plus their Python glue. On the consumer's thread it
was over half of what that thread did per batch besides waiting (a group epoch from /dev/shm), so
on many cores, where the pool keeps up, it set the epoch's rate. :class:`PlanAhead` runs the walk
on a thread of its own (the first plan on the consumer's, so that the first batch waits for no
hand-off) and hands the plans over in chunks (1, 2, 4, ... up to ``PLAN_CHUNK`` batches: the first
batch is not held back, and later hand-offs cost one lock per chunk), at most ``PLAN_AHEAD_CHUNKS``
chunks ahead, or as many as a given count of plans fills (a window's). The plans, and an error
raised while planning, reach the consumer in the walk's order: an error comes out where the batch
it stopped would have. A pool of fewer than ``PLAN_AHEAD_MIN_THREADS`` threads plans on the
consumer's thread (:class:`PlanInline`): there the pool, not the consumer, sets the rate, and no
core is idle to plan on.
"""
from __future__ import annotations

import collections
import logging
import queue
import threading
import time

from .constants import PLAN_AHEAD_CHUNKS, PLAN_AHEAD_MAX_BATCHES, PLAN_CHUNK
from .taskthreads import AT_LIMIT

_END = object()
log = logging.getLogger("lirs.ahead")


class _Raised:
    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


class PlanAhead:
    """Iterator over ``make()``'s items (``make`` returns an iterator, called on the planning
    thread), produced ahead on a daemon thread. :meth:`close` stops it and waits for it."""

    def __init__(self, make, *, chunk: int = PLAN_CHUNK, ahead: int = PLAN_AHEAD_CHUNKS, batches: int = 0,
                 name: str = "lirs-plan", stats=None):
        self._make, self._name = make, name
        self._stats = stats  # a LoaderStats: the thread's planner_busy_s and planner_full_s
        # ``ahead`` chunks, or enough for ``batches`` plans (window steps: the consumer takes a window's
        # plans at once to hand out the window after), up to PLAN_AHEAD_MAX_BATCHES plans; the first
        # chunks are short (1, 2, 4, ...): three more cover them
        # chunks; of at most an eighth of them (items of many batches each, a window's units, come
        # one a chunk), so that the chunks beyond them hold a few items more, not a window more
        b = min(int(batches), PLAN_AHEAD_MAX_BATCHES)
        chunk = max(1, min(int(chunk), b // 8)) if b > 0 else max(1, int(chunk))
        many = -(-b // chunk) + 3 if b > 0 else 0
        self._q: queue.Queue = queue.Queue(maxsize=max(1, int(ahead), many))
        self._stop = threading.Event()
        self._have: collections.deque = collections.deque()
        self._done = False
        self._stopped = False
        self._chunk = chunk
        self._it = None
        self._thread = None  # started once the consumer has the first item
        self._inline = False  # no thread could start: the consumer makes each item as it asks

    def _first(self):
        """The first item, made on the consumer's thread (no hand-off before the first batch),
        then the thread that makes the rest."""
        self._it = iter(self._make())
        try:
            first = next(self._it)
        except BaseException:
            self._done = True
            raise
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        try:
            thread.start()
        except RuntimeError as e:  # the process's thread limit: the rest as PlanInline makes it
            _say_inline(self._name, e)
            self._inline = True
            return first
        self._thread = thread
        return first

    def _run(self) -> None:
        chunk, size, full, t = [], 1, 0.0, time.perf_counter()
        try:
            for item in self._it:
                chunk.append(item)
                if len(chunk) >= size:
                    f = time.perf_counter()
                    if not self._put(chunk):
                        return
                    full += time.perf_counter() - f
                    chunk, size = [], min(self._chunk, size * 2)
            chunk.append(_END)
        except BaseException as e:  # noqa: BLE001 - delivered to the consumer in order
            chunk.append(_Raised(e))
        finally:
            if self._stats is not None:  # written by this thread alone
                self._stats.planner_busy_s += time.perf_counter() - t - full
                self._stats.planner_full_s += full
        self._put(chunk)

    def _put(self, chunk) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(chunk, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        return self

    def __next__(self):
        if self._stopped:
            raise ValueError("this epoch's planning was stopped (its Loader was closed)")
        if self._inline and not self._done:
            return self._next_inline()
        if self._thread is None and not self._done:
            return self._first()
        if not self._have:
            if self._done:
                raise StopIteration
            self._have.extend(self._q.get())
        item = self._have.popleft()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Raised):
            self._done = True
            raise item.error
        return item

    def _next_inline(self):
        try:
            return next(self._it)
        except BaseException:  # its end, or an error where the batch it stopped would be
            self._done = True
            raise

    def close(self) -> None:
        """Stop planning and wait for the thread (it finishes the plan it is making), then close
        ``make()``'s iterator here (its cleanup runs now, not when it is collected)."""
        self._stop.set()
        self._stopped = self._stopped or not self._done
        self._done = True
        if self._thread is threading.current_thread():
            return
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._q.get(timeout=0.05)  # a put waiting for room returns
                except queue.Empty:
                    pass
            self._have.clear()
        close = getattr(self._it, "close", None)
        if close is not None and not getattr(self._it, "gi_running", False):  # a first item made elsewhere now
            close()


_SAID: set = set()  # names of planning threads that could not start, said once


def _say_inline(name: str, error: BaseException) -> None:
    # once per kind of thread: each epoch after meets the same limit
    level = logging.DEBUG if name in _SAID else logging.WARNING
    _SAID.add(name)
    log.log(level, "%s: the thread could not start (%s: %s); going on on the consumer's thread instead",
            name, error, AT_LIMIT)


class PlanInline:
    """:class:`PlanAhead`'s interface, planning on the consumer's thread as it asks: for a pool of
    few threads, where no core is idle to plan on (a planning thread there waits for a core
    between chunks, and the consumer waits for it: on 2 cores the overlap benchmark's consumer
    waited longer with one)."""

    def __init__(self, make):
        self._make, self._it, self._stopped, self._done = make, None, False, False

    def __iter__(self):
        return self

    def __next__(self):
        if self._stopped:
            raise ValueError("this epoch's planning was stopped (its Loader was closed)")
        if self._it is None:
            self._it = iter(self._make())
        try:
            return next(self._it)
        except StopIteration:
            self._done = True
            raise

    def close(self) -> None:
        self._stopped = self._stopped or not self._done
        self._done = True
