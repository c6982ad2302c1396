"""Counts of read sizes: the sum, mean and exact median of an epoch's reads without a list of them.

:meth:`lirs.plan.EpochPlan.stats` (``lirs order``, ``lirs plan``) walks every read of an epoch; it
kept each read's size to take the median, 8 B a read and the same again to concatenate them, so
an instance epoch of a billion records held ~24 GB to print one number. A read's size takes few
values (extents are whole blocks where reads are aligned, a record's bytes where not), so the
distinct sizes and how many reads had each are kept instead, compacted as they come.
"""
from __future__ import annotations

import numpy as np

#: Sizes taken in before they are merged into the counts (int64: 8 MiB of them).
PENDING_MAX = 1 << 20


class SizeCounts:
    """Distinct int64 sizes and how many times each was added; :meth:`add` arrays of sizes."""

    def __init__(self):
        self.values = np.empty(0, np.int64)  # sorted, distinct
        self.counts = np.empty(0, np.int64)
        self._pending: list = []
        self._pending_n = 0
        self.total = 0  # the sum of every size added
        self.n = 0  # how many sizes were added

    def add(self, sizes: np.ndarray) -> None:
        """Count the int sizes of ``sizes`` (any shape)."""
        sizes = np.asarray(sizes, np.int64).reshape(-1)
        self.total += int(sizes.sum())
        self.n += len(sizes)
        self._pending.append(sizes)
        self._pending_n += len(sizes)
        if self._pending_n >= max(PENDING_MAX, len(self.values)):
            self._merge()

    def _merge(self) -> None:
        if not self._pending:
            return
        pending = np.concatenate(self._pending)
        self._pending, self._pending_n = [], 0
        values, inverse = np.unique(np.concatenate([self.values, pending]), return_inverse=True)
        weights = np.concatenate([self.counts, np.ones(len(pending), np.int64)])
        self.values, self.counts = values, np.bincount(inverse, weights, len(values)).astype(np.int64)

    def mean(self) -> float | None:
        """The mean size (None when nothing was added)."""
        return self.total / self.n if self.n else None

    def median(self) -> float | None:
        """The median size, as ``np.median`` of every size added gives it (None when nothing was)."""
        if not self.n:
            return None
        self._merge()
        ends = np.cumsum(self.counts)

        def at(k: int) -> int:  # the k-th smallest size added, from 0
            return int(self.values[np.searchsorted(ends, k, side="right")])

        lo, hi = at((self.n - 1) // 2), at(self.n // 2)
        return (lo + hi) / 2
