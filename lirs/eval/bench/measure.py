"""Measuring one configuration in a worker process (:func:`run_config`): its epochs, bounded by
the budget and extrapolated past it, CPU, peak RSS and I/O counts."""
from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time

from ...index import open_index
from ...recommendation import write_json
from ..envelope import ThrottleGroup, cached_bytes, evict_cache
from ..peers import make_runner
from .configs import Config
from .report import format_number
from .runners import LirsReadsRunner, LirsRunner

log = logging.getLogger("lirs.eval.bench")


def _vm_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _group_stats(task):
    cg = task.get("cgroup")
    if not cg:
        return None
    g = ThrottleGroup("x", cg["device"], root=os.path.dirname(cg["path"]))
    g.path = cg["path"]
    return g.stats()


def run_config(task: dict) -> dict:
    """Measure one configuration (in the current process; :func:`run_bench` calls it in a worker
    process placed in the envelope's cgroup). Returns the row's measured fields."""
    cfg = Config(**task["config"])
    index = open_index(task["sidecar"])
    n = int(index.n)
    if cfg.kind == "lirs":
        runner = (LirsReadsRunner if cfg.reads_only else LirsRunner)(cfg, index, task)
    else:
        runner = make_runner(cfg.peer, index, batch_size=task["batch_size"], seed=task["seed"],
                             engine=task["engine"], workdir=task["workdir"], budget_s=task["budget_s"],
                             buffer_records=task["buffer_records"], bmf_blocks=task["bmf_blocks"],
                             prefetch=task["prefetch"])
    try:
        runner.warm()
        row = {"what": runner.what}  # after the warm-up: a lirs row's engine is open, its reads known
        cg = task.get("cgroup")
        if cg:
            # from here on every read of this process (and of processes it starts) is throttled/counted
            with open(os.path.join(cg["path"], "cgroup.procs"), "a") as f:
                f.write(f"{os.getpid()}\n")
        # buffered readers start cold: the data file's pages leave the page cache (not the code's)
        drop = runner.buffered
        first_drop = evict_cache(index.paths) if drop else None
        if drop:
            row["resident_after_evict_bytes"] = cached_bytes(index.paths[0])
        row["base_rss_bytes"] = (_vm_kib("VmRSS") or 0) * 1024
        row["peak_rss_reset"] = _reset_peak_rss()
        t = time.perf_counter()
        runner.prepare()
        pre_s = time.perf_counter() - t
        frac = runner.sample_fraction
        row["pre_s"] = pre_s / frac if runner.pre_what is not None else None
        row["pre_what"] = runner.pre_what
        row.update(measure_task(runner, task, n, frac, index.paths if drop else None))
        later_drops = row.pop("_dropped")
        row["cache_evicted"] = None if not drop else bool(first_drop and later_drops)
        row["sample_fraction"] = frac
        if runner.note:
            row["note"] = runner.note
        eng = getattr(runner, "engine", None) if cfg.reads_only else \
            getattr(getattr(runner, "loader", None), "engine", None)
        if eng is not None:
            row["engine_depth"] = int(eng.depth)
            row["engine"] = eng.name
    finally:
        runner.close()
    row["peak_rss_bytes"] = (_vm_kib("VmHWM") or 0) * 1024
    ch = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    row["children_peak_rss_bytes"] = int(ch * 1024) if ch else None
    return row


def _steady_from(arrivals, first, dt) -> tuple[float, int]:
    """``(seconds, records)`` from which a cut epoch's steady rate is read: the last batch that
    arrived by the middle of the time after the first one (the first batch itself when none
    did). The batches a loader prefetched arrive with the first, in a burst that says nothing of
    the device; the later half of the sample does."""
    if first is None:
        return 0.0, 0
    mid = first[0] + (dt - first[0]) / 2
    best = first
    for t, g in arrivals:
        if t > mid:
            break
        best = (t, g)
    return best


