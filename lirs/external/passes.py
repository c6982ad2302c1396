"""Pass 2 of `lirs shuffle`: load, shuffle and write each pile; split again piles that are too big."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..constants import BLOCK
from ..engines import aligned_empty
from ..errors import LirsError, UsageError
from ..kernels import external as K
from ..kernels import plan as KP
from ..units import format_bytes
from .disk import _read_all
from .formats import _Source
from .memory import _OFFSET_BYTES, MAX_DEPTH
from .piles import _Dealer, _Piles
from .writer import _Output

# SeedSequence([seed, 0, purpose], spawn_key=pile path) purposes of this module
PURPOSE_PILES = 0x5301   # the pile of every record (top level and re-splits)
PURPOSE_ORDER = 0x5302   # the order of the records inside each final pile


def _key(seed: int, purpose: int, path: tuple) -> int:
    ss = np.random.SeedSequence([seed, 0, purpose], spawn_key=tuple(int(x) for x in path))
    return int(ss.generate_state(1, np.uint64)[0])


class _Run:
    """State of one shuffle: plan, pile directory, stats; pass 2 recursion over piles."""

    def __init__(self, fmt, plan, seed, pile_dir, out: _Output, rs, ls, bar, max_piles, direct):
        self.fmt, self.plan, self.seed, self.pile_dir = fmt, plan, seed, pile_dir
        self.direct = direct
        self.block = BLOCK if direct else 1
        self.out, self.bar = out, bar
        self.max_piles = max_piles
        self.rr = (rs or 0) + (ls or 0)
        self.splits = 0
        self.split_bytes = 0
        self.max_depth = 0
        self.peak_pile = 0
        self.loader = ThreadPoolExecutor(1)

    def _split(self, piles: _Piles, j: int, path: tuple) -> _Piles:
        """Deal pile ``j`` again into sub-piles (fresh draws keyed by its path)."""
        need = int(piles.nbytes[j]) + _OFFSET_BYTES * int(piles.counts[j])
        m, w = self.plan.split_piles(need, self.max_piles)
        if self.rr:
            w = max(w, self.rr + self.block)
        name = "p" + ".".join(str(x) for x in path)
        sub = _Piles(self.pile_dir, name, m, w, self.direct)
        try:
            d = _Dealer(self.fmt if self.rr else "lines", sub, _key(self.seed, PURPOSE_PILES, path), self.plan.chunk,
                        rs=self.rr, ls=0)
            d.deal(_Source(piles.paths[j], 0, int(piles.nbytes[j])))
            sub.finish()
        except BaseException:
            sub.close()
            raise
        if int(sub.counts.sum()) != int(piles.counts[j]):
            raise LirsError(f"{piles.paths[j]}: re-split found {int(sub.counts.sum())} records, "
                            f"expected {int(piles.counts[j])}")
        self.splits += 1
        self.split_bytes += int(piles.nbytes[j])
        return sub

    def _alloc(self, nbytes: int) -> np.ndarray:
        return aligned_empty(nbytes) if self.direct else np.empty(nbytes, np.uint8)

    def _load(self, piles: _Piles, j: int, path: tuple, buf: np.ndarray) -> np.ndarray:
        """Read pile ``j`` into ``buf`` and return its record starts (int64) in shuffled order."""
        r, nb = int(piles.counts[j]), int(piles.nbytes[j])
        _read_all(piles.paths[j], nb, buf, self.block)
        os.unlink(piles.paths[j])
        offs = np.empty(r, np.int64)
        if self.rr:
            np.multiply(np.arange(r, dtype=np.int64), self.rr, out=offs)
        else:
            k = K.line_starts(buf, nb, offs)
            if k != r:
                raise LirsError(f"{piles.paths[j]}: pile holds {k} lines, expected {r}")
        KP.shuffle_inplace(offs, np.uint64(_key(self.seed, PURPOSE_ORDER, path)), np.uint64(0))
        return offs

    def emit(self, piles: _Piles, path: tuple = (), depth: int = 0) -> None:
        """Pass 2 over ``piles`` in order: shuffle each in RAM, or split it again when too big.

        While a pile is written, the next one is read and shuffled on the loader thread when both
        fit the pile cap together.
        """
        self.max_depth = max(self.max_depth, depth)
        cap = self.plan.pile_cap
        js = []
        for j in range(piles.m):
            if piles.counts[j]:
                js.append(j)
            else:
                os.unlink(piles.paths[j])
        r = [int(x) for x in piles.counts]
        nb = [int(x) for x in piles.nbytes]
        room = [-(-x // self.block) * self.block for x in nb]
        bufs = [None, None]   # the pile being written, the pile being read ahead
        ahead = None          # (future, slot) of js[i] when it was read ahead
        for i, j in enumerate(js):
            pj = path + (j,)
            need = nb[j] + _OFFSET_BYTES * r[j]
            if need > cap:
                if r[j] == 1:
                    raise UsageError(f"a record of {format_bytes(nb[j])} does not fit --memory "
                                     f"{format_bytes(self.plan.memory)} with the buffers; raise --memory")
                if depth + 1 > MAX_DEPTH:
                    raise LirsError(f"pile {pj} still needs {format_bytes(need)} after {MAX_DEPTH} re-splits; "
                                    "raise --memory")
                bufs = [None, None]
                sub = self._split(piles, j, pj)
                os.unlink(piles.paths[j])
                self.emit(sub, pj, depth + 1)
                continue
            if ahead is not None:
                (fut, a), ahead = ahead, None
                offs = fut.result()
            else:
                a = 0
                bufs[1] = None
                if bufs[0] is None or bufs[0].size < room[j] or bufs[0].size + _OFFSET_BYTES * r[j] > cap:
                    bufs[0] = None
                    bufs[0] = self._alloc(room[j])
                offs = self._load(piles, j, pj, bufs[0])
            held = bufs[a].size + _OFFSET_BYTES * r[j]
            if i + 1 < len(js):
                jn, o = js[i + 1], 1 - a
                size_o = bufs[o].size if bufs[o] is not None and bufs[o].size >= room[jn] else room[jn]
                both = held + size_o + _OFFSET_BYTES * r[jn]
                if nb[jn] + _OFFSET_BYTES * r[jn] <= cap and both <= cap:
                    if size_o != (bufs[o].size if bufs[o] is not None else -1):
                        bufs[o] = None
                        bufs[o] = self._alloc(size_o)
                    ahead = (self.loader.submit(self._load, piles, jn, path + (jn,), bufs[o]), o)
                    held = both
                else:
                    bufs[o] = None
            self.peak_pile = max(self.peak_pile, held)
            self.out.put(bufs[a][:nb[j]], offs)
            del offs
            if self.bar is not None:
                self.bar.update(nb[j])

    def close(self) -> None:
        self.loader.shutdown(wait=True)
