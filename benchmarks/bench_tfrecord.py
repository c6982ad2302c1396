"""TFRecord: index scan and Loader epochs against fio on the same file, in one run.

    flock /tmp/lirs-bench.lock python benchmarks/bench_tfrecord.py [--size 1GB] [--dir DIR] [--keep]

On a generated TFRecord file of random payloads (about 2 KiB each: 1.5-2.5 KiB, like dense
examples), measures
  * fio sequential read of the file (1 MiB, O_DIRECT, io_uring, QD 16), a plain buffered
    sequential read (16 MiB reads), and `lirs index` of it (both CRCs of every record checked)
    with a cold cache and a warm one;
  * fio random 64 KiB reads (O_DIRECT, QD 32) and one cold epoch of `lirs.Loader` delivering the
    payloads as bytes, for the window and group granularities (and window with ``verify=True``);
and writes benchmarks/results/tfrecord.json with the ratios to fio. Cold means the file's pages
were evicted from the page cache before the run (posix_fadvise; drop_caches as a fallback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import ensure_file, drop_caches, fio_seq_read_bps, write_result  # noqa: E402


def _cold(path) -> bool:
    """Empty the page cache of ``path`` (its index too); False when that was not possible."""
    from lirs.eval.envelope import evict_cache

    return evict_cache([path]) or drop_caches()


def _index(path, cold: bool) -> float:
    import lirs

    if cold:
        _cold(path)
    t = time.perf_counter()
    lirs.build_index(path, progress=False)
    return os.path.getsize(path) / (time.perf_counter() - t)


def _plain_read(path) -> float:
    """Bytes/s of a cold buffered sequential read of ``path`` in 16 MiB reads (what the scan does,
    without the scan): the page cache's readahead can beat fio's O_DIRECT job on this VM."""
    _cold(path)
    buf = bytearray(16 << 20)
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return os.path.getsize(path) / (time.perf_counter() - t)


def _epoch(path, granularity: str, batch_size: int, verify: bool) -> dict:
    """One cold epoch: records, payload bytes and bytes read per second."""
    import lirs

    with lirs.Loader(path, batch_size, granularity=granularity, verify=verify) as loader:
        next(iter(loader.epoch(99)))  # start the pool and engine, load the kernels
        loader.stats.reset()
        _cold(path)
        t = time.perf_counter()
        n = payload = 0
        for b in loader.epoch(0):
            n += len(b.X)
            payload += sum(map(len, b.X))
        secs = time.perf_counter() - t
        st = loader.stats.as_dict()
        engine = loader.engine.name
    return {"granularity": granularity, "verify": verify, "records": n, "seconds": secs,
            "records_per_s": n / secs, "payload_Bps": payload / secs, "read_Bps": st["bytes_read"] / secs,
            "amplification": st["amplification"], "engine": engine}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--dir", default="/work/scratch/bench")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    args = ap.parse_args(argv)

    import lirs
    from lirs.eval.fio import run_job
    from lirs.eval.tfrecords import write_random
    from lirs.kernels.tfrecord import HW
    from lirs.units import parse_size

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "bench.tfrecord")
    size = parse_size(args.size)
    nbytes = ensure_file(path, size, lambda: write_random(path, size, mean=2048, spread=512, seed=1))

    idx = lirs.build_index(path, progress=False)  # compile/load the kernels outside the timings
    # fio and the cold scans alternate, so that both see the same moments of a shared disk
    cold_ok = _cold(path)
    fio_runs, cold, plain = [], [], []
    for _ in range(args.repeats):
        fio_runs.append(fio_seq_read_bps(path))
        if cold_ok:
            plain.append(_plain_read(path))
            cold.append(_index(path, True))
    fio_seq = max(fio_runs) if all(fio_runs) else None
    warm = [_index(path, False) for _ in range(args.repeats)]

    fio_rand = run_job(path, "rand64k_qd32", 5.0)
    epochs = [_epoch(path, g, args.batch_size, v) for g, v in (("window", False), ("group", False),
                                                                ("window", True))]
    rand_bw = float(fio_rand["bw_bytes"])
    for e in epochs:
        e["read_vs_fio_rand64k"] = e["read_Bps"] / rand_bw

    res = {
        "benchmark": "tfrecord",
        "command": "flock /tmp/lirs-bench.lock python benchmarks/bench_tfrecord.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "file": {"bytes": nbytes, "records": idx.n, "payload_bytes": "uniform 1536..2560",
                 "mean_record_bytes": nbytes / idx.n},
        "crc32c": "sse4.2" if HW else "slicing-by-8",
        "fio_seq_read_Bps": fio_seq,
        "fio_seq_read_runs_Bps": fio_runs,
        "index_cold_Bps": max(cold) if cold else None,
        "index_cold_runs_Bps": cold,
        "index_cold_vs_fio_seq": (max(cold) / fio_seq) if cold and fio_seq else None,
        "plain_read_cold_Bps": max(plain) if plain else None,
        "plain_read_cold_runs_Bps": plain,
        "index_cold_vs_plain_read": (max(cold) / max(plain)) if cold else None,
        "index_warm_Bps": max(warm),
        "index_warm_runs_Bps": warm,
        "fio_rand64k_qd32_Bps": rand_bw,
        "fio_rand64k_command": fio_rand["command"],
        "epochs_cold": epochs,
        "notes": ["cold: the file's pages evicted (posix_fadvise DONTNEED) before each run"] if cold_ok
        else ["could not evict the page cache: no cold runs"],
    }
    write_result("tfrecord", res)
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("runs_Bps")}, indent=2))
    if not args.keep:
        for p in (path, path + ".lirs"):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
