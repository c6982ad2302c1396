"""Out of core, end to end: a kdd-like LIBSVM file larger than RAM, measured in one run.

    flock /tmp/lirs-bench.lock python benchmarks/bench_scale.py --size 1.5xRAM [--reuse] [--keep]

On a generated kdd-like file of ``--size`` (``NxRAM``: N times MemTotal; or a size like 36GB) in
``--dir`` and a ``--small`` prefix of it (the same records, cut at a line end; its size rounded to
whole ``--window`` budgets, so both files read windows of the same size), measures:

* ``lirs index`` with a cold page cache (drop_caches, root) against fio sequential read (1 MiB, QD 16);
* one epoch of granularity group and window, with CSR decoding and reads-only (the plan's extents
  read, no decode), each with cold caches, against fio 64 KiB random read (QD 32) on the same file;
* the torch DataLoader and shuffle-buffer peers (lirs.eval.peers) for ``--peer-budget`` seconds
  (the in-memory peer is skipped with its reason);
* peak memory of each, in a fresh child process per measurement: the child's own VmHWM and the
  sampled peak of its process tree (RSS, PSS, private and file-backed PSS), on both files, to tell
  whether memory grows with the file size;
* planning an epoch of ``--plan-records`` dense fixed-size records (no file: an in-memory index),
  ``permutation="stateless"``: setup, time per batch, a rank's slice of 8 ranks, memory.

Writes ``benchmarks/results/scale.json`` (or ``--out``) and deletes the generated files unless
``--keep``. ``--reuse`` keeps files already in ``--dir`` whose size is within 5% of the target.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _common import drop_caches, machine

from lirs.errors import UsageError
from lirs.eval.isolated import run_child

GOALS = {"decode_vs_fio64k": 0.5, "reads_only_vs_fio64k": 0.9, "index_vs_fio_seq": 0.9,
         "rss_big_over_small": 1.1}
FIO_JOBS = ("seq1m_qd16", "rand64k_qd32", "rand4k_qd1")
SIDECAR_SHARE = 0.03   # sidecar bytes per data byte, generously (kdd-like: ~4 B offset + label / 355 B)
SPACE_MARGIN = 1 << 30  # left free on the disk after the files are written
_T0 = time.perf_counter()


def say(msg: str) -> None:
    """One progress line on stderr, with the seconds since the start."""
    print(f"[scale {time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ sizes and space


def mem_total() -> int:
    """MemTotal of /proc/meminfo in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise UsageError("/proc/meminfo: no MemTotal line; expected a Linux /proc")


def target_bytes(spec: str, ram: int) -> int:
    """``"1.5xRAM"`` -> 1.5 * ram; ``"36GB"`` -> 36e9 (see :func:`lirs.units.parse_size`)."""
    from lirs.units import parse_size

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*x\s*RAM\s*", str(spec), re.IGNORECASE)
    if m:
        return int(float(m.group(1)) * ram)
    return parse_size(spec)


