"""The randomness/memory frontier on a label-sorted kdd-like file, and lirs window's targets.

Generates a label-sorted kdd-like LIBSVM file (all -1 records, then all +1), indexes it, and runs
`lirs.eval.quality.frontier`: every memory-bounded strategy (lirs window at ceil(M / 64 KiB)
groups, shuffle buffer, Streaming py1e/py1br, Deep Lake, FFCV quasi-random, CorgiPile, Corgi²) at
every memory budget M, for a number of epochs, measuring batch pairs that meet again next epoch
and in-batch neighbours from one 64 KiB group (both x a uniform order), label entropy per batch,
the other quality metrics, and the I/O per epoch (bytes read / data, share in reads >= 64 KiB).
Nothing but the index is read.

Then it checks lirs window at 5% of the data against its targets (pairs again <= 1.1x, same
group <= 25x, label entropy per batch >= 0.99 bits, read <= 1.08x the data in reads >= 64 KiB)
and measures one what-if at every budget: the same order drawn as CorgiPile (lirs window's
order under other seeds) with a short last window, and with the remainder spread over windows of
equal size (floor(U / W) windows for U groups), a change of the planner.

    python benchmarks/bench_frontier.py         # benchmarks/results/quality_frontier.json + .png
    python benchmarks/bench_frontier.py --smoke --json /tmp/q/frontier.json
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import RESULTS, sorted_kdd, write_result  # noqa: E402

TARGETS = {"pairs_again_x": 1.1, "same_group_x": 25.0, "batch_entropy": 0.99, "read_x": 1.08,
           "large_read_share": 0.99}
DEFAULT_BUDGETS = "1M,4M,16M,5%,64M,256M,100%"


def check_targets(row: dict) -> dict:
    """Each target of lirs window at 5%: {name: {"value", "target", "met"}}."""
    out = {}
    for k, t in TARGETS.items():
        v = row.get(k)
        met = None if v is None else (v >= t if k in ("batch_entropy", "large_read_share") else v <= t)
        out[k] = {"value": v, "target": t, "met": met}
    return out


def what_if(index, res: dict, a, group_bytes: int) -> list:
    """At every budget, lirs window's order drawn as CorgiPile (the same order, other seeds) with
    the last short window (``remainder="last"``) and with the remainder spread over equal windows
    (``"spread"``): what a planner that cuts windows evenly would measure."""
    from lirs.eval.quality import evaluate, summary_rows

    keys = ("pairs_again_x", "same_group_x", "batch_entropy", "read_x", "ram_bytes")
    out = []
    for b in res["budgets"]:
        row = {"memory": b["memory"], "memory_bytes": b["memory_bytes"], "window": b["window"]}
        for rem in ("last", "spread"):
            r = evaluate(index, ["corgipile"], epochs=a.epochs, batch_size=a.batch_size, seed=a.seed,
                         params={"memory_bytes": b["memory_bytes"], "remainder": rem}, segments=a.segments,
                         group_bytes=group_bytes, progress="auto", label=f"{b['memory']}, remainder {rem}")
            s = summary_rows(r)[0]
            row[rem] = {k: s[k] for k in keys}
            row[rem]["buffers"] = -(-s["params"]["blocks"] // s["params"]["buffer_blocks"]) if rem == "last" \
                else max(1, s["params"]["blocks"] // s["params"]["buffer_blocks"])
        out.append(row)
    return out


def _title(res: dict) -> str:
    cfg, f = res["config"], res["file"]
    return (f"lirs quality: randomness against memory, label-sorted kdd-like file, {f['records']:,} records "
            f"({cfg['payload_bytes'] / 1e6:.0f} MB), batch {cfg['batch_size']}, {cfg['epochs']} epochs")


def replot(path: str) -> int:
    from lirs.eval.quality import plot_frontier

    with open(path) as f:
        res = json.load(f)
    png = os.path.splitext(path)[0] + ".png"
    print(f"wrote {png}" if plot_frontier(res, png, title=_title(res)) else "no plot: matplotlib missing")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="500MB", help="size of the generated kdd-like file (default 500MB)")
    ap.add_argument("--epochs", type=int, default=20, help="epochs per strategy and budget (default 20)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--memory", default=DEFAULT_BUDGETS, help=f"budgets (default {DEFAULT_BUDGETS}; 'sweep' ok)".replace("%", "%%"))
    ap.add_argument("--segments", type=int, default=1000)
    ap.add_argument("--strategies", default=None, help="comma-separated subset (default: the frontier's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "lirs-quality"),
                    help="where the data file goes (default: $TMPDIR/lirs-quality)")
    ap.add_argument("--json", default=os.path.join(RESULTS, "quality_frontier.json"),
                    help="result file (default benchmarks/results/quality_frontier.json); the PNG goes beside it")
    ap.add_argument("--smoke", action="store_true", help="a 4 MB file, 3 budgets and 4 epochs: checks the script runs")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--replot", action="store_true", help="only redraw the PNG from the JSON already written")
    a = ap.parse_args(argv)
    if a.replot:
        return replot(a.json)
    if a.smoke:
        a.size, a.epochs, a.memory = "4MB", 4, "64K,5%,100%"

    import lirs
    from lirs.commands.quality import memory_budgets
    from lirs.constants import DEFAULT_GROUP_BYTES
    from lirs.eval.quality import format_summary, frontier, plot_frontier

    names = [s for s in a.strategies.split(",") if s] if a.strategies else None
    path, made, gen_s, index, index_s = sorted_kdd(a.dir, a.size, a.seed)
    budgets = memory_budgets(a.memory, index.payload_bytes)
    print(f"{path}: {index.n:,} records, {index.payload_bytes / 1e6:.0f} MB (generated in {gen_s:.1f}s, indexed in "
          f"{index_s:.1f}s); budgets {', '.join(f'{lab} = {m:,} B' for lab, m in budgets)}; {a.epochs} epochs",
          flush=True)
    t = time.perf_counter()
    res = frontier(index, budgets, names, epochs=a.epochs, batch_size=a.batch_size, seed=a.seed, segments=a.segments,
                   group_bytes=DEFAULT_GROUP_BYTES, progress="auto")
    eval_s = time.perf_counter() - t
    res["command"] = "python benchmarks/bench_frontier.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    res["file"] = {"profile": "kdd", "order": "sorted", "size": a.size, "bytes": os.path.getsize(path),
                   "records": index.n, "negative_records": int((index.labels < 0).sum()), "seed": a.seed}
    five = [r for r in res["rows"] if r["strategy"] == "window" and r["memory"] == "5%"]
    res["targets"] = {"at": "lirs window, memory 5% of the data", **(check_targets(five[0]) if five else {})}
    if five:
        res["targets"]["all_met"] = all(v["met"] for k, v in res["targets"].items() if isinstance(v, dict))
    t = time.perf_counter()
    res["what_if_equal_windows"] = what_if(index, res, a, DEFAULT_GROUP_BYTES) if (names is None or "window" in names) \
        else []
    res["seconds"] = {"generate": round(gen_s, 2) if made else None, "index": round(index_s, 2),
                      "frontier": round(eval_s, 2), "what_if": round(time.perf_counter() - t, 2)}
    rows = sorted(res["rows"], key=lambda r: (r["strategy"], r["memory_bytes"]))
    res["table_markdown"] = format_summary(res, rows, markdown=True)
    print(format_summary(res, rows))
    print(json.dumps({"targets": res["targets"], "what_if_equal_windows": res["what_if_equal_windows"]}, indent=1))
    out = write_result("quality_frontier", res, a.json)
    png = os.path.splitext(out)[0] + ".png"
    drawn = plot_frontier(res, png, title=_title(res))
    print(f"wrote {out}" + (f" and {png}" if drawn else " (no plot: matplotlib missing)"))
    if made and not a.keep:
        for p in (path, lirs.sidecar_path(path)):
            if os.path.exists(p):
                os.unlink(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
