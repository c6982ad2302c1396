"""Window batches: ``window`` units read as one step, their records dealt randomly over batches.

A window is read once (one read step), whatever number of batches it feeds; its records are dealt
in a random order (keyed by the epoch's window key and the window number), so a group's records
rarely share a batch while every read stays group sized. This module holds the geometry of the
windows of an :class:`~lirs.plan.EpochPlan` and the read step of a window's rows; the walk that
hands their rows to batches is :class:`lirs.walker.WindowSteps`.
"""
from __future__ import annotations

import re

import numpy as np

from .constants import (STEP_PIECE_RUNS, STEP_RECORD_COST, WINDOW_AUTO_MAX, WINDOW_AUTO_MIN, WINDOW_AUTO_SHARE,
                        WINDOW_HELD_RATIO)
from .errors import UsageError
from .kernels import plan as K
from .units import parse_size


def group_span(group_bytes: int, data_bytes: int, records: int) -> int:
    """The bytes one group holds, as a window's byte budget counts them: ``group_bytes``, or the
    mean record's bytes where records are larger (each then a group of its own: a ``"64M"`` window
    of 1 MiB records counted 1024 groups, a gigabyte held). ``data_bytes`` of ``records`` records."""
    return max(int(group_bytes), -(-int(data_bytes) // int(records)) if records else 0)


def held_bytes(nbytes: int, data_bytes: int, records: int) -> int:
    """The bytes an auto window or a step of ``nbytes`` spans in data of ``data_bytes`` over ``records``
    records: ``nbytes``, or fewer where that many bytes hold more than ``nbytes x WINDOW_HELD_RATIO /
    STEP_RECORD_COST`` records (records under ~27 B: each costs STEP_RECORD_COST bytes of step arrays
    and plans, so a 16 MiB window of 1-byte records held 2.3 GB, not 7.5 x 16 MiB); then the bytes of
    that many records of the mean size. ``records`` 0: ``nbytes`` (no data to count records of)."""
    most = int(int(nbytes) * WINDOW_HELD_RATIO) // STEP_RECORD_COST  # the records nbytes may hold
    records, data_bytes = int(records), int(data_bytes)
    if records <= 0 or most * data_bytes >= int(nbytes) * records:  # mean record large enough: bytes alone
        return int(nbytes)
    return max(-(-most * data_bytes // records), 1)


def window_groups(window, group_bytes: int, data_bytes: int, records: int = 0) -> int:
    """The number of groups a window holds, from its spec: an int (a group count), a size such as
    ``"64M"`` or ``"1.5GB"`` (a memory budget: ``size // group_bytes`` groups, at least one; give
    :func:`group_span` as ``group_bytes`` where records may be larger than a group), a
    share of the data such as ``"5%"`` (of ``data_bytes``, rounded up), or ``"auto"``: 5% of the data
    within [16 MiB, 256 MiB] (:data:`lirs.constants.WINDOW_AUTO_SHARE` and its bounds), fewer bytes
    where the data's ``records`` records are tiny (:func:`held_bytes`; 0: bytes alone). A window
    given by the user (a count, a size, a share) is theirs: never cut by its records.

    Why bytes: a group's records spread over about ``window bytes / batch bytes`` batches, so the
    randomness of a batch depends on the window's bytes, not on its group count.
    """
    bad = UsageError(f"window must be a group count >= 1, a size like '64M', a share like '5%' "
                     f"of the data or 'auto', got {window!r}")
    if isinstance(window, (bool, np.bool_, float, np.floating)):  # a float is no group count: not truncated
        raise bad
    if isinstance(window, (int, np.integer)):
        if window < 1:
            raise bad
        return int(window)
    text = str(window).strip()
    if text == "auto":
        nbytes = min(max(WINDOW_AUTO_SHARE * int(data_bytes), WINDOW_AUTO_MIN), WINDOW_AUTO_MAX)
        nbytes = held_bytes(int(nbytes), data_bytes, records)
        return max(-(-int(nbytes) // int(group_bytes)), 1)
    share = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*%", text)
    if share:
        pct = float(share.group(1))
        if not 0 < pct <= 100:
            raise bad
        # rounded up: "100%" is one window over all the data
        return max(-(-int(pct / 100 * int(data_bytes)) // int(group_bytes)), 1)
    if re.fullmatch(r"[0-9]+", text):
        if int(text) < 1:
            raise bad
        return int(text)
    if re.fullmatch(r"[0-9]*\.[0-9]+", text):  # "1.5": no whole group count, and a size needs its unit
        raise bad
    try:
        nbytes = parse_size(text)
    except UsageError:
        raise bad from None
    if nbytes <= 0:
        raise bad
    return max(nbytes // int(group_bytes), 1)


def rank_reads(window: int, group_bytes: int, data_bytes: int, world_size: int) -> float:
    """About how many times its share of the data one of ``world_size`` ranks reads with windows of
    ``window`` groups: every window its slice of the epoch takes records from, so its share plus up
    to a window at each end, at most the whole data (a window larger than the share: every rank
    reads the windows it touches whole)."""
    share = data_bytes / max(world_size, 1)
    if share <= 0:
        return 1.0
    return min(float(data_bytes), share + 2.0 * min(window * group_bytes, data_bytes)) / share


def window_count(plan) -> int:
    """Windows in the epoch: ``ceil(units / window)``, the units shared out evenly among them."""
    return max(-(-plan.perm.n // plan.window), 1)


def window_bounds(plan, w: int) -> tuple[int, int]:
    """Unit positions ``[lo, hi)`` of window ``w``. Windows are balanced (sizes differ by at most
    one unit, none above ``window``) rather than full windows and a remainder: a small last
    window would put its few groups' records into the epoch's last batches."""
    nw, n = window_count(plan), plan.perm.n
    return w * n // nw, (w + 1) * n // nw


def window_of(plan, upos: int) -> int:
    """The window holding unit position ``upos``."""
    nw, n = window_count(plan), plan.perm.n
    w = min(upos * nw // max(n, 1), nw - 1)
    while window_bounds(plan, w)[1] <= upos and w < nw - 1:
        w += 1
    while window_bounds(plan, w)[0] > upos:
        w -= 1
    return w


def window_records(plan, w: int):
    """Window ``w`` (unit positions :func:`window_bounds`): int64 (m,) its records in unit order
    and int64 (m,) the random order ``o`` in which they are dealt (the window's stream is ``ids[o]``)."""
    ids = plan.stream.unit_records(*window_bounds(plan, w))
    o = np.arange(len(ids), dtype=np.int64)
    K.shuffle_inplace(o, np.uint64(plan.window_key), np.uint64(w))
    return ids, o


def window_step(plan, number: int, w: int, a: int, b: int | None, extents: bool | str):
    """The read step of rows a:b of window ``w``'s stream. Rows of more than one batch find their
    extents in unit order (runs of consecutive records, their offsets read with pread, or visited
    STEP_PIECE_RUNS at a time with the index pages released in between where the index is not a
    map of its sidecar: :meth:`lirs.plan.EpochPlan.step`), then are dealt: a whole window in the order ``o``, a
    part of one in its rows' order. Such a step's extents are found here even when ``extents`` is
    ``"defer"``: on the planning thread, ahead, not on the pool thread that reads the window (a
    window is decoded by the cores at once, and its read is on the epoch's critical path)."""
    ids, o = window_records(plan, w)
    b = len(ids) if b is None else min(b, len(ids))
    if b - a <= plan.batch_size:
        # one batch's rows (a worker's, with a stride) are planned like a group batch: in one pass,
        # the pages released every INDEX_RELEASE_BATCHES batches; releasing them at every such step
        # made each batch fault all its pages again (+25-40% planning time per batch)
        return plan.step(number, ids[o[a:b]], extents)
    now = _now(extents)
    if a == 0 and b == len(ids):
        return plan.step(number, ids, now, order=o, piece_runs=STEP_PIECE_RUNS)
    rows = np.sort(o[a:b])  # the part's records in unit order: runs again, not scattered single records
    return plan.step(number, ids[rows], now, order=np.searchsorted(rows, o[a:b]), piece_runs=STEP_PIECE_RUNS)


def _now(extents: bool | str) -> bool:
    """``extents`` of a window's step of many batches: "defer" found now (see :func:`window_step`)."""
    return True if extents == "defer" else bool(extents)


def window_rows_step(plan, number: int, w: int, ranges: list, extents: bool | str):
    """The read step of the row ranges ``ranges`` ((a, b) pairs, in the order their rows are
    dealt) of window ``w``'s stream: found in unit order (runs), delivered range after range."""
    if len(ranges) == 1:
        return window_step(plan, number, w, *ranges[0], extents)
    ids, o = window_records(plan, w)
    sel = np.concatenate([o[a:b] for a, b in ranges])
    rows = np.sort(sel)
    return plan.step(number, ids[rows], _now(extents), order=np.searchsorted(rows, sel),
                     piece_runs=STEP_PIECE_RUNS)
