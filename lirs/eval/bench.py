"""``lirs bench``: which granularity wins on *this* disk, by how much, and against what.

For every device envelope (:mod:`lirs.envelope`: ``nvme`` = the disk as it is, ``ssd`` and ``hdd``
= the same disk under a blkio throttle), :func:`run_bench`

1. measures the envelope with fio on the data file (:mod:`lirs.fio`), inside the envelope;
2. runs every configuration in its own worker process, placed in the envelope's cgroup (only the
   worker and its children are throttled): lirs granularities through :class:`lirs.Loader`
   (``O_DIRECT``, prefetch, decode: what a user gets) and the peers of :mod:`lirs.peers`;
3. reports per configuration the epoch time, records/s, MB/s, reads/s, read amplification, CPU
   time and peak RSS of the worker, and each rate as a ratio to the fio figure it is bound by;
4. recommends, per envelope, a lirs configuration (:func:`recommend`).

Bounded runs. A configuration reads for about ``budget_s`` seconds (plus its one-off
pre-processing; past the budget it goes on until three batches have arrived, at most 3x the
budget). When an epoch does not finish in that time its duration is extrapolated
(``extrapolated: true``, ``extrapolation`` says how): the time to the first batch, which fills
the prefetch pipeline, plus the remaining records at the steady rate of the later batches. An
HDD envelope makes instance-granularity epochs hours long; a sample of a few thousand random
reads predicts them.

Cold caches. lirs, the shuffle buffer, BMF and the external shuffle read with ``O_DIRECT``. The
buffered peers (in-memory load, torch, memmap) start every epoch, and their pre-processing, with
the data file's pages evicted from the page cache (``posix_fadvise(DONTNEED)``: no root needed,
other files' cache untouched; ``cache_evicted`` and ``resident_after_evict_bytes`` in each row).

I/O counts. Where the cgroup exists, reads and bytes are the device's own counters for the
worker (``blkio.throttle.io_serviced`` / ``io_service_bytes``): the same yardstick for lirs and
for peers that read through the page cache. Elsewhere the loaders' own counters are used
(``io_source`` says which).

Results (``SCHEMA_VERSION`` 1) are a JSON-able dict; see :data:`SCHEMA` and :func:`validate`.
``save_recommendation`` writes ``DATA.lirs.bench.json`` beside the index: a
``Loader(..., granularity="auto")`` then uses that configuration (:func:`auto_settings`).
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

from ..constants import GRANULARITIES
from ..errors import DataError, IndexFormatError, UsageError
from ..recommendation import (RECOMMENDATION_SUFFIX, RECOMMENDATION_VERSION, auto_settings,  # noqa: F401
                              load_recommendation, recommendation_path, save_recommendation, write_json)
from ..units import format_bytes

log = logging.getLogger("lirs.bench")

SCHEMA_VERSION = 1
DEVICES = ("nvme", "ssd", "hdd")
# more random first: the tie-break of the recommendation
RANDOMNESS_ORDER = ("instance", "window", "page", "group")
TIE_TOLERANCE = 0.05
WARM_EPOCH = 1_000_003  # an epoch number never measured: the warm-up batch reads other records
MIN_AUTO_GROUP = 65536

GOALS = {
    "instance_vs_fio_iops": 0.9,
    "group_vs_fio_bandwidth": 0.85,
    "group_window_vs_torch": 10.0,
}


# ------------------------------------------------------------------------------ configurations


def format_size(b: int) -> str:
    """65536 -> '64K', 1048576 -> '1M', 1000 -> '1000'."""
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k}{unit}"
    return str(b)


@dataclass(frozen=True)
class Config:
    """One measured configuration: a lirs granularity (``kind="lirs"``) or a peer."""

    kind: str
    granularity: str | None = None
    group_bytes: int | None = None
    window: int | None = None
    peer: str | None = None
    reads_only: bool = False  # lirs: the plan's extents read with the engine, no decode, no Loader

    @property
    def name(self) -> str:
        if self.kind == "peer":
            return self.peer
        if self.granularity in ("instance", "page"):
            name = f"lirs-{self.granularity}"
        elif self.granularity == "group":
            name = f"lirs-group-{format_size(self.group_bytes)}"
        else:
            name = f"lirs-window-{format_size(self.group_bytes)}x{self.window}"
        return name + ("/reads" if self.reads_only else "")

    def as_dict(self) -> dict:
        return asdict(self)


def envelope_group_bytes(fio: dict | None, minimum: int = MIN_AUTO_GROUP, maximum: int = 16 << 20) -> int | None:
    """The group size an envelope asks for: the smallest power of two >= ``minimum`` at which fio's
    4 KiB random IOPS (QD 128) times the group size reaches fio's sequential bandwidth, i.e. group
    reads stop being IOPS-bound. None without fio figures."""
    from .fio import figure

    iops = figure(fio, "rand4k_qd128", "iops")
    bw = figure(fio, "seq1m_qd16", "bw_bytes")
    if not iops or not bw:
        return None
    g = minimum
    while g * iops < bw and g < maximum:
        g *= 2
    return g


def lirs_configs(granularities, group_sizes, window: int, reads_only=()) -> list[Config]:
    """Configs of the lirs granularities; group and window once per group size in ``group_sizes``;
    each granularity of ``reads_only`` once more as a reads-only run (its first group size)."""
    out = []
    for g in granularities:
        if g in ("instance", "page"):
            out.append(Config("lirs", g))
        else:
            for gb in group_sizes:
                out.append(Config("lirs", g, int(gb), int(window) if g == "window" else None))
    for g in reads_only:
        gb = None if g in ("instance", "page") else int(group_sizes[0])
        out.append(Config("lirs", g, gb, int(window) if g == "window" else None, reads_only=True))
    seen, uniq = set(), []
    for c in out:
        if c.name not in seen:
            seen.add(c.name)
            uniq.append(c)
    return uniq


def bound_of(row: dict) -> tuple[str, str] | None:
    """(``"iops"`` or ``"bw"``, fio job) that bounds a result row, or None.

    instance/page: 4 KiB random reads at the largest measured queue depth not above the engine's
    depth; group/window: bandwidth, 64 KiB random reads for groups up to 64 KiB, sequential
    reads for larger groups;
    peers: :data:`lirs.peers.BOUNDS`, except that buffered random readers whose mean device read
    reached 64 KiB (readahead) are bound by sequential bandwidth.
    """
    from .fio import IOPS_QDS
    from .peers import BOUNDS

    if row["kind"] == "peer":
        b = BOUNDS.get(row["peer"])
        if b is not None and b[0] == "iops" and (row.get("mean_read_bytes") or 0) >= (64 << 10):
            # page-cache readahead turned the random reads into large ones: bandwidth bounds them
            return "bw", "seq1m_qd16"
        return b
    if row["granularity"] in ("instance", "page"):
        depth = row.get("engine_depth") or 128
        qd = max((q for q in IOPS_QDS if q <= depth), default=1)
        return "iops", IOPS_QDS[qd]
    return "bw", ("rand64k_qd32" if (row.get("group_bytes") or 65536) <= 65536 else "seq1m_qd16")


def add_ratios(row: dict, fio: dict | None) -> None:
    """Fill ``bound`` and ``ratios`` of a row from the envelope's fio figures (in place)."""
    from .fio import figure

    b = bound_of(row) if row.get("status") == "ok" else None
    row["bound"] = None
    row["ratio"] = None
    row["ratios"] = {}
    if b is None:
        return
    metric, job = b
    iops = figure(fio, job, "iops")
    bw = figure(fio, job, "bw_bytes")
    row["bound"] = {"metric": metric, "fio_job": job, "fio_iops": iops, "fio_bw_bytes": bw}
    if not iops or not bw:
        return
    r = {}
    if row.get("reads_per_s") is not None:
        r["reads_per_s"] = row["reads_per_s"] / iops
    if row.get("mb_per_s") is not None:
        r["mb_per_s"] = row["mb_per_s"] * 1e6 / bw
    if row.get("records_per_s") is not None:
        if metric == "iops":
            r["records_per_s"] = row["records_per_s"] / iops
        elif row.get("payload_per_s") is not None:
            r["records_per_s"] = row["payload_per_s"] / bw  # payload delivered vs what the device streams
    row["ratios"] = r
    row["ratio"] = r.get("reads_per_s" if metric == "iops" else "mb_per_s")