def measure_task(runner, task, n, frac, evict_paths) -> dict:
    budget = float(task["budget_s"])
    epochs = int(task["epochs"])
    n_eff = max(1, int(round(n * frac)))
    cg0 = _group_stats(task)
    cpu0 = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    r0, b0, p0 = runner.reads, runner.bytes_read, runner.payload
    done = []
    partial = None
    records = 0
    measured = 0.0
    all_dropped = True
    for e in range(epochs):
        if evict_paths and e > 0:
            all_dropped = evict_cache(evict_paths) and all_dropped
        got = 0
        first = None  # (seconds, records) when the first batch arrived: the pipeline is full from then on
        arrivals = []  # (seconds, records so far) of every batch: where the steady rate is read
        t0 = time.perf_counter()
        gen = runner.epoch(e)
        complete = True
        batches = 0
        try:
            for ids, X, y in gen:
                got += len(ids)
                batches += 1
                now = time.perf_counter() - t0
                arrivals.append((now, got))
                if first is None:
                    first = (now, got)
                # past the budget, stop once a rate can be told: 3 batches over at least half the
                # budget after the first (the batches prefetched with the first arrive with it and
                # tell no rate); at 3x the budget in any case
                if measured + now > budget and got < n_eff and (
                        (batches >= 3 and now - first[0] >= budget / 2) or measured + now > 3 * budget):
                    complete = False
                    break
            dt = time.perf_counter() - t0
        finally:
            gen.close()
        measured += dt
        records += got
        if complete:
            done.append(dt)
        else:
            partial = (dt, got, first, batches, _steady_from(arrivals, first, dt))
            break
        if measured > budget:
            break
    cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - cpu0
    cg1 = _group_stats(task)
    how = None
    if done:
        epoch_s = sum(done) / len(done) / frac
        extrapolated = frac < 1
        if extrapolated:
            how = f"whole epochs over {frac:.1%} of the data, scaled up"
    else:
        dt, got, first, batches, (t_s, got_s) = partial
        extrapolated = True
        if batches >= 3 and dt > t_s and got > got_s:
            # time to the first batch (filling the prefetch pipeline), then the steady rate after it:
            # an average over the whole sample would charge the fill to every later batch, and a
            # rate over the batches that came with the first would take the prefetch for the device
            rate = (got - got_s) / (dt - t_s)
            epoch_s = (first[0] + (n_eff - first[1]) / rate) / frac
            how = (f"first batch after {format_number(first[0])}s, then {rate:,.0f} records/s over the "
                   f"{format_number(dt - t_s)}s from {format_number(t_s)}s, to {n_eff:,} records")
        else:
            epoch_s = dt * n_eff / max(got, 1) / frac
            how = f"{got:,} records in {format_number(dt)}s, scaled to {n_eff:,} records"
    out = {"epochs_measured": len(done), "measured_s": measured, "records": records,
           "epoch_s": epoch_s, "extrapolated": bool(extrapolated), "epoch_times_s": done,
           "partial_epoch": None if partial is None else {"seconds": partial[0], "records": partial[1],
                                                          "batches": partial[3],
                                                          "first_batch_s": partial[2][0] if partial[2] else None,
                                                          "steady_from_s": partial[4][0],
                                                          "steady_from_records": partial[4][1]},
           "extrapolation": how,
           "cpu_s": cpu, "cpu_s_per_epoch": cpu / measured * epoch_s if measured else None,
           "cpu_util": cpu / measured if measured else None, "_dropped": all_dropped}
    loader_reads = None if runner.reads is None else runner.reads - (r0 or 0)
    loader_bytes = None if runner.bytes_read is None else runner.bytes_read - (b0 or 0)
    payload = runner.payload - (p0 or 0)
    if cg1 is not None:  # the group's disk line comes with its first read: none before is none read
        cg0 = cg0 or {"reads": 0, "bytes": 0}
        reads, nbytes, src = cg1["reads"] - cg0["reads"], cg1["bytes"] - cg0["bytes"], "cgroup"
    else:
        reads, nbytes, src = loader_reads, loader_bytes, "loader" if loader_reads is not None else None
    out.update({
        "io_source": src, "reads": reads, "bytes_read": nbytes, "loader_reads": loader_reads,
        "loader_bytes_read": loader_bytes, "payload_bytes": payload,
        "records_per_s": records / measured if measured else None,
        "reads_per_s": reads / measured if measured and reads is not None else None,
        "mb_per_s": nbytes / measured / 1e6 if measured and nbytes is not None else None,
        "payload_per_s": payload / measured if measured else None,
        # the loader's own bytes and payload count the same completed reads; device counters also
        # hold reads still in flight when the budget ran out (they are the only count of
        # page-cache readers, whose readahead is their cost)
        "amplification": (loader_bytes / payload if loader_bytes and payload and not evict_paths
                          else (nbytes / payload if nbytes and payload else None)),
        "device_amplification": nbytes / payload if nbytes and payload and src == "cgroup" else None,
        "mean_read_bytes": nbytes / reads if reads and nbytes else None,
    })
    return out


def worker_main(argv=None) -> int:
    """``python -m lirs.eval.bench.measure TASK.json OUT.json``: measure the task, write its row."""
    argv = sys.argv[1:] if argv is None else argv
    task_path, out_path = argv[:2]
    with open(task_path) as f:
        task = json.load(f)
    logging.basicConfig(level=logging.WARNING, format="lirs worker: %(levelname)s: %(message)s")
    try:
        row = run_config(task)
        row["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported in the row
        log.debug("worker failed", exc_info=True)
        row = {"status": "error", "note": f"{type(e).__name__}: {e}"}
    write_json(row, out_path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(worker_main())
