"""Fresh memory for the outputs of a whole-file decode (``load_svmlight``).

A decoder writes every byte of its output arrays once, right after allocating them, so the cost
of the first touch is part of decoding. numpy maps arrays of 4 MiB and more with a request for
transparent huge pages; where the kernel compacts memory to find one (THP defrag "madvise", the
default), a fault can stall for milliseconds, and a whole-file decode's kernel time swung by 15x
between runs on a machine whose memory the page cache had fragmented. Mapping large outputs with
their 4 KiB pages populated in one call (MAP_POPULATE) costs the same every time and spares the
decoding threads a trap per page. The loader's windows keep numpy's memory: each window is
allocated like the one just let go, which the kernel hands back without compacting, and there
populated small pages made window epochs ~15% slower.
"""
from __future__ import annotations

import mmap

import numpy as np

from .constants import POPULATE_MIN_BYTES


def output_empty(n: int, dtype) -> np.ndarray:
    """An uninitialised, writable array of ``n`` items of ``dtype`` (1-D, C-contiguous).

    From ``POPULATE_MIN_BYTES`` on it lies in its own anonymous mapping with every page already
    populated (freed with the array); smaller arrays, and systems without MAP_POPULATE, get
    ``np.empty``."""
    dtype = np.dtype(dtype)
    n = int(n)
    nbytes = n * dtype.itemsize
    flag = getattr(mmap, "MAP_POPULATE", 0)
    if nbytes < POPULATE_MIN_BYTES or not flag:
        return np.empty(n, dtype)
    try:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | flag)
    except OSError:  # address space or a locked-memory limit: numpy's allocator then
        return np.empty(n, dtype)
    return np.frombuffer(m, dtype, n)
