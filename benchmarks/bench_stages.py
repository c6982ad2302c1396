"""The serial stages of an epoch and their GIL hand-offs, each old way against the new in one run.

On many cores the stages one thread runs (the planning thread, the consumer's, a device feeder's)
set the rate, and every time such a thread lets the GIL go it waits to take it back behind the
threads that want it. In one run, on one kdd-like file:

* ``planning``: the walk alone on one thread (``EpochPlan.batches(extents="defer")``, what the
  Loader's planning thread runs) against the same walk finding every step's extents while planning
  (``extents=True``: what it did for steps of many batches before they were deferred), records/s;
* ``windows``: window epochs from the file on disk (default engine: O_DIRECT where the filesystem
  allows it) keeping two windows in flight against three (:func:`lirs.policies.windows_in_flight`),
  each in a fresh process, alternating, records/s and peak RSS;
* ``handoffs``: GIL releases (CPython's ``PyEval_SaveThread``, counted by a ``perf`` uprobe) per
  batch of the consumer's row slicing with numpy (the old ``rows``) against the GIL-keeping kernel,
  and of a device feeder's packing through CPU tensors (``to_tensors``, ``_parts``, ``pack_into``,
  views) against the Loader's arrays in one kernel call (``batch_arrays``, ``pack_arrays``); and per
  read step of a pool thread (``step_group``, ``step_instance``, ``step_window``: planned steps, their
  deferred extents found, read with engine ``buffered`` and decoded on the measured thread) and per
  planned shared step (``plan_group``, ``plan_instance``: the units walk the consumer runs where
  the pool is too small for a planning thread; ``plan_group_extents``: the planning thread of 8
  cores or more, which finds a group step's extents as it plans it; ``plan_instance_stateless``:
  with the stateless permutation, which a dataset of over 2**20 records gets), each release a wait
  to take the GIL back behind the other threads on many cores. Needs root and ``perf``; otherwise
  null with the reason. ``--parts`` runs some of the three.

Writes ``benchmarks/results/stages.json``.

    python benchmarks/bench_stages.py --dir /work/scratch/dev --size 300MB
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from _common import kdd_file, machine, tree_python, write_result  # noqa: E402

GRANS = ("group", "instance", "window")


def planning(path: str, repeat: int) -> dict:
    """Best of ``repeat`` walks of each granularity's epoch, deferred and found at once."""
    import lirs

    out = {}
    for gran in GRANS:
        with lirs.Loader(path, 1024, granularity=gran, seed=0) as ld:
            rates = {"deferred": [], "at_once": []}
            for e in range(repeat + 1):
                for how, ext in (("deferred", "defer"), ("at_once", True)):
                    plan = ld.plan(e)
                    t = time.perf_counter()
                    n = sum(len(bp.ids) for bp in plan.batches(0, extents=ext))
                    if e:  # the first walk compiles and maps the index
                        rates[how].append(n / (time.perf_counter() - t))
        best = {k: max(v) for k, v in rates.items()}
        out[gran] = {"records_per_s": best, "all": rates, "deferred_vs_at_once": best["deferred"] / best["at_once"]}
        print(f"planning {gran:8s}: deferred {best['deferred'] / 1e6:.1f}M, at once {best['at_once'] / 1e6:.1f}M "
              f"records/s", file=sys.stderr)
    return out


_WINDOW_CHILD = r"""
import json, resource, sys, time
import lirs
from lirs import policies
held = int(sys.argv[2])
real = policies.Policy.steps_in_flight
policies.Policy.steps_in_flight = lambda self, plan, prefetch, workers=0, windows=2: real(self, plan, prefetch, workers, held)
with lirs.Loader(sys.argv[1], 1024, granularity="window", seed=0) as ld:
    for _ in ld.epoch(99):
        pass
    rates = []
    for e in range(int(sys.argv[3])):
        t = time.perf_counter()
        n = sum(len(b.ids) for b in ld.epoch(e))
        rates.append(n / (time.perf_counter() - t))
    eng = ld.engine
print(json.dumps({"rates": rates, "engine": eng.name, "direct": bool(eng.direct),
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def windows(path: str, rounds: int, epochs: int) -> dict:
    """Window epochs with two and three windows in flight, a fresh process each, alternating."""
    runs = {2: [], 3: []}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    for _ in range(rounds):
        for held in (2, 3):
            r = subprocess.run(tree_python(_WINDOW_CHILD, path, held, epochs),
                               capture_output=True, text=True, check=True, env=env)
            runs[held].append(json.loads(r.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(x for run in v for x in run["rates"]) for k, v in runs.items()}
    rss = {k: statistics.median(run["peak_rss"] for run in v) for k, v in runs.items()}
    print(f"windows in flight: two {med[2] / 1e6:.2f}M, three {med[3] / 1e6:.2f}M records/s; peak RSS "
          f"{rss[2] / 2**20:.0f} / {rss[3] / 2**20:.0f} MiB ({runs[3][0]['engine']})", file=sys.stderr)
    return {"engine": runs[3][0]["engine"], "direct": runs[3][0]["direct"], "records_per_s": med,
            "peak_rss": rss, "three_vs_two": med[3] / med[2], "rss_three_minus_two": rss[3] - rss[2],
            "runs": {str(k): v for k, v in runs.items()}}


_HANDOFF_CHILD = r"""
import sys, time
import numpy as np
import lirs
from lirs import assemble, tensors
which, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with lirs.Loader(path, 1024, granularity="group", seed=0, engine="buffered") as ld:
    batches = [b for _, b in zip(range(n), ld.epoch(0))]