# ------------------------------------------------------------------------------ recommendation


def _randomness_key(row: dict):
    g = row["granularity"]
    return (RANDOMNESS_ORDER.index(g), row.get("group_bytes") or 0, -(row.get("window") or 0))


def recommend(rows: list[dict], *, tolerance: float = TIE_TOLERANCE, epochs: int = 1) -> dict:
    """Per device, the lirs configuration to use.

    Rule: among the lirs rows of a device that ran (status ``ok``), take those whose epoch time is
    within ``tolerance`` (5%) of the fastest; of these, the most random one wins: instance, then
    window, then page, then group; smaller groups before larger ones, more groups per window
    before fewer. Peers are not candidates (a Loader cannot become one), but the fastest row
    overall, by epoch time and by ``pre_s + epochs x epoch_s``, is reported beside the choice.

    Returns ``{device: {"config", "granularity", "group_bytes", "window", "epoch_s",
    "extrapolated", "fastest_lirs", "fastest_overall", "fastest_total", "rule", "text"}}``;
    devices without any lirs row that ran are left out.
    """
    out = {}
    devices = []
    for r in rows:
        if r["device"] not in devices:
            devices.append(r["device"])
    for dev in devices:
        ok = [r for r in rows if r["device"] == dev and r.get("status") == "ok" and r.get("epoch_s")
              and not r.get("reads_only")]
        cand = [r for r in ok if r["kind"] == "lirs" and not r.get("reads_only")]
        if not cand:
            continue
        best = min(r["epoch_s"] for r in cand)
        near = [r for r in cand if r["epoch_s"] <= best * (1 + tolerance)]
        pick = min(near, key=_randomness_key)
        fastest_lirs = min(cand, key=lambda r: r["epoch_s"])
        fastest = min(ok, key=lambda r: r["epoch_s"])
        total = min(ok, key=lambda r: (r.get("pre_s") or 0.0) + epochs * r["epoch_s"])
        text = (f"{dev}: use {pick['name']} (epoch {_fmt_s(pick['epoch_s'], pick.get('extrapolated'))}")
        if pick is not fastest_lirs:
            text += (f"; {fastest_lirs['name']} is {fastest_lirs['epoch_s']:.3g}s, within "
                     f"{tolerance:.0%}, but less random")
        text += ")"
        if fastest["kind"] == "peer" and fastest["epoch_s"] < pick["epoch_s"]:
            from .peers import CAVEATS

            caveat = CAVEATS.get(fastest["peer"], "")
            text += (f"; {fastest['name']} is faster here ({_fmt_s(fastest['epoch_s'], fastest.get('extrapolated'))}"
                     f" per epoch, {pick['epoch_s'] / fastest['epoch_s']:.1f}x){' ' + caveat if caveat else ''}")
        out[dev] = {
            "config": pick["name"], "granularity": pick["granularity"], "group_bytes": pick.get("group_bytes"),
            "window": pick.get("window"), "epoch_s": pick["epoch_s"], "extrapolated": bool(pick.get("extrapolated")),
            "fastest_lirs": fastest_lirs["name"], "fastest_overall": fastest["name"],
            "fastest_overall_epoch_s": fastest["epoch_s"], "fastest_total": total["name"],
            "rule": f"fastest lirs epoch; within {tolerance:.0%} of it prefer more randomness "
                    f"({' > '.join(RANDOMNESS_ORDER)}, smaller groups, larger windows)",
            "text": text,
        }
    return out


