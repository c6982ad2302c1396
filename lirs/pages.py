"""Releasing the pages a process mapped of a sidecar's tables, so that walking them does not grow
its RSS (what memory limits and the OOM killer look at)."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

from .libc import Libc


def release_pages(*arrays) -> int:
    """Unmap this process's resident pages of those ``arrays`` that are memory maps of a sidecar
    (``MADV_DONTNEED``); other arrays are ignored. Returns the number of maps released.

    A read-only shared file map keeps every page a process touched in its RSS, and RSS is what
    memory limits and the OOM killer look at: an epoch that walks the offsets of 10^8 records would
    hold the whole table (~4 B/record). The pages stay in the page cache (the kernel reclaims them
    as it needs), the data is unchanged, and the next touch maps a page again (a minor fault)."""
    released = 0
    for a in arrays:
        m = getattr(a, "_mmap", None)
        if m is None or m.closed:
            continue
        if _madvise_nogil(a):
            released += 1
            continue
        try:
            m.madvise(mmap.MADV_DONTNEED)
        except (AttributeError, OSError, ValueError):  # no madvise here: the pages simply stay
            continue
        released += 1
    return released


def _madvise_nogil(a: np.ndarray) -> bool:
    """``MADV_DONTNEED`` on the pages of map array ``a`` through libc, which ctypes calls without
    the GIL (``mmap.madvise`` holds it while the kernel unmaps the pages: the threads that plan and
    decode waited for it); False when that is not possible here (the caller falls back)."""
    if not hasattr(mmap, "MADV_DONTNEED") or a.nbytes == 0:
        return False
    try:
        lib = Libc.get().lib
    except OSError:
        return False
    page, addr = mmap.PAGESIZE, a.ctypes.data
    lo = addr // page * page
    hi = -(-(addr + a.nbytes) // page) * page
    return lib.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.MADV_DONTNEED) == 0
