"""Cold start: time to the first batch, and a first `lirs epoch`, with an empty numba cache.

    python benchmarks/bench_coldstart.py [--size 4MB] [--dir /tmp/lirs-coldstart] [--repeats 1]

Generates a small kdd-like LIBSVM file and indexes it (outside the timings), then runs, each in a
fresh Python process:
  * cold: ``NUMBA_CACHE_DIR`` set to a new empty directory — every kernel is compiled (JIT);
  * warm: the same directory again — every kernel is loaded from the cache;
  * cold without the warm-up helper (``LIRS_WARMUP=0``): this process compiles every kernel itself;
for (a) a script that opens ``lirs.Loader(path, 1024, granularity="window")`` and takes the first
batch of epoch 0 (wall from process start, and the compile time of each kernel, from numba's
compile events), and (b) ``python -m lirs.cli epoch PATH`` (wall of the whole process).
Writes benchmarks/results/coldstart.json; the goal is a first batch in <= 5 s cold.

    python benchmarks/bench_coldstart.py --dataloader 0,2 [--size 20MB] [--repeats 3]

times instead a fresh process's first batch of ``lirs.torch.make_dataloader`` with each number of
workers, cold and warm (benchmarks/results/coldstart_dataloader.json). The children import the lirs
that PYTHONPATH names (they start outside any checkout), so one script times two trees in turns.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import write_result  # noqa: E402
from bench_decode import generate_kdd_like, parse_size  # noqa: E402

# Runs in the child: everything after the interpreter started is timed by the parent too.
_FIRST_BATCH = r"""
import json, sys, time
t0 = time.perf_counter()
from numba.core import event
compiles = []

depth = [0]

class Rec(event.Listener):
    def on_start(self, ev):
        ev.data["t0"] = time.perf_counter()
        depth[0] += 1

    def on_end(self, ev):
        depth[0] -= 1
        f = ev.data["dispatcher"].py_func
        compiles.append([f.__module__ + "." + f.__qualname__, time.perf_counter() - ev.data["t0"],
                         depth[0] == 0])

event.register("numba:compile", Rec())
import lirs
t1 = time.perf_counter()
with lirs.Loader(sys.argv[1], 1024, granularity="window", seed=0) as loader:
    b = next(iter(loader.epoch(0)))
    t2 = time.perf_counter()
    c2 = time.process_time()
    n = len(b.y) + sum(len(x.y) for x in loader.epoch(0))
t3 = time.perf_counter()
json.dump({"import_s": t1 - t0, "first_batch_s": t2 - t0, "first_batch_cpu_s": c2, "epoch_s": t3 - t0, "records": n,
           "compiles": compiles}, sys.stdout)
"""


# Runs in the child: the first batch of a DataLoader with argv[2] workers (the fork happens inside).
_DATALOADER_FIRST = r"""
import json, sys, time
t0 = time.perf_counter()
from lirs.torch import make_dataloader
dl = make_dataloader(sys.argv[1], 1024, num_workers=int(sys.argv[2]), granularity="window", seed=0)
it = iter(dl)
next(it)
t1 = time.perf_counter()
import lirs
json.dump({"first_batch_s": t1 - t0, "lirs": lirs.__file__}, sys.stdout)
"""


def _child(args, cache_dir, env_extra=None, cwd=None):
    """Run ``python args`` with a given numba cache; returns (wall seconds, stdout)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, **(env_extra or {}))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True, cwd=cwd)
    return time.perf_counter() - t0, out.stdout


def _top_compiles(compiles, n=8):
    """Outermost compiled functions by compile time (each figure includes the callees it compiled)."""
    top = sorted((c for c in compiles if c[2]), key=lambda c: -c[1])[:n]
    return [{"kernel": c[0], "seconds": round(c[1], 3)} for c in top]


def first_batch(path, cache_dir, env_extra=None):
    wall, out = _child(["-c", _FIRST_BATCH, path], cache_dir, env_extra)
    r = json.loads(out)
    return {"process_wall_s": wall, "import_s": r["import_s"], "first_batch_s": r["first_batch_s"],
            "first_batch_cpu_s": r["first_batch_cpu_s"],
            "epoch_s": r["epoch_s"], "records": r["records"], "kernels_compiled": len(r["compiles"]),
            "compile_s": _top_level_sum(r["compiles"]), "slowest": _top_compiles(r["compiles"])}


def dataloader_first(path, cache_dir, workers: int):
    """Seconds from a fresh process's first line to the first batch of ``make_dataloader`` with
    ``workers`` workers (window granularity), and the process's whole wall."""
    # the child starts in the temporary folder: with -c, its working directory comes first in
    # sys.path, and a checkout's would shadow the lirs that PYTHONPATH names
    wall, out = _child(["-c", _DATALOADER_FIRST, path, str(workers)], cache_dir, cwd=tempfile.gettempdir())
    return {"process_wall_s": wall, **json.loads(out)}


def dataloader_runs(path, workers: list, repeats: int) -> tuple[dict, str]:
    """({"wW": {"cold": [seconds...], "warm": [...]}}, the folder of the lirs the children
    imported): in turns, each cold run on a new empty cache and its warm run on that cache again."""
    runs = {f"w{w}": {"cold": [], "warm": []} for w in workers}
    for _ in range(repeats):
        for w in workers:
            with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
                for kind in ("cold", "warm"):
                    r = dataloader_first(path, cache, w)
                    runs[f"w{w}"][kind].append(r["first_batch_s"])
                    lirs_dir = os.path.dirname(r["lirs"])  # the lirs the children imported
            print(f"num_workers={w}: cold {runs[f'w{w}']['cold'][-1]:.2f} s, "
                  f"warm {runs[f'w{w}']['warm'][-1]:.2f} s", file=sys.stderr)
    return runs, lirs_dir


