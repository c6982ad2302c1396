"""`lirs shuffle` (two-pass external shuffle) against the device limit and GNU shuf, in one run.

    python benchmarks/bench_shuffle.py [--size 4GB] [--memory 2G] [--low-memory 64M]
                                       [--dir /work/scratch/shuffle-bench] [--smoke] [--out PATH]

On one generated kdd-like LIBSVM file (`lirs gen --profile kdd`, reused when its size matches),
on the same filesystem and in the same run:
  * fio sequential read of the file and sequential write of a scratch file of the same size
    (bs=1M, direct=1, io_uring, QD 16) → the device limit: two reads and two writes of the file at
    those bandwidths (what any two-pass shuffle must move), and the goal lirs_time <= 1.3 x that;
  * `lirs shuffle FILE -o OUT --memory M` (page cache dropped first), total and per pass, in a child
    process that reports its peak RSS above its own baseline (VmHWM after resetting it with
    /proc/self/clear_refs, once the kernels are loaded) next to the shuffle's own estimate;
  * the same with --index (the output's sidecar written in the same pass), and with a small
    --memory (many piles) to show the cap holds;
  * GNU `shuf FILE -o OUT` (+ `sync OUT`, since lirs fsyncs its output) when the file fits in RAM
    with room to spare (shuf holds the whole file in memory), cold cache, with its peak RSS;
and writes benchmarks/results/shuffle.json (or --out). `--smoke` runs the whole thing on a 32 MB
file in seconds and writes its JSON to a temporary path unless --out is given. The 1-minute load
average is recorded at each step (the machine may be shared).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import drop_caches, fio_json, fio_seq_read_bps, machine, write_result  # noqa: E402

# Runs one shuffle in a fresh interpreter: warm the kernels on a tiny file, reset the peak RSS,
# shuffle, report stats and memory as JSON on stdout.
_CHILD = r"""
import json, os, sys, time
from lirs.external import shuffle
args = json.loads(sys.argv[1])
warm = args["out"] + ".warm"
with open(warm + ".svm", "wb") as f:
    f.write(b"1 1:1\n-1 2:1 # c\n\n+1 3:0.5\n" * 64)
shuffle(warm + ".svm", warm + ".out.svm", memory="4M", index=True, progress=False)
for p in (warm + ".svm", warm + ".out.svm", warm + ".out.svm.lirs"):
    os.unlink(p)
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
reset = True
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    reset = False
rss0 = status("VmRSS")
hwm0 = status("VmHWM")
if args.get("drop"):
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
t = time.perf_counter()
st = shuffle(args["input"], args["out"], memory=args["memory"], index=args["index"], seed=args["seed"],
             tmpdir=args.get("tmpdir"), progress=False)
wall = time.perf_counter() - t
hwm = status("VmHWM")
json.dump({"stats": st, "wall": wall, "rss_before": rss0, "hwm_before": hwm0, "hwm_after": hwm,
           "hwm_reset": reset}, sys.stdout)
