"""What a window's memory costs: epoch time and peak memory of granularity ``window`` at several
memory budgets, against granularity ``group`` (the same reads, no window) measured in the same run.

Each configuration runs in a fresh process (its peak RSS is its own), warm page cache, median of
``--repeat`` epochs with CSR decoding; the baseline process opens the index and the Loader and plans
an epoch without reading, so ``rss_over_baseline`` is what the epoch's buffers and decoded windows
hold. Writes ``benchmarks/results/window.json``.

    python benchmarks/bench_window.py --size 500MB --dir /tmp/benchwin
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
from _common import kdd_file, machine, tree_python, write_result  # noqa: E402

WINDOWS = ("1M", "4M", "16M", "64M", "256M")

_CHILD = r"""
import json, resource, sys, time
import lirs
from lirs.cores import usable_cores
from lirs.policies import windows_in_flight
path, gran, window, batch, repeat, read = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
kw = {"window": window} if gran == "window" else {}
with lirs.Loader(path, batch, granularity=gran, **kw) as ld:
    ld.plan(0)
    times = []
    for e in range(repeat if read else 0):
        t = time.perf_counter()
        n = sum(len(b.ids) for b in ld.epoch(e))
        times.append(time.perf_counter() - t)
    st = ld.stats.as_dict()
    eng = ld.engine if read else None
    held = windows_in_flight(eng.direct, usable_cores()) if eng is not None and gran == "window" else None
    out = {"epoch_s": times, "groups": ld.window, "records": ld.index.n, "engine": eng and eng.name,
           "windows_in_flight": held,
           "payload_bytes": ld.index.payload_bytes, "amplification": st.get("amplification"),
           "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
print(json.dumps(out))
"""


def run_child(path, gran, window, batch, repeat, read=True) -> dict:
    r = subprocess.run(tree_python(_CHILD, path, gran, window, batch, repeat, "1" if read else "0"),
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="500MB")
    ap.add_argument("--dir", default="/tmp/benchwin")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--windows", default=",".join(WINDOWS))
    args = ap.parse_args()
    path = kdd_file(args.dir, args.size)
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    base = run_child(path, "window", "64M", args.batch_size, 0, read=False)
    rows = []
    group = run_child(path, "group", "1", args.batch_size, args.repeat)
    group_s = statistics.median(group["epoch_s"])
    rows.append({"config": "group-64K", "window": None, **_row(group, base, group_s)})
    for w in args.windows.split(","):
        r = run_child(path, "window", w, args.batch_size, args.repeat)
        rows.append({"config": f"window-{w}", "window": w, "window_bytes": r["groups"] * 65536,
                     **_row(r, base, group_s)})
        print(f"{rows[-1]['config']:>14}: {rows[-1]['epoch_s']:.2f} s ({rows[-1]['vs_group']:.2f}x group), "
              f"RSS +{rows[-1]['rss_over_baseline'] / 2**20:.0f} MiB", flush=True)
    res = {"command": "python benchmarks/bench_window.py " + " ".join(sys.argv[1:]),
           "data": {"profile": "kdd", "path": path, "bytes": os.path.getsize(path), "records": base["records"]},
           "batch_size": args.batch_size, "repeat": args.repeat, "baseline_rss": base["peak_rss"],
           "what": "epoch with CSR decoding, warm cache, median of repeat; vs_group = group epoch_s / this "
                   "epoch_s (same run); rss_over_baseline = peak RSS minus a process that planned without reading",
           "rows": rows, "machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(write_result("window", res))
    return 0


def _row(r: dict, base: dict, group_s: float) -> dict:
    s = statistics.median(r["epoch_s"])
    return {"groups": r["groups"], "epoch_s": s, "epoch_s_all": r["epoch_s"], "vs_group": group_s / s,
            "mb_per_s": r["payload_bytes"] / s / 1e6, "amplification": r["amplification"],
            "peak_rss": r["peak_rss"], "rss_over_baseline": r["peak_rss"] - base["peak_rss"],
            "engine": r.get("engine"), "windows_in_flight": r.get("windows_in_flight")}


if __name__ == "__main__":
    sys.exit(main())