def goals(rows: list[dict]) -> dict:
    """Per device, the issue's goals: instance >= 0.9x fio IOPS, group >= 0.85x fio bandwidth (for
    the Loader, and as ``*_reads_only_*`` for the reads-only rows), lirs group/window >= 10x the
    torch DataLoader (records/s). Each ``{"value", "goal", "met", "rows"}``; a goal whose rows did
    not run is left out."""
    out = {}
    for dev in dict.fromkeys(r["device"] for r in rows):
        ok = {r["name"]: r for r in rows if r["device"] == dev and r.get("status") == "ok"}
        g = {}
        for suffix, only in (("", False), ("_reads_only", True)):
            inst = ok.get("lirs-instance" + ("/reads" if only else ""))
            if inst and inst.get("ratio") is not None:
                g["instance" + suffix + "_vs_fio_iops"] = _goal(inst["ratio"], GOALS["instance_vs_fio_iops"],
                                                                [inst["name"]])
            groups = [r for r in ok.values() if r["kind"] == "lirs" and r["granularity"] == "group"
                      and bool(r.get("reads_only")) == only and r.get("ratio") is not None]
            if groups:
                best = max(groups, key=lambda r: r["ratio"])
                g["group" + suffix + "_vs_fio_bandwidth"] = _goal(best["ratio"], GOALS["group_vs_fio_bandwidth"],
                                                                  [best["name"]])
        gw = [r for r in ok.values() if r["kind"] == "lirs" and r["granularity"] in ("group", "window")
              and not r.get("reads_only") and r.get("records_per_s")]
        torch_row = ok.get("torch")
        if gw and torch_row and torch_row.get("records_per_s"):
            best = max(gw, key=lambda r: r["records_per_s"])
            g["group_window_vs_torch"] = _goal(best["records_per_s"] / torch_row["records_per_s"],
                                               GOALS["group_window_vs_torch"], [best["name"], "torch"])
        if g:
            out[dev] = g
    return out


def _goal(value, goal, names):
    return {"value": float(value), "goal": goal, "met": bool(value >= goal), "rows": names}


# ------------------------------------------------------------------------------ the JSON


SCHEMA = {
    "top": {"schema": str, "version": int, "date": str, "command": (str, type(None)), "machine": dict,
            "data": dict, "settings": dict, "disk": dict, "envelopes": dict, "fio": dict, "rows": list,
            "recommendation": dict, "goals": dict, "notes": list},
    "data": {"path": str, "format": str, "records": int, "payload_bytes": int, "file_bytes": int,
             "mean_record_bytes": (int, float), "index_s": (int, float, type(None))},
    "row": {"device": str, "name": str, "kind": str, "status": str, "note": (str, type(None)),
            "granularity": (str, type(None)), "group_bytes": (int, type(None)), "window": (int, type(None)),
            "peer": (str, type(None)), "reads_only": bool, "what": (str, type(None)),
            "epoch_s": (int, float, type(None)), "extrapolated": (bool, type(None)),
            "epochs_measured": (int, type(None)), "measured_s": (int, float, type(None)),
            "records": (int, type(None)), "records_per_s": (int, float, type(None)),
            "mb_per_s": (int, float, type(None)), "reads_per_s": (int, float, type(None)),
            "amplification": (int, float, type(None)), "cpu_s": (int, float, type(None)),
            "cpu_s_per_epoch": (int, float, type(None)), "peak_rss_bytes": (int, type(None)),
            "pre_s": (int, float, type(None)), "pre_what": (str, type(None)),
            "io_source": (str, type(None)), "cache_evicted": (bool, type(None)),
            "bound": (dict, type(None)), "ratio": (int, float, type(None)), "ratios": dict},
}
ROW_STATUSES = ("ok", "skipped", "error")


def validate(res: dict) -> list[str]:
    """Problems of a result dict against :data:`SCHEMA` (empty list: valid)."""
    probs = []

    def check(d, spec, where):
        if not isinstance(d, dict):
            probs.append(f"{where}: expected an object")
            return
        for k, t in spec.items():
            if k not in d:
                probs.append(f"{where}: missing {k!r}")
            elif not isinstance(d[k], t) or (isinstance(d[k], bool) and bool not in _types(t)):
                probs.append(f"{where}.{k}: {type(d[k]).__name__} is not {_tname(t)}")

    check(res, SCHEMA["top"], "result")
    if probs:
        return probs
    if res["schema"] != "lirs-bench":
        probs.append(f"result.schema: {res['schema']!r} is not 'lirs-bench'")
    if res["version"] != SCHEMA_VERSION:
        probs.append(f"result.version: {res['version']} is not {SCHEMA_VERSION}")
    check(res["data"], SCHEMA["data"], "data")
    for i, row in enumerate(res["rows"]):
        check(row, SCHEMA["row"], f"rows[{i}]")
        if isinstance(row, dict):
            if row.get("status") not in ROW_STATUSES:
                probs.append(f"rows[{i}].status: {row.get('status')!r} not in {ROW_STATUSES}")
            if row.get("status") == "ok" and not row.get("epoch_s"):
                probs.append(f"rows[{i}]: status ok without epoch_s")
            if row.get("device") not in res["envelopes"]:
                probs.append(f"rows[{i}].device: {row.get('device')!r} has no envelope entry")
    for dev, rec in res["recommendation"].items():
        names = {r["name"] for r in res["rows"] if r.get("device") == dev}
        if rec.get("config") not in names:
            probs.append(f"recommendation[{dev}]: {rec.get('config')!r} is not a row of {dev}")
    return probs


