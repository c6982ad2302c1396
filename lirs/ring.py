"""The shared memory DataLoader workers' items cross to the main process in (:mod:`lirs.workers`).

A worker of :func:`lirs.torch.make_dataloader` packs each item (a bundle of its batches) into a
free slot of its part of a :class:`SlotRing`, made in the main process before the workers start,
and sends only the slot's number through torch's queue; the main process views the slot and
frees it once the last tensor viewing it is gone. This module sizes the ring (:func:`ring_for`:
slots of :func:`bundle_slot_bytes`, as many as :func:`lirs.policies.ring_slots` counts, within
:func:`ring_budget`) and holds it.
"""
from __future__ import annotations

import ctypes
import logging
import os
import weakref
from multiprocessing.context import get_spawning_popen

import numpy as np
import torch

from .constants import RING_MAX_BYTES
from .memory import shared_array, shared_block, shared_raw
from .policies import ring_slots

log = logging.getLogger("lirs.torch")

INBAND_BYTES = 4 << 20    # packed batches up to this size travel inside the pickle stream

SLOT_BYTES = 2 << 20  # a slot of a SlotRing: a kdd-like batch of 1024 records packs into ~300 KB
BUNDLE_BATCHES = 16   # batches of a worker per DataLoader item (see lirs.workers.Bundle)
BUNDLE_SLOT_BYTES = 8 << 20  # the largest slot of a ring of bundles: 16 kdd-like batches of 1024 records
BUNDLE_PACKED_PER_BYTE = 1.5  # packed tensor bytes per byte of LIBSVM text (values, indices, ids, y)


def bundle_slot_bytes(batch_size: int, index) -> int:
    """Bytes of a slot for bundles of ``BUNDLE_BATCHES`` batches of ``batch_size`` records of
    :class:`~lirs.index.Index` ``index`` (by its mean record size): between ``SLOT_BYTES`` and ``BUNDLE_SLOT_BYTES``, so that
    a ring of small records is not sized for kdd-like ones (a slot's pages stay resident once used). A bundle that would not fit is sent sooner (:class:`lirs.workers.Bundler`)."""
    record_bytes = index.payload_bytes / max(int(index.n), 1)
    want = BUNDLE_BATCHES * int(batch_size) * record_bytes * BUNDLE_PACKED_PER_BYTE
    return int(min(BUNDLE_SLOT_BYTES, max(SLOT_BYTES, -(-int(want) // 4096) * 4096)))


def ring_for(loader, epoch: int, workers: int, prefetch: int, bundle: int, by_window: bool) -> "SlotRing":
    """The :class:`SlotRing` of ``workers`` DataLoader workers of a dataset over ``loader`` (a
    :class:`lirs.Loader`; its plan of ``epoch`` sizes windows), ``prefetch`` items asked of each:
    slots for bundles of up to ``bundle`` batches (0: one batch an item), counted by
    :func:`lirs.policies.ring_slots` (``by_window``: each worker reads whole windows)."""
    slot_bytes = bundle_slot_bytes(loader.batch_size, loader.index) if bundle else SLOT_BYTES
    slots = ring_slots(loader.plan(epoch), workers, prefetch, slot_bytes, bundle or 1, by_window, ring_budget())
    return SlotRing(workers, slots, slot_bytes)


def ring_budget(shm: str = "/dev/shm") -> int:
    """The most bytes a ring may take: ``RING_MAX_BYTES``, and at most :func:`shm_budget`:
    multiprocessing puts shared memory in ``shm`` while it has room, else in a file of the
    temporary folder on disk (a container's 64 MiB /dev/shm), whose used slots would then be written out."""
    half = shm_budget(shm)
    return RING_MAX_BYTES if half is None else int(min(RING_MAX_BYTES, half))


def shm_budget(shm: str = "/dev/shm") -> int | None:
    """Half the free space of ``shm`` in bytes; None where it cannot be read (no such folder: not Linux)."""
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    return int(st.f_bavail * st.f_frsize // 2)


_RINGS = weakref.WeakValueDictionary()  # token -> SlotRing, in the process that made it (the DataLoader's)


def ring_of(token: str) -> "SlotRing":
    """The :class:`SlotRing` ``token`` of this process (the main process's, which views its slots)."""
    return _RINGS[token]


class SlotRing:
    """Shared memory the DataLoader workers pack their batches into: ``slots`` slots of
    ``slot_bytes`` for each of ``workers`` workers (:func:`lirs.memory.shared_block`, made in the
    main process before the workers start; a page comes in when a worker first packs into it), and
    an int32 busy flag per slot. A worker takes a free
    slot of its own, packs the batch there and sends only ``(slot, meta)``; the main process
    rebuilds the tensors as views of the slot and frees it when the last of them is gone (a
    finalizer on the view). No copy through the pickle stream and the pipe, each of which costs
    about what decoding the batch does. A batch that does not fit, or finds no free slot (the
    consumer still holds the batches of every slot), travels in the pickle stream as before."""

    def __init__(self, workers: int, slots: int, slot_bytes: int = SLOT_BYTES, token=None, raw=None, flags=None):
        self.workers, self.slots, self.slot_bytes = int(workers), int(slots), int(slot_bytes)
        n = self.workers * self.slots
        self.raw = shared_block(n * self.slot_bytes) if raw is None else raw
        self.flags = shared_raw(ctypes.c_int32, n) if flags is None else flags
        self.mem, self.busy = shared_array(self.raw)[:n * self.slot_bytes], np.frombuffer(self.flags, np.int32)
        self.token = token or os.urandom(8).hex()
        if raw is None:
            _RINGS[self.token] = self

    def __reduce__(self):
        if get_spawning_popen() is None:  # not a worker starting: a copy would share nothing
            return _no_ring, ()
        return SlotRing, (self.workers, self.slots, self.slot_bytes, self.token, self.raw, self.flags)

    def take(self, worker: int, nbytes: int):
        """A free slot of ``worker`` for ``nbytes``, now marked busy; None when none fits."""
        if nbytes > self.slot_bytes or not 0 <= worker < self.workers:
            return None
        for s in range(worker * self.slots, (worker + 1) * self.slots):
            if self.busy[s] == 0:
                self.busy[s] = 1
                return s
        return None

    def view(self, s: int, nbytes: int | None = None, free_when_gone: bool = False):
        """uint8 tensor over slot ``s``; ``free_when_gone``: the slot is freed once it is collected."""
        a = self.mem[s * self.slot_bytes:s * self.slot_bytes + (self.slot_bytes if nbytes is None else nbytes)]
        if free_when_gone:
            weakref.finalize(a, _free, self.busy, s)
        return torch.from_numpy(a)


def _free(busy, s):
    busy[s] = 0


def _no_ring():
    return None


def crossing(buf):
    """What of ``buf`` (a uint8 tensor an item packed) goes into the pickle stream: its bytes when
    small (``INBAND_BYTES``), else the tensor moved into a shared-memory segment; its bytes again
    where /dev/shm cannot take the segment. (torch's own move would fail in the queue's feeder
    thread, where the item is dropped and the main process waits for it for ever.)"""
    if buf.numel() <= INBAND_BYTES:
        return buf.numpy()
    try:
        buf.share_memory_()
    except RuntimeError as e:  # "unable to allocate shared memory ... No space left on device"
        log.warning("a DataLoader worker's batches cross in the pickle stream: no room in shared memory (%s)",
                    str(e).splitlines()[0][:200])
        return buf.numpy()
    return buf
