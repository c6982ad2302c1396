"""libc entry points for the native kernels: addresses of ``syscall``, ``pread`` and
``__errno_location`` that numba kernels call through (:mod:`lirs.kernels.io`), resolved once per
process; and a file's size and modification time read with the GIL held (:meth:`Libc.size_mtime`).
Below the planner and the engines alike: both read files from kernels."""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
import threading

# the syscall numbers here and in lirs.kernels.io (statx, io_uring) are Linux's: another kernel has
# other calls at those numbers, so they are made on Linux alone
LINUX = sys.platform.startswith("linux")
# where a libc keeps the calling thread's errno: glibc and musl; macOS and FreeBSD; Solaris
ERRNO_LOCATION = ("__errno_location", "__error", "___errno")

# statx(2), the one file status call whose record has the same layout on every architecture
# (struct stat's differs); its number differs, and where it is not known here os.fstat serves
STATX_NR = {"x86_64": 332, "aarch64": 291}
AT_EMPTY_PATH = 0x1000
STATX_MTIME, STATX_SIZE = 0x40, 0x200
STATX_BYTES = 256
# stx_mask (u32) at 0, stx_size (u64) at 40, stx_mtime at 112 (s64 seconds, u32 nanoseconds)
STATX_FIELDS = struct.Struct("=I36xQ64xqI")
STATX_MISSING = (errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL)  # no statx here, for any file


class Libc:
    """Addresses of the libc functions the native kernels call (resolved once per process)."""

    _lock = threading.Lock()
    _inst = None

    def __init__(self):
        lib = ctypes.CDLL(None, use_errno=True)
        self.lib = lib
        addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        self.syscall = addr(lib.syscall) if hasattr(lib, "syscall") else 0  # used on Linux alone
        self.pread = addr(lib.pread)
        self.errno_location = addr(_errno_location(lib))
        if hasattr(lib, "syscall"):
            lib.syscall.restype = ctypes.c_long
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.madvise = getattr(lib, "madvise", None)  # None: the sidecar's pages simply stay (lirs.pages)
        if self.madvise is not None:
            self.madvise.restype = ctypes.c_int  # ints pass as they are (lirs.pages)
            self.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

        # the numbers are the 64-bit tables': a 32-bit process on a 64-bit kernel has others
        wide = ctypes.sizeof(ctypes.c_void_p) == 8
        self._statx = STATX_NR.get(platform.machine()) if LINUX and wide and self.syscall else None
        self._held = ctypes.PyDLL(None, use_errno=True).syscall if self._statx else None  # keeps the GIL
        if self._held is not None:
            self._held.restype = ctypes.c_long
        self._statx_args = (ctypes.c_long(self._statx or 0), ctypes.c_long(AT_EMPTY_PATH),
                            ctypes.c_long(STATX_SIZE | STATX_MTIME))
        self._bufs = threading.local()

    def size_mtime(self, fd: int) -> tuple[int, int]:
        """(size in bytes, modification time in ns) of open file ``fd``, as ``os.fstat`` gives
        ``st_size`` and ``st_mtime_ns``, by statx(2) with the GIL held: a read step checks its
        files with it (:meth:`lirs.engines.base.Engine.check_unchanged`), and ``os.fstat`` lets
        the GIL go around a microsecond's syscall, a pool thread then waiting behind the others to
        take it back. Falls back to ``os.fstat`` where statx is missing (an older kernel, a
        sandbox, an architecture not listed in ``STATX_NR``). OSError as ``os.fstat`` raises it."""
        if self._statx is not None:
            buf = getattr(self._bufs, "buf", None)
            if buf is None:
                buf = self._bufs.buf = ctypes.create_string_buffer(STATX_BYTES)
            nr, flags, mask = self._statx_args
            if self._held(nr, ctypes.c_long(fd), b"", flags, mask, buf) == 0:
                got, size, sec, nsec = STATX_FIELDS.unpack_from(buf)
                if got & (STATX_SIZE | STATX_MTIME) == STATX_SIZE | STATX_MTIME:
                    return size, sec * 1_000_000_000 + nsec
            elif ctypes.get_errno() in STATX_MISSING:
                self._statx = None  # not on this kernel or in this sandbox: os.fstat from now on
        st = os.fstat(fd)  # also where statx failed on this file: os.fstat's error, as before
        return st.st_size, st.st_mtime_ns

    @classmethod
    def get(cls) -> "Libc":
        """This process's instance. Once made, no lock: a read step asks for it (its files' check),
        and a lock another pool thread holds would be waited for with the GIL let go."""
        inst = cls._inst
        if inst is not None:
            return inst
        with cls._lock:
            if cls._inst is None:
                cls._inst = cls()
            return cls._inst


def _errno_location(lib):
    """libc's function returning the address of this thread's ``errno`` (``int *(void)``), by
    whichever name this libc gives it (:data:`ERRNO_LOCATION`). OSError when it has none: the
    native read kernels could not tell an error's cause, so they are not run."""
    for name in ERRNO_LOCATION:
        f = getattr(lib, name, None)  # getattr: a leading "__" in a class body would be name-mangled
        if f is not None:
            return f
    raise OSError(errno.ENOSYS, "this C library has none of " + ", ".join(ERRNO_LOCATION)
                  + ": lirs's native read kernels need one to read errno")
