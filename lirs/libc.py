"""libc entry points for the native kernels: addresses of ``syscall``, ``pread`` and
``__errno_location`` that numba kernels call through (:mod:`lirs.kernels.io`), resolved once per
process. Below the planner and the engines alike: both read files from kernels."""
from __future__ import annotations

import ctypes
import threading


class Libc:
    """Addresses of the libc functions the native kernels call (resolved once per process)."""

    _lock = threading.Lock()
    _inst = None

    def __init__(self):
        lib = ctypes.CDLL(None, use_errno=True)
        self.lib = lib
        addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        self.syscall = addr(lib.syscall)
        self.pread = addr(lib.pread)
        self.errno_location = addr(getattr(lib, "__errno_location"))  # getattr: no name mangling
        lib.syscall.restype = ctypes.c_long
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.madvise.restype = ctypes.c_int  # ints pass as they are (lirs.pages)
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    @classmethod
    def get(cls) -> "Libc":
        with cls._lock:
            if cls._inst is None:
                cls._inst = cls()
            return cls._inst
