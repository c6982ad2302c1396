"""Memory for large arrays: fresh memory for the outputs of a whole-file decode
(``load_svmlight``), and recycled memory for what the loader allocates again and again (a window's
read buffer and decoded arrays).

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

import collections
import ctypes
import mmap
import threading
import weakref
import multiprocessing
from multiprocessing import heap

import numpy as np

from .constants import COPY_ALIGN, HELD_MAX_BYTES, POPULATE_MIN_BYTES, RECYCLE_KEEP_BLOCKS, RECYCLE_MIN_BYTES
from .errors import UsageError


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


def zeros_held(n: int, dtype) -> np.ndarray:
    """A zeroed, writable array of ``n`` items of ``dtype`` (1-D, C-contiguous), made without
    letting the GIL go up to ``HELD_MAX_BYTES``.

    ``np.zeros`` lets the GIL go (around calloc) from 1 KiB on: a read step made three such arrays
    a step (the engine's per-extent counts), each a hand-off that a pool thread waits to take back
    behind every other thread on many cores. A bytearray is zeroed with the GIL held (a memset of
    a few KiB); larger arrays still get ``np.zeros``."""
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes > HELD_MAX_BYTES:
        return np.zeros(int(n), dtype)
    return np.frombuffer(bytearray(nbytes), dtype)


def copy_held(a: np.ndarray) -> np.ndarray:
    """A writable copy of the C-contiguous 1-D array ``a``, made with the GIL held up to
    ``HELD_MAX_BYTES`` (``a.copy()`` lets it go from 500 items on; see :func:`zeros_held`)."""
    if a.nbytes > HELD_MAX_BYTES or not a.flags.c_contiguous:
        return a.copy()
    return np.frombuffer(bytearray(memoryview(a).cast("B")), a.dtype)


def shared_block(nbytes: int) -> heap.BufferWrapper:
    """``nbytes`` of shared memory for worker processes (multiprocessing's heap: a file of
    /dev/shm, or of the temporary folder, mapped by every process that inherits or unpickles the
    block); :func:`shared_array` views it.

    ``multiprocessing.RawArray`` takes the same memory and zeroes it with a memset: every page
    faulted in and written before anyone uses it (1 GiB: 0.96 s here, ad hoc), and all of it
    resident for good. Here nothing writes it: its pages come in as first written. Its bytes are
    not promised: zero when the heap makes a new file for it (as for any block larger than the
    heap's free ones: a ring), else what a block freed earlier in this process left there.
    UsageError when no shared memory can be made (:func:`no_shared_memory`)."""
    try:
        return heap.BufferWrapper(max(int(nbytes), 1))
    except OSError as e:
        raise no_shared_memory(e) from e


def shared_raw(ctype, n: int):
    """``multiprocessing.RawArray(ctype, n)``: ``n`` zeroed items shared with worker processes;
    UsageError when no shared memory can be made (:func:`no_shared_memory`)."""
    try:
        return multiprocessing.RawArray(ctype, n)
    except OSError as e:
        raise no_shared_memory(e) from e


def no_shared_memory(e: OSError) -> UsageError:
    """The error of a DataLoader whose workers need shared memory where none can be made: a
    read-only or full /dev/shm (multiprocessing's heap makes its files there, or in the temporary
    folder). ``num_workers=0`` needs none."""
    return UsageError(f"DataLoader workers need shared memory, and none could be made ({type(e).__name__}: {e}): "
                      f"make /dev/shm (or the temporary folder) writable, or use num_workers=0")


def shared_array(block: heap.BufferWrapper, dtype=np.uint8) -> np.ndarray:
    """The writable 1-D array of ``dtype`` over all of ``block`` (:func:`shared_block`); every
    view of it keeps ``block`` allocated.

    A block goes back to multiprocessing's heap when the block object is collected, whatever still
    views its memory, and a later block may then be carved from the same bytes: batches a consumer
    kept from a DataLoader it let go would be written over by the next one's workers. So the
    array's base is a ctypes array over the block that holds the block (numpy keeps a view's base
    at the first object that is no array: every slice and tensor made from the array keeps it;
    multiprocessing.RawArray holds its block so too)."""
    view = block.create_memoryview()
    holder = (ctypes.c_uint8 * view.nbytes).from_buffer(view)
    holder.block = block
    return np.frombuffer(holder, np.uint8).view(dtype)


def block_layout(n: int, dtypes: tuple) -> tuple[list, int]:
    """Arrays of ``n`` items of each of ``dtypes`` one after the other in one block, each starting
    on a cache line: ``([(first byte, end byte, dtype)], bytes of the block)``."""
    spans, end = [], 0
    for d in dtypes:  # plain loops: a generator's frame is a Python call each time it resumes
        d = np.dtype(d)
        spans.append((end, end + n * d.itemsize, d))
        end = -(-spans[-1][1] // COPY_ALIGN) * COPY_ALIGN
    return spans, end


class Recycler:
    """Large arrays whose memory is used again once they are gone.

    A window epoch reads and decodes a few hundred megabytes per window and lets the last window's
    arrays go. Memory handed back to the system and asked for again is not free: every page is
    zeroed on its first touch, and on a virtual machine whose free pages are reported to the host
    (virtio-balloon free page reporting, as on the machines measured here) the host backs each
    page again too — about 1.7 ms per MiB there, against 0.1 ms for memory reused at once (ad-hoc
    timings), and a profile of a window epoch found 29% of its CPU time zeroing fresh pages. So
    an array of ``RECYCLE_MIN_BYTES`` or more (:meth:`empty`) lies in a block of anonymous memory that goes back to this pool when the last
    view of it is gone, and the next array of about its size takes it, its pages already there.
    At most ``keep`` blocks wait in the pool; the pool is emptied by :meth:`trim`.
    """

    def __init__(self, keep: int = RECYCLE_KEEP_BLOCKS, min_bytes: int = RECYCLE_MIN_BYTES):
        self.keep = int(keep)
        self.min_bytes = int(min_bytes)
        self._free: list = []           # mmap blocks no array uses, smallest first
        # blocks come back from a weak reference's callback, which may run on any thread at any
        # moment (even inside _take, through the garbage collector): it only appends here; the
        # others drain it
        self._back: collections.deque = collections.deque()
        self._out: dict = {}            # id of the weak reference to a lent block's array -> (it, the block)
        self._lock = threading.Lock()
        self.made = 0                   # blocks mapped (for tests and benchmarks)
        self.reused = 0

    def empty(self, n: int, dtype, min_bytes: int | None = None) -> np.ndarray:
        """An uninitialised, writable 1-D array of ``n`` items of ``dtype``, page-aligned when it
        is at least ``min_bytes`` (default: the pool's; then in a recycled block), else from numpy."""
        return self.empties(n, (dtype,), min_bytes)[0]

    def empties(self, n: int, dtypes: tuple, min_bytes: int | None = None) -> tuple:
        """Arrays of ``n`` items of each of ``dtypes`` (uninitialised, writable, 1-D), lying one
        after the other in one recycled block (the first page-aligned, each starting on a cache line)
        when together they hold at least ``min_bytes``, else from numpy. The block goes back when the
        last view of any of them is gone: arrays made and let go together (a read step's decoded
        indices and values), for the Python work of one block instead of one each."""
        n = int(n)
        spans, end = block_layout(n, dtypes)
        block = None
        if end >= (self.min_bytes if min_bytes is None else int(min_bytes)):
            try:
                block = self._take(end)
            except OSError:  # no new map (address space, a map-count limit): numpy's memory
                pass
        if block is None:
            return tuple([np.empty(n, d) for _, _, d in spans])
        holder = self._lend(block, end)
        return tuple([holder[a:b].view(d) for a, b, d in spans])

    def _lend(self, block: mmap.mmap, nbytes: int) -> np.ndarray:
        """The uint8 array over the first ``nbytes`` of ``block``, which comes back to the pool
        when that array is gone. Views of it keep it as their base (it does not own its memory):
        it goes when the last view does, and a weak reference's callback then gives the block back
        (a plain weak reference: ``weakref.finalize`` costs a dozen Python steps more, on a read
        step's path)."""
        holder = np.frombuffer(block, np.uint8, nbytes)
        ref = weakref.ref(holder, self._returned)  # kept here while the array lives (by its id: arrays do not hash)
        self._out[id(ref)] = ref, block
        return holder

    def _returned(self, ref) -> None:
        self._back.append(self._out.pop(id(ref))[1])

    def _take(self, nbytes: int) -> mmap.mmap:
        with self._lock:
            self._drain()
            for i, block in enumerate(self._free):
                if nbytes <= len(block) <= 2 * nbytes:
                    self.reused += 1
                    return self._free.pop(i)
        # a little headroom: balanced windows differ in size by a few records, rarely more
        block = mmap.mmap(-1, -(-(nbytes + (nbytes >> 5)) // mmap.PAGESIZE) * mmap.PAGESIZE,
                          flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.made += 1
        if nbytes < self.min_bytes:
            # a read step's decoded arrays, written from their start: a block sized by a bound on
            # them is partly used, and huge pages would bring in 2 MiB around the end of each use
            return block
        try:
            # huge pages, as numpy asks for its large arrays: a window's records are decoded in
            # their dealt (random) order, and with 4 KiB pages every record cost a TLB miss (one
            # thread decoded a window at 410 MB/s, 590 with huge pages; ad hoc)
            block.madvise(mmap.MADV_HUGEPAGE)
        except (AttributeError, OSError):
            pass
        return block

    def _drain(self) -> None:
        """Move the blocks that came back into the pool, keeping the ``keep`` largest (lock held)."""
        while self._back:
            self._free.append(self._back.popleft())
        self._free.sort(key=len)
        while len(self._free) > self.keep:
            self._free.pop(0).close()  # the smallest: the large ones are the costly ones

    def trim(self) -> int:
        """Unmap every block waiting in the pool; returns how many."""
        with self._lock:
            self._drain()
            blocks, self._free = self._free, []
        for b in blocks:
            b.close()
        return len(blocks)

    @property
    def free_bytes(self) -> int:
        """Bytes of the blocks waiting in the pool."""
        with self._lock:
            self._drain()
            return sum(len(b) for b in self._free)


#: the process's pool (looked up as ``memory.RECYCLER`` where used, so one name replaces it)
RECYCLER = Recycler()

#: where a read step's decoded indices and values are made (:mod:`lirs.svmdecode`): the pool, or in a
#: DataLoader worker the worker's part of a shared arena (:func:`lirs.arena.install`)
OUTPUTS = RECYCLER
