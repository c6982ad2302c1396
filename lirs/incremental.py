"""Incremental `lirs index`: what of an existing sidecar still holds for the dataset's files now,
and the scan of only the rest.

Per file of the dataset (matched to the old sidecar's files by path): unchanged (size, mtime and
the sampled blocks as indexed; or a moved mtime over bytes that all still match their checksums)
→ its offsets, labels, checksums and scan marks are copied; changed → the first changed byte
``c`` is found from the per-MiB checksums (an append: the old end), and the file is scanned
again from a record that starts at or before ``c``; added → scanned whole; removed → dropped.

The restart of a LIBSVM file is the first record of the block holding the start of the record
that contains ``c``: there the old scan's marks give the exact state (feature-index range, qid
records, records) a full scan has, so the sidecar written is byte for byte the one a full
re-index writes.

The checksum check of a file whose size or mtime moved is the one read of every old byte; the
rest (copying what is kept, scanning the tail) is planned as if no old byte changed and done while
that check runs on threads of its own (:func:`plan_update` with ``speculate``). Before the sidecar
is committed, :func:`confirm` waits for the checks: a file whose old bytes did change makes the
build start again from an exact plan (:class:`Unconfirmed`), so what is written never rests on a guess.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

from .content import SUM_BLOCK, BlockSums, block_count, check_in_background, first_changed_block
from .errors import IndexFormatError, StaleIndexError
from .inputs import SUM_TAPS
from .labelcodes import label_bits
from .preads import pread_full
from .freshness import staleness

log = logging.getLogger("lirs.index")


@dataclass
class Keep:
    """What of file ``f`` of the old index ``old`` is kept: its records before ``rec`` (all of
    them when ``whole``), which end where the scan restarts, at byte ``byte``."""

    old: object
    f: int
    whole: bool
    rec: int = 0
    byte: int = 0
    block: int = 0  # the marks row (block boundary) whose state the restart continues
    pending: object = None  # a Future of the checksum check this keep assumes found no change
    seen: object = None  # (size, mtime_ns) of the file when it was planned: the scan starts on that file or not at all


    @property
    def start(self) -> int:
        """Where the restarted read begins: the block holding ``byte`` (checksums are per block)."""
        return self.byte // SUM_BLOCK * SUM_BLOCK


class Unconfirmed(Exception):
    """A file's old bytes changed where a plan made with ``speculate`` assumed they did not."""


def plan_update(files, fmt: str, dest: str, *, speculate: bool = False) -> list:
    """One :class:`Keep` or None (scan whole) per file of ``files`` against the sidecar ``dest``;
    all None when there is no usable one (absent, another format, an older version, corrupt).
    ``speculate``: a file whose size or mtime moved is planned as if its old bytes were unchanged
    (an append, or a touch), its checksum check left running (:attr:`Keep.pending`, see
    :func:`confirm`)."""
    from .index import open_index

    none = [None] * len(files)
    if not os.path.isfile(dest):
        return none
    try:  # every array's CRC checked: what is reused is copied into the new sidecar under a new CRC
        old = open_index(dest, check=False, missing_ok=True, verify=True)
    except IndexFormatError as e:
        log.warning("%s is corrupt (%s): not reused, every file scanned", dest, e)
        return none
    except (StaleIndexError, OSError, ValueError) as e:
        log.info("%s: not reused (%s); scanning everything", dest, e)
        return none
    if old.format != fmt or old.sums is None or (fmt == "libsvm" and old.marks is None):
        return none
    where = {os.path.realpath(p): f for f, p in enumerate(old.paths)}
    return [_plan_file(old, where.get(os.path.realpath(p)), p, fmt, speculate) for p in files]


def _found_change(plan):
    """The first keep of ``plan`` whose running check found a change, or None (waits for the
    checks; a failed check's OSError, naming the file and byte, is raised)."""
    return next((k for k in plan or () if k is not None and k.pending is not None
                 and not k.pending.cancelled() and k.pending.result() is not None), None)


def confirm(plan) -> None:
    """Wait for the checks a speculative plan left running; :class:`Unconfirmed` when one found a
    change (an OSError of a failed read names the file and byte)."""
    keep = _found_change(plan)
    if keep is not None:
        raise Unconfirmed(keep.old.paths[keep.f])


def guessed_wrong(plan) -> bool:
    """Whether a check a speculative plan left running found a change (see :func:`confirm`)."""
    return _found_change(plan) is not None


