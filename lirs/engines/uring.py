"""``uring`` engine: io_uring through raw syscalls, a whole batch submitted and reaped in native code.

The rings are set up and mapped here with ctypes; the submit/reap loop is the nogil kernel
:func:`lirs.kernels.ring.ring_read`. Each thread that reads gets its own ring (the loader's pool
threads each keep one): a ring owned by one thread can be set up with
``IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`` (as fio does), so completions are
processed when the thread waits for them rather than by interrupting it, and no lock is taken per
read. The data files are registered with every ring (``IORING_REGISTER_FILES``). Older kernels
refuse these flags with EINVAL: the ring is then set up with fewer (see :data:`SETUP_FLAGS`), and
a kernel that refuses file registration gets plain descriptors.

A reading thread whose ring cannot be set up once the engine is open (a process limit: every ring
counts against locked memory, and takes a descriptor) reads through the ``threads`` engine's
``pread`` kernel (:meth:`~lirs.engines.base.Engine._pread_batch`) on the same descriptors where ``engine="auto"`` chose uring, saying so once;
where uring was asked for by name, the read fails naming the limit.
"""
from __future__ import annotations

import ctypes
import functools
import errno as _errno
import os
import sys
import threading

import numpy as np

from ..constants import URING_SUBMIT_CHUNK, URING_WAIT_SHARE
from ..kernels import io as K
from ..kernels import ring as RK
from ..libc import LINUX, Libc
from .base import Engine, EngineUnavailable, ReadError, log

IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_FEAT_SINGLE_MMAP = 1
IORING_SETUP_COOP_TASKRUN = 1 << 8
IORING_SETUP_SINGLE_ISSUER = 1 << 12
IORING_SETUP_DEFER_TASKRUN = 1 << 13
# setup flags tried in order until the kernel accepts one (EINVAL: too old for them), as fio does:
# DEFER_TASKRUN (6.1) needs SINGLE_ISSUER (6.0); COOP_TASKRUN (5.19) alone spares the interrupts
SETUP_FLAGS = (IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
               IORING_SETUP_COOP_TASKRUN, 0)
_PROT_RW = 0x1 | 0x2
_MAP_SHARED_POPULATE = 0x01 | 0x8000
_MAP_FAILED = ctypes.c_void_p(-1).value
# the process limit a ring setup failing with this errno ran into (what to raise)
_LIMITS = {_errno.ENOMEM: "locked memory (`ulimit -l`), which each ring counts against",
           _errno.EMFILE: "open files (`ulimit -n`), a descriptor each ring"}


class UringSetupError(EngineUnavailable):
    """io_uring is not available here (EPERM under seccomp, ENOSYS, io_uring_disabled, ...)."""


def _setup(lc, entries: int, flag_sets) -> tuple[int, int, list]:
    """``io_uring_setup`` with the first of ``flag_sets`` the kernel accepts: (fd, flags, params)."""
    if not LINUX:  # the syscall numbers are Linux's: elsewhere they name other calls
        raise UringSetupError(_errno.ENOSYS, f"io_uring is Linux-only (this is {sys.platform})")
    for flags in flag_sets:
        params = (ctypes.c_uint32 * 30)()  # struct io_uring_params, 120 bytes
        params[2] = flags
        fd = lc.lib.syscall(ctypes.c_long(K.NR_IO_URING_SETUP), ctypes.c_long(entries), ctypes.byref(params))
        if fd >= 0:
            return int(fd), flags, list(params)
        en = ctypes.get_errno()
        if en != _errno.EINVAL or flags == flag_sets[-1]:
            raise UringSetupError(en, f"io_uring_setup failed: {os.strerror(en)}")
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=1)
def uring_allowed() -> bool:
    """Whether this process may set up an io_uring at all (seccomp, ``kernel.io_uring_disabled``
    and old kernels refuse it): one ring of one entry, closed at once, asked once a process."""
    try:
        fd, _, _ = _setup(Libc.get(), 1, (0,))
    except (UringSetupError, OSError):
        return False
    os.close(fd)
    return True


