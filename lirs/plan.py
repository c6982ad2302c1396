"""The per-epoch plan: which records each batch holds and which aligned extents cover them.

Planning never reads data. For an epoch it fixes a random order of *units* and cuts the resulting
record stream into batches; reads are described as aligned, coalesced extents ``(file, offset,
nbytes)`` that an engine reads in one call.

Granularity (the unit of shuffling):

``instance``  units are records (the LIRS paper's Fig. 6a): the most random, one small read each.
``page``      units are the records whose start lies in the same 4 KiB page (Fig. 6b). A record
              that straddles a page end makes its unit read two pages: about 2x amplification on
              small records (the paper's §5.2.3).
``group``     units are the records whose start lies in the same aligned span of ``group_bytes``:
              amplification about 1 + 4 KiB / group_bytes.
``window``    groups as units, read a window of random groups at a time (``window``: a memory
              budget such as ``"64M"``, a share of the data, or a group count); the records of a
              window are dealt in a random order over the batches they feed, so a group's records
              spread over about window bytes / batch bytes batches while every read stays group
              sized. One window is read once, whatever number of batches it feeds (a *read step*
              spans several batches).

Records of one page or group unit are delivered in a random order inside their batch.

Permutation of units: ``table`` stores a permutation (Fisher-Yates, smallest unsigned dtype);
``stateless`` computes the unit at any position on demand with a keyed Feistel bijection and cycle
walking (no table of the unit count, let alone the record count); ``auto`` takes ``table`` up to
2**20 units (4 MiB at most) and ``stateless`` beyond, where a table would cost 4 B per unit. The
order is a function of ``(seed, epoch)``: seeds come from ``SeedSequence([seed, epoch, purpose])``.

Sharding over ``world_size`` ranks, without communication: the global record stream of the epoch
is cut into contiguous, disjoint slices, one per rank, and every rank gets the same number of
batches ``num_batches``:

* ``drop_last=False``: every record exactly once over the union of ranks. Batches are full except
  the last one of each rank; the records of the last round (``R = n - (num_batches - 1) * W * B``)
  are split as evenly as possible, so last batches differ by at most one record between ranks.
  When ``R < W`` some ranks get an empty last batch (they still step with the others).
* ``drop_last=True``: ``num_batches = n // (W * B)`` full batches per rank; the tail of the stream
  (a different random set of records every epoch) is not delivered.

Resume: batch ``j`` of an epoch depends only on the configuration, the epoch and ``j``, so
``plan.batches(start=j)`` reproduces exactly the remaining batches; ``plan.batches(j, stride=W)``
gives every ``W``-th of them (DataLoader workers) without planning the others.

Elastic resume: :func:`lirs.ranges.over_spans` restricts a plan to position ranges of the
epoch's global order (what a state saved with another world size left undelivered, see
:func:`lirs.ranges.remainder`), split over the ranks by the rules above. Every granularity
supports it (see :mod:`lirs.ranges`).
"""
from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from . import seeds
from .api import strict_bool, whole
from .constants import (BLOCK, DEFAULT_GROUP_BYTES, DEFAULT_WINDOW, EXTENTS_COPY_MIN_BYTES, GROUP_BYTES_MAX, INDEX_READ_GAP,
                        INDEX_READ_SPAN, INDEX_RELEASE_BATCHES, RUNS_SORTED_MAX, STEP_PIECE_RUNS, UNIT_SCAN_RECORDS)
from .errors import UsageError
from .kernels import plan as K
from .kernels import steps as KS
from .libc import Libc
from .memory import copy_held
from .offsets import index_read_error, offset_arrays
from .permutation import PERMUTATIONS, Permutation
from .policies import DEFAULT_GRANULARITY, GRANULARITIES, POLICIES
from .ranges import rank_slice
from .sizecounts import SizeCounts
from .steps import ReadStep, SharedStep, file_ends
from .stream import UnitStream
from .walker import walk
from .windows import group_span, window_groups

# SeedSequence([seed, epoch, purpose]) purposes of the planner

_UNIT_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------- units


_SCRATCH = threading.local()  # each thread's offsets scratch (offsets_scratch)
_NO_DEAL = np.empty(0, np.int64)  # step_extents: the records kept in the order found


