"""What finding read steps' extents costs an epoch: the work a Loader's pool threads do for each
step whose extents are deferred to them (``extents="defer"``: granularity instance and group, the
offsets read with pread from the sidecar), in milliseconds of one thread and in minor page faults,
on a kdd-like file. No data is read: only the steps' extents are found, one thread, epoch after epoch.

``--trees A B``: the same measure for two checkouts in turns (ABBA, ``--rounds`` rounds), each run
in a process of its own importing that tree's lirs, and B's figures against A's: what a change to
the planner did, free of the noise of whole epochs on a shared machine.
Writes benchmarks/results/extents.json (or ``--out``).
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

from _common import TREE, kdd_file, tree_python, write_result  # noqa: E402

# one run: the median over epochs 1..N (epoch 0 compiles and warms) of ms and faults an epoch
_RUN = r"""
import json, resource, statistics, sys, time
import lirs
path, gran, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ms, faults = [], []
with lirs.Loader(path, 1024, granularity=gran, seed=0, engine="buffered") as ld:
    for e in range(epochs + 1):
        steps = {}
        for item in ld.plan(e).batches(0, extents="defer", units=True):
            for part in item.parts:
                steps.setdefault(id(part.step), part.step)
        steps = list(steps.values())
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
        for i in range(len(steps)):  # each let go once ready, as the pool lets a step go once read
            st, steps[i] = steps[i], None
            st.ready()
            del st
        if e:
            ms.append((time.perf_counter() - t0) * 1e3)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
print(json.dumps({"ms": statistics.median(ms), "faults": statistics.median(faults), "steps": len(steps)}))
"""


def measure(tree: str, path: str, gran: str, epochs: int) -> dict:
    """One run of ``tree``'s lirs: ``{"ms", "faults", "steps"}`` of an epoch (medians)."""
    out = subprocess.run(tree_python(_RUN, path, gran, epochs, tree=tree), capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def rounds(trees: list, path: str, grans: list, epochs: int, n: int) -> dict:
    """``{tree: {gran: [run, ...]}}``: ``n`` rounds in turns, ABBA then BAAB (one tree: n runs)."""
    got = {t: {g: [] for g in grans} for t in trees}
    for r in range(n):
        order = trees if len(trees) == 1 else (trees + trees[::-1] if r % 2 == 0 else trees[::-1] + trees)
        for t in order:
            for g in grans:
                run = measure(t, path, g, epochs)
                got[t][g].append(run)
                print(f"round {r} {os.path.basename(t.rstrip('/')) or t} {g:>8}: {run['ms']:.1f} ms, "
                      f"{run['faults']:.0f} faults, {run['steps']} steps", flush=True)
    return got


def summary(got: dict) -> dict:
    """Medians per tree and granularity, and with two trees the second's against the first's."""
    out = {t: {g: {"ms": statistics.median(x["ms"] for x in runs),
                   "faults": statistics.median(x["faults"] for x in runs), "steps": runs[0]["steps"]}
               for g, runs in by.items()} for t, by in got.items()}
    trees = list(got)
    if len(trees) == 2:
        a, b = out[trees[0]], out[trees[1]]
        out["second_vs_first"] = {g: {"ms": b[g]["ms"] / a[g]["ms"],
                                      "faults": b[g]["faults"] / max(a[g]["faults"], 1)} for g in a}
    return out


def _commit(tree: str) -> str:
    """The commit a checkout is at (``+`` when its lirs/ has uncommitted changes)."""
    git = ["git", "-C", tree]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "lirs"], capture_output=True, text=True).stdout.strip()
    return rev + ("+" if dirty else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/dev/shm/lirs-extents", help="where the kdd-like file is made (and kept)")
    ap.add_argument("--granularities", default="instance,group")
    ap.add_argument("--epochs", type=int, default=7, help="timed epochs a run (after one untimed)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trees", nargs=2, default=None, metavar=("A", "B"), help="two checkouts, in turns")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/extents.json)")
    args = ap.parse_args(argv)
    from lirs.policies import POLICIES
    grans = [g for g in args.granularities.split(",") if g]
    bad = [g for g in grans if g not in POLICIES]
    if bad:
        ap.error(f"unknown granularities {', '.join(bad)}; expected some of {', '.join(POLICIES)}")
    trees = [os.path.abspath(t) for t in args.trees] if args.trees else [TREE]
    path = kdd_file(args.dir, args.size)
    got = rounds(trees, path, grans, args.epochs, args.rounds)
    res = {"command": "python benchmarks/bench_extents.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "what": __doc__.split("\n\n")[0].replace("\n", " "), "data": {"path": path, "bytes": os.path.getsize(path)},
           "trees": {t: _commit(t) for t in trees}, "note": args.note, "runs": got, "summary": summary(got)}
    print(write_result("extents", res, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
