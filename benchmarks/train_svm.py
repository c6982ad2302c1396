"""SVM training under each record order: the LIRS paper's Fig. 9 and Table 3 on this machine.

A kdd-like LIBSVM file, label-sorted and as generated (shuffled), is trained with the same
L2-regularized linear SVM (LIBLINEAR dual coordinate descent, squared hinge, C=1, no bias) under
BMF (40 random blocks written once, 3 inner passes per block), lirs instance/page/group/window,
a shuffle buffer of 10,000 records and the file order. Each method reads the file with its own I/O
pattern (O_DIRECT) while training, loading prefetched on a thread. After every epoch the primal
objective of the whole data set is taken and compared with f*, the objective after a long
in-memory random-order run: (f - f*) / f*.

Table 3 analog: epochs each method needs to reach BMF's best objective, and the total time to get
there, T_pre + epochs x (mean epoch wall time, loading overlapped with compute). Speed reference
taken in the same run: fio's sequential O_DIRECT read of the same file.

    python benchmarks/train_svm.py                       # writes benchmarks/results/train_svm.json + .png
    python benchmarks/train_svm.py --smoke --dir /tmp/x --json /tmp/x/out.json
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import RESULTS, fio_seq_read_bps, machine  # noqa: E402

import lirs  # noqa: E402
from lirs.eval.gen import generate  # noqa: E402
from lirs.eval.compare import METHODS, compare_svm, load_all  # noqa: E402
from lirs.eval.train import reference_objective  # noqa: E402

ORDER_METHODS = ("bmf", "lirs-instance", "lirs-page", "lirs-group", "lirs-window", "shuffle_buffer", "sequential")


def envelope_unavailable() -> str | None:
    """Why the device envelopes of `lirs bench` cannot be used here (None: they can)."""
    try:
        from lirs.eval.envelope import blkio_unavailable
    except ImportError as e:
        return f"lirs.eval.envelope not importable ({e})"
    return blkio_unavailable()


def on_envelope(name, path, fn):
    """Run ``fn()`` with this process inside a blkio throttle group of envelope ``name`` (the
    `lirs bench` envelopes: only this process is throttled; the group is removed afterwards)."""
    from lirs.eval.envelope import ENVELOPES, ThrottleGroup, disk_of

    env = ENVELOPES[name]
    major, minor, _ = disk_of(path)
    with ThrottleGroup(f"train-{name}", f"{major}:{minor}", env.read_iops, env.read_bps) as g:
        g.add(os.getpid())
        return fn(), env.as_dict()


def envelope_rows(d: dict, hdd: dict) -> dict:
    """Table 3 on a throttled envelope: the orders (hence the epochs to the target) are the nvme run's;
    pre-processing and epoch time are measured under the throttle (epochs cut at the budget are
    extrapolated from the records trained)."""
    out = {}
    for m, r in hdd["methods"].items():
        e = r["per_epoch"][0]
        hit = d["methods"][m].get("epochs_to_target")
        pre = r.get("pre_s") or 0.0
        out[m] = {"pre_s": pre, "epoch_s": e["epoch_s"], "extrapolated": e.get("extrapolated", False),
                  "records_measured": e.get("records"), "epochs_to_target": hit,
                  "total_to_target_s": None if hit is None else pre + hit * e["epoch_s"]}
    return out


def plot(res: dict, png: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    dsets = list(res["datasets"])
    fig, axes = plt.subplots(1, len(dsets), figsize=(5.2 * len(dsets), 4.0), squeeze=False)
    for ax, name in zip(axes[0], dsets):
        d = res["datasets"][name]
        for m, r in d["methods"].items():
            e = [p["epoch"] + 1 for p in r["per_epoch"]]
            ax.semilogy(e, [max(p["rel_diff"], 1e-12) for p in r["per_epoch"]], marker=".", label=m)
        ax.set_title(f"kdd-like, {name} ({d['n']:,} records)", fontsize=10)
        ax.set_xlabel("epoch")
        ax.set_ylabel("(f - f*) / f*")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def table(res: dict) -> str:
    lines = []
    for name, d in res["datasets"].items():
        lines.append(f"\n{name}: {d['n']:,} records, f* = {d['f_star']:.6g}, target = best of "
                     f"{d.get('target_method')} ((f-f*)/f* = {d.get('target_rel_diff', float('nan')):.3g})")
        lines.append(f"{'method':15} {'epochs':>7} {'pre s':>7} {'epoch s':>8} {'wait s':>7} {'ampl':>6} "
                     f"{'total s':>8} {'final (f-f*)/f*':>16} {'memory MB':>10}")
        for m, r in d["methods"].items():
            amp = r["per_epoch"][-1]["amplification"]
            amp = "-" if amp is None else f"{amp:.2f}"
            tot = r.get("total_to_target_s")
            tot = "-" if tot is None else f"{tot:.1f}"
            wait = np.mean([p["wait_s"] for p in r["per_epoch"]])
            lines.append(f"{m:15} {str(r.get('epochs_to_target') or '-'):>7} {r['pre_s'] or 0:7.2f} "
                         f"{r['mean_epoch_s']:8.2f} {wait:7.2f} {amp:>6} {tot:>8} "
                         f"{r['per_epoch'][-1]['rel_diff']:16.3g} {r['memory_bytes'] / 1e6:10.1f}")
        for env in ("hdd", "ssd"):
            h = d.get(env)
            if not h:
                continue
            if "skipped" in h:
                lines.append(f"{env}: skipped ({h['skipped']})")
                continue
            lines.append(f"{env} envelope (epochs to target from above; time measured under the throttle, "
                         f"* = extrapolated past {h['budget_s']:g} s):")
            lines.append(f"{'method':15} {'epochs':>7} {'pre s':>8} {'epoch s':>9} {'total s':>9}")
            for m, r in h["methods"].items():
                tot = "-" if r["total_to_target_s"] is None else f"{r['total_to_target_s']:.1f}"
                lines.append(f"{m:15} {str(r['epochs_to_target'] or '-'):>7} {r['pre_s']:8.2f} "
                             f"{r['epoch_s']:8.1f}{'*' if r['extrapolated'] else ' '} {tot:>9}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="60MB", help="size of each generated file (default 60MB)")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--orders", default="sorted,shuffled")
    ap.add_argument("--methods", default=",".join(ORDER_METHODS))
    ap.add_argument("--reference-epochs", type=int, default=400)
    ap.add_argument("--reference-tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default="/work/scratch/train")
    ap.add_argument("--json", default=os.path.join(RESULTS, "train_svm.json"))
    ap.add_argument("--smoke", action="store_true", help="tiny data, 2 epochs: checks the script runs")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--envelopes", default="nvme,hdd",
                    help="device envelopes: nvme (the disk as is) and hdd (lirs bench's blkio throttle)")
    ap.add_argument("--envelope-budget", type=float, default=60.0,
                    help="seconds per method and epoch on a throttled envelope; longer epochs are "
                         "extrapolated from the records trained (default 60)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.size, a.epochs, a.reference_epochs, a.reference_tol = "1MB", 2, 50, 1e-3
    methods = [m for m in a.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown methods {bad}")
    os.makedirs(a.dir, exist_ok=True)
    res = {"command": "python benchmarks/train_svm.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:])),
           "machine": machine(), "solver": "LIBLINEAR dual coordinate descent, L2-regularized squared hinge "
           "(-s 1), no bias; dual variables kept per record ID",
           "settings": {"size": a.size, "epochs": a.epochs, "batch_size": a.batch_size, "C": a.C,
                        "bmf_blocks": 40, "bmf_inner_passes": 3, "shuffle_buffer_records": 10000,
                        "group_bytes": 65536, "window": 16, "prefetch": 4,
                        "reference": f"in-memory random-order DCD, <= {a.reference_epochs} epochs or max "
                                     f"projected gradient < {a.reference_tol}"},
           "devices": ["nvme (this machine's virtio NVMe, O_DIRECT)"],
           "total_time_model": "T_total = T_pre + epochs_to_target x mean epoch wall time (loading "
                               "prefetched, overlapped with compute, for every method)",
           "datasets": {}}
    files = []
    for order in [o for o in a.orders.split(",") if o]:
        path = os.path.join(a.dir, f"svm-kdd-{order}-{a.size}-s{a.seed}.svm")
        files.append(path)
        if not os.path.exists(path):
            generate("kdd", path, size=a.size, order=order, seed=a.seed, progress=False)
        t = time.perf_counter()
        index = lirs.build_index(path)
        index_s = time.perf_counter() - t
        fio_bps = None if a.smoke else fio_seq_read_bps(path)
        X, y = load_all(index)
        t = time.perf_counter()
        f_star = reference_objective(X, y, a.C, epochs=a.reference_epochs, tol=a.reference_tol, seed=a.seed)
        ref_s = time.perf_counter() - t
        print(f"{order}: {index.n:,} records, f* = {f_star:.8g} ({ref_s:.1f}s)", flush=True)
        d = compare_svm(index, methods, epochs=a.epochs, batch_size=a.batch_size, C=a.C, seed=a.seed,
                        workdir=a.dir, f_star=f_star, data=(X, y), index_s=index_s,
                        log_fn=lambda m: print("  " + m, flush=True))
        d["reference_s"] = ref_s
        d["file"] = {"path": path, "bytes": os.path.getsize(path), "order": order}
        if fio_bps:
            d["fio_seq_read_s"] = os.path.getsize(path) / fio_bps
            for r in d["methods"].values():
                r["epoch_over_fio_seq_read"] = r["mean_epoch_s"] / d["fio_seq_read_s"]
        if "bmf" in d["methods"]:
            b = d["methods"]["bmf"]
            for r in d["methods"].values():
                if r.get("total_to_target_s") and b.get("total_to_target_s"):
                    r["total_over_bmf"] = r["total_to_target_s"] / b["total_to_target_s"]
        for env in [e for e in a.envelopes.split(",") if e and e != "nvme"]:
            why = envelope_unavailable()
            if why:
                d[env] = {"skipped": why}
                print(f"  {env}: skipped ({why})", flush=True)
                continue
            print(f"  {env} envelope: one epoch per method, {a.envelope_budget:g} s budget", flush=True)

            def throttled():
                from lirs.eval.envelope import evict_cache

                # lirs's pre-processing is the index scan: timed on the envelope, from a cold cache
                evict_cache([path])
                t = time.perf_counter()
                idx = lirs.build_index(path)
                t_index = time.perf_counter() - t
                return compare_svm(idx, methods, epochs=1, batch_size=a.batch_size, C=a.C, seed=a.seed,
                                   workdir=a.dir, f_star=f_star, data=(X, y), index_s=t_index,
                                   epoch_budget_s=a.envelope_budget, log_fn=lambda m: print("    " + m, flush=True))

            hd, info = on_envelope(env, path, throttled)
            d[env] = {"envelope": info, "budget_s": a.envelope_budget, "methods": envelope_rows(d, hd)}
        res["datasets"][order] = d
        del X, y
    txt = table(res)
    print(txt)
    res["table"] = txt
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    import json

    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    png = os.path.splitext(a.json)[0] + ".png"
    print(f"wrote {a.json}" + (f" and {png}" if plot(res, png) else " (no plot: matplotlib missing)"))
    if not a.keep and not a.smoke:
        for p in files:
            for q in (p, lirs.sidecar_path(p)):
                if os.path.exists(q):
                    os.unlink(q)
    return 0


if __name__ == "__main__":
    sys.exit(main())
