"""Shuffle quality and cost of every strategy on a label-sorted kdd-like file (the README table).

Generates a label-sorted kdd-like LIBSVM file (all -1 records, then all +1: the worst case for
buffers), indexes it, and runs `lirs.eval.quality.evaluate` over every strategy in
`lirs.eval.strategies.STRATEGIES` for a number of epochs: distinct file segments and labels seen
against records drawn, label entropy per batch, displacement and rank correlation with file
order, batch pairs meeting again, Streaming's entropy, same-group neighbours, the three
chi-square uniformity tests, and each strategy's memory and I/O per epoch. Every metric comes
with its ideal (a uniform permutation), computed in the same run. Nothing but the index is read.

    python benchmarks/bench_quality.py                 # benchmarks/results/quality.json + quality.png
    python benchmarks/bench_quality.py --smoke --json /tmp/q/quality.json

Memory-bounded strategies share one budget (--memory, a share of the file by default); the
effective parameters of every strategy are recorded in the JSON.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import RESULTS, sorted_kdd, write_result  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="500MB", help="size of the generated kdd-like file (default 500MB)")
    ap.add_argument("--epochs", type=int, default=40, help="epochs per strategy (default 40)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--memory", default="5%", help="memory budget: a share of the file or bytes (default 5%%)")
    ap.add_argument("--segments", type=int, default=1000, help="file segments of metric (a) (default 1000)")
    ap.add_argument("--strategies", default=None, help="comma-separated subset (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="/work/scratch/quality", help="where the data file goes")
    ap.add_argument("--json", default=os.path.join(RESULTS, "quality.json"),
                    help="result file (default benchmarks/results/quality.json); the PNG goes beside it")
    ap.add_argument("--smoke", action="store_true", help="a 2 MB file and 10 epochs: checks the script runs")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    a = ap.parse_args(argv)
    if a.smoke:
        a.size, a.epochs = "2MB", 10

    import lirs
    from lirs.commands.quality import memory_budget
    from lirs.eval.quality import evaluate, format_markdown, format_table, plot

    names = [s for s in a.strategies.split(",") if s] if a.strategies else None
    path, made, gen_s, index, index_s = sorted_kdd(a.dir, a.size, a.seed)
    mem = memory_budget(a.memory, index.payload_bytes)
    print(f"{path}: {index.n:,} records, {index.payload_bytes / 1e6:.0f} MB (generated in {gen_s:.1f}s, "
          f"indexed in {index_s:.1f}s); memory budget {mem:,} B; {a.epochs} epochs per strategy", flush=True)
    t = time.perf_counter()
    res = evaluate(index, names, epochs=a.epochs, batch_size=a.batch_size, seed=a.seed,
                   params={"memory_bytes": mem}, segments=a.segments, progress="auto")
    eval_s = time.perf_counter() - t
    res["command"] = "python benchmarks/bench_quality.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    res["file"] = {"profile": "kdd", "order": "sorted", "size": a.size, "bytes": os.path.getsize(path),
                   "records": index.n, "negative_records": int((index.labels < 0).sum()), "seed": a.seed}
    res["config"]["memory"] = a.memory
    res["seconds"] = {"generate": round(gen_s, 2) if made else None, "index": round(index_s, 2),
                      "evaluate": round(eval_s, 2),
                      "per_strategy": {k: round(v["seconds"], 2) for k, v in res["strategies"].items()}}
    res["table_markdown"] = format_markdown(res)
    txt = format_table(res)
    print(txt)
    print(f"evaluated in {eval_s:.0f}s")
    out = write_result("quality", res, a.json)
    png = os.path.splitext(out)[0] + ".png"
    drawn = plot(res, png, title=f"lirs quality: label-sorted kdd-like file, {index.n:,} records, "
                                 f"batch {a.batch_size}, {a.epochs} epochs, memory budget {a.memory}")
    print(f"wrote {out}" + (f" and {png}" if drawn else " (no plot: matplotlib missing)"))
    if made and not a.keep:
        for p in (path, lirs.sidecar_path(path)):
            if os.path.exists(p):
                os.unlink(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
