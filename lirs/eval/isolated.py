"""One measurement in a fresh process, its memory sampled from outside: what a benchmark runs when
peak memory must be the measurement's own (a long-lived process keeps the peak of everything it
did before).

    run_child(kind, task, tmpdir, timeout_s) -> dict
    python -m lirs.eval.isolated KIND TASK.json OUT.json      (the child side)

Kinds (:data:`KINDS`, each a function ``task dict -> result dict``):

======  ==========================================================================================
index   ``{"path"}``: build the index of a file (kernels warmed on a two-line file first);
        ``seconds``, ``bytes``, ``Bps``, ``records``, ``sidecar_bytes``
config  a task of :func:`lirs.eval.bench.measure.run_config` (a lirs configuration or a peer);
        its row, plus ``loader_stats`` (``io_s``, ``decode_s``, ...) for Loader rows
plan    ``{"records", "record_bytes", "batch_size", "batches", "granularities", "world", "window"}``:
        plan an epoch of dense fixed-size records (an in-memory index, no file) with the stateless
        permutation, for rank 0 of 1 and the last rank of ``world``; setup seconds, seconds to the
        first batch and per batch after it, at the start and the middle of the epoch
======  ==========================================================================================

Every result has ``status`` ("ok" or "error" with ``note``), ``vm_hwm_bytes`` (the child's own
peak RSS), ``sampled`` (peaks of :class:`lirs.eval.rss.TreeSampler` over the child's process tree,
its workers included) and ``wall_s``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .rss import TreeSampler

# the folder above the lirs package: the child imports the same lirs as its parent
_PKG_PARENT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def run_child(kind: str, task: dict, tmpdir: str, timeout_s: float, interval_s: float = 0.25) -> dict:
    """Run ``kind`` (a key of :data:`KINDS`) on ``task`` in a fresh process of its own session,
    killed with its whole process group after ``timeout_s``; see the module docstring."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    tp, op, ep = (os.path.join(tmpdir, f"{kind}.{x}") for x in ("task.json", "out.json", "err.txt"))
    if os.path.exists(op):
        os.unlink(op)
    with open(tp, "w") as f:
        json.dump(task, f)
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_PARENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "lirs.eval.isolated", kind, tp, op]
    t = time.perf_counter()
    with open(ep, "w") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                                start_new_session=True)
        sampler = TreeSampler(proc.pid, interval_s).start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and the workers it started, by group
                proc.wait()
            peaks = sampler.stop()
    wall = time.perf_counter() - t
    if os.path.exists(op):
        with open(op) as f:
            res = json.load(f)
    else:
        with open(ep) as f:
            tail = f.read()[-600:].strip()
        why = "overran its time limit and was stopped" if wall >= timeout_s else f"exited with {proc.returncode}"
        res = {"status": "error", "note": f"child {kind} {why}: {tail}"}
    res["sampled"] = peaks
    res["wall_s"] = wall
    return res


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def child_index(task: dict) -> dict:
    """Index ``task["path"]``, timed, after warming the kernels on a two-line file."""
    from ..build import build_index

    with tempfile.TemporaryDirectory() as d:
        warm = os.path.join(d, "warm.svm")
        with open(warm, "w") as f:
            f.write("1 1:0.5 3:1\n-1 2:1\n")
        build_index(warm, progress=False)
    t = time.perf_counter()
    idx = build_index(task["path"], progress=False)
    s = time.perf_counter() - t
    n = os.path.getsize(task["path"])
    return {"status": "ok", "seconds": s, "bytes": n, "Bps": n / s, "records": int(idx.n),
            "sidecar_bytes": os.path.getsize(idx.sidecar)}


def child_config(task: dict) -> dict:
    """:func:`lirs.eval.bench.measure.run_config` of ``task``, with the Loader's stats kept."""
    from .bench import measure, runners

    stats = {}

    class StatsRunner(runners.LirsRunner):
        """The Loader runner, keeping its stats (io_s, decode_s) for the row."""

        def close(self):
            stats.update(self.loader.stats.as_dict())
            super().close()

    measure.LirsRunner = StatsRunner  # this process measures one configuration and exits
    row = measure.run_config(task)
    row["status"] = "ok"
    if stats:
        row["loader_stats"] = stats
    return row


def _time_batches(plan, start: int, k: int) -> tuple[float, float]:
    """``(first, per)``: seconds to the first batch of ``plan`` from batch ``start`` (it finds where
    that batch starts in the epoch's order: a resume's or a rank's one-off cost), then seconds per
    batch of the next ``k`` batches (ids and extents made)."""
    it = plan.batches(start)
    t = time.perf_counter()
    next(it, None)
    first = time.perf_counter() - t
    t = time.perf_counter()
    done = 0
    for _ in it:
        done += 1
        if done >= k:
            break
    return first, (time.perf_counter() - t) / max(done, 1)


def child_plan(task: dict) -> dict:
    """Plan epochs of ``task["records"]`` dense records; see the module docstring."""
    from ..index import Index
    from ..plan import plan_epoch

    n, rs, bs, k, world = (int(task[x]) for x in ("records", "record_bytes", "batch_size", "batches", "world"))
    idx = Index.from_arrays(["/planning-only/dense.bin"], "fixed", record_size=rs, data_ends=[n * rs])
    out = {"status": "ok", "records": n, "record_bytes": rs, "batch_size": bs, "timed_batches": k, "rows": {}}
    for gran in task["granularities"]:
        kw = {"window": task["window"], "permutation": "stateless"}
        # the first batches compile or load the numba kernels: an epoch never timed takes that
        _time_batches(plan_epoch(idx, bs, gran, seed=0, epoch=99, **kw), 0, 2)
        row = {}
        for rank, ws in ((0, 1), (world - 1, world)):
            t = time.perf_counter()
            p = plan_epoch(idx, bs, gran, seed=0, epoch=1, rank=rank, world_size=ws, **kw)
            setup = time.perf_counter() - t
            at = {"start": _time_batches(p, 0, k), "middle": _time_batches(p, p.num_batches // 2, k)}
            per = {w: v[1] for w, v in at.items()}
            mean = sum(per.values()) / len(per)
            row[f"rank{rank}_of_{ws}"] = {"setup_s": setup, "first_batch_s": {w: v[0] for w, v in at.items()},
                                          "per_batch_s": per, "batches": int(p.num_batches),
                                          "epoch_plan_s_extrapolated": setup + at["start"][0] + mean * p.num_batches,
                                          "plan_nbytes": int(p.nbytes)}
        out["rows"][gran] = row
    return out


KINDS = {"index": child_index, "config": child_config, "plan": child_plan}


def child_main(argv=None) -> int:
    """``python -m lirs.eval.isolated KIND TASK.json OUT.json``: run it, write the result."""
    kind, task_path, out_path = (sys.argv[1:] if argv is None else argv)[:3]
    with open(task_path) as f:
        task = json.load(f)
    try:
        res = KINDS[kind](task)
    except Exception as e:  # noqa: BLE001 - reported in the result
        res = {"status": "error", "note": f"{type(e).__name__}: {e}"}
    res["vm_hwm_bytes"] = _vm_hwm()
    with open(out_path + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(child_main())
