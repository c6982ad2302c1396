"""``threads`` and ``buffered`` engines: pread from a pool of threads that do not hold the GIL.

Each read call wakes up to ``depth - 1`` workers and works itself; every participant runs the
nogil kernel :func:`lirs.kernels.io.pread_worker`, which takes extents from a shared atomic counter
until none is left. Several callers may read at once (their jobs interleave in the queue).
"""
from __future__ import annotations

import os
import resource
import threading

import numpy as np

from ..constants import IN_MEMORY_PARTY_BYTES, OWN_FDS_LIMIT_SHARE, OWN_FDS_MAX_FILES
from ..cores import usable_cores
from ..kernels.io import pread_worker
from ..libc import Libc
from ..mounts import held_in_memory
from ..taskthreads import TaskThreads
from .base import O_DIRECT, Engine, log, reopen


_OWN_LOCK = threading.Lock()
_OWN_OPEN = [0]  # descriptors the engines of this process hold open for their reading threads


def own_fds_room(files: int) -> int:
    """Descriptors the engines of this process may still open for their reading threads, where an
    engine has ``files`` files (see :data:`lirs.constants.OWN_FDS_MAX_FILES`): 0 for more files than
    that; else what is left of 1/OWN_FDS_LIMIT_SHARE of the soft limit of open files, for all the
    engines together (many Loaders at once leave the rest of the limit to the program)."""
    if files > OWN_FDS_MAX_FILES:
        return 0
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return max(0, (1 << 16 if soft == resource.RLIM_INFINITY else int(soft)) // OWN_FDS_LIMIT_SHARE - _OWN_OPEN[0])


class _Job:
    """One read call's extents, shared by its parties: each runs the kernel with its own descriptors."""

    __slots__ = ("args", "fds_here", "left", "lock", "done", "error")

    def __init__(self, args, parties, fds_here):
        self.args = args  # the kernel's arguments but the descriptors (third)
        self.fds_here = fds_here
        self.left = parties
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error = None

    def run(self):
        try:
            a = self.args
            pread_worker(a[0], a[1], self.fds_here(), *a[3:])
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            self.error = e
        finally:
            with self.lock:
                self.left -= 1
                last = self.left == 0
            if last:
                self.done.set()


class ThreadsEngine(Engine):
    """O_DIRECT ``pread`` from ``depth`` threads (the caller plus ``depth - 1`` workers)."""

    name = "threads"
    default_depth = 32
    party_bytes = 0  # > 0: one party per this many bytes of the buffer (up to depth); 0: per extent

    def __init__(self, paths, *, direct: bool = True, depth: int | None = None):
        super().__init__(paths, direct=direct, depth=depth)
        self._libc = Libc.get()
        # started on the first read that shares its extents
        self._workers = TaskThreads(max(1, self.depth - 1), f"lirs-{self.name}")
        self._local = threading.local()  # each reading thread's own descriptors (fds_here)
        self._own_fds: list[int] = []  # all of them, closed with the engine
        self._own_ok = len(self.fds) <= OWN_FDS_MAX_FILES  # False once opening them failed

    def fds_here(self) -> np.ndarray:
        """The descriptors this thread reads through, int32 (files,): its own (the files this
        engine opened, reopened for it), so that the threads' preads do not all count references on
        one open file (:data:`lirs.constants.OWN_FDS_MAX_FILES`); :attr:`fds` where that is not
        possible or the room for descriptors is spent."""
        fds = getattr(self._local, "fds", None)
        if fds is None:
            fds = self._local.fds = self._open_own()
        return fds

    def _open_own(self) -> np.ndarray:
        n = len(self.fds)
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (O_DIRECT if self.direct else 0)
        with self._cfd_lock, _OWN_LOCK:
            if self.closed or not self._own_ok or n > own_fds_room(n):
                return self.fds
            got: list[int] = []
            try:
                for fd in self.fds:
                    got.append(reopen(fd, flags))
            except OSError as e:  # no /proc, no descriptor left: the shared ones, from now on
                for fd in got:
                    os.close(fd)
                self._own_ok = False
                log.debug("%s engine: reading threads share the descriptors (%s)", self.name, e)
                return self.fds
            self._own_fds += got
            _OWN_OPEN[0] += n
        return np.asarray(got, np.int32)

    def _batch(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall):
        return self._pread_batch(self.fds_here(), ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall,
                                 self._libc, self._share)

    def _share(self, args) -> None:
        """Run the kernel with ``args`` on up to ``depth`` threads: this one and woken workers."""
        e, buf = args[5].shape[0], args[8]
        parties = min(self.depth, e)
        if self.party_bytes and parties > 1:
            parties = min(parties, -(-buf.nbytes // self.party_bytes))
        if parties == 1:  # the calling thread alone: no job to share, nobody to wait for
            pread_worker(*args)
            return
        job = _Job(args, parties, self.fds_here)
        for _ in range(parties - 1):
            try:
                self._workers.submit(job.run)
            except RuntimeError:  # the workers were shut down (the interpreter exits): this thread's share
                job.run()
        job.run()
        job.done.wait()
        if job.error is not None:
            raise job.error

    def _close(self):
        self._workers.shutdown(wait=True)
        with self._cfd_lock, _OWN_LOCK:
            own, self._own_fds = self._own_fds, []
            if os.getpid() == self.pid:
                _OWN_OPEN[0] -= len(own)
        if os.getpid() == self.pid:
            for fd in own:
                os.close(fd)


class BufferedEngine(ThreadsEngine):
    """Page-cache ``pread`` (no O_DIRECT) from a few threads: for filesystems that refuse O_DIRECT
    (tmpfs, some overlays) and for data that is already in memory. On a filesystem held in memory
    (tmpfs, ramfs) a read is a copy, so it is shared by bytes, not by extents: one thread per
    ``IN_MEMORY_PARTY_BYTES`` of the step (the calling thread alone for a batch or a group step,
    several for a window), up to one per usable core (at most ``default_depth``)."""

    name = "buffered"
    default_depth = 8

    def __init__(self, paths, *, direct: bool = False, depth: int | None = None):
        if paths and held_in_memory(paths):
            self.party_bytes = IN_MEMORY_PARTY_BYTES
            if depth is None:
                depth = max(1, min(self.default_depth, usable_cores()))
        super().__init__(paths, direct=False, depth=depth)
