"""Plans over position ranges: every ``stride``-th batch of a rank, and the rest of an epoch.

An epoch's *global order* is the stream of records the planner draws for seed and epoch (units
in a random order, their records in unit order); a rank's batches are cut from its slice of that
stream. Two things need to walk only part of it without reading the rest:

* **DataLoader workers**: worker ``w`` of ``W`` delivers batches ``s + w, s + w + W, ...`` of its
  rank, exactly the batches the rank's :class:`~lirs.loader.Loader` gives, so that the DataLoader's
  round robin over workers hands them out in the Loader's order whatever ``W`` is.
* **Elastic resume**: a state saved with ``W1`` ranks says how many batches each rank consumed; the
  consumed records of each rank are a prefix of its slice. The rest of the epoch is a sorted list
  of position ranges (*spans*) of the global order, and a plan over those spans splits them over
  ``W2`` ranks by the usual rule (contiguous slices, equal batch counts).

Spans are int64 arrays (m, 2) of half-open ``[lo, hi)`` positions, sorted and disjoint. Batches
are the same functions of positions as in a whole-epoch plan (a page/group batch shuffles its
records with the key of its first position), so a walk over spans or with a stride gives the
very batches of the plain walk. A window batch here takes only the rows of each window it needs;
with ``stride == 1`` a window's rows are read once for all the batches that use them, with a
stride each batch reads its own rows (workers of one rank may then read parts of one window).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .errors import UsageError
from .kernels import plan as K
from .steps import BatchPlan
from .windows import records_of, window_bounds, window_of, window_step


# --------------------------------------------------------------------------- span arithmetic


def rank_slice(n: int, batch_size: int, rank: int, world_size: int, drop_last: bool) -> tuple[int, int, int]:
    """(num_batches, first, size): batches per rank and this rank's slice of the record stream."""
    n, B, W, r = int(n), int(batch_size), int(world_size), int(rank)
    if drop_last:
        nb = n // (W * B)
        return nb, r * nb * B, nb * B
    if n == 0:
        return 0, 0, 0
    nb = -(-n // (W * B))
    rest = n - (nb - 1) * W * B
    q, extra = divmod(rest, W)
    last = q + (1 if r < extra else 0)
    first = r * (nb - 1) * B + r * q + min(r, extra)
    return nb, first, (nb - 1) * B + last


def as_spans(spans, n: int) -> np.ndarray:
    """Validated int64 (m, 2) spans inside ``[0, n)``: sorted, disjoint, non-empty ranges."""
    a = np.asarray(spans, np.int64).reshape(-1, 2)
    if len(a) and (a[:, 0].min() < 0 or a[:, 1].max() > n or (a[:, 1] <= a[:, 0]).any()
                   or (a[1:, 0] < a[:-1, 1]).any()):
        raise UsageError(f"spans must be sorted, disjoint, non-empty ranges inside [0, {n}), got {a.tolist()}")
    return a


def spans_total(spans: np.ndarray) -> int:
    """Records covered by ``spans``."""
    return int((spans[:, 1] - spans[:, 0]).sum()) if len(spans) else 0


def cut(spans: np.ndarray, a: int, b: int) -> np.ndarray:
    """The global spans of positions ``[a, b)`` of the concatenation of ``spans``: int64 (k, 2)."""
    if b <= a or not len(spans):
        return np.empty((0, 2), np.int64)
    lens = spans[:, 1] - spans[:, 0]
    ends = np.cumsum(lens)
    starts = ends - lens
    i0 = int(np.searchsorted(ends, a, side="right"))
    i1 = int(np.searchsorted(starts, b, side="left"))
    out = spans[i0:i1].copy()
    out[0, 0] += a - starts[i0]
    out[-1, 1] -= ends[i1 - 1] - b
    return out


def merge(pieces: list) -> np.ndarray:
    """Sorted union of disjoint spans, neighbours joined: int64 (m, 2)."""
    pieces = [p for p in pieces if len(p)]
    if not pieces:
        return np.empty((0, 2), np.int64)
    a = np.concatenate(pieces)
    a = a[np.argsort(a[:, 0], kind="stable")]
    out = [a[0].copy()]
    for lo, hi in a[1:]:
        if lo == out[-1][1]:
            out[-1][1] = hi
        else:
            out.append(np.array([lo, hi], np.int64))
    return np.array(out, np.int64).reshape(-1, 2)


def remainder(n: int, spans, batch_size: int, world_size: int, drop_last: bool, progress) -> np.ndarray:
    """What an epoch still has to deliver: global spans, int64 (m, 2).

    ``spans`` (None: the whole epoch) were split over ``world_size`` ranks of ``batch_size``
    (``drop_last`` as the plan had it); rank ``r`` consumed its first ``progress[r]`` batches. The
    result covers every record some rank still had to deliver, once; a ``drop_last`` tail that no
    rank was going to deliver stays out.
    """
    base = np.array([[0, n]], np.int64) if spans is None else as_spans(spans, n)
    if n == 0:
        base = np.empty((0, 2), np.int64)
    total = spans_total(base)
    if len(progress) != world_size:
        raise UsageError(f"need the progress of every one of {world_size} ranks, got {len(progress)}")
    left = []
    for r, done in enumerate(progress):
        nb, first, size = rank_slice(total, batch_size, r, world_size, drop_last)
        if not 0 <= int(done) <= nb:
            raise UsageError(f"rank {r} consumed {done} batches, outside [0, {nb}]")
        used = min(size, int(done) * int(batch_size))
        left.append(cut(base, first + used, first + size))
    return merge(left)


def over_spans(plan, spans):
    """``plan`` restricted to the positions ``spans`` (int64 (m, 2) sorted, disjoint ``[lo, hi)``
    ranges of its epoch's global order, or None: the whole epoch), split over the plan's ranks by
    the usual rule: a new :class:`~lirs.plan.EpochPlan`."""
    if spans is None:
        return plan
    spans = as_spans(spans, plan.n)
    nb, first, size = rank_slice(spans_total(spans), plan.batch_size, plan.rank, plan.world_size, plan.drop_last)
    return dataclasses.replace(plan, spans=spans, num_batches=nb, first=first, size=size, _stats=None)


# --------------------------------------------------------------------------- walking


class _Cursor:
    """A forward-only position in the unit stream: (global position, unit position, record in unit)."""

    def __init__(self, plan):
        self.plan = plan
        self.pos = None
        self.upos = self.within = 0

    def seek(self, pos: int) -> tuple[int, int]:
        """(unit position, record within) of global position ``pos`` (never behind the last seek)."""
        p = self.plan
        if self.pos is None or pos < self.pos:
            self.upos, self.within = p._locate(pos)
        elif pos > self.pos:
            self.upos, self.within = advance(p, self.upos, self.within, pos - self.pos)
        self.pos = int(pos)
        return self.upos, self.within


def advance(plan, upos: int, within: int, d: int) -> tuple[int, int]:
    """(unit position, record within) ``d`` records after ``(upos, within)``, without building
    their IDs (cost: the units passed)."""
    if plan.ufirst is None:
        return upos + d, 0
    rem = within + int(d)
    m = int(d / max(1.0, plan.n / max(1, plan.perm.n))) + 4
    while upos < plan.perm.n:
        units = plan.perm.take(upos, upos + m)
        i, rem = K.locate(units, plan.ufirst, rem)
        if i < len(units):
            return upos + int(i), int(rem)
        upos += len(units)
        m *= 2
    return plan.perm.n, 0


def rank_spans(plan) -> np.ndarray:
    """This rank's global spans, in delivery order: int64 (m, 2)."""
    if plan.spans is None:
        return np.array([[plan.first, plan.first + plan.size]], np.int64)
    return cut(plan.spans, plan.first, plan.first + plan.size)


def walk(plan, start: int, stride: int, extents: bool):
    """Yield the :class:`BatchPlan` of batches ``start, start + stride, ...`` of ``plan``."""
    if stride < 1:
        raise UsageError(f"stride must be >= 1, got {stride}")
    mine = rank_spans(plan)
    cursor = _Cursor(plan)
    windows = _Windows(plan, mine, stride == 1, extents) if plan.granularity == "window" else None
    shuffle = plan.granularity in ("page", "group")
    B = plan.batch_size
    for j in range(int(start), plan.num_batches, int(stride)):
        pieces = cut(mine, j * B, j * B + plan.batch_size_of(j))
        if windows is not None:
            yield windows.batch(j, pieces, cursor)
            continue
        ids = []
        for lo, hi in pieces:
            got, upos, within = plan._records(*cursor.seek(int(lo)), int(hi - lo))
            ids.append(got)
            cursor.pos, cursor.upos, cursor.within = int(hi), upos, within
        ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
        step = plan.step(j, ids, extents, int(pieces[0][0]) if shuffle and len(pieces) else -1)
        yield BatchPlan(j, step.ids, ((step, 0, len(ids), True),))


class _Windows:
    """Window batches over spans: each batch takes rows of the windows its positions fall in."""

    def __init__(self, plan, mine: np.ndarray, share: bool, extents: bool):
        self.plan, self.mine, self.share, self.extents = plan, mine, share, extents
        self.number = 0
        self.open = None  # (window, first row, end row, step): a shared step rows still use
        self.sizes: dict = {}

    def size(self, w: int) -> int:
        """Records of window ``w``."""
        if w not in self.sizes:
            p = self.plan
            units = p.perm.take(*window_bounds(p, w))
            if p.ufirst is None:
                self.sizes = {w: len(units)}
            else:
                self.sizes = {w: records_of(p.ufirst, units)}
        return self.sizes[w]

    def row_of(self, upos: int, within: int) -> tuple[int, int]:
        """(window, row in its stream) of the record at unit position ``upos``, record ``within``."""
        p = self.plan
        w = window_of(p, upos)
        lo = window_bounds(p, w)[0]
        if p.ufirst is None:
            return w, upos - lo
        before = p.perm.take(lo, upos)
        return w, records_of(p.ufirst, before) + within

    def batch(self, j: int, pieces: np.ndarray, cursor: _Cursor) -> BatchPlan:
        parts, ids = [], []
        for lo, hi in pieces:
            w, row = self.row_of(*cursor.seek(int(lo)))
            left = int(hi - lo)
            while left > 0:
                if row >= self.size(w):
                    w, row = w + 1, 0
                    continue
                take = min(left, self.size(w) - row)
                part = self._part(w, row, row + take, int(lo))
                parts.append(part)
                ids.append(part[0].ids[part[1]:part[2]])
                row += take
                left -= take
                lo += take
            cursor.seek(int(hi))
        ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
        return BatchPlan(j, ids, tuple(parts))

    def _part(self, w: int, a: int, b: int, pos: int):
        """(step, lo, hi, last) for rows a:b of window ``w`` (global position ``pos`` of row a)."""
        o = self.open
        if not (self.share and o is not None and o[0] == w and o[1] <= a and b <= o[2]):
            end = b
            if self.share:  # rows this rank takes from the window without a gap: read them once
                span_end = int(self.mine[np.searchsorted(self.mine[:, 1], pos, side="right"), 1])
                end = min(self.size(w), a + (span_end - pos))
            step = window_step(self.plan, self.number, w, a, end, self.extents)
            self.number += 1
            o = self.open = (w, a, end, step)
        return o[3], a - o[1], b - o[1], b == o[2]
