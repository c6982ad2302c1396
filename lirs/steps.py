"""What a plan hands the engines and the loader: read steps and batches (plain data, no I/O)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(eq=False)
class ReadStep:
    """One engine call: aligned extents and the records they hold, in delivery order.

    ``ids`` int64 (k,) records (the rows of the decoded step); ``ext_file`` int32 (e,),
    ``ext_offset``/``ext_nbytes`` int64 (e,) (multiples of the block); per record ``rec_extent``
    int32 (k,), ``rec_pos`` int64 (k,) (offset inside its extent), ``rec_len`` int64 (k,).
    """

    number: int
    ids: np.ndarray
    ext_file: np.ndarray
    ext_offset: np.ndarray
    ext_nbytes: np.ndarray
    rec_extent: np.ndarray
    rec_pos: np.ndarray
    rec_len: np.ndarray

    @property
    def reads(self) -> int:
        return int(len(self.ext_nbytes))

    @property
    def bytes_read(self) -> int:
        return int(self.ext_nbytes.sum())

    @property
    def payload_bytes(self) -> int:
        return int(self.rec_len.sum())


@dataclass(eq=False)
class BatchPlan:
    """Batch ``index`` of a rank's epoch: ``ids`` int64 (k,) in delivery order, and ``parts``:
    tuples ``(step, lo, hi, last)`` — rows ``lo:hi`` of read step ``step``, ``last`` when no later
    batch needs that step. For instance/page/group a batch is exactly one step of its own."""

    index: int
    ids: np.ndarray
    parts: tuple = ()

    @property
    def new_steps(self) -> list:
        """Steps this batch is the first to use (what reading it costs)."""
        return [s for s, lo, hi, last in self.parts if lo == 0]

    # one-step conveniences (instance, page, group)
    def _one(self) -> ReadStep:
        if len(self.parts) != 1:
            raise AttributeError("this batch spans several read steps; use .parts")
        return self.parts[0][0]

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
