"""Index build speed against the device, in one run on one file.

    python benchmarks/bench_index.py [--size 2GB] [--dir /work/scratch/bench] [--keep]

Measures, on a generated kdd-like LIBSVM file:
  * fio sequential read of the same file (1 MiB, O_DIRECT, io_uring, QD 16) — the device reference;
  * `lirs index` with a cold page cache (drop_caches, root only) → ratio to fio (goal >= 0.9x);
  * `lirs index` with a warm page cache → GB/s (goal >= 1.5 GB/s);
and writes benchmarks/results/index.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import ensure_file, drop_caches, fio_seq_read_bps, write_result  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2GB")
    ap.add_argument("--dir", default="/work/scratch/bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args(argv)

    import lirs
    from lirs.eval.gen import generate
    from lirs.units import parse_size

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "index-kdd.svm")
    size = parse_size(args.size)
    nbytes = ensure_file(path, size, lambda: generate("kdd", path, size=size, order="shuffled", seed=1,
                                                      progress=False))

    fio_bps = fio_seq_read_bps(path)
    lirs.build_index(path, progress=False)  # compile/load kernels once, outside the timings

    cold = []
    can_drop = drop_caches()
    if can_drop:
        for _ in range(args.repeats):
            drop_caches()
            t = time.perf_counter()
            lirs.build_index(path, progress=False)
            cold.append(nbytes / (time.perf_counter() - t))
    warm = []
    lirs.build_index(path, progress=False)
    for _ in range(args.repeats):
        t = time.perf_counter()
        idx = lirs.build_index(path, progress=False)
        warm.append(nbytes / (time.perf_counter() - t))

    res = {
        "benchmark": "index",
        "command": "python benchmarks/bench_index.py " + " ".join(argv or sys.argv[1:]),
        "file": {"profile": "kdd", "bytes": nbytes, "records": idx.n},
        "fio_seq_read_Bps": fio_bps,
        "index_cold_Bps": max(cold) if cold else None,
        "index_cold_runs_Bps": cold,
        "cold_vs_fio": (max(cold) / fio_bps) if cold and fio_bps else None,
        "index_warm_Bps": max(warm),
        "index_warm_runs_Bps": warm,
        "goals": {"cold_vs_fio": 0.9, "index_warm_Bps": 1.5e9},
        "notes": [] if can_drop else ["not root: no cold-cache runs"],
    }
    write_result("index", res)
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("runs_Bps")}, indent=2))
    if not args.keep:
        for p in (path, path + ".lirs"):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
