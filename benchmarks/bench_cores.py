"""How the loader scales with cores, and where the GIL caps it.

One run per (mode, granularity, core count), each in a fresh process under ``taskset`` (the pool
sizes itself by the affinity mask), LIBSVM decoded to CSR, no training step:

* mode ``page-cache``: the data file and its index copied to ``/dev/shm``, engine ``buffered`` —
  no device in the way, what the Python side can deliver;
* mode ``device``: the data file where it was generated, default engine (``auto``: O_DIRECT).

Per run: records/s over ``--repeat`` epochs (each cut at ``--max-seconds``: records/s of the part
read; the median run is kept), the consumer's stall share (waiting for read steps) and plan share
(getting batch plans: planning them itself, or waiting for the planning thread; ``LoaderStats.plan_s``),
the consumer's CPU share and CPU microseconds per batch (its thread's ``time.thread_time()``: on many
cores, where it rarely waits for steps, a share near 1 says its own Python sets the rate and one well
below says it waits for the GIL), CPU microseconds per record (the process's user + system time from ``getrusage(RUSAGE_SELF)``, all threads, over the timed epochs,
divided by the records), the cores kept busy (CPU s / wall s), and the speed-up over one core of
the same mode and granularity.

The GIL-held share of wall time (py-spy, when present and allowed to attach)
--------------------------------------------------------------------------------
After the timed epochs the process keeps running epochs while py-spy samples it twice, for
``--gil-seconds`` D at ``--gil-rate`` R each:

1. ``py-spy record --gil --pid P --duration D --rate R --format raw``: at each sampling tick py-spy
   keeps only the trace of the thread that holds the GIL, if any. The counts of the raw (collapsed
   stacks) output sum to G, the ticks at which some thread held the GIL.
2. ``py-spy record --idle --threads`` (same D, R): every thread at every tick, each stack rooted in
   its thread. A thread alive throughout (the main thread) appears once per tick, so the largest
   per-thread count is T, the ticks py-spy actually took. T is measured rather than taken as
   D x R because py-spy falls behind its rate when a process has many threads to walk; both runs
   walk the same threads, so they lag alike.

Both records are ``--nonblocking``: py-spy reads the process's memory without stopping it. By
default py-spy stops every thread for each sample, and at 400 Hz that changed what it measured.
``--calibrate`` reads canned processes of known share both ways (``gil_calibration.json``): a
thread running Python 2 ms and sleeping 2 ms, 0.50, read lower when stopped.
``--gil-blocking`` takes the stopped samples, as the runs before this option did.

The GIL share is G / T. ``--gil-records`` N such pairs are taken in a
row and the one with the median share is kept, every share listed (``gil.shares``): one record of
a 2-core epoch moves by several points from run to run. ``expected_ticks`` = D x R is kept next to T.
Should the second run fail, T falls back to D x R (``ticks_source`` says which). The share is a
ratio of samples of the same process, so it is fairly robust to other work on the machine, where
records/s are not.

The implied ceiling is ``records_per_s / gil_share``: the records per second at which the GIL
would be held all the time, if the GIL-held work per record stays what it is — the most this
process design can deliver on any number of cores (on 2 cores it predicted the 16-core group
ceiling within 5%). It means something where the cores are not the limit: on one core the GIL is
held for most of the CPU time the process gets (``cpu_util_cores`` near 1), and the figure is only
an upper bound. Shares measured with other work on the machine read high: a thread preempted while
it holds the GIL holds it longer. The holders are the leaf Python frames of the GIL samples (function, file:line
as py-spy prints them), as shares of wall time (count / T) and of the GIL samples (count / G).

Where py-spy is missing or may not attach (no ptrace permission), every GIL field is null and
``gil_reason`` says why; the rest of the run is measured as usual. Writes
``benchmarks/results/cores_gil.json`` (``cores.json``, the pool-only table ``benchmarks/report.py``
prints, is left alone), after every run, so that a run cut short keeps what it measured.

    python benchmarks/bench_cores.py --size 300MB --dir /tmp/benchwin
    python benchmarks/bench_cores.py --size 30MB --modes page-cache --granularities group --cores 1
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree's lirs
from _common import kdd_file, machine, tree_python, write_result  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = {"page-cache": "buffered", "device": "auto"}  # mode -> engine

# Canned processes of a known GIL share (--calibrate): "spin" runs Python throughout (1.0), "half"
# 2 ms of Python then 2 ms asleep (0.5), "nogil" sorts an array in numpy's C, the GIL released (0.0).
_CANNED = r"""
import sys, time
import numpy as np
mode, end = sys.argv[1], time.time() + float(sys.argv[2])
a = np.random.default_rng(0).random(1 << 22)
while time.time() < end:
    if mode == "nogil":
        np.sort(a)
        continue
    t = time.perf_counter()
    while time.perf_counter() - t < 0.002:
        pass
    if mode == "half":
        time.sleep(0.002)
