"""Random permutations of ``[0, n)`` for the planner: a stored table or a stateless bijection.

``table``: a Fisher–Yates permutation stored in the smallest unsigned dtype that fits.
``stateless``: the unit at any position computed on demand with a keyed Feistel network and
cycle walking — no table of the unit count, so any rank computes its own slice of 10**9 records.
``auto``: a table up to 2**20 units (4 MiB at most), stateless beyond. Up to 2**16 units both
modes draw a table (128 KiB at most): a Feistel network over so few bits reaches a biased set of
permutations (a chi-square over the orders of 4 units rejects it). Beyond, ``stateless`` is a keyed
pseudo-random permutation, not an exactly uniform draw.
"""
from __future__ import annotations

import math

import numpy as np

from . import seeds
from .errors import UsageError
from .kernels import plan as K

PERMUTATIONS = ("auto", "table", "stateless")
AUTO_TABLE_MAX_UNITS = 1 << 20
STATELESS_TABLE_MAX_UNITS = 1 << 16  # a stateless permutation of at most this many units is a table
FEISTEL_ROUNDS = 6
_CHUNK = 1 << 16     # units walked per kernel call in stateless mode


def _smallest_uint(n: int):
    for dt in (np.uint8, np.uint16, np.uint32):
        if n - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


class Permutation:
    """A random permutation of ``[0, n)``: ``table`` (stored) or ``stateless`` (computed).

    ``take(p0, p1)`` returns the units at positions ``p0 .. p1-1`` (uint or int64 array).
    """

    def __init__(self, n: int, mode: str, seed: int, epoch: int, purpose: int = seeds.PLAN_UNITS):
        self.n = int(n)
        if mode == "auto":
            mode = "table" if self.n <= AUTO_TABLE_MAX_UNITS else "stateless"
        self.mode = mode
        ss = seeds.seq(seed, epoch, purpose)
        if mode == "table" or (mode == "stateless" and self.n <= STATELESS_TABLE_MAX_UNITS):
            self.table = np.empty(self.n, _smallest_uint(max(self.n, 1)))
            K.fisher_yates_table(self.table, np.uint64(ss.generate_state(1, np.uint64)[0]))
            self.keys = None
            self.half = 0
        elif mode == "stateless":
            self.table = None
            bits = max(2, int(math.ceil(math.log2(max(self.n, 2)))))
            bits += bits % 2
            self.half = bits // 2
            self.keys = ss.generate_state(FEISTEL_ROUNDS, np.uint64)
        else:
            raise UsageError(f"permutation must be one of {', '.join(PERMUTATIONS)}, got {mode!r}")

    def take(self, p0: int, p1: int) -> np.ndarray:
        p0, p1 = max(0, int(p0)), min(self.n, int(p1))
        if p1 <= p0:
            return np.empty(0, np.int64)
        if self.table is not None:
            return self.table[p0:p1]
        out = np.empty(p1 - p0, np.int64)
        K.feistel_range(self.keys, self.half, self.n, p0, out)
        return out

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes) if self.table is not None else int(self.keys.nbytes)

    def chunks(self, p0: int, size: int = _CHUNK):
        """Yield (position, units) chunks from position ``p0`` to the end."""
        p = int(p0)
        if self.table is not None:
            size = max(size, self.n)  # a table is already in memory: one chunk
        while p < self.n:
            q = min(self.n, p + size)
            yield p, self.take(p, q)
            p = q
