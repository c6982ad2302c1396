"""The reference record orders lirs is compared with, in one place: BMF's block layout and block
order, and the order a shuffle buffer delivers.

The strategies (:mod:`lirs.eval.strategies`, orders only), the peers of ``lirs bench``
(:mod:`lirs.eval.peers`, real reads) and the SVM baselines (:mod:`lirs.eval.compare`, real
training) all draw these orders from here, with the seed purposes of :mod:`lirs.seeds`, so the
same ``(seed, epoch)`` gives the same order in all three.
"""
from __future__ import annotations

import numpy as np

from .. import seeds
from ..errors import UsageError
from .kernels import train as K
from .spans import take_rows


def shuffle_buffer_order(n: int, buffer_records: int, *, seed: int = 0, epoch: int = 0) -> np.ndarray:
    """int64 (n,): the order in which a shuffle buffer of ``buffer_records`` delivers a stream read
    in file order (records 0..n-1)."""
    if buffer_records < 1:
        raise UsageError(f"buffer_records must be >= 1, got {buffer_records}")
    u = seeds.rng(seed, epoch, seeds.BUFFER_SLOTS).random(n)
    out = np.empty(n, np.int64)
    K.shuffle_buffer_order(int(n), int(buffer_records), u, out)
    return out


def bmf_blocks(n: int, blocks: int, *, seed: int = 0) -> list:
    """BMF's one-off layout: every record assigned to one of ``blocks`` blocks at random; returns a
    list of ``blocks`` int64 arrays (the record IDs of each block, in file order)."""
    if blocks < 1:
        raise UsageError(f"blocks must be >= 1, got {blocks}")
    b = seeds.rng(seed, 0, seeds.BMF_LAYOUT).integers(0, blocks, n)
    order = np.argsort(b, kind="stable")
    cuts = np.searchsorted(b[order], np.arange(1, blocks))
    return [a.astype(np.int64) for a in np.split(order, cuts)]


def bmf_block_order(blocks: int, *, seed: int = 0, epoch: int = 0) -> np.ndarray:
    """The order in which BMF visits its blocks in ``epoch``: int64 (blocks,)."""
    return seeds.rng(seed, epoch, seeds.BMF_ORDER).permutation(blocks)


def buffer_batches(runs, order: np.ndarray, run_records: int, batch_size: int):
    """The batches a shuffle buffer delivers, built from the runs the file is read in.

    ``runs``: iterator of ``(X, y)``, the decoded runs of ``run_records`` consecutive records, in
    file order (``y`` float64 or None). ``order``: int64 (n,) from :func:`shuffle_buffer_order`.
    Yields ``(ids int64 (k,), X, y float64 (k,) or None)``.
    A run is read only when a batch first needs one of its records, and dropped once all its
    records have left the buffer: only live runs are held, as a real buffer would hold them.
    """
    live = {}  # run number -> [X, y, records of it not yet delivered]
    next_run = 0
    for s in range(0, len(order), batch_size):
        ids = order[s:s + batch_size]
        need = int(ids.max()) // run_records
        while next_run <= need:
            X, y = next(runs)
            live[next_run] = [X, y, X.shape[0] if hasattr(X, "shape") else len(X)]
            next_run += 1
        r = ids // run_records
        local = ids - r * run_records
        parts = []
        ys = np.empty(len(ids), np.float64) if live[int(r[0])][1] is not None else None
        for k in np.unique(r).tolist():
            sel = np.flatnonzero(r == k)
            X, y, _ = live[k]
            parts.append((X, local[sel], sel.astype(np.int64)))
            if ys is not None:
                ys[sel] = y[local[sel]]
            live[k][2] -= len(sel)
            if live[k][2] == 0:
                del live[k]
        yield ids, take_rows(parts, len(ids), parts[0][0]), ys