"""
CANNED = {"spin": 1.0, "half": 0.5, "nogil": 0.0}  # canned process -> its GIL share


def calibrate(py_spy, duration: float, rate: int) -> list[dict]:
    """The GIL share read of each canned process (:data:`CANNED`), sampled without and with
    stopping it: ``[{"process", "expected", "blocking", "share", "ticks", "reason"}]``."""
    rows = []
    for name, expected in CANNED.items():
        for blocking in (False, True):
            p = subprocess.Popen([sys.executable, "-c", _CANNED, name, str(2 * duration + 10)])
            try:
                time.sleep(1.0)  # numpy imported, the loop running
                res, why = measure_gil(py_spy, p.pid, duration, rate, None, blocking)
            finally:
                p.kill()
                p.wait()
            rows.append({"process": name, "expected": expected, "blocking": blocking,
                         "share": None if res is None else res["share"],
                         "ticks": None if res is None else res["ticks"], "reason": why})
    return rows


# The measured process: prints one "TIMED <json>" line after the timed epochs; with profiling on,
# it then runs epochs until a line arrives on stdin (py-spy samples it meanwhile) and prints
# "PROFILED <json>".
_CHILD = r"""
import json, resource, sys, threading, time
import lirs
path, gran, batch, repeat, engine, max_s, profile = sys.argv[1:8]
batch, repeat, max_s, profile = int(batch), int(repeat), float(max_s), profile == "1"

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def run(ld, e, stop):
    n, t, c, mine = 0, time.perf_counter(), cpu(), time.thread_time()
    complete = True
    for b in ld.epoch(e):
        n += len(b.ids)
        if stop(time.perf_counter() - t):
            complete = False
            break
    return n, time.perf_counter() - t, cpu() - c, complete, time.thread_time() - mine

with lirs.Loader(path, batch, granularity=gran, engine=engine) as ld:
    next(iter(ld.epoch(99)))  # start the pool and compile before timing
    out = []
    for e in range(repeat):
        ld.stats.reset()
        n, s, c, complete, mine = run(ld, e, lambda el: max_s > 0 and el > max_s)
        st = ld.stats.as_dict()
        out.append({"epoch_s": s, "records": n, "complete": complete, "cpu_s": c, "consumer_cpu_s": mine,
                    "batches": st["batches"], "wait_s": st["wait_s"],
                    "plan_s": st["plan_s"], "planner_busy_s": st["planner_busy_s"], "planner_full_s": st["planner_full_s"],
                    "decode_s": st["decode_s"], "io_s": st["io_s"], "workers": ld._pipeline.workers,
                    "engine": ld._pipeline.engine.name,
                    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})
    print("TIMED " + json.dumps(out), flush=True)
    if profile:
        stop = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
        n = s = c = 0
        e = 1000
        while not stop.is_set():
            r = run(ld, e, lambda el: stop.is_set())
            n, s, c, e = n + r[0], s + r[1], c + r[2], e + 1
        print("PROFILED " + json.dumps({"records": n, "seconds": s, "cpu_s": c}), flush=True)
