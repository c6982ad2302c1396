"""The pipeline's threads (and the ``threads`` engine's): a hand-off to them is one put on a native queue.

``ThreadPoolExecutor.submit`` holds the GIL through two locks, a future and a work item of its
own, and a look for an idle thread through a Python ``Semaphore`` (a ``Condition`` and its lock,
contended by the threads going idle). The pipeline hands its pool a task per read step and keeps
its own futures, so all of that is overhead on the path the GIL serialises: in a 2-core group
epoch, a py-spy profile found that idle-thread check alone in about a tenth of the samples that held
the GIL (ad hoc; `benchmarks/results/cores_gil_ab_taskthreads.json` is the A/B).
Here a hand-off is one ``SimpleQueue.put`` (C), and an idle thread waits in ``SimpleQueue.get``
without the GIL. The threads start together on the first hand-off and run until shut down, the
pool is collected, or the interpreter exits (then, like the executor's, each ends after the task
it is running and the ones already queued).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import traceback
import weakref

from .errors import ThreadLimitError

log = logging.getLogger("lirs.taskthreads")

# why a thread could not start, as the messages say it (CPython's own error says only that)
AT_LIMIT = "the process's thread limit, `ulimit -u` or a cgroup's pids.max"

_LIVE: "weakref.WeakSet[TaskThreads]" = weakref.WeakSet()
_EXITING = False


class TaskThreads:
    """``n`` threads named ``{name}_{i}`` running the calls handed to :meth:`submit`, oldest first.

    ``initializer()``, when given, runs first on each thread. A call's exception is printed and the
    thread goes on (the pipeline's tasks deliver theirs through their own futures).
    """

    def __init__(self, n: int, name: str, initializer=None):
        self.n = max(1, int(n))
        self.name = name
        self._initializer = initializer
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list = []
        self._lock = threading.Lock()
        self._shut = False
        # a pool dropped without shutdown lets its threads end (they hold the queue, not the pool)
        weakref.finalize(self, _stop, self._q, self.n)
        _LIVE.add(self)

    def submit(self, fn, *args) -> None:
        """Queue ``fn(*args)`` for the first thread free. Raises RuntimeError once shut down, and
        :class:`~lirs.errors.ThreadLimitError` (queuing nothing) where none of the threads could start."""
        if self._shut or _EXITING:
            raise RuntimeError("cannot hand a task to threads that were shut down")
        if not self._threads:
            self._start()
        self._q.put((fn, args))

    def _start(self) -> None:
        with self._lock:
            if self._threads or self._shut:
                return
            for i in range(self.n):
                t = threading.Thread(target=_serve, args=(self._q, self._initializer), name=f"{self.name}_{i}",
                                     daemon=not _JOINED_AT_EXIT)
                try:
                    t.start()
                except RuntimeError as e:  # the process's thread or memory limit: run with those that started
                    if not self._threads:
                        raise _limit_error(self.name, self.n, e) from e
                    log.warning("%s: started %d of %d threads (%s: %s); going on with %d", self.name,
                                len(self._threads), self.n, e, AT_LIMIT, len(self._threads))
                    break
                self._threads.append(t)

    def threads(self) -> tuple:
        """The threads started so far."""
        return tuple(self._threads)

    def __len__(self) -> int:
        """How many threads have started (0 until the first hand-off)."""
        return len(self._threads)

    def shutdown(self, wait: bool = True) -> None:
        """Let each thread end after the tasks queued so far; ``wait``: join them (never the calling
        thread itself). Idempotent."""
        with self._lock:
            first, self._shut = not self._shut, True
            # no thread starts after this: the initializer (a bound method of the owner, which holds
            # this pool) would keep the owner, its index's maps and their descriptors, until a GC
            self._initializer = None
        if first:
            _stop(self._q, len(self._threads))
        if wait:
            me = threading.current_thread()
            for t in self._threads:
                if t is not me:
                    t.join()


def _limit_error(name: str, n: int, error: BaseException) -> ThreadLimitError:
    """The error of ``name``'s threads none of which (of ``n`` asked) could start."""
    return ThreadLimitError(f"{name}: none of the {n} threads asked for could start ({error}: {AT_LIMIT}); "
                            "raise the limit, or run fewer threads or processes beside this one")


def _stop(q: queue.SimpleQueue, n: int) -> None:
    for _ in range(n):
        q.put(None)


def _serve(q: queue.SimpleQueue, initializer) -> None:
    if initializer is not None:
        initializer()
    while True:
        item = q.get()
        if item is None:
            return
        fn, args = item
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 - a task's bug must not take the thread (and the steps queued) with it
            traceback.print_exc()
        del item, fn, args  # no reference to the last task's objects while waiting


def _at_exit() -> None:
    """Before the interpreter joins its threads: no new tasks, and each pool's threads end."""
    global _EXITING
    _EXITING = True
    for pool in list(_LIVE):
        pool.shutdown(wait=False)


# non-daemon threads, stopped before the interpreter joins them (as concurrent.futures does), so a
# thread never dies inside a native read; daemon threads where that hook is missing
_register = getattr(threading, "_register_atexit", None)
_JOINED_AT_EXIT = _register is not None
if _register is not None:
    _register(_at_exit)
# a forked child has none of its parent's threads (a Loader there starts a pipeline of its own): at
# its exit it must not take a parent pool's lock, which a parent thread may have held at the fork
os.register_at_fork(after_in_child=_LIVE.clear)
