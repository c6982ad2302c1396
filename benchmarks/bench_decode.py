"""LIBSVM decoder speed against sklearn and xgboost's dmlc-core parser, on the same bytes in one run.

    python benchmarks/bench_decode.py [--size 300MB] [--dir /work/scratch/decode] [--keep]

Generates a kdd-like LIBSVM file (~340 B/record, ~30 nonzeros, indices up to 20M, labels +-1,
values 1 or short decimals 6:1), warms the page cache, then times in interleaved rounds (the
median of --repeats rounds each; wall and CPU seconds):
  one core (the process pinned to CPU 0, as ``taskset -c 0``):
  * sklearn.datasets.load_svmlight_file (the semantic reference);
  * xgboost.DMatrix("file?format=libsvm", nthread=1) (dmlc-core's parser; optional);
  * svmloader.load_svmfile (optional);
  * lirs.decode.load_svmlight(threads=1);
  all cores: xgboost with nthread = cores, lirs.load_svmlight (one region per core);
  and lirs.decode.decode_libsvm on loader-like batches of 4096 random records gathered into one
  buffer (decode time only, one core), and on a window (--window bytes of records in shuffled
  order, one buffer) on one thread and in runs on every core.
Each round records wall, CPU and kernel (sys) seconds, minor faults and the load average: a slow
round with the same CPU seconds was waiting for a CPU held by another process.
Optional peers that are not installed (``pip install xgboost svmloader``) are left out with a note.
Checks that lirs and sklearn agree bit for bit, and writes benchmarks/results/decode.json with MB/s
and ratios measured in the same run. Goals: lirs per core >= 2x xgboost on one core; lirs on all
cores >= 3x xgboost on all cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import write_result  # noqa: E402

_SIZES = {"KB": 1e3, "MB": 1e6, "GB": 1e9, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}


def parse_size(s: str) -> int:
    s = s.strip().upper()
    for suf, mul in sorted(_SIZES.items(), key=lambda kv: -len(kv[0])):
        if s.endswith(suf):
            return int(float(s[: -len(suf)]) * mul)
    return int(s)


def generate_kdd_like(path: str, size: int, seed: int = 0) -> int:
    """Write about ``size`` bytes of kdd-like LIBSVM records to ``path``; returns the record count."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0, 1]))
    # like kdd2010: most values a plain 1, some short decimals as a formatter writes them
    dec = [("%.4g" % v).encode() for v in rng.random(600)]
    pool = np.array([b"1"] * (len(dec) * 6) + dec, dtype=object)
    n = 0
    written = 0
    with open(path, "wb") as f:
        while written < size:
            m = 20000
            nnz = rng.integers(24, 37, m)
            labels = rng.choice([b"+1", b"-1"], m)
            lines = []
            for i in range(m):
                idx = np.unique(rng.integers(1, 20_000_000, nnz[i]))
                vals = pool[rng.integers(0, len(pool), len(idx))]
                lines.append(labels[i] + b" " + b" ".join(b"%d:%s" % (a, v) for a, v in zip(idx.tolist(), vals)))
            chunk = b"\n".join(lines) + b"\n"
            f.write(chunk)
            written += len(chunk)
            n += m
    return n