def _types(t):
    return t if isinstance(t, tuple) else (t,)


def _tname(t):
    return " or ".join(x.__name__ for x in _types(t))


# ------------------------------------------------------------------------------ saved recommendation


# ------------------------------------------------------------------------------ the worker


class _LirsRunner:
    """A lirs Loader with the peers' runner interface (see :mod:`lirs.peers`)."""

    buffered = False
    sample_fraction = 1.0
    pre_what = None
    note = None

    def __init__(self, cfg: Config, index, task: dict):
        from ..loader import Loader

        self.loader = Loader(index, task["batch_size"], granularity=cfg.granularity,
                             group_bytes=cfg.group_bytes or 65536, window=cfg.window or 16, seed=task["seed"],
                             engine=task["engine"], prefetch=task["prefetch"])
        self.what = f"lirs Loader, {cfg.granularity} granularity, O_DIRECT, prefetch {task['prefetch']}"

    def warm(self):
        for _ in self.loader.epoch(WARM_EPOCH):
            break
        self.loader.stats.reset()

    def prepare(self):
        pass

    def epoch(self, e):
        for b in self.loader.epoch(e):
            yield b.ids, b.X, b.y

    @property
    def reads(self):
        return self.loader.stats.reads

    @property
    def bytes_read(self):
        return self.loader.stats.bytes_read

    @property
    def payload(self):
        return self.loader.stats.payload_bytes

    def close(self):
        self.loader.close()


class _LirsReadsRunner:
    """The read pattern of a lirs granularity alone: the epoch's planned extents read with the
    engine, gathered into calls of at least ``engine depth`` extents (or 8 MiB), no decode. What
    the device gives lirs when decoding is not the bound."""

    buffered = False
    sample_fraction = 1.0
    pre_what = None
    note = None
    CALL_BYTES = 8 << 20

    def __init__(self, cfg: Config, index, task: dict):
        from ..engines import open_engine

        self.cfg, self.index, self.task = cfg, index, task
        self.engine = open_engine(list(index.paths), task["engine"])
        self.reads = self.bytes_read = self.payload = 0
        self._buf = None
        self.what = f"the {cfg.granularity} plan's extents read by the {self.engine.name} engine, no decode"

    def _plan(self, e):
        from ..plan import plan_epoch

        c = self.cfg
        return plan_epoch(self.index, self.task["batch_size"], c.granularity, seed=self.task["seed"], epoch=e,
                          group_bytes=c.group_bytes or 65536, window=c.window or 16)

    def _read(self, steps):
        import numpy as np

        from ..engines import aligned_empty

        ef = np.concatenate([np.asarray(s.ext_file, np.int32) for s in steps])
        eo = np.concatenate([np.asarray(s.ext_offset, np.int64) for s in steps])
        en = np.concatenate([np.asarray(s.ext_nbytes, np.int64) for s in steps])
        pos = np.zeros(len(en), np.int64)
        np.cumsum(en[:-1], out=pos[1:])
        total = int(en.sum())
        if self._buf is None or len(self._buf) < total:
            self._buf = aligned_empty(max(total, 4096))
        got = self.engine.read(ef, eo, en, self._buf, pos)
        self.reads += len(en)
        self.bytes_read += int(got.sum())
        self.payload += sum(s.payload_bytes for s in steps)

    def warm(self):
        for b in self._plan(WARM_EPOCH).batches():
            if b.new_steps:
                self._read(b.new_steps)
            break
        self.reads = self.bytes_read = self.payload = 0

    def prepare(self):
        pass

    def epoch(self, e):
        steps, ids, n_ext, nbytes = [], [], 0, 0
        for b in self._plan(e).batches():
            for st in b.new_steps:
                steps.append(st)
                n_ext += st.reads
                nbytes += st.bytes_read
            ids.append(b.ids)
            if n_ext >= self.engine.depth or nbytes >= self.CALL_BYTES:
                self._read(steps)
                yield from ((i, None, None) for i in ids)
                steps, ids, n_ext, nbytes = [], [], 0, 0
        if steps:
            self._read(steps)
        yield from ((i, None, None) for i in ids)

    def close(self):
        self.engine.close()


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
    from .envelope import ThrottleGroup

    g = ThrottleGroup("x", cg["device"], root=os.path.dirname(cg["path"]))
    g.path = cg["path"]
    return g.stats()


def run_config(task: dict) -> dict:
    """Measure one configuration (in the current process; :func:`run_bench` calls it in a worker
    process placed in the envelope's cgroup). Returns the row's measured fields."""
    from .envelope import cached_bytes, evict_cache
    from ..index import open_index
    from .peers import make_runner

    cfg = Config(**task["config"])
    index = open_index(task["sidecar"])
    n = int(index.n)
    if cfg.kind == "lirs":
        runner = (_LirsReadsRunner if cfg.reads_only else _LirsRunner)(cfg, index, task)
    else:
        runner = make_runner(cfg.peer, index, batch_size=task["batch_size"], seed=task["seed"],
                             engine=task["engine"], workdir=task["workdir"], budget_s=task["budget_s"],
                             buffer_records=task["buffer_records"], bmf_blocks=task["bmf_blocks"],
                             prefetch=task["prefetch"])
    row = {"what": runner.what}
    try:
        runner.warm()
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
        row.update(_measure(runner, task, n, frac, index.paths if drop else None))
        later_drops = row.pop("_dropped")
        row["cache_evicted"] = None if not drop else bool(first_drop and later_drops)
        row["sample_fraction"] = frac
        if runner.note:
            row["note"] = runner.note
        eng = getattr(runner, "engine", None) if cfg.reads_only else \
            getattr(getattr(runner, "loader", None), "_engine", None)
        if eng is not None:
            row["engine_depth"] = int(eng.depth)
            row["engine"] = eng.name
    finally:
        runner.close()
    row["peak_rss_bytes"] = (_vm_kib("VmHWM") or 0) * 1024
    ch = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    row["children_peak_rss_bytes"] = int(ch * 1024) if ch else None
    return row


