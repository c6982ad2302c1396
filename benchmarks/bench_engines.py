"""Engines against fio on the same file, and the loader's stall fraction, in one run.

    python benchmarks/bench_engines.py [--size 4GB] [--dir /work/scratch/engines] [--runtime 4]
                                       [--repeats 3] [--loader-size 512MB] [--keep]
                                       [--rows uring_4k_qd32,uring_4k_qd128]

On one file of ``--size`` random bytes, O_DIRECT, random aligned offsets, each point measured as
``--repeats`` interleaved pairs (fio and the engine, which one goes first alternating) so that a
shared, drifting device and CPU affect both alike; the reported ratio is the median of the pairs'
ratios. Each side's CPU time per read (user + system) is reported too: on a machine whose cores
are shared it tells where a ratio comes from. ``--rows`` measures only the named rows and keeps the
others from the previous result file:

  * 4 KiB random reads/s, queue depth 32 and 128: ``uring`` (depth = QD) vs fio io_uring (fio's
    defaults: one job, ``iodepth_batch_submit=1``, ``iodepth_batch_complete_min=1``, no registered
    files or buffers, no SQ polling; fio 3.33 sets its ring up with COOP_TASKRUN, SINGLE_ISSUER and
    DEFER_TASKRUN, as the engine does; the JSON states both setups);
  * 64 KiB random bandwidth, QD 32: ``uring`` vs fio io_uring;
  * 4 KiB random reads/s: ``threads`` (32 threads) vs fio psync with 32 jobs;
  * 4 KiB random reads/s: ``aiofiles`` (64 in flight), reported against fio io_uring QD 32.

Engine runs read batches of extents (4096 x 4 KiB, or 512 x 64 KiB) with one call per batch.
Then, on a generated kdd-like LIBSVM file of ``--loader-size``, ``lirs epoch`` with no compute
gives the load time per batch; runs with ``--compute-ms`` at 1x and 1.5x that time give the stall
fraction (goal <= 5%). Writes benchmarks/results/engines.json; deletes the big file unless --keep.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import ensure_file, fio_json, write_result  # noqa: E402

BLOCK = 4096
# fio's io_uring engine as the reference runs use it (fio 3.33 defaults; the flags seen with
# `strace -e io_uring_setup fio ...` on this machine class: CQSIZE|COOP_TASKRUN|SINGLE_ISSUER|DEFER_TASKRUN)
FIO_URING_SETUP = {
    "setup_flags": ["CQSIZE", "COOP_TASKRUN", "SINGLE_ISSUER", "DEFER_TASKRUN"],
    "registerfiles": 0, "fixedbufs": 0, "sqthread_poll": 0, "hipri": 0,
    "iodepth_batch_submit": 1, "iodepth_batch_complete_min": 1, "numjobs": 1,
}


def make_file(path: str, size: int) -> None:
    """``size`` bytes of seeded random data (a repeated 64 MiB pattern: the device cannot compress it)."""
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    chunk = np.random.default_rng(0).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        left = size
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fio_point(path: str, *, bs: int, qd: int, engine: str, jobs: int, runtime: float) -> tuple[dict, list[str]]:
    args = ["--name=bench", f"--filename={path}", "--rw=randread", f"--bs={bs}", "--direct=1",
            f"--ioengine={engine}", f"--iodepth={qd}", f"--numjobs={jobs}", "--group_reporting", "--thread",
            f"--runtime={runtime}", "--time_based", "--norandommap", "--randrepeat=0"]
    r = fio_json(args)
    if r is None:
        return None, ["fio", *args]
    job = r["jobs"][0]
    rd = job["read"]
    # usr_cpu/sys_cpu are percentages of the job's runtime (ms)
    cpu_s = (float(job["usr_cpu"]) + float(job["sys_cpu"])) / 100 * float(job["job_runtime"]) / 1000
    return {"reads_per_s": float(rd["iops"]), "bytes_per_s": float(rd["bw_bytes"]),
            "cpu_us_per_read": 1e6 * cpu_s / max(1, int(rd["total_ios"]))}, ["fio", *args]


def engine_point(path: str, *, name: str, bs: int, depth: int, batch: int, runtime: float, seed: int) -> dict:
    from lirs.engines import aligned_empty, open_engine

    size = os.path.getsize(path)
    rng = np.random.default_rng(seed)
    with open_engine([path], name, direct=True, depth=depth) as eng:
        buf = aligned_empty(batch * bs)
        pos = np.arange(batch, dtype=np.int64) * bs
        nb = np.full(batch, bs, np.int64)
        ef = np.zeros(batch, np.int32)
        nblk = size // bs
        offs = [np.sort(rng.integers(0, nblk, batch)).astype(np.int64) * bs for _ in range(8)]
        eng.read(ef, offs[0], nb, buf, pos)  # warm-up: threads started, rings mapped, kernels loaded
        setup = engine_setup(eng)
        reads = 0
        k = 0
        c0 = os.times()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < runtime:
            got = eng.read(ef, offs[k % len(offs)], nb, buf, pos)
            reads += batch
            k += 1
        dt = time.perf_counter() - t0
        c1 = os.times()
        assert int(got.sum()) == batch * bs
    cpu_s = (c1.user - c0.user) + (c1.system - c0.system)
    return {"reads_per_s": reads / dt, "bytes_per_s": reads * bs / dt, "cpu_us_per_read": 1e6 * cpu_s / reads,
            **({"setup": setup} if setup else {})}


def engine_setup(eng) -> dict | None:
    """How a uring engine's ring is set up (flags, registered files, completions per wait)."""
    if eng.name != "uring":
        return None
    from lirs.engines import uring as U
    from lirs.kernels import ring as RK
    from lirs.kernels.io import R_ENTRIES

    ring = eng._take()
    names = [n for n in ("COOP_TASKRUN", "SINGLE_ISSUER", "DEFER_TASKRUN")
             if ring.flags & getattr(U, f"IORING_SETUP_{n}")]
    return {"setup_flags": names, "registered_files": bool(ring.desc[RK.R_FIXED]),
            "wait_completions": int(ring.desc[RK.R_WAIT]), "reads_per_submit_call": int(ring.desc[RK.R_SUBMIT]),
            "ring_entries": int(ring.desc[R_ENTRIES])}