"""


# ----------------------------------------------------------------------------- py-spy output


def parse_raw(text: str) -> list[tuple[list[str], int]]:
    """py-spy's ``--format raw`` output (collapsed stacks: ``frame;frame;... count`` per line) as
    ``[(frames root first, count), ...]``; lines that are not stacks are skipped."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def ticks_of(stacks) -> int:
    """Sampling ticks in an ``--idle --threads`` record: the largest sample count of one thread
    (stacks rooted in ``thread (0x..)`` frames; a thread alive throughout appears at every tick)."""
    per = collections.Counter()
    for frames, count in stacks:
        per[frames[0] if frames and frames[0].startswith("thread ") else ""] += count
    return max(per.values(), default=0)


# the roles of lirs's threads by name (thread_name_prefix / Thread(name=)); any other thread: "other"
ROLES = (("MainThread", "consumer"), ("lirs-plan", "planning"), ("lirs-loader", "pool"),
         ("lirs-decode", "decode"), ("lirs-feed", "feeding"))


def thread_role(frames: list) -> tuple[str | None, list]:
    """``(role, frames)`` of a stack from a ``--threads`` record: the role of the thread its first
    frame names (``thread (tid): name``, see :data:`ROLES`) and the stack without that frame; a
    stack with no thread frame: ``(None, frames)``."""
    if not frames or not frames[0].startswith("thread "):
        return None, frames
    name = frames[0].partition("): ")[2].strip()
    return next((role for prefix, role in ROLES if name.startswith(prefix)), "other"), frames[1:]


def holders(stacks, ticks: int, top: int = 15) -> dict:
    """Who holds the GIL: ``{"frames": [...], "functions": [...], "lirs": [...], "threads": {...}}``,
    each list entry ``{"frame", "samples", "share_of_wall", "share_of_gil"}``, most samples first;
    ``threads``: the samples by the role of the holding thread (:func:`thread_role`: consumer,
    planning, pool, decode, feeding, other), where the record names threads. ``frames``: the
    leaf frame of each GIL sample as py-spy prints it, ``function (file:line)``; ``functions``: the
    same with the lines of one function merged; ``lirs``: the deepest frame in lirs's own files
    (``lirs/...``) of each sample — the lirs line that called into ``threading``, numpy or scipy
    (a sample with no lirs frame counts under its leaf)."""
    g = sum(c for _, c in stacks) or 1
    by_frame, by_fn, by_lirs = collections.Counter(), collections.Counter(), collections.Counter()
    by_role = collections.Counter()
    for frames, count in stacks:
        role, frames = thread_role(frames)
        if role is not None:
            by_role[role] += count
        leaf = frames[-1] if frames else "?"
        by_frame[leaf] += count
        fn, _, where = leaf.rpartition(" (")
        by_fn[f"{fn} ({where.rsplit(':', 1)[0].rstrip(')')})" if fn else leaf] += count
        by_lirs[next((f for f in reversed(frames) if " (lirs/" in f), leaf)] += count

    def rows(counter):
        return [{"frame": f, "samples": c, "share_of_wall": c / ticks if ticks else None, "share_of_gil": c / g}
                for f, c in counter.most_common(top)]
    return {"frames": rows(by_frame), "functions": rows(by_fn), "lirs": rows(by_lirs),
            "threads": {r: {"samples": c, "share_of_wall": c / ticks if ticks else None, "share_of_gil": c / g}
                        for r, c in by_role.most_common()}}


def gil_share(gil_raw: str, idle_raw: str | None, duration: float, rate: int) -> dict:
    """GIL-held share of wall time from the raw outputs of a ``--gil`` record and of an ``--idle
    --threads`` record of the same duration and rate (None: ticks = duration x rate). Returns
    ``{"share", "gil_samples", "ticks", "ticks_source", "expected_ticks", "holders"}``."""
    gil = parse_raw(gil_raw)
    g = sum(c for _, c in gil)
    expected = int(round(duration * rate))
    t = ticks_of(parse_raw(idle_raw)) if idle_raw is not None else 0
    source = "idle record" if t else "duration x rate"
    t = t or expected
    return {"share": min(g / t, 1.0) if t else None, "gil_samples": g, "ticks": t, "ticks_source": source,
            "expected_ticks": expected, "holders": holders(gil, t)}