def numpy_rows(X, lo, hi):  # the consumer's row slicing before lirs.kernels.rows
    a, b = int(X.indptr[lo]), int(X.indptr[hi])
    indptr = X.indptr[lo:hi + 1] - a if a else X.indptr[lo:hi + 1]
    return assemble.csr_batch(X.data[a:b], X.indices[a:b], indptr, (hi - lo, X.shape[1]))
big = assemble.stack([b.X for b in batches[:8]], None)[0]  # a step of 8 batches
cuts = [0] + list(np.cumsum([b.X.shape[0] for b in batches[:8]]))
st = tensors.Staging(pin=False)
def tensor_pack(b):  # a device feeder's packing before batch_arrays
    rebuild, ts = tensors._parts(dict(zip(("ids", "X", "y"), tensors.to_tensors(b))))
    spans, total = tensors.pack_spans(ts)
    s, host = st.take(total)
    tensors.pack_into(host.numpy(), ts, spans)
    return rebuild(tensors.span_views(host, spans))
def array_pack(b):
    kind, shape, arrays = tensors.batch_arrays(b)
    spans, total = tensors.array_spans(arrays)
    s, host = st.take(total)
    tensors.pack_arrays(st.arrays[s], arrays, spans)
    return tensors.build_output(tensors.span_views(host, spans), kind, shape, True, "dict")
kept = []
def read_steps(gran, n=8):  # a pool thread's work: planned read steps (deferred extents) read and decoded
    import dataclasses
    ld = lirs.Loader(path, 1024, granularity=gran, seed=0, engine="buffered")
    for _ in ld.epoch(0):
        pass
    seen, steps = set(), []
    for bp in ld.plan(1).batches(0, extents="defer"):
        for part in bp.parts:
            if part.step.number not in seen:
                seen.add(part.step.number)
                steps.append(part.step)
    steps = steps[4:4 + n] if len(steps) > 4 + n else steps[-n:]  # past the first steps' ramp
    pipe = ld._pipeline
    kept.append(ld)  # open while its steps are read
    def work():  # a fresh copy each time: a deferred step finds its extents when first read, as on the pool
        for s in steps:
            pipe._read_decode(dataclasses.replace(s))  # dropped, as its last batch is: its memory recycled
    return len(steps), work
steps = {g: read_steps(g) for g in ("group", "instance", "window") if which == "step_" + g}
def plan_steps(gran, n=16, permutation="auto", extents="defer"):  # the consumer's planning on 2 cores (PlanInline): a shared step at a time
    ld = lirs.Loader(path, 1024, granularity=gran, seed=0, engine="buffered", permutation=permutation)
    kept.append(ld)
    for _ in ld.epoch(0):
        pass
    epoch = [1]
    def work():  # the first n shared steps of a fresh epoch's units walk, extents deferred as the Loader's
        walk = ld.plan(epoch[0]).batches(0, extents=extents, units=True)
        epoch[0] += 1
        return sum(1 for _, _u in zip(range(n), walk))
    return work() or n, work
# "instance_stateless": the permutation a dataset of over 2**20 records gets (auto: a table below)
# "group_extents": the planning thread of 8 cores or more, which finds a group step's extents as it
# plans it (lirs.policies.walk_extents)
plans = {g: plan_steps(g.split("_")[0], permutation="stateless" if g.endswith("stateless") else "auto",
                       extents=True if g.endswith("extents") else "defer")
         for g in ("group", "group_extents", "instance", "instance_stateless") if which == "plan_" + g}
