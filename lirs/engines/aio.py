"""``aiofiles`` engine: the asyncio-native baseline, one awaited ``preadv`` per read.

Kept for comparison: one Python call per read caps it far below the device (see the benchmark).
Reads go through :func:`aiofiles.os.wrap` on a private thread pool of ``depth`` threads.

A synchronous :meth:`~lirs.engines.base.Engine.read` runs the reads on a private event loop; called
from a thread whose own loop is running (``Loader.aepoch`` opens its engine, and probes it, from the
caller's coroutine), that private loop runs on a helper thread instead, since a thread can run only
one event loop at a time.
"""
from __future__ import annotations

import asyncio
import errno as _errno
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .base import BLOCK, Engine

_RETRY = (_errno.EINTR, _errno.EAGAIN)


def _new_loop() -> asyncio.AbstractEventLoop:
    """A private event loop for synchronous callers: uvloop's when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class AiofilesEngine(Engine):
    """``depth`` concurrent ``aiofiles`` preadv calls per batch."""

    name = "aiofiles"
    default_depth = 64

    def __init__(self, paths, *, direct: bool = True, depth: int | None = None):
        import aiofiles.os  # noqa: F401 - fail at construction when aiofiles is missing

        super().__init__(paths, direct=direct, depth=depth)
        self._pool: ThreadPoolExecutor | None = None
        self._bridge: ThreadPoolExecutor | None = None  # sync reads from inside a running loop
        self._local = threading.local()  # sync callers: one private event loop per thread
        self._loops: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.depth, thread_name_prefix="lirs-aiofiles")
            return self._pool

    def _read(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._read_own_loop(ext_file, ext_offset, ext_nbytes, buf, buf_pos)
        with self._lock:
            if self._bridge is None:
                self._bridge = ThreadPoolExecutor(1, thread_name_prefix="lirs-aiofiles-sync")
            bridge = self._bridge
        return bridge.submit(self._read_own_loop, ext_file, ext_offset, ext_nbytes, buf, buf_pos).result()

    def _read_own_loop(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos):
        loop = getattr(self._local, "loop", None)
        if loop is None:
            loop = self._local.loop = _new_loop()
            with self._lock:
                self._loops.append(loop)
        coro = self._aread(ext_file, ext_offset, ext_nbytes, buf, buf_pos)
        try:
            return loop.run_until_complete(coro)
        except BaseException as e:
            if not loop.is_running():
                raise
            self._forget(loop, coro)
            if not isinstance(e, OSError):
                raise
            limit = "; raise the limit of open files (ulimit -n)" if e.errno == _errno.EMFILE else ""
            raise OSError(e.errno, f"{e.strerror} (starting the {self.name} engine's event loop{limit}); "
                                   "engine 'threads' reads without one") from e

    def _forget(self, loop, coro) -> None:
        """Drop this thread's ``loop``, whose start failed part way and left it marked running (uvloop
        with no descriptor left: EMFILE in its signal socketpair): it can neither run again nor be
        closed, and closing it at :meth:`close` raised "Cannot close a running event loop" in place
        of the start's error. ``coro`` never ran: closed, not left to warn that it was never awaited."""
        self._local.loop = None
        with self._lock:
            self._loops.remove(loop)
        coro.close()

    async def aread(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, executor=None) -> np.ndarray:
        """Native coroutine read (``executor`` is ignored: reads use the engine's own pool)."""
        args = self._check(ext_file, ext_offset, ext_nbytes, buf, buf_pos)
        if args[0].shape[0] == 0:
            return np.zeros(0, np.int64)
        return await self._aread(*args)

    async def _aread(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos):
        import aiofiles.os

        preadv = aiofiles.os.wrap(os.preadv)
        pool = self._executor()
        e = ext_file.shape[0]
        got = np.zeros(e, np.int64)
        view = memoryview(buf)
        sem = asyncio.Semaphore(self.depth)

        async def one(i):
            f = int(ext_file[i])
            fd, size = int(self.fds[f]), int(self.sizes[f])
            pos, want, off = int(buf_pos[i]), int(ext_nbytes[i]), int(ext_offset[i])
            n = 0
            async with sem:
                while n < want:
                    use, m = fd, want - n
                    if self.direct and n % BLOCK:
                        # a short O_DIRECT read stopped mid-block (FUSE, network filesystems): the
                        # rest of the block through the page cache, then O_DIRECT again
                        use = int(self.continuation_fds([f])[f])
                        m = min(m, BLOCK - n % BLOCK)
                    try:
                        r = await preadv(use, [view[pos + n:pos + n + m]], off + n, executor=pool)
                    except OSError as ex:
                        if ex.errno in _RETRY:
                            continue
                        raise self._error(ex.errno, i, off + n, ext_file, ext_nbytes) from None
                    if r == 0:
                        break  # end of file
                    n += r
                    if self.direct and n % BLOCK and off + n >= size:
                        break  # the usual O_DIRECT end of file: short, off a block boundary, at the size
            got[i] = n

        # wait for every read, even after a failure, so nothing writes into buf after we return
        results = await asyncio.gather(*(one(i) for i in range(e)), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return got

    def _close(self):
        if self._bridge is not None:
            self._bridge.shutdown(wait=True)
            self._bridge = None
        for loop in self._loops:
            loop.close()
        self._loops.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
