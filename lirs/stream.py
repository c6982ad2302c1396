"""An epoch's unit stream: units in their random order, each unit's records in unit order.

The planner's *global order* of an epoch is this stream read front to back; every granularity
cuts its batches from it (see :mod:`lirs.walker`). A position in the stream is a record count
from its start; a place in it is ``(unit position, record within that unit)``. Nothing here
reads data: units are positions of a :class:`~lirs.permutation.Permutation`, and the records of
unit ``u`` are ``ufirst[u] .. ufirst[u + 1] - 1`` (``ufirst`` None: every record is a unit).
"""
from __future__ import annotations

import numpy as np

from .kernels import plan as K
from .kernels import steps as KS

_NO_TABLE, _NO_KEYS, _NO_UFIRST = np.empty(0, np.uint8), np.empty(0, np.uint64), np.empty(0, np.int64)
_NO_COUNTERS = np.empty(0, np.uint64)


class UnitStream:
    """The records of an epoch in stream order, located and taken without building the rest.

    ``perm``: the epoch's :class:`~lirs.permutation.Permutation` of units; ``ufirst``: int64
    (units + 1,) first record of every unit then ``n``, or None; ``n``: records.
    """

    def __init__(self, perm, ufirst: np.ndarray | None, n: int):
        self.perm, self.ufirst, self.n = perm, ufirst, int(n)
        self._kargs = None

    @property
    def units(self) -> int:
        return int(self.perm.n)

    def _per_unit(self) -> float:
        return max(1.0, self.n / max(1, self.perm.n))

    def locate(self, pos: int) -> tuple[int, int]:
        """(unit position, record within that unit) of stream position ``pos``."""
        if self.ufirst is None:
            return int(pos), 0
        rem = int(pos)
        for p, units in self.perm.chunks(0):
            i, rem = K.locate(units, self.ufirst, rem)
            if i < len(units):
                return p + int(i), int(rem)
        return self.perm.n, 0

    def advance(self, upos: int, within: int, d: int) -> tuple[int, int]:
        """(unit position, record within) ``d`` records after ``(upos, within)``, without building
        their IDs (cost: the units passed)."""
        if self.ufirst is None:
            return upos + int(d), 0
        rem = within + int(d)
        m = int(d / self._per_unit()) + 4
        while upos < self.perm.n:
            units = self.perm.take(upos, upos + m)
            i, rem = K.locate(units, self.ufirst, rem)
            if i < len(units):
                return upos + int(i), int(rem)
            upos += len(units)
            m *= 2
        return self.perm.n, 0

    def records(self, upos: int, within: int, k: int) -> tuple[np.ndarray, int, int]:
        """``(ids, upos, within)``: int64 (k,) the next k records of the stream from ``(upos,
        within)``, and the place after them."""
        if self.ufirst is None:
            # a stateless permutation's units are a new int64 array: taken as they are (copying them
            # again let the planning thread's GIL go once a batch); a table's are cast, a new array too
            ids = np.asarray(self.perm.take(upos, upos + k), np.int64)
            if len(ids) != k:
                raise RuntimeError("unit stream ended early (asked past its end)")
            return (ids.copy() if ids.base is not None else ids), upos + k, 0
        out = np.empty(k, np.int64)
        o = 0
        per_unit = self._per_unit()
        while o < k:
            units = self.perm.take(upos, upos + int((k - o) / per_unit) + 4)
            if len(units) == 0:
                raise RuntimeError("unit stream ended early (inconsistent unit table)")
            i, within, o = K.fill_records(units, self.ufirst, 0, within, out, o)
            upos += int(i)
        return out, upos, within

    def kernel_args(self) -> tuple:
        """``(table, width, fkeys, half, units, ufirst)``: the stream as the planning kernels take it
        (:func:`lirs.kernels.steps.span_records`): a table's units as bytes (uint8) and their width,
        or a bijection's round keys and half width; an empty ``ufirst`` where every record is a unit."""
        if self._kargs is None:
            t = self.perm.table
            perm = (t.view(np.uint8), t.itemsize, _NO_KEYS, 0) if t is not None else \
                (_NO_TABLE, 0, self.perm.keys, self.perm.half)
            self._kargs = (*perm, self.perm.n, _NO_UFIRST if self.ufirst is None else self.ufirst)
        return self._kargs

    def count(self, lo: int, hi: int) -> int:
        """Records held by the units at positions ``[lo, hi)``."""
        units = self.perm.take(lo, hi)
        if self.ufirst is None:
            return len(units)
        u = np.asarray(units).astype(np.int64)
        return int((self.ufirst[u + 1] - self.ufirst[u]).sum())

    def unit_records(self, lo: int, hi: int) -> np.ndarray:
        """int64 (m,): the records of the units at positions ``[lo, hi)``, in stream order."""
        units = self.perm.take(lo, hi)
        if self.ufirst is None:
            return np.asarray(units, np.int64).copy()
        ids = np.empty(self.count(lo, hi), np.int64)
        K.fill_records(units, self.ufirst, 0, 0, ids, 0)
        return ids


