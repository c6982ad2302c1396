"""The device envelope measured with fio on the data file itself: random 4 KiB reads at queue depth
1, 32 and 128, random 64 KiB reads and 1 MiB sequential reads, all ``O_DIRECT`` and read-only.

    fio_path() -> str | None
    fio_command(path, job, runtime_s, *, ioengine="io_uring") -> list[str]
    parse_fio_json(text) -> dict
    run_envelope(path, *, jobs=JOBS, runtime_s=5.0, cgroup_procs=None, progress=None) -> dict

``run_envelope`` returns ``{"available": True, "ioengine", "jobs": {NAME: {"iops", "bw_bytes",
"mean_lat_us", "runtime_s", "command"}}}``, or ``{"available": False, "reason": ...}`` when fio is
missing (with a logged hint on how to install it). When ``cgroup_procs`` is given, fio runs inside
that cgroup (it joins before ``exec``), so a blkio throttle applies to it as it does to the loaders.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess

from ..errors import LirsError

log = logging.getLogger("lirs.eval.fio")

INSTALL_HINT = "install fio for the device envelope (Debian/Ubuntu: apt-get install -y fio; Fedora: dnf install fio)"

# name -> (rw, block size, queue depth); the names are the keys of the JSON and of bench's bounds
JOBS = {
    "rand4k_qd1": ("randread", 4096, 1),
    "rand4k_qd32": ("randread", 4096, 32),
    "rand4k_qd128": ("randread", 4096, 128),
    "rand64k_qd32": ("randread", 65536, 32),
    "seq1m_qd16": ("read", 1 << 20, 16),
}
IOPS_JOBS = ("rand4k_qd1", "rand4k_qd32", "rand4k_qd128")
IOPS_QDS = {1: "rand4k_qd1", 32: "rand4k_qd32", 128: "rand4k_qd128"}


class FioError(LirsError):
    """fio ran but failed, or printed something that is not its JSON report."""


def fio_path() -> str | None:
    """Path of the fio executable, or None."""
    return shutil.which("fio")


def fio_command(path: str, job: str, runtime_s: float, *, ioengine: str = "io_uring") -> list[str]:
    """The fio command line of ``job`` (a key of :data:`JOBS`) on ``path`` (read-only, O_DIRECT)."""
    rw, bs, qd = JOBS[job]
    size = os.path.getsize(path) // bs * bs
    if size < bs:
        raise FioError(f"{path}: {os.path.getsize(path)} bytes is less than one {bs}-byte fio block")
    ms = max(100, int(round(runtime_s * 1000)))
    return ["fio", "--output-format=json", f"--name={job}", f"--filename={path}", "--readonly",
            f"--rw={rw}", f"--bs={bs}", "--direct=1", f"--ioengine={ioengine}", f"--iodepth={qd}",
            f"--size={size}", f"--runtime={ms}ms", "--time_based", "--norandommap", "--randrepeat=0",
            "--invalidate=0"]


def parse_fio_json(text: str) -> dict:
    """The read figures of fio's JSON report: ``{"iops", "bw_bytes", "mean_lat_us", "runtime_s",
    "ios"}`` (floats; the first job, or all jobs summed when several).

    fio sometimes prints warnings before the JSON: everything before the first ``{`` is skipped.
    Raises FioError when there is no parsable report or it holds an error.
    """
    start = text.find("{")
    if start < 0:
        raise FioError(f"fio printed no JSON report: {text.strip()[:200]!r}")
    try:
        rep = json.loads(text[start:])
    except json.JSONDecodeError as e:
        raise FioError(f"fio's report is not valid JSON ({e}): {text[start:start + 200]!r}") from None
    jobs = rep.get("jobs") or []
    if not jobs:
        raise FioError("fio's report holds no job")
    bad = [j.get("error") for j in jobs if j.get("error")]
    if bad:
        raise FioError(f"fio job failed with error {bad[0]} ({os.strerror(bad[0])})")
    iops = sum(float(j["read"]["iops"]) for j in jobs)
    bw = sum(float(j["read"]["bw_bytes"]) for j in jobs)
    ios = sum(int(j["read"].get("total_ios", 0)) for j in jobs)
    lat = [float(j["read"]["lat_ns"]["mean"]) for j in jobs if "lat_ns" in j["read"]]
    runtime = max(float(j["read"].get("runtime", 0)) for j in jobs) / 1000.0
    return {"iops": iops, "bw_bytes": bw, "mean_lat_us": (sum(lat) / len(lat) / 1000.0) if lat else None,
            "runtime_s": runtime, "ios": ios}


def _in_cgroup(cmd: list[str], cgroup_procs: str | None) -> list[str]:
    if not cgroup_procs:
        return cmd
    # the shell joins the cgroup, then becomes fio: no read of fio escapes the throttle
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', cgroup_procs, *cmd]


def run_job(path: str, job: str, runtime_s: float, *, ioengine: str = "io_uring",
            cgroup_procs: str | None = None) -> dict:
    """Run one fio job; the figures of :func:`parse_fio_json` plus ``"command"``."""
    exe = fio_path()
    if exe is None:
        raise FioError("fio not found; " + INSTALL_HINT)
    cmd = fio_command(path, job, runtime_s, ioengine=ioengine)
    cmd[0] = exe
    out = subprocess.run(_in_cgroup(cmd, cgroup_procs), capture_output=True, text=True,
                         timeout=runtime_s + 120)
    if out.returncode != 0:
        raise FioError(f"fio exited with status {out.returncode}: {(out.stderr or out.stdout).strip()[-300:]}")
    res = parse_fio_json(out.stdout)
    res["command"] = " ".join(shlex.quote(c) for c in ["fio", *cmd[1:]])
    return res


def run_envelope(path: str, *, jobs=tuple(JOBS), runtime_s: float = 5.0, cgroup_procs: str | None = None,
                 progress=None) -> dict:
    """Measure every job of ``jobs`` on ``path``; see the module docstring for the result.

    ``progress``: a callable given each job name before it runs (or None). io_uring is tried
    first, then libaio (io_uring can be disabled by the kernel or a seccomp profile).
    """
    if fio_path() is None:
        log.warning("fio not found: continuing without the device envelope and the ratios to it; %s", INSTALL_HINT)
        return {"available": False, "reason": "fio not found; " + INSTALL_HINT}
    out = {"available": True, "runtime_s": runtime_s, "jobs": {}}
    engines = ["io_uring", "libaio"]
    for job in jobs:
        if progress:
            progress(job)
        while True:
            try:
                out["jobs"][job] = run_job(path, job, runtime_s, ioengine=engines[0], cgroup_procs=cgroup_procs)
                break
            except FioError as e:
                if len(engines) > 1:
                    log.info("fio with %s failed (%s); trying %s", engines[0], e, engines[1])
                    engines.pop(0)
                    continue
                log.warning("fio job %s failed: %s", job, e)
                out["jobs"][job] = {"error": str(e)}
                break
    out["ioengine"] = engines[0]
    errors = [j["error"] for j in out["jobs"].values() if "error" in j]
    if out["jobs"] and len(errors) == len(out["jobs"]):  # no figure to compare with: say why
        out.update(available=False, reason=f"every fio job failed: {errors[0]}")
        del out["ioengine"]
    return out


def figure(fio: dict | None, job: str, metric: str) -> float | None:
    """``fio["jobs"][job][metric]`` when measured, else None."""
    if not fio or not fio.get("available"):
        return None
    j = fio.get("jobs", {}).get(job) or {}
    v = j.get(metric)
    return float(v) if v else None
