"""Releasing the pages a process mapped of a sidecar's tables, so that walking them does not grow
its RSS (what memory limits and the OOM killer look at)."""
from __future__ import annotations

import mmap
import weakref

import numpy as np

from .constants import INDEX_RELEASE_MIN_BYTES
from .libc import Libc


def release_pages(*arrays, owner=None) -> int:
    """Unmap this process's resident pages of those ``arrays`` that are memory maps of a sidecar
    (``MADV_DONTNEED``); other arrays, and maps under ``INDEX_RELEASE_MIN_BYTES``, are ignored.
    Returns the number of maps released. ``owner`` (an index): the arrays' page ranges are kept
    beside it (:class:`MapPages`) and found again only when its arrays are other objects.

    A read-only shared file map keeps every page a process touched in its RSS, and RSS is what
    memory limits and the OOM killer look at: an epoch that walks the offsets of 10^8 records would
    hold the whole table (~4 B/record). The pages stay in the page cache (the kernel reclaims them
    as it needs), the data is unchanged, and the next touch maps a page again (a minor fault)."""
    if owner is None:
        return MapPages(arrays).release()
    pages = _KEPT.get(owner)
    if pages is None or not pages.holds(arrays):
        pages = _KEPT[owner] = MapPages(arrays)
    return pages.release()


# each owner's MapPages, kept beside it (an index pickles without them: maps do not pickle)
_KEPT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class MapPages:
    """:func:`release_pages` of a fixed tuple of ``arrays``, their page ranges found once.

    An epoch's plan releases the index's pages every few batches (a group epoch: once a read step);
    finding each map's range (``ndarray.ctypes`` makes ctypes objects) took most of a release, all
    of it holding the GIL. A map closed since is skipped at each release: its addresses may belong
    to another mapping by then."""

    def __init__(self, arrays: tuple):
        self.arrays = tuple(arrays)
        # (map, first page address, bytes) per sidecar map; address None: mmap.madvise instead
        self.ranges = []
        for a in self.arrays:
            m = getattr(a, "_mmap", None)
            if m is not None and a.nbytes >= INDEX_RELEASE_MIN_BYTES:
                self.ranges.append((m, *(_page_range(a) or (None, 0))))

    def holds(self, arrays: tuple) -> bool:
        """Whether ``arrays`` are these same array objects."""
        return len(arrays) == len(self.arrays) and all(a is b for a, b in zip(arrays, self.arrays))

    def release(self) -> int:
        """MADV_DONTNEED on each map's pages; the number of maps released."""
        released = 0
        for m, lo, n in self.ranges:
            if m.closed:
                continue
            if lo is not None and _madvise(lo, n):
                released += 1
                continue
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (AttributeError, OSError, ValueError):  # no madvise here: the pages simply stay
                continue
            released += 1
        return released


def _page_range(a: np.ndarray):
    """(first page address, bytes) of the pages under map array ``a``, for libc's ``madvise``,
    which ctypes calls without the GIL (``mmap.madvise`` holds it while the kernel unmaps the
    pages: the threads that plan and decode waited for it); None when that is not possible here
    (the caller falls back)."""
    if not hasattr(mmap, "MADV_DONTNEED") or a.nbytes == 0 or _libc_madvise() is None:
        return None
    page, addr = mmap.PAGESIZE, a.ctypes.data
    lo = addr // page * page
    return lo, -(-(addr + a.nbytes) // page) * page - lo


def _madvise(lo: int, n: int) -> bool:
    return _libc_madvise()(lo, n, mmap.MADV_DONTNEED) == 0


_MADVISE = []


def _libc_madvise():
    """libc's ``madvise`` (:class:`lirs.libc.Libc` sets its argument types), or None."""
    if not _MADVISE:
        try:
            _MADVISE.append(Libc.get().madvise)
        except (OSError, AttributeError):
            _MADVISE.append(None)
    return _MADVISE[0]
