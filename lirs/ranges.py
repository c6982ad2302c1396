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

Spans are int64 arrays (m, 2) of half-open ``[lo, hi)`` positions, sorted and disjoint. This
module is their arithmetic; :mod:`lirs.walker` walks the batches of a rank's spans.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .api import strict_bool
from .errors import UsageError


# --------------------------------------------------------------------------- span arithmetic


def check_drop_last(n: int, batch_size: int, world_size: int, drop_last) -> bool:
    """``drop_last`` (True or False, :func:`~lirs.api.strict_bool`); UsageError when it would leave every epoch empty
    (fewer than ``batch_size * world_size`` records: no rank gets one full batch)."""
    if strict_bool("drop_last", drop_last) and int(n) < int(batch_size) * int(world_size):
        raise UsageError(f"drop_last=True with batch_size {batch_size}"
                         f"{f' on {world_size} ranks' if world_size > 1 else ''} leaves every epoch empty: "
                         f"the dataset has {n} records, fewer than one full batch"
                         f"{' per rank' if world_size > 1 else ''}")
    return bool(drop_last)


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
    return dataclasses.replace(plan, spans=spans, num_batches=nb, first=first, size=size)


def rank_spans(plan) -> np.ndarray:
    """This rank's global spans, in delivery order: int64 (m, 2)."""
    if plan.spans is None:
        return np.array([[plan.first, plan.first + plan.size]], np.int64)
    return cut(plan.spans, plan.first, plan.first + plan.size)
