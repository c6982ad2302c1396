"""One ``lirs bench`` run (:func:`run_bench`): per device envelope, fio, then every configuration in
its own worker process, then the recommendation and the goals."""
from __future__ import annotations

import datetime
import logging
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time

from tqdm import tqdm

from ...build import build_index
from ...firstuse import sidecar_beside
from ...constants import BLOCK, DEFAULT_GROUP_BYTES, DEFAULT_WINDOW
from ...policies import GRANULARITIES
from ...errors import DataError, IndexFormatError, UsageError
from ...index import open_index
from ...litter import BENCH_SCRATCH, clean_dead_litter
from ...windows import window_groups
from .. import envelope as E
from .. import fio as F
from ..peers import PEERS, skip_reason
from .configs import Config, bench_configs, add_ratios, lirs_configs
from .recommend import TIE_TOLERANCE, goals, recommend
from .disk import describe, no_disk
from .report import row_line, device_label
from .schema import SCHEMA, SCHEMA_VERSION
from .worker import interrupt, Worker

log = logging.getLogger("lirs.eval.bench")


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
    try:
        return open_index(path), None
    except IndexFormatError:
        if str(path).endswith(".lirs"):
            raise
    t = time.perf_counter()
    with sidecar_beside(path):  # --workdir does not move the index: the advice builds it elsewhere
        idx = build_index(path, progress=progress)
    return idx, time.perf_counter() - t


def _check_names(devices, granularities, peers, reads_only):
    """The checked lists of devices, granularities, peers and reads-only granularities, and whether
    the peers were named explicitly (then a skipped one is worth a warning)."""
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
    return devices, granularities, peer_list, explicit, reads_only


def check_group_size(g):
    """``"auto"``, or the group size ``g`` (bytes) as an int when it is a power of two of at least a
    page, as the Loader's groups are; else UsageError."""
    if g == "auto":
        return g
    g = int(g)
    if g < BLOCK or g & (g - 1):
        raise UsageError(f"group size {g} must be a power of two >= {BLOCK}")
    return g


def _check_numbers(group_bytes, epochs, budget_s, batch_size, window) -> list:
    """The group sizes (ints, or ``"auto"``), after checking every numeric setting."""
    sizes = [check_group_size(g) for g in group_bytes]
    if epochs < 1:
        raise UsageError("epochs must be >= 1")
    if budget_s <= 0:
        raise UsageError("budget_s must be > 0")
    if batch_size < 1:
        raise UsageError("batch_size must be >= 1")
    window_groups(window, BLOCK, 1)  # raises on a window spec that cannot work
    return sizes


def _disk(data_path: str, devices, cgroup_root: str, notes: list) -> tuple[dict, str | None]:
    """The disk under the data and why envelopes (and device I/O counters) are impossible here
    (None: they are possible; stale groups of earlier runs are then removed)."""
    disk = {"path": data_path}
    try:
        maj, mnr, name = E.disk_of(data_path)
        disk.update({"device": f"{maj}:{mnr}", "name": name})
        disk.update(describe(name))  # transport, model, rotational, label: what the disk really is
        try:
            with open(f"/sys/block/{name}/queue/read_ahead_kb") as f:
                disk["read_ahead_kb"] = int(f.read())
        except (OSError, ValueError):
            pass
        cg_reason = E.blkio_unavailable(cgroup_root)
    except E.EnvelopeError as e:
        cg_reason = str(e)
        disk.update(no_disk(data_path))
    disk["cgroups"] = cg_reason or "available"
    if cg_reason:
        if any(E.ENVELOPES[d].throttled for d in devices):
            log.warning("no device envelopes: %s; the ssd/hdd rows are skipped", cg_reason)
        notes.append(f"no cgroup: {cg_reason}")
    else:
        E.remove_stale(cgroup_root)
    return disk, cg_reason


