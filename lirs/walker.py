"""The one walk over an epoch's batches, for every granularity, plain or over spans, with a stride.

A rank's batches are cut from its spans of the epoch's global order (:func:`lirs.ranges.rank_spans`:
one span for a plain plan, the pieces an elastic resume left otherwise): batch ``j`` holds the
positions ``[j * B, j * B + size_j)`` of their concatenation. The walk visits batches ``start,
start + stride, ...`` and asks a *step source*, chosen by the granularity's policy
(:data:`STEP_SOURCES` by :attr:`lirs.policies.Policy.steps`), which read step holds each batch's
records:

``batch``    a step per batch;
``batches``  a step per K batches of the walk (K from the policy; consecutive ones, or every
             stride-th), each batch a slice of it, dealt exactly as a step of its own would deal it;
``window``   the window steps a batch takes rows from: a window's rows are read once for every
             batch of the walk that takes them (with a stride, the walk's batches only: a
             DataLoader worker reads each window once for its batches, not once per batch).

Batches are the same functions of positions whatever the walk (a dealt batch shuffles its records
with the key of its first position), so a walk with a stride or over spans gives exactly the
batches of the plain walk.
"""
from __future__ import annotations

import numpy as np

from .constants import STEP_PIECE_RUNS
from .kernels.plan import batch_orders
from .errors import UsageError
from .policies import POLICIES
from .ranges import cut, rank_spans
from .stream import Cursor, Span
from .steps import BatchPlan, Part, SharedStep
from .windows import window_bounds, window_count, window_of, window_rows_step, window_step

_tuple_new = tuple.__new__


def walk(plan, start: int, stride: int, extents: bool | str, windows: tuple | None = None,
         units: bool = False):
    """Yield the :class:`~lirs.steps.BatchPlan` of batches ``start, start + stride, ...`` of ``plan``
    (``extents=False``: record IDs only, the steps carry no extents). ``windows=(w, W)`` (window
    steps, stride 1): only the rows of windows ``w, w + W, ...``: every batch that takes rows of
    them, cut to those rows (a piece of a batch whose other rows lie in other windows carries
    :attr:`~lirs.steps.BatchPlan.piece`); W such walks read each window once between them.
    ``units=True``: the batches of a step several batches share come together, as one
    :class:`~lirs.steps.SharedStep` (the same plans, in the same order)."""
    if stride < 1:
        raise UsageError(f"stride must be >= 1, got {stride}")
    pol = POLICIES[plan.granularity]
    if windows is not None and (not pol.uses_window or stride != 1):
        raise UsageError(f"windows= needs window steps and stride 1 (granularity {plan.granularity!r}, "
                         f"stride {stride})")
    mine = rank_spans(plan)
    source = STEP_SOURCES[pol.steps](plan, mine, int(stride), extents)
    if windows is not None:
        source.own(*windows)
    items = source.units(int(start)) if units else None
    if items is not None:
        yield from items
        return
    for j in range(int(start), plan.num_batches, int(stride)):
        bp = source.batch(j)
        if isinstance(bp, list):  # the pieces a walk over some windows takes of batch j
            yield from bp
        else:
            yield bp


def batch_pieces(plan, mine: np.ndarray, j: int) -> list:
    """The stream positions of batch ``j`` of ``plan`` (its rank's spans ``mine``): :func:`pieces_of`."""
    B = plan.batch_size
    return pieces_of(mine, j * B, j * B + plan.batch_size_of(j))


def pieces_of(mine: np.ndarray, a: int, b: int) -> list:
    """The stream positions of positions ``[a, b)`` of the concatenation of ``mine`` (int64 (m, 2)
    spans): a list of ``(lo, hi)`` int pairs. One span (a plain plan) is plain arithmetic: this runs
    once per batch on the consumer's thread, under the GIL."""
    if len(mine) == 1:
        s0 = int(mine[0, 0])
        return [(s0 + a, s0 + b)] if b > a else []
    return [tuple(p) for p in cut(mine, a, b).tolist()]


