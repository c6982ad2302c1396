"""The planning thread's rate while other threads hold the GIL in turns: this tree against another.

    python benchmarks/bench_plan_gil.py [--size 300MB] [--against TREE] [--threads 0,16]

On many cores a group epoch's rate is its planning thread's (16 cores: the consumer waited for
plans 75% of the time, the planner busy 93%, ``16cores/cores_gil.json``), while the pool's threads
hold the GIL in turns. Each kernel call that lets the GIL go must take it back, and with many
holders that is a wait. This measures the walk of an epoch's read steps (what the planning thread
does: ``EpochPlan.batches(extents=True, units=True)``) with K threads that each hold the GIL for H
microseconds in a C call that sleeps (``ctypes.PyDLL``: the GIL kept, no CPU used), then let it go
for S microseconds: the GIL's contention without taking the cores from the planner, so that a
2-core machine shows what many cores do to it. Each tree runs in a fresh process, in turns, the
median of its rounds kept. Writes benchmarks/results/plan_gil.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from _common import TREE, kdd_file, tree_python, write_result  # noqa: E402

_CHILD = r"""
import ctypes, json, sys, threading, time
from lirs.loader import Loader
from lirs.steps import SharedStep
path, gran, K, H, S, epochs = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
L = Loader(path, batch_size=1024, granularity=gran)
stop, held = [False], []
def holder():
    usleep, t0, h = ctypes.PyDLL(None).usleep, time.perf_counter(), 0.0
    while not stop[0]:
        t = time.perf_counter()
        usleep(H)  # the GIL kept through the call
        h += time.perf_counter() - t
        time.sleep(S * 1e-6)
    held.append(h / (time.perf_counter() - t0))
def walk(e):
    n = steps = 0
    for bp in L.plan(e).batches(0, extents=True, stride=1, units=True):
        n += sum(len(p.ids) for p in bp.plans) if type(bp) is SharedStep else len(bp.ids)
        steps += 1
    return n, steps
walk(0)  # kernels compiled, index pages in
ths = [threading.Thread(target=holder, daemon=True) for _ in range(K)]
for t in ths:
    t.start()
rates = []
for e in range(1, epochs + 1):
    t = time.perf_counter()
    n, steps = walk(e)
    rates.append(n / (time.perf_counter() - t))
stop[0] = True
for t in ths:
    t.join()
print(json.dumps({"records_per_s": sorted(rates)[len(rates) // 2], "steps": steps, "records": n,
                  "holders_gil_share": sum(held)}))
"""


def run(tree: str, path: str, gran: str, k: int, h: int, s: int, epochs: int) -> dict:
    out = subprocess.run(tree_python(_CHILD, path, gran, k, h, s, epochs, tree=tree), capture_output=True,
                         text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/tmp/lirs-plan-gil")
    ap.add_argument("--granularities", default="group,window")
    ap.add_argument("--threads", default="0,16", help="GIL-holding threads K, comma-separated")
    ap.add_argument("--hold-us", type=int, default=20, help="H: microseconds each holds the GIL")
    ap.add_argument("--gap-us", type=int, default=200, help="S: microseconds each then lets it go")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="turns of the trees, the median kept")
    ap.add_argument("--against", default=None, help="another lirs checkout, run the same way in turns")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    path = kdd_file(a.dir, a.size)
    trees = {"this": TREE, **({"against": os.path.abspath(a.against)} if a.against else {})}
    rows = []
    for gran in a.granularities.split(","):
        for k in map(int, a.threads.split(",")):
            runs = {name: [] for name in trees}
            for _ in range(a.rounds):
                for name, tree in trees.items():
                    runs[name].append(run(tree, path, gran, k, a.hold_us, a.gap_us, a.epochs))
            row = {"granularity": gran, "holders": k, "runs": runs,
                   **{f"{name}_records_per_s": statistics.median(r["records_per_s"] for r in rs)
                      for name, rs in runs.items()}}
            if a.against:
                row["this_vs_against"] = row["this_records_per_s"] / row["against_records_per_s"]
            rows.append(row)
            print(f"{gran:8s} K={k:2d}: " + ", ".join(f"{n} {row[f'{n}_records_per_s'] / 1e6:.2f}M records/s"
                                                     for n in trees)
                  + (f", this/against {row['this_vs_against']:.2f}" if a.against else ""), flush=True)
    res = {"command": "python " + " ".join([os.path.relpath(__file__, os.getcwd())] + (argv or sys.argv[1:])),
           "what": __doc__.split("\n\n")[1].replace("\n", " "), "note": a.note,
           "data": {"path": path, "bytes": os.path.getsize(path)}, "hold_us": a.hold_us, "gap_us": a.gap_us,
           "epochs": a.epochs, "rounds": a.rounds, "against": a.against, "rows": rows}
    print(write_result("plan_gil", res, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