def offsets_scratch(n: int) -> np.ndarray:
    """This thread's uint32 scratch of at least ``n`` items, where a step's offsets are gathered
    (:func:`lirs.kernels.plan.extents`): kept from step to step, so that they land in pages already
    there. An array made at each step had its pages zeroed on first touch and handed back after:
    64k page faults an instance epoch of 887k records here (the offsets of a step's scattered records
    span most of the table)."""
    a = getattr(_SCRATCH, "a", None)
    if a is None or a.shape[0] < n:
        a = _SCRATCH.a = np.empty(max(int(n), 1 if a is None else 2 * a.shape[0]), np.uint32)
    return a


def unit_bytes_of(granularity: str, group_bytes: int, block: int = BLOCK) -> int:
    """Bytes of the aligned span that defines a unit of ``granularity`` (0: every record is one)."""
    return POLICIES[granularity].unit_bytes(group_bytes, block)


def unit_table(index, unit_bytes: int) -> np.ndarray | None:
    """int64 (n_units + 1,): the first record of every unit (records whose start lies in one aligned
    span of ``unit_bytes`` of one file), then ``n``. None when every record is its own unit.

    Computed once per index and unit size (cached while the index lives)."""
    if unit_bytes <= 0:
        return None
    cache = _UNIT_CACHE.setdefault(index, {})
    if unit_bytes in cache:
        return cache[unit_bytes]
    fs = np.ascontiguousarray(index.file_starts, np.int64)
    if index.is_fixed:
        if index.record_size >= unit_bytes:
            table = None  # a span never holds two record starts
        else:
            hs = np.ascontiguousarray(index.header_sizes, np.int64)
            count = K.units_fixed(fs, hs, int(index.record_size), int(unit_bytes), np.empty(0, np.int64))
            table = np.empty(count + 1, np.int64)
            K.units_fixed(fs, hs, int(index.record_size), int(unit_bytes), table)
            table[count] = index.n
    else:
        table = _unit_firsts(index, fs, int(unit_bytes))  # with index.n appended
        if len(table) == index.n + 1:
            table = None
    cache[unit_bytes] = table
    return table


def _unit_firsts(index, fs: np.ndarray, unit_bytes: int) -> np.ndarray:
    """int64 (units + 1,): the first record of every unit of a variable-length index, then ``n``,
    built in one allocation (a large temporary freed here would raise glibc's mmap threshold
    for the rest of the process, so later allocations of a large dataset's epoch would stay in
    fragmented heaps that a small dataset's release); scanned
    UNIT_SCAN_RECORDS offsets at a time with the index pages released after each piece: the scan
    reads every offset, and a memory-mapped index would otherwise stay whole in the RSS."""
    offs = offset_arrays(index.offset_table)
    table = index.offset_table
    parts = []
    for f in range(len(fs) - 1):
        prev = None  # unit key (start // unit_bytes) of the file's record before this piece
        for lo in range(int(fs[f]), int(fs[f + 1]), UNIT_SCAN_RECORDS):
            hi = min(lo + UNIT_SCAN_RECORDS, int(fs[f + 1]))
            span = np.array([lo, hi], np.int64)
            out = np.empty(K.units_variable(*offs, span, unit_bytes, np.empty(0, np.int64)), np.int64)
            K.units_variable(*offs, span, unit_bytes, out)
            if prev is not None and table[lo] // unit_bytes == prev:
                out = out[1:]  # the piece starts inside the previous piece's last unit
            prev = table[hi - 1] // unit_bytes
            parts.append(out)
            index.release_pages()
    return np.concatenate(parts + [np.array([index.n], np.int64)])