class BatchSteps:
    """Steps of whole batches: one per batch, or one per ``batches_per_step`` batches of the walk
    (consecutive ones, or with a stride every ``stride``-th: a DataLoader worker's)."""

    def __init__(self, plan, mine: np.ndarray, stride: int, extents: bool | str):
        self.plan, self.mine, self.extents, self.stride = plan, mine, extents, int(stride)
        pol = POLICIES[plan.granularity]
        self.deals = pol.deals_batch
        self.per = pol.batches_per_step(plan)
        self.cursor = Cursor(plan.stream)
        self.held: dict = {}  # batch -> its plan, a part of the shared step being handed out
        self.made = 0  # shared steps planned so far

    def _ids(self, pieces: list) -> np.ndarray:
        ids = [self.cursor.take(int(lo), int(hi)) for lo, hi in pieces]
        return ids[0] if len(ids) == 1 else (np.concatenate(ids) if ids else np.empty(0, np.int64))

    def batch(self, j: int) -> BatchPlan:
        """The :class:`BatchPlan` of batch ``j`` (the next one of the walk)."""
        if self.per == 1:
            pieces = batch_pieces(self.plan, self.mine, j)
            ids = self._ids(pieces)
            at = int(pieces[0][0]) if self.deals and len(pieces) else -1
            step = self.plan.step(j, ids, self.extents, at)
            return BatchPlan(j, step.ids, (Part(step, 0, len(ids), True),))
        # a shared step's batches are planned with it: one dict lookup a batch after that
        bp = self.held.pop(j, None)
        if bp is None:
            self.held = {b.index: b for b in self._share(j)}
            bp = self.held.pop(j)
        return bp

    def units(self, j: int):
        """An iterator of a :class:`~lirs.steps.SharedStep` for each step from batch ``j`` on (the
        walk's batches, in order): a consumer that takes a step's batches together does the
        per-batch work of planning, waiting and bookkeeping once a step. None where a step feeds
        one batch."""
        return self._units(j) if self.per > 1 else None

    def _units(self, j: int):
        while j < self.plan.num_batches:
            plans = self._share(j)
            yield SharedStep(plans[0].parts[0].step, plans)
            j = plans[-1].index + self.stride

    def _share(self, j0: int) -> tuple:
        """Plan one step for batches ``j0 ..`` (``per`` of them; the walk's first steps 1, 2, 4, ..:
        its first batch waits for one batch's read, not a whole step's): their records in unit
        order (runs), each batch then dealt in its own order. Returns the batches' plans."""
        p = self.plan
        per = min(self.per, 1 << min(self.made, 30))
        self.made += 1
        js = range(j0, p.num_batches, self.stride)[:per]
        if len(self.mine) == 1:  # a plain plan: each batch's records are one run of the stream
            return self._share_span(js)
        ids, orders, cuts = [], [], [0]
        for j in js:
            pieces = batch_pieces(p, self.mine, j)
            b_ids = self._ids(pieces)
            k = len(b_ids)
            ids.append(b_ids)
            if self.deals:
                orders.append(p.batch_order(k, int(pieces[0][0]) if len(pieces) else 0) + cuts[-1])
            cuts.append(cuts[-1] + k)
        order = np.concatenate(orders) if self.deals else None
        step = p.step(j0, ids[0] if len(ids) == 1 else np.concatenate(ids), self.extents, order=order,
                      piece_runs=STEP_PIECE_RUNS)
        return self._plans(step, js, cuts)

    def _share_span(self, js: range) -> tuple:
        """:meth:`_share` of a plan of one span: the batches' records taken in one piece (stride 1:
        by the kernel call that deals them and finds their extents, a :class:`~lirs.stream.Span`)
        or one piece a batch (a DataLoader worker's every stride-th), every batch's deal order
        drawn by one kernel call (the consumer's thread plans this under the GIL)."""
        p, B = self.plan, self.plan.batch_size
        s0, j0 = int(self.mine[0, 0]), js[0]
        # a dozen batches: Python ints cost less than numpy's small-array calls, each under the GIL
        firsts = [j * B for j in js]  # each batch's first position - s0
        cuts = [0]
        for f in firsts:
            cuts.append(cuts[-1] + min(B, p.size - f))  # the last batch may be short
        if js.step == 1 and cuts[-1]:
            # consecutive batches: their records taken in the kernel call that finds their extents
            deal = (np.array(cuts, np.int64), p.batch_key, np.array([s0 + f for f in firsts], np.uint64)) \
                if self.deals else None
            span = Span(self.cursor, s0 + j0 * B, cuts[-1], deal)
            step = p.step(j0, span.ids, self.extents, order=span.order, piece_runs=STEP_PIECE_RUNS, span=span)
            return self._plans(step, js, cuts)
        if js.step == 1:
            ids = self.cursor.take(s0 + j0 * B, s0 + j0 * B + cuts[-1])
        else:
            ids = np.concatenate([self.cursor.take(s0 + f, s0 + f + cuts[i + 1] - cuts[i])
                                  for i, f in enumerate(firsts)])
        order = dealt = None
        if self.deals:
            order, dealt = np.empty(len(ids), np.int64), np.empty(len(ids), np.int64)
            # a batch's stream counter is its first position; the records dealt in the same call
            batch_orders(order, np.array(cuts, np.int64), np.uint64(p.batch_key),
                         np.array([s0 + f for f in firsts], np.uint64), ids, dealt)
        step = p.step(j0, ids, self.extents, order=order, piece_runs=STEP_PIECE_RUNS, dealt=dealt)
        return self._plans(step, js, cuts)

    @staticmethod
    def _plans(step, js, cuts: list) -> tuple:
        """The plans of batches ``js``: rows ``cuts[i]:cuts[i + 1]`` of ``step``. A list, not a
        generator, and each Part made by tuple's own constructor (a NamedTuple's is a Python
        function): each Python call a batch costs the planning thread microseconds under the GIL."""
        last, ids = js[-1], step.ids
        return tuple([BatchPlan(j, ids[a:b], (_tuple_new(Part, (step, a, b, j == last)),))
                      for j, a, b in zip(js, cuts[:-1], cuts[1:])])