class Cursor:
    """A forward-moving place in a :class:`UnitStream`: the last position sought and its place, so
    that walking consecutive positions never locates from the start again."""

    def __init__(self, stream: UnitStream):
        self.stream = stream
        self.pos: int | None = None
        self.upos = self.within = 0

    def seek(self, pos: int) -> tuple[int, int]:
        """(unit position, record within) of stream position ``pos``."""
        s = self.stream
        if self.pos is None or pos < self.pos:
            self.upos, self.within = s.locate(pos)
        elif pos > self.pos:
            self.upos, self.within = s.advance(self.upos, self.within, pos - self.pos)
        self.pos = int(pos)
        return self.upos, self.within

    def take(self, lo: int, hi: int) -> np.ndarray:
        """int64 (hi - lo,): the records at stream positions ``[lo, hi)``; the cursor moves to ``hi``."""
        ids, upos, within = self.stream.records(*self.seek(int(lo)), int(hi - lo))
        self.pos, self.upos, self.within = int(hi), upos, within
        return ids


class Span:
    """The ``k`` records of a :class:`UnitStream` from a cursor's place on, not taken yet: the
    planning kernel that plans their read step takes them (:func:`lirs.kernels.steps.span_step`),
    so that a step of consecutive batches is planned in one kernel call. ``deal``: ``(cuts, key,
    counters)``, each batch ``cuts[i]:cuts[i + 1]`` dealt from its stream counter (None: not dealt).

    ``ids`` int64 (k,) and ``order`` int64 (k,) (None without a deal) are filled by the kernel;
    ``args`` are its first arguments; :meth:`done` (or :meth:`take`) then moves the cursor past them.
    """

    __slots__ = ("cursor", "hi", "ids", "order", "args")

    def __init__(self, cursor: Cursor, lo: int, k: int, deal: tuple | None):
        place = cursor.seek(int(lo))
        self.cursor, self.hi = cursor, int(lo) + int(k)
        self.ids = np.empty(k, np.int64)
        self.order = None if deal is None else np.empty(k, np.int64)
        cuts, key, counters = deal if deal is not None else (_NO_UFIRST, 0, _NO_COUNTERS)
        self.args = (*cursor.stream.kernel_args(), *place, self.ids, cuts, np.uint64(key), counters,
                     _NO_UFIRST if self.order is None else self.order)

    def done(self, upos: int, within: int, filled: int) -> None:
        """The kernel's place after the records and how many it filled: the cursor moves there."""
        if filled < len(self.ids):
            raise RuntimeError("unit stream ended early (asked past its end)")
        c = self.cursor
        c.pos, c.upos, c.within = self.hi, int(upos), int(within)

    def take(self) -> np.ndarray:
        """Take the records (and deal them) in a call of their own; returns them in delivery order
        (int64 (k,)): for a step whose extents are not found in the same call."""
        dealt = _NO_UFIRST if self.order is None else np.empty(len(self.ids), np.int64)
        self.done(*KS.span_records(*self.args, dealt))
        return self.ids if self.order is None else dealt