def _measure(runner, task, n, frac, evict_paths) -> dict:
    from .envelope import evict_cache

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
        t0 = time.perf_counter()
        gen = runner.epoch(e)
        complete = True
        batches = 0
        try:
            for ids, X, y in gen:
                got += len(ids)
                batches += 1
                now = time.perf_counter() - t0
                if first is None:
                    first = (now, got)
                # past the budget, stop once a rate can be told (3 batches), or at 3x the budget
                if measured + now > budget and got < n_eff and (batches >= 3 or measured + now > 3 * budget):
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
            partial = (dt, got, first, batches)
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
        dt, got, first, batches = partial
        extrapolated = True
        if batches >= 3 and dt > first[0]:
            # time to the first batch (filling the prefetch pipeline), then the steady rate after it:
            # an average over the whole sample would charge the fill to every later batch
            rate = (got - first[1]) / (dt - first[0])
            epoch_s = (first[0] + (n_eff - first[1]) / rate) / frac
            how = (f"first batch after {first[0]:.3g}s, then {rate:,.0f} records/s over {batches - 1} batches, "
                   f"to {n_eff:,} records")
        else:
            epoch_s = dt * n_eff / max(got, 1) / frac
            how = f"{got:,} records in {dt:.3g}s, scaled to {n_eff:,} records"
    out = {"epochs_measured": len(done), "measured_s": measured, "records": records,
           "epoch_s": epoch_s, "extrapolated": bool(extrapolated), "epoch_times_s": done,
           "partial_epoch": None if partial is None else {"seconds": partial[0], "records": partial[1],
                                                          "batches": partial[3],
                                                          "first_batch_s": partial[2][0] if partial[2] else None},
           "extrapolation": how,
           "cpu_s": cpu, "cpu_s_per_epoch": cpu / measured * epoch_s if measured else None,
           "cpu_util": cpu / measured if measured else None, "_dropped": all_dropped}
    loader_reads = None if runner.reads is None else runner.reads - (r0 or 0)
    loader_bytes = None if runner.bytes_read is None else runner.bytes_read - (b0 or 0)
    payload = runner.payload - (p0 or 0)
    if cg0 is not None and cg1 is not None:
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


def _worker_main(argv=None) -> int:
    """``python -c 'from lirs.bench import _worker_main; _worker_main()' TASK.json OUT.json``"""
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


# ------------------------------------------------------------------------------ the run


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class _Worker:
    """A worker subprocess in its own session (its DataLoader children included), killed with its
    whole process group if the benchmark is interrupted or the worker overruns."""

    def __init__(self, task: dict, tmpdir: str, timeout_s: float):
        self.task_path = os.path.join(tmpdir, "task.json")
        self.out_path = os.path.join(tmpdir, "row.json")
        self.err_path = os.path.join(tmpdir, "stderr.txt")
        for p in (self.out_path,):
            if os.path.exists(p):
                os.unlink(p)
        with open(self.task_path, "w") as f:
            json.dump(task, f)
        self.timeout_s = timeout_s
        self.proc = None

    def run(self) -> dict:
        env = dict(os.environ)
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-c", "import sys; from lirs.bench import _worker_main; sys.exit(_worker_main())",
               self.task_path, self.out_path]
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env,
                                         start_new_session=True)
            try:
                rc = self.proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                return {"status": "error", "note": f"worker overran {self.timeout_s:.0f}s and was stopped"}
            finally:
                if self.proc.poll() is None:
                    self.kill()
        if os.path.exists(self.out_path):
            with open(self.out_path) as f:
                return json.load(f)
        with open(self.err_path) as f:
            tail = f.read()[-500:].strip()
        return {"status": "error", "note": f"worker exited with status {rc}: {tail}"}

    def kill(self):
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the worker and the processes it started, by group id
        except ProcessLookupError:
            pass
        p.wait()


def _row_base(dev: str, cfg: Config) -> dict:
    r = {"device": dev, "name": cfg.name, **cfg.as_dict(), "status": "skipped", "note": None, "what": None}
    for k in SCHEMA["row"]:
        r.setdefault(k, None)
    r["ratios"] = {}
    return r


def _machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "mem_total_bytes": _meminfo("MemTotal")}


def _meminfo(key):
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _open_or_build(path: str, progress):
    from ..build import build_index
    from ..index import open_index

    try:
        return open_index(path), None
    except IndexFormatError:
        if str(path).endswith(".lirs"):
            raise
    t = time.perf_counter()
    idx = build_index(path, progress=progress)
    return idx, time.perf_counter() - t


