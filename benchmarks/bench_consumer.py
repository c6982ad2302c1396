"""What the consumer's thread pays per batch, and what a fresh process's first batch waits, in one run.

    python benchmarks/bench_consumer.py [--size 100MB] [--dir /dev/shm/lirs-consumer] [--repeats 5]

On a generated kdd-like LIBSVM file (engine ``buffered``, page cache warm):

* ``consumer``: for group, window and instance epochs, the CPU seconds of the consumer's thread
  (``time.thread_time``) per batch, with the batch plans made ahead on a thread of their own
  (``lirs.ahead.PlanAhead``) and made on the consumer's thread (``PlanInline``), the pool the same
  size (``threads=5``) in both, interleaved; ratio ahead / inline.
* ``own``: the same epochs with every read step decoded before the consumer asks for it (the
  pool's results served at once): the consumer's own CPU per batch, plans made ahead, and the
  rate it then reaches alone: the ceiling where the pool keeps up (many cores), set by the
  consumer's Python under the GIL.
* ``first_batch``: a fresh process opens a Loader and takes the first batch of a group epoch
  (numba's cache warm), with the cached kernels loaded before the first batch (the default) and
  without (``LIRS_WARMUP=0``), interleaved; ratio default / off.

Medians of ``--repeats``. Writes benchmarks/results/consumer.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from _common import kdd_file, tree_python, write_result  # noqa: E402

GRANULARITIES = ("group", "window", "instance")
POOL = 5  # threads: at PLAN_AHEAD_MIN_THREADS, so both arms run the same pool

_FIRST = r"""
import json, sys, time
import lirs
t = time.perf_counter()
ld = lirs.Loader(sys.argv[1], 1024, granularity="group", engine="buffered", seed=0)
ld.engine, ld.num_batches(0)
t1 = time.perf_counter()
it = ld.epoch(0)
next(it)
t2 = time.perf_counter()
it.close()
ld.close()
print(json.dumps({"open_s": t1 - t, "first_batch_s": t2 - t1}))
"""


def consumer_epoch(path: str, gran: str, arm: str, epoch: int) -> tuple[float, float]:
    """(consumer CPU seconds per batch, records/s) of one epoch: batch plans made ahead or inline,
    or (``own``) ahead with every read step decoded before the consumer asks for it."""
    import lirs
    import lirs.pipeline as pipeline

    saved = pipeline.PLAN_AHEAD_MIN_THREADS
    pipeline.PLAN_AHEAD_MIN_THREADS = POOL + 1 if arm == "inline" else POOL
    try:
        with lirs.Loader(path, 1024, granularity=gran, engine="buffered", threads=POOL, seed=1) as ld:
            if arm == "own":
                _decoded_ahead(ld, epoch)
            else:
                next(iter(ld.epoch(99)))  # kernels loaded, pool started
            t, c, n, nb = time.perf_counter(), time.thread_time(), 0, 0
            for b in ld.epoch(epoch):
                n += len(b.ids)
                nb += 1
            return (time.thread_time() - c) / nb, n / (time.perf_counter() - t)
    finally:
        pipeline.PLAN_AHEAD_MIN_THREADS = saved


def _decoded_ahead(ld, epoch: int) -> None:
    """Make ``ld`` serve the read steps of ``epoch`` decoded: a first pass keeps each step's
    (X, y), and every later submit of that step gets it at once."""
    from concurrent.futures import Future

    ld._ensure_started()
    pipe, done = ld._pipeline, {}

    def submit(step, then=None, helpable=True):
        if step.number not in done:
            done[step.number] = pipe._read_decode(step)
        fut = Future()
        fut.set_result(done[step.number] if then is None else then(done[step.number]))
        return fut
    pipe.submit = submit  # this Loader's pipeline only
    for _ in ld.epoch(epoch):
        pass


def first_batch(path: str, preload: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    if not preload:
        env["LIRS_WARMUP"] = "0"
    out = subprocess.run(tree_python(_FIRST, path), env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="100MB")
    ap.add_argument("--dir", default="/dev/shm/lirs-consumer")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    path = kdd_file(a.dir, a.size)
    first_batch(path, True)  # numba's cache filled for this file's types

    cons = {}
    for rep in range(a.repeats):
        for gran in GRANULARITIES:
            for arm in ("ahead", "inline", "own"):
                cpu, rate = consumer_epoch(path, gran, arm, rep)
                cons.setdefault(gran, {}).setdefault(arm, []).append({"cpu_us_per_batch": cpu * 1e6,
                                                                       "records_per_s": rate})
                print(f"  rep {rep} {gran:8s} {arm:6s} consumer {cpu * 1e6:7.1f} us/batch, {rate / 1e6:.2f}M rec/s",
                      file=sys.stderr)
    first = {"preload": [], "off": []}
    for _ in range(a.repeats):
        for arm in first:
            first[arm].append(first_batch(path, arm == "preload"))

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    res = {
        "command": "python benchmarks/bench_consumer.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "data": {"profile": "kdd", "path": path, "bytes": os.path.getsize(path)},
        "batch_size": 1024, "engine": "buffered", "pool_threads": POOL, "repeats": a.repeats,
        "consumer": {g: {arm: {"runs": runs, "cpu_us_per_batch": med(runs, "cpu_us_per_batch"),
                               "records_per_s": med(runs, "records_per_s")} for arm, runs in v.items()}
                     for g, v in cons.items()},
        "first_batch": {arm: {"runs": runs, "first_batch_s": med(runs, "first_batch_s")} for arm, runs in first.items()},
    }
    res["consumer_cpu_ahead_vs_inline"] = {g: v["ahead"]["cpu_us_per_batch"] / v["inline"]["cpu_us_per_batch"]
                                           for g, v in res["consumer"].items()}
    fb = res["first_batch"]
    res["first_batch_preload_vs_off"] = fb["preload"]["first_batch_s"] / fb["off"]["first_batch_s"]
    for g, r in res["consumer_cpu_ahead_vs_inline"].items():
        print(f"{g}: consumer CPU per batch, plans ahead / inline: {r:.2f}", file=sys.stderr)
    print(f"first batch of a fresh process, kernels preloaded / not: {res['first_batch_preload_vs_off']:.2f} "
          f"({fb['preload']['first_batch_s'] * 1e3:.1f} vs {fb['off']['first_batch_s'] * 1e3:.1f} ms)", file=sys.stderr)
    print(write_result("consumer", res), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