def compare(path, label, *, fio_kw, eng_kw, metric, repeats, runtime, goal=None):
    pairs = []
    cmd = None
    setup = None
    for r in range(repeats):
        if r % 2 == 0:
            f, cmd = fio_point(path, runtime=runtime, **fio_kw)
            e = engine_point(path, runtime=runtime, seed=r, **eng_kw)
        else:
            e = engine_point(path, runtime=runtime, seed=r, **eng_kw)
            f, cmd = fio_point(path, runtime=runtime, **fio_kw)
        setup = e.get("setup", setup)
        pairs.append({"fio": f[metric] if f else None, "engine": e[metric],
                      "ratio": e[metric] / f[metric] if f else None, "first": "fio" if r % 2 == 0 else "engine",
                      "fio_cpu_us_per_read": f["cpu_us_per_read"] if f else None,
                      "engine_cpu_us_per_read": e["cpu_us_per_read"]})
        print(f"  {label} #{r}: engine {e[metric]:,.0f}  fio {f[metric] if f else float('nan'):,.0f}",
              file=sys.stderr)
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    res = {
        "metric": metric,
        "engine": eng_kw,
        "fio_command": " ".join(cmd),
        "pairs": pairs,
        "engine_median": statistics.median(p["engine"] for p in pairs),
        "fio_median": statistics.median(p["fio"] for p in pairs) if ratios else None,
        "ratio_median": statistics.median(ratios) if ratios else None,
        "engine_cpu_us_per_read_median": statistics.median(p["engine_cpu_us_per_read"] for p in pairs),
        "fio_cpu_us_per_read_median": statistics.median(p["fio_cpu_us_per_read"] for p in pairs) if ratios
        else None,
    }
    if setup:
        res["engine_setup"] = setup
    if fio_kw["engine"] == "io_uring":
        res["fio_setup"] = FIO_URING_SETUP
    if goal is not None:
        res["goal_ratio"] = goal
        res["meets_goal"] = bool(ratios) and res["ratio_median"] >= goal
    return res