def free_bytes(directory: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def check_space(directory: str, files: dict) -> dict:
    """Raise UsageError unless ``directory`` can hold ``files`` ({path: bytes wanted}) and their
    sidecars with :data:`SPACE_MARGIN` left; bytes already on disk in those paths count as free.
    Returns ``{"free_bytes", "need_bytes"}``."""
    free = free_bytes(directory)
    have = sum(os.path.getsize(p) for p in files if os.path.exists(p))
    need = int(sum(files.values()) * (1 + SIDECAR_SHARE)) + SPACE_MARGIN
    if free + have < need:
        raise UsageError(f"{directory}: {free / 1e9:.1f} GB free (+{have / 1e9:.1f} GB reusable), the files need "
                         f"{need / 1e9:.1f} GB ({', '.join(f'{os.path.basename(p)} {b / 1e9:.1f} GB' for p, b in files.items())}"
                         f" + sidecars + {SPACE_MARGIN >> 30} GiB margin); pass a smaller --size or another --dir")
    return {"free_bytes": free, "need_bytes": need}


def reusable(path: str, size: int, reuse: bool) -> bool:
    """Whether ``path`` exists and is within 5% of ``size`` bytes (and reuse was asked for)."""
    return reuse and os.path.exists(path) and abs(os.path.getsize(path) - size) <= 0.05 * size


def make_prefix(src: str, dst: str, nbytes: int, chunk: int = 64 << 20) -> int:
    """Copy the first ``nbytes`` of ``src`` to ``dst``, cut after the last line end: the same
    records as the start of ``src``. Returns the bytes written."""
    written = consumed = 0
    tail = b""
    with open(src, "rb") as fi, open(dst + ".tmp", "wb") as fo:
        while consumed < nbytes:
            buf = fi.read(min(chunk, nbytes - consumed))
            if not buf:
                break
            consumed += len(buf)
            # what follows the last line end waits for a later chunk to end its line
            buf = tail + buf
            cut = buf.rfind(b"\n") + 1
            fo.write(buf[:cut])
            written += cut
            tail = buf[cut:]
    if written == 0:
        os.unlink(dst + ".tmp")
        raise UsageError(f"{src}: no line end in its first {nbytes} bytes; expected LIBSVM lines")
    os.replace(dst + ".tmp", dst)
    return written


# ------------------------------------------------------------------ the measurements


def cold(label: str, drop: bool = True) -> bool:
    """Drop the page cache before ``label``; False (with a line saying so) when not root, or
    when ``drop`` is False (``--no-drop``: leave the machine's page cache alone)."""
    if not drop:
        return False
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ok = drop_caches()
    if not ok and w:
        say(f"cannot drop the page cache before {label} (not root): measured with whatever is cached")
    return ok


def fio_figures(path: str, runtime_s: float, jobs=FIO_JOBS) -> dict:
    """The fio envelope jobs of ``jobs`` on ``path`` (see :func:`lirs.eval.fio.run_envelope`)."""
    from lirs.eval.fio import run_envelope

    return run_envelope(path, jobs=jobs, runtime_s=runtime_s, progress=lambda j: say(f"  fio {j} on "
                                                                                     f"{os.path.basename(path)}"))


def merge_fio(a: dict, b: dict) -> dict:
    """The envelope ``a`` with each job's bandwidth and IOPS averaged with ``b``'s (the same jobs
    measured again later in the run); both runs are kept under ``"runs"``."""
    from lirs.eval.fio import figure

    if not a.get("available") or not b.get("available"):
        return a
    out = json.loads(json.dumps(a))
    for job, j in b["jobs"].items():
        if job in out["jobs"] and "error" not in out["jobs"][job] and "error" not in j:
            for m in ("bw_bytes", "iops"):
                out["jobs"][job][m] = (figure(a, job, m) + figure(b, job, m)) / 2
            out["jobs"][job]["runs"] = [a["jobs"][job], j]
    return out


def epoch_task(cfg, sidecar: str, args, workdir: str, budget_s: float, epochs: int = 1) -> dict:
    """The task of :func:`lirs.eval.bench.measure.run_config` for one configuration."""
    return {"config": cfg.as_dict(), "sidecar": sidecar, "batch_size": args.batch_size, "epochs": int(epochs),
            "budget_s": budget_s, "seed": 0, "engine": "auto", "prefetch": args.prefetch, "workdir": workdir,
            "buffer_records": 10_000, "bmf_blocks": 40}


def lirs_configs(index, window: str) -> list:
    """group and window (64 KiB groups), with CSR decoding and reads-only."""
    from lirs.constants import DEFAULT_GROUP_BYTES
    from lirs.eval.bench.configs import Config
    from lirs.windows import window_groups

    w = window_groups(window, DEFAULT_GROUP_BYTES, index.payload_bytes)
    return [Config("lirs", g, DEFAULT_GROUP_BYTES, w if g == "window" else None, reads_only=r)
            for r in (False, True) for g in ("group", "window")]


def measure_epochs(label: str, index, fio: dict, args, tmp: str, budget_s: float, peers=(), epochs: int = 1) -> dict:
    """Rows of every lirs configuration (and ``peers``) on ``index``, each in a fresh child with
    cold caches, with ratios to ``fio``; ``epochs`` of the lirs ones (within ``budget_s``). Keyed by
    configuration name."""
    from lirs.eval.bench.configs import Config, add_ratios
    from lirs.eval.peers import skip_reason

    rows = {}
    cfgs = lirs_configs(index, args.window) + [Config("peer", peer=p) for p in peers]
    for cfg in cfgs:
        name = cfg.name
        why = skip_reason(cfg.peer, index, workdir=tmp) if cfg.kind == "peer" else None
        if why:
            rows[name] = {"status": "skipped", "note": why, "kind": "peer", "peer": cfg.peer}
            say(f"{label}: {name} skipped: {why}")
            continue
        b = args.peer_budget if cfg.kind == "peer" else budget_s
        say(f"{label}: {name} (budget {b:.0f}s)")
        cold(name, not args.no_drop)
        row = {**cfg.as_dict(), "name": name}
        task = epoch_task(cfg, index.sidecar, args, tmp, b, epochs if cfg.kind == "lirs" else 1)
        row.update(run_child("config", task, tmp, timeout_s=3 * b + 300))
        add_ratios(row, fio)
        rows[name] = row
        say(f"{label}: {name}: {_line(row)}")
    return rows


def _line(row: dict) -> str:
    if row.get("status") != "ok":
        return f"{row.get('status')}: {row.get('note')}"
    ratio = f"{row['ratio']:.2f}x fio" if row.get("ratio") else "no fio ratio"
    return (f"{row['records_per_s']:,.0f} records/s, {row.get('mb_per_s') or 0:,.0f} MB/s read ({ratio}), "
            f"payload {row['payload_per_s'] / 1e6:,.0f} MB/s, cpu {row['cpu_util']:.2f} cores, "
            f"pss peak {row['sampled']['pss'] / 2**20:,.0f} MiB")


def measure_index(label: str, path: str, tmp: str, fio: dict | None, drop: bool = True) -> dict:
    """Index ``path`` cold in a fresh child; ratio to fio's sequential read."""
    from lirs.eval.fio import figure

    say(f"{label}: lirs index (cold)")
    dropped = cold("lirs index", drop)
    res = run_child("index", {"path": path}, tmp, timeout_s=3600)
    res["cache_dropped"] = dropped
    seq = figure(fio, "seq1m_qd16", "bw_bytes")
    res["fio_seq_Bps"] = seq
    res["vs_fio_seq"] = res["Bps"] / seq if res.get("status") == "ok" and seq else None
    if res.get("status") == "ok":
        say(f"{label}: index {res['Bps'] / 1e6:,.0f} MB/s"
            + (f" = {res['vs_fio_seq']:.2f}x fio sequential" if res["vs_fio_seq"] else ""))
    else:
        say(f"{label}: index failed: {res.get('note')}")
    return res


def measure_plan(args, tmp: str) -> dict:
    """Planning an epoch of ``--plan-records`` dense records, in a fresh child."""
    say(f"plan: {args.plan_records:,} records of {args.plan_record_bytes} B, stateless permutation")
    task = {"records": int(args.plan_records), "record_bytes": args.plan_record_bytes, "batch_size": args.batch_size,
            "batches": args.plan_batches, "granularities": ["instance", "group", "window"], "world": 8,
            "window": args.window}
    res = run_child("plan", task, tmp, timeout_s=1800)
    for g, row in (res.get("rows") or {}).items():
        r = row["rank0_of_1"]
        say(f"plan: {g}: setup {r['setup_s']:.3f}s, first batch {r['first_batch_s']['start'] * 1e3:.2f} ms, then "
            f"{max(r['per_batch_s'].values()) * 1e6:,.0f} us/batch")
    return res


# ------------------------------------------------------------------ the summary


def _ok(row) -> bool:
    return bool(row) and row.get("status") == "ok"


def plan_tables(configs, small_ix, big_ix, batch_size: int) -> dict:
    """Bytes of each configuration's plan tables (unit boundaries and permutation: 12 B per unit,
    the only state of an epoch that grows with the data) on each file."""
    from lirs.plan import plan_epoch

    out = {}
    for cfg in configs:
        kw = {"granularity": cfg.granularity, "group_bytes": cfg.group_bytes}
        if cfg.window:
            kw["window"] = cfg.window
        out[cfg.name] = {label: int(plan_epoch(ix, batch_size, **kw).nbytes)
                         for label, ix in (("small", small_ix), ("big", big_ix))}
    return out


def rss_growth(small: dict, big: dict, tables: dict | None = None) -> dict:
    """Per configuration measured on both files: peak memory on each and big / small.

    ``tables``: the plan tables' bytes per configuration and file (:func:`plan_tables`). A full
    shuffle keeps one entry per unit; memory counts as independent of the file size when the
    private growth beyond those tables, and the whole RSS growth beyond them, stay within the goal.
    RSS, not PSS: PSS splits a shared page (the libraries' code, numba's LLVM among them) among the
    processes mapping it, so its file-backed part moves with what else runs (this run's parent
    too), while RSS counts what the process holds."""
    out = {}
    lim = GOALS["rss_big_over_small"]
    for name, b in big.items():
        s = small.get(name)
        if not (_ok(b) and _ok(s)):
            continue
        r = {}
        for k in ("pss", "anon", "file", "rss"):
            r[k] = {"small": s["sampled"][k], "big": b["sampled"][k],
                    "big_over_small": b["sampled"][k] / s["sampled"][k] if s["sampled"][k] else None}
        r["vm_hwm"] = {"small": s["vm_hwm_bytes"], "big": b["vm_hwm_bytes"],
                       "big_over_small": b["vm_hwm_bytes"] / s["vm_hwm_bytes"] if s["vm_hwm_bytes"] else None}
        t = (tables or {}).get(name)
        if t:
            extra = t["big"] - t["small"]
            r["plan_tables"] = {**t, "growth": extra}
            a = r["anon"]
            a["big_over_small_beyond_plan"] = (a["big"] - extra) / a["small"] if a["small"] else None
            for k in ("pss", "rss"):
                p = r[k]
                p["big_over_small_beyond_plan"] = (p["big"] - extra) / p["small"] if p["small"] else None
        key = "big_over_small_beyond_plan" if t else "big_over_small"
        r["independent_of_size"] = all((r[k].get(key) or 0) <= lim for k in ("rss", "anon"))
        out[name] = r
    return out


def where_time_goes(row: dict, goal: float) -> dict | None:
    """For a decoding row: the payload rate the goal asks for (``goal`` x fio bandwidth / read
    amplification, i.e. what the decoder must turn into CSR on the machine's cores), what was
    delivered, and how busy the cores were."""
    if not _ok(row) or not row.get("bound") or not row["bound"].get("fio_bw_bytes"):
        return None
    amp = row.get("amplification") or 1.0
    need = goal * row["bound"]["fio_bw_bytes"] / amp
    ls = row.get("loader_stats") or {}
    cores = os.cpu_count() or 1
    return {"goal": goal, "needed_payload_MBps": need / 1e6, "needed_decode_MBps_per_core": need / 1e6 / cores,
            "delivered_payload_MBps": row["payload_per_s"] / 1e6, "cpu_util_cores": row.get("cpu_util"),
            "cores": cores, "io_s": ls.get("io_s"), "decode_s": ls.get("decode_s"), "wait_s": ls.get("wait_s"),
            # the decoder's own rate: payload over the seconds its threads spent decoding (summed)
            "decode_MBps_per_thread": (ls["payload_bytes"] / ls["decode_s"] / 1e6
                                       if ls.get("decode_s") and ls.get("payload_bytes") else None),
            "decode_bound": bool(row.get("cpu_util") and row["cpu_util"] > 0.8 * cores)}


def summarize(res: dict) -> dict:
    """Headline figures of a run: ratios against the goals, memory growth, peers, planning."""
    big, small = res["epochs"]["big"], res["epochs"]["small"]
    s = {"goals": GOALS, "ratios": {}, "where_time_goes": {}}
    for name, row in big.items():
        if row.get("kind") != "lirs" or not _ok(row):
            continue
        goal = GOALS["reads_only_vs_fio64k" if row.get("reads_only") else "decode_vs_fio64k"]
        s["ratios"][name] = {"vs_fio64k": row.get("ratio"), "goal": goal,
                             "met": None if row.get("ratio") is None else row["ratio"] >= goal}
        if not row.get("reads_only"):
            s["where_time_goes"][name] = where_time_goes(row, goal)
    ix = res["index"]["big"]
    s["ratios"]["index"] = {"vs_fio_seq": ix.get("vs_fio_seq"), "goal": GOALS["index_vs_fio_seq"],
                            "met": None if ix.get("vs_fio_seq") is None else ix["vs_fio_seq"] >= GOALS["index_vs_fio_seq"]}
    s["rss"] = rss_growth(small, big, res.get("plan_tables"))
    s["peers"] = {n: ({"records_per_s": r["records_per_s"], "pss_peak": r["sampled"]["pss"]} if _ok(r)
                      else {"status": r.get("status"), "note": r.get("note")})
                  for n, r in big.items() if r.get("kind") == "peer"}
    return s


def print_summary(res: dict) -> None:
    s = res["summary"]
    for name, r in s["ratios"].items():
        v = r.get("vs_fio64k", r.get("vs_fio_seq"))
        print(f"{name:28s} {'-' if v is None else f'{v:.2f}x'} fio (goal {r['goal']}x, met: {r['met']})")
    for name, r in s["rss"].items():
        print(f"{name:28s} PSS {r['pss']['small'] / 2**20:,.0f} MiB (small) -> {r['pss']['big'] / 2**20:,.0f} MiB "
              f"(big), private {r['anon']['small'] / 2**20:,.0f} -> {r['anon']['big'] / 2**20:,.0f} MiB"
              + (f" (plan tables +{r['plan_tables']['growth'] / 2**20:,.1f} MiB)" if "plan_tables" in r else ""))


# ------------------------------------------------------------------ main


def parse_args(argv=None):
    from lirs.constants import DEFAULT_PREFETCH

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1.5xRAM", help="the big file: NxRAM (MemTotal) or a size such as 36GB")
    ap.add_argument("--small", default="2GB", help="the prefix file compared with it (default 2GB, rounded to "
                                                   "a whole number of --window budgets)")
    ap.add_argument("--dir", default="/work/scratch/scale")
    ap.add_argument("--reuse", action="store_true", help="keep files in --dir within 5%% of their target size")
    ap.add_argument("--keep", action="store_true", help="do not delete the generated files at the end")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH)
    ap.add_argument("--window", default="256M", help="granularity window's memory, the same on both files")
    ap.add_argument("--epoch-budget", type=float, default=600.0,
                    help="seconds of one epoch on the big file before it is cut and extrapolated")
    ap.add_argument("--small-budget", type=float, default=120.0)
    ap.add_argument("--peer-budget", type=float, default=60.0)
    ap.add_argument("--fio-runtime", type=float, default=10.0)
    ap.add_argument("--plan-records", type=float, default=1e9)
    ap.add_argument("--plan-record-bytes", type=int, default=512)
    ap.add_argument("--plan-batches", type=int, default=200, help="batches timed per plan (start and middle)")
    ap.add_argument("--peers", default="torch,shuffle_buffer,inmemory")
    ap.add_argument("--no-drop", action="store_true",
                    help="never drop the page cache (the figures are then not cold-cache figures)")
    ap.add_argument("--plan-only", action="store_true", help="only plan the epoch of --plan-records; replace "
                    "the plan of the result file (--out or benchmarks/results/scale.json)")
    ap.add_argument("--recheck", action="store_true",
                    help="only the decoding epochs on the kept big file, between two fio runs (scale_recheck.json)")
    ap.add_argument("--out", default=None, help="result file (default benchmarks/results/scale.json)")
    return ap.parse_args(argv)