def settle(plan, cancel: bool = True) -> None:
    """Let the checks of a plan being abandoned end (none reads on after its build failed): those
    not started yet are cancelled (``cancel``: the build was interrupted), else waited for, as the
    caller then asks whether the build failed on bytes that changed (:func:`guessed_wrong`: a
    cancelled check could not say, and asking it raised a bare CancelledError)."""
    for keep in plan or ():
        if keep is not None and keep.pending is not None and not (cancel and keep.pending.cancel()):
            keep.pending.exception()


def _plan_file(old, f, path: str, fmt: str, speculate: bool = False):
    if f is None:
        return None
    st = os.stat(path)  # before it is judged: a change after this one is found at the scan (no block read)
    seen = (int(st.st_size), int(st.st_mtime_ns))
    keep = _judge(old, f, path, fmt, speculate)
    if keep is not None:
        keep.seen = seen
    return keep


def _judge(old, f, path: str, fmt: str, speculate: bool):
    """The :class:`Keep` of ``path`` (file ``f`` of ``old``) as it is now, or None (scan it whole)."""
    fp = old.fingerprints[f]
    why = staleness(path, fp, None)[0]  # the cheap answer: size, mtime and sampled blocks
    if why is None:
        return Keep(old, f, True)
    size, was = os.path.getsize(path), int(fp["size"])
    if speculate and size >= was:  # an append or a touch (a shorter file changed: checked first)
        keep = _keep_from(old, f, fmt, size, was, was)
        if keep is not None:
            keep.pending = check_in_background(path, old.file_sums(f), was)
        return keep
    block = first_changed_block(path, old.file_sums(f), was)
    return _keep_from(old, f, fmt, size, was, was if block is None else block * SUM_BLOCK)