class _Bench:
    """The state of one :func:`run_bench`: the settings, the index, the result being filled, the
    progress bar and the folder of the workers' files."""

    def __init__(self, index, index_s, settings: dict, *, explicit, workdir, cg_reason, cgroup_root, timeout_s,
                 fio_results, bar, tmp, say):
        self.index, self.index_s, self.s = index, index_s, settings
        self.explicit, self.workdir, self.cg_reason, self.cgroup_root = explicit, workdir, cg_reason, cgroup_root
        self.timeout_s, self.fio_results, self.bar, self.tmp, self.say = timeout_s, fio_results, bar, tmp, say

    def configs(self, fres) -> list[Config]:
        s = self.s
        return bench_configs(s["granularities"], s["group_bytes"], s["window"], s["peers"], fres, s["reads_only"],
                             self.index.payload_bytes, self.index.n)

    def device(self, res: dict, dev: str, n_cfg: int) -> None:
        """fio and every configuration in the envelope of ``dev``; rows appended to ``res``."""
        env = E.ENVELOPES[dev]
        if env.throttled and self.cg_reason:
            res["fio"][dev] = {"available": False, "reason": f"envelope skipped: {self.cg_reason}"}
            for cfg in self.configs(None):
                row = _row_base(dev, cfg)
                row["note"] = f"no {dev} envelope here: {self.cg_reason}"
                res["rows"].append(row)
                self.bar.update(1)
            return
        group = None
        if not self.cg_reason:
            group = E.ThrottleGroup(dev, res["disk"]["device"], env.read_iops, env.read_bps, root=self.cgroup_root)
            group.create()
        try:
            fres = self.fio(dev, group)
            res["fio"][dev] = fres  # fio missing: run_envelope logged how to install it
            cfgs = self.configs(fres)
            self.bar.total = self.bar.total + len(cfgs) - n_cfg
            for cfg in cfgs:
                self.bar.set_description(f"{dev}: {cfg.name}")
                row = self.row(dev, cfg, group)
                add_ratios(row, fres)
                res["rows"].append(row)
                self.say(row_line(row, device_label(res, dev)))
                self.bar.update(1)
        finally:
            if group is not None:
                group.remove()

    def fio(self, dev: str, group) -> dict:
        """The fio figures of the envelope: reused, measured inside its group, or not requested."""
        if self.fio_results and dev in self.fio_results:
            return self.fio_results[dev]
        if not self.s["fio"]:
            return {"available": False, "reason": "fio not requested (--no-fio)"}
        self.bar.set_description(f"{dev}: fio")
        return F.run_envelope(self.index.paths[0], runtime_s=self.s["fio_runtime_s"],
                              cgroup_procs=group.procs if group else None,
                              progress=lambda j: self.bar.set_description(f"{dev}: fio {j}"))

    def row(self, dev: str, cfg: Config, group) -> dict:
        """The result row of one configuration: skipped with the reason, or measured by a worker."""
        row = _row_base(dev, cfg)
        why = skip_reason(cfg.peer, self.index, workdir=self.workdir) if cfg.kind == "peer" else None
        if why:
            row["note"] = why
            if self.explicit:
                log.warning("%s skipped: %s", cfg.name, why)
            return row
        s = self.s
        task = {"config": cfg.as_dict(), "sidecar": self.index.sidecar, "batch_size": s["batch_size"],
                "epochs": s["epochs"], "budget_s": s["budget_s"], "seed": s["seed"], "engine": s["engine"],
                "prefetch": s["prefetch"], "workdir": self.workdir, "buffer_records": s["buffer_records"],
                "bmf_blocks": s["bmf_blocks"],
                "cgroup": {"path": group.path, "device": group.device} if group else None}
        row.update(Worker(task, self.tmp, self.timeout_s).run())
        if row["status"] == "error":
            log.warning("%s on %s failed: %s", cfg.name, dev, row["note"])
        elif row.get("cache_evicted") is False:
            row["note"] = ((row.get("note") or "") + "; the page cache of the data could not "
                           "be emptied: reads may be served from memory").lstrip("; ")
        if cfg.kind == "lirs":
            row["pre_s"], row["pre_what"] = self.index_s, "lirs index (scan once)" if self.index_s else None
        return row


def _result(index, index_s, command, settings: dict, disk: dict, notes: list) -> dict:
    """The result dict before anything is measured (see :data:`SCHEMA`)."""
    file_bytes = sum(os.path.getsize(p) for p in index.paths)
    return {
        "schema": "lirs-bench", "version": SCHEMA_VERSION,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command, "machine": _machine(),
        "data": {"path": index.paths[0], "format": index.format, "records": int(index.n),
                 "payload_bytes": int(index.payload_bytes), "file_bytes": int(file_bytes),
                 "mean_record_bytes": index.payload_bytes / index.n, "index_s": index_s},
        "settings": settings,
        "disk": disk,
        "envelopes": {d: E.ENVELOPES[d].as_dict() for d in settings["devices"]},
        "fio": {}, "rows": [], "recommendation": {}, "goals": {}, "notes": notes,
    }


