"""The two passes of `lirs shuffle`.

Pass 1 (:func:`pass1`) deals every record to one of M piles on disk. Pass 2 (:class:`Pass2`) loads
one pile at a time, shuffles the start offsets of its records (Fisher-Yates) and hands the pile to
the output; a pile too big for the pile cap is dealt again into sub-piles first (fresh draws keyed
by the pile's path), never truncated, so the output stays a uniform permutation.

Seeds: ``seeds.key(seed, 0, SHUFFLE_PILES, spawn_key=path)`` keys the pile draws of the top level
(path ``()``) and of every re-split pile (its path of pile numbers); ``SHUFFLE_ORDER`` with the
final pile's path keys the order inside it.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from .. import seeds
from ..constants import BLOCK
from ..errors import LirsError, UsageError
from ..kernels import external as K
from ..kernels import plan as KP
from ..kernels import tfrecord as KT
from ..units import format_bytes, progress_bar
from .disk import alloc, read_all, round_up
from .formats import Dataset, Source
from .memory import MAX_DEPTH, OFFSET_BYTES, MemoryPlan, max_line
from .piles import Dealer, Piles
from .writer import Output


def _bar(total: int, desc: str, quiet: bool | None):
    """A byte progress bar; ``quiet`` None: shown only when stderr is a terminal."""
    return progress_bar(total, desc, None if quiet is None else not quiet)


def pass1(ds: Dataset, plan: MemoryPlan, pile_dir: str, seed: int, *, direct: bool, index: bool, pool=None,
          quiet: bool | None = None) -> tuple[Piles, np.ndarray]:
    """Deal every record of ``ds`` to ``plan.piles`` piles in ``pile_dir``.

    Returns the finished piles (files closed; ``counts``/``nbytes`` int64 (M,)) and the dealer's
    ``info``, int64 (3,): skipped lines, skipped bytes, added newlines. With ``index`` LIBSVM
    records are checked on the way (a syntax error stops the shuffle before any output).
    """
    block = BLOCK if direct else 1
    piles = Piles(pile_dir, "p", plan.piles, max(plan.write_buffer, ds.rr + block), direct)
    check = index and ds.fmt == "libsvm"
    try:
        with _bar(ds.in_bytes, "lirs shuffle pass 1", quiet) as bar:
            dealer = Dealer(ds.fmt, piles, seeds.key(seed, 0, seeds.SHUFFLE_PILES), plan.chunk,
                            skip_blank=(ds.fmt == "libsvm"), rs=ds.rs, ls=ds.ls,
                            validate=plan.validate_piece if check else 0,
                            max_record=max_line(plan, index and ds.text) if ds.variable else None,
                            bar=bar, memory=plan.memory, pool=pool)
            for s in ds.srcs:
                dealer.deal(s)
        piles.finish()
    except BaseException:
        piles.close()
        raise
    return piles, dealer.info


def pass2(piles: Piles, ds: Dataset, plan: MemoryPlan, seed: int, pile_dir: str, out: Output, *,
          max_piles: int, direct: bool, quiet: bool | None = None) -> Pass2:
    """Shuffle every pile into ``out``; returns the finished :class:`Pass2` (its statistics)."""
    with _bar(int(piles.nbytes.sum()), "lirs shuffle pass 2", quiet) as bar:
        run = Pass2(ds, plan, seed, pile_dir, out, bar, max_piles, direct)
        try:
            run.emit(piles)
        finally:
            run.close()
    return run


class Pass2:
    """Pass 2 over a set of piles (recursing into re-splits), and its statistics: ``splits`` (piles
    dealt again), ``split_bytes``, ``max_depth`` and ``peak_pile`` (most pass-2 pile bytes held)."""

    def __init__(self, ds: Dataset, plan: MemoryPlan, seed: int, pile_dir: str, out: Output, bar,
                 max_piles: int, direct: bool):
        self.fmt, self.plan, self.seed, self.pile_dir = ds.fmt, plan, seed, pile_dir
        self.direct = direct
        self.block = BLOCK if direct else 1
        self.out, self.bar = out, bar
        self.max_piles = max_piles
        self.rr = ds.rr
        self.splits = 0
        self.split_bytes = 0
        self.max_depth = 0
        self.peak_pile = 0
        self.loader = ThreadPoolExecutor(1)

    def _split(self, piles: Piles, j: int, path: tuple) -> Piles:
        """Deal pile ``j`` again into sub-piles (fresh draws keyed by its path)."""
        need = int(piles.nbytes[j]) + OFFSET_BYTES * int(piles.counts[j])
        m, w = self.plan.split_piles(need, self.max_piles)
        if self.rr:
            w = max(w, self.rr + self.block)
        name = "p" + ".".join(str(x) for x in path)
        sub = Piles(self.pile_dir, name, m, w, self.direct)
        try:
            # a pile holds whole lines (blank ones dropped already), whole TFRecord records, or
            # records with their labels
            key = seeds.key(self.seed, 0, seeds.SHUFFLE_PILES, spawn_key=path)
            fmt = self.fmt if self.rr or self.fmt == "tfrecord" else "lines"
            d = Dealer(fmt, sub, key, self.plan.chunk, rs=self.rr, ls=0)
            d.deal(Source(piles.paths[j], 0, int(piles.nbytes[j])))
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

    def _load(self, piles: Piles, j: int, path: tuple, buf: np.ndarray) -> np.ndarray:
        """Read pile ``j`` into ``buf`` and return its record starts (int64) in shuffled order."""
        r, nb = int(piles.counts[j]), int(piles.nbytes[j])
        read_all(piles.paths[j], nb, buf, self.block)
        os.unlink(piles.paths[j])
        offs = np.empty(r, np.int64)
        if self.rr:
            np.multiply(np.arange(r, dtype=np.int64), self.rr, out=offs)
        elif self.fmt == "tfrecord":
            k = KT.record_starts(buf, nb, offs)
            if k != r:
                raise LirsError(f"{piles.paths[j]}: pile holds {k} records, expected {r}")
        else:
            k = K.line_starts(buf, nb, offs)
            if k != r:
                raise LirsError(f"{piles.paths[j]}: pile holds {k} lines, expected {r}")
        key = seeds.key(self.seed, 0, seeds.SHUFFLE_ORDER, spawn_key=path)
        KP.shuffle_inplace(offs, np.uint64(key), np.uint64(0))
        return offs

    def emit(self, piles: Piles, path: tuple = (), depth: int = 0) -> None:
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
        room = [round_up(x, self.block) for x in nb]
        bufs = [None, None]   # the pile being written, the pile being read ahead
        ahead = None          # (future, slot) of js[i] when it was read ahead
        for i, j in enumerate(js):
            pj = path + (j,)
            if nb[j] + OFFSET_BYTES * r[j] > cap:
                bufs = [None, None]  # the re-split needs the memory of the pile buffers
                self._emit_split(piles, j, pj, depth)
                continue
            if ahead is not None:
                (fut, a), ahead = ahead, None
                offs = fut.result()
            else:
                a = 0
                bufs[1] = None
                if bufs[0] is None or bufs[0].size < room[j] or bufs[0].size + OFFSET_BYTES * r[j] > cap:
                    bufs[0] = None
                    bufs[0] = alloc(room[j], self.direct)
                offs = self._load(piles, j, pj, bufs[0])
            held = bufs[a].size + OFFSET_BYTES * r[j]
            if i + 1 < len(js):
                jn, o = js[i + 1], 1 - a
                size_o = bufs[o].size if bufs[o] is not None and bufs[o].size >= room[jn] else room[jn]
                both = held + size_o + OFFSET_BYTES * r[jn]
                if nb[jn] + OFFSET_BYTES * r[jn] <= cap and both <= cap:
                    if size_o != (bufs[o].size if bufs[o] is not None else -1):
                        bufs[o] = None
                        bufs[o] = alloc(size_o, self.direct)
                    ahead = (self.loader.submit(self._load, piles, jn, path + (jn,), bufs[o]), o)
                    held = both
                else:
                    bufs[o] = None
            self.peak_pile = max(self.peak_pile, held)
            self.out.put(bufs[a][:nb[j]], offs)
            del offs
            if self.bar is not None:
                self.bar.update(nb[j])

    def _emit_split(self, piles: Piles, j: int, path: tuple, depth: int) -> None:
        """Pile ``j`` does not fit the pile cap: deal it again into sub-piles and emit those."""
        r, nb = int(piles.counts[j]), int(piles.nbytes[j])
        if r == 1:
            raise UsageError(f"a record of {format_bytes(nb)} does not fit --memory "
                             f"{format_bytes(self.plan.memory)} with the buffers; raise --memory")
        if depth + 1 > MAX_DEPTH:
            need = nb + OFFSET_BYTES * r
            raise LirsError(f"pile {path} still needs {format_bytes(need)} after {MAX_DEPTH} re-splits; "
                            "raise --memory")
        sub = self._split(piles, j, path)
        os.unlink(piles.paths[j])
        self.emit(sub, path, depth + 1)

    def close(self) -> None:
        """Stop the read-ahead thread."""
        self.loader.shutdown(wait=True)