def find_py_spy(explicit: str | None = None) -> str | None:
    """The py-spy executable: ``explicit``, ``$PYSPY``, on PATH, or beside this Python."""
    for c in (explicit, os.environ.get("PYSPY"), shutil.which("py-spy"),
              os.path.join(os.path.dirname(sys.executable), "py-spy")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def py_spy_record(py_spy: str, pid: int, duration: float, rate: int, extra: list[str], cpus=None) -> tuple:
    """One ``py-spy record --format raw`` of ``pid``: ``(raw text, None)`` or ``(None, why not)``.
    ``cpus``: run py-spy pinned to these cores (ones the measured process does not use)."""
    with tempfile.NamedTemporaryFile(suffix=".txt", delete=False) as f:
        out = f.name
    cmd = [py_spy, "record", "--pid", str(pid), "--duration", str(int(duration)), "--rate", str(rate),
           "--format", "raw", "-o", out, *extra]
    if cpus:
        cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30)
        if r.returncode != 0 or not os.path.exists(out):
            why = (r.stderr or r.stdout).strip().splitlines()
            return None, f"py-spy exited with {r.returncode}: {why[-1] if why else 'no message'}"
        with open(out) as f:
            return f.read(), None
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"py-spy failed: {e}"
    finally:
        if os.path.exists(out):
            os.unlink(out)