def scratch_dir(workdir: str) -> str:
    """The absolute ``workdir`` a benchmark writes its scratch folder in (made if missing), what a
    crashed benchmark left there removed; UsageError naming it when it cannot be written."""
    workdir = os.path.abspath(workdir)
    try:
        os.makedirs(workdir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"work directory {workdir}: {e.strerror or e}; choose another (--workdir)") from None
    if not os.access(workdir, os.W_OK | os.X_OK):
        raise UsageError(f"work directory {workdir} is not writable: a benchmark writes its scratch files and the "
                         f"peers' copies of the data there (by default beside the data); choose another (--workdir)")
    clean_dead_litter(workdir)
    return workdir


def run_bench(path: str, *, devices=("nvme",), granularities=GRANULARITIES, group_bytes=(DEFAULT_GROUP_BYTES, "auto"),
              window=DEFAULT_WINDOW, peers="auto", epochs: int = 1, budget_s: float = 20.0, batch_size: int = 1024,
              seed: int = 0, engine: str = "auto", prefetch: int = 4, fio: bool = True,
              fio_runtime_s: float = 5.0, fio_results: dict | None = None, workdir: str | None = None,
              cgroup_root: str | None = None, buffer_records: int = 10_000, bmf_blocks: int = 40,
              reads_only=(), timeout_s: float | None = None, progress: bool | None = None,
              command: str | None = None, say=None) -> dict:
    """Benchmark ``path`` (data file or sidecar; indexed here when it has no index).

    Parameters
    ----------
    devices : envelopes (keys of :data:`lirs.eval.envelope.ENVELOPES`), in order.
    granularities : lirs granularities to measure.
    reads_only : granularities measured once more as reads-only rows (``NAME/reads``: the plan's
        extents read with the engine, no Loader, no decode): the I/O ceiling of that pattern.
    group_bytes : group sizes for group/window; ``"auto"`` adds the envelope's own size
        (:func:`envelope_group_bytes`, from the fio figures) when it differs.
    peers : ``"auto"`` (every peer that applies here), ``"none"``, or names of :data:`lirs.eval.peers.PEERS`.
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
    say = say or (lambda msg: log.info("%s", msg))
    devices, granularities, peer_list, explicit, reads_only = _check_names(devices, granularities, peers, reads_only)
    sizes = _check_numbers(group_bytes, epochs, budget_s, batch_size, window)
    timeout_s = timeout_s or (300.0 + 30.0 * budget_s)
    cgroup_root = cgroup_root or E.BLKIO_ROOT
    show = sys.stderr.isatty() if progress is None else bool(progress)

    index, index_s = _open_or_build(path, show)
    if index.n == 0:
        raise DataError(f"{index.paths[0]}: no records to benchmark")
    workdir = scratch_dir(workdir or os.path.dirname(index.paths[0]))
    notes = []
    disk, cg_reason = _disk(index.paths[0], devices, cgroup_root, notes)
    settings = {"devices": devices, "granularities": granularities, "reads_only": reads_only,
                "group_bytes": sizes, "window": window,
                "peers": peer_list, "epochs": epochs, "budget_s": budget_s, "batch_size": batch_size,
                "seed": seed, "engine": engine, "prefetch": prefetch, "fio": bool(fio),
                "fio_runtime_s": fio_runtime_s, "buffer_records": buffer_records, "bmf_blocks": bmf_blocks,
                "tie_tolerance": TIE_TOLERANCE}
    res = _result(index, index_s, command, settings, disk, notes)
    n_cfg = len(lirs_configs(granularities, [s for s in sizes if s != "auto"] or [DEFAULT_GROUP_BYTES], window,
                             reads_only, index.payload_bytes, index.n)) + len(peer_list)
    bar = tqdm(total=n_cfg * len(devices), unit="config", disable=not show, leave=False)
    old_term = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # SIGTERM cleans up like Ctrl-C (a caller's handler is left: the CLI's says "terminated", exits 143)
        old_term = signal.signal(signal.SIGTERM, interrupt)
    tmp = tempfile.mkdtemp(prefix=f"{BENCH_SCRATCH}{os.getpid()}-", dir=workdir)  # the peers' copies too
    try:
        bench = _Bench(index, index_s, settings, explicit=explicit, workdir=tmp, cg_reason=cg_reason,
                       cgroup_root=cgroup_root, timeout_s=timeout_s, fio_results=fio_results, bar=bar, tmp=tmp, say=say)
        for dev in devices:
            bench.device(res, dev, n_cfg)
    finally:
        bar.close()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        shutil.rmtree(tmp)
    res["recommendation"] = recommend(res["rows"], epochs=epochs)
    res["goals"] = goals(res["rows"])
    return res
