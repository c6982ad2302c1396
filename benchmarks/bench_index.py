"""Index build speed against the device, in one run on one file.

    python benchmarks/bench_index.py [--size 2GB] [--dir /work/scratch/bench] [--keep] [--mem-limit 1GB]

Measures, on a generated kdd-like LIBSVM file:
  * fio sequential read of the same file (1 MiB, O_DIRECT, io_uring, QD 16) — the device reference;
  * `lirs index` with a cold page cache (drop_caches, root only) → ratio to the fio run just before
    it, median over --repeats pairs (goal >= 0.9x);
  * `lirs index` with a warm page cache → GB/s (goal >= 1.5 GB/s);
  * CPU seconds per GB read of the cold runs: this process's (os.times, all threads) and the
    machine's (/proc/stat, kswapd and other processes included) — page-cache reads cost both;
  * with --mem-limit, the cold runs again inside a cgroup-v1 memory cgroup of that limit (root):
    the page cache can hold only that much, as for a file larger than RAM;
and writes benchmarks/results/index.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import ensure_file, drop_caches, fio_seq_read_bps, write_result  # noqa: E402


def busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def process_seconds() -> float:
    """CPU seconds (user + system) of this process, all threads."""
    t = os.times()
    return t.user + t.system


@contextlib.contextmanager
def memory_limit(nbytes: int):
    """Run the body with this process in a fresh cgroup-v1 memory cgroup of ``nbytes`` (root only):
    the page cache it fills is reclaimed once the cgroup holds ``nbytes``, as on a file larger than
    RAM. Pages charged before the move stay with the old cgroup."""
    with open("/proc/self/cgroup") as f:
        own = next(ln.split(":", 2)[2].strip() for ln in f if ln.split(":")[1] == "memory")
    parent = "/sys/fs/cgroup/memory" + own
    cg = os.path.join(parent, f"lirs-bench-index-{os.getpid()}")
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(nbytes))
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        try:
            yield
        finally:
            with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    finally:
        with contextlib.suppress(OSError):
            with open(os.path.join(cg, "memory.force_empty"), "w") as f:
                f.write("0")
        os.rmdir(cg)


def cold_runs(lirs, path: str, nbytes: int, repeats: int) -> dict:
    """``repeats`` pairs of (fio sequential read, cold-cache index build) on ``path``: the device's
    bandwidth varies from minute to minute on a shared host, so each build is compared with the fio
    run just before it. Medians over the pairs; CPU seconds per GB of the builds (best run)."""
    fio, bps, proc, busy = [], [], [], []
    for _ in range(repeats):
        fio.append(fio_seq_read_bps(path))
        drop_caches()
        p0, b0, t = process_seconds(), busy_seconds(), time.perf_counter()
        lirs.build_index(path, progress=False, full=True)
        bps.append(nbytes / (time.perf_counter() - t))
        proc.append((process_seconds() - p0) / (nbytes / 1e9))
        busy.append((busy_seconds() - b0) / (nbytes / 1e9))
    ratios = [b / f for b, f in zip(bps, fio)] if None not in fio else []
    return {"Bps": statistics.median(bps), "runs_Bps": bps, "fio_Bps": statistics.median(fio) if ratios else None,
            "fio_runs_Bps": fio, "vs_fio": statistics.median(ratios) if ratios else None, "runs_vs_fio": ratios,
            "process_cpu_s_per_GB": min(proc), "machine_cpu_s_per_GB": min(busy)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2GB")
    ap.add_argument("--dir", default="/work/scratch/bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--mem-limit", default=None,
                    help="also run the cold builds in a memory cgroup of this size (e.g. 1GB; root)")
    args = ap.parse_args(argv)

    import lirs
    from lirs.eval.gen import generate
    from lirs.units import parse_size

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "index-kdd.svm")
    size = parse_size(args.size)
    nbytes = ensure_file(path, size, lambda: generate("kdd", path, size=size, order="shuffled", seed=1,
                                                      progress=False))

    lirs.build_index(path, progress=False)  # compile/load kernels once, outside the timings

    cold = limited = None
    can_drop = drop_caches()
    if can_drop:
        cold = cold_runs(lirs, path, nbytes, args.repeats)
        if args.mem_limit:
            with memory_limit(parse_size(args.mem_limit)):
                limited = cold_runs(lirs, path, nbytes, args.repeats)
    warm = []
    lirs.build_index(path, progress=False, full=True)
    for _ in range(args.repeats):
        t = time.perf_counter()
        idx = lirs.build_index(path, progress=False, full=True)  # not the incremental reuse
        warm.append(nbytes / (time.perf_counter() - t))

    res = {
        "benchmark": "index",
        "command": "python benchmarks/bench_index.py " + " ".join(argv or sys.argv[1:]),
        "file": {"profile": "kdd", "bytes": nbytes, "records": idx.n},
        "fio_seq_read_Bps": cold["fio_Bps"] if cold else fio_seq_read_bps(path),
        "fio_seq_read_runs_Bps": cold["fio_runs_Bps"] if cold else [],
        "index_cold_Bps": cold["Bps"] if cold else None,
        "index_cold_runs_Bps": cold["runs_Bps"] if cold else [],
        "cold_vs_fio": cold["vs_fio"] if cold else None,
        "cold_runs_vs_fio": cold["runs_vs_fio"] if cold else [],
        "index_cold_process_cpu_s_per_GB": cold["process_cpu_s_per_GB"] if cold else None,
        "index_cold_machine_cpu_s_per_GB": cold["machine_cpu_s_per_GB"] if cold else None,
        "mem_limit": args.mem_limit,
        "index_cold_memlimit": limited,
        "cold_memlimit_vs_fio": limited["vs_fio"] if limited else None,
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
