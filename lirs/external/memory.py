"""The memory plan of `lirs shuffle`: pile count, read chunks, buffer sizes and the pass-2 pile cap.

The plan has two parts. The *shape* (pile count M, pile cap, pile target, the caps of a re-split)
decides which records meet in which pile, hence the output bytes; it depends only on the input,
``memory`` and the open-file limit. The *buffers* (read chunk, write buffers, output buffers, the
room of the ``--index`` scans) never change the output (a record's pile is a function of its number
and the seed), so ``--index`` fits its scan arrays inside the buffers of the same shape: the output
is the same with and without ``--index``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..constants import BLOCK, FD_MARGIN
from ..engines.base import room_for_files
from ..errors import UsageError
from ..units import format_bytes, parse_size
from .disk import round_up

MAX_PILES = 1024               # piles written at once (one open file each); more data → re-splits
MAX_DEPTH = 24                 # re-split levels before giving up (each level at least halves a pile)
HEADROOM = 0.9                 # expected pile + 6 sd uses at most this share of the pile target
PILE_TARGET = 64 << 20         # piles beyond this size shuffle slower (page faults, TLB misses)
OFFSET_BYTES = 8               # pass 2 keeps one int64 start offset per record of the pile
SPARE_SLOTS = 2                # pile write-buffer slots beyond one per pile (dealing overlaps writing)
_MIN_CHUNK = 64 << 10
_MAX_CHUNK = 16 << 20
_MIN_WRITE_BUFFER = 16 << 10
_MAX_WRITE_BUFFER = 4 << 20    # large sequential pile writes, also on disks that seek
_MIN_OUT_BUFFER = 64 << 10
_MAX_OUT_BUFFER = 4 << 20      # below lirs.build's 4 MiB split threshold: one scan slot per buffer
_MIN_VALIDATE_PIECE = 16 << 10  # LIBSVM check of pass 1 (--index) scans pieces of about this size
_MAX_VALIDATE_PIECE = 1 << 20


@dataclass(frozen=True)
class MemoryPlan:
    """How ``memory`` bytes are split between the buffers of both passes (all sizes in bytes).

    Pass 1 holds ``2 * chunk`` (read ahead) + ``(piles + 2) * write_buffer`` (two spare slots let
    dealing overlap writing) + ``validate``; pass 2 holds at most ``pile_cap`` of piles (a pile's
    bytes + 8 per record; the next pile is read ahead only when both fit) + ``out_fixed`` (two
    output buffers, their label buffers and the index scan arrays). ``reserve`` is left for the
    rest of the process. A text line longer than ``chunk`` is assembled in memory (about twice its
    size) on top of this.
    """

    memory: int
    chunk: int
    write_buffer: int
    piles: int
    pile_cap: int
    out_buffer: int
    out_fixed: int
    validate: int
    validate_piece: int
    reserve: int
    target: int                # pass-2 bytes a pile is planned for: min(pile_cap, PILE_TARGET)
    expected_records: int      # records per pile expected (estimate)
    expected_pile: int         # pass-2 bytes of an expected pile (estimate)
    capped: bool = False       # fewer piles than the cap needs (open files, buffer room): re-splits

    @property
    def pass1_bytes(self) -> int:
        return 2 * self.chunk + (self.piles + SPARE_SLOTS) * self.write_buffer + self.validate

    @property
    def pass2_bytes(self) -> int:
        return self.pile_cap + self.out_fixed

    def split_piles(self, need: int, max_piles: int | None = None) -> tuple[int, int]:
        """Sub-piles and their write buffer to split a pile that needs ``need`` bytes in pass 2."""
        max_piles = max_piles or MAX_PILES
        m = max(2, math.ceil(need / (self.target * HEADROOM)) + 1)
        # 2 * chunk + validate is the same with and without --index: so is the sub-pile count
        room = self.memory - self.reserve - 2 * self.chunk - self.validate
        m = int(min(m, max_piles, max(2, room // _MIN_WRITE_BUFFER - SPARE_SLOTS)))
        w = int(min(_MAX_WRITE_BUFFER, room // (m + SPARE_SLOTS)))
        return m, w - w % BLOCK


def _clamp(x, lo, hi) -> int:
    return int(max(lo, min(hi, x)))


def _scan_bytes(out_buffer: int) -> int:
    """Index scan arrays of one output buffer: LIBSVM starts, labels and flags (17 B) for up to one
    record per 2 bytes; lines 8 B per byte."""
    return max(17 * (out_buffer // 2 + 2), 8 * (out_buffer + 1))


def _index_out_buffer(out_fixed: int, label_ratio: float) -> int:
    """The largest output buffer (a whole number of blocks) whose two buffers, labels and index
    scan arrays fit ``out_fixed``, the output room of the plan without an index."""
    ob = int((out_fixed - BLOCK) / (2.0 * (1.0 + label_ratio) + 8.5))
    ob -= ob % BLOCK
    while ob > BLOCK and int(2 * ob * (1.0 + label_ratio)) + _scan_bytes(ob) + BLOCK > out_fixed:
        ob -= BLOCK
    return ob


def _validate_room(chunk: int, piece: int) -> tuple[int, int, int]:
    """(chunk, piece, validate): the LIBSVM check of pass 1 takes its scan arrays (17 B per 2 bytes
    of a piece) out of the read-ahead, at most half of it, so that ``2 * chunk + validate`` stays
    what the plan without an index reads with."""
    piece = max(BLOCK, min(piece, 2 * (chunk // 17 - 2)))
    need = 17 * (piece // 2 + 2)
    smaller = chunk - (need + 1) // 2
    smaller -= smaller % BLOCK
    return smaller, piece, 2 * (chunk - smaller)


def plan_memory(input_bytes: int, mean_record_bytes: float, memory, *, record_bytes: int = 0,
                label_ratio: float = 0.0, index: bool = False, validate: bool = False,
                max_piles: int | None = None) -> MemoryPlan:
    """Choose read chunk, pile count M, write buffers and the pass-2 pile cap for ``memory`` bytes.

    ``input_bytes``: bytes the piles will hold (records plus labels); ``mean_record_bytes``: an
    estimate of the bytes per record in a pile; ``record_bytes``: the size of every pile record for
    fixed formats (0 for text); ``label_ratio``: label bytes per data byte in the output (``.npy``
    with labels); ``index``: room for the index scan of each output buffer; ``validate``: room for
    the LIBSVM check of pass 1. M is the smallest count whose expected pile, plus six standard
    deviations of its record count, fits ``HEADROOM`` of the pile target (the pile cap, or
    ``PILE_TARGET`` when smaller: smaller piles shuffle faster); it is capped by ``max_piles``
    (default ``MAX_PILES``, lowered to what the open-file limit allows), beyond which piles are
    split again in pass 2. ``index`` and ``validate`` only shrink buffers: M, the pile cap and the
    re-split caps (hence the output) do not depend on them. Raises :class:`UsageError` when
    ``memory`` cannot hold the buffers and one record.
    """
    mem = parse_size(memory)
    if mem <= 0:
        raise UsageError("--memory must be a positive size, like 2G")
    mean = max(1.0, float(mean_record_bytes))
    reserve = max(1 << 20, mem // 16)  # the interpreter, threads and small arrays outside the plan
    chunk = _clamp(mem // 16, _MIN_CHUNK, _MAX_CHUNK)
    if record_bytes:
        chunk = max(chunk, record_bytes)
    # O_DIRECT writes leave up to a block behind in a buffer: slots hold a record plus a block
    wmin = max(_MIN_WRITE_BUFFER, round_up(record_bytes + BLOCK, BLOCK)) if record_bytes else _MIN_WRITE_BUFFER
    out_buf = _clamp(mem // 32, _MIN_OUT_BUFFER, _MAX_OUT_BUFFER)
    if record_bytes:
        out_buf = max(out_buf, round_up(record_bytes + 2 * BLOCK, BLOCK))
    # two output buffers and their labels, and the block a pile read rounds up to
    out_fixed = int(2 * out_buf * (1.0 + label_ratio)) + BLOCK
    pile_cap = mem - reserve - out_fixed
    room1 = mem - reserve - 2 * chunk
    smallest = max(64 << 10, record_bytes + OFFSET_BYTES)
    slots = 2 + SPARE_SLOTS  # write buffers of the smallest split (two piles)
    if pile_cap < smallest or room1 < slots * wmin:
        need = max(reserve + out_fixed + smallest, reserve + 2 * chunk + slots * wmin)
        raise UsageError(f"--memory {format_bytes(mem)} is too small to hold one record plus the buffers "
                         f"of both passes; use at least {format_bytes(need * 1.05)}")
    per_record = mean + OFFSET_BYTES
    target = int(min(pile_cap, PILE_TARGET))
    capacity = target * HEADROOM / per_record          # records a pile is planned to hold
    # largest mu with mu + 6 sqrt(mu) <= capacity
    root = (-6.0 + math.sqrt(36.0 + 4.0 * capacity)) / 2.0
    mu = max(1.0, root * root)
    n_est = max(1.0, input_bytes / mean)
    cap_piles = max(2, min(max_piles or MAX_PILES, room1 // wmin - SPARE_SLOTS))
    want = max(1, math.ceil(n_est / mu))
    m = int(min(cap_piles, want))
    w = int(min(_MAX_WRITE_BUFFER, room1 // (m + SPARE_SLOTS)))
    w -= w % BLOCK
    # the buffers of --index, inside the shape above
    piece = _clamp(mem // 256, _MIN_VALIDATE_PIECE, _MAX_VALIDATE_PIECE)
    val = 0
    if validate:
        chunk, piece, val = _validate_room(chunk, piece)
    if index:
        out_buf = _index_out_buffer(out_fixed, label_ratio)
    exp_records = math.ceil(n_est / m)
    return MemoryPlan(memory=mem, chunk=chunk, write_buffer=w, piles=m, pile_cap=int(pile_cap),
                      out_buffer=out_buf, out_fixed=out_fixed, validate=val, validate_piece=piece,
                      reserve=reserve, target=target,
                      expected_records=exp_records, expected_pile=int(exp_records * per_record),
                      capped=want > m)


def fd_pile_limit() -> int:
    """Piles that may be open at once under the soft open-file limit (raised toward the hard limit
    when that helps), leaving room for the rest of the process."""
    soft = room_for_files(MAX_PILES)
    if soft is None:
        return MAX_PILES
    return int(max(2, min(MAX_PILES, soft - FD_MARGIN)))


def max_line(plan: MemoryPlan, index: bool) -> int:
    """Longest text record the plan can shuffle: it must fit a pile alone, and with ``index`` a
    line longer than the output buffer is also scanned whole (about 8.5 bytes per byte)."""
    if index:
        return int((plan.pile_cap - OFFSET_BYTES) / 9.5)
    return plan.pile_cap - OFFSET_BYTES