def timed(fn):
    """(wall seconds, CPU seconds of this process, result) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def timed_round(fn):
    """A round of one contender: ({wall, cpu, sys, minflt, load}, result). ``sys`` (kernel time:
    page faults, mapping) and the 1-minute load average at the end tell a slow round's cause: on
    a shared machine a round is slow when other processes hold the CPU, not when lirs works more."""
    import resource
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w, c, out = timed(fn)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": w, "cpu": c, "sys": r1.ru_stime - r0.ru_stime, "minflt": r1.ru_minflt - r0.ru_minflt,
            "load": os.getloadavg()[0]}, out


def peers(path):
    """Optional peer loaders: {name: (threads or None, fn)}; and notes on the missing ones."""
    out, notes = {}, []
    try:
        import xgboost as xgb

        def xgb_load(nthread):
            return lambda: xgb.DMatrix(path + "?format=libsvm", nthread=nthread, silent=True)
        out["xgboost_dmatrix_1core"] = (1, xgb_load(1))
        out["xgboost_dmatrix_all_cores"] = (None, xgb_load(_cores()))
        import warnings
        warnings.filterwarnings("ignore", message=".*Text file input has been deprecated.*")
    except ImportError:
        notes.append("xgboost not installed: its rows are left out (pip install xgboost)")
    try:
        import svmloader

        out["svmloader_1core"] = (1, lambda: svmloader.load_svmfile(path, dtype="f", ltype="d", zero_based=False))
    except ImportError:
        notes.append("svmloader not installed: its row is left out (pip install svmloader)")
    return out, notes


def _cores():
    return len(os.sched_getaffinity(0))


def _pinned(cpus, fn):
    """Run fn with this thread (and the threads it starts) allowed on ``cpus`` only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        return fn()
    finally:
        os.sched_setaffinity(0, before)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/work/scratch/decode")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--window", default="64MB", help="bytes of the loader-like window decoded in runs")
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args(argv)

    from sklearn.datasets import load_svmlight_file

    from lirs.decode import decode_libsvm, load_svmlight
    from lirs.cores import usable_cores as cores

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "decode-kdd.svm")
    size = parse_size(args.size)
    if not (os.path.exists(path) and abs(os.path.getsize(path) - size) < 0.05 * size + 1e6):
        t0 = time.perf_counter()
        generate_kdd_like(path, size)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    nbytes = os.path.getsize(path)
    mb = nbytes / 1e6
    buf = np.fromfile(path, np.uint8)  # also warms the page cache for every reader below
    all_cpus = os.sched_getaffinity(0)
    one_cpu = {min(all_cpus)}

    # warm up numba (compile or load the cache) on a small slice, outside the timings
    head = int(np.flatnonzero(buf[: 1 << 20] == 10)[-1]) + 1
    warm = os.path.join(args.dir, "decode-warmup.svm")
    buf[:head].tofile(warm)
    load_svmlight(warm, dtype=np.float32)
    os.remove(warm)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], nl[:-1] + 1]).astype(np.int64)
    ends = (nl + 1).astype(np.int64)
    n = len(starts)
    decode_libsvm(buf[:head], starts[starts < head][:-1], ends[starts < head][:-1], n_features=20_000_000,
                  zero_based=False)

    contenders = {
        "sklearn_load_svmlight_file_1core": (1, lambda: load_svmlight_file(path, dtype=np.float32)),
        "lirs_load_svmlight_1core": (1, lambda: load_svmlight(path, dtype=np.float32)),
        "lirs_load_svmlight_all_cores": (None, lambda: load_svmlight(path, dtype=np.float32)),
    }
    extra, notes = peers(path)
    contenders.update(extra)
    for name, (threads, fn) in list(contenders.items()):
        if threads == 1:
            contenders[name] = (threads, (lambda f: lambda: _pinned(one_cpu, f))(fn))

    # Rounds interleave the contenders, so that load from other processes on a shared machine hits
    # them alike; each figure is the median round. CPU seconds (this process) are reported too.
    times = {k: [] for k in contenders}
    same = True
    ref = None
    for r in range(args.repeats):
        for name, (_, fn) in contenders.items():
            t, out = timed_round(fn)
            times[name].append(t)
            if name.startswith("sklearn"):
                ref = out
            elif name.startswith("lirs") and ref is not None:
                X, y = out
                Xs, ys = ref
                same = same and (X.shape == Xs.shape and np.array_equal(X.indptr, Xs.indptr)
                                 and np.array_equal(X.indices, Xs.indices)
                                 and np.array_equal(X.data.view(np.uint32), Xs.data.view(np.uint32))
                                 and np.array_equal(y, ys))
            del out
        print(f"round {r} (load {os.getloadavg()[0]:.1f}): "
              + ", ".join(f"{k} {mb / v[-1]['wall']:.0f} MB/s" for k, v in times.items()), file=sys.stderr)
    Xs, ys = ref
    n_features = Xs.shape[1]

    # loader-like: random batches gathered into a contiguous buffer, as an engine would deliver them
    rng = np.random.default_rng(np.random.SeedSequence([0, 0, 2]))
    perm = rng.permutation(n)
    t_batches, c_batches, batch_bytes, nb = 0.0, 0.0, 0, 0
    for b0 in range(0, min(n, 100 * args.batch), args.batch):
        ids = perm[b0:b0 + args.batch]
        lens = ends[ids] - starts[ids]
        bstarts = np.zeros(len(ids), np.int64)
        np.cumsum(lens[:-1], out=bstarts[1:])
        bbuf = np.concatenate([buf[s:e] for s, e in zip(starts[ids].tolist(), ends[ids].tolist())])
        w, c, (X, y) = timed(lambda: decode_libsvm(bbuf, bstarts, bstarts + lens, n_features=n_features,
                                                   zero_based=False, file_offsets=starts[ids], source=path))
        t_batches += w
        c_batches += c
        batch_bytes += int(lens.sum())
        nb += 1
        if nb == 1:
            refb = Xs[ids]
            same = same and np.array_equal(X.indptr, refb.indptr) and np.array_equal(X.indices, refb.indices) \
                and np.array_equal(X.data, refb.data) and np.array_equal(y, ys[ids])
    print(f"lirs decode_libsvm ({nb} batches of {args.batch}): {batch_bytes / 1e6 / t_batches:.1f} MB/s",
          file=sys.stderr)

    # a loader window: the spans of the records of the first --window bytes, in shuffled order, in
    # one buffer; decoded on one thread and in runs on every core (decode time only)
    wn = int(np.searchsorted(ends, parse_size(args.window), side="right"))
    wids = rng.permutation(wn)
    ws, we = starts[wids], ends[wids]
    wbytes = int((we - ws).sum())
    window = {}
    for r in range(args.repeats):
        for name, th in (("1thread", 1), ("all_cores", None)):
            w, c, (X, y) = timed(lambda: decode_libsvm(buf, ws, we, n_features=n_features, zero_based=False,
                                                       source=path, threads=th))
            window.setdefault(name, []).append(w)
            if r == 0:
                refw = Xs[wids]
                same = same and np.array_equal(X.indptr, refw.indptr) and np.array_equal(X.indices, refw.indices) \
                    and np.array_equal(X.data, refw.data) and np.array_equal(y, ys[wids])
            del X, y
    print("lirs decode_libsvm window: " + ", ".join(f"{k} {wbytes / 1e6 / min(v):.0f} MB/s" for k, v in window.items()),
          file=sys.stderr)

    def med(name):
        w = sorted(t["wall"] for t in times[name])[len(times[name]) // 2]
        c = sorted(t["cpu"] for t in times[name])[len(times[name]) // 2]
        return w, c

    def best(name):
        return min(t["wall"] for t in times[name])

    def fig(name):
        w, c = med(name)
        return {"threads": contenders[name][0] or len(all_cpus), "seconds": w, "cpu_seconds": c,
                "MB_per_s": mb / w, "best_round_MB_per_s": mb / best(name),
                "rounds_seconds": [t["wall"] for t in times[name]],
                "rounds_cpu_seconds": [t["cpu"] for t in times[name]],
                "rounds_sys_seconds": [t["sys"] for t in times[name]],
                "rounds_minor_faults": [t["minflt"] for t in times[name]],
                "rounds_load_average": [t["load"] for t in times[name]]}

    res = {
        "command": "python benchmarks/bench_decode.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "file": {"bytes": nbytes, "records": int(n), "nnz": int(Xs.nnz), "n_features": int(n_features),
                 "bytes_per_record": nbytes / n, "generator": "generate_kdd_like (inline, seed 0)"},
        "page_cache": "warm",
        "cores": len(all_cpus),
        "lirs_threads_all_cores": cores(),
        "dtype": "float32",
        "rounds": args.repeats,
        "method": "contenders interleaved per round, median round each; 1core = process pinned to one "
                  "CPU (sched_setaffinity, as taskset -c 0); MB/s = file bytes / wall seconds",
        "results_equal_sklearn": bool(same),
        "notes": notes,
    }
    for name in contenders:
        res[name] = fig(name)
    res["lirs_decode_libsvm_batches_1thread"] = {
        "batch_records": args.batch, "batches": nb, "MB_per_s": batch_bytes / 1e6 / t_batches,
        "cpu_MB_per_s": batch_bytes / 1e6 / c_batches}
    res["lirs_decode_libsvm_window"] = {
        "bytes": wbytes, "records": wn, "threads_all_cores": cores(),
        **{f"{k}_MB_per_s": wbytes / 1e6 / sorted(v)[len(v) // 2] for k, v in window.items()},
        "speedup_all_cores_over_1thread": sorted(window["1thread"])[len(window["1thread"]) // 2]
        / sorted(window["all_cores"])[len(window["all_cores"]) // 2]}
    sk = med("sklearn_load_svmlight_file_1core")[0]
    l1, la = med("lirs_load_svmlight_1core")[0], med("lirs_load_svmlight_all_cores")[0]
    ratios = {"lirs_1core_vs_sklearn": sk / l1, "lirs_all_cores_speedup_over_1core": l1 / la}
    goals = {}
    if "xgboost_dmatrix_1core" in contenders:
        x1, xa = med("xgboost_dmatrix_1core")[0], med("xgboost_dmatrix_all_cores")[0]
        ratios.update(lirs_1core_vs_xgboost_1core=x1 / l1, lirs_all_cores_vs_xgboost_all_cores=xa / la,
                      xgboost_all_cores_speedup_over_1core=x1 / xa,
                      lirs_1core_cpu_vs_xgboost_1core_cpu=med("xgboost_dmatrix_1core")[1] / med("lirs_load_svmlight_1core")[1])
        goals = {"per_core_vs_xgboost >= 2": x1 / l1 >= 2, "all_cores_vs_xgboost >= 3": xa / la >= 3}
        res["ratios_best_round"] = {
            "lirs_1core_vs_xgboost_1core": best("xgboost_dmatrix_1core") / best("lirs_load_svmlight_1core"),
            "lirs_all_cores_vs_xgboost_all_cores": best("xgboost_dmatrix_all_cores")
            / best("lirs_load_svmlight_all_cores")}
    res["ratios"] = ratios
    res["goals_met"] = goals
    res["load_average_at_end"] = os.getloadavg()[0]
    out = write_result("decode", res)
    print(out)
    if not args.keep:
        os.remove(path)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
