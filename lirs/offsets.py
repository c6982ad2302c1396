"""The compact offset table: record start offsets in about 4 bytes per record instead of 8."""
from __future__ import annotations

import os

import numpy as np

from .errors import IndexFormatError

OFFSET_SHIFT = 10                  # records per offset block: 1 << OFFSET_SHIFT
OFFSET_BLOCK = 1 << OFFSET_SHIFT
_U32_SPAN = 1 << 32


class OffsetTable:
    """Record start offsets in about 4 B/record instead of 8.

    Record ``i`` belongs to block ``b = i >> 10``. ``base[b] >= 0``: the offset is ``base[b] +
    rel[i]`` (``base[b]`` is the smallest start of the block, ``rel`` uint32). ``base[b] < 0``: the
    block spans 4 GiB or more (records of megabytes); its offsets are stored whole in ``wide``, at
    ``(-base[b] - 1) * 1024 + (i & 1023)``.

    Indexing with an int gives an int; with a slice or an integer array, int64 offsets.
    ``base`` int64 (ceil(n/1024),), ``rel`` uint32 (n,), ``wide`` int64 (1024 * wide blocks,).
    ``rel_file``: where ``rel`` lies when it is a memory map of a sidecar, ``(file, byte offset)``
    with ``file`` a :class:`lirs.sidecar.ArrayFile` of the same file: the planner reads the few
    offsets a read step needs from it with pread instead of touching the map (None otherwise;
    not pickled).
    """

    __slots__ = ("base", "rel", "wide", "rel_file")

    def __init__(self, base, rel, wide=None, rel_file=None):
        self.base = base
        self.rel = rel
        self.wide = np.empty(0, np.int64) if wide is None else wide
        self.rel_file = rel_file

    def __getstate__(self):
        return self.base, self.rel, self.wide

    def __setstate__(self, state):
        self.base, self.rel, self.wide = state
        self.rel_file = None

    @classmethod
    def from_array(cls, offsets) -> "OffsetTable":
        """Compact an int64 (n,) array of offsets."""
        enc = OffsetEncoder()
        rel = enc.encode(np.ascontiguousarray(offsets, np.int64), final=True)
        return cls(enc.bases(), rel, enc.wides())

    def __len__(self) -> int:
        return int(self.rel.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.base.nbytes + self.rel.nbytes + self.wide.nbytes)

    def _gather(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        b = np.asarray(self.base)[ids >> OFFSET_SHIFT]
        out = b + np.asarray(self.rel)[ids].astype(np.int64)
        wide = b < 0
        if wide.any():
            out[wide] = np.asarray(self.wide)[(-b[wide] - 1) * OFFSET_BLOCK + (ids[wide] & (OFFSET_BLOCK - 1))]
        return out

    def __getitem__(self, key):
        n = len(self)
        if isinstance(key, slice):
            a, b, step = key.indices(n)
            return self._gather(np.arange(a, b, step, dtype=np.int64))
        if np.ndim(key) == 0:
            i = int(key)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"record {key} outside [0, {n})")
            return int(self._gather(np.array([i]))[0])
        ids = np.asarray(key, np.int64)
        return self._gather(np.where(ids < 0, ids + n, ids))

    def to_array(self) -> np.ndarray:
        """All offsets as int64 (n,) (8 B/record: for whole-table work, in chunks if n is large)."""
        out = np.empty(len(self), np.int64)
        step = 1 << 24
        for a in range(0, len(self), step):
            out[a:a + step] = self[a:a + step]
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.to_array()
        return a if dtype is None else a.astype(dtype)


class OffsetEncoder:
    """Streams int64 offsets into the compact form: uint32 ``rel`` comes out as blocks complete;
    the per-block ``base`` and the rare wide blocks stay in memory (8 B per 1024 records)."""

    def __init__(self):
        self.carry = np.empty(0, np.int64)
        self._bases: list = []
        self._wides: list = []
        self.nwide = 0

    def encode(self, offsets: np.ndarray, final: bool = False) -> np.ndarray:
        """uint32 rel of the offsets completed by this call (all of them when ``final``)."""
        a = np.concatenate([self.carry, offsets]) if self.carry.size else offsets
        full = (a.size // OFFSET_BLOCK) * OFFSET_BLOCK
        cut = a.size if final else full
        self.carry = a[cut:].copy()
        if cut == 0:
            return np.empty(0, np.uint32)
        from .kernels.plan import compact_blocks

        a = np.ascontiguousarray(a[:cut], np.int64)
        nb = (cut + OFFSET_BLOCK - 1) // OFFSET_BLOCK
        lo, span, rel = np.empty(nb, np.int64), np.empty(nb, np.int64), np.empty(cut, np.uint32)
        compact_blocks(a, lo, span, rel)  # one pass per block, in native code
        for r in np.flatnonzero(span >= _U32_SPAN):  # a block of 4 GiB or more: its offsets whole
            w = np.zeros(OFFSET_BLOCK, np.int64)
            row = a[r * OFFSET_BLOCK:(r + 1) * OFFSET_BLOCK]
            w[:row.size] = row
            self._wides.append(w)
            self.nwide += 1
            lo[r] = -self.nwide
            rel[r * OFFSET_BLOCK:r * OFFSET_BLOCK + row.size] = 0
        self._bases.append(lo)
        return rel

    def take_blocks(self, bases: np.ndarray) -> None:
        """Take whole blocks already compacted (their ``rel`` words written by the caller as they
        are): ``bases`` int64 (k,), none of them wide; the stream must be at a block boundary."""
        if self.carry.size or (bases < 0).any():
            raise ValueError("compacted blocks are taken whole, at a block boundary, and never wide")
        self._bases.append(np.array(bases, np.int64))

    def bases(self) -> np.ndarray:
        return np.concatenate(self._bases) if self._bases else np.empty(0, np.int64)

    def wides(self) -> np.ndarray:
        return np.concatenate(self._wides) if self._wides else np.empty(0, np.int64)


def offset_arrays(offsets):
    """(base, rel, wide) of an OffsetTable or a plain int64 array (compacted on the fly), for kernels."""
    if not isinstance(offsets, OffsetTable):
        offsets = OffsetTable.from_array(offsets)
    return (np.asarray(offsets.base, np.int64), np.asarray(offsets.rel, np.uint32),
            np.asarray(offsets.wide, np.int64))


def index_read_error(path: str, err: int) -> Exception:
    """The error of a failed read of the offset table in sidecar ``path``: ``err`` an errno, or -1
    when the file ended before the table (it was truncated after it was opened); -2: the offsets
    scratch was found too small (a lirs bug: its bound is :meth:`EpochPlan._extents`'s)."""
    if err == -2:
        return RuntimeError("lirs: the offsets scratch of a read step is smaller than its offsets (a bug)")
    if err < 0:
        return IndexFormatError(f"{path}: the index ends before its offset table does (truncated after it was "
                                f"opened?); re-run `lirs index`")
    return OSError(err, f"reading the offset table of the index failed: {os.strerror(err)}", path)
