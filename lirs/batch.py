"""What the Loader delivers and counts: a :class:`Batch` of records and :class:`LoaderStats`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


class TorchBatch(NamedTuple):
    """A batch of the torch adapter (:mod:`lirs.torch`) with ``output="tuple"``: ``(X, y, ids)``,
    X a tensor (a list of ``bytes`` for lines and TFRecord data), y one or None (no labels), ids
    int64. A named tuple, which torch's ``default_convert`` and ``pin_memory`` keep (a plain
    tuple they make a list): a DataLoader's batch is of one type with or without workers."""

    X: Any
    y: Any
    ids: Any


@dataclass(repr=False)
class Batch:
    """One batch: ``ids`` int64 (k,) global record IDs in delivery order; ``X`` a
    ``scipy.sparse.csr_matrix`` (k, n_features) for LIBSVM, an ndarray (k, *record_shape) for
    npy/fixed, a list of k ``bytes`` for lines (each without its line end: docs/formats.md) and
    TFRecord payloads; ``y`` float64 (k,) or None; ``epoch`` and ``index`` (batch number within
    the epoch); ``piece``: None, or for the rows of some windows only of batch ``index``
    (``Loader.epoch(..., windows=)``) ``(first window, records of the whole batch)``.

    ``X`` and ``y`` may be views of the arrays their read step was decoded into (a window's, with
    ``granularity="window"``): a batch kept after the loop moves on keeps that whole step in memory
    (correct, never reused while held). Keep :meth:`copy` instead to hold only the batch's rows."""

    ids: np.ndarray
    X: Any
    y: np.ndarray | None
    epoch: int = 0
    index: int = 0
    piece: tuple | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def copy(self) -> Batch:
        """This batch with arrays of its own (a CSR ``X`` of its values, indices and offsets alone):
        keeping it holds its rows, not the read step they were decoded in."""
        import dataclasses

        from .decode import owned

        y = None if self.y is None else self.y.copy()
        return dataclasses.replace(self, ids=self.ids.copy(), X=owned(self.X), y=y)

    def __repr__(self) -> str:
        # a batch holds thousands of ids: say what it is, not every value
        X = self.X
        if hasattr(X, "nnz"):
            xs = f"{type(X).__name__}{X.shape}, nnz={X.nnz}"
        elif hasattr(X, "shape"):
            xs = f"{type(X).__name__}{tuple(X.shape)}, {X.dtype}"
        else:
            xs = f"{type(X).__name__} of {len(X)}"
        ys = "None" if self.y is None else f"{self.y.dtype} ({len(self.y)},)"
        piece = "" if self.piece is None else f", piece={self.piece}"
        return f"Batch(epoch={self.epoch}, index={self.index}{piece}, records={len(self.ids)}, X={xs}, y={ys})"


@dataclass
class LoaderStats:
    """Counters of a loader since it was made (or since :meth:`reset`).

    ``bytes_read``: bytes the engine read; ``payload_bytes``: bytes of the records its read steps
    decoded, the delivered records once an epoch is whole (a pass stopped early counts the rest of
    its steps' records; amplification = bytes_read / payload_bytes); ``reads``: extents read;
    ``records`` and ``batches`` delivered; ``wait_s``: time the consumer spent waiting for a batch's read steps;
    ``plan_s``: time it spent getting batch plans (planning them itself where the pool is small,
    else waiting for the planning thread: on many cores a planning thread slower than the pool
    shows here, not in ``wait_s``); ``planner_busy_s``/``planner_full_s``: the planning thread's time
    making plans, and waiting for room with its allowance of plans ready (where ``plan_s`` is high:
    busy near the epoch's time, the planner sets the rate; full, the consumer is not behind it);
    ``io_s``/``decode_s``: time spent in engine reads and decoding (summed over concurrent work).
    """

    bytes_read: int = 0
    payload_bytes: int = 0
    reads: int = 0
    records: int = 0
    batches: int = 0
    wait_s: float = 0.0
    plan_s: float = 0.0
    planner_busy_s: float = 0.0
    planner_full_s: float = 0.0
    io_s: float = 0.0
    decode_s: float = 0.0

    def reset(self) -> None:
        for k, v in LoaderStats().__dict__.items():
            setattr(self, k, v)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["amplification"] = self.bytes_read / self.payload_bytes if self.payload_bytes else None
        return d