"""


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _fio_seq_write_bps(path: str, size: int, *, bs="1M", iodepth=16) -> float | None:
    """Sequential O_DIRECT write bandwidth (bytes/s) of a scratch file of ``size`` bytes, with fio."""
    r = fio_json(["--name=seqw", f"--filename={path}", "--rw=write", f"--bs={bs}", "--direct=1",
                  "--ioengine=io_uring", f"--iodepth={iodepth}", f"--size={size}", "--end_fsync=1"])
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    if r is None:
        return None
    return float(r["jobs"][0]["write"]["bw_bytes"])


def _remove(*paths):
    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.unlink(p)


def _lirs(data: str, out: str, memory, *, index: bool, seed: int, drop: bool) -> dict:
    args = {"input": data, "out": out, "memory": memory, "index": index, "seed": seed, "drop": drop}
    load = _load()
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"lirs shuffle failed ({r.returncode}):\n{r.stderr}")
    outer = time.perf_counter() - t
    res = json.loads(r.stdout)
    st = res["stats"]
    if st["output_bytes"] != os.path.getsize(data) or st["added_newlines"] or st["skipped_lines"]:
        raise SystemExit(f"unexpected output: {st}")
    _remove(out, out + ".lirs")
    peak = res["hwm_after"] - res["rss_before"]
    return {
        "memory": st["memory"], "index": index, "seconds": round(st["seconds"], 3),
        "seconds_pass1": st["seconds_pass1"], "seconds_pass2": st["seconds_pass2"],
        "process_seconds": round(outer, 3), "records": st["records"], "bytes": st["bytes"],
        "piles": st["piles"], "splits": st["splits"], "peak_rss_delta": int(peak),
        "peak_rss_delta_within_memory": bool(peak <= st["memory"]),
        "peak_memory_estimate": st["peak_memory_estimate"], "rss_baseline": res["rss_before"],
        "hwm_reset": res["hwm_reset"], "plan": st["plan"], "load1": load,
    }


def _shuf(data: str, out: str, *, drop: bool) -> dict:
    if drop:
        drop_caches()
    load = _load()
    timer = shutil.which("time") or "/usr/bin/time"
    with tempfile.NamedTemporaryFile("r") as tf:
        t = time.perf_counter()
        cmd = [timer, "-f", "%M", "-o", tf.name, "shuf", data, "-o", out] if os.path.exists(timer) else \
            ["shuf", data, "-o", out]
        subprocess.run(cmd, check=True)
        t_shuf = time.perf_counter() - t
        subprocess.run(["sync", out], check=True)
        t_all = time.perf_counter() - t
        rss = tf.read().strip()
    size = os.path.getsize(out)
    _remove(out)
    return {"seconds": round(t_all, 3), "seconds_without_sync": round(t_shuf, 3),
            "max_rss": int(rss) * 1024 if rss.isdigit() else None, "output_bytes": size, "load1": load}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GB", help="kdd file size (default 4GB)")
    ap.add_argument("--memory", default="2G", help="lirs shuffle --memory (default 2G)")
    ap.add_argument("--low-memory", default="64M", help="the small-memory run (default 64M; 0 skips)")
    ap.add_argument("--dir", default="/work/scratch/shuffle-bench", help="data, piles and outputs go here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-shuf", action="store_true", help="skip GNU shuf")
    ap.add_argument("--keep", action="store_true", help="keep the generated data file")
    ap.add_argument("--smoke", action="store_true", help="32MB file, seconds; JSON to a temp path unless --out")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/shuffle.json)")
    args = ap.parse_args(argv)

    from lirs.eval.gen import generate
    from lirs.units import parse_size

    if args.smoke:
        args.size, args.memory, args.low_memory = "32MB", "256M", "4M"
        args.dir = os.path.join(args.dir, "smoke")
        if args.out is None:
            args.out = os.path.join(tempfile.gettempdir(), "lirs-bench-shuffle-smoke.json")
    os.makedirs(args.dir, exist_ok=True)
    size = parse_size(args.size)
    data = os.path.join(args.dir, "bench-kdd.svm")
    out = os.path.join(args.dir, "bench-out.svm")
    _remove(out, out + ".lirs")

    t = time.perf_counter()
    if not (os.path.exists(data) and abs(os.path.getsize(data) - size) <= 0.02 * size):
        generate("kdd", data, size=size, seed=1, progress=False)
    gen_s = time.perf_counter() - t
    nbytes = os.path.getsize(data)

    # the device: sequential read of the data file, sequential write of a scratch file of its size
    drop = drop_caches()
    read_bps = fio_seq_read_bps(data, runtime=60)
    write_bps = _fio_seq_write_bps(os.path.join(args.dir, "bench-fio-write.bin"), nbytes)
    device = {"read_bytes_per_s": read_bps, "write_bytes_per_s": write_bps}
    limit = None
    if read_bps and write_bps:
        limit = 2 * nbytes / read_bps + 2 * nbytes / write_bps
        device["limit_seconds"] = round(limit, 3)
        device["what"] = "2 sequential reads + 2 sequential writes of the file at fio's bs=1M direct bandwidths"

    runs = {}
    runs["lirs"] = _lirs(data, out, args.memory, index=False, seed=args.seed, drop=drop)
    runs["lirs_index"] = _lirs(data, out, args.memory, index=True, seed=args.seed, drop=drop)
    if parse_size(args.low_memory) > 0:
        runs["lirs_low_memory"] = _lirs(data, out, args.low_memory, index=False, seed=args.seed, drop=drop)

    fits = _mem_available() > 1.5 * nbytes + (1 << 30)
    shuf = None
    if args.no_shuf:
        shuf_note = "skipped (--no-shuf)"
    elif not shutil.which("shuf"):
        shuf_note = "skipped: shuf not found"
    elif not fits:
        shuf_note = (f"skipped: the file ({nbytes} B) does not fit in RAM with room to spare "
                     f"(MemAvailable {_mem_available()} B); shuf holds the whole file in memory")
    else:
        shuf = _shuf(data, out, drop=drop)
        shuf_note = "shuf FILE -o OUT, then sync OUT (lirs fsyncs its output); cold cache"

    lirs_s = runs["lirs"]["seconds"]
    ratios = {
        "lirs_vs_device_limit": round(lirs_s / limit, 3) if limit else None,
        "lirs_index_vs_device_limit": round(runs["lirs_index"]["seconds"] / limit, 3) if limit else None,
        "lirs_vs_shuf": round(lirs_s / shuf["seconds"], 3) if shuf else None,
        "lirs_index_vs_lirs": round(runs["lirs_index"]["seconds"] / lirs_s, 3),
    }
    if "lirs_low_memory" in runs:
        ratios["lirs_low_memory_vs_lirs"] = round(runs["lirs_low_memory"]["seconds"] / lirs_s, 3)
        if limit:
            ratios["lirs_low_memory_vs_device_limit"] = round(runs["lirs_low_memory"]["seconds"] / limit, 3)
    res = {
        "command": "python benchmarks/bench_shuffle.py " + " ".join(shlex.quote(a) for a in (
            ["--smoke"] if args.smoke else
            ["--size", args.size, "--memory", args.memory, "--low-memory", args.low_memory, "--dir", args.dir])),
        "what": "lirs shuffle (exact two-pass external shuffle) of a kdd-like LIBSVM file: total and per-pass "
                "time vs the device limit (fio) and GNU shuf, peak RSS vs --memory, same run",
        "file_bytes": nbytes, "records": runs["lirs"]["records"], "generate_seconds": round(gen_s, 3),
        "caches_dropped": drop, "goal_lirs_vs_device_limit": 1.3,
        "device": device, "ratios": ratios, "runs": runs,
        "shuf": shuf, "shuf_note": shuf_note,
        "note": "seconds: wall time of the shuffle call (both passes, output fsynced, renamed). "
                "peak_rss_delta: the child's VmHWM at the end minus its RSS before the call (peak reset "
                "through /proc/self/clear_refs after loading the kernels). load1 = 1-minute load average "
                "when the step began (the CPU may be shared). Piles go through the page cache, so pass 2 "
                "may read them without touching the device.",
    }
    if args.out:
        res.setdefault("machine", machine())
        res.setdefault("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
        path = args.out
    else:
        path = write_result("shuffle", res)
    if not args.keep:
        _remove(data)
    if args.smoke:
        shutil.rmtree(args.dir, ignore_errors=True)
    for k, v in ratios.items():
        print(f"{k:34s} {v}")
    for k, v in runs.items():
        print(f"{k:34s} {v['seconds']:8.2f} s (pass 1 {v['seconds_pass1']:.2f}, pass 2 {v['seconds_pass2']:.2f}), "
              f"{v['piles']} piles, peak RSS +{v['peak_rss_delta'] / 2**20:.0f} MiB of --memory "
              f"{v['memory'] / 2**20:.0f} MiB, load {v['load1']}")
    if shuf:
        print(f"{'shuf':34s} {shuf['seconds']:8.2f} s, max RSS {shuf['max_rss'] / 2**20:.0f} MiB")
    if limit:
        print(f"{'device limit':34s} {limit:8.2f} s (read {read_bps / 1e6:.0f} MB/s, write {write_bps / 1e6:.0f} MB/s)")
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
