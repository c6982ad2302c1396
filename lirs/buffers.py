"""Aligned read buffers of the loader's pipeline, reused between read steps."""
from __future__ import annotations

import threading

import numpy as np

from .constants import BLOCK
from .engines import aligned_empty
from . import memory


class BufferPool:
    """Aligned read buffers, reused; grown when a step needs more. Shared by the pool's threads.

    Buffers of ``keep_bytes`` or more (default: the recycler's ``min_bytes``; a window's) come from
    the process's :class:`lirs.memory.Recycler`: a window is read once and then decoded, so its buffer goes back
    there when the decode is done, for the next window to take with its pages in place."""

    def __init__(self, keep_bytes: int | None = None):
        self.free: list[np.ndarray] = []
        self.lock = threading.Lock()
        self.keep_bytes = int(memory.RECYCLER.min_bytes if keep_bytes is None else keep_bytes)

    def take(self, nbytes: int) -> np.ndarray:
        """A 4096-aligned uint8 buffer of at least ``nbytes``."""
        if nbytes >= self.keep_bytes:
            return memory.RECYCLER.empty(-(-int(nbytes) // BLOCK) * BLOCK, np.uint8)
        with self.lock:
            while self.free:
                buf = self.free.pop()
                if buf.shape[0] >= nbytes:
                    return buf
        # grow with headroom so that slightly larger batches do not reallocate every time
        cap = -(-int(min(nbytes * 1.25, self.keep_bytes)) // BLOCK) * BLOCK
        return aligned_empty(max(cap, BLOCK))

    def give(self, buf: np.ndarray) -> None:
        if buf.shape[0] >= self.keep_bytes:
            return  # a recycled buffer: its block goes back once the last reference does
        with self.lock:
            self.free.append(buf)
