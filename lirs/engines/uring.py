"""``uring`` engine: io_uring through raw syscalls, a whole batch submitted and reaped in native code.

The rings are set up and mapped here with ctypes; the submit/reap loop is the nogil kernel
:func:`lirs.kernels.io.uring_read`. One ring serves one read call at a time; concurrent callers
(the loader keeps several batches in flight) each take a ring from a small pool.
"""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ..kernels import io as K
from .base import Engine, ReadError, _Libc

IORING_OFF_SQ_RING = 0
IORING_OFF_CQ_RING = 0x8000000
IORING_OFF_SQES = 0x10000000
IORING_FEAT_SINGLE_MMAP = 1
_PROT_RW = 0x1 | 0x2
_MAP_SHARED_POPULATE = 0x01 | 0x8000
_MAP_FAILED = ctypes.c_void_p(-1).value


class UringSetupError(OSError):
    """io_uring is not available here (EPERM under seccomp, ENOSYS, io_uring_disabled, ...)."""


class _Ring:
    """One io_uring instance: its fd, its three mappings and the int64 descriptor for the kernel."""

    def __init__(self, entries: int, flags: int = 0):
        lc = _Libc.get()
        self._lc = lc
        self.maps: list[tuple[int, int]] = []
        params = (ctypes.c_uint32 * 30)()  # struct io_uring_params, 120 bytes
        params[2] = flags
        fd = lc.lib.syscall(ctypes.c_long(K.NR_IO_URING_SETUP), ctypes.c_long(entries), ctypes.byref(params))
        if fd < 0:
            en = ctypes.get_errno()
            raise UringSetupError(en, f"io_uring_setup failed: {os.strerror(en)}")
        self.flags = flags
        self.fd = int(fd)
        try:
            p = list(params)
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
            r = np.zeros(K.RING_FIELDS, np.int64)
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
            self.desc = r
            K.uring_init_array(r, sq + sq_off["array"])
        except BaseException:
            self.close()
            raise

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
    """io_uring reads, up to ``depth`` in flight per call (O_DIRECT unless ``direct=False``)."""

    name = "uring"
    default_depth = 128

    def __init__(self, paths, *, direct: bool = True, depth: int | None = None):
        super().__init__(paths, direct=direct, depth=depth)
        self._free: list[_Ring] = []
        self._all: list[_Ring] = []
        self._lock = threading.Lock()
        try:
            self._give(self._new_ring())  # fail here, not at the first batch, when io_uring is off
        except BaseException:
            super().close()
            raise

    def _new_ring(self) -> _Ring:
        ring = _Ring(self.depth)
        with self._lock:
            self._all.append(ring)
        return ring

    def _take(self) -> _Ring:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._new_ring()

    def _give(self, ring: _Ring):
        with self._lock:
            self._free.append(ring)

    def _drop(self, ring: _Ring):
        with self._lock:
            self._all.remove(ring)
        ring.close()

    def _batch(self, ext_file, ext_offset, ext_nbytes, buf, buf_pos, got, stall):
        e = ext_file.shape[0]
        err = np.zeros(3, np.int64)
        pending = np.empty(e, np.int64)
        ring = self._take()
        try:
            K.uring_read(ring.desc, self.fds, self.cfds, self.sizes, ext_file, ext_offset, ext_nbytes,
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
        self._give(ring)
        if err[0] > 0:
            i = int(err[1])
            raise self._error(int(err[0]), i, int(err[2]), ext_file, ext_nbytes)

    def _close(self):
        with self._lock:
            rings, self._all, self._free = self._all, [], []
        for r in rings:
            r.close()
