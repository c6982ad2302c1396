"""The Python work of an epoch per batch, counted (not timed): this tree against another.

    python benchmarks/bench_work.py [--size 50MB] [--dir /tmp/lirs-work] [--against TREE]

Every Python step of the pipeline holds the GIL, and on a read step's path each one costs more
than it does alone: the step's bytes have just gone through the caches (a call that takes 1.5 us
warm took 12 us after a 16 MB copy here, ad hoc). So the GIL's share of an epoch follows the
Python work per batch, which this counts exactly, in a fresh process per tree and granularity: a
kdd-like file in /dev/shm (engine ``buffered``, batch 1024), one untimed epoch, then one epoch
counted under ``sys.settrace`` / ``sys.setprofile`` in every thread (the consumer's, the pool's,
the planning thread's): bytecodes executed, Python calls and C calls (numpy's, numba's
dispatchers, builtins) per batch, and the functions executing the most bytecodes. Timing does not
enter; only a pool thread that polls for idle cores (every ``EXTRA_POLL_S``) adds a few bytecodes
that vary from run to run (``--repeat`` runs each, the median kept).

``--against TREE``: another checkout of lirs (a worktree of an earlier commit), counted the same
way by its own lirs; the JSON then has both and the ratios this / that. Writes
benchmarks/results/work.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from _common import TREE, kdd_file, tree_python, write_result  # noqa: E402

GRANULARITIES = ("group", "instance", "window")
METRICS = ("bytecodes", "python_calls", "c_calls")

_CHILD = r"""
import collections, json, subprocess, sys, threading
path, gran, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
on = [False]
n = collections.Counter()
by_fn = collections.Counter()

def count(frame, event, arg):
    if event == "opcode" and on[0]:
        n["bytecodes"] += 1
        c = frame.f_code
        by_fn[c.co_name + " (" + "/".join(c.co_filename.rsplit("/", 2)[-2:]) + ")"] += 1
    return count

def trace(frame, event, arg):
    frame.f_trace_opcodes = True
    return count

def profile(frame, event, arg):
    if on[0] and event in ("call", "c_call"):
        n["python_calls" if event == "call" else "c_calls"] += 1

threading.settrace(trace)
threading.setprofile(profile)
import lirs
commit = subprocess.run(["git", "-C", lirs.__path__[0], "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip() or None
workers = int(sys.argv[4])
if workers:
    # make_dataloader's workers, persistent: each counts in every thread while the shared flag is
    # up (the second pass) and sends its counts home as it exits
    import multiprocessing, multiprocessing.util, os
    from lirs.torch import make_dataloader
    flag, got = multiprocessing.Value("i", 0), multiprocessing.Queue()

    def counted(frame, event, arg):
        on[0] = flag.value == 1
        return count(frame, event, arg)

    def traced(frame, event, arg):
        frame.f_trace_opcodes = True
        return counted

    def checked(frame, event, arg):
        on[0] = flag.value == 1
        return profile(frame, event, arg)

    def init(w):
        threading.settrace(traced); threading.setprofile(checked)
        sys.settrace(traced); sys.setprofile(checked)
        multiprocessing.util.Finalize(None, lambda: got.put((dict(n), dict(by_fn))), exitpriority=100)

    ld = make_dataloader(path, 1024, granularity=gran, engine="buffered", seed=1, num_workers=workers)
    ld.worker_init_fn = init
    for _ in ld:  # the workers started, their kernels inherited, plans cached
        pass
else:
    ld = lirs.Loader(path, 1024, granularity=gran, engine="buffered", seed=1)
    for _ in ld.epoch(0):  # threads started, kernels compiled or loaded, plans cached
        pass
sys.settrace(trace)
sys.setprofile(profile)
batches = records = 0
on[0] = True
if workers:
    flag.value = 1
    for b in ld:
        batches += 1
        records += len(b["ids"])
    flag.value = 0
else:
    for b in ld.epoch(1):
        batches += 1
        records += len(b.ids)
on[0] = False
sys.settrace(None)
sys.setprofile(None)
main = n["bytecodes"]
if workers:
    ld._iterator._shutdown_workers()  # each worker's counts arrive as it exits
    for _ in range(workers):
        wn, wf = got.get(timeout=60)
        n.update(wn)
        by_fn.update(wf)
else:
    ld.close()
print(json.dumps({"lirs": lirs.__path__[0], "commit": commit, "batches": batches, "records": records,
                  "workers": workers, "main_bytecodes": main / batches,
                  **{k: n[k] / batches for k in ("bytecodes", "python_calls", "c_calls")},
                  "top": [{"function": f, "bytecodes_per_batch": c / batches} for f, c in by_fn.most_common(top)]}))
"""


def count(tree: str, path: str, gran: str, top: int, workers: int = 0) -> dict:
    """One counted epoch of ``gran`` by the lirs of ``tree`` (a fresh process); ``workers``: through
    ``make_dataloader(num_workers=workers)``, its main process's and workers' work together."""
    out = subprocess.run(tree_python(_CHILD, path, gran, top, workers, tree=tree), capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(tree: str, path: str, grans, repeat: int, top: int, workers: int = 0) -> dict:
    """Per granularity: the run with the median bytecodes of ``repeat`` and every run's counts."""
    res = {}
    for gran in grans:
        runs = [count(tree, path, gran, top, workers) for _ in range(repeat)]
        med = sorted(runs, key=lambda r: r["bytecodes"])[len(runs) // 2]
        res[gran] = {**med, "runs": [{k: r[k] for k in METRICS} for r in runs]}
        print(f"{os.path.basename(tree.rstrip('/'))} ({med['commit']}) {gran:8s}: "
              + ", ".join(f"{k} {med[k]:.1f}" for k in METRICS) + " a batch", file=sys.stderr)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="50MB")
    ap.add_argument("--dir", default="/dev/shm/lirs-work", help="where the data file is made (in memory)")
    ap.add_argument("--granularities", default=",".join(GRANULARITIES))
    ap.add_argument("--against", default=None, help="another lirs checkout to count the same way")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=12, help="functions listed by bytecodes")
    ap.add_argument("--workers", type=int, default=0,
                    help="count make_dataloader(num_workers=N)'s epoch: its main process and workers")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    path = kdd_file(a.dir, a.size)
    grans = [g for g in a.granularities.split(",") if g]
    res = {"command": "python benchmarks/bench_work.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "what": "Python work of one epoch per batch, every thread, counted under sys.settrace/setprofile: "
                   "kdd-like LIBSVM in memory, engine buffered, batch 1024; deterministic but for a pool "
                   "thread's polling (median of --repeat runs)",
           "data": {"path": path, "bytes": os.path.getsize(path)}, "note": a.note,
           "workers": a.workers, "this": measure(TREE, path, grans, a.repeat, a.top, a.workers)}
    if a.against:
        res["against"] = measure(os.path.abspath(a.against), path, grans, a.repeat, a.top, a.workers)
        res["this_vs_against"] = {g: {k: res["this"][g][k] / res["against"][g][k] for k in METRICS} for g in grans}
        for g, r in res["this_vs_against"].items():
            print(f"{g:8s} this / against: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), file=sys.stderr)
    print(write_result("work", res, a.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