work = {"rows_numpy": lambda: [numpy_rows(big, a, b) for a, b in zip(cuts[:-1], cuts[1:])],
        "rows_kernel": lambda: [assemble.rows(big, a, b) for a, b in zip(cuts[:-1], cuts[1:])],
        "pack_tensors": lambda: [tensor_pack(b) for b in batches],
        "pack_arrays": lambda: [array_pack(b) for b in batches],
        **{"step_" + g: fn for g, (_, fn) in steps.items()}, **{"plan_" + g: fn for g, (_, fn) in plans.items()}}[which]
if which.startswith("step_"):
    per = steps[which[5:]][0]  # read steps
elif which.startswith("plan_"):
    per = plans[which[5:]][0]  # planned shared steps
else:
    per = 8 if which.startswith("rows") else len(batches)
work()  # compile, allocate
print("go", flush=True)
sys.stdin.readline()
for _ in range(int(sys.argv[4])):
    work()
print(per * int(sys.argv[4]), flush=True)
sys.stdin.readline()
"""


def _perf_probe() -> tuple[str | None, str | None]:
    """(event name, None) of a uprobe on libpython's PyEval_SaveThread, or (None, why not)."""
    perf = shutil.which("perf")
    if perf is None:
        return None, "perf not found"
    lib = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("LDLIBRARY") or "")
    target = lib if lib.endswith(".so") and os.path.exists(lib) else sys.executable  # shared or static
    r = subprocess.run([perf, "probe", "-x", os.path.realpath(target), "PyEval_SaveThread"],
                       capture_output=True, text=True)
    if r.returncode != 0 and "exists" not in r.stderr:
        return None, f"perf probe failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
    listed = subprocess.run([perf, "probe", "-l"], capture_output=True, text=True).stdout
    name = next((ln.split()[0] for ln in listed.splitlines() if "PyEval_SaveThread" in ln), None)
    return (name, None) if name else (None, "no PyEval_SaveThread probe listed by perf probe -l")


def handoffs(path: str, loops: int) -> dict:
    """GIL releases per batch of each way (counted while only the measured loop runs)."""
    event, why = _perf_probe()
    if event is None:
        print(f"handoffs: not measured ({why})", file=sys.stderr)
        return {"reason": why}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    out = {"event": event}
    try:
        for which in ("rows_numpy", "rows_kernel", "pack_tensors", "pack_arrays", "step_group", "step_instance",
                      "step_window", "plan_group", "plan_group_extents", "plan_instance", "plan_instance_stateless"):
            p = subprocess.Popen(tree_python(_HANDOFF_CHILD, which, path, 64, loops),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            assert p.stdout.readline().strip() == "go"
            with tempfile.NamedTemporaryFile("r", suffix=".txt") as f:
                stat = subprocess.Popen(["perf", "stat", "-x,", "-o", f.name, "-e", event, "-t", str(p.pid)])
                time.sleep(0.5)  # perf attached
                p.stdin.write("\n")
                p.stdin.flush()
                batches = int(p.stdout.readline())
                stat.send_signal(2)
                stat.wait()
                count = next(int(ln.split(",")[0]) for ln in f.read().splitlines() if event.split(":")[-1] in ln)
            p.stdin.write("\n")
            p.stdin.flush()
            p.wait()
            unit, units = ("step", "steps") if which.startswith(("step_", "plan_")) else ("batch", "batches")
            out[which] = {"releases": count, units: batches, "per_" + unit: count / batches}
            print(f"handoffs {which:23s}: {count / batches:.2f} GIL releases a {unit}", file=sys.stderr)
    finally:
        subprocess.run(["perf", "probe", "-d", event], capture_output=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/benchwin", help="where the kdd-like file is (made when missing)")
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--repeat", type=int, default=3, help="walks of each planning way")
    ap.add_argument("--rounds", type=int, default=3, help="window processes each way, alternating")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs in each window process")
    ap.add_argument("--loops", type=int, default=20, help="passes over 64 batches in each hand-off count")
    ap.add_argument("--parts", default="planning,windows,handoffs", help="which stages to run")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    path = kdd_file(a.dir, a.size)
    res = {"command": "python benchmarks/bench_stages.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "data": {"profile": "kdd", "path": path, "bytes": os.path.getsize(path)}, "note": a.note,
           **{part: run() for part, run in (("planning", lambda: planning(path, a.repeat)),
                                            ("windows", lambda: windows(path, a.rounds, a.epochs)),
                                            ("handoffs", lambda: handoffs(path, a.loops)))
              if part in a.parts.split(",")},
           "machine": machine(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(write_result("stages", res, a.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