def _keep_from(old, f, fmt: str, size: int, was: int, c: int):
    """The :class:`Keep` of file ``f`` (``was`` bytes when indexed, ``size`` now) whose first
    changed byte is ``c`` (``was``: none of the old bytes)."""
    if c >= was and size == was:
        return Keep(old, f, True)  # touched: every byte as indexed
    a, b = int(old.file_starts[f]), int(old.file_starts[f + 1])
    table = old.offset_table
    start = lambda r: int(table[a + r])  # noqa: E731 - the start of the file's record r
    r = _last_at_or_before(start, b - a, c)  # the record holding byte c
    if r <= 0:
        return None
    if fmt == "libsvm":
        j = start(r) // SUM_BLOCK
        rec = int(old.file_marks(f)[j, 3])  # the block's first record: marks hold the state there
        if j == 0 or rec <= 0:
            return None
        return Keep(old, f, False, rec, start(rec), j)
    return Keep(old, f, False, r, start(r), start(r) // SUM_BLOCK)


def _last_at_or_before(start, n: int, c: int) -> int:
    """The last of records 0..n-1 (increasing ``start(r)``) that starts at or before byte ``c``;
    -1 when none does. A binary search: the table is not read whole."""
    lo, hi = 0, n  # the answer + 1 lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if start(mid) <= c:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def _feed_kept(sc, tap, lab_tmp, keep: Keep, count: int) -> None:
    """Give the writer (through ``tap``) the first ``count`` records of the kept file, as the scan
    would have, and note their labels for :func:`lirs.scanner.write_labels` (``sc.kept_labels``)."""
    from .kernels.plan import offsets_range
    from .offsets import OFFSET_BLOCK, offset_arrays

    old, f = keep.old, keep.f
    a = int(old.file_starts[f])
    base, rel, wide = offset_arrays(old.offset_table)
    # where old and new blocks of 1024 records line up (one file, or the same records before it),
    # whole old blocks are the new ones: their words copied, not decoded and compacted again
    head = (-a) % OFFSET_BLOCK
    whole = 0
    if (tap.n - a) % OFFSET_BLOCK == 0 and count > head:
        whole = (count - head) // OFFSET_BLOCK * OFFSET_BLOCK
        if whole and (base[(a + head) // OFFSET_BLOCK:(a + head + whole) // OFFSET_BLOCK] < 0).any():
            whole = 0  # a block of 4 GiB or more: decoded like the rest
    if not whole:
        head = count
    step = 1 << 16  # 512 KiB of starts a step: the buffers stay in the CPU's cache, no page faults
    starts = np.empty(min(step, max(head, count - head - whole, 1)), np.int64)
    for lo, hi in ((a, a + head), (a + head + whole, a + count)):
        for s in range(lo, hi, step):
            e = min(hi, s + step)
            offsets_range(base, rel, wide, s, starts[:e - s])
            tap.append(starts[:e - s])
        if whole and lo == a:
            tap.append_blocks(base, rel, wide, a + head, a + head + whole)
    if lab_tmp is not None:
        sc.kept_labels.append((sc.n, old, a, a + count))
        if sc.distinct is not None:
            sc.distinct.update(_distinct(old, a, a + count))
            if len(sc.distinct) > 65535:
                sc.distinct = None
    sc.n += count


def _distinct(old, a: int, b: int) -> list:
    """The distinct labels of records [a, b) of the index ``old``, as bits (uint64 ints, as
    :class:`lirs.scanner.VarScanner` keeps them): from the codes met, in one pass, where the index
    keeps codes."""
    values = np.ascontiguousarray(old.label_values, np.float64)
    if old.label_codes is None:  # too many distinct values for codes: a label per record
        return label_bits(values[a:b]).tolist()
    from .kernels.scan import codes_seen

    seen = np.zeros(len(values), np.bool_)
    for c0 in range(a, b, 1 << 20):
        codes_seen(np.asarray(old.label_codes[c0:min(b, c0 + (1 << 20))]), seen)
    return values.view(np.uint64)[seen].tolist()


def scan_one(sc, tap, lab_tmp, path: str, keep: Keep | None, sums: list, bar) -> int:
    """Index ``path`` into the scanner ``sc``: whole, or per ``keep``; append its checksums (uint32
    (blocks,)) to ``sums``. Returns its data end."""
    if keep is None:
        acc = SUM_TAPS[path] = BlockSums()
        try:
            _, _, end = sc.scan_file(path)
        finally:
            SUM_TAPS.pop(path, None)
        return _sums_done(path, acc, [], sums, end)
    old, f = keep.old, keep.f
    marks = old.file_marks(f) if getattr(sc, "marks", None) is not None else None
    if keep.whole:
        count = int(old.file_starts[f + 1] - old.file_starts[f])
        _feed_kept(sc, tap, lab_tmp, keep, count)
        if marks is not None:
            sc.marks += marks.tolist()
            sc.stats[:2] = marks[-1, :2]
            sc.qid_count += int(marks[-1, 2])
        sums.append(np.asarray(old.file_sums(f), np.uint32))
        bar.update(int(old.fingerprints[f]["size"]))
        return int(old.data_ends[f])
    _feed_kept(sc, tap, lab_tmp, keep, keep.rec)
    acc = SUM_TAPS[path] = BlockSums(keep.start)
    try:
        if marks is not None:
            # a restart at the file's new end on a block boundary (cut there): that boundary's row is
            # the file's total row, which the scan writes, not a mark a full scan keeps
            rows = min(keep.block + 1, block_count(os.path.getsize(path)))
            sc.marks += marks[:rows].tolist()
            sc.qid_count += int(marks[keep.block, 2])
            _, _, end = sc.scan_file(path, keep.start, keep.byte, marks[keep.block], rows)
        elif hasattr(sc, "scan_range"):  # TFRecord: the scanner reads from the record itself
            with open(path, "rb") as fh:
                head = pread_full(fh.fileno(), keep.byte - keep.start, keep.start, path)
            acc.feed(np.frombuffer(head, np.uint8), 0, len(head), keep.start)
            end = os.path.getsize(path)
            sc.scan_range(path, keep.byte, end, keep.rec)
        else:
            _, _, end = sc.scan_file(path, keep.start, keep.byte, np.array([0, -1, 0, keep.rec]))
    finally:
        SUM_TAPS.pop(path, None)
    head = np.asarray(old.file_sums(f)[:keep.start // SUM_BLOCK], np.uint32)
    return _sums_done(path, acc, [head], sums, end)


def _sums_done(path: str, acc: BlockSums, head: list, sums: list, end: int) -> int:
    from .errors import DataError

    got = np.concatenate(head + [acc.finish()])
    if len(got) != block_count(os.path.getsize(path)):
        raise DataError(f"{path}: file changed while it was being indexed; run `lirs index` again")
    sums.append(got)
    return end
