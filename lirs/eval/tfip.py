"""TFIP, the TensorFlow input pipeline of the LIRS paper (its Section 3.2), as a baseline that
really reads a file: one full exact shuffle of the training file before training (the
pre-processing TFIP needs, timed), then every epoch the shuffled copy read in file order through
a shuffle buffer of ``buffer_records`` records (10,000 in the paper, tf.data ``shuffle()``).

    pre_shuffle(path, out, *, seed, memory, tmpdir) -> dict       the timed pre-processing
    BufferStream(index, batch_size, ...)                          a file in order through a buffer
        .order(epoch) -> int64 (n,)   .epoch(epoch) -> (pos, X, y) batches   .wait_s  .close()
    TFIP(path, out, batch_size, ...)                              pre_shuffle + BufferStream
        .prepare() -> dict   .order(epoch)   .epoch(epoch)   .pre_s   .close()

A :class:`BufferStream` on the file as stored is the "buffer only" method (what a
``tf.data`` pipeline without the pre-shuffle does). The pre-processing is lirs's own exact
two-pass external shuffle (:func:`lirs.external.shuffle`): the fastest exact shuffle lirs has, so
TFIP is not made to look slow by a weak pre-processing step.

The buffer's order comes from :func:`lirs.eval.reference.shuffle_buffer_order` and the reads from
:mod:`lirs.eval.spans` (runs of ``batch_size`` records, one aligned direct read each, read ahead on
threads), the same code the BMF and shuffle-buffer baselines of :mod:`lirs.eval.compare` use.
"""
from __future__ import annotations

import os
import time

import numpy as np

from ..errors import UsageError
from ..external import shuffle as external_shuffle
from ..inputs import labels_path
from .reference import buffer_batches, shuffle_buffer_order
from .spans import Ahead, Records, SpanReader, run_ranges

TFIP_BUFFER_RECORDS = 10_000  # the paper's random shuffle queue (its Section 5.1)


def pre_shuffle(path: str, out: str, *, seed: int = 0, memory="512M", tmpdir: str | None = None) -> dict:
    """TFIP's pre-processing: an exact uniform shuffle of ``path`` written to ``out`` (labels of an
    ``.npy`` follow their rows), with lirs's two-pass external shuffle under ``memory``.

    Returns the shuffle's stats plus ``pre_s`` (wall seconds, sidecar of ``out`` not included),
    ``bytes_read`` and ``bytes_written`` (both passes: the input and the piles are read once, the
    piles and the output written once).
    """
    t = time.perf_counter()
    st = external_shuffle(path, out, seed=seed, memory=memory, tmpdir=tmpdir, progress=False)
    st = dict(st)
    st["pre_s"] = time.perf_counter() - t
    # pass 1 reads the input and writes the piles; pass 2 reads the piles and writes the output
    st["bytes_read"] = 2 * int(st["bytes"])
    st["bytes_written"] = int(st["bytes"]) + int(st["output_bytes"])
    return st