def run_bench(path: str, *, devices=("nvme",), granularities=GRANULARITIES, group_bytes=(65536, "auto"),
              window: int = 16, peers="auto", epochs: int = 1, budget_s: float = 20.0, batch_size: int = 1024,
              seed: int = 0, engine: str = "auto", prefetch: int = 4, fio: bool = True,
              fio_runtime_s: float = 5.0, fio_results: dict | None = None, workdir: str | None = None,
              cgroup_root: str | None = None, buffer_records: int = 10_000, bmf_blocks: int = 40,
              reads_only=(), timeout_s: float | None = None, progress: bool | None = None,
              command: str | None = None, say=None) -> dict:
    """Benchmark ``path`` (data file or sidecar; indexed here when it has no index).

    Parameters
    ----------
    devices : envelopes (keys of :data:`lirs.envelope.ENVELOPES`), in order.
    granularities : lirs granularities to measure.
    reads_only : granularities measured once more as reads-only rows (``NAME/reads``: the plan's
        extents read with the engine, no Loader, no decode): the I/O ceiling of that pattern.
    group_bytes : group sizes for group/window; ``"auto"`` adds the envelope's own size
        (:func:`envelope_group_bytes`, from the fio figures) when it differs.
    peers : ``"auto"`` (every peer that applies here), ``"none"``, or names of :data:`lirs.peers.PEERS`.
    epochs, budget_s : epochs per configuration, and seconds of reading after which a
        configuration stops (the epoch time is then extrapolated).
    fio, fio_runtime_s, fio_results : run fio per envelope for ``fio_runtime_s`` per job, or reuse
        ``fio_results[device]`` (the ``"fio"`` section of an earlier result on the same disk).
    workdir : where peers write their copies of the data (default: beside the data).
    cgroup_root : the blkio hierarchy (default /sys/fs/cgroup/blkio).
    timeout_s : wall limit of one worker (default 300 s + 30 x budget_s).
    progress : tqdm bar (None: when stderr is a terminal). ``say``: callable for status lines.

    Returns the result dict (schema version :data:`SCHEMA_VERSION`; :func:`validate` checks it).
    """
    from . import envelope as E
    from . import fio as F
    from .peers import PEERS, skip_reason

    say = say or (lambda msg: log.info("%s", msg))
    devices = list(devices)
    bad = [d for d in devices if d not in E.ENVELOPES]
    if bad or not devices:
        raise UsageError(f"unknown device envelope(s) {bad}; expected some of {', '.join(E.ENVELOPES)}")
    granularities = list(granularities)
    bad = [g for g in granularities if g not in GRANULARITIES]
    if bad:
        raise UsageError(f"unknown granularity {bad}; expected some of {', '.join(GRANULARITIES)}")
    if peers == "auto":
        peer_list, explicit = list(PEERS), False
    elif peers in ("none", None) or peers == ():
        peer_list, explicit = [], True
    else:
        peer_list, explicit = list(peers), True
        bad = [p for p in peer_list if p not in PEERS]
        if bad:
            raise UsageError(f"unknown peer(s) {bad}; expected some of {', '.join(PEERS)}")
    reads_only = list(reads_only or ())
    bad = [g for g in reads_only if g not in GRANULARITIES]
    if bad:
        raise UsageError(f"unknown granularity {bad} for reads-only rows; expected some of {', '.join(GRANULARITIES)}")
    if not granularities and not peer_list and not reads_only:
        raise UsageError("nothing to measure: no granularity and no peer")
    sizes = []
    for g in group_bytes:
        if g == "auto":
            sizes.append("auto")
        else:
            g = int(g)
            if g < 4096 or g & (g - 1):
                raise UsageError(f"group size {g} must be a power of two >= 4096")
            sizes.append(g)
    if epochs < 1:
        raise UsageError("epochs must be >= 1")
    if budget_s <= 0:
        raise UsageError("budget_s must be > 0")
    if batch_size < 1:
        raise UsageError("batch_size must be >= 1")
    if window < 1:
        raise UsageError("window must be >= 1")
    timeout_s = timeout_s or (300.0 + 30.0 * budget_s)
    cgroup_root = cgroup_root or E.BLKIO_ROOT
    show = sys.stderr.isatty() if progress is None else bool(progress)

    index, index_s = _open_or_build(path, show)
    if index.n == 0:
        raise DataError(f"{index.paths[0]}: no records to benchmark")
    data_path = index.paths[0]
    workdir = os.path.abspath(workdir or os.path.dirname(data_path))
    os.makedirs(workdir, exist_ok=True)
    file_bytes = sum(os.path.getsize(p) for p in index.paths)
    notes = []

    # the disk and whether envelopes (and device I/O counters) are possible here
    disk = {"path": data_path}
    try:
        maj, mnr, name = E.disk_of(data_path)
        disk.update({"device": f"{maj}:{mnr}", "name": name})
        try:
            with open(f"/sys/block/{name}/queue/read_ahead_kb") as f:
                disk["read_ahead_kb"] = int(f.read())
        except (OSError, ValueError):
            pass
        cg_reason = E.blkio_unavailable(cgroup_root)
    except E.EnvelopeError as e:
        cg_reason = str(e)
    disk["cgroups"] = cg_reason or "available"
    if cg_reason:
        if any(E.ENVELOPES[d].throttled for d in devices):
            log.warning("no device envelopes: %s; the ssd/hdd rows are skipped", cg_reason)
        notes.append(f"no cgroup: {cg_reason}")
    else:
        E.remove_stale(cgroup_root)

    res = {
        "schema": "lirs-bench", "version": SCHEMA_VERSION,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "machine": _machine(),
        "data": {"path": data_path, "format": index.format, "records": int(index.n),
                 "payload_bytes": int(index.payload_bytes), "file_bytes": int(file_bytes),
                 "mean_record_bytes": index.payload_bytes / index.n, "index_s": index_s},
        "settings": {"devices": devices, "granularities": granularities, "reads_only": reads_only,
                     "group_bytes": sizes, "window": window,
                     "peers": peer_list, "epochs": epochs, "budget_s": budget_s, "batch_size": batch_size,
                     "seed": seed, "engine": engine, "prefetch": prefetch, "fio": bool(fio),
                     "fio_runtime_s": fio_runtime_s, "buffer_records": buffer_records, "bmf_blocks": bmf_blocks,
                     "tie_tolerance": TIE_TOLERANCE},
        "disk": disk,
        "envelopes": {d: E.ENVELOPES[d].as_dict() for d in devices},
        "fio": {}, "rows": [], "recommendation": {}, "goals": {}, "notes": notes,
    }

    n_cfg = len(lirs_configs(granularities, [s for s in sizes if s != "auto"] or [65536], window, reads_only)) \
        + len(peer_list)
    from tqdm import tqdm

    bar = tqdm(total=n_cfg * len(devices), unit="config", disable=not show, leave=False)
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C
    tmp = tempfile.mkdtemp(prefix=".lirs-bench-", dir=workdir)
    try:
        for dev in devices:
            env = E.ENVELOPES[dev]
            group = None
            if env.throttled and cg_reason:
                res["fio"][dev] = {"available": False, "reason": f"envelope skipped: {cg_reason}"}
                for cfg in _configs(granularities, sizes, window, peer_list, None, reads_only):
                    row = _row_base(dev, cfg)
                    row["note"] = f"no {dev} envelope here: {cg_reason}"
                    res["rows"].append(row)
                    bar.update(1)
                continue
            if not cg_reason:
                group = E.ThrottleGroup(dev, disk["device"], env.read_iops, env.read_bps, root=cgroup_root)
                group.create()
            try:
                if fio_results and dev in fio_results:
                    fres = fio_results[dev]
                elif fio:
                    bar.set_description(f"{dev}: fio")
                    fres = F.run_envelope(data_path, runtime_s=fio_runtime_s,
                                          cgroup_procs=group.procs if group else None,
                                          progress=lambda j: bar.set_description(f"{dev}: fio {j}"))
                else:
                    fres = {"available": False, "reason": "fio not requested (--no-fio)"}
                res["fio"][dev] = fres  # fio missing: run_envelope logged how to install it
                cfgs = _configs(granularities, sizes, window, peer_list, fres, reads_only)
                bar.total = bar.total + len(cfgs) - n_cfg
                for cfg in cfgs:
                    bar.set_description(f"{dev}: {cfg.name}")
                    row = _row_base(dev, cfg)
                    why = skip_reason(cfg.peer, index, workdir=workdir) if cfg.kind == "peer" else None
                    if why:
                        row["note"] = why
                        if explicit:
                            log.warning("%s skipped: %s", cfg.name, why)
                    else:
                        task = {"config": cfg.as_dict(), "sidecar": index.sidecar, "batch_size": batch_size,
                                "epochs": epochs, "budget_s": budget_s, "seed": seed, "engine": engine,
                                "prefetch": prefetch, "workdir": workdir, "buffer_records": buffer_records,
                                "bmf_blocks": bmf_blocks,
                                "cgroup": {"path": group.path, "device": group.device} if group else None}
                        got = _Worker(task, tmp, timeout_s).run()
                        row.update(got)
                        if row["status"] == "error":
                            log.warning("%s on %s failed: %s", cfg.name, dev, row["note"])
                        elif row.get("cache_evicted") is False:
                            row["note"] = ((row.get("note") or "") + "; the page cache of the data could not "
                                           "be emptied: reads may be served from memory").lstrip("; ")
                        if cfg.kind == "lirs":
                            row["pre_s"], row["pre_what"] = index_s, "lirs index (scan once)" if index_s else None
                    add_ratios(row, fres)
                    res["rows"].append(row)
                    say(_row_line(row))
                    bar.update(1)
            finally:
                if group is not None:
                    group.remove()
    finally:
        bar.close()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    res["recommendation"] = recommend(res["rows"], epochs=epochs)
    res["goals"] = goals(res["rows"])
    return res


