"""How the loader scales with cores: one epoch per granularity under ``taskset`` on 1, 2, ... all
cores (the pool sizes itself by the affinity mask), LIBSVM with CSR decoding, warm cache.

For each core count: epoch seconds, records/s, the consumer's stall (seconds it waited for a
batch: the loader, not the training step, was the bottleneck), and the speed-up over one core
measured in the same run. Writes ``benchmarks/results/cores.json``.

    python benchmarks/bench_cores.py --size 300MB --dir /tmp/benchwin
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
from _common import kdd_file, machine, write_result  # noqa: E402

_CHILD = r"""
import json, sys, time
import lirs
path, gran, batch, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out = []
with lirs.Loader(path, batch, granularity=gran) as ld:
    next(iter(ld.epoch(99)))  # start the pool and compile before timing
    for e in range(repeat):
        ld.stats.reset()
        t = time.perf_counter()
        n = sum(len(b.ids) for b in ld.epoch(e))
        s = time.perf_counter() - t
        st = ld.stats.as_dict()
        out.append({"epoch_s": s, "records": n, "wait_s": st["wait_s"], "decode_s": st["decode_s"],
                    "io_s": st["io_s"], "workers": ld._pipeline.workers})
print(json.dumps(out))
"""


def core_sets() -> list[list[int]]:
    cores = sorted(os.sched_getaffinity(0))
    counts = sorted({1, 2, 4, 8, 16, len(cores)} & set(range(1, len(cores) + 1)))
    return [cores[:c] for c in counts]


def run(path, gran, cpus, batch, repeat) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(len(cpus)))
    cmd = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-c", _CHILD, path, gran, str(batch), str(repeat)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    best = min(rows, key=lambda x: x["epoch_s"])
    med = statistics.median(x["epoch_s"] for x in rows)
    return {"cores": len(cpus), "workers": best["workers"], "epoch_s": med, "records_per_s": best["records"] / med,
            "stall_s": statistics.median(x["wait_s"] for x in rows),
            "stall_share": statistics.median(x["wait_s"] / x["epoch_s"] for x in rows),
            "decode_s": best["decode_s"], "io_s": best["io_s"], "runs": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/tmp/benchwin")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--granularities", default="group,window")
    args = ap.parse_args()
    path = kdd_file(args.dir, args.size)
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    rows = []
    for gran in args.granularities.split(","):
        one = None
        for cpus in core_sets():
            r = {"granularity": gran, **run(path, gran, cpus, args.batch_size, args.repeat)}
            one = one or r["records_per_s"]
            r["speedup_vs_1_core"] = r["records_per_s"] / one
            rows.append(r)
            print(f"{gran:>7} on {r['cores']:>2} cores ({r['workers']} threads): {r['epoch_s']:.2f} s, "
                  f"{r['records_per_s'] / 1e3:.0f}k rec/s, x{r['speedup_vs_1_core']:.2f} of 1 core, "
                  f"stall {r['stall_share']:.0%}", flush=True)
    res = {"command": "python benchmarks/bench_cores.py " + " ".join(sys.argv[1:]),
           "data": {"profile": "kdd", "path": path, "bytes": os.path.getsize(path)},
           "batch_size": args.batch_size, "repeat": args.repeat,
           "what": "an epoch with CSR decoding and no training step, warm cache, under taskset; stall = time "
                   "the consumer waited for batches; speedup = records/s over the 1-core run of the same run",
           "rows": rows, "machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(write_result("cores", res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
