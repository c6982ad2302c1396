"""Planner benchmark: read amplification per granularity, plan time against read time, memory per record.

In one run:

* **amplification** of every granularity (and of groups of several sizes) on a kdd-like file (small
  records, ~360 B) and a webspam-like file (large records, ~44 KB), from the plan of one epoch (what the
  Loader reads; no I/O needed to know it);
* **plan time** for an epoch of ``--records`` (default 10^7) kdd-like records — an in-memory index whose
  record lengths are those of the kdd file, repeated — for each granularity and permutation mode,
  against the time the device needs to read what the plan asks for: fio on the kdd file, in the same
  run (4 KiB random reads at QD 32 for instance/page, 64 KiB random reads at QD 32 for group/window);
* **memory per record**: the index (compact offsets, and labels separately) plus the plan's tables
  (unit permutation and unit boundaries), as sizes and as the tracemalloc peak of planning, against the
  LIRS paper's 16 B/record (8 B offset + 8 B assignment).

Writes benchmarks/results/plan.json. ``--smoke`` runs a tiny version in seconds.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import fio_json, write_result  # noqa: E402

GRANS = ("instance", "page", "group", "window")


def ensure(profile, path, size):
    from lirs.eval.gen import generate
    from lirs.build import build_index
    from lirs.index import open_index

    if not os.path.exists(path) or abs(os.path.getsize(path) - size) > 0.05 * size:
        generate(profile, path, size=size, order="shuffled", seed=1, progress=False)
    try:
        return open_index(path)
    except Exception:  # noqa: BLE001 - no or stale sidecar: build it
        return build_index(path, progress=False)


def amplification(idx, batch_size, group_bytes, window) -> dict:
    from lirs.plan import plan_epoch

    out = {}
    for g in GRANS:
        st = plan_epoch(idx, batch_size, g, seed=0, epoch=0, group_bytes=group_bytes, window=window).stats()
        out[g] = {k: st[k] for k in ("amplification", "reads", "bytes_read", "payload_bytes", "median_read_bytes",
                                     "batches")}
        print(f"    {g:9s} amplification {st['amplification']:.3f}  reads {st['reads']:,}", file=sys.stderr)
    sweep = {}
    for gb in (16384, 65536, 262144, 1 << 20):
        st = plan_epoch(idx, batch_size, "group", seed=0, epoch=0, group_bytes=gb).stats()
        sweep[str(gb)] = {"amplification": st["amplification"], "model_1_plus_4k_over_G": 1 + 4096 / gb}
    out["group_sweep"] = sweep
    return out


def tiled_index(src, n):
    """An in-memory index of ``n`` records whose lengths repeat those of ``src`` (no file behind it)."""
    from lirs.index import Index

    s, e = src.bounds()
    lens = (e - s).astype(np.int64)
    reps = -(-n // len(lens))
    lens = np.tile(lens, reps)[:n]
    offs = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=offs[1:])
    labels = np.tile(src.labels, reps)[:n]
    return Index.from_arrays(["/planning-only/kdd-tiled.svm"], "libsvm", offsets=offs,
                             data_ends=[int(offs[-1] + lens[-1])], labels=labels)


def fio_reference(path, runtime) -> dict:
    common = [f"--filename={path}", "--direct=1", "--ioengine=io_uring", "--iodepth=32", "--numjobs=1",
              f"--runtime={runtime}", "--time_based", "--norandommap", "--randrepeat=0", "--thread"]
    r4 = fio_json(["--name=r4k", "--rw=randread", "--bs=4096", *common])
    r64 = fio_json(["--name=r64k", "--rw=randread", "--bs=65536", *common])
    if r4 is None or r64 is None:
        return {}
    return {"iops_4k_qd32": float(r4["jobs"][0]["read"]["iops"]),
            "bw_64k_qd32": float(r64["jobs"][0]["read"]["bw_bytes"]),
            "command": "fio --rw=randread --bs=4096|65536 " + " ".join(common)}


def plan_time(idx, batch_size, group_bytes, window, fio) -> dict:
    from lirs.plan import plan_epoch

    out = {}
    for g in GRANS:
        for mode in ("table", "stateless"):
            t = time.perf_counter()
            p = plan_epoch(idx, batch_size, g, seed=3, epoch=1, group_bytes=group_bytes, window=window,
                           permutation=mode)
            setup = time.perf_counter() - t
            reads = nbytes = 0
            for b in p.batches():
                for s in b.new_steps:
                    reads += s.reads
                    nbytes += s.bytes_read
            total = time.perf_counter() - t
            rec = {"plan_setup_s": setup, "plan_total_s": total, "per_batch_us": 1e6 * total / p.num_batches,
                   "reads": reads, "bytes_read": nbytes}
            if fio:
                read_s = reads / fio["iops_4k_qd32"] if g in ("instance", "page") else nbytes / fio["bw_64k_qd32"]
                rec["read_s_at_fio"] = read_s
                rec["plan_over_read"] = total / read_s
            out[f"{g}/{mode}"] = rec
            print(f"    {g:9s} {mode:9s} plan {total:7.2f} s"
                  + (f"  read at fio {rec['read_s_at_fio']:8.1f} s  ratio {rec['plan_over_read']:.3f}" if fio else ""),
                  file=sys.stderr)
    return out


def memory(idx, batch_size, group_bytes, window) -> dict:
    from lirs.plan import _UNIT_CACHE, plan_epoch

    n = idx.n
    offsets_b = idx.offset_table.nbytes / n
    labels_b = (idx.index_bytes() - idx.offset_table.nbytes) / n
    out = {"records": n, "offsets_bytes_per_record": offsets_b, "labels_bytes_per_record": labels_b,
           "paper_bytes_per_record": 16.0, "goal_bytes_per_record": 8.0, "configs": {}}
    for g in GRANS:
        for mode in ("table", "stateless"):
            _UNIT_CACHE.pop(idx, None)  # measure the unit table too
            tracemalloc.start()
            p = plan_epoch(idx, batch_size, g, seed=3, epoch=1, group_bytes=group_bytes, window=window,
                           permutation=mode)
            for _, b in zip(range(20), p.batches()):
                pass
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            plan_b = p.nbytes / n
            out["configs"][f"{g}/{mode}"] = {
                "plan_tables_bytes_per_record": plan_b,
                "index_plus_plan_bytes_per_record": offsets_b + plan_b,
                "planning_peak_bytes_per_record": peak / n,
                "meets_goal": offsets_b + plan_b <= 8.0,
            }
            print(f"    {g:9s} {mode:9s} index {offsets_b:.2f} + plan {plan_b:.3f} B/record "
                  f"(planning peak {peak / n:.3f} B/record)", file=sys.stderr)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/work/scratch/plan")
    ap.add_argument("--kdd-size", default="1GB")
    ap.add_argument("--webspam-size", default="1GB")
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--group-bytes", type=int, default=65536)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--fio-runtime", type=float, default=5.0)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds; result not written to results/")
    ap.add_argument("--out", default=None, help="write JSON here instead of benchmarks/results/plan.json")
    args = ap.parse_args(argv)
    from lirs.units import parse_size

    if args.smoke:
        args.kdd_size, args.webspam_size, args.records, args.fio_runtime = "8MB", "16MB", 200_000, 1.0
    os.makedirs(args.dir, exist_ok=True)
    res = {"command": " ".join(["python", "benchmarks/bench_plan.py", *(argv if argv is not None else sys.argv[1:])]),
           "batch_size": args.batch_size, "group_bytes": args.group_bytes, "window": args.window}
    kdd = ensure("kdd", os.path.join(args.dir, "kdd.svm"), parse_size(args.kdd_size))
    web = ensure("webspam", os.path.join(args.dir, "webspam.svm"), parse_size(args.webspam_size))
    res["amplification"] = {}
    for name, idx in (("kdd", kdd), ("webspam", web)):
        print(f"  amplification, {name} ({idx.n:,} records, {idx.payload_bytes / 1e6:,.0f} MB)", file=sys.stderr)
        res["amplification"][name] = {"records": idx.n, "bytes": idx.payload_bytes,
                                      "mean_record_bytes": idx.payload_bytes / idx.n,
                                      **amplification(idx, args.batch_size, args.group_bytes, args.window)}
    print("  fio on the kdd file", file=sys.stderr)
    fio = fio_reference(kdd.paths[0], args.fio_runtime)
    res["fio"] = fio
    big = tiled_index(kdd, args.records)
    print(f"  plan time, {big.n:,} kdd-like records", file=sys.stderr)
    res["plan_time"] = {"records": big.n, "configs": plan_time(big, args.batch_size, args.group_bytes,
                                                               args.window, fio)}
    print(f"  memory, {big.n:,} kdd-like records", file=sys.stderr)
    res["memory"] = memory(big, args.batch_size, args.group_bytes, args.window)
    amp = res["amplification"]
    res["summary"] = {
        "kdd_page_amplification": amp["kdd"]["page"]["amplification"],
        "kdd_group_amplification": amp["kdd"]["group"]["amplification"],
        "kdd_window_amplification": amp["kdd"]["window"]["amplification"],
        "kdd_instance_amplification": amp["kdd"]["instance"]["amplification"],
        "webspam_page_amplification": amp["webspam"]["page"]["amplification"],
        "webspam_group_amplification": amp["webspam"]["group"]["amplification"],
        "group_64k_goal": 1.07,
        "max_plan_over_read": max((c.get("plan_over_read") or 0) for c in res["plan_time"]["configs"].values()),
        "index_plus_plan_bytes_per_record_max": max(c["index_plus_plan_bytes_per_record"]
                                                    for c in res["memory"]["configs"].values()),
    }
    if args.smoke or args.out:
        import json

        path = args.out or os.path.join(args.dir, "plan-smoke.json")
        with open(path, "w") as f:
            json.dump(res, f, indent=2)
    else:
        path = write_result("plan", res)
    print(path)


if __name__ == "__main__":
    main()