@dataclass(eq=False)
class EpochPlan:
    """The plan of one epoch for one rank (see the module docstring for the rules).

    ``num_batches``: batches of every rank; ``first``/``size``: this rank's slice of the global
    record stream (of the concatenated ``spans`` when the plan covers only those int64 (m, 2)
    position ranges); ``units``: unit count; ``stream``: the epoch's
    :class:`~lirs.stream.UnitStream`; ``batch_key``/``window_key``: the keys batches and windows
    deal their records with; ``batches(start)`` iterates :class:`~lirs.steps.BatchPlan` objects.
    ``align``: the bytes a read step's extents are aligned to, ``block`` for reads that may bypass
    the page cache (O_DIRECT), 1 where the engine's reads are copies (exactly the records' bytes).
    """

    index: object
    batch_size: int
    granularity: str
    seed: int
    epoch: int
    rank: int
    world_size: int
    drop_last: bool
    group_bytes: int
    window: int
    block: int
    perm: Permutation
    ufirst: np.ndarray | None
    num_batches: int
    first: int
    size: int
    plan_s: float = 0.0
    spans: np.ndarray | None = None
    batch_key: int = 0
    window_key: int = 0
    align: int = BLOCK

    def __post_init__(self):
        idx = self.index
        self.stream = UnitStream(self.perm, self.ufirst, idx.n)
        self._stats: dict | None = None
        self._rel_file, self._libc = None, (0, 0)
        if idx.is_fixed:
            self._offs = (np.empty(0, np.int64), np.empty(0, np.uint32), np.empty(0, np.int64))
            self._rs = int(idx.record_size)
        else:
            self._offs = offset_arrays(idx.offset_table)
            self._rs = 0
            self._rel_file = idx.offset_table.rel_file
            if self._rel_file is not None:
                lc = Libc.get()
                self._libc = (lc.pread, lc.errno_location)
        self._fs = np.ascontiguousarray(idx.file_starts, np.int64)
        self._de = np.ascontiguousarray(idx.data_ends, np.int64)
        self._hs = np.ascontiguousarray(idx.header_sizes, np.int64)

    # ---- geometry --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return int(self.index.n)

    @property
    def _maps_no_index(self) -> bool:
        """Whether finding a step's extents maps no page of the index: its offsets are read with
        pread from the sidecar (:meth:`_extents`), or its records have a fixed size."""
        return self._rel_file is not None or self._rs > 0

    @property
    def units(self) -> int:
        return self.perm.n

    def batch_size_of(self, j: int) -> int:
        """Records in batch ``j`` of this rank."""
        if not 0 <= j < self.num_batches:
            raise IndexError(f"batch {j} outside [0, {self.num_batches})")
        return int(min(self.batch_size, self.size - j * self.batch_size))

    @property
    def nbytes(self) -> int:
        """Bytes of the plan's tables: the unit permutation and the unit boundaries."""
        return self.perm.nbytes + (0 if self.ufirst is None else int(self.ufirst.nbytes))

    # ---- read steps --------------------------------------------------------------------
    def step(self, number: int, ids: np.ndarray, extents: bool | str = True, shuffle_at: int = -1,
              order: np.ndarray | None = None, piece_runs: int = 0, dealt: np.ndarray | None = None,
              span=None) -> ReadStep:
        """The read step of records ``ids``, delivered in the order ``ids[order]`` (a window) or,
        with ``shuffle_at`` >= 0, in a random order drawn from the batch stream at that counter
        (page/group batches); else as given. ``piece_runs`` > 0: the extents are found that many
        runs of consecutive records at a time, the index pages released after each piece (a
        window's runs lie all over the index); 0: in one pass (small batches). ``extents``: True,
        False (record IDs only), or ``"defer"``: for a batch's step (``piece_runs`` 0), found by
        :meth:`ReadStep.ready` on the thread that calls it (the pool thread that reads the step,
        not the one planning). A step of many runs (``piece_runs`` > 0) defers them too where
        finding them maps no page of the index (its offsets read with pread, or records of a fixed
        size); otherwise it has its extents found now, as with True. ``dealt``: ``ids[order]``
        when the caller has it already (int64 (k,)). ``span``: a :class:`lirs.stream.Span` whose
        ``ids`` and ``order`` these are, taken from the stream in the kernel call that finds the
        extents where there is one, else first."""
        k = len(ids)
        if span is not None and (extents is not True and (extents != "defer" or piece_runs <= 0
                                                          or self._maps_no_index)):
            dealt, span = span.take(), None  # deferred, or no extents: the records alone
        if order is None and shuffle_at >= 0 and k > 1:
            order = self.batch_order(k, shuffle_at)
        if extents == "defer" and k and (piece_runs <= 0 or self._maps_no_index):
            # a step of many runs that maps the index releases its pages after each piece, and pool
            # threads doing that at once fault each other's pages back in (a group epoch waited
            # 10-12% of its time instead of 5%); one that reads its offsets with pread maps none,
            # and its extents (over half the planning of a group step) are then found by the pool's
            # threads at once instead of by the one planning thread, which set the rate on many cores
            if dealt is None:
                dealt = ids if order is None else ids[order]
            return ReadStep(number, dealt, *(None,) * 6,
                            fill=lambda st: self._fill(st, ids, order, piece_runs))
        if not extents:
            if order is not None:
                ids = ids[order] if dealt is None else dealt
            z = np.empty(0, np.int64)
            return ReadStep(number, ids, np.empty(0, np.int32), z, z, np.empty(0, np.int32), z, z)
        ef = np.empty(k, np.int32)
        eo = np.empty(k, np.int64)
        en = np.empty(k, np.int64)
        rx = np.empty(k, np.int32)
        rp = np.empty(k, np.int64)
        rl = np.empty(k, np.int64)
        # extents are found on the unit-ordered records (runs sort fast), then all move together
        ne, dealt_all = self._extents(ids, (ef, eo, en, rx, rp, rl), piece_runs, order, span) if k else (0, None)
        if dealt_all is not None:
            ids, rx, rp, rl = dealt_all
        elif order is not None:
            ids, rx, rp, rl = K.gather_records(order, ids, rx, rp, rl)
        cut = (ef[:ne], eo[:ne], en[:ne])
        if eo.nbytes >= EXTENTS_COPY_MIN_BYTES:  # arrays sized by the records: a window's hold tens of MB
            # copied with the GIL held (numpy's copies let it go from 500 extents on)
            cut = tuple(copy_held(a) for a in cut)
        return ReadStep(number, ids, *cut, rx, rp, rl)

    def _fill(self, step: ReadStep, ids: np.ndarray, order, piece_runs: int) -> None:
        """Set the deferred extents of ``step`` (the records ``ids`` delivered as ``ids[order]``)."""
        full = self.step(step.number, ids, True, order=order, piece_runs=piece_runs)
        (step.ext_file, step.ext_offset, step.ext_nbytes, step.rec_extent, step.rec_pos,
         step.rec_len) = full.ext_file, full.ext_offset, full.ext_nbytes, full.rec_extent, full.rec_pos, full.rec_len

    def _extents(self, ids: np.ndarray, out: tuple, piece_runs: int, order=None, span=None) -> tuple:
        """Fill ``out`` (the extent and record arrays of :func:`lirs.kernels.plan.extents`) for
        ``ids`` int64 (k >= 1,); returns the number of extents and, where one kernel call also
        put them in the delivery order ``order`` (int64 (k,) or None), ``(ids, rec_extent, rec_pos,
        rec_len)`` so (else None). The runs are visited in ID order.

        A step of many batches (``piece_runs`` > 0: a window, a group step) has runs all over the
        index, and every offset it touches in a memory-mapped table maps the pages (or the whole
        large folio) around it: its offsets are read with pread from the sidecar instead, in one
        kernel call, when the table is a map of one; else the runs go ``piece_runs`` per call, the
        index pages released after each. 0: one pass through the table (a batch's step). A pass of
        at most RUNS_SORTED_MAX runs (a group step's) is one call (:mod:`lirs.kernels.steps`)."""
        k = len(ids)
        heads, keys = np.empty(k, np.int64), np.empty(k, np.int64)
        runs = np.empty(min(k, RUNS_SORTED_MAX), np.int64)
        state = np.array([-1, -1, -1, 0], np.int64)  # last extent, its file, its end; error
        fd, rel_off = -1, 0
        if piece_runs > 0 and self._rel_file is not None:
            (file, rel_off), piece_runs = self._rel_file, 0
            fd = file.fd
        elif piece_runs > 0 and self._rs > 0:
            piece_runs = 0  # records of a fixed size: no offset is read, no index page is mapped
        base, rel, wide = self._offs
        args = (base, rel, wide, *self._libc, fd, rel_off, INDEX_READ_GAP, INDEX_READ_SPAN, self._fs, self._de,
                self._hs, self._rs, self.align, *out, state)
        if piece_runs <= 0 and (self.ufirst is not None or k <= RUNS_SORTED_MAX):
            # one pass: runs, extents and the deal in one call where the runs are few (not an instance step's)
            few = min(k, RUNS_SORTED_MAX)
            room = 0 if self._rs > 0 else min(k + few * (INDEX_READ_GAP + 2), len(rel) + few)
            if span is not None:  # the records too: taken from the stream in the same call
                upos, within, n, ne, *dealt = KS.span_step(*span.args, heads, keys, runs, RUNS_SORTED_MAX, *args,
                                                           offsets_scratch(room))
                span.done(upos, within, len(ids) if n >= 0 else 0)
            else:
                n, ne, *dealt = KS.step_extents(ids, _NO_DEAL if order is None else order, heads, keys, runs,
                                                RUNS_SORTED_MAX, *args, offsets_scratch(room))
            if n <= RUNS_SORTED_MAX:
                self._raise_state(state)
                return ne, None if order is None else tuple(dealt)
        else:
            if span is not None:
                span.take()  # ids and order filled: the extents go piece by piece below
            n = K.run_heads(ids, heads, keys, runs, RUNS_SORTED_MAX)
        heads = heads[:n]
        runs = runs[:n] if n <= RUNS_SORTED_MAX else np.argsort(keys[:n])
        step = len(runs) if piece_runs <= 0 else int(piece_runs)
        ne = 0
        room = 0 if self._rs > 0 else min(k + min(step, len(runs)) * (INDEX_READ_GAP + 2), len(rel) + len(runs))
        src = offsets_scratch(room)
        for lo in range(0, len(runs), step):
            ne = K.extents(ids, heads, runs[lo:lo + step], *args, src)
            self._raise_state(state)
            if piece_runs > 0:
                self.index.release_pages()
        return ne, None

    def _raise_state(self, state: np.ndarray) -> None:
        """The error an extents kernel left in ``state[3]``, raised (none: nothing)."""
        if state[3]:
            raise index_read_error(None if self._rel_file is None else self._rel_file[0].path, int(state[3]))

    def batches(self, start: int = 0, *, extents: bool | str = True, stride: int = 1, windows=None,
                units: bool = False):
        """Iterate over the :class:`BatchPlan` of batches ``start .. num_batches - 1``
        (``extents=False``: record IDs only, the steps carry no extents; ``"defer"``: found by
        :meth:`ReadStep.ready` where the step is read); with ``stride``, only
        batches ``start, start + stride, ...`` (the others are skipped, not planned); with
        ``windows=(w, W)`` (window granularity), only the rows of windows ``w, w + W, ...``
        (pieces of batches, see :func:`lirs.walker.walk`); ``units=True``: the batches of a shared
        step as one :class:`~lirs.steps.SharedStep`."""
        start = int(start)
        if not 0 <= start <= self.num_batches:
            raise UsageError(f"start batch {start} outside [0, {self.num_batches}]")
        walked = 0
        for bp in walk(self, start, int(stride), extents, windows, units):
            walked += len(bp.plans) if type(bp) is SharedStep else 1
            if walked >= INDEX_RELEASE_BATCHES:
                walked = 0
                self.index.release_pages()  # the offsets walked so far leave this process's RSS
            yield bp

    @property
    def batches_per_step(self) -> int:
        """Consecutive batches one read step covers (see :meth:`lirs.policies.Policy.batches_per_step`)."""
        return POLICIES[self.granularity].batches_per_step(self)

    def batch_order(self, k: int, pos: int) -> np.ndarray:
        """int64 (k,): the random order in which the batch starting at stream position ``pos``
        deals its k records (drawn from the batch stream at that counter)."""
        order = np.arange(k, dtype=np.int64)
        if k > 1:
            K.shuffle_inplace(order, np.uint64(self.batch_key), np.uint64(pos))
        return order

    # ---- whole-epoch views -----------------------------------------------------------------
    def order(self) -> np.ndarray:
        """int64 (size,): this rank's records in delivery order (no extents are built)."""
        out = np.empty(self.size, np.int64)
        o = 0
        for b in self.batches(extents=False):
            out[o:o + len(b.ids)] = b.ids
            o += len(b.ids)
        return out

    def stats(self) -> dict:
        """Batches, records, reads, bytes read, payload bytes and read amplification of the epoch
        (this rank), as planned: computed by walking the plan, without I/O."""
        if self._stats is None:
            reads = payload = records = 0
            sizes, ends = SizeCounts(), file_ends(self.index)
            for b in self.batches():
                records += len(b.ids)
                for s in b.new_steps:
                    reads += s.reads
                    payload += s.payload_bytes
                    sizes.add(s.extents_within(ends))  # as the Loader counts: not past a file's end
            bytes_read = sizes.total
            self._stats = {
                "granularity": self.granularity, "batch_size": self.batch_size, "batches": self.num_batches,
                "records": records, "units": self.units, "reads": reads, "bytes_read": bytes_read,
                "payload_bytes": payload, "amplification": bytes_read / payload if payload else None,
                "mean_read_bytes": sizes.mean(), "median_read_bytes": sizes.median(),
                "rank": self.rank, "world_size": self.world_size, "seed": self.seed, "epoch": self.epoch,
                "group_bytes": self.group_bytes if POLICIES[self.granularity].uses_group_bytes else None,
                # the groups a window holds: at most the data's, as `lirs quality` reports it
                "window": min(self.window, self.units) if POLICIES[self.granularity].uses_window else None,
                "permutation": self.perm.mode, "plan_table_bytes": self.nbytes, "plan_s": self.plan_s,
            }
        return dict(self._stats)


