"""Joining a window batch's pieces in the main process of DataLoader workers: lirs's join against
``torch.cat``, on the same pieces, while the workers run.

In a window epoch with ``num_workers=W`` a batch whose rows lie in two workers' windows comes in
two pieces that the main process joins (``lirs.workers.join_outputs``: numpy on the consumer's
thread). The reference is the same join made with ``torch.cat`` (torch's intra-op threads), as
lirs made it before. Each join is made both ways on the same pieces, in alternating order, while
the workers read and decode the next windows; per epoch (the first, which starts the workers, not
counted) the joins' total time each way and the slowest join are written to
benchmarks/results/joins.json, with lirs's against the reference.

    python benchmarks/bench_joins.py --size 300MB --dir /dev/shm/lirs-joins --workers 2 --epochs 6
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import kdd_file, write_result  # noqa: E402


def torch_join(outs: list) -> dict:
    """The reference: the pieces' outputs (dicts, CSR X) joined with ``torch.cat``."""
    import torch

    Xs = [o["X"] for o in outs]
    crows, at = [Xs[0].crow_indices()[:1]], 0
    for X in Xs:
        c = X.crow_indices()
        crows.append(c[1:] + at)
        at += int(c[-1])
    X = torch.sparse_csr_tensor(torch.cat(crows), torch.cat([X.col_indices() for X in Xs]),
                                torch.cat([X.values() for X in Xs]),
                                size=(sum(int(X.shape[0]) for X in Xs), Xs[0].shape[1]), check_invariants=False)
    return {"ids": torch.cat([o["ids"] for o in outs]), "X": X, "y": torch.cat([o["y"] for o in outs])}


def run(path: str, workers: int, epochs: int, window: str) -> dict:
    import torch

    import lirs.workers as LW
    from lirs.torch import make_dataloader

    lirs_join, ms = LW.join_outputs, {"lirs": [], "torch_cat": []}

    def timed(outs):
        ways = [("lirs", lirs_join), ("torch_cat", torch_join)]
        got = {}
        for name, fn in ways if len(ms["lirs"]) % 2 == 0 else ways[::-1]:
            t = time.perf_counter()
            got[name] = fn(outs)
            ms[name].append(1e3 * (time.perf_counter() - t))
        a, b = got["lirs"], got["torch_cat"]
        if not (torch.equal(a["ids"], b["ids"]) and torch.equal(a["X"].values(), b["X"].values())):
            raise RuntimeError("the two joins differ")
        return a

    LW.join_outputs = timed  # put back below: a test runs this in its own process's lirs
    try:
        dl = make_dataloader(path, 1024, granularity="window", window=window, seed=0, num_workers=workers)
        for _ in dl:  # starts the workers: not counted
            pass
        per = []
        for _ in range(epochs):
            ms["lirs"].clear()
            ms["torch_cat"].clear()
            t = time.perf_counter()
            for _ in dl:
                pass
            per.append({"epoch_s": time.perf_counter() - t, "joins": len(ms["lirs"]),
                        **{f"{k}_ms": sum(v) for k, v in ms.items()},
                        **{f"{k}_slowest_ms": max(v, default=0.0) for k, v in ms.items()}})
        dl.dataset.close()
    finally:
        LW.join_outputs = lirs_join
    return {"epochs": per, "torch_threads": torch.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/dev/shm/lirs-joins")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--window", default="auto")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    path = kdd_file(a.dir, a.size)
    got = run(path, a.workers, a.epochs, a.window)
    med = {k: statistics.median(e[k] for e in got["epochs"])
           for k in ("epoch_s", "joins", "lirs_ms", "torch_cat_ms", "lirs_slowest_ms", "torch_cat_slowest_ms")}
    res = {"command": "python benchmarks/bench_joins.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "what": "joins of window batches' pieces in the main process of DataLoader workers, lirs's (numpy) and "
                   "torch.cat's on the same pieces, per epoch while the workers run",
           "data": {"path": path, "bytes": os.path.getsize(path)}, "workers": a.workers, "window": a.window,
           "note": a.note, **got, "median": med,
           "lirs_vs_torch_cat": {"join_ms_per_epoch": med["lirs_ms"] / max(med["torch_cat_ms"], 1e-9),
                                 "slowest_join": med["lirs_slowest_ms"] / max(med["torch_cat_slowest_ms"], 1e-9)}}
    out = write_result("joins", res, a.out)
    print(f"joins an epoch {med['joins']:.0f}: lirs {med['lirs_ms']:.1f} ms (slowest {med['lirs_slowest_ms']:.2f}), "
          f"torch.cat {med['torch_cat_ms']:.1f} ms (slowest {med['torch_cat_slowest_ms']:.2f}); epoch {med['epoch_s']:.2f} s")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