def lirs_epoch(path, extra):
    cmd = [sys.executable, "-m", "lirs.cli", "epoch", path, "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout), cmd


def loader_stall(args) -> dict:
    import lirs
    from lirs.eval.gen import generate
    from lirs.units import parse_size

    try:
        import lirs.plan  # noqa: F401
    except ImportError as e:
        return {"skipped": f"planner not available ({e})"}
    path = os.path.join(args.dir, "loader-kdd.svm")
    size = parse_size(args.loader_size)
    ensure_file(path, size, lambda: generate("kdd", path, size=size, order="shuffled", seed=1, progress=False))
    lirs.build_index(path, progress=False)
    common = ["--granularity", "group", "--batch-size", str(args.batch_size)]
    if args.loader_batches > 0:
        common += ["--max-batches", str(args.loader_batches)]
    base, cmd0 = lirs_epoch(path, common + ["--compute-ms", "0"])
    per_batch_ms = 1000 * base["wall_s"] / base["batches"]
    runs = [{"command": " ".join(cmd0), **base}]
    for mult in (1.0, 1.5):
        ms = math.ceil(per_batch_ms * mult * 10) / 10
        # a short epoch's stall varies from run to run: the median of --loader-repeats epochs
        reps = []
        for _ in range(max(1, args.loader_repeats)):
            r, cmd = lirs_epoch(path, common + ["--compute-ms", f"{ms}"])
            reps.append(r)
        r = sorted(reps, key=lambda x: x["stall_fraction"])[len(reps) // 2]
        runs.append({"command": " ".join(cmd), "compute_ms_over_load_ms": ms / per_batch_ms, **r,
                     "stall_fractions": [x["stall_fraction"] for x in reps]})
        print(f"  loader compute {ms} ms/batch: stall {100 * r['stall_fraction']:.1f}% (median of {len(reps)})",
              file=sys.stderr)
    if not args.keep:
        for p in (path, path + ".lirs"):
            if os.path.exists(p):
                os.unlink(p)
    return {
        "file": path,
        "file_bytes": size,
        "load_ms_per_batch_no_compute": per_batch_ms,
        "runs": runs,
        "stall_at_1x": runs[1]["stall_fraction"],
        "stall_at_1_5x": runs[2]["stall_fraction"],
        "goal_stall": 0.05,
        "meets_goal": runs[1]["stall_fraction"] <= 0.05,
    }


# row: (label, fio point, engine point, metric, goal ratio or None)
ROWS = {
    "uring_4k_qd32": ("uring 4k qd32", dict(bs=4096, qd=32, engine="io_uring", jobs=1),
                      dict(name="uring", bs=4096, depth=32, batch=4096), "reads_per_s", 0.95),
    "uring_4k_qd128": ("uring 4k qd128", dict(bs=4096, qd=128, engine="io_uring", jobs=1),
                       dict(name="uring", bs=4096, depth=128, batch=4096), "reads_per_s", 0.95),
    "uring_64k_qd32_bandwidth": ("uring 64k qd32", dict(bs=65536, qd=32, engine="io_uring", jobs=1),
                                 dict(name="uring", bs=65536, depth=32, batch=512), "bytes_per_s", 0.95),
    "threads_4k_32": ("threads 4k x32", dict(bs=4096, qd=1, engine="psync", jobs=32),
                      dict(name="threads", bs=4096, depth=32, batch=4096), "reads_per_s", 0.85),
    "aiofiles_4k_64": ("aiofiles 4k x64", dict(bs=4096, qd=32, engine="io_uring", jobs=1),
                       dict(name="aiofiles", bs=4096, depth=64, batch=4096), "reads_per_s", None),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GB")
    ap.add_argument("--dir", default="/work/scratch/engines")
    ap.add_argument("--runtime", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--loader-size", default="512MB")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--loader-repeats", type=int, default=5, help="epochs per compute time (median stall)")
    ap.add_argument("--loader-batches", type=int, default=0,
                    help="batches per loader run (default 0: the whole epoch; a few hundred batches of a fast "
                         "loader are mostly the pipeline's fill, not its steady state)")
    ap.add_argument("--skip-engines", action="store_true")
    ap.add_argument("--skip-loader", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--rows", default="", help=f"comma-separated rows to measure (default all: {', '.join(ROWS)}); "
                                               "the others are kept from the previous result file")
    args = ap.parse_args(argv)
    args.rows = [r for r in args.rows.split(",") if r]
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown:
        ap.error(f"unknown rows {', '.join(unknown)}; expected some of {', '.join(ROWS)}")

    from lirs.units import parse_size

    os.makedirs(args.dir, exist_ok=True)
    res = {"command": " ".join([os.path.basename(sys.executable), "benchmarks/bench_engines.py",
                                *(argv if argv is not None else sys.argv[1:])])}
    if not args.skip_engines:
        path = os.path.join(args.dir, "engines-random.bin")
        size = parse_size(args.size)
        make_file(path, size)
        res["file_bytes"] = size
        kw = dict(repeats=args.repeats, runtime=args.runtime)
        pts = {}
        for row, (label, fio_kw, eng_kw, metric, goal) in ROWS.items():
            if args.rows and row not in args.rows:
                continue
            pts[row] = compare(path, label, fio_kw=fio_kw, eng_kw=eng_kw, metric=metric, goal=goal, **kw)
        res["engines"] = pts
        if not args.keep:
            os.unlink(path)
    if not args.skip_loader:
        res["loader"] = loader_stall(args)
    # a partial run (--skip-*) keeps the other section of the previous result file
    prev_path = os.path.join(HERE, "results", "engines.json")
    if (args.skip_engines or args.skip_loader or args.rows) and os.path.exists(prev_path):
        with open(prev_path) as f:
            prev = json.load(f)
        if "engines" in res and args.rows:
            for row, val in prev.get("engines", {}).items():
                if row not in res["engines"]:
                    res["engines"][row] = val if "kept_from_previous_run" in val else {**val, "kept_from_previous_run": {"command": prev.get("command"),
                                                                             "date": prev.get("date")}}
            res["engines"] = {r: res["engines"][r] for r in ROWS if r in res["engines"]}
        for key in ("engines", "file_bytes", "loader"):
            if key not in res and key in prev:
                res[key] = prev[key]
                # a section kept again keeps the run that measured it
                origin = next((k for k in prev.get("kept_from_previous_run", []) if k.get("section") == key),
                              {"section": key, "command": prev.get("command"), "date": prev.get("date")})
                res.setdefault("kept_from_previous_run", []).append(origin)
    out = write_result("engines", res)
    print(out)


if __name__ == "__main__":
    main()