# --------------------------------------------------------------------------- the planner


def check_args(batch_size, granularity, group_bytes, window, rank, world_size, seed, epoch, block=BLOCK,
               permutation="auto", drop_last=False) -> None:
    """Raise UsageError naming the first argument that cannot work (a float or a string where an
    int is wanted included: never truncated)."""
    for name, value in (("batch_size", batch_size), ("group_bytes", group_bytes), ("rank", rank),
                        ("world_size", world_size), ("seed", seed), ("epoch", epoch)):
        whole(name, value, None)
    strict_bool("drop_last", drop_last)  # "False" is true to Python: it dropped the epoch's tail
    if int(batch_size) < 1:
        raise UsageError(f"batch_size must be >= 1, got {batch_size}")
    if granularity not in POLICIES:
        raise UsageError(f"granularity must be one of {', '.join(POLICIES)}, got {granularity!r}")
    pol = POLICIES[granularity]
    if pol.uses_group_bytes:
        if int(group_bytes) < block or int(group_bytes) % block:
            raise UsageError(f"group_bytes must be a positive multiple of {block}, got {group_bytes}")
        if int(group_bytes) > GROUP_BYTES_MAX:  # past int64 the planning kernels cannot take it
            raise UsageError(f"group_bytes must be at most 2**62 ({GROUP_BYTES_MAX}), got {group_bytes}: a "
                             f"group as large as the dataset already plans it as one")
    if pol.uses_window:
        window_groups(window, group_bytes, 1)  # raises on a spec that cannot work
    if int(world_size) < 1:
        raise UsageError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= int(rank) < int(world_size):
        raise UsageError(f"rank {rank} outside [0, {world_size})")
    if int(seed) < 0 or int(epoch) < 0:
        raise UsageError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    if permutation not in PERMUTATIONS:
        raise UsageError(f"permutation must be one of {', '.join(PERMUTATIONS)}, got {permutation!r}")