def median_gil(py_spy, pid, duration, rate, cpus=None, records: int = 1, blocking: bool = False) -> tuple:
    """:func:`measure_gil` ``records`` times in a row: ``(the record of the median share, with
    every record's share as "shares", or None; reason or None)``. One record's share moves by
    several points from one run to the next (2 cores: 20-25% for the same group epoch)."""
    got, why = [], None
    for _ in range(max(1, int(records))):
        res, why = measure_gil(py_spy, pid, duration, rate, cpus, blocking)
        if res is None:
            break
        got.append(res)
    if not got:
        return None, why
    shares = [r["share"] for r in got]
    ranked = sorted(got, key=lambda r: -1.0 if r["share"] is None else r["share"])
    mid = dict(ranked[(len(ranked) - 1) // 2])
    mid["shares"] = shares
    return mid, None


def measure_gil(py_spy, pid, duration, rate, cpus=None, blocking: bool = False) -> tuple:
    """``(gil_share(...) dict or None, reason or None)`` of a running process, sampled without
    stopping it (``blocking``: stopped for each sample, py-spy's default)."""
    if py_spy is None:
        return None, "py-spy not found (pip install py-spy, or pass --py-spy / set PYSPY)"
    how = [] if blocking else ["--nonblocking"]
    gil, why = py_spy_record(py_spy, pid, duration, rate, ["--gil", "--threads", *how], cpus)
    if gil is None:
        return None, why
    idle, why_idle = py_spy_record(py_spy, pid, duration, rate, ["--idle", "--threads", *how], cpus)
    res = gil_share(gil, idle, duration, rate)
    res.update(duration_s=duration, rate_hz=rate, blocking=bool(blocking), idle_record_error=why_idle)
    return res, None


# ----------------------------------------------------------------------------- runs


def core_sets(counts=None) -> list[list[int]]:
    """Sets of the usable cores: the first 1, 2, 4, 8, 16 and all of them (or ``counts``)."""
    cores = sorted(os.sched_getaffinity(0))
    want = set(counts) if counts else {1, 2, 4, 8, 16, len(cores)}
    return [cores[:c] for c in sorted(want & set(range(1, len(cores) + 1)))]


def run(path, gran, cpus, *, batch, repeat, engine, max_s, py_spy=None, gil_s=0.0, gil_rate=200,
        gil_records=1, gil_blocking=False) -> dict:
    """One measured process on ``cpus``: its row (see the module docstring)."""
    env = dict(os.environ, NUMBA_NUM_THREADS=str(len(cpus)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)  # this tree's lirs
    profile = gil_s > 0
    cmd = ["taskset", "-c", ",".join(map(str, cpus)),
           *tree_python(_CHILD, path, gran, batch, repeat, engine, max_s, "1" if profile else "0")]
    spare = sorted(set(os.sched_getaffinity(0)) - set(cpus))[-1:]  # py-spy off the measured cores
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        try:
            timed = _line(p, "TIMED ", err)
            gil, reason, profiled = None, "not measured (--gil-seconds 0)", None
            if profile:
                gil, reason = median_gil(py_spy, p.pid, gil_s, gil_rate, spare, gil_records, gil_blocking)
                p.stdin.write("stop\n")
                p.stdin.flush()
                profiled = _line(p, "PROFILED ", err)
            p.wait(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
    return summarize(timed, gil, reason, profiled, len(cpus))


def _line(p, tag: str, err):
    for line in p.stdout:
        if line.startswith(tag):
            return json.loads(line[len(tag):])
    p.wait()
    err.seek(0)
    raise RuntimeError(f"the measured process exited with {p.returncode} before {tag.strip()}:\n{err.read()[-3000:]}")


def _median_ratio(pairs: list):
    """The median of a / b over the (a, b) pairs with both present and b > 0, or None."""
    got = [a / b for a, b in pairs if a is not None and b]
    return statistics.median(got) if got else None


def _planner(row: dict) -> str:
    """`` (planner busy B%, full F%)`` of a row whose epochs planned on a thread of their own, else ``""``."""
    busy, full = row.get("planner_busy_share"), row.get("planner_full_share")
    return "" if not busy and not full else f" (planner busy {busy or 0:.0%}, full {full or 0:.0%})"


def _work(row: dict) -> str:
    """``, decode D%, reads R%``: the pool's decoding and reading time over the epoch's (summed
    over threads), or ``""`` in older records."""
    dec, io = row.get("decode_share"), row.get("io_share")
    return "" if dec is None or io is None else f", decode {dec:.0%}, reads {io:.0%}"


def summarize(timed: list, gil, reason, profiled, cores: int) -> dict:
    """A row from the child's timed runs, the GIL record and the profiled phase."""
    rates = [r["records"] / r["epoch_s"] for r in timed]
    med = statistics.median(rates)
    best = min(timed, key=lambda r: abs(r["records"] / r["epoch_s"] - med))
    n, cpu_s, wall = sum(r["records"] for r in timed), sum(r["cpu_s"] for r in timed), sum(r["epoch_s"] for r in timed)
    share = gil["share"] if gil else None
    row = {"cores": cores, "workers": best["workers"], "engine": best["engine"], "epoch_s": best["epoch_s"],
           "records": best["records"], "complete": all(r["complete"] for r in timed), "records_per_s": med,
           "stall_share": statistics.median(r["wait_s"] / r["epoch_s"] for r in timed),
           "plan_share": statistics.median(r["plan_s"] / r["epoch_s"] for r in timed),
           # the planning thread (pools of PLAN_AHEAD_MIN_THREADS or more): making plans, and waiting for
           # room with its allowance ready (None in older records)
           "planner_busy_share": _median_ratio([(r.get("planner_busy_s"), r["epoch_s"]) for r in timed]),
           "planner_full_share": _median_ratio([(r.get("planner_full_s"), r["epoch_s"]) for r in timed]),
           # the consumer's thread on a core (with copying reads this counts the steps it runs itself
           # instead of waiting): where it rarely waits (many cores) near 1 when its own Python sets
           # the rate, well below where it waits for the GIL (older records have no such field: None)
           "consumer_cpu_share": _median_ratio([(r.get("consumer_cpu_s"), r["epoch_s"]) for r in timed]),
           # reads' and decodes' time summed over the threads running them, over the epoch's: a window's
           # decodes go one at a time (each spread over the cores), so near 1 says they set its rate
           "decode_share": _median_ratio([(r.get("decode_s"), r["epoch_s"]) for r in timed]),
           "io_share": _median_ratio([(r.get("io_s"), r["epoch_s"]) for r in timed]),
           "consumer_cpu_us_per_batch": _median_ratio([(r.get("consumer_cpu_s"), (r.get("batches") or 0) / 1e6)
                                                       for r in timed]),
           "cpu_us_per_record": 1e6 * cpu_s / n if n else None, "cpu_util_cores": cpu_s / wall if wall else None,
           # the process's peak resident memory after its timed epochs (older records: None)
           "peak_rss_bytes": max((r.get("peak_rss_bytes") or 0 for r in timed), default=0) or None,
           "gil_share": share, "gil_reason": None if gil else reason,
           "ceiling_records_per_s": med / share if share else None,
           "gil": gil, "profiled": None, "runs": timed}
    if profiled and profiled["seconds"]:
        row["profiled"] = {**profiled, "records_per_s": profiled["records"] / profiled["seconds"]}
    return row


def by_role(gil) -> str:
    """`` (consumer 6%, pool 3%, ...)``: a GIL record's share of wall time by thread role, or ""."""
    th = (gil or {}).get("holders", {}).get("threads") or {}
    return " (" + ", ".join(f"{r} {v['share_of_wall']:.0%}" for r, v in th.items()) + ")" if th else ""


def page_cache_copy(path: str, shm: str) -> tuple[str, str]:
    """``(path to read, how)``: ``path`` and its index copied into ``shm`` (tmpfs: reads never touch
    a device; kept between runs when already there at the same size), or, where ``shm`` lacks the
    room (a container's 64 MB /dev/shm), ``path`` itself after one read that brings it into the
    page cache."""
    need = os.path.getsize(path) + os.path.getsize(path + ".lirs")
    dst = os.path.join(shm, os.path.basename(path))
    try:
        os.makedirs(shm, exist_ok=True)
        have = sum(os.path.getsize(p) for p in (dst, dst + ".lirs") if os.path.exists(p))
        if shutil.disk_usage(shm).free + have < 1.05 * need:
            raise OSError(f"{shm} has {shutil.disk_usage(shm).free} bytes free, {need} needed")
        for src, to in ((path, dst), (path + ".lirs", dst + ".lirs")):
            if not os.path.exists(to) or os.path.getsize(to) != os.path.getsize(src):
                shutil.copy2(src, to)  # mtime kept: the index still describes the copy
        return dst, f"copied to {shm}"
    except OSError as e:
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
        return path, f"the file on disk, read once into the page cache ({e})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="300MB")
    ap.add_argument("--dir", default="/tmp/benchwin", help="where the data file is generated (device mode reads it there)")
    ap.add_argument("--shm", default="/dev/shm/lirs-cores", help="its copy for page-cache mode")
    ap.add_argument("--modes", default="page-cache,device")
    ap.add_argument("--granularities", default="group,window,instance")
    ap.add_argument("--cores", default="", help="core counts (default 1,2,4,8,16 and all, where there are that many)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=0.0, help="cut each timed epoch after this long (0: whole)")
    ap.add_argument("--gil-seconds", type=float, default=3.0, help="py-spy duration D of each record (0: no GIL figures)")
    ap.add_argument("--gil-rate", type=int, default=200, help="py-spy sampling rate R, Hz")
    ap.add_argument("--gil-records", type=int, default=3,
                    help="GIL records per run, the median share kept (each record: D seconds, twice)")
    ap.add_argument("--gil-blocking", action="store_true",
                    help="py-spy stops the process for each sample (its default; here off, see the docstring)")
    ap.add_argument("--calibrate", action="store_true",
                    help="only read canned processes of known GIL share, both ways (gil_calibration.json)")
    ap.add_argument("--py-spy", default=None, help="py-spy executable (default: $PYSPY, PATH, beside python)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="skip the runs left after this many seconds (0: none)")
    ap.add_argument("--note", default="", help="recorded in the JSON (e.g. other work sharing the machine)")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/cores_gil.json)")
    args = ap.parse_args(argv)
    from lirs.policies import POLICIES
    for name, given, known in (("modes", args.modes, MODES), ("granularities", args.granularities, POLICIES)):
        bad = [x for x in given.split(",") if x not in known]
        if bad:  # before generating the data
            ap.error(f"unknown {name} {', '.join(bad)}; expected some of {', '.join(known)}")
    if args.calibrate:
        rows = calibrate(find_py_spy(args.py_spy), args.gil_seconds, args.gil_rate)
        out = write_result("gil_calibration", {
            "command": "python benchmarks/bench_cores.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "what": "the GIL share py-spy reads of canned processes whose share is known, sampled without "
                    "stopping them (--nonblocking) and stopping them for each sample (py-spy's default)",
            "duration_s": args.gil_seconds, "rate_hz": args.gil_rate, "note": args.note, "rows": rows}, args.out)
        for r in rows:
            got = "-" if r["share"] is None else f"{r['share']:.2f}"
            print(f"{r['process']:>6} {'stopped' if r['blocking'] else 'running':>8}: {got} "
                  f"(expected {r['expected']:.1f})" + (f" {r['reason']}" if r["reason"] else ""))
        print(out)
        return 0
    t0 = time.perf_counter()
    path = kdd_file(args.dir, args.size)
    py_spy = find_py_spy(args.py_spy)
    counts = [int(c) for c in args.cores.split(",") if c.strip()] or None
    size = os.path.getsize(path)
    import lirs
    n_records = lirs.open_index(path).n
    res = {"command": "python benchmarks/bench_cores.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "data": {"profile": "kdd", "path": path, "bytes": size, "records": n_records},
           "batch_size": args.batch_size, "repeat": args.repeat, "max_seconds": args.max_seconds,
           "gil_method": {"py_spy": py_spy, "duration_s": args.gil_seconds, "rate_hz": args.gil_rate,
                          "records": args.gil_records, "blocking": args.gil_blocking,
                          "share": "GIL samples of `py-spy record --gil` / ticks of an `--idle --threads` record "
                                   "of the same duration and rate (see the module docstring)"},
           "what": "an epoch with CSR decoding and no training step under taskset; page-cache: data in /dev/shm, "
                   "engine buffered; device: data on disk, default engine; ceiling = records/s / GIL share",
           "note": args.note, "load1_before": os.getloadavg()[0], "rows": [], "skipped": []}
    out = args.out
    for mode in args.modes.split(","):
        src, how = page_cache_copy(path, args.shm) if mode == "page-cache" else (path, "on disk")
        res.setdefault("data_read", {})[mode] = {"path": src, "how": how}
        for gran in args.granularities.split(","):
            one = None
            for cpus in core_sets(counts):
                if args.budget_s and time.perf_counter() - t0 > args.budget_s:
                    res["skipped"].append({"mode": mode, "granularity": gran, "cores": len(cpus)})
                    continue
                r = {"mode": mode, "granularity": gran,
                     **run(src, gran, cpus, batch=args.batch_size, repeat=args.repeat, engine=MODES[mode],
                           max_s=args.max_seconds, py_spy=py_spy, gil_s=args.gil_seconds, gil_rate=args.gil_rate,
                           gil_records=args.gil_records, gil_blocking=args.gil_blocking)}
                r["MB_per_s"] = r["records_per_s"] * size / n_records / 1e6
                one = r["records_per_s"] if len(cpus) == 1 else one
                r["speedup_vs_1_core"] = r["records_per_s"] / one if one else None
                res["rows"].append(r)
                gs = "GIL -" if r["gil_share"] is None else \
                    f"GIL {r['gil_share']:.0%}{by_role(r['gil'])} -> ceiling {r['ceiling_records_per_s'] / 1e6:.2f}M rec/s"
                print(f"{mode:>10} {gran:>8} {r['cores']:>2} cores ({r['workers']} threads, {r['engine']}): "
                      f"{r['records_per_s'] / 1e3:.0f}k rec/s ({r['MB_per_s']:.0f} MB/s), "
                      f"{r['cpu_us_per_record']:.2f} CPU us/rec, stall {r['stall_share']:.0%}, "
                      f"plans {r['plan_share']:.0%}{_planner(r)}{_work(r)}, consumer on CPU {r['consumer_cpu_share']:.0%}, {gs}"
                      + ("" if r["gil_reason"] is None else f" ({r['gil_reason']})"), flush=True)
                res["load1_after"] = os.getloadavg()[0]
                res["seconds"] = time.perf_counter() - t0
                out = write_result("cores_gil", res, args.out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
