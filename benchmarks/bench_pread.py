"""Page-cache reads of an instance epoch from 1..N threads: one descriptor of the file for all of
them, or one each (the file opened again per thread).

An instance epoch reads each record alone, a ``pread`` a record. Every ``pread`` on a descriptor
shared by the threads of a process takes and drops a reference on the one open file behind it: an
atomic add on the same cache line from every core. This measures whether that line, not the cores,
bounds the reads as threads are added: the extents of an instance epoch's steps (as the Loader plans
them for the ``buffered`` engine) are read by T threads, each with the engine's read of a step (one
thread a step), sharing one engine or each with an engine of its own. Reads a second for each, and
own / shared. Writes benchmarks/results/pread.json (or ``--out``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import kdd_file, write_result  # noqa: E402


def epoch_steps(path: str, batch: int) -> list:
    """The read steps of an instance epoch of ``path`` planned for a page-cache engine: (ext_file,
    ext_offset, ext_nbytes, buf_pos, buffer bytes) each."""
    import numpy as np

    import lirs
    from lirs.constants import COPY_ALIGN
    from lirs.kernels import io as KI

    steps = []
    with lirs.Loader(path, batch, granularity="instance", engine="buffered") as ld:
        seen = set()
        for item in ld.plan(0).batches(0, extents=True, units=True):
            for part in item.parts:
                st = part.step
                if id(st) in seen or not len(st.ext_nbytes):
                    continue
                seen.add(id(st))
                nb = np.asarray(st.ext_nbytes, np.int64)
                pos = np.empty(len(nb), np.int64)
                total = int(KI.block_positions(nb, COPY_ALIGN, pos))
                steps.append((np.asarray(st.ext_file, np.int32), np.asarray(st.ext_offset, np.int64), nb, pos, total))
    return steps


def read_all(path: str, steps: list, threads: int, own: bool, seconds: float) -> dict:
    """``threads`` threads reading ``steps`` round and round for about ``seconds``, each step by one
    thread with the read kernel of the ``buffered`` engine (:func:`lirs.kernels.io.pread_worker`),
    through one descriptor of ``path`` or each through its own: reads and bytes a second."""
    import numpy as np

    from lirs.engines import aligned_empty
    from lirs.kernels.io import pread_worker
    from lirs.libc import Libc

    lc = Libc.get()
    first = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    sizes = np.array([os.fstat(first).st_size], np.int64)
    counts = [[0, 0] for _ in range(threads)]
    go, stop = threading.Event(), threading.Event()

    def run(t):
        fd = os.open(f"/proc/self/fd/{first}", os.O_RDONLY | os.O_CLOEXEC) if own else first
        fds, cfds = np.array([fd], np.int32), np.full(1, -1, np.int32)
        buf = aligned_empty(max(s[4] for s in steps))
        go.wait()
        i = t
        while not stop.is_set():
            ef, eo, en, pos, _ = steps[i % len(steps)]
            e = len(en)
            got, errs = np.zeros(e, np.int64), np.zeros(e, np.int32)
            pread_worker(lc.pread, lc.errno_location, fds, cfds, sizes, ef, eo, en, buf, pos, False, got, errs,
                         np.zeros(e, np.uint8), np.zeros(3, np.int64))
            if errs.any() or not np.array_equal(got, en):
                raise OSError(int(errs.max()), f"{path}: a read failed or came back short")
            counts[t][0] += e
            counts[t][1] += int(en.sum())
            i += threads
        if own:
            os.close(fd)
    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    go.set()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    el = time.perf_counter() - t0
    os.close(first)
    return {"reads_per_s": sum(c[0] for c in counts) / el, "MB_per_s": sum(c[1] for c in counts) / el / 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="a LIBSVM file (default: a kdd-like one made in --dir)")
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/dev/shm/lirs-pread")
    ap.add_argument("--threads", default="", help="thread counts (default 1, 2, 4, 8, 16 up to the usable cores)")
    ap.add_argument("--seconds", type=float, default=1.0, help="each measurement")
    ap.add_argument("--repeat", type=int, default=3, help="measurements of each, shared and own in turns")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/pread.json)")
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    counts = [int(c) for c in args.threads.split(",") if c.strip()] or [c for c in (1, 2, 4, 8, 16) if c <= cores]
    path = args.data or kdd_file(args.dir, args.size)
    with open(path, "rb") as f:  # in the page cache before the first measurement
        while f.read(1 << 24):
            pass
    steps = epoch_steps(path, args.batch_size)
    rows = []
    for t in counts:
        runs = {"shared": [], "own": []}
        for r in range(args.repeat):
            for mode in (("shared", "own") if r % 2 == 0 else ("own", "shared")):
                runs[mode].append(read_all(path, steps, t, mode == "own", args.seconds))
        row = {"threads": t, **{f"{m}_reads_per_s": statistics.median(x["reads_per_s"] for x in v) for m, v in runs.items()},
               "runs": runs}
        row["own_vs_shared"] = row["own_reads_per_s"] / row["shared_reads_per_s"]
        rows.append(row)
        print(f"{t:>3} threads: shared {row['shared_reads_per_s'] / 1e6:.2f}M reads/s, own "
              f"{row['own_reads_per_s'] / 1e6:.2f}M, own/shared {row['own_vs_shared']:.2f}", flush=True)
    res = {"command": "python benchmarks/bench_pread.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "what": __doc__.split("\n\n")[0].replace("\n", " "), "cores": cores, "note": args.note,
           "data": {"path": path, "bytes": os.path.getsize(path), "steps": len(steps),
                    "reads": int(sum(len(s[2]) for s in steps))}, "rows": rows}
    print(write_result("pread", res, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
