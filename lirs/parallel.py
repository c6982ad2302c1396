"""Threads shared by the calls that split one piece of work over the cores (a window's decode, the
checksums of whole blocks): one pool per kind, made on first use and kept, so that such a call
hands its parts to running threads instead of starting and joining threads of its own each time.

A pool's threads start together on its first use (:class:`lirs.taskthreads.TaskThreads`): at the
process's thread limit it goes on with those that started, and where none could, :func:`on_cores`
runs the parts on the calling thread (a ``ThreadPoolExecutor`` starts a thread inside ``submit``,
after queuing the part: its error left a part that a later thread would run again)."""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Executor, Future

from .cores import usable_cores
from .errors import ThreadLimitError
from .taskthreads import AT_LIMIT, TaskThreads

log = logging.getLogger("lirs.parallel")

_POOLS: dict = {}
_LOCK = threading.Lock()
_SAID: set = set()  # the kinds whose parts ran on the calling thread, said once


class SharedPool(Executor):
    """An executor on ``n`` :class:`~lirs.taskthreads.TaskThreads` named ``{name}_{i}``: ``submit``
    raises :class:`~lirs.errors.ThreadLimitError`, having queued nothing, when none could start."""

    def __init__(self, n: int, name: str):
        self._threads = TaskThreads(n, name)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """The future of ``fn(*args, **kwargs)``, run by the first thread free."""
        fut: Future = Future()
        self._threads.submit(_run, fut, fn, args, kwargs)
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Let the threads end after the parts queued so far (``wait``: join them)."""
        self._threads.shutdown(wait)


def _run(fut: Future, fn, args, kwargs) -> None:
    if fut.set_running_or_notify_cancel():
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - delivered through the future
            fut.set_exception(e)


def shared_pool(kind: str) -> SharedPool:
    """The process's pool of ``kind`` (one thread per usable core), made on first use."""
    pool = _POOLS.get(kind)
    if pool is None:
        with _LOCK:
            pool = _POOLS.get(kind)
            if pool is None:
                pool = _POOLS[kind] = SharedPool(max(1, usable_cores()), f"lirs-{kind}")
    return pool


def on_cores(fn, items: list, kind: str) -> list:
    """``[fn(item) for item in items]`` with ``items[1:]`` on the shared pool of ``kind`` and
    ``items[0]`` on the calling thread meanwhile (all on the calling thread where no thread of
    the pool could start). The first exception raised is raised (after every part has ended: a
    part writes into arrays the caller owns)."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    futs: list = []
    try:
        for x in items[1:]:
            futs.append(shared_pool(kind).submit(fn, x))
    except ThreadLimitError as e:  # no thread started, so this part was not queued
        _say_inline(kind, e)
    try:
        here = [fn(x) for x in items[:1] + items[1 + len(futs):]]
    except BaseException:
        for f in futs:
            f.exception()
        raise
    return here[:1] + [f.result() for f in futs] + here[1:]


def _say_inline(kind: str, error: BaseException) -> None:
    # once per pool: every call after this one meets the same limit
    level = logging.DEBUG if kind in _SAID else logging.WARNING
    _SAID.add(kind)
    log.log(level, "lirs-%s: no thread could start (%s: %s); its parts run on the calling thread", kind,
            error.__cause__ or error, AT_LIMIT)


def _forget_pools() -> None:
    # in a forked child the parent's pool threads do not exist: a pool that believes they do would
    # queue work nobody runs
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_pools)