def prepare_files(args, ram: int) -> dict:
    """Check the space, generate the big file and cut the small prefix (or reuse them)."""
    from lirs.eval.gen import generate
    from lirs.units import parse_size

    size, small = target_bytes(args.size, ram), small_bytes(args.small, args.window)
    if small >= size:
        raise UsageError(f"--small {args.small} must be smaller than --size {args.size} ({size:,} bytes)")
    os.makedirs(args.dir, exist_ok=True)
    big_path, small_path = os.path.join(args.dir, "kdd-big.svm"), os.path.join(args.dir, "kdd-small.svm")
    out = {"ram_bytes": ram, "target_bytes": size, "dir": args.dir,
           **check_space(args.dir, {big_path: size, small_path: small}), "big_path": big_path,
           "small_path": small_path, "generated": False, "gen_s": None}
    say(f"RAM {ram / 2**30:.1f} GiB; big file {size / 1e9:.1f} GB; {out['free_bytes'] / 1e9:.1f} GB free in {args.dir}")
    if not reusable(big_path, size, args.reuse):
        say(f"generating {size / 1e9:.1f} GB kdd-like LIBSVM (lirs gen --profile kdd) -> {big_path}")
        t = time.perf_counter()
        generate("kdd", big_path, size=size, order="shuffled", seed=1, progress=False)
        out["generated"], out["gen_s"] = True, time.perf_counter() - t
        say(f"generated in {out['gen_s']:.0f}s")
    if not reusable(small_path, small, args.reuse) or out["generated"]:
        make_prefix(big_path, small_path, small)
    out["big_bytes"], out["small_bytes"] = os.path.getsize(big_path), os.path.getsize(small_path)
    return out


