"""Shared memory DataLoader workers decode their windows into, so that a batch's values and
indices cross to the main process without a copy (:mod:`lirs.workers`).

A worker of :func:`lirs.torch.make_dataloader` reading its own windows packs each batch into a
slot of its ring (:class:`lirs.ring.SlotRing`): the CSR values and indices of a window batch,
nine tenths of its bytes, were copied there from the window's decoded arrays, and two workers on
2 cores spent ~1.2x the CPU of one process. Here the worker's decoder takes a window's outputs
from the worker's part of an :class:`Arena` (:class:`ArenaOutputs`, installed as
:data:`lirs.memory.OUTPUTS`), so that a batch's values and indices already lie in memory the main
process maps: only their place crosses, and the main process views them there.

A block of the arena is written again only when nothing can still read it: the worker's own
arrays are gone (a weak reference, as :class:`lirs.memory.Recycler` has it) and every view the
main process made of it is gone too. Two counters a block, in shared memory, each written by one
process only: ``sent`` (the worker: items that refer to the block) and ``freed`` (the main
process: its views of those items collected). A block whose counts differ is in use, or lost with
an item that never arrived (a DataLoader shut down with items in flight): it is never reused, and
the worker's later windows take private memory, their batches copied as before. So a block is
never written under a reader; at worst the arena runs out and batches are copied.
"""
from __future__ import annotations

import bisect
import ctypes
import os
import threading
import weakref
from multiprocessing.context import get_spawning_popen

import numpy as np

from .memory import block_layout, shared_array, shared_block, shared_raw
from .ring import shm_budget
from .windows import window_count

ARENA_BYTES_PER_BYTE = 2.5  # a window's decoded values and indices per byte of its LIBSVM text, at most ~2 (a
#                            feature takes 4 bytes of text or more), and the room a block is reused with
ARENA_WINDOWS = 6            # windows' outputs in a worker's part: two read ahead, one handed out, others held
ARENA_MIN_WINDOWS = 3        # fewer fit the shared memory left: no arena
ARENA_MIN_BYTES = 1 << 20    # outputs smaller than this (not a window's) take the worker's usual memory
ARENA_BLOCKS = 16            # blocks a worker's part may hold at once (each a window's indices and values, or one of them)

_ARENAS = weakref.WeakValueDictionary()  # token -> Arena, in the process that made it (the DataLoader's)


