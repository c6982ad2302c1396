"""Incremental `lirs index` against a full one, in one run on one file.

    python benchmarks/bench_incremental.py [--size 300MB] [--append 0.01] [--repeats 3] [--dir /work/scratch/bench]

On a generated kdd-like LIBSVM file: per repeat, the file is cut back to its generated length and
fully indexed (timed: `full`), then ``--append`` of its size is appended (whole lines taken from its
start) and indexed again incrementally (timed: `incremental`: every old byte checked against its
per-MiB checksum, only the tail scanned). The incremental sidecar is compared byte for byte with a
full re-index of the appended file. Also timed: `lirs index --check` of a touched file (a full
checksum verification). Goal: incremental <= 0.2x full. Writes benchmarks/results/incremental.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import ensure_file, write_result  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--append", type=float, default=0.01, help="fraction of the file appended (default 0.01)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/work/scratch/bench")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args(argv)

    import lirs
    from lirs.eval.gen import generate
    from lirs.index import revalidate
    from lirs.units import parse_size

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "incremental-kdd.svm")
    size = parse_size(args.size)
    nbytes = ensure_file(path, size, lambda: generate("kdd", path, size=size, order="shuffled", seed=3,
                                                      progress=False))
    with open(path, "rb") as f:
        head = f.read(int(nbytes * args.append) + (1 << 20))
    tail = head[:head.rindex(b"\n", 0, int(nbytes * args.append)) + 1]  # whole lines

    # compile/load the kernels of both paths once, outside the timings
    lirs.build_index(path, progress=False, full=True)
    with open(path, "ab") as f:
        f.write(tail)
    lirs.build_index(path, progress=False)
    full, inc, check = [], [], []
    for _ in range(args.repeats):
        os.truncate(path, nbytes)
        t = time.perf_counter()
        lirs.build_index(path, progress=False, full=True)
        full.append(time.perf_counter() - t)
        with open(path, "ab") as f:
            f.write(tail)
        t = time.perf_counter()
        idx = lirs.build_index(path, progress=False)
        inc.append(time.perf_counter() - t)
        os.utime(path)  # touched: --check reads every byte against its checksum
        t = time.perf_counter()
        revalidate(path)
        check.append(time.perf_counter() - t)
    got = open(path + ".lirs", "rb").read()
    lirs.build_index(path, progress=False, full=True)
    same = got == open(path + ".lirs", "rb").read()

    res = {
        "benchmark": "incremental",
        "command": "python benchmarks/bench_incremental.py " + " ".join(argv or sys.argv[1:]),
        "file": {"profile": "kdd", "bytes": nbytes, "appended_bytes": len(tail), "records": idx.n},
        "full_index_s": statistics.median(full), "full_index_runs_s": full,
        "incremental_index_s": statistics.median(inc), "incremental_index_runs_s": inc,
        "incremental_vs_full": statistics.median(inc) / statistics.median(full),
        "check_touched_s": statistics.median(check), "check_touched_runs_s": check,
        "check_touched_Bps": (nbytes + len(tail)) / statistics.median(check),
        "sidecar_byte_equal_to_full": same,
        "goals": {"incremental_vs_full": 0.2},
        "notes": ["page cache warm (the file was just written): the checksum check reads through it"],
    }
    write_result("incremental", res)
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("runs_s")}, indent=2))
    if not args.keep:
        for p in (path, path + ".lirs"):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