def plan_epoch(index, batch_size: int, granularity: str = DEFAULT_GRANULARITY, *, seed: int = 0, epoch: int = 0,
               rank: int = 0, world_size: int = 1, drop_last: bool = False, group_bytes: int = DEFAULT_GROUP_BYTES,
               window=DEFAULT_WINDOW, permutation: str = "auto", block: int = BLOCK,
               align: int | None = None) -> EpochPlan:
    """Plan epoch ``epoch`` of ``index`` for ``rank`` of ``world_size``: see the module docstring.

    ``window`` (granularity ``window``): a group count, a memory budget such as ``"64M"``, or a
    share of the data such as ``"5%"`` (see :func:`lirs.windows.window_groups`); the plan's
    ``window`` is the resulting group count.

    ``align`` (default ``block``): what the read steps' extents are aligned to; 1 (exact bytes)
    only for an engine whose reads are copies (:func:`lirs.engines.reads_are_copies`).

    Returns an :class:`EpochPlan`; nothing is read and no per-batch work is done until its
    batches are iterated.
    """
    check_args(batch_size, granularity, group_bytes, window, rank, world_size, seed, epoch, block, permutation, drop_last)
    if align not in (None, 1, block):
        raise UsageError(f"align must be 1 (reads that are copies) or the block ({block}), got {align!r}")
    t = time.perf_counter()
    ub = unit_bytes_of(granularity, group_bytes, block)
    ufirst = unit_table(index, ub)
    n_units = index.n if ufirst is None else len(ufirst) - 1
    window = window_groups(window, group_span(max(int(group_bytes), block), index.payload_bytes, index.n),
                           index.payload_bytes, index.n)  # a group count
    perm = Permutation(n_units, permutation, int(seed), int(epoch), seeds.PLAN_UNITS)
    nb, first, size = rank_slice(index.n, batch_size, rank, world_size, drop_last)
    return EpochPlan(index=index, batch_size=int(batch_size), granularity=granularity, seed=int(seed),
                     epoch=int(epoch), rank=int(rank), world_size=int(world_size), drop_last=bool(drop_last),
                     group_bytes=int(group_bytes), window=int(window), block=int(block), perm=perm,
                     ufirst=ufirst, num_batches=nb, first=first, size=size, plan_s=time.perf_counter() - t,
                     batch_key=seeds.key(seed, epoch, seeds.PLAN_BATCH),
                     window_key=seeds.key(seed, epoch, seeds.PLAN_WINDOW), align=int(block if align is None else align))
