"""What an asyncio consumer pays: ``Loader.aepoch`` against ``Loader.epoch``, the same epochs in one
process, taking turns, on a file held in memory (no device in the way); and the longest stretch
the event loop was kept from running (a ticker task's largest gap) while ``aepoch`` delivered.
With ``--against TREE`` the same for another checkout's lirs, in the same run.

    python benchmarks/bench_aepoch.py --dir /dev/shm/bench --size 300MB --against /tmp/base
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import TREE, kdd_file, tree_python, write_result  # noqa: E402

CHILD = r"""
import asyncio, json, sys, time
import lirs
path, gran, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"epoch_s": [], "aepoch_s": [], "loop_gap_max_s": []}
with lirs.Loader(path, 1024, granularity=gran, seed=0) as loader:
    for b in loader.epoch(99):  # kernels, pool and page cache warm before anything is timed
        pass

    async def consume(e):
        gap, stop = [0.0], [False]

        async def ticker():
            last = time.perf_counter()
            while not stop[0]:
                await asyncio.sleep(0)
                now = time.perf_counter()
                gap[0], last = max(gap[0], now - last), now
        t = asyncio.ensure_future(ticker())
        t0 = time.perf_counter()
        async for b in loader.aepoch(e):
            await asyncio.sleep(0)
        s = time.perf_counter() - t0
        stop[0] = True
        await t
        return s, gap[0]

    for r in range(repeat):
        t0 = time.perf_counter()
        for b in loader.epoch(r):
            pass
        out["epoch_s"].append(time.perf_counter() - t0)
        s, gap = asyncio.run(consume(r))
        out["aepoch_s"].append(s)
        out["loop_gap_max_s"].append(gap)
print(json.dumps(out))
"""


def measure(tree: str, path: str, gran: str, repeat: int) -> dict:
    r = subprocess.run(tree_python(CHILD, path, gran, repeat, tree=tree), capture_output=True, text=True, check=True)
    raw = json.loads(r.stdout.strip().splitlines()[-1])
    ratios = [a / e for a, e in zip(raw["aepoch_s"], raw["epoch_s"])]
    return dict(raw, aepoch_over_epoch=statistics.median(ratios), ratios=ratios,
                loop_gap_max_s_median=statistics.median(raw["loop_gap_max_s"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/dev/shm/lirs-bench-aepoch")
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--granularities", default="window,group")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--against", default=None, help="another lirs checkout, measured the same way in this run")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    path = kdd_file(a.dir, a.size)
    trees = {"this": TREE} | ({"against": os.path.abspath(a.against)} if a.against else {})
    res = {"command": "python benchmarks/bench_aepoch.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "what": "aepoch over epoch, same process, epochs in turns; the loop's largest gap during aepoch",
           "data": {"path": path, "bytes": os.path.getsize(path)}, "note": a.note, "trees": {}}
    for name, tree in trees.items():
        res["trees"][name] = {"tree": tree}
        for g in a.granularities.split(","):
            m = measure(tree, path, g, a.repeat)
            res["trees"][name][g] = m
            print(f"{name:8s} {g:8s} aepoch/epoch {m['aepoch_over_epoch']:.3f}  "
                  f"loop gap max {1e3 * m['loop_gap_max_s_median']:.1f} ms (median of {a.repeat})", flush=True)
    print(write_result("aepoch", res, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