class Arena:
    """``region`` bytes of shared memory for each of ``workers`` DataLoader workers, and two int64
    counters for each of ``blocks`` blocks a worker may carve out of its part (``sent``, ``freed``:
    arrays ``(workers, blocks)``). Made in the main process before the workers start (its pages
    come in as first written); forked workers inherit it, spawned ones get it pickled."""

    def __init__(self, workers: int, region: int, blocks: int = ARENA_BLOCKS, min_bytes: int = ARENA_MIN_BYTES,
                 token=None, raw=None, counts=None):
        self.workers, self.region, self.blocks = int(workers), -(-int(region) // 4096) * 4096, int(blocks)
        self.min_bytes = int(min_bytes)  # outputs smaller than this take the worker's usual memory
        self.raw = shared_block(self.workers * self.region) if raw is None else raw
        n = self.workers * self.blocks * 2
        self.counts = shared_raw(ctypes.c_int64, n) if counts is None else counts
        self.mem = shared_array(self.raw)[:self.workers * self.region]
        c = np.frombuffer(self.counts, np.int64).reshape(self.workers, self.blocks, 2)
        self.sent, self.freed = c[:, :, 0], c[:, :, 1]
        self.addr = self.mem.__array_interface__["data"][0]
        self.token = token or os.urandom(8).hex()
        self.outputs = None  # this worker's ArenaOutputs, once installed
        if raw is None:
            _ARENAS[self.token] = self

    def __reduce__(self):
        if get_spawning_popen() is None:  # not a worker starting: a copy would share nothing
            return _no_arena, ()
        return Arena, (self.workers, self.region, self.blocks, self.min_bytes, self.token, self.raw, self.counts)

    def view(self, worker: int, block: int, lo: int, hi: int):
        """uint8 numpy array over bytes ``[lo, hi)`` of the arena (in the main process), counted
        as freed for ``block`` of ``worker`` once it is collected."""
        a = self.mem[lo:hi]
        weakref.finalize(a, _freed, self.freed, worker, block)
        return a


def _freed(freed, worker, block):
    freed[worker, block] += 1


def _no_arena():
    return None


def arena_of(token: str) -> Arena:
    """The :class:`Arena` ``token`` of this process (the main process's, which views its items)."""
    return _ARENAS[token]


def arena_for(loader, epoch: int, workers: int, ring, by_window: bool) -> Arena | None:
    """The :class:`~lirs.arena.Arena` ``workers`` DataLoader workers reading their own windows
    (``by_window``) of ``loader``'s epoch ``epoch`` decode LIBSVM windows into, so that their
    batches' values and indices cross without a copy; None otherwise, or when the shared memory
    left beside ``ring`` (half the free space of /dev/shm, :func:`lirs.ring.shm_budget`) would not hold
    ``ARENA_MIN_WINDOWS`` windows' outputs a worker (their
    batches are copied into the ring, as before). A worker's part holds ``ARENA_WINDOWS`` windows'
    outputs, each counted at ``ARENA_BYTES_PER_BYTE`` times the window's share of the records' bytes."""
    if not by_window or workers <= 1 or loader.index.format != "libsvm":
        return None
    plan = loader.plan(epoch)
    window = loader.index.payload_bytes / max(1, window_count(plan)) * ARENA_BYTES_PER_BYTE
    # not RING_MAX_BYTES: the outputs are those the workers would decode into their own memory
    half = shm_budget()
    room = -1 if half is None else (half - ring.workers * ring.slots * ring.slot_bytes) // workers
    if room < ARENA_MIN_WINDOWS * window:
        return None
    return Arena(workers, int(min(room, ARENA_WINDOWS * window)), ARENA_BLOCKS, ARENA_MIN_BYTES)


class ArenaOutputs:
    """A worker's decoded outputs in its part of an :class:`Arena`: :meth:`empties` as
    :meth:`lirs.memory.Recycler.empties`, the arrays together in one block of the part when they
    hold the arena's ``min_bytes`` or more and a block is free (else from ``fallback``, the process's
    recycler). Blocks are carved from the part as needed (exact sizes) and reused for an array of
    up to their size and at least half of it; :meth:`where` finds the block an array lies in."""

    def __init__(self, arena: Arena, worker: int, fallback):
        self.arena, self.worker, self.fallback = arena, int(worker), fallback
        # arrays over a block are made from a memoryview, not the arena's array: numpy takes an
        # array's base past views of arrays to the first that owns its memory or is no array, and
        # the block's views must keep its holder (its weak reference) alive, not the arena's
        self.mv = memoryview(arena.mem)
        self.base = self.worker * arena.region        # this worker's part: [base, base + region)
        self.end = self.base                          # where the next new block starts
        self.starts: list = []                        # each block's start, ascending (its index in the counters: its place here)
        self.sizes: list = []
        self.held = []                                # whether the worker's own arrays still view the block
        self._lock = threading.Lock()
        self.made = self.reused = 0                   # blocks carved, blocks taken again (tests, benchmarks)

    def empty(self, n: int, dtype, min_bytes: int | None = None) -> np.ndarray:
        """An uninitialised 1-D array of ``n`` items of ``dtype`` (see :meth:`empties`)."""
        return self.empties(n, (dtype,), min_bytes)[0]

    def empties(self, n: int, dtypes: tuple, min_bytes: int | None = None) -> tuple:
        """Arrays of ``n`` items of each of ``dtypes`` (uninitialised, writable, 1-D), one after
        the other in one block of the arena, each starting on a cache line; from ``fallback`` when
        they hold less than the arena's ``min_bytes`` or no block is free."""
        n = int(n)
        spans, end = block_layout(n, dtypes)
        b = self._take(end) if end >= self.arena.min_bytes else None
        if b is None:
            return self.fallback.empties(n, dtypes, min_bytes)
        lo = self.starts[b]
        holder = np.frombuffer(self.mv[lo:lo + end], np.uint8)
        weakref.finalize(holder, self._let_go, b)
        return tuple([holder[a:z].view(d) for a, z, d in spans])

    def _take(self, nbytes: int) -> int | None:
        """A free block of ``nbytes`` to ``2 * nbytes`` (or a new one), now held; None when none is."""
        a = self.arena
        sent, freed = a.sent[self.worker], a.freed[self.worker]
        with self._lock:
            for b, size in enumerate(self.sizes):
                if not self.held[b] and nbytes <= size <= 2 * nbytes and sent[b] == freed[b]:
                    self.held[b] = True
                    self.reused += 1
                    return b
            if len(self.starts) >= a.blocks or self.end + nbytes > self.base + a.region:
                return None
            self.starts.append(self.end)
            self.sizes.append(-(-nbytes // 4096) * 4096)
            self.held.append(True)
            self.end += self.sizes[-1]
            self.made += 1
            return len(self.starts) - 1

    def _let_go(self, b: int) -> None:
        self.held[b] = False  # a plain store: the next _take reads it under the lock

    def where(self, arr: np.ndarray):
        """``(block, offset in the arena)`` of the array ``arr`` when it lies in a block of this
        worker's part, else None."""
        p = arr.__array_interface__["data"][0] - self.arena.addr
        if not self.base <= p < self.end:
            return None
        b = bisect.bisect_right(self.starts, p) - 1
        return b, p


def install(arena: Arena | None, worker: int) -> None:
    """In DataLoader worker ``worker``: its decoded outputs from now on in its part of ``arena``
    (:data:`lirs.memory.OUTPUTS`); None: nothing changes. Once a process."""
    from . import memory

    if arena is None or arena.outputs is not None or not 0 <= int(worker) < arena.workers:
        return  # (a worker the arena has no part for: a dataset reused by more workers copies)
    arena.outputs = ArenaOutputs(arena, worker, memory.RECYCLER)
    memory.OUTPUTS = arena.outputs
