"""`lirs gen` speed against a plain sequential write of the same size, in one run.

    python benchmarks/bench_gen.py [--size 1GB] [--dir /work/scratch/gen] [--others 200MB]

Measures, on the same filesystem in the same run:
  * `dd if=/dev/zero bs=1M` of the kdd file's size, once ending with fsync (`conv=fsync`) and once
    into the page cache only — the reference: the fastest the bytes could be written;
  * `lirs.eval.gen.generate("kdd", size=...)` with 1 and 2 formatting threads, shuffled, timed to the
    end of an fsync of the file and to the end of the call (page cache) → MB/s and ratio to dd;
  * the sorted order (one extra labels pass), and the other profiles at a smaller size;
  * for every lirs run also MB per CPU-second of the process (the per-core speed);
and writes benchmarks/results/gen.json. The machine may be shared: the 1-minute load average at
each step is recorded next to the figures.
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import write_result  # noqa: E402


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _dd(path: str, nbytes: int, fsync: bool) -> dict:
    count = -(-nbytes // (1 << 20))
    cmd = ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count}", "status=none"]
    if fsync:
        cmd.append("conv=fsync")
    os.sync()
    load = _load()
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    secs = time.perf_counter() - t
    size = os.path.getsize(path)
    os.unlink(path)
    return {"command": " ".join(cmd), "bytes": size, "seconds": round(secs, 3),
            "MB_per_s": round(size / secs / 1e6, 1), "load1": load}


def _gen(profile: str, path: str, size: int, *, workers: int, order: str = "shuffled", fsync: bool) -> dict:
    from lirs.eval.gen import generate

    os.sync()
    load = _load()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    res = generate(profile, path, size=size, order=order, seed=1, progress=False, workers=workers)
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    secs = time.perf_counter() - t
    ru2 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru2.ru_utime - ru.ru_utime) + (ru2.ru_stime - ru.ru_stime)
    for p in res["paths"]:
        os.unlink(p)
    return {"profile": profile, "order": order, "workers": workers, "fsync": fsync, "records": res["records"],
            "bytes": res["bytes"], "bytes_per_record": round(res["bytes"] / res["records"], 1),
            "seconds": round(secs, 3), "MB_per_s": round(res["bytes"] / secs / 1e6, 1),
            "cpu_seconds": round(cpu, 3), "MB_per_cpu_s": round(res["bytes"] / cpu / 1e6, 1), "load1": load}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1GB", help="kdd file size (default 1GB)")
    ap.add_argument("--others", default="200MB", help="size for the other profiles (default 200MB; 0 skips)")
    ap.add_argument("--dir", default="/work/scratch/gen")
    args = ap.parse_args(argv)

    from lirs.eval.gen import PROFILES, generate
    from lirs.units import parse_size

    os.makedirs(args.dir, exist_ok=True)
    size = parse_size(args.size)
    kdd = os.path.join(args.dir, "bench-kdd.svm")
    ref = os.path.join(args.dir, "bench-dd.bin")
    for prof in PROFILES:   # compile/load every kernel outside the timings
        generate(prof, os.path.join(args.dir, "warm"), records=64, order="sorted", progress=False)
        for p in (os.path.join(args.dir, "warm"), os.path.join(args.dir, "warm.labels.npy")):
            if os.path.exists(p):
                os.unlink(p)

    runs = {}
    runs["gen_w1_fsync"] = _gen("kdd", kdd, size, workers=1, fsync=True)
    nbytes = runs["gen_w1_fsync"]["bytes"]
    runs["dd_fsync"] = _dd(ref, nbytes, fsync=True)
    runs["gen_w2_fsync"] = _gen("kdd", kdd, size, workers=2, fsync=True)
    runs["dd_cache"] = _dd(ref, nbytes, fsync=False)
    runs["gen_w1_cache"] = _gen("kdd", kdd, size, workers=1, fsync=False)
    runs["gen_w2_cache"] = _gen("kdd", kdd, size, workers=2, fsync=False)
    runs["gen_w2_sorted_cache"] = _gen("kdd", kdd, size, workers=2, order="sorted", fsync=False)

    ratios = {
        "kdd_1thread_vs_dd_fsync": round(runs["gen_w1_fsync"]["MB_per_s"] / runs["dd_fsync"]["MB_per_s"], 3),
        "kdd_2threads_vs_dd_fsync": round(runs["gen_w2_fsync"]["MB_per_s"] / runs["dd_fsync"]["MB_per_s"], 3),
        "kdd_1thread_vs_dd_cache": round(runs["gen_w1_cache"]["MB_per_s"] / runs["dd_cache"]["MB_per_s"], 3),
        "kdd_2threads_vs_dd_cache": round(runs["gen_w2_cache"]["MB_per_s"] / runs["dd_cache"]["MB_per_s"], 3),
        "kdd_sorted_vs_shuffled_2threads": round(runs["gen_w2_sorted_cache"]["MB_per_s"]
                                                 / runs["gen_w2_cache"]["MB_per_s"], 3),
    }
    others = {}
    osize = parse_size(args.others)
    if osize > 0:
        for prof in PROFILES:
            if prof != "kdd":
                path = os.path.join(args.dir, f"bench-{prof}{PROFILES[prof]['ext']}")
                others[prof] = _gen(prof, path, osize, workers=2, fsync=False)

    res = {
        "command": "python benchmarks/bench_gen.py " + " ".join(
            shlex.quote(a) for a in ("--size", args.size, "--others", args.others, "--dir", args.dir)),
        "what": "lirs gen MB/s vs dd if=/dev/zero bs=1M of the same size on the same filesystem, same run",
        "kdd_bytes": nbytes,
        "ratios": ratios,
        "runs": runs,
        "other_profiles_page_cache": others,
        "note": "MB = 1e6 bytes. *_fsync: timed to the end of fsync; *_cache: to the end of the call "
                "(data in the page cache). load1 = 1-minute load average when the step began (shared CPU). "
                "MB_per_cpu_s = bytes / CPU seconds of this process (user+sys, all threads): the "
                "per-core speed, less sensitive to other load than wall-clock MB/s.",
    }
    out = write_result("gen", res)
    for k, v in ratios.items():
        print(f"{k:34s} {v}")
    for k, v in runs.items():
        per_cpu = f"  {v['MB_per_cpu_s']:.1f} MB per CPU-s" if "MB_per_cpu_s" in v else ""
        print(f"{k:34s} {v['MB_per_s']:8.1f} MB/s  load {v['load1']}{per_cpu}")
    for k, v in others.items():
        print(f"{k:34s} {v['MB_per_s']:8.1f} MB/s  {v['bytes_per_record']} B/record")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
