"""What a default window costs where records are tiny: peak memory and epoch time of the default
``window="auto"`` over a ``.npy`` of 1-byte records (token IDs), against the window that the same
16 MiB budget gave by bytes alone (its group count passed as ``window=``), in the same run.

Each configuration runs in a fresh process (its peak RSS is its own), warm page cache, one epoch
each; the baseline process opens the index and the Loader and plans an epoch without reading, so
``rss_over_baseline`` is what the epoch held. Writes ``benchmarks/results/tiny_records.json``.

    python benchmarks/bench_tiny.py --mib 64 --dir /tmp/benchtiny
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine, tree_python, write_result  # noqa: E402

_CHILD = r"""
import json, resource, sys, time
import lirs
path, window, batch, read = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
kw = {} if window == "auto" else {"window": int(window)}
with lirs.Loader(path, batch, engine="buffered", seed=1, **kw) as ld:
    plan = ld.plan(0)
    t, n = time.perf_counter(), 0
    if read:
        n = sum(len(b.ids) for b in ld.epoch(0))
    out = {"epoch_s": time.perf_counter() - t, "records_read": n, "groups": ld.window,
           "records": ld.index.n, "payload_bytes": ld.index.payload_bytes,
           "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
print(json.dumps(out))
"""


def run_child(path: str, window: str, batch: int, read: bool = True) -> dict:
    r = subprocess.run(tree_python(_CHILD, path, window, batch, "1" if read else "0"),
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def tiny_npy(directory: str, mib: int) -> str:
    """A seeded .npy of ``mib`` MiB of uint8 records, indexed."""
    import lirs

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"u1_{mib}M.npy")
    if not os.path.exists(path + ".lirs"):
        np.save(path, np.random.default_rng(5).integers(0, 255, mib << 20, dtype=np.uint8))
        lirs.build_index(path, progress=False)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--dir", default="/tmp/benchtiny")
    ap.add_argument("--batch-size", type=int, default=1024)
    args = ap.parse_args()
    from lirs.constants import DEFAULT_GROUP_BYTES
    from lirs.windows import group_span, window_groups

    path = tiny_npy(args.dir, args.mib)
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    base = run_child(path, "auto", args.batch_size, read=False)
    by_bytes = window_groups("auto", group_span(DEFAULT_GROUP_BYTES, base["payload_bytes"], base["records"]),
                             base["payload_bytes"])  # the auto window before records were counted
    rows = {}
    for name, window in (("auto", "auto"), ("by_bytes", str(by_bytes))):
        r = run_child(path, window, args.batch_size)
        assert r["records_read"] == r["records"], r
        r["window_records"] = r["groups"] * DEFAULT_GROUP_BYTES * r["records"] // r["payload_bytes"]
        r["rss_over_baseline"] = r["peak_rss"] - base["peak_rss"]
        rows[name] = r
        print(f"{name:>9}: {r['groups']} groups ({r['window_records']:,} records), epoch {r['epoch_s']:.2f} s, "
              f"RSS +{r['rss_over_baseline'] / 2**20:.0f} MiB", flush=True)
    a, b = rows["auto"], rows["by_bytes"]
    res = {"command": "python benchmarks/bench_tiny.py " + " ".join(sys.argv[1:]),
           "data": {"kind": ".npy of uint8 records", "path": path, "bytes": os.path.getsize(path),
                    "records": base["records"]},
           "batch_size": args.batch_size, "baseline_rss": base["peak_rss"], "rows": rows,
           "peak_rss_by_bytes_over_auto": b["peak_rss"] / a["peak_rss"],
           "epoch_s_auto_over_by_bytes": a["epoch_s"] / b["epoch_s"],
           "rss_per_window_record_by_bytes": b["rss_over_baseline"] / b["window_records"],
           "what": "one epoch each, engine buffered, warm cache, fresh process; rss_over_baseline = peak RSS "
                   "minus a process that planned without reading (0: the epoch peaked no higher than opening the "
                   "data and planning did); by_bytes = the window the 16 MiB auto "
                   "budget gave before records were counted (its group count passed as window=)",
           "machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(write_result("tiny_records", res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
