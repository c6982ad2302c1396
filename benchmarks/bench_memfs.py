"""Which reads a Loader should make from a file held in memory (tmpfs, ramfs: ``/dev/shm``).

Since Linux 6.6 tmpfs accepts O_DIRECT, so probing for it no longer tells a file in memory from a
file on a device. With O_DIRECT there, each read is still a copy out of the page cache, but of
whole 4 KiB blocks around the records (an instance read of a 360-byte record copies 4 KiB or
more) instead of the records' own bytes. This runs, on a kdd-like LIBSVM file copied to
``--shm``, one epoch after another of each granularity with each of these engine settings, each
in a fresh process, the settings in turn (``--rounds`` rounds, the order reversed every other
round: a drifting machine affects them alike):

* ``buffered``: page-cache ``pread`` from a few threads (``engine="buffered"``);
* ``uring_copy``: io_uring without O_DIRECT (``engine="uring", direct=False``);
* ``uring_direct``: io_uring with O_DIRECT (``engine="uring", direct=True``);
* ``auto``: what a Loader opened with no engine argument chooses there (named in the row).

Per run: records/s and CPU microseconds per record (the process's user + system time) over
``--epochs`` epochs after one untimed epoch (median epoch kept). Per setting and granularity:
the medians over the rounds, and each setting's rate against ``buffered`` of the same round
(median ratio). Writes ``benchmarks/results/memfs_engines.json``.

    python benchmarks/bench_memfs.py --size 300MB --dir /tmp/memfs --shm /dev/shm/lirs-memfs
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import kdd_file, tree_python, write_result  # noqa: E402
from bench_cores import page_cache_copy  # noqa: E402

SETTINGS = {  # name -> Loader keywords
    "buffered": dict(engine="buffered"),
    "uring_copy": dict(engine="uring", direct=False),
    "uring_direct": dict(engine="uring", direct=True),
    "auto": dict(),
}

_CHILD = r"""
import json, resource, sys, time
import lirs
path, gran, kw, epochs, bs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ld = lirs.Loader(path, batch_size=bs, granularity=gran, seed=1, **kw)
for b in ld.epoch(0):
    pass
rows = []
for e in range(1, epochs + 1):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t, n = time.perf_counter(), 0
    for b in ld.epoch(e):
        n += len(b.ids)
    wall = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    rows.append((n / wall, cpu / n * 1e6))
eng = ld.engine
rows.sort()
mid = rows[len(rows) // 2]
print(json.dumps(dict(records_per_s=mid[0], cpu_us_per_record=mid[1], engine=eng.name, direct=bool(eng.direct),
                      reason=getattr(eng, "reason", ""), epochs=[r[0] for r in rows])))
"""


def run_one(path: str, gran: str, setting: str, epochs: int, batch_size: int) -> dict:
    out = subprocess.run(tree_python(_CHILD, path, gran, json.dumps(SETTINGS[setting]), epochs, batch_size),
                         capture_output=True, text=True, check=True, cwd="/")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/tmp/lirs-memfs", help="where the data file is generated")
    ap.add_argument("--shm", default="/dev/shm/lirs-memfs", help="its copy in memory (tmpfs)")
    ap.add_argument("--granularities", default="group,window,instance")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    grans = [g for g in args.granularities.split(",") if g]
    settings = [s for s in args.settings.split(",") if s]
    src = kdd_file(args.dir, args.size)
    path, how = page_cache_copy(src, args.shm)
    t0 = time.time()
    runs = {g: {s: [] for s in settings} for g in grans}
    for r in range(args.rounds):
        order = settings if r % 2 == 0 else settings[::-1]
        for g in grans:
            for s in order:
                got = run_one(path, g, s, args.epochs, args.batch_size)
                got["round"] = r + 1
                runs[g][s].append(got)
                print(f"round {r + 1} {g:8s} {s:12s} {got['engine']:8s} direct={got['direct']!s:5s} "
                      f"{got['records_per_s'] / 1e6:.2f}M rec/s {got['cpu_us_per_record']:.2f} us/rec", flush=True)
    summary = {}
    for g in grans:
        base = runs[g].get("buffered")
        summary[g] = {}
        for s in settings:
            rs = runs[g][s]
            row = dict(records_per_s=statistics.median(x["records_per_s"] for x in rs),
                       cpu_us_per_record=statistics.median(x["cpu_us_per_record"] for x in rs),
                       engine=rs[-1]["engine"], direct=rs[-1]["direct"])
            if base:
                row["vs_buffered"] = statistics.median(x["records_per_s"] / b["records_per_s"]
                                                       for x, b in zip(rs, base))
            summary[g][s] = row
    res = dict(what=__doc__.split("\n")[0], command="python benchmarks/bench_memfs.py " + " ".join(argv or sys.argv[1:]),
               data=dict(path=path, how=how, bytes=os.path.getsize(path), profile="kdd"),
               kernel=os.uname().release, batch_size=args.batch_size, rounds=args.rounds, epochs=args.epochs,
               settings=SETTINGS, summary=summary, runs=runs, seconds=time.time() - t0, note=args.note)
    print(write_result("memfs_engines", res, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