class _Ring:
    """One io_uring instance: its fd, its three mappings and the int64 descriptor for the kernel.

    ``flag_sets``: setup flags to try in order (None: :data:`SETUP_FLAGS`). ``fds`` int32
    (files,): descriptors to register (in file order) so reads name them by index;
    None or a refused registration leaves plain descriptors. ``wait``: completions one wait asks
    for while reads are still queued (:data:`lirs.kernels.ring.R_WAIT`). ``submit``: reads handed to
    the kernel per ``io_uring_enter`` (:data:`lirs.kernels.ring.R_SUBMIT`).
    """

    def __init__(self, entries: int, flag_sets=None, fds=None, wait: int = 1, submit: int = URING_SUBMIT_CHUNK):
        lc = Libc.get()
        self._lc = lc
        self.maps: list[tuple[int, int]] = []
        self.fd, self.flags, p = _setup(lc, entries, tuple(SETUP_FLAGS if flag_sets is None else flag_sets))
        self.owner = threading.current_thread()  # SINGLE_ISSUER: only this thread may submit
        try:
            sq_entries, cq_entries, features = p[0], p[1], p[5]
            sq_off = dict(zip(("head", "tail", "mask", "entries", "flags", "dropped", "array"), p[10:17]))
            cq_off = dict(zip(("head", "tail", "mask", "entries", "overflow", "cqes"), p[20:26]))
            sq_size = sq_off["array"] + sq_entries * 4
            cq_size = cq_off["cqes"] + cq_entries * 16
            if features & IORING_FEAT_SINGLE_MMAP:
                sq_size = cq_size = max(sq_size, cq_size)
                sq = cq = self._map(sq_size, IORING_OFF_SQ_RING)
            else:
                sq = self._map(sq_size, IORING_OFF_SQ_RING)
                cq = self._map(cq_size, IORING_OFF_CQ_RING)
            sqes = self._map(sq_entries * 64, IORING_OFF_SQES)
            u32 = lambda a: ctypes.c_uint32.from_address(a).value  # noqa: E731
            r = np.zeros(RK.RING_FIELDS, np.int64)
            r[K.R_FD] = self.fd
            r[K.R_SQ_HEAD] = sq + sq_off["head"]
            r[K.R_SQ_TAIL] = sq + sq_off["tail"]
            r[K.R_SQ_MASK] = u32(sq + sq_off["mask"])
            r[K.R_SQES] = sqes
            r[K.R_CQ_HEAD] = cq + cq_off["head"]
            r[K.R_CQ_TAIL] = cq + cq_off["tail"]
            r[K.R_CQ_MASK] = u32(cq + cq_off["mask"])
            r[K.R_CQES] = cq + cq_off["cqes"]
            # never more in flight than the SQ holds; the CQ (2x by default) then cannot overflow
            r[K.R_ENTRIES] = min(sq_entries, cq_entries)
            r[K.R_SYSCALL] = lc.syscall
            r[K.R_ERRNO] = lc.errno_location
            r[RK.R_FIXED] = int(fds is not None and self._register_files(fds))
            r[RK.R_WAIT] = max(1, min(int(wait), int(r[K.R_ENTRIES])))
            r[RK.R_SUBMIT] = max(1, int(submit))
            self.desc = r
            RK.init_array(r, sq + sq_off["array"])
        except BaseException:
            self.close()
            raise

    def _register_files(self, fds) -> bool:
        fds = np.ascontiguousarray(fds, np.int32)
        res = self._lc.lib.syscall(ctypes.c_long(K.NR_IO_URING_REGISTER), ctypes.c_long(self.fd),
                                   ctypes.c_long(RK.IORING_REGISTER_FILES), ctypes.c_void_p(fds.ctypes.data),
                                   ctypes.c_long(fds.shape[0]))
        if res < 0:
            en = ctypes.get_errno()
            log.info("io_uring file registration refused (%s); reads name plain descriptors", os.strerror(en))
            return False
        return True

    def _map(self, size: int, offset: int) -> int:
        addr = self._lc.lib.mmap(None, size, _PROT_RW, _MAP_SHARED_POPULATE, self.fd, offset)
        if addr is None or addr == _MAP_FAILED:
            en = ctypes.get_errno()
            raise UringSetupError(en, f"mmap of the io_uring rings failed: {os.strerror(en)}")
        self.maps.append((addr, size))
        return addr

    def close(self):
        for addr, size in self.maps:
            self._lc.lib.munmap(addr, size)
        self.maps.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class UringEngine(Engine):
    """io_uring reads, up to ``depth`` in flight per call (O_DIRECT unless ``direct=False``).

    One ring per reading thread, made at the thread's first read (the constructing thread's at
    construction, so that an unavailable io_uring fails here and not at the first batch).
    """

    name = "uring"
    default_depth = 128
    # set where engine="auto" chose it (open_engine): a thread whose ring cannot be set up reads
    # through pread instead of failing the read (see _without_ring)
    pread_fallback = False
    asked_by = "engine='uring'"  # where it was asked for by name ($LIRS_ENGINE or engine=; open_engine)

    def __init__(self, paths, *, direct: bool = True, depth: int | None = None):
        super().__init__(paths, direct=direct, depth=depth)
        self._rings: dict[int, _Ring] = {}  # thread ident -> the ring that thread owns
        self._lock = threading.Lock()
        self._rings_made = 0
        self._ringless = threading.local()  # .yes in a thread that reads through pread (_without_ring)
        self._said = False  # whether _without_ring's warning was given
        # while the ring is full, wait for this many completions per io_uring_enter
        self._wait = max(1, int(self.depth * URING_WAIT_SHARE))
        try:
            self._take()
        except BaseException:
            super().close()
            raise

    @property
    def setup_flags(self) -> int:
        """The io_uring setup flags the constructing thread's ring got (for reports)."""
        with self._lock:
            return next(iter(self._rings.values())).flags if self._rings else 0

    def _take(self) -> _Ring | None:
        """This thread's ring, set up at its first read; None where it could not be and the thread
        reads through pread instead (:meth:`_without_ring`)."""
        me = threading.current_thread()
        with self._lock:
            ring = self._rings.get(me.ident)
        if ring is not None and ring.owner is me:
            return ring
        if getattr(self._ringless, "yes", False):
            return None
        try:
            ring = _Ring(self.depth, fds=self.fds, wait=self._wait, submit=URING_SUBMIT_CHUNK)
        except UringSetupError as e:
            if not self._rings_made:  # the constructing thread's: io_uring does not work here
                raise
            return self._without_ring(e)
        with self._lock:
            if self.closed:
                ring.close()
                raise ValueError(f"{self.name} engine is closed")
            self._rings_made += 1
            # rings of threads that have ended (their ident may come back for a new thread)
            dead = [k for k, r in self._rings.items() if not r.owner.is_alive() or k == me.ident]
            old = [self._rings.pop(k) for k in dead]
            self._rings[me.ident] = ring
        for r in old:
            r.close()
        return ring

    def _without_ring(self, e: UringSetupError) -> None:
        """A reading thread whose ring could not be set up (``e``) though the constructing thread's
        was: a process limit (locked memory, open files) that one ring fits and one per thread does
        not. Where ``auto`` chose this engine the thread reads through pread from now on, said
        once an engine; where uring was asked for by name, an error naming the limit, since the
        choice is not silently replaced."""
        limit = _LIMITS.get(e.errno)
        why = e.strerror + (f"; likely the process's limit of {limit}" if limit else "")
        if not self.pread_fallback:
            raise UringSetupError(e.errno, f"{self.asked_by}: a reading thread's io_uring ring could not be set up "
                                           f"({why}); {'raise that limit, or ' if limit else ''}ask for engine "
                                           f"'threads' (or 'auto', which reads through pread in such threads)") from e
        self._ringless.yes = True
        with self._lock:
            first, self._said = not self._said, True
        if first:
            log.warning("engine uring (chosen by auto): a reading thread's io_uring ring could not be set up (%s); "
                        "threads without a ring read through pread%s", why,
                        ": raise that limit to read through rings in every thread" if limit else "")
        return None

    def _drop(self, ring: _Ring):
        with self._lock:
            if self._rings.get(ring.owner.ident) is ring:
                del self._rings[ring.owner.ident]
        ring.close()

    def _batch(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall):
        ring = self._take()
        if ring is None:  # this thread has no ring: the threads engine's kernel, on the same descriptors
            return self._pread_batch(self.fds, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall)
        e = ext_file.shape[0]
        err = np.zeros(3, np.int64)
        pending = np.empty(e, np.int64)
        try:
            RK.ring_read(ring.desc, self.fds, self.cfds, self.sizes, ext_file, ext_offset, ext_nbytes,
                         buf.ctypes.data, buf_pos, self.direct, got, err, stall, pending)
        except BaseException:
            self._drop(ring)
            raise
        if err[0] < 0:
            # io_uring_enter failed: reads may still be in flight into buf, so the ring is retired
            self._drop(ring)
            raise ReadError(int(-err[0]), f"io_uring_enter failed: {os.strerror(int(-err[0]))} "
                                          f"(reading {e} extents of {self.paths[int(ext_file[0])]})",
                            self.paths[int(ext_file[0])])
        if err[0] > 0:
            i = int(err[1])
            raise self._error(int(err[0]), i, int(err[2]), ext_file, ext_nbytes)

    def _close(self):
        with self._lock:
            rings, self._rings = list(self._rings.values()), {}
        for r in rings:
            r.close()