def _top_level_sum(compiles):
    """Seconds spent compiling: events nest (a kernel's time covers the callees it compiled), so
    only the outermost ones are summed."""
    return sum(c[1] for c in compiles if c[2])


def lirs_epoch(path, cache_dir):
    wall, _ = _child(["-m", "lirs.cli", "epoch", path, "--granularity", "window", "--json"], cache_dir)
    return {"process_wall_s": wall}


def generate_long_values(path, records=20000, seed=0):
    """kdd-like records whose values are written with 17 significant digits (``repr``): every
    record needs the full kernels (correctly rounded long mantissas), not the plain ones."""
    import numpy as np
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(records):
            idx = np.unique(rng.integers(1, 20_000_000, 30))
            f.write(("+1" if rng.random() < 0.5 else "-1") + " "
                    + " ".join(f"{a}:{rng.random()!r}" for a in idx.tolist()) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4MB")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "lirs-coldstart"))
    ap.add_argument("--repeats", type=int, default=1, help="cold/warm pairs (the median is kept)")
    ap.add_argument("--dataloader", default="", help="comma-separated num_workers: only the first batch of "
                    "make_dataloader (lirs.torch) cold and warm, into coldstart_dataloader.json (or --json)")
    ap.add_argument("--json", default=None, help="result file name (default coldstart / coldstart_dataloader)")
    args = ap.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "cold-kdd.svm")
    long_path = os.path.join(args.dir, "cold-long-values.svm")
    if not os.path.exists(path):
        generate_kdd_like(path, parse_size(args.size))
    if not os.path.exists(long_path):
        generate_long_values(long_path)
    with tempfile.TemporaryDirectory() as warm_cache:  # the index build's kernels, outside timings
        for p in (path, long_path):
            if not os.path.exists(p + ".lirs"):
                _child(["-m", "lirs.cli", "index", p], warm_cache)

    if args.dataloader:
        return _dataloader_main(args, argv, path)
    runs = {"first_batch": {"cold": [], "warm": []}, "lirs_epoch": {"cold": [], "warm": []}}
    alone = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            alone.append(first_batch(path, cache, {"LIRS_WARMUP": "0"}))
        for name, fn in (("first_batch", first_batch), ("lirs_epoch", lirs_epoch)):
            with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
                runs[name]["cold"].append(fn(path, cache))
                runs[name]["warm"].append(fn(path, cache))
            print(f"{name}: cold {runs[name]['cold'][-1]['process_wall_s']:.2f} s, "
                  f"warm {runs[name]['warm'][-1]['process_wall_s']:.2f} s", file=sys.stderr)

    long_runs = {"cold": [], "warm": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            long_runs["cold"].append(first_batch(long_path, cache))
            long_runs["warm"].append(first_batch(long_path, cache))

    def median_run(lst, key):
        return sorted(lst, key=lambda r: r[key])[len(lst) // 2]

    fb_cold = median_run(runs["first_batch"]["cold"], "first_batch_s")
    fb_warm = median_run(runs["first_batch"]["warm"], "first_batch_s")
    ep_cold = median_run(runs["lirs_epoch"]["cold"], "process_wall_s")
    ep_warm = median_run(runs["lirs_epoch"]["warm"], "process_wall_s")
    res = {
        "command": "python benchmarks/bench_coldstart.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "file": {"bytes": os.path.getsize(path), "generator": "generate_kdd_like (bench_decode, seed 0)"},
        "method": "each figure a fresh process; cold = NUMBA_CACHE_DIR a new empty directory, warm = the "
                  "same directory again; first batch timed from the child's first line (import included); "
                  "compile figures count this process only (the warm-up helper compiles the read and decode "
                  "kernels in its own process meanwhile)",
        "repeats": args.repeats,
        "first_batch": {"cold": fb_cold, "warm": fb_warm,
                        "cold_over_warm": fb_cold["first_batch_s"] / fb_warm["first_batch_s"],
                        "cold_without_helper": median_run(alone, "first_batch_s")},
        "first_batch_long_values": {
            "file": "17-digit values (repr): the full kernels are compiled too",
            "cold": median_run(long_runs["cold"], "first_batch_s"),
            "warm": median_run(long_runs["warm"], "first_batch_s")},
        "lirs_epoch": {"cold_s": ep_cold["process_wall_s"], "warm_s": ep_warm["process_wall_s"],
                       "cold_over_warm": ep_cold["process_wall_s"] / ep_warm["process_wall_s"]},
        "goal": "first batch <= 5 s with an empty numba cache",
        "goal_met": fb_cold["first_batch_s"] <= 5.0,
        "load_average_at_end": os.getloadavg()[0],
    }
    print(write_result(args.json or "coldstart", res))
    return 0


def _dataloader_main(args, argv, path) -> int:
    import statistics
    workers = [int(w) for w in args.dataloader.split(",")]
    runs, lirs_dir = dataloader_runs(path, workers, args.repeats)
    res = {
        "command": "python benchmarks/bench_coldstart.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "file": {"bytes": os.path.getsize(path), "generator": "generate_kdd_like (bench_decode, seed 0)"},
        "lirs": lirs_dir,
        "method": "each figure a fresh process: seconds from its first line to the first batch of "
                  "make_dataloader(path, 1024, num_workers=W, granularity='window') (imports, the "
                  "workers' start and their kernels included); cold = NUMBA_CACHE_DIR a new empty "
                  "directory, warm = the same directory again; the worker counts in turns",
        "repeats": args.repeats, "runs": runs,
        "median_first_batch_s": {w: {k: statistics.median(v) for k, v in r.items()} for w, r in runs.items()},
        "load_average_at_end": os.getloadavg()[0],
    }
    print(write_result(args.json or "coldstart_dataloader", res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
