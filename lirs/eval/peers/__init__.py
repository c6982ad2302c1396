"""The loaders lirs is measured against by ``lirs bench``, on the same file, in the same run.

Each peer is a *runner*: ``prepare()`` does its one-off work (timed as pre-processing),
``epoch(e)`` yields ``(ids int64 (k,), X, y)`` batches of ``batch_size`` records, ``close()``
deletes what it wrote. Runners count ``payload`` (bytes of the records they delivered) and, where
they issue the reads themselves, ``reads`` and ``bytes_read``.

==============  =======================================================================================
inmemory        the whole file in RAM, then a fresh in-memory permutation every epoch: LIBSVM with
                sklearn ``load_svmlight_file``, ``.npy``/fixed with numpy; only when it fits in memory
                (about half of what is available). A load that would take much longer than the budget
                loads a prefix (``length=``) and is scaled up (``sample_fraction``).
torch           what a user writes by hand: a map-style dataset reading each record by offset with
                ``os.pread`` (page cache), ``RandomSampler``, ``DataLoader(num_workers=2)``, a collate
                that decodes the batch (LIBSVM to CSR with :func:`lirs.decode.decode_libsvm`).
memmap          ``np.load(mmap_mode="r")`` (or ``np.memmap``) and fancy-indexed gathers of a random
                permutation, for dense records.
shuffle_buffer  tf.data / DALI style: the file read in order (runs of about 4 MiB, one ``O_DIRECT``
                read each, decoded on two threads, prefetched) through a buffer of 10,000 records.
bmf             block minimization (LIBLINEAR cdblock): once, rewrite the file as ``bmf_blocks`` random
                blocks laid out back to back; every epoch read whole blocks (one direct read each) in a
                fresh block order and deal each block's records in a random order.
external        a two-pass external shuffle (:func:`lirs.external.shuffle`, when that module exists)
                done once, then its output read in order like ``shuffle_buffer`` without the buffer.
==============  =======================================================================================

Buffered peers (``inmemory``, ``torch``, ``memmap``) read through the page cache: the benchmark
evicts the data file's pages before each of their epochs (and before ``prepare``).
"""
from __future__ import annotations

from ...errors import UsageError
from .base import (BOUNDS, BUFFERED, CAVEATS, DESCRIPTIONS, PEERS, RUN_BYTES, SKLEARN_BYTES_PER_S,  # noqa: F401
                   Runner, inmemory_bytes, mem_available, skip_reason)
from .buffered import InMemory, Memmap, TorchLoader
from .sequential import BMF, External, ShuffleBuffer

RUNNERS = {"inmemory": InMemory, "torch": TorchLoader, "memmap": Memmap, "shuffle_buffer": ShuffleBuffer,
           "bmf": BMF, "external": External}


def make_runner(name: str, index, **kw) -> Runner:
    """The runner of peer ``name`` (see :data:`PEERS`); keyword arguments as :class:`Runner`."""
    if name not in RUNNERS:
        raise UsageError(f"unknown peer {name!r}; expected some of {', '.join(PEERS)}")
    return RUNNERS[name](index, **kw)