def _configs(granularities, sizes, window, peer_list, fres, reads_only=()) -> list[Config]:
    gs = []
    for s in sizes:
        if s == "auto":
            g = envelope_group_bytes(fres)
            if g is not None:
                gs.append(g)
        else:
            gs.append(s)
    if not gs:
        gs = [65536]
    return lirs_configs(granularities, gs, window, reads_only) + [Config("peer", peer=p) for p in peer_list]


# ------------------------------------------------------------------------------ output


def _fmt_s(s, extrapolated=False) -> str:
    if s is None:
        return "-"
    mark = "~" if extrapolated else ""
    if s >= 3600:
        return f"{mark}{s / 3600:.1f}h"
    if s >= 100:
        return f"{mark}{s:.0f}s"
    return f"{mark}{s:.3g}s"


def _fmt_n(v, digits=3) -> str:
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.{digits}g}M"
    if v >= 1e4:
        return f"{v / 1e3:.{digits}g}k"
    return f"{v:.{digits}g}"


def _row_line(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['device']}: {row['name']}: {row['status']} ({row.get('note')})"
    ratio = "" if row.get("ratio") is None else f", {row['ratio']:.2f}x fio {row['bound']['fio_job']}"
    return (f"{row['device']}: {row['name']}: epoch {_fmt_s(row['epoch_s'], row.get('extrapolated'))}, "
            f"{_fmt_n(row.get('records_per_s'))} records/s{ratio}")