class BufferStream:
    """A single-file data set read in file order, in runs of ``batch_size`` records (one aligned
    direct read each, ``prefetch`` runs ahead on threads), through a shuffle buffer of
    ``buffer_records`` records.

    :meth:`epoch` yields ``(pos int64 (k,), X, y float64 (k,))``: ``pos`` are positions in this
    file (for a pre-shuffled copy they are not the original record IDs), ``X`` a CSR matrix
    (LIBSVM, ``dtype``) or an ndarray (fixed records, shape ``(k, *record_shape)``), ``y`` the
    labels (LIBSVM: parsed; ``.npy``: from its labels file; None when the file has none).
    ``wait_s``: seconds the consumer waited for reads in the last epoch; ``bytes_read``: bytes
    read so far.
    """

    def __init__(self, index, batch_size: int, *, buffer_records: int = TFIP_BUFFER_RECORDS, seed: int = 0,
                 engine: str = "auto", prefetch: int = 4, dtype=np.float32):
        if index.nfiles != 1:
            raise UsageError(f"a shuffle buffer reads one file; this index has {index.nfiles} files")
        if batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {batch_size}")
        if buffer_records < 1:
            raise UsageError(f"buffer_records must be >= 1, got {buffer_records}")
        self.index = index
        self.n = int(index.n)
        self.batch_size = int(batch_size)
        self.buffer_records = int(buffer_records)
        self.seed = int(seed)
        self.prefetch = max(1, int(prefetch))
        self.wait_s = 0.0
        self._labels = index.labels if index.format != "libsvm" else None
        self._rd = SpanReader(Records(index, dtype=dtype), engine)

    @property
    def bytes_read(self) -> int:
        return self._rd.bytes_read

    @property
    def memory_bytes(self) -> int:
        """Bytes the buffer and the runs in flight hold (raw record bytes, mean record size)."""
        mean = self.index.payload_bytes / max(self.n, 1)
        return int((self.buffer_records + (self.prefetch + 1) * self.batch_size) * mean)

    def order(self, epoch: int) -> np.ndarray:
        """int64 (n,): the positions of this file in the order ``epoch`` delivers them."""
        return shuffle_buffer_order(self.n, self.buffer_records, seed=self.seed, epoch=epoch)

    def epoch(self, epoch: int):
        """The batches of ``epoch``: ``(pos, X, y)``, every position exactly once."""
        B = self.batch_size
        self.wait_s = 0.0
        # as many reading/decoding threads as the lirs Loader's pool, so both decode alike
        src = Ahead((lambda a=a, b=b: self._read(a, b) for a, b in run_ranges(self.n, B)), max(2, self.prefetch),
                    self.prefetch)
        gen = buffer_batches(iter(src), self.order(epoch), B, B)
        try:
            yield from gen
        finally:
            gen.close()
            self.wait_s = src.wait_s

    def _read(self, a: int, b: int):
        X, y = self._rd.read(a, b)
        if y is None and self._labels is not None:
            y = self._labels[a:b]
        return X, y

    def close(self) -> None:
        self._rd.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TFIP:
    """TFIP on the file ``path``: :meth:`prepare` shuffles it exactly into ``out`` (timed, the
    pre-processing) and indexes the copy; every :meth:`epoch` then reads ``out`` through a
    :class:`BufferStream` of ``buffer_records``. Batches carry positions in ``out``, not the
    record IDs of ``path`` (the external shuffle does not keep its permutation).

    ``memory`` caps the external shuffle (a file larger than it takes the two-pass route, as a
    data set larger than RAM would); ``tmpdir`` holds its piles (default: next to ``out``).
    """

    def __init__(self, path: str, out: str, batch_size: int, *, buffer_records: int = TFIP_BUFFER_RECORDS,
                 seed: int = 0, memory="512M", tmpdir: str | None = None, engine: str = "auto", prefetch: int = 4):
        if os.path.abspath(path) == os.path.abspath(out):
            raise UsageError(f"TFIP writes a shuffled copy; {out} is its own input {path}")
        self.path, self.out = path, out
        self.batch_size, self.buffer_records = batch_size, buffer_records
        self.seed, self.memory, self.tmpdir = seed, memory, tmpdir
        self.engine, self.prefetch = engine, prefetch
        self.stream: BufferStream | None = None
        self.stats: dict | None = None
        self.pre_s = 0.0

    def prepare(self) -> dict:
        """The pre-processing: exact shuffle into ``out``, then its index (both timed in ``pre_s``;
        ``stats["index_s"]`` is the index part). Returns the stats."""
        from .. import build_index

        st = pre_shuffle(self.path, self.out, seed=self.seed, memory=self.memory, tmpdir=self.tmpdir)
        t = time.perf_counter()
        index = build_index(self.out)
        st["index_s"] = time.perf_counter() - t
        self.pre_s = st["pre_s"] + st["index_s"]
        st["pre_s"] = self.pre_s
        self.stats = st
        self.stream = BufferStream(index, self.batch_size, buffer_records=self.buffer_records, seed=self.seed,
                                   engine=self.engine, prefetch=self.prefetch)
        return st

    def _ready(self) -> BufferStream:
        if self.stream is None:
            raise UsageError("TFIP.prepare() must run before its epochs (it writes the shuffled copy)")
        return self.stream

    def order(self, epoch: int) -> np.ndarray:
        """int64 (n,): positions of the shuffled copy in the order ``epoch`` delivers them."""
        return self._ready().order(epoch)

    def epoch(self, epoch: int):
        """The batches ``(pos, X, y)`` of ``epoch`` (see :class:`BufferStream`)."""
        return self._ready().epoch(epoch)

    @property
    def wait_s(self) -> float:
        return self._ready().wait_s

    def close(self, remove: bool = False) -> None:
        """Close the reader; ``remove``: also delete the shuffled copy (and its labels, sidecar)."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if remove:
            from .. import sidecar_path

            for p in (self.out, labels_path(self.out), sidecar_path(self.out)):
                if os.path.exists(p):
                    os.unlink(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
