"""Threads shared by the calls that split one piece of work over the cores (a window's decode, the
checksums of whole blocks): one pool per kind, made on first use and kept, so that such a call
hands its parts to running threads instead of starting and joining threads of its own each time."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .cores import usable_cores

_POOLS: dict = {}
_LOCK = threading.Lock()


def shared_pool(kind: str) -> ThreadPoolExecutor:
    """The process's pool of ``kind`` (one thread per usable core), made on first use."""
    pool = _POOLS.get(kind)
    if pool is None:
        with _LOCK:
            pool = _POOLS.get(kind)
            if pool is None:
                pool = _POOLS[kind] = ThreadPoolExecutor(max(1, usable_cores()), thread_name_prefix=f"lirs-{kind}")
    return pool


def on_cores(fn, items: list, kind: str) -> list:
    """``[fn(item) for item in items]`` with ``items[1:]`` on the shared pool of ``kind`` and
    ``items[0]`` on the calling thread meanwhile. The first exception raised is raised (after
    every part has ended: a part writes into arrays the caller owns)."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    futs = [shared_pool(kind).submit(fn, x) for x in items[1:]]
    try:
        first = fn(items[0])
    except BaseException:
        for f in futs:
            f.exception()
        raise
    return [first] + [f.result() for f in futs]


def _forget_pools() -> None:
    # in a forked child the parent's pool threads do not exist: a pool that believes they do would
    # queue work nobody runs
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_pools)