def small_bytes(spec: str, window: str) -> int:
    """The small file's size: ``spec`` rounded to a whole number of ``window`` byte budgets. Windows
    are balanced (units / ceil(units / window) each), so a 2 GB prefix would read 256 MiB windows of
    ~3,800 groups, not 4,096, and its window epoch would hold ~7% less than the big file's for
    reasons that have nothing to do with the file size."""
    from lirs.constants import DEFAULT_GROUP_BYTES
    from lirs.units import parse_size
    from lirs.windows import window_groups

    nbytes = parse_size(spec)
    wbytes = window_groups(window, DEFAULT_GROUP_BYTES, nbytes) * DEFAULT_GROUP_BYTES
    if "%" in str(window) or str(window).strip() == "auto":
        return nbytes  # a share of the data: the windows scale with the file anyway
    return max(1, round(nbytes / wbytes)) * wbytes


def work_dir(directory: str) -> str:
    """A fresh ``.scale-PID-XXXX`` directory in ``directory`` for the run's scratch files; those a
    killed run left behind (its process gone) are removed first."""
    from lirs.litter import clean_dead

    clean_dead(directory, r"\.scale-(?P<pid>\d+)-.*")
    return tempfile.mkdtemp(prefix=f".scale-{os.getpid()}-", dir=directory)