def format_table(res: dict) -> str:
    """The results as a plain-text table, one block per device, then the recommendations."""
    head = ("config", "epoch", "records/s", "MB/s", "reads/s", "ampl.", "CPU s/epoch", "peak RSS", "pre",
            "bound", "ratio")
    lines = []
    for dev in res["settings"]["devices"]:
        env = res["envelopes"][dev]
        caps = "" if env["read_iops"] is None else \
            f" (capped at {env['read_iops']:,} IOPS, {env['read_bps'] / 1e6:.0f} MB/s)"
        lines.append(f"{dev}{caps}")
        fres = res["fio"].get(dev) or {}
        if fres.get("available"):
            j = fres["jobs"]
            parts = [f"{k} {_fmt_n(j[k].get('iops'))} IOPS" for k in ("rand4k_qd1", "rand4k_qd32", "rand4k_qd128")
                     if k in j and j[k].get("iops")]
            parts += [f"{k} {j[k]['bw_bytes'] / 1e6:.0f} MB/s" for k in ("rand64k_qd32", "seq1m_qd16")
                      if k in j and j[k].get("bw_bytes")]
            lines.append("  fio: " + ", ".join(parts))
        else:
            lines.append(f"  fio: {fres.get('reason', 'not run')}")
        rows = [r for r in res["rows"] if r["device"] == dev]
        table = [head]
        skipped = []
        for r in rows:
            if r["status"] != "ok":
                skipped.append(f"  {r['name']}: {r['status']}: {r.get('note')}")
                continue
            b = r.get("bound") or {}
            table.append((
                r["name"], _fmt_s(r["epoch_s"], r.get("extrapolated")), _fmt_n(r.get("records_per_s")),
                "-" if r.get("mb_per_s") is None else f"{r['mb_per_s']:.1f}", _fmt_n(r.get("reads_per_s")),
                "-" if r.get("amplification") is None else f"{r['amplification']:.2f}",
                "-" if r.get("cpu_s_per_epoch") is None else _fmt_s(r["cpu_s_per_epoch"], r.get("extrapolated")),
                format_bytes(r.get("peak_rss_bytes")), _fmt_s(r.get("pre_s")),
                "-" if not b else f"{b['metric']} {b['fio_job']}",
                "-" if r.get("ratio") is None else f"{r['ratio']:.2f}x"))
        if len(table) > 1:
            w = [max(len(str(t[i])) for t in table) for i in range(len(head))]
            for t in table:
                lines.append("  " + "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i])
                                              for i, c in enumerate(t)).rstrip())
        lines.extend(skipped)
        lines.append("")
    lines.append("~ = extrapolated from a budget-limited sample of the epoch")
    recs = res.get("recommendation") or {}
    if recs:
        lines.append("")
        lines.append("recommendation (" + next(iter(recs.values()))["rule"] + "):")
        for dev in res["settings"]["devices"]:
            if dev in recs:
                lines.append("  " + recs[dev]["text"])
    for n in res.get("notes") or []:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def plot(res: dict, path: str, title: str | None = None) -> bool:
    """Epoch time per configuration, one panel per device, log scale; extrapolated bars hatched,
    the recommended configuration in bold. Returns False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("no plot: matplotlib is not installed (pip install matplotlib)")
        return False
    devs = [d for d in res["settings"]["devices"]
            if any(r["device"] == d and r["status"] == "ok" for r in res["rows"])]
    if not devs:
        log.warning("no plot: no configuration ran")
        return False
    nrows = max(len([r for r in res["rows"] if r["device"] == d and r["status"] == "ok"]) for d in devs)
    fig, axes = plt.subplots(1, len(devs), figsize=(4.8 * len(devs) + 1.5, 0.38 * nrows + 1.8), squeeze=False)
    for ax, dev in zip(axes[0], devs):
        rows = [r for r in res["rows"] if r["device"] == dev and r["status"] == "ok"]
        rows.sort(key=lambda r: r["epoch_s"])
        rec = (res.get("recommendation") or {}).get(dev, {}).get("config")
        y = list(range(len(rows)))
        colors = ["tab:gray" if r["kind"] == "peer" else ("lightsteelblue" if r.get("reads_only") else "tab:blue")
                  for r in rows]
        bars = ax.barh(y, [r["epoch_s"] for r in rows], color=colors)
        for b, r in zip(bars, rows):
            if r.get("extrapolated"):
                b.set_hatch("//")
                b.set_alpha(0.7)
            ax.text(r["epoch_s"], b.get_y() + b.get_height() / 2, " " + _fmt_s(r["epoch_s"], r.get("extrapolated")),
                    va="center", fontsize=7)
        ax.set_yticks(y)
        ax.set_yticklabels([r["name"] for r in rows], fontsize=8)
        for lab, r in zip(ax.get_yticklabels(), rows):
            if r["name"] == rec:
                lab.set_fontweight("bold")
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("epoch time (s, log)")
        env = res["envelopes"][dev]
        ax.set_title(dev if env["read_iops"] is None else
                     f"{dev} ({env['read_iops']:,} IOPS, {env['read_bps'] / 1e6:.0f} MB/s)", fontsize=9)
        lo, hi = min(r["epoch_s"] for r in rows), max(r["epoch_s"] for r in rows)
        ax.set_xlim(lo / 2, hi * 8)
    title = title or (f"lirs bench: {os.path.basename(res['data']['path'])} ({format_bytes(res['data']['file_bytes'])}, "
                      f"{res['data']['records']:,} records)")
    fig.suptitle(title + "\nblue: lirs (light: reads only), gray: peers; hatched: extrapolated; bold: recommended",
                 fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def command_line(argv=None) -> str:
    """The command that ran, for the JSON."""
    argv = sys.argv if argv is None else argv
    return " ".join(shlex.quote(a) for a in argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_worker_main())
