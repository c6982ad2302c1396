"""What a plan hands the engines and the loader: read steps and batches (plain data, no I/O)."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(eq=False)
class ReadStep:
    """One engine call: aligned extents and the records they hold, in delivery order.

    ``ids`` int64 (k,) records (the rows of the decoded step); ``ext_file`` int32 (e,),
    ``ext_offset``/``ext_nbytes`` int64 (e,) (multiples of the block); per record ``rec_extent``
    int32 (k,), ``rec_pos`` int64 (k,) (offset inside its extent), ``rec_len`` int64 (k,).

    ``fill``: planned with deferred extents (``EpochPlan.step(..., extents="defer")``), a function
    that sets them, called by :meth:`ready` on the thread that reads the step; the extent and
    record fields are None until then.
    """

    number: int
    ids: np.ndarray
    ext_file: np.ndarray
    ext_offset: np.ndarray
    ext_nbytes: np.ndarray
    rec_extent: np.ndarray
    rec_pos: np.ndarray
    rec_len: np.ndarray
    fill: object = None

    def ready(self) -> "ReadStep":
        """This step with its extents set (computed now if they were deferred)."""
        fill, self.fill = self.fill, None
        if fill is not None:
            fill(self)
        return self

    @property
    def reads(self) -> int:
        return int(len(self.ext_nbytes))

    @property
    def bytes_read(self) -> int:
        return int(self.ext_nbytes.sum())

    @property
    def payload_bytes(self) -> int:
        return int(self.rec_len.sum())

    def extents_within(self, file_ends: np.ndarray) -> np.ndarray:
        """int64 (e,): the bytes each extent covers in its file, ``file_ends`` int64 (nfiles,) being
        where each file ends: an aligned extent runs on to a multiple of the block past the end of
        its file, and a read stops there (the Loader counts what the reads return)."""
        ends = np.asarray(file_ends, np.int64)[self.ext_file]
        return np.clip(ends - self.ext_offset, 0, self.ext_nbytes).astype(np.int64)


def file_ends(index) -> np.ndarray:
    """int64 (nfiles,): where each data file of ``index`` ends, its size when indexed (from its
    fingerprint), else the end of its last record (an index made from arrays has no fingerprints)."""
    ends = np.asarray(index.data_ends, np.int64).copy()
    for f, fp in enumerate(index.fingerprints[:len(ends)]):
        if isinstance(fp, dict) and fp.get("size") is not None:
            ends[f] = max(int(ends[f]), int(fp["size"]))
    return ends


class Part(NamedTuple):
    """Rows ``lo:hi`` of read step ``step`` that a batch takes; ``last``: no later batch needs
    that step (it can be let go once this batch has its rows)."""

    step: ReadStep
    lo: int
    hi: int
    last: bool


@dataclass(eq=False)
class BatchPlan:
    """Batch ``index`` of a rank's epoch: ``ids`` int64 (k,) in delivery order, and ``parts``: the
    :class:`Part` of each read step it takes rows from, in delivery order. A batch may be a step of
    its own, a slice of a step it shares with its neighbours, or rows of one or more windows (see
    :mod:`lirs.walker`). ``piece``: None for a whole batch; for the rows a walk over some windows
    only takes of it (``walk(..., windows=)``), ``(first window, records of the whole batch)``: the
    pieces of batch ``index``, put in the order of their first windows, are the whole batch."""

    index: int
    ids: np.ndarray
    parts: tuple = ()
    piece: tuple | None = None  # (first window, records of the whole batch) for a piece of it

    @property
    def new_steps(self) -> list:
        """Steps this batch is the first to use (what reading it costs)."""
        return [p.step for p in self.parts if p.lo == 0]

    # conveniences for a batch that takes rows of one step
    def _one(self) -> ReadStep:
        if len(self.parts) != 1:
            raise AttributeError("this batch spans several read steps; use .parts")
        return self.parts[0].step

    @property
    def ext_file(self):
        return self._one().ext_file

    @property
    def ext_offset(self):
        return self._one().ext_offset

    @property
    def ext_nbytes(self):
        return self._one().ext_nbytes

    def __len__(self) -> int:
        return len(self.ids)


class SharedStep(NamedTuple):
    """Consecutive batches of a walk that take rows of one read step only, planned and handed out
    as one (``walk(..., units=True)``): a group step's batches, or some of a window's. The
    consumer waits for ``step`` once and then takes each batch's rows, instead of handling a batch
    at a time. ``plans``: the :class:`BatchPlan` of each of its batches, in walk order, each one
    :class:`Part` of ``step``, back to back."""

    step: ReadStep
    plans: tuple

    @property
    def parts(self) -> tuple:
        """What the batches take together: the step's rows from the first one's to the last
        one's, and whether a later batch still needs the step (all of a group step, which none
        after them needs)."""
        first, last = self.plans[0].parts[0], self.plans[-1].parts[0]
        return (Part(self.step, first.lo, last.hi, last.last),)

    @property
    def index(self) -> int:
        """The number of its first batch: where an error reading its step belongs."""
        return self.plans[0].index


class Flight(NamedTuple):
    """A part of a submitted batch: the future of its read step's decoded (X, y) and the rows
    ``lo:hi`` the batch takes; ``last``: no later batch needs that step; ``step``: the
    :class:`~lirs.steps.ReadStep` (None for rows already copied out of their step)."""

    future: Future
    lo: int
    hi: int
    last: bool
    step: object


@dataclass(eq=False)
class Pending:
    """A batch handed to the pool (or a :class:`~lirs.steps.SharedStep`'s batches): its plan, the
    :class:`Flight` of each of its parts, and with a finish function (the Loader's transform)
    ``head``, the future of the finished batch (queued once the batch is near the consumer, see
    :meth:`lirs.pipeline.EpochRun._finish_ahead`)."""

    plan: BatchPlan
    parts: list
    finishing: bool = False
    head: Future | None = None

    def waits(self) -> list:
        """The futures the consumer waits on: the finished batch, or every part's step."""
        return [self.head] if self.finishing else [f.future for f in self.parts]