def cleanup(files: dict, keep: bool) -> None:
    if keep:
        return
    for p in (files["big_path"], files["small_path"]):
        for q in (p, p + ".lirs"):
            if os.path.exists(q):
                os.unlink(q)


def run(args) -> dict:
    """The whole measurement; returns the result dict (also written to the result file)."""
    from lirs.constants import INDEX_RELEASE_BATCHES, STEP_PIECE_RUNS
    from lirs.index import open_index

    ram = mem_total()
    files = prepare_files(args, ram)
    res = {"benchmark": "scale", "command": "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:]),
           "files": files, "caches_dropped": cold("the run", not args.no_drop), "batch_size": args.batch_size,
           "window": args.window, "prefetch": args.prefetch, "index_release_batches": INDEX_RELEASE_BATCHES,
           "step_piece_runs": STEP_PIECE_RUNS, "fio": {}, "index": {}, "epochs": {}}
    tmp = work_dir(args.dir)
    try:
        say("small: fio")
        res["fio"]["small"] = fio_figures(files["small_path"], args.fio_runtime, FIO_JOBS[:2])
        res["index"]["small"] = measure_index("small", files["small_path"], tmp, res["fio"]["small"],
                                             not args.no_drop)
        say("big: fio")
        fio_big = fio_figures(files["big_path"], args.fio_runtime)
        res["index"]["big"] = measure_index("big", files["big_path"], tmp, fio_big, not args.no_drop)
        small_ix, big_ix = open_index(files["small_path"]), open_index(files["big_path"])
        files.update(small_records=int(small_ix.n), big_records=int(big_ix.n))
        res["plan_tables"] = plan_tables(lirs_configs(big_ix, args.window), small_ix, big_ix, args.batch_size)
        # a peak is the highest of many samples of a memory that moves with the steps in flight: the small
        # file runs as many epochs as fit the big file's records, so both peaks come from as many batches
        res["small_epochs"] = max(1, -(-int(big_ix.n) // max(int(small_ix.n), 1)))
        res["epochs"]["small"] = measure_epochs("small", small_ix, res["fio"]["small"], args, tmp, args.small_budget,
                                                epochs=res["small_epochs"])
        peers = [p for p in args.peers.split(",") if p]
        res["epochs"]["big"] = measure_epochs("big", big_ix, fio_big, args, tmp, args.epoch_budget, peers)
        say("big: fio again (the device may drift over the run)")
        res["fio"]["big"] = merge_fio(fio_big, fio_figures(files["big_path"], args.fio_runtime, FIO_JOBS[:2]))
        from lirs.eval.bench.configs import add_ratios

        for row in res["epochs"]["big"].values():
            add_ratios(row, res["fio"]["big"])  # against the mean of the two fio runs
        res["plan"] = measure_plan(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        cleanup(files, args.keep)
    res["files"]["kept"] = bool(args.keep)
    res["summary"] = summarize(res)
    return res


def recheck(args) -> dict:
    """``--recheck``: on the kept big file only, fio 64 KiB random read, then the decoding epochs
    (bounded by ``--epoch-budget``, extrapolated), then fio again: the decode ratios measured
    again when the machine is quiet."""
    from lirs.eval.bench.configs import add_ratios
    from lirs.index import open_index

    path = os.path.join(args.dir, "kdd-big.svm")
    if not os.path.exists(path + ".lirs"):
        raise UsageError(f"{path}: no indexed big file to recheck; run without --recheck with --keep first")
    ix = open_index(path)
    res = {"benchmark": "scale-recheck", "command": "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:]),
           "file_bytes": os.path.getsize(path), "records": int(ix.n), "load_before": os.getloadavg()}
    tmp = work_dir(args.dir)
    try:
        fio = fio_figures(path, args.fio_runtime, ("rand64k_qd32",))
        rows = {}
        for cfg in [c for c in lirs_configs(ix, args.window) if not c.reads_only]:
            say(f"recheck: {cfg.name} (budget {args.epoch_budget:.0f}s)")
            cold(cfg.name, not args.no_drop)
            row = {**cfg.as_dict(), "name": cfg.name}
            row.update(run_child("config", epoch_task(cfg, ix.sidecar, args, tmp, args.epoch_budget), tmp,
                                 timeout_s=3 * args.epoch_budget + 300))
            rows[cfg.name] = row
        res["fio"] = merge_fio(fio, fio_figures(path, args.fio_runtime, ("rand64k_qd32",)))
        for name, row in rows.items():
            add_ratios(row, res["fio"])
            row["where_time_goes"] = where_time_goes(row, GOALS["decode_vs_fio64k"])
            say(f"recheck: {name}: {_line(row)}")
        res["epochs"] = rows
        res["load_after"] = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _write(path: str, res: dict) -> None:
    res.setdefault("date", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    say(f"wrote {path}")


def main(argv=None) -> int:
    args = parse_args(argv)
    default = os.path.join(HERE, "results", "scale_recheck.json" if args.recheck else "scale.json")
    path = args.out or default
    if args.plan_only:  # the plan of an existing result file, measured again
        with open(path) as f:
            res = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            res["plan"] = measure_plan(args, tmp)
        res["plan_command"] = "python benchmarks/bench_scale.py " + " ".join(sys.argv[1:])
    elif args.recheck:
        res = {**recheck(args), "machine": machine()}
    else:
        res = run(args)
        res.setdefault("machine", machine())
        print_summary(res)
    _write(path, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
