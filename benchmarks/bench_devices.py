"""`lirs bench` on three data sets and three device envelopes: the README's results tables and plots.

    python benchmarks/bench_devices.py                  # full run: 3 x 2.2 GB files, nvme/ssd/hdd
    python benchmarks/bench_devices.py --report         # tables + plots again from the JSON, no run
    python benchmarks/bench_devices.py --smoke          # tiny files, short budgets, results in --dir

Data sets (generated with `lirs gen`, seeded, shuffled order, kept in --dir between runs):

* ``kdd``: kdd-like LIBSVM, small records (~355 B), batches of 1024;
* ``webspam``: webspam-like LIBSVM, large records (~45 KB), batches of 128 (about 5.7 MB);
* ``higgs``: higgs-like dense float32 ``.npy`` (112 B records), batches of 1024.

Each file is at least 2 GB (more than the page cache can hide once it is evicted, and far more
than a shuffle buffer), indexed once (timed), then measured by :func:`lirs.eval.bench.run_bench` on each
envelope: fio on the file (5 jobs), lirs instance/page/group/window (64 KiB groups plus the size
the envelope calls for), and every peer that applies (sklearn/np.load in memory, torch DataLoader,
np.memmap, shuffle buffer, BMF, two-pass external shuffle), each for at most ``--budget`` seconds
of reading (epochs that take longer are extrapolated and marked so).

Writes ``benchmarks/results/bench_<name>.json`` and ``.png`` (``--smoke``: into ``--dir``), and
``bench_devices.md``: the markdown tables for the README, with the command that made them.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import RESULTS  # noqa: E402

DATASETS = {
    "kdd": {"profile": "kdd", "ext": ".svm", "batch_size": 1024, "about": "kdd-like LIBSVM (small records)"},
    "webspam": {"profile": "webspam", "ext": ".svm", "batch_size": 128,
                "about": "webspam-like LIBSVM (large records)"},
    "higgs": {"profile": "higgs", "ext": ".npy", "batch_size": 1024, "about": "higgs-like dense .npy"},
}


def make_data(name: str, d: str, size: int, say) -> tuple[str, dict]:
    """Generate (unless present at about that size) and index the data set; returns (path, facts)."""
    import lirs
    from lirs.eval.gen import generate

    spec = DATASETS[name]
    path = os.path.join(d, f"{name}{spec['ext']}")
    facts = {}
    if not os.path.exists(path) or abs(os.path.getsize(path) - size) > 0.05 * size:
        say(f"{name}: generating {size / 1e9:.2f} GB -> {path}")
        t = time.perf_counter()
        r = generate(spec["profile"], path, size=size, order="shuffled", seed=7, progress=None)
        facts["gen_s"] = time.perf_counter() - t
        facts["records"] = int(r["records"])
    side = path + ".lirs"
    if os.path.exists(side):
        os.unlink(side)  # index in this run: its time is lirs's pre-processing
    for stale in (side + ".bench.json",):
        if os.path.exists(stale):
            os.unlink(stale)
    t = time.perf_counter()
    lirs.build_index(path, progress=None)
    facts["index_s"] = time.perf_counter() - t
    return path, facts


def run(args) -> None:
    from lirs.eval.bench import format_table, plot, run_bench, write_json
    from lirs.units import parse_size

    out_dir = args.out or (os.path.join(args.dir, "results") if args.smoke else RESULTS)
    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    size = parse_size(args.size)
    cmd = " ".join(["python", "benchmarks/bench_devices.py", *map(shlex.quote, args.argv)])
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    t_all = time.perf_counter()
    for name in args.datasets:
        spec = DATASETS[name]
        path, facts = make_data(name, args.dir, size, say)
        say(f"{name}: benchmarking {os.path.getsize(path) / 1e9:.2f} GB on {', '.join(args.devices)}")
        t = time.perf_counter()
        res = run_bench(path, devices=args.devices, batch_size=spec["batch_size"], budget_s=args.budget,
                        reads_only=("instance", "group"),
                        fio_runtime_s=args.fio_runtime, epochs=args.epochs, workdir=os.path.join(args.dir, "work"),
                        seed=args.seed, command=cmd, say=say)
        res["benchmark"] = {"dataset": name, "about": spec["about"], "seconds": time.perf_counter() - t,
                            "smoke": bool(args.smoke), **facts}
        res["data"]["index_s"] = facts["index_s"]
        for row in res["rows"]:
            if row["kind"] == "lirs":
                row["pre_s"], row["pre_what"] = facts["index_s"], "lirs index (scan once)"
        js = write_json(res, os.path.join(out_dir, f"bench_{name}.json"))
        plot(res, os.path.join(out_dir, f"bench_{name}.png"), title=_title(res, name))
        print(format_table(res))
        say(f"{name}: {res['benchmark']['seconds']:.0f}s -> {js}")
    say(f"total {time.perf_counter() - t_all:.0f}s")
    report(out_dir, args.datasets)


# ------------------------------------------------------------------------------ README tables


def _title(res: dict, name: str) -> str:
    return (f"lirs bench, {res.get('benchmark', {}).get('about', name)}: {res['data']['file_bytes'] / 1e9:.1f} GB, "
            f"{res['data']['records']:,} records")


def _s(v, extra=False):
    if v is None:
        return "–"
    mark = "~" if extra else ""
    if v >= 3600:
        return f"{mark}{v / 3600:.1f} h"
    if v >= 100:
        return f"{mark}{v:.0f} s"
    return f"{mark}{v:.3g} s"


def _n(v):
    if v is None:
        return "–"
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e3:
        return f"{v / 1e3:.1f} k"
    return f"{v:.0f}"


def table_md(res: dict) -> str:
    """Markdown: one table per device of one data set's result, then recommendations and goals."""
    lines = []
    d = res["data"]
    lines.append(f"**{res.get('benchmark', {}).get('about', d['format'])}**: {d['file_bytes'] / 1e9:.2f} GB, "
                 f"{d['records']:,} records of {d['mean_record_bytes']:,.0f} B on average, batches of "
                 f"{res['settings']['batch_size']}; index built in {_s(d.get('index_s'))}.")
    lines.append("")
    for dev in res["settings"]["devices"]:
        env = res["envelopes"][dev]
        fio = res["fio"].get(dev) or {}
        head = f"*{dev}*" + ("" if env["read_iops"] is None else
                             f" (throttled to {env['read_iops']:,} IOPS, {env['read_bps'] / 1e6:.0f} MB/s)")
        if fio.get("available"):
            j = fio["jobs"]
            head += (f" — fio: 4 KiB random QD1/32/128 {_n(j['rand4k_qd1'].get('iops'))}/"
                     f"{_n(j['rand4k_qd32'].get('iops'))}/{_n(j['rand4k_qd128'].get('iops'))} IOPS, 64 KiB "
                     f"random {j['rand64k_qd32'].get('bw_bytes', 0) / 1e6:.0f} MB/s, sequential "
                     f"{j['seq1m_qd16'].get('bw_bytes', 0) / 1e6:.0f} MB/s")
        lines.append(head)
        lines.append("")
        lines.append("| configuration | epoch | records/s | MB/s | reads/s | read ampl. | CPU s/epoch | peak RSS | "
                     "pre-processing | vs fio |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        rec = (res.get("recommendation") or {}).get(dev, {}).get("config")
        for r in res["rows"]:
            if r["device"] != dev:
                continue
            name = f"**{r['name']}**" if r["name"] == rec else r["name"]
            if r["status"] != "ok":
                lines.append(f"| {name} | {r['status']}: {r.get('note') or ''} |||||||||")
                continue
            b = r.get("bound") or {}
            vs = "–" if r.get("ratio") is None else f"{r['ratio']:.2f}× {b.get('fio_job')}"
            mb = "–" if r.get("mb_per_s") is None else f"{r['mb_per_s']:.0f}"
            amp = "–" if r.get("amplification") is None else f"{r['amplification']:.2f}"
            rss = "–" if not r.get("peak_rss_bytes") else f"{r['peak_rss_bytes'] / 1e6:.0f} MB"
            lines.append(
                f"| {name} | {_s(r['epoch_s'], r.get('extrapolated'))} | {_n(r.get('records_per_s'))} | {mb} | "
                f"{_n(r.get('reads_per_s'))} | {amp} | {_s(r.get('cpu_s_per_epoch'), r.get('extrapolated'))} | "
                f"{rss} | {_s(r.get('pre_s'))} | {vs} |")
        lines.append("")
    recs = res.get("recommendation") or {}
    for dev, rec in recs.items():
        lines.append(f"- {rec['text']}")
    for dev, gs in (res.get("goals") or {}).items():
        for k, g in gs.items():
            met = "met" if g["met"] else "not met"
            lines.append(f"- goal {dev} {k}: {g['value']:.2f} (goal ≥ {g['goal']}) — {met}")
    lines.append("")
    return "\n".join(lines)


def report(out_dir: str, names) -> str:
    """Regenerate the plots and ``bench_devices.md`` from the JSON files in ``out_dir``."""
    from lirs.eval.bench import plot

    parts = ["<!-- generated by benchmarks/bench_devices.py --report from bench_*.json; do not edit -->", ""]
    cmd = None
    for name in names:
        js = os.path.join(out_dir, f"bench_{name}.json")
        if not os.path.exists(js):
            print(f"no {js}: run the benchmark first", file=sys.stderr)
            continue
        with open(js) as f:
            res = json.load(f)
        cmd = cmd or res.get("command")
        plot(res, os.path.join(out_dir, f"bench_{name}.png"), title=_title(res, name))
        parts.append(f"### {name}")
        parts.append("")
        parts.append(table_md(res))
        parts.append(f"![{name}](benchmarks/results/bench_{name}.png)")
        parts.append("")
    if cmd:
        parts.insert(2, f"Made with `{cmd}`; `~` marks epoch times extrapolated from a budget-limited sample.")
        parts.insert(3, "")
    md = "\n".join(parts)
    path = os.path.join(out_dir, "bench_devices.md")
    with open(path + ".tmp", "w") as f:
        f.write(md)
    os.replace(path + ".tmp", path)
    print(md)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2.2GB", help="bytes per data file (default 2.2GB)")
    ap.add_argument("--dir", default="/work/scratch/bench-devices", help="data and scratch directory")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated subset of kdd,webspam,higgs")
    ap.add_argument("--devices", default="nvme,ssd,hdd")
    ap.add_argument("--budget", type=float, default=15.0, help="seconds of reading per configuration")
    ap.add_argument("--fio-runtime", type=float, default=4.0, help="seconds per fio job")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="where the JSON/PNG/markdown go (default benchmarks/results; --smoke: DIR/results)")
    ap.add_argument("--report", action="store_true", help="only regenerate tables and plots from the JSON")
    ap.add_argument("--smoke", action="store_true", help="tiny files (30MB), budget 2s, fio 0.5s")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.datasets = [x for x in args.datasets.split(",") if x]
    bad = [x for x in args.datasets if x not in DATASETS]
    if bad:
        ap.error(f"unknown data set(s) {bad}")
    args.devices = [x for x in args.devices.split(",") if x]
    if args.smoke:
        args.size, args.budget, args.fio_runtime = "30MB", 2.0, 0.5
    if args.report:
        report(args.out or (os.path.join(args.dir, "results") if args.smoke else RESULTS), args.datasets)
        return
    run(args)


if __name__ == "__main__":
    main()