class WindowSteps:
    """Window steps: each batch takes rows of the windows its positions fall in."""

    def __init__(self, plan, mine: np.ndarray, stride: int, extents: bool | str):
        self.plan, self.mine, self.stride, self.extents = plan, mine, stride, extents
        self.share = stride == 1
        self.stream = plan.stream
        self.cursor = Cursor(plan.stream)
        self.number = 0
        self.open = None        # (window, first row, end row, step): a shared step rows still use
        self.sizes: dict = {}   # window -> records (the last one asked)
        self.at = None          # (position, window, row) where the last batch ended
        self.mod = self.me = None  # own(): only windows ``me, me + mod, ...``

    def own(self, me: int, mod: int) -> None:
        """Take only the rows of windows ``me, me + mod, ...`` (see :func:`walk`)."""
        if not 0 <= int(me) < int(mod):
            raise UsageError(f"windows=(w, W) needs 0 <= w < W, got ({me}, {mod})")
        self.me, self.mod = int(me), int(mod)

    def units(self, j: int):
        """An iterator of the walk's batches from batch ``j`` on, consecutive ones that take rows
        of one window step only (a window's batches but the one it ends in the next) grouped as a
        :class:`~lirs.steps.SharedStep` of at most ``batches_per_unit`` (the others, and pieces
        of batches, as they come): the consumer waits, plans and keeps its books once for them,
        as for a group step's. None for a strided walk (its steps are the walk's rows only)."""
        return self._units(j, POLICIES[self.plan.granularity].batches_per_unit(self.plan)) if self.share else None

    def _units(self, j: int, per: int):
        run: list = []  # plans of consecutive batches, each rows of the step of the first one
        n = self.plan.num_batches
        while j < n:
            if not run:
                run = self._inside(j, per)
                if run:
                    j += len(run)
                    if len(run) == per or run[-1].parts[0].last:
                        yield _unit(run)
                        run = []
                    continue
            got = self.batch(j)
            j += 1
            if type(got) is list and not got:
                j = self._skip(j)
            for bp in got if type(got) is list else (got,):
                parts = bp.parts
                if run and not (len(parts) == 1 and parts[0].step is run[0].parts[0].step):
                    yield _unit(run)
                    run = []
                if len(parts) != 1:
                    yield bp
                    continue
                run.append(bp)
                if parts[0].last or len(run) >= per:  # the step ends here, or the unit is full
                    yield _unit(run)
                    run = []
        if run:
            yield _unit(run)

    def _inside(self, j: int, per: int) -> list:
        """The plans of batches ``j, j + 1, ..`` (``per`` at most) whose rows come right after the
        last batch's inside the window step it opened, for a plan of one span: what :meth:`batch`
        plans for each (its short way), in one loop. Whole batches only (the epoch's last one,
        which may be short, is left to :meth:`batch`); empty where there are none."""
        o, at, p = self.open, self.at, self.plan
        if o is None or at is None or len(self.mine) != 1 or at[1] != o[0] or at[2] < o[1]:
            return []
        B = p.batch_size
        pos = int(self.mine[0, 0]) + j * B
        k = min(per, (o[2] - at[2]) // B, (p.size - j * B) // B - 1)
        if at[0] != pos or k <= 0:
            return []
        step, base, end, ids = o[3], o[1], o[2], o[3].ids
        plans = []
        for a in range(at[2], at[2] + k * B, B):
            part = _tuple_new(Part, (step, a - base, a + B - base, a + B == end))
            plans.append(BatchPlan(j, ids[part.lo:part.hi].copy(), (part,)))
            j += 1
        self.at = (pos + k * B, o[0], at[2] + k * B)
        return plans

    def _skip(self, j: int) -> int:
        """With :meth:`own`, after a batch wholly in another walk's window: the first batch from
        ``j`` on that may take rows of this walk's next window (``num_batches`` when none is left).
        The batches in between lie wholly in other walks' windows: :meth:`batch` would find each
        of them empty, with several hundred bytecodes a batch (each DataLoader worker walked every
        batch of the epoch). A plan of one span only; else ``j``."""
        at, mod = self.at, self.mod
        if mod is None or at is None or len(self.mine) != 1 or at[1] % mod == self.me:
            return j
        w = at[1] + (self.me - at[1]) % mod
        p = self.plan
        if w >= window_count(p):
            # none left; but the walk of window 0 delivers the batches of no rows (see batch())
            return p.num_batches if self.me else max(j, min(p.num_batches, -(-p.size // p.batch_size)))
        # the stream position of window w's first row: that of the window the walk is in, and the
        # records of the windows up to w
        first = at[0] - at[2] + self.stream.count(window_bounds(p, at[1])[0], window_bounds(p, w)[0])
        return max(j, min(p.num_batches, (first - int(self.mine[0, 0])) // p.batch_size))

    def size(self, w: int) -> int:
        """Records of window ``w``."""
        if w not in self.sizes:
            self.sizes = {w: self.stream.count(*window_bounds(self.plan, w))}
        return self.sizes[w]

    def row_of(self, pos: int) -> tuple[int, int]:
        """(window, row in its stream) of stream position ``pos``."""
        if self.at is not None and self.at[0] == pos:
            return self.at[1], self.at[2]  # where the last batch ended: no search
        upos, within = self.cursor.seek(pos)
        w = window_of(self.plan, upos)
        lo = window_bounds(self.plan, w)[0]
        return w, self.stream.count(lo, upos) + within

    def batch(self, j: int):
        """The :class:`BatchPlan` of batch ``j`` (the next one of the walk); with :meth:`own`, a
        list of its pieces in the windows owned: none, one, or more when another walk's window
        lies between two of them (each piece is rows of consecutive windows)."""
        pieces = batch_pieces(self.plan, self.mine, j)
        o, at = self.open, self.at
        if (self.share and len(pieces) == 1 and o is not None and at is not None
                and at[0] == pieces[0][0] and at[1] == o[0] and o[1] <= at[2]
                and at[2] + pieces[0][1] - pieces[0][0] <= o[2]):
            # most batches: the rows right after the last batch's, inside the window step it opened
            # (what the loop below finds, without its Python a batch; with own(), that window is
            # one of this walk's and the batch is whole)
            a, b = at[2], at[2] + pieces[0][1] - pieces[0][0]
            self.at = (pieces[0][1], o[0], b)
            part = _tuple_new(Part, (o[3], a - o[1], b - o[1], b == o[2]))
            return BatchPlan(j, o[3].ids[part.lo:part.hi].copy(), (part,))
        segs = []          # [first window, parts, ids] of each piece, in delivery order
        gap = False        # a window of another walk since the last part taken
        for lo, hi in pieces:
            lo, hi = int(lo), int(hi)
            w, row = self.row_of(lo)
            left = hi - lo
            while left > 0:
                if row >= self.size(w):
                    w, row = w + 1, 0
                    if w >= window_count(self.plan):
                        raise RuntimeError("window stream ended early (inconsistent plan)")
                    continue
                take = min(left, self.size(w) - row)
                if self.mod is not None and w % self.mod != self.me:
                    gap = True
                else:
                    if not segs or gap:
                        segs.append([w, [], []])
                        gap = False
                    part = self._part(w, row, row + take, lo) if self.share else self._strided(j, w, row, row + take, lo)
                    segs[-1][1].append(part)
                    segs[-1][2].append(part.step.ids[part.lo:part.hi])
                row += take
                left -= take
                lo += take
            self.at = (hi, w, row)
        if not pieces and self.me == 0:
            # a batch of no rows (this rank's last, where the ranks' shares differ by fewer than
            # world_size records) lies in no window: the walk of window 0 delivers it, so that
            # every rank steps as often whatever the DataLoader's workers
            return BatchPlan(j, np.empty(0, np.int64), ())
        if self.mod is None or (len(segs) == 1 and not self._cut(pieces, segs)):
            parts, ids = (segs[0][1], segs[0][2]) if segs else ([], [])
            return BatchPlan(j, np.concatenate(ids) if ids else np.empty(0, np.int64), tuple(parts))
        total = self.plan.batch_size_of(j)
        return [BatchPlan(j, np.concatenate(ids), tuple(parts), (w, total)) for w, parts, ids in segs]

    def _cut(self, pieces, segs) -> bool:
        """Whether the piece taken is less than the whole batch (a window of another walk before it)."""
        return sum(p.hi - p.lo for p in segs[0][1]) != sum(int(hi) - int(lo) for lo, hi in pieces)

    def _part(self, w: int, a: int, b: int, pos: int) -> Part:
        """The part for rows a:b of window ``w`` (stream position ``pos`` of row a)."""
        o = self.open
        if not (self.share and o is not None and o[0] == w and o[1] <= a and b <= o[2]):
            end = b
            if self.share:  # rows this rank takes from the window without a gap: read them once
                span_end = int(self.mine[np.searchsorted(self.mine[:, 1], pos, side="right"), 1])
                end = min(self.size(w), a + (span_end - pos))
            step = window_step(self.plan, self.number, w, a, end, self.extents)
            self.number += 1
            o = self.open = (w, a, end, step)
        return Part(o[3], a - o[1], b - o[1], b == o[2])


    def _strided(self, j: int, w: int, a: int, b: int, pos: int) -> Part:
        """The part for rows a:b of window ``w`` (stream position ``pos`` of row a) of batch ``j`` of
        a strided walk: one step holds the rows of window ``w`` of batches j, j + stride, ... (all
        this walk takes from it), read once."""
        o = self.open
        if o is None or o[0] != w or (a, b) not in o[2]:
            ranges = self._rows_ahead(j, w, pos - a)
            if (a, b) not in ranges:  # (spans out of stream order) this part alone
                ranges = [(a, b)]
            step = window_rows_step(self.plan, self.number, w, ranges, self.extents)
            self.number += 1
            at, cuts = 0, {}
            for r in ranges:
                cuts[r] = (at, at + r[1] - r[0])
                at += r[1] - r[0]
            o = self.open = (w, step, cuts, ranges[-1])
        lo, hi = o[2][(a, b)]
        return Part(o[1], lo, hi, (a, b) == o[3])

    def _rows_ahead(self, j: int, w: int, first: int) -> list:
        """The row ranges of window ``w`` (its row 0 at stream position ``first``) of batches
        j, j + stride, ... of this walk, in walk order."""
        p, size = self.plan, self.size(w)
        out = []
        for jj in range(j, p.num_batches, self.stride):
            pieces = batch_pieces(p, self.mine, jj)
            for lo, hi in pieces:
                r0, r1 = max(int(lo) - first, 0), min(int(hi) - first, size)
                if r0 < r1:
                    out.append((r0, r1))
            if all(int(lo) - first >= size for lo, _ in pieces):
                break  # this batch starts past the window: the later ones too
        return out


def _unit(plans: list):
    """One plan as it is, or consecutive plans of one step as a :class:`~lirs.steps.SharedStep`."""
    return plans[0] if len(plans) == 1 else SharedStep(plans[0].parts[0].step, tuple(plans))


# how each shape of read step (lirs.policies.STEP_SHAPES) is walked
STEP_SOURCES = {"batch": BatchSteps, "batches": BatchSteps, "window": WindowSteps}
