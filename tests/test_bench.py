"""lirs bench: fio parsing, envelope setup/teardown (fake cgroup tree, and the real one when root),
the recommendation rule, the JSON schema, the peers' epochs, a tiny CLI run end to end, and
Loader(granularity="auto")."""
from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import fill_fs
from lirs.eval import bench as B
from lirs.eval import envelope as E
from lirs.eval import fio as F

# A fio 3.33 report (trimmed to the fields fio prints for a read job), preceded by the kind of
# warning fio writes before its JSON.
FIO_SAMPLE = """fio: io_uring: sqpoll disabled, using interrupts
{
 "fio version": "fio-3.33",
 "timestamp": 1795384236,
 "time": "Sun Nov 22 21:50:36 2026",
 "global options": {},
 "jobs": [
  {
   "jobname": "rand4k_qd32", "groupid": 0, "error": 0, "eta": 0, "elapsed": 1,
   "job options": {"name": "rand4k_qd32", "rw": "randread", "bs": "4096", "direct": "1",
                   "ioengine": "io_uring", "iodepth": "32", "runtime": "300ms"},
   "read": {
    "bw": 256146, "iops": 64036.54485, "total_ios": 19275, "io_bytes": 78950400, "drop_ios": 0,
    "bw_bytes": 262293687, "short_ios": 0, "io_kbytes": 77100, "runtime": 301,
    "slat_ns": {"min": 3625, "max": 13003614, "mean": 6534.469},
    "clat_ns": {"min": 2464, "max": 13428466, "mean": 491086.718},
    "lat_ns": {"min": 168320, "max": 13432141, "mean": 497621.187}
   },
   "write": {"io_bytes": 0, "bw_bytes": 0, "iops": 0.0, "runtime": 0}
  }
 ]
}
"""


# ------------------------------------------------------------------------------ fio


def test_parse_fio_json_recorded_sample():
    r = F.parse_fio_json(FIO_SAMPLE)
    assert r["iops"] == pytest.approx(64036.54485)
    assert r["bw_bytes"] == 262293687.0
    assert r["mean_lat_us"] == pytest.approx(497.621187)
    assert r["runtime_s"] == pytest.approx(0.301)
    assert r["ios"] == 19275


def test_parse_fio_json_sums_jobs_and_rejects_errors():
    rep = json.loads(FIO_SAMPLE[FIO_SAMPLE.index("{"):])
    two = copy.deepcopy(rep)
    two["jobs"].append(copy.deepcopy(rep["jobs"][0]))
    r = F.parse_fio_json(json.dumps(two))
    assert r["iops"] == pytest.approx(2 * 64036.54485)
    assert r["bw_bytes"] == 2 * 262293687.0
    bad = copy.deepcopy(rep)
    bad["jobs"][0]["error"] = 22
    with pytest.raises(F.FioError, match="error 22"):
        F.parse_fio_json(json.dumps(bad))
    with pytest.raises(F.FioError, match="no JSON"):
        F.parse_fio_json("fio: engine io_uring not loadable\n")
    with pytest.raises(F.FioError, match="not valid JSON"):
        F.parse_fio_json('{"jobs": [')
    with pytest.raises(F.FioError, match="no job"):
        F.parse_fio_json('{"jobs": []}')


def test_fio_command_is_read_only_direct_and_aligned(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(b"x" * (3 * 65536 + 100))
    cmd = F.fio_command(str(p), "rand64k_qd32", 1.5)
    assert "--readonly" in cmd and "--direct=1" in cmd and "--rw=randread" in cmd
    assert f"--size={3 * 65536}" in cmd and "--iodepth=32" in cmd and "--runtime=1500ms" in cmd
    small = tmp_path / "s.bin"
    small.write_bytes(b"x" * 100)
    with pytest.raises(F.FioError, match="less than one"):
        F.fio_command(str(small), "rand4k_qd1", 1)


def test_missing_fio_says_how_to_install(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(F, "fio_path", lambda: None)
    p = tmp_path / "d.bin"
    p.write_bytes(b"x" * 8192)
    with caplog.at_level(logging.WARNING, logger="lirs.eval.fio"):
        r = F.run_envelope(str(p), runtime_s=0.1)
    assert r["available"] is False and "apt-get install" in r["reason"]
    assert "apt-get install" in caplog.text
    assert F.figure(r, "rand4k_qd1", "iops") is None


# ------------------------------------------------------------------------------ envelopes (fake tree)


@pytest.fixture
def fake_root(tmp_path):
    """A plain directory shaped like the blkio hierarchy's root."""
    root = tmp_path / "blkio"
    root.mkdir()
    for f in ("cgroup.procs", "blkio.throttle.read_iops_device", "blkio.throttle.read_bps_device"):
        (root / f).write_text("")
    return str(root)


def _groups(root):
    return sorted(n for n in os.listdir(root) if n.startswith(E.PREFIX))


def test_throttle_group_setup_and_teardown(fake_root):
    assert E.blkio_unavailable(fake_root) is None
    g = E.ThrottleGroup("hdd", "254:0", 600, 160_000_000, root=fake_root)
    with g:
        assert _groups(fake_root) == [f"{E.PREFIX}{os.getpid()}-hdd"]
        assert open(os.path.join(g.path, "blkio.throttle.read_iops_device")).read() == "254:0 600\n"
        assert open(os.path.join(g.path, "blkio.throttle.read_bps_device")).read() == "254:0 160000000\n"
        g.add(4242)
        g.add(4343)
        assert g.members() == [4242, 4343]
        assert g.stats() is None  # a plain directory keeps no kernel counters
    assert _groups(fake_root) == []
    # members went back to the root group before the directory was removed
    assert open(os.path.join(fake_root, "cgroup.procs")).read().split() == ["4242", "4343"]
    g.remove()  # idempotent


def test_group_without_caps_writes_no_limits(fake_root):
    with E.ThrottleGroup("nvme", "8:0", root=fake_root) as g:
        assert sorted(os.listdir(g.path)) == []
    assert _groups(fake_root) == []


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_group_removed_after_a_failure_inside(fake_root, exc):
    with pytest.raises(type(exc)):
        with E.ThrottleGroup("ssd", "254:0", 90_000, 530_000_000, root=fake_root) as g:
            g.add(99)
            raise exc
    assert _groups(fake_root) == []
    assert "99" in open(os.path.join(fake_root, "cgroup.procs")).read().split()


def test_failed_setup_leaves_nothing(fake_root, monkeypatch):
    real = E._write

    def failing(path, text, append=False):
        if path.endswith("read_bps_device"):
            raise OSError(22, "Invalid argument")
        real(path, text, append)

    monkeypatch.setattr(E, "_write", failing)
    with pytest.raises(E.EnvelopeError, match="cannot set the throttle"):
        E.ThrottleGroup("hdd", "254:0", 600, 160_000_000, root=fake_root).create()
    assert _groups(fake_root) == []


def test_group_name_and_device_are_checked(fake_root):
    with pytest.raises(ValueError, match="MAJOR:MINOR"):
        E.ThrottleGroup("hdd", "vda", root=fake_root)
    with pytest.raises(ValueError, match="envelope name"):
        E.ThrottleGroup("../x", "1:2", root=fake_root)
    g = E.ThrottleGroup("hdd", "1:2", root=fake_root).create()
    try:
        with pytest.raises(E.EnvelopeError, match="exists already"):
            E.ThrottleGroup("hdd", "1:2", root=fake_root).create()
    finally:
        g.remove()


def test_remove_stale_groups_of_dead_processes(fake_root):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = os.path.join(fake_root, f"{E.PREFIX}{dead.pid}-hdd")
    os.mkdir(stale)
    with open(os.path.join(stale, "cgroup.procs"), "w") as f:
        f.write("")
    mine = E.ThrottleGroup("nvme", "1:2", root=fake_root).create()
    try:
        assert E.remove_stale(fake_root) == [stale]
        assert _groups(fake_root) == [os.path.basename(mine.path)]
    finally:
        mine.remove()


def test_blkio_unavailable_reasons(tmp_path):
    assert "no cgroup-v1 blkio" in E.blkio_unavailable(str(tmp_path / "missing"))
    (tmp_path / "root").mkdir()
    assert "has no blkio.throttle" in E.blkio_unavailable(str(tmp_path / "root"))


def test_disk_of_maps_a_partition_to_its_disk(tmp_path):
    data = tmp_path / "d.bin"
    data.write_bytes(b"x")
    st = os.stat(data)
    maj, mnr = os.major(st.st_dev), os.minor(st.st_dev)
    sysroot = tmp_path / "sys"
    part = sysroot / "devices" / "virtual" / "block" / "sdz" / "sdz3"
    part.mkdir(parents=True)
    (part / "partition").write_text("3\n")
    (part.parent / "dev").write_text("8:16\n")
    (sysroot / "dev" / "block").mkdir(parents=True)
    os.symlink(part, sysroot / "dev" / "block" / f"{maj}:{mnr}")
    assert E.disk_of(str(data), sys_root=str(sysroot)) == (8, 16, "sdz")
    os.unlink(sysroot / "dev" / "block" / f"{maj}:{mnr}")
    with pytest.raises(E.EnvelopeError, match="not a block device"):
        E.disk_of(str(data), sys_root=str(sysroot))


def test_evict_cache_empties_the_file_cache(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(os.urandom(1 << 20))
    with open(p, "rb") as f:
        f.read()
    before = E.cached_bytes(str(p))
    if before is None:
        pytest.skip("mincore not available")
    assert before > 0
    assert E.evict_cache([str(p)])
    assert E.cached_bytes(str(p)) == 0


def _real_blkio() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    return E.blkio_unavailable()


@pytest.mark.skipif(_real_blkio() is not None, reason=f"no real blkio cgroups: {_real_blkio()}")
def test_real_cgroup_throttle_lifecycle(tmp_path):
    p = tmp_path / "d.bin"
    p.write_bytes(os.urandom(64 * 4096))
    maj, mnr, _ = E.disk_of(str(p))
    child = subprocess.Popen(["sleep", "60"])
    try:
        with E.ThrottleGroup("test", f"{maj}:{mnr}", read_iops=100_000, read_bps=10 ** 9) as g:
            assert os.path.isdir(g.path)
            assert open(os.path.join(g.path, "blkio.throttle.read_iops_device")).read().split() == \
                [f"{maj}:{mnr}", "100000"]
            g.add(child.pid)
            assert g.members() == [child.pid]
            assert f":blkio:/{os.path.basename(g.path)}" in open(f"/proc/{child.pid}/cgroup").read()
            # a reader inside the group is counted by the device counters
            s0 = g.stats()
            assert s0 is not None
            E.evict_cache([str(p)])
            subprocess.run(["/bin/sh", "-c", 'echo $$ > "$0" && exec cat "$1" > /dev/null', g.procs, str(p)],
                           check=True)
            s1 = g.stats()
            assert s1["reads"] > s0["reads"] and s1["bytes"] >= s0["bytes"] + 64 * 4096
        assert not os.path.exists(g.path)
        assert ":blkio:/\n" in open(f"/proc/{child.pid}/cgroup").read()
    finally:
        child.kill()
        child.wait()


# ------------------------------------------------------------------------------ recommendation


def _row(dev, name, epoch_s, kind="lirs", status="ok", **kw):
    g = kw.pop("granularity", None)
    if kind == "lirs" and g is None:
        g = name.split("-")[1]
    r = {"device": dev, "name": name, "kind": kind, "status": status, "epoch_s": epoch_s,
         "granularity": g if kind == "lirs" else None, "group_bytes": kw.pop("group_bytes", None),
         "window": kw.pop("window", None), "peer": name if kind == "peer" else None, "extrapolated": False}
    r.update(kw)
    return r


def test_recommend_fastest_lirs_config():
    rows = [_row("nvme", "lirs-instance", 10.0), _row("nvme", "lirs-page", 6.0),
            _row("nvme", "lirs-group-64K", 3.0, group_bytes=65536),
            _row("nvme", "lirs-window-64Kx16", 4.0, group_bytes=65536, window=16)]
    rec = B.recommend(rows)
    assert rec["nvme"]["config"] == "lirs-group-64K"
    assert rec["nvme"]["granularity"] == "group" and rec["nvme"]["group_bytes"] == 65536
    assert rec["nvme"]["fastest_lirs"] == "lirs-group-64K"


def test_recommend_prefers_more_randomness_within_tolerance():
    rows = [_row("nvme", "lirs-instance", 3.1), _row("nvme", "lirs-page", 3.05),
            _row("nvme", "lirs-group-64K", 3.0, group_bytes=65536),
            _row("nvme", "lirs-window-64Kx16", 3.02, group_bytes=65536, window=16)]
    assert B.recommend(rows)["nvme"]["config"] == "lirs-instance"
    # 6% slower is outside the 5% tolerance
    rows[0]["epoch_s"] = 3.0 * 1.06
    rec = B.recommend(rows)["nvme"]
    assert rec["config"] == "lirs-window-64Kx16" and rec["fastest_lirs"] == "lirs-group-64K"
    assert "less random" in rec["text"]
    # page beats group on a tie; smaller groups and larger windows are more random
    rows2 = [_row("d", "lirs-group-64K", 2.0, group_bytes=65536), _row("d", "lirs-page", 2.0)]
    assert B.recommend(rows2)["d"]["config"] == "lirs-page"
    rows3 = [_row("d", "lirs-group-256K", 2.0, group_bytes=262144), _row("d", "lirs-group-64K", 2.05,
                                                                         group_bytes=65536)]
    assert B.recommend(rows3)["d"]["config"] == "lirs-group-64K"
    rows4 = [_row("d", "lirs-window-64Kx4", 2.0, group_bytes=65536, window=4),
             _row("d", "lirs-window-64Kx16", 2.01, group_bytes=65536, window=16)]
    assert B.recommend(rows4)["d"]["config"] == "lirs-window-64Kx16"
    assert B.recommend(rows4, tolerance=0.0)["d"]["config"] == "lirs-window-64Kx4"


def test_recommend_on_hdd_like_results_picks_best_epoch_and_names_faster_peer():
    rows = [_row("hdd", "lirs-instance", 9000.0, extrapolated=True), _row("hdd", "lirs-page", 300.0),
            _row("hdd", "lirs-group-64K", 40.0, group_bytes=65536),
            _row("hdd", "lirs-group-512K", 14.0, group_bytes=524288),
            _row("hdd", "lirs-window-512Kx16", 14.5, group_bytes=524288, window=16),
            _row("hdd", "bmf", 12.0, kind="peer", pre_s=30.0), _row("hdd", "torch", 8000.0, kind="peer"),
            _row("hdd", "lirs-window-64Kx16", 1.0, status="error", group_bytes=65536, window=16),
            _row("nvme", "lirs-group-64K", 2.0, group_bytes=65536)]
    rec = B.recommend(rows, epochs=5)
    h = rec["hdd"]
    assert h["config"] == "lirs-window-512Kx16"  # within 5% of group-512K and more random
    assert h["fastest_lirs"] == "lirs-group-512K"
    assert h["fastest_overall"] == "bmf" and "bmf is faster here" in h["text"]
    assert "block order" in h["text"]
    assert h["fastest_total"] == "lirs-group-512K"  # 5 x 14 < 30 + 5 x 12
    assert rec["nvme"]["config"] == "lirs-group-64K"
    # a device where no lirs row ran has no recommendation
    assert B.recommend([_row("ssd", "bmf", 1.0, kind="peer"),
                        _row("ssd", "lirs-page", None, status="skipped")]) == {}


def test_recommend_ignores_reads_only_rows():
    rows = [_row("nvme", "lirs-group-64K", 3.0, group_bytes=65536),
            _row("nvme", "lirs-group-64K/reads", 0.5, group_bytes=65536, reads_only=True)]
    rec = B.recommend(rows)["nvme"]
    assert rec["config"] == "lirs-group-64K" and rec["fastest_overall"] == "lirs-group-64K"


def test_lirs_config_names():
    names = [c.name for c in B.lirs_configs(B.GRANULARITIES, [65536, 262144], 16, reads_only=["instance", "group"])]
    assert names == ["lirs-instance", "lirs-page", "lirs-group-64K", "lirs-group-256K", "lirs-window-64Kx16",
                     "lirs-window-256Kx16", "lirs-instance/reads", "lirs-group-64K/reads"]
    assert B.format_size(1 << 20) == "1M" and B.format_size(1000) == "1000"


def test_reads_only_runner_reads_the_plan_once(kdd_tiny):
    import lirs

    idx = lirs.open_index(kdd_tiny)
    task = {"batch_size": 200, "seed": 5, "engine": "auto"}
    for cfg in (B.Config("lirs", "instance", reads_only=True), B.Config("lirs", "group", 8192, reads_only=True),
                B.Config("lirs", "window", 8192, 4, reads_only=True)):
        r = B.LirsReadsRunner(cfg, idx, task)
        try:
            r.warm()
            assert r.reads == 0
            ids = np.concatenate([i for i, X, y in r.epoch(0)])
            plan = r._plan(0)
            assert np.array_equal(ids, plan.order())
            st = plan.stats()
            assert r.reads == st["reads"]
            # every planned extent, cut short where it runs past the end of the file
            size = os.path.getsize(kdd_tiny)
            want = sum(int(np.minimum(s.ext_nbytes, size - s.ext_offset).sum())
                       for b in plan.batches() for s in b.new_steps)
            assert r.bytes_read == want and want <= st["bytes_read"]
            assert r.payload == idx.payload_bytes
        finally:
            r.close()


def test_lirs_runner_counts_one_measured_epoch_alone(kdd_tiny):
    """The warm-up leaves its epoch after one batch while the reads it had started still run: they
    completed after the counters were reset and counted in the measured epoch (payload and reads
    above one epoch's). Reads made slow here keep some in flight at the warm-up's end."""
    import lirs

    idx = lirs.open_index(kdd_tiny)
    task = {"batch_size": 100, "seed": 5, "engine": "auto", "prefetch": 4}
    for cfg in (B.Config("lirs", "instance"), B.Config("lirs", "group", 8192)):
        r = B.LirsRunner(cfg, idx, task)
        try:
            eng = r.loader.engine
            fast = eng.read

            def slow(*a, _read=fast):
                time.sleep(0.05)
                return _read(*a)
            eng.read = slow
            r.warm()
            assert r.payload == 0
            n = sum(len(ids) for ids, X, y in r.epoch(0))
            assert n == idx.n
            assert r.payload == idx.payload_bytes, cfg.name
        finally:
            r.close()


def test_reads_only_runner_keeps_two_calls_in_flight(kdd_tiny):
    import threading

    import lirs

    idx = lirs.open_index(kdd_tiny)
    r = B.LirsReadsRunner(B.Config("lirs", "instance", reads_only=True), idx,
                           {"batch_size": 50, "seed": 5, "engine": "auto"})
    r.CALL_BYTES = 1  # a call per batch (an instance batch is a read step of its own)
    threads, read = set(), r._read
    def slow_read(steps):  # a call still reading when the next is handed over
        threads.add(threading.get_ident())
        time.sleep(0.02)
        return read(steps)

    r._read = slow_read
    try:
        ids = np.concatenate([i for i, X, y in r.epoch(0)])
        plan = r._plan(0)
        assert np.array_equal(ids, plan.order()) and r.reads == plan.stats()["reads"]
        assert len(threads) == 2 and threading.get_ident() not in threads
    finally:
        r.close()


def test_goals_from_rows():
    rows = [_row("nvme", "lirs-instance", 10.0, ratio=0.93),
            _row("nvme", "lirs-group-64K", 3.0, group_bytes=65536, ratio=0.8, records_per_s=2e6),
            _row("nvme", "lirs-window-64Kx16", 3.5, group_bytes=65536, window=16, ratio=0.7, records_per_s=1.5e6),
            _row("nvme", "torch", 300.0, kind="peer", records_per_s=1e5)]
    g = B.goals(rows)["nvme"]
    assert g["instance_vs_fio_iops"] == {"value": 0.93, "goal": 0.9, "met": True, "rows": ["lirs-instance"]}
    assert g["group_vs_fio_bandwidth"]["met"] is False
    assert g["group_window_vs_torch"]["value"] == pytest.approx(20.0)
    assert g["group_window_vs_torch"]["rows"] == ["lirs-group-64K", "torch"]


def test_envelope_group_bytes():
    def fio(iops, bw):
        return {"available": True, "jobs": {"rand4k_qd128": {"iops": iops}, "seq1m_qd16": {"bw_bytes": bw}}}

    assert B.envelope_group_bytes(fio(135_000, 1.25e9)) == 65536
    assert B.envelope_group_bytes(fio(600, 160e6)) == 512 << 10  # 600 x 256 KiB < 160 MB/s
    assert B.envelope_group_bytes(fio(611, 160e6)) == 256 << 10
    assert B.envelope_group_bytes({"available": False}) is None
    assert B.envelope_group_bytes(None) is None


def test_bounds_and_ratios():
    fio = {"available": True, "jobs": {"rand4k_qd32": {"iops": 50_000.0, "bw_bytes": 2.048e8},
                                       "rand4k_qd128": {"iops": 100_000.0, "bw_bytes": 4.096e8},
                                       "rand64k_qd32": {"iops": 20_000.0, "bw_bytes": 1.31e9},
                                       "seq1m_qd16": {"iops": 1200.0, "bw_bytes": 1.25e9},
                                       "rand4k_qd1": {"iops": 14_000.0, "bw_bytes": 5.7e7}}}
    r = _row("nvme", "lirs-instance", 1.0, engine_depth=128, reads_per_s=90_000.0, mb_per_s=368.0,
             records_per_s=80_000.0)
    B.add_ratios(r, fio)
    assert r["bound"]["fio_job"] == "rand4k_qd128" and r["ratio"] == pytest.approx(0.9)
    r = _row("nvme", "lirs-page", 1.0, engine_depth=32, reads_per_s=25_000.0, mb_per_s=1.0)
    B.add_ratios(r, fio)
    assert r["bound"]["fio_job"] == "rand4k_qd32" and r["ratio"] == pytest.approx(0.5)
    r = _row("nvme", "lirs-group-64K", 1.0, group_bytes=65536, mean_read_bytes=70_000.0, mb_per_s=655.0,
             reads_per_s=9000.0, records_per_s=1e6, payload_per_s=6.2e8)
    B.add_ratios(r, fio)
    assert r["bound"]["metric"] == "bw" and r["bound"]["fio_job"] == "rand64k_qd32"
    assert r["ratio"] == pytest.approx(0.5) and r["ratios"]["records_per_s"] == pytest.approx(6.2e8 / 1.31e9)
    r = _row("hdd", "lirs-window-512Kx16", 1.0, group_bytes=524288, mean_read_bytes=6e5, mb_per_s=625.0)
    B.add_ratios(r, fio)
    assert r["bound"]["fio_job"] == "seq1m_qd16" and r["ratio"] == pytest.approx(0.5)
    r = _row("nvme", "memmap", 1.0, kind="peer", mean_read_bytes=1e6, mb_per_s=125.0)
    B.add_ratios(r, fio)
    assert r["bound"]["fio_job"] == "seq1m_qd16"  # readahead made its reads large
    r = _row("nvme", "inmemory", 1.0, kind="peer")
    B.add_ratios(r, fio)
    assert r["bound"] is None and r["ratio"] is None
    r = _row("nvme", "lirs-instance", 1.0, reads_per_s=1.0)
    B.add_ratios(r, {"available": False})
    assert r["ratio"] is None and r["bound"]["fio_iops"] is None


# ------------------------------------------------------------------------------ measuring


class _SlowRunner:
    """Delivers ``n`` records in batches of 10, sleeping between batches (no I/O)."""

    buffered = False
    sample_fraction = 1.0

    def __init__(self, n, pause):
        self.n, self.pause = n, pause
        self.reads = 0
        self.bytes_read = 0
        self.payload = 0

    def epoch(self, e):
        for s in range(0, self.n, 10):
            time.sleep(self.pause)
            ids = np.arange(s, min(self.n, s + 10))
            self.reads += 1
            self.bytes_read += 4096
            self.payload += 100 * len(ids)
            yield ids, None, None


def test_measure_extrapolates_an_epoch_cut_by_the_budget():
    r = _SlowRunner(1000, 0.005)
    m = B.measure_task(r, {"budget_s": 0.05, "epochs": 3}, 1000, 1.0, None)
    assert m["extrapolated"] is True and m["epochs_measured"] == 0
    part = m["partial_epoch"]
    assert 0 < part["records"] < 1000 and part["records"] == m["records"] and part["batches"] >= 3
    # time to the first batch, then the steady rate of the later half of the sample
    assert part["first_batch_s"] <= part["steady_from_s"] < part["seconds"]
    assert 10 <= part["steady_from_records"] < part["records"]
    assert part["seconds"] - part["first_batch_s"] >= 0.05 / 2
    rate = (part["records"] - part["steady_from_records"]) / (part["seconds"] - part["steady_from_s"])
    assert m["epoch_s"] == pytest.approx(part["first_batch_s"] + (1000 - 10) / rate)
    assert "first batch" in m["extrapolation"]
    assert m["io_source"] == "loader" and m["reads"] == m["records"] // 10
    assert m["amplification"] == pytest.approx(4096 / 1000)
    # too few batches for a rate: the plain average
    m = B.measure_task(_SlowRunner(1000, 0.03), {"budget_s": 0.005, "epochs": 1}, 1000, 1.0, None)
    part = m["partial_epoch"]
    assert part["batches"] == 1
    assert m["epoch_s"] == pytest.approx(part["seconds"] * 1000 / part["records"])


class _BurstRunner(_SlowRunner):
    """A loader that prefetched: the first batch after ``first`` seconds, the next ``burst`` with it
    (they were read while the first was), then one every ``pause`` seconds."""

    def __init__(self, n, first, burst, pause):
        super().__init__(n, pause)
        self.first, self.burst = first, burst

    def epoch(self, e):
        for k, s in enumerate(range(0, self.n, 10)):
            time.sleep(self.first if k == 0 else 0.0 if k <= self.burst else self.pause)
            yield np.arange(s, min(self.n, s + 10)), None, None


def test_measure_does_not_take_the_prefetched_burst_for_the_rate():
    # the first batch arrives past the budget (a throttled device) and four prefetched ones with
    # it: a rate over those would make the 100-batch epoch (at least 0.06 + 95 x 0.01 s) look
    # like 0.06 s
    m = B.measure_task(_BurstRunner(1000, 0.06, 4, 0.01), {"budget_s": 0.05, "epochs": 1}, 1000, 1.0, None)
    part = m["partial_epoch"]
    assert m["extrapolated"] is True and part["batches"] > 5
    assert part["steady_from_records"] >= 50  # the burst is left out of the rate
    assert m["epoch_s"] > 0.06 + 95 * 0.01 * 0.5


def test_measure_full_epochs_are_not_extrapolated():
    r = _SlowRunner(50, 0.0)
    m = B.measure_task(r, {"budget_s": 30.0, "epochs": 2}, 50, 1.0, None)
    assert m["extrapolated"] is False and m["epochs_measured"] == 2 and m["records"] == 100
    assert m["epoch_s"] == pytest.approx(sum(m["epoch_times_s"]) / 2)
    # a sampled load (a fraction of the data) is scaled up and marked so
    m = B.measure_task(_SlowRunner(50, 0.0), {"budget_s": 30.0, "epochs": 1}, 200, 0.25, None)
    assert m["extrapolated"] is True and m["epoch_s"] == pytest.approx(m["epoch_times_s"][0] / 0.25)


# ------------------------------------------------------------------------------ peers on tiny data


@pytest.fixture(scope="module")
def kdd_tiny(tmp_path_factory):
    import lirs
    from lirs.eval.gen import generate

    d = tmp_path_factory.mktemp("bench-kdd")
    p = str(d / "kdd.svm")
    generate("kdd", p, records=3000, seed=3, progress=False)
    lirs.build_index(p, progress=False)
    return p


@pytest.fixture(scope="module")
def higgs_tiny(tmp_path_factory):
    import lirs
    from lirs.eval.gen import generate

    d = tmp_path_factory.mktemp("bench-higgs")
    p = str(d / "higgs.npy")
    generate("higgs", p, records=5000, seed=4, progress=False)
    lirs.build_index(p, progress=False)
    return p


def _epoch_rows(runner, e):
    ids, Xs, ys = [], [], []
    for i, X, y in runner.epoch(e):
        ids.append(np.asarray(i))
        Xs.append(X)
        ys.append(y)
    return np.concatenate(ids), Xs, ys


@pytest.mark.parametrize("peer", ["inmemory", "torch", "shuffle_buffer", "bmf"])
def test_sparse_peers_deliver_every_record_once_with_its_data(kdd_tiny, tmp_path, peer):
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    import lirs
    from lirs.eval.peers import make_runner, skip_reason

    idx = lirs.open_index(kdd_tiny)
    why = skip_reason(peer, idx, workdir=str(tmp_path))
    if why:
        pytest.skip(why)
    X_all, y_all = load_svmlight_file(kdd_tiny)
    r = make_runner(peer, idx, batch_size=256, seed=1, workdir=str(tmp_path), buffer_records=500, bmf_blocks=7)
    try:
        r.warm()
        r.prepare()
        assert r.sample_fraction == 1.0
        ids, Xs, ys = _epoch_rows(r, 0)
        assert np.array_equal(np.sort(ids), np.arange(idx.n))
        assert not np.array_equal(ids, np.arange(idx.n))  # shuffled
        X = sp.vstack(Xs, format="csr")
        assert X.shape[0] == idx.n
        assert abs(X - X_all[ids]).max() < 1e-6
        assert np.array_equal(np.concatenate(ys), y_all[ids])
        ids1, _, _ = _epoch_rows(r, 1)
        assert not np.array_equal(ids1, ids)  # a fresh order every epoch
        if peer != "inmemory":
            assert r.payload == 2 * idx.payload_bytes
    finally:
        r.close()
    assert os.listdir(tmp_path) == []  # copies of the data are deleted


@pytest.mark.parametrize("peer", ["memmap", "inmemory", "torch", "shuffle_buffer", "bmf"])
def test_dense_peers_deliver_every_record_once_with_its_data(higgs_tiny, tmp_path, peer):
    import lirs
    from lirs.eval.gen import labels_path
    from lirs.eval.peers import make_runner, skip_reason

    idx = lirs.open_index(higgs_tiny)
    why = skip_reason(peer, idx, workdir=str(tmp_path))
    if why:
        pytest.skip(why)
    X_all = np.load(higgs_tiny)
    y_all = np.load(labels_path(higgs_tiny))
    r = make_runner(peer, idx, batch_size=300, seed=2, workdir=str(tmp_path), buffer_records=1000, bmf_blocks=5)
    ids, Xs, ys = _one_epoch(r)
    assert np.array_equal(np.sort(ids), np.arange(idx.n))
    assert np.array_equal(np.concatenate(Xs), X_all[ids])
    assert np.array_equal(np.concatenate(ys), y_all[ids])


def _one_epoch(runner):
    """``_epoch_rows`` of epoch 0 of a runner made ready (warm, prepare) and closed after."""
    try:
        runner.warm()
        runner.prepare()
        return _epoch_rows(runner, 0)
    finally:
        runner.close()


@pytest.mark.parametrize("fmt", ["lines", "tfrecord"])
@pytest.mark.parametrize("peer", ["torch", "shuffle_buffer", "bmf", "inmemory"])
def test_bytes_peers_deliver_every_record_once_with_its_data(tmp_path, peer, fmt):
    """Lines and TFRecord records decode to a list of bytes: BMF's deal took them by fancy
    indexing (an error row where `lirs bench` ran it on a lines file); the peers served TFRecord
    records with their framing, and the in-memory peer failed on them (it has no loader: skipped)."""
    import lirs
    from lirs.eval.peers import make_runner, skip_reason
    from lirs.tfrecord import encode

    rng = np.random.default_rng(5)
    lines = [b"r%d " % i + b"x" * int(rng.integers(0, 90)) for i in range(2000)]
    data = tmp_path / "d" / ("l.txt" if fmt == "lines" else "l.tfrecord")
    data.parent.mkdir()
    data.write_bytes(b"".join(x + b"\n" for x in lines) if fmt == "lines" else encode(lines).tobytes())
    idx = lirs.build_index(str(data), progress=False)
    work = tmp_path / "work"
    why = skip_reason(peer, idx, workdir=str(work))
    if peer == "inmemory":
        assert why == f"no in-memory loader for {fmt} records (bytes)"
        return
    if why:
        pytest.skip(why)
    r = make_runner(peer, idx, batch_size=128, seed=3, workdir=str(work), buffer_records=300, bmf_blocks=6)
    ids, Xs, _ = _one_epoch(r)
    assert np.array_equal(np.sort(ids), np.arange(idx.n))
    assert [x for X in Xs for x in X] == [lines[i] for i in ids.tolist()]


def test_external_peer_on_dense_records_cleans_up(higgs_tiny, tmp_path):
    import lirs
    from lirs.eval.peers import make_runner, skip_reason

    idx = lirs.open_index(higgs_tiny)
    why = skip_reason("external", idx, workdir=str(tmp_path))
    if why:
        pytest.skip(why)
    X_all = np.load(higgs_tiny)
    r = make_runner("external", idx, batch_size=300, seed=1, workdir=str(tmp_path))
    try:
        r.prepare()
        ids, Xs, ys = _epoch_rows(r, 0)
        X = np.concatenate(Xs)
        assert X.shape == X_all.shape and not np.array_equal(X, X_all)
        assert np.array_equal(np.sort(X[:, 0]), np.sort(X_all[:, 0]))
    finally:
        r.close()
    assert [f for f in os.listdir(tmp_path) if not f.startswith(".")] == []


def test_external_peer_reads_a_shuffled_copy(kdd_tiny, tmp_path):
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    import lirs
    from lirs.eval.peers import make_runner, skip_reason

    idx = lirs.open_index(kdd_tiny)
    why = skip_reason("external", idx, workdir=str(tmp_path))
    if why:
        pytest.skip(why)
    X_all, y_all = load_svmlight_file(kdd_tiny)
    r = make_runner("external", idx, batch_size=256, seed=1, workdir=str(tmp_path))
    try:
        r.prepare()
        assert "external shuffle" in r.pre_what
        ids, Xs, ys = _epoch_rows(r, 0)
        X = sp.vstack(Xs, format="csr")
        assert X.shape[0] == idx.n and len(ids) == idx.n
        # the same records, another order: equal sums, different first rows
        assert X.sum() == pytest.approx(X_all.sum()) and np.concatenate(ys).sum() == y_all.sum()
        assert abs(X[:50] - X_all[:50]).max() > 0
    finally:
        r.close()
    assert [f for f in os.listdir(tmp_path) if not f.startswith(".")] == []


def test_peer_skip_reasons(kdd_tiny, higgs_tiny):
    import lirs
    from lirs.errors import UsageError
    from lirs.eval.peers import skip_reason

    kdd = lirs.open_index(kdd_tiny)
    assert "fixed-size" in skip_reason("memmap", kdd)
    assert "does not fit" in skip_reason("inmemory", kdd, memory=1000)
    assert skip_reason("memmap", lirs.open_index(higgs_tiny)) is None
    with pytest.raises(UsageError):
        skip_reason("nope", kdd)


# ------------------------------------------------------------------------------ end to end + schema


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "lirs.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def cli_run(kdd_tiny, tmp_path_factory):
    """One tiny `lirs bench` run (fio too when installed), shared by the schema tests."""
    out = tmp_path_factory.mktemp("bench-out")
    js, png = str(out / "r.json"), str(out / "r.png")
    args = ["bench", kdd_tiny, "--smoke", "--granularity", "instance,group", "--peers", "shuffle_buffer",
            "--reads-only", "group",
            "--batch-size", "256", "--json", js, "--plot", png, "--auto", "--workdir", str(out / "work")]
    if F.fio_path() is None:
        args.append("--no-fio")
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    with open(js) as f:
        return r, json.load(f), png


def test_cli_end_to_end(cli_run, kdd_tiny):
    r, res, png = cli_run
    assert B.validate(res) == []
    names = [row["name"] for row in res["rows"]]
    assert names == ["lirs-instance", "lirs-group-64K", "lirs-group-64K/reads", "shuffle_buffer"]
    for row in res["rows"]:
        assert row["status"] == "ok", row
        assert row["records"] > 0 and row["epoch_s"] > 0 and row["cpu_s"] >= 0 and row["peak_rss_bytes"] > 0
        assert row["io_source"] in ("cgroup", "loader")
        if row["name"].startswith("lirs-"):  # the Loader's engine, whose depth picks the fio job it is bound by
            assert row["engine"] in ("uring", "threads") and row["engine_depth"] >= 1, row
        if not row["extrapolated"]:
            assert row["records"] == res["data"]["records"] * row["epochs_measured"]
    inst = res["rows"][0]
    assert inst["amplification"] > 1.5  # one 4 KiB page per ~350-byte record
    assert res["recommendation"]["nvme"]["config"] in names[:2]
    if F.fio_path() is not None:
        assert res["fio"]["nvme"]["available"] and set(res["fio"]["nvme"]["jobs"]) == set(F.JOBS)
        assert inst["bound"]["fio_job"].startswith("rand4k") and inst["ratio"] > 0
    assert "lirs-instance" in r.stdout and "recommendation" in r.stdout
    assert os.path.getsize(png) > 1000
    assert os.path.exists(kdd_tiny + ".lirs" + B.RECOMMENDATION_SUFFIX)
    # nothing of the run is left in the blkio hierarchy
    if os.path.isdir(E.BLKIO_ROOT):
        assert [n for n in os.listdir(E.BLKIO_ROOT) if n.startswith(E.PREFIX)
                and not os.path.exists(f"/proc/{n.split('-')[2]}")] == []


def test_json_schema_catches_broken_results(cli_run):
    _, res, _ = cli_run
    assert B.validate(res) == []
    bad = copy.deepcopy(res)
    del bad["rows"][0]["epoch_s"]
    assert any("missing 'epoch_s'" in p for p in B.validate(bad))
    bad = copy.deepcopy(res)
    bad["version"] = 99
    assert any("version" in p for p in B.validate(bad))
    bad = copy.deepcopy(res)
    bad["rows"][0]["status"] = "fine"
    assert any("status" in p for p in B.validate(bad))
    bad = copy.deepcopy(res)
    bad["rows"][0]["records_per_s"] = "fast"
    assert any("records_per_s" in p for p in B.validate(bad))
    bad = copy.deepcopy(res)
    bad["recommendation"]["nvme"]["config"] = "lirs-nothing"
    assert any("recommendation" in p for p in B.validate(bad))
    bad = copy.deepcopy(res)
    del bad["data"]
    assert any("missing 'data'" in p for p in B.validate(bad))
    # the mark's key, where a row shows the mark
    assert ("~ = extrapolated" in B.format_table(res)) == any(r["extrapolated"] for r in res["rows"])


def test_run_bench_removes_its_group_when_a_step_fails(kdd_tiny, fake_root, monkeypatch, tmp_path):
    def boom(*a, **k):
        raise RuntimeError("fio exploded")

    monkeypatch.setattr(F, "run_envelope", boom)
    monkeypatch.setattr(E, "disk_of", lambda path, sys_root=E.SYS_ROOT: (254, 0, "vda"))
    with pytest.raises(RuntimeError, match="fio exploded"):
        B.run_bench(kdd_tiny, devices=["nvme", "hdd"], granularities=["group"], peers="none", budget_s=1,
                    cgroup_root=fake_root, workdir=str(tmp_path), progress=False)
    assert _groups(fake_root) == []
    assert [f for f in os.listdir(tmp_path) if f.startswith(".lirs-bench")] == []


def test_run_bench_with_a_fake_tree_and_without_cgroups(kdd_tiny, fake_root, monkeypatch, tmp_path):
    monkeypatch.setattr(E, "disk_of", lambda path, sys_root=E.SYS_ROOT: (254, 0, "vda"))
    res = B.run_bench(kdd_tiny, devices=["hdd"], granularities=["page"], peers="none", budget_s=1, fio=False,
                      cgroup_root=fake_root, workdir=str(tmp_path), progress=False)
    assert B.validate(res) == []
    row = res["rows"][0]
    assert row["status"] == "ok" and row["io_source"] == "loader"  # a fake tree has no device counters
    assert _groups(fake_root) == []
    # the worker put itself in the (fake) group, and the teardown moved it back to the root
    assert open(os.path.join(fake_root, "cgroup.procs")).read().split()
    # without cgroups the throttled envelopes are skipped, the disk as it is still runs
    res = B.run_bench(kdd_tiny, devices=["nvme", "ssd"], granularities=["group"], peers="none", budget_s=1,
                      fio=False, cgroup_root=str(tmp_path / "none"), workdir=str(tmp_path), progress=False)
    st = {r["device"]: r for r in res["rows"]}
    assert st["nvme"]["status"] == "ok" and st["ssd"]["status"] == "skipped"
    assert "no cgroup-v1 blkio" in st["ssd"]["note"]
    assert list(res["recommendation"]) == ["nvme"] and B.validate(res) == []


def test_data_in_memory_is_named_by_its_filesystem_and_its_reads_by_the_engine(kdd_tiny, shm_dir, tmp_path):
    """On tmpfs the Loader reads through the page cache: every lirs row still said "O_DIRECT", and the
    disk as it is was headed "nvme" (there is no disk). The rows name the engine's reads as opened,
    the heading the filesystem."""
    import shutil

    from lirs.mounts import in_memory

    if not in_memory(shm_dir):
        pytest.skip(f"{shm_dir} is not held in memory")
    p = os.path.join(shm_dir, "k.svm")
    shutil.copy(kdd_tiny, p)
    res = B.run_bench(p, granularities=["instance"], reads_only=["instance"], peers="none", budget_s=1, fio=False,
                      workdir=str(tmp_path), progress=False)
    assert B.validate(res) == []
    assert [r["status"] for r in res["rows"]] == ["ok", "ok"]
    for r in res["rows"]:
        assert "O_DIRECT" not in r["what"] and f"through the page cache, {r['engine']} engine" in r["what"], r
    assert res["disk"]["transport"] == "tmpfs" and B.device_label(res, "nvme") == "tmpfs"
    head = B.format_table(res).splitlines()[0]
    assert head.startswith("tmpfs (tmpfs: no disk, the files are held in memory, as it is; envelope nvme)"), head


def test_usage_errors(kdd_tiny):
    from lirs.errors import UsageError

    for kw in ({"devices": ["floppy"]}, {"granularities": ["huge"]}, {"peers": ["tape"]},
               {"group_bytes": [5000]}, {"epochs": 0}, {"budget_s": 0},
               {"granularities": [], "peers": "none"}):
        with pytest.raises(UsageError):
            B.run_bench(kdd_tiny, fio=False, **kw)
    r = _cli("bench", kdd_tiny, "--devices", "floppy", "--no-fio")
    assert r.returncode == 2 and "floppy" in r.stderr


def test_cli_arguments_are_checked_before_the_benchmark_runs(kdd_tiny, tmp_path, capsys):
    """Each is refused at once (exit 2, one line), not after minutes of measuring or as a row of
    errors with exit 0; --json or --plot over the dataset's own files replaced the data or index."""
    import shutil

    from lirs.cli import main

    import lirs

    p = str(tmp_path / "k.svm")
    shutil.copy(kdd_tiny, p)
    lirs.build_index(p, progress=False)
    data, side = open(p, "rb").read(), open(p + ".lirs", "rb").read()
    os.link(p, tmp_path / "same.json")  # the data under another name
    for extra, said in ((["--json", p], "is the data of the input"), (["--json", str(tmp_path / "same.json")], "is the data"), (["--json", p + ".lirs"], "is the index"),
                        (["--json", p + ".lirs.bench.json"], "is the bench recommendation"),
                        (["--plot", p], "is the data"), (["--json", str(tmp_path / "no" / "r.json")], "does not exist"),
                        (["--plot", str(tmp_path / "p")], "name it OUT.png"), (["--budget", "nan"], "--budget"),
                        (["--fio-runtime", "inf"], "--fio-runtime"), (["--prefetch", "0"], "--prefetch"),
                        (["--engine", "floppy"], "--engine floppy"), (["--seed", "-1"], "--seed must be >= 0")):
        assert main(["bench", p, "--no-fio", "--smoke", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, (extra, err)
    assert open(p, "rb").read() == data and open(p + ".lirs", "rb").read() == side
    assert main(["quality", p, "--epochs", "2", "--json", p]) == 2 and "is the data" in capsys.readouterr().err
    assert open(p, "rb").read() == data


def test_cli_refuses_results_and_plot_in_one_file_before_the_benchmark(kdd_tiny, tmp_path, capsys):
    """`--json X.png --plot X.png`: the results were written, then replaced by the plot, both announced.
    Refused at once, as `lirs quality` refuses it (one check for both), under two names of one file too."""
    from lirs.cli import main

    x = str(tmp_path / "x.png")
    for cmd in (["bench", kdd_tiny, "--no-fio", "--smoke"], ["quality", kdd_tiny, "--epochs", "2"]):
        assert main([*cmd, "--json", x, "--plot", x]) == 2, cmd
        err = capsys.readouterr().err
        assert f"--json and --plot both name {x}: the plot would replace the results" in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []
    (tmp_path / "a.png").write_bytes(b"old")
    os.link(tmp_path / "a.png", tmp_path / "b.png")
    assert main(["bench", kdd_tiny, "--no-fio", "--smoke", "--json", str(tmp_path / "a.png"),
                 "--plot", str(tmp_path / "b.png")]) == 2
    assert "the plot would replace the results" in capsys.readouterr().err


def test_cli_refuses_auto_with_no_granularity_before_the_benchmark(kdd_tiny, capsys):
    """`--granularity none --auto` ran every peer, then failed to save ("no lirs configuration ran"):
    known from the arguments, refused before any work."""
    from lirs.cli import main

    assert main(["bench", kdd_tiny, "--no-fio", "--smoke", "--granularity", "none", "--reads-only", "instance",
                 "--peers", "inmemory", "--auto"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--auto saves the lirs granularity the run recommends, and --granularity none" in err



def _small_svm(d) -> str:
    """An indexed LIBSVM file of 3,000 short records (~60 KB) in directory ``d``."""
    import lirs

    p = os.path.join(d, "a.svm")
    rng = np.random.default_rng(0)
    with open(p, "w") as f:
        f.writelines(f"{rng.choice([-1, 1])} {rng.integers(1, 9)}:{rng.random():.4f} {rng.integers(10, 99)}:1\n"
                     for _ in range(3000))
    lirs.build_index(p, progress=False)
    return p


_AUTO_RUN = ["--auto", "--smoke", "--no-fio", "--peers", "none", "--granularity", "group", "--group-bytes", "64K"]


def test_cli_refuses_auto_beside_a_read_only_index_before_the_benchmark(tmp_path, capsys, monkeypatch):
    """--auto where the index lies on a read-only mount ran the whole benchmark, then failed naming a
    temporary file, and never printed the table: refused before any measuring, naming where the
    recommendation goes and the way out."""
    from lirs.cli import main

    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir(), ro.mkdir()
    _small_svm(str(rw))
    if subprocess.run(["mount", "--bind", str(rw), str(ro)], capture_output=True).returncode:
        pytest.skip("bind mounts need root")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode:
            pytest.skip("no read-only remount here")
        monkeypatch.setattr(B, "run_bench", lambda *a, **k: pytest.fail("measured before refusing"))
        p = str(ro / "a.svm")
        assert main(["bench", p, *_AUTO_RUN, "--workdir", str(tmp_path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and f"--auto saves the recommendation beside the index, as {p}.lirs.bench.json, and " \
                              f"{ro} is not writable: index the data where you can write (`lirs index {p} -o" in err
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)  # lazily: a traceback may hold a file open


def test_cli_auto_that_cannot_save_still_prints_the_table(full_fs, tmp_path, capsys):
    """A recommendation that cannot be written once the benchmark ran (a full disk) said only the
    error: the minutes of results were lost. The table is printed, then "not saved:" naming the file."""
    from lirs.cli import main

    p = _small_svm(str(full_fs))
    fill_fs(full_fs)
    assert main(["bench", p, *_AUTO_RUN, "--workdir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "lirs-group-64K" in out
    assert f"not saved: {p}.lirs.bench.json: No space left on device" in err, err
    assert sorted(os.listdir(full_fs)) == ["a.svm", "a.svm.lirs", "fill"]

def test_a_plot_save_stopped_midway_leaves_the_previous_plot_whole(tmp_path, plot_stopped_midway):
    """--plot was saved straight under its name: a save stopped midway (Ctrl-C, a full disk) left a
    truncated PNG in place of the last good one. It is saved as `lirs quality` saves its plots."""
    png = plot_stopped_midway("bench.png")
    res = {"settings": {"devices": ["nvme"]}, "envelopes": {"nvme": {"read_iops": None, "read_bps": None}},
           "rows": [{"device": "nvme", "status": "ok", "kind": "lirs", "name": "lirs-instance", "epoch_s": 1.0,
                     "extrapolated": False, "reads_only": False}],
           "recommendation": {}, "data": {"path": "/x/t.svm", "file_bytes": 10, "records": 3}}
    with pytest.raises(KeyboardInterrupt):
        B.plot(res, str(png))
    assert png.read_bytes() == b"the previous plot" and os.listdir(tmp_path) == ["bench.png"]


def test_cli_smoke_keeps_a_budget_given():
    """--smoke sets the budget and fio's runtime only where they are not given (it replaced a
    --budget 60 with 3 s)."""
    import argparse

    from lirs.commands import bench as cmd

    parser = argparse.ArgumentParser()
    cmd.add_parser(parser.add_subparsers())

    def times(*a):
        return cmd.times(parser.parse_args(["bench", "d.svm", *a]))

    assert times() == (cmd.DEFAULTS["budget_s"], cmd.DEFAULTS["fio_runtime_s"])
    assert times("--smoke") == (cmd.SMOKE["budget_s"], cmd.SMOKE["fio_runtime_s"])
    assert times("--smoke", "--budget", "60") == (60.0, cmd.SMOKE["fio_runtime_s"])
    assert times("--fio-runtime", "2", "--smoke") == (cmd.SMOKE["budget_s"], 2.0)
    assert times("--budget", "7") == (7.0, cmd.DEFAULTS["fio_runtime_s"])


def test_auto_saves_the_disk_as_it_is(kdd_tiny, tmp_path):
    """With several envelopes, --auto saves the nvme one (the disk a Loader reads), whatever the
    order of --devices; without it, the first device that has a choice."""
    import shutil

    import lirs

    p = str(tmp_path / "k.svm")
    shutil.copy(kdd_tiny, p)
    idx = lirs.build_index(p, progress=False)
    res = _fake_result(idx)
    hdd = dict(res["recommendation"]["nvme"], granularity="group", config="lirs-group-64K")
    res["recommendation"]["hdd"] = hdd
    res["settings"]["devices"] = ["hdd", "nvme"]
    assert B.saved_device(res) == "nvme"
    assert json.load(open(B.save_recommendation(res, idx)))["granularity"] == "window"
    del res["recommendation"]["nvme"]
    assert B.saved_device(res) == "hdd"
    assert json.load(open(B.save_recommendation(res, idx)))["granularity"] == "group"


# ------------------------------------------------------------------------------ Loader(granularity="auto")


def _fake_result(idx, **rec):
    base = {"config": "lirs-window-8Kx4", "granularity": "window", "group_bytes": 8192, "window": 4,
            "epoch_s": 1.0, "extrapolated": False}
    base.update(rec)
    return {"settings": {"devices": ["nvme"], "batch_size": 128}, "recommendation": {"nvme": base},
            "date": "now", "command": "test"}


def test_loader_auto_without_recommendation_uses_the_default(kdd_tiny, tmp_path, caplog):
    import shutil

    import lirs

    p = str(tmp_path / "k.svm")
    shutil.copy(kdd_tiny, p)
    lirs.build_index(p, progress=False)
    with caplog.at_level(logging.INFO, logger="lirs.recommendation"):
        with lirs.Loader(p, 128, granularity="auto", group_bytes=16384, window=3) as ld:
            assert (ld.granularity, ld.group_bytes, ld.window) == ("window", 16384, 3)
            assert ld.plan(0).granularity == "window"
    assert "no lirs bench recommendation" in caplog.text


def test_loader_auto_uses_the_saved_recommendation(kdd_tiny, tmp_path, caplog, capsys):
    import shutil

    import lirs

    p = str(tmp_path / "k.svm")
    shutil.copy(kdd_tiny, p)
    idx = lirs.build_index(p, progress=False)
    path = B.save_recommendation(_fake_result(idx), idx)
    assert path == p + ".lirs.bench.json"
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask(), "as open() makes it (mkstemp's 0600: others could not read it)"
    with lirs.Loader(p, 128, granularity="auto") as ld:
        assert (ld.granularity, ld.group_bytes, ld.window) == ("window", 8192, 4)
        ids = np.concatenate([b.ids for b in ld.epoch(0)])
    assert np.array_equal(np.sort(ids), np.arange(idx.n))
    from lirs.cli import main  # `lirs epoch --granularity auto` runs what the Loader does (its --window: not given)

    assert main(["epoch", p, "--granularity", "auto", "--batch-size", "128", "--max-batches", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["granularity"], got["group_bytes"], got["window_groups"]) == ("window", 8192, 4)
    # a recommendation measured on other data is ignored, with a warning
    doc = json.load(open(path))
    doc["n"] += 1
    with open(path, "w") as f:
        json.dump(doc, f)
    with caplog.at_level(logging.WARNING, logger="lirs.recommendation"):
        with lirs.Loader(p, 128, granularity="auto", window=5) as ld:
            assert (ld.granularity, ld.window) == ("window", 5)  # the default, with the window asked for
    assert "other data" in caplog.text
    # valid JSON of the wrong shape (a list, a size that is not one, no config) is ignored too
    good = dict(doc, n=doc["n"] - 1)
    for bad in ([], 5, dict(good, group_bytes="abc"), dict(good, window=[1]), dict(good, window=-1),
                dict(good, window="garbage"), dict(good, group_bytes=1000), dict(good, group_bytes=2**64)):
        with open(path, "w") as f:
            json.dump(bad, f)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lirs.recommendation"):
            with lirs.Loader(p, 128, granularity="auto", window=5) as ld:
                assert (ld.granularity, ld.window) == ("window", 5), bad
        assert "ignoring" in caplog.text, bad
    with open(path, "w") as f:  # the config's name is only said in the log
        json.dump({k: v for k, v in good.items() if k != "config"}, f)
    with lirs.Loader(p, 128, granularity="auto") as ld:
        assert (ld.granularity, ld.group_bytes, ld.window) == ("window", 8192, 4)


def test_loader_auto_takes_a_given_group_bytes_over_the_saved_one(kdd_tiny, tmp_path, caplog, capsys):
    """A given group_bytes (Loader's, `lirs epoch --group-bytes`, the torch dataset's) was replaced by
    the one `lirs bench --auto` saved, while a given window won: the given one wins, and the log says
    which was used; not given, the saved one; without a recommendation, 64 KiB."""
    import shutil

    import lirs
    from lirs.cli import main

    p = str(tmp_path / "k.svm")
    shutil.copy(kdd_tiny, p)
    idx = lirs.build_index(p, progress=False)
    with lirs.Loader(p, 128, granularity="auto") as ld:
        assert ld.group_bytes == 65536, "no recommendation, none given: the default"
    B.save_recommendation(_fake_result(idx, config="lirs-group-256K", granularity="group", group_bytes=262144,
                                       window=None), idx)
    with caplog.at_level(logging.INFO, logger="lirs.recommendation"):
        with lirs.Loader(p, 128, granularity="auto", group_bytes="128K") as ld:
            assert (ld.granularity, ld.group_bytes) == ("group", 131072)
    assert "group_bytes 131072 (given; saved 262144)" in caplog.text, caplog.text
    with lirs.Loader(p, 128, granularity="auto") as ld:
        assert (ld.granularity, ld.group_bytes) == ("group", 262144)
    for given, want in ((["--group-bytes", "128K"], 131072), ([], 262144)):
        argv = ["epoch", p, "--granularity", "auto", "--batch-size", "128", "--max-batches", "1", "--json", *given]
        assert main(argv) == 0
        got = json.loads(capsys.readouterr().out)
        assert (got["granularity"], got["group_bytes"]) == ("group", want), (given, got)
    torch = pytest.importorskip("lirs.torch")
    assert torch.LirsIterableDataset(p, 128, granularity="auto", group_bytes=131072).loader().group_bytes == 131072
    assert torch.LirsIterableDataset(p, 128, granularity="auto").loader().group_bytes == 262144
    # a saved window of 4 groups of 8K, read in groups of 16K: its 32K, two groups (not four, twice the memory)
    B.save_recommendation(_fake_result(idx), idx)
    with lirs.Loader(p, 128, granularity="auto", group_bytes=16384) as ld:
        assert (ld.granularity, ld.group_bytes, ld.window) == ("window", 16384, 2)
    with lirs.Loader(p, 128, granularity="auto", group_bytes=16384, window=3) as ld:
        assert ld.window == 3, "a window given stands"


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_save_recommendation_needs_one(kdd_tiny):
    import lirs
    from lirs.errors import UsageError

    idx = lirs.open_index(kdd_tiny)
    res = _fake_result(idx)
    res["recommendation"] = {}
    with pytest.raises(UsageError, match="no recommendation"):
        B.save_recommendation(res, idx)


# ------------------------------------------------------------ what the disk is, and one number format


def _fake_disk(sys_root, name, device_path, *, driver=None, files=None, rotational="0"):
    """A /sys/block/NAME whose device links to ``sys_root/devices/DEVICE_PATH`` (and its driver)."""
    dev = sys_root / "devices" / device_path
    dev.mkdir(parents=True)
    for k, v in (files or {}).items():
        (dev / k).write_text(v + "\n")
    if driver:
        drv = sys_root / "bus" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        (dev / "driver").symlink_to(drv)
    block = sys_root / "block" / name
    (block / "queue").mkdir(parents=True)
    (block / "queue" / "rotational").write_text(rotational + "\n")
    (block / "device").symlink_to(dev)


def test_disk_transport_from_sysfs(tmp_path):
    from lirs.eval.bench.disk import describe

    s = tmp_path / "sys"
    _fake_disk(s, "vda", "pci0000:00/0000:00:02.0/virtio1", driver="virtio_blk",
               files={"vendor": "0x1af4"}, rotational="1")
    _fake_disk(s, "nvme0n1", "pci0000:00/0000:00:04.0/nvme/nvme0",
               files={"model": "Samsung SSD 980 PRO 1TB   ", "transport": "pcie"})
    _fake_disk(s, "nvme1n1", "virtual/nvme-fabrics/ctl/nvme1", files={"transport": "tcp"})
    _fake_disk(s, "sda", "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0",
               files={"vendor": "ATA", "model": "WDC WD10EZEX-00B"}, rotational="1")
    _fake_disk(s, "sdb", "pci0000:00/0000:00:05.0/virtio2/host2/target2:0:0/2:0:0:0",
               files={"vendor": "QEMU", "model": "QEMU HARDDISK"})
    _fake_disk(s, "sdc", "platform/odd/host3/target3:0:0/3:0:0:0", files={"vendor": "ACME"})
    (s / "block" / "loop0").mkdir(parents=True)

    vda = describe("vda", sys_root=str(s))
    assert vda == {"transport": "virtio", "model": None, "rotational": True, "label": "virtio disk vda"}
    nv = describe("nvme0n1", sys_root=str(s))
    assert nv["transport"] == "nvme" and nv["label"] == "nvme disk nvme0n1 (Samsung SSD 980 PRO 1TB)"
    assert nv["rotational"] is False
    assert describe("nvme1n1", sys_root=str(s))["transport"] == "nvme-tcp"
    assert describe("sda", sys_root=str(s))["transport"] == "sata"
    assert describe("sdb", sys_root=str(s))["transport"] == "virtio"  # virtio-scsi is still virtio
    assert describe("sdc", sys_root=str(s))["transport"] == "scsi"
    assert describe("loop0", sys_root=str(s))["transport"] == "loop"
    assert describe("nothere", sys_root=str(s)) == {"transport": "unknown", "model": None, "rotational": None,
                                                     "label": "unknown disk nothere"}


def test_the_disk_as_it_is_is_printed_by_its_transport():
    env = {"nvme": {"read_iops": None, "read_bps": None}, "hdd": {"read_iops": 600, "read_bps": 160_000_000}}
    res = {"envelopes": env, "disk": {"transport": "virtio", "label": "virtio disk vda"}}
    assert B.device_label(res, "nvme") == "virtio" and B.device_label(res, "hdd") == "hdd"
    res["disk"] = {"transport": "unknown"}
    assert B.device_label(res, "nvme") == "nvme"  # nothing better known: the envelope's name
    row = {"device": "nvme", "name": "lirs-group-64K", "status": "ok", "epoch_s": 12.5, "records_per_s": 9650.0}
    from lirs.eval.bench.report import row_line

    assert row_line(row, "virtio") == "virtio: lirs-group-64K: epoch 12.5s, 9.65k records/s"


def test_format_table_names_a_virtio_disk_virtio(tmp_path):
    res = {"settings": {"devices": ["nvme"]}, "envelopes": {"nvme": {"read_iops": None, "read_bps": None}},
           "disk": {"transport": "virtio", "label": "virtio disk vda"},
           "fio": {"nvme": {"available": True, "jobs": {"rand4k_qd1": {"iops": 9650.4}, "rand4k_qd32": {"iops": 83012},
                                                           "seq1m_qd16": {"bw_bytes": 1.25e9}}}},
           "rows": [{"device": "nvme", "name": "lirs-window-64Kx16", "status": "ok", "epoch_s": 0.0123,
                     "records_per_s": 1_234_567, "mb_per_s": 410.0, "reads_per_s": 950.2, "amplification": 1.06,
                     "cpu_s_per_epoch": 0.5, "peak_rss_bytes": 2 ** 27, "pre_s": 0.0}],
           "recommendation": {"nvme": {"rule": "fastest", "text": "nvme: use lirs-window-64Kx16 (epoch 0.0123s)"}}}
    text = B.format_table(res)
    assert text.splitlines()[0] == "virtio (virtio disk vda, as it is; envelope nvme)"
    assert "  virtio: use lirs-window-64Kx16" in text and "nvme:" not in text
    assert "rand4k_qd1 9.65k IOPS, rand4k_qd32 83.0k IOPS" in text
    assert "e+0" not in text and "e-0" not in text  # one notation: no exponents


@pytest.mark.parametrize("v, text", [
    (None, "-"), (0, "0"), (9650.4, "9.65k"), (83012, "83.0k"), (1_204_000, "1.20M"), (2.5e9, "2.50G"),
    (999.7, "1.00k"), (999_600, "1.00M"), (123.4, "123"), (12.34, "12.3"), (0.0123, "0.0123"), (5, "5.00"),
])
def test_one_number_format(v, text):
    assert B.format_number(v) == text


def test_peers_write_their_copies_in_a_folder_of_their_own(kdd_tiny, tmp_path):
    """bmf and external wrote DATA.bmfN and STEM.shuffled.SUF (with its sidecar) in the work
    directory, by default beside the data: a user's files of those names (an earlier `lirs shuffle
    -o d.shuffled.svm`) were replaced, then deleted. Now each run writes in a folder of its own."""
    import lirs
    from lirs.eval.peers import make_runner, skip_reason

    idx = lirs.open_index(kdd_tiny)
    base = os.path.basename(kdd_tiny)
    stem, _, suf = base.rpartition(".")
    mine = {f"{base}.bmf7": b"mine 1", f"{stem}.shuffled.{suf}": b"mine 2", f"{stem}.shuffled.{suf}.lirs": b"mine 3"}
    for name, data in mine.items():
        (tmp_path / name).write_bytes(data)
    for peer in ("bmf", "external"):
        if skip_reason(peer, idx, workdir=str(tmp_path)):
            continue
        r = make_runner(peer, idx, batch_size=256, seed=1, workdir=str(tmp_path), bmf_blocks=7)
        try:
            r.warm()
            r.prepare()
            assert len(_epoch_rows(r, 0)[0]) == idx.n
        finally:
            r.close()
    assert {n: (tmp_path / n).read_bytes() for n in mine} == mine
    assert sorted(os.listdir(tmp_path)) == sorted(mine)


def test_a_benchmarks_work_directory_is_checked_and_a_crashed_ones_scratch_removed(tmp_path, monkeypatch):
    """A scratch folder carries its run's PID (.lirs-bench-PID-XXXX): one of a dead run is removed
    by the next, one of a live run is left; a work directory that cannot be written is refused
    before any work, naming --workdir (it failed as "permission denied" on a file name)."""
    from lirs.errors import UsageError
    from lirs.litter import out_dir

    gone = subprocess.Popen(["true"])
    gone.wait()
    live = subprocess.Popen(["sleep", "30"])
    try:
        dead_dir = tmp_path / f".lirs-bench-{gone.pid}-ab12cd"
        live_dir = tmp_path / f".lirs-bench-{live.pid}-ef34gh"
        for d in (dead_dir, live_dir):
            d.mkdir()
            (d / "task.json").write_text("{}")
        assert B.run.scratch_dir(str(tmp_path)) == str(tmp_path)
        assert not dead_dir.exists() and live_dir.exists()
    finally:
        live.kill()
        live.wait()
    monkeypatch.setattr(os, "access", lambda path, mode, **k: False)  # root writes anywhere: as a user would
    with pytest.raises(UsageError, match="is not writable.*--workdir"):
        B.run.scratch_dir(str(tmp_path))
    with pytest.raises(UsageError, match=r"--json .*r\.json: its directory .* is not writable"):
        out_dir(str(tmp_path / "r.json"), "--json")


def test_data_in_a_read_only_directory_is_indexed_elsewhere_not_moved_by_workdir(tmp_path, monkeypatch, capsys):
    """Its sidecar cannot be written beside it (a read-only mount): the error advised --workdir,
    which does not move the index. It names `lirs index DATA -o DIR/NAME.lirs` instead."""
    import errno

    from lirs.cli import main

    p = tmp_path / "t.svm"
    p.write_text("+1 1:1 2:2\n-1 3:1\n+1 4:0.5\n")

    def refuse(path, **k):
        raise OSError(errno.EROFS, "Read-only file system", f"{path}.lirs")
    monkeypatch.setattr(B.run, "build_index", refuse)
    wd = tmp_path / "wd"
    wd.mkdir()
    assert main(["bench", str(p), "--no-fio", "--smoke", "--workdir", str(wd)]) == 2
    err = capsys.readouterr().err
    assert f"{p}.lirs cannot be written (Read-only file system)" in err
    assert f"`lirs index {p} -o DIR/NAME.lirs`, then pass that .lirs file as the source" in err
    assert "--workdir" not in err


def test_cli_refuses_a_plot_without_matplotlib_before_the_benchmark(kdd_tiny, tmp_path, monkeypatch, capsys):
    from lirs.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert main(["bench", kdd_tiny, "--no-fio", "--smoke", "--plot", str(tmp_path / "p.png")]) == 2
    assert "--plot needs matplotlib: matplotlib is not installed" in capsys.readouterr().err


def test_cli_refuses_a_plot_with_a_matplotlib_that_cannot_be_imported(kdd_tiny, tmp_path, capsys, matplotlib_broken):
    """A matplotlib built for NumPy 1.x under NumPy 2 is installed: "pip install matplotlib" is no fix."""
    from lirs.cli import main

    assert main(["bench", kdd_tiny, "--no-fio", "--smoke", "--plot", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib: matplotlib is installed but cannot be imported" in err
    assert "pip install --upgrade matplotlib" in err, err


def test_group_counters_without_the_devices_line_are_unknown_not_zero(fake_root):
    """Since Linux 6.10 an uncapped group (the nvme envelope's) on a disk no group ever capped counts
    nothing: no line for the device. That is no count, not 0 reads (the row then counts the
    loader's reads, instead of 0 MB/s and a ratio of 0 to fio)."""
    with E.ThrottleGroup("nvme", "254:0", root=fake_root) as g:
        for f in E._STAT_FILES.values():
            open(os.path.join(g.path, f), "w").write("Total 0\n")
        assert g.stats() is None
        open(os.path.join(g.path, E._STAT_FILES["reads"]), "w").write("254:0 Read 7\n254:0 Write 1\nTotal 8\n")
        open(os.path.join(g.path, E._STAT_FILES["bytes"]), "w").write("254:0 Read 28672\nTotal 28672\n")
        assert g.stats() == {"reads": 7, "bytes": 28672}


def test_remove_waits_for_a_group_busy_a_moment(fake_root, monkeypatch):
    """A killed worker's DataLoader children keep its group busy until they are reaped: remove()
    pauses between retries (50 back to back left the group behind, 'Device or resource busy')."""
    import errno

    g = E.ThrottleGroup("hdd", "254:0", 600, root=fake_root).create()
    real, t0 = os.rmdir, time.monotonic()

    def busy(path):
        if path == g.path and time.monotonic() - t0 < 0.3:
            raise OSError(errno.EBUSY, "Device or resource busy", path)
        return real(path)

    monkeypatch.setattr(os, "rmdir", busy)
    g.remove()
    assert not os.path.exists(g.path)


def test_fio_failing_every_job_is_unavailable_with_the_reason(monkeypatch, tmp_path):
    """Every job refused (O_DIRECT on ramfs): no figure, and the table says why (it printed an
    empty "fio:" line and kept the envelope "available")."""
    def fail(path, job, runtime_s, ioengine="io_uring", cgroup_procs=None):
        raise F.FioError(f"fio exited with status 1: {job}: O_DIRECT refused ({ioengine})")

    monkeypatch.setattr(F, "fio_path", lambda: "/usr/bin/fio")
    monkeypatch.setattr(F, "run_job", fail)
    res = F.run_envelope(str(tmp_path / "d.svm"), jobs=("rand4k_qd1", "seq1m_qd16"))
    assert res["available"] is False and res["reason"].startswith("every fio job failed: ")
    assert "O_DIRECT refused" in res["reason"]


def test_bench_workers_start_no_compile_helpers_and_the_buffer_warms_its_kernel(monkeypatch, tmp_path):
    """A cold Loader's compile helpers ran (or were reaped) in the measured epochs, their CPU
    counted as the row's: the bench's worker runs with LIRS_WARMUP=0. The shuffle buffer's order
    kernel compiled inside its first measured batch: its warm() runs it once."""
    from lirs.eval.bench import worker as W
    from lirs.eval.peers import sequential

    seen = {}

    class Stop(Exception):
        pass

    def popen(cmd, **kw):
        seen.update(kw["env"])
        raise Stop

    monkeypatch.setattr(W.subprocess, "Popen", popen)
    with pytest.raises(Stop):
        W.Worker({"x": 1}, str(tmp_path), 10).run()
    assert seen["LIRS_WARMUP"] == "0"
    called = []
    monkeypatch.setattr(sequential, "shuffle_buffer_order", lambda *a, **k: called.append(a))
    monkeypatch.setattr(sequential, "warm_decode", lambda index: None)
    sb = object.__new__(sequential.ShuffleBuffer)
    sb.index = None
    sb.warm()
    assert called


def test_run_bench_leaves_a_callers_sigterm_handler(kdd_tiny, monkeypatch, tmp_path):
    """Under the CLI, whose SIGTERM handler makes the command say "terminated" and exit 143, the
    benchmark put its own in place: a killed `lirs bench` exited 130, "interrupted"."""
    import signal

    mine = lambda signum, frame: None  # noqa: E731
    seen = []
    monkeypatch.setattr(B.run._Bench, "device", lambda self, res, dev, n: seen.append(signal.getsignal(signal.SIGTERM)))
    old = signal.signal(signal.SIGTERM, mine)
    try:
        B.run_bench(kdd_tiny, granularities=["group"], peers="none", budget_s=1, fio=False, workdir=str(tmp_path),
                    progress=False)
        assert seen == [mine] and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_groups_counters_that_appear_with_its_first_read_count_from_zero(monkeypatch):
    """An uncapped group's line for the disk appears with its first read: none before the measure
    is none read (the row took the loader's counts, while another row of the same run had the
    group's); none after it either is no count (the loader's)."""
    from lirs.eval.bench import measure as M

    seen = iter([None, {"reads": 70, "bytes": 286720}, None, None])
    monkeypatch.setattr(M, "_group_stats", lambda task: next(seen))
    m = B.measure_task(_SlowRunner(100, 0.0), {"budget_s": 1, "epochs": 1}, 100, 1.0, None)
    assert (m["io_source"], m["reads"], m["bytes_read"]) == ("cgroup", 70, 286720)
    m = B.measure_task(_SlowRunner(100, 0.0), {"budget_s": 1, "epochs": 1}, 100, 1.0, None)
    assert m["io_source"] == "loader" and m["reads"] == m["loader_reads"]


def test_bench_window_configs_count_large_records_as_the_loader_does():
    from lirs.eval.bench.configs import lirs_configs

    big = lirs_configs(["window"], [65536], "1M", data_bytes=100 * (128 << 10), records=100)
    small = lirs_configs(["window"], [65536], "1M", data_bytes=100_000 * 300, records=100_000)
    assert big[0].window == 8 and small[0].window == 16


def _shown_result(extrapolated=False):
    """A result as run_bench returns it, with one lirs row on the disk as it is: enough for the
    table, the JSON, the plot and --auto (nothing is measured)."""
    row = {"device": "nvme", "name": "lirs-window-64Kx16", "kind": "lirs", "status": "ok", "epoch_s": 0.5,
           "extrapolated": extrapolated, "reads_only": False, "granularity": "window", "group_bytes": 65536,
           "window": 16, "records_per_s": 6000.0, "mb_per_s": 2.0, "reads_per_s": 50.0, "amplification": 1.1,
           "cpu_s_per_epoch": 0.4, "peak_rss_bytes": 2 ** 27, "pre_s": 0.0}
    rec = {"rule": "fastest", "text": "nvme: use lirs-window-64Kx16 (epoch 0.5s)", "config": row["name"],
           "granularity": "window", "group_bytes": 65536, "window": 16, "epoch_s": 0.5, "extrapolated": extrapolated}
    return {"settings": {"devices": ["nvme"], "batch_size": 128},
            "envelopes": {"nvme": {"read_iops": None, "read_bps": None}},
            "fio": {"nvme": {"available": False, "reason": "not run (--no-fio)"}}, "rows": [row],
            "recommendation": {"nvme": rec}, "data": {"path": "/x/k.svm", "file_bytes": 10, "records": 3000},
            "date": "now", "command": "test"}


def test_the_extrapolation_key_only_where_a_row_was_extrapolated():
    """The table ended with "~ = extrapolated from a budget-limited sample" when no row carried the
    mark: the key now comes only with the mark it explains."""
    assert "~ = extrapolated" not in B.format_table(_shown_result())
    text = B.format_table(_shown_result(extrapolated=True))
    assert "~ = extrapolated" in text and "~0.500s" in text


@pytest.mark.parametrize("kind", ["gone", "full"])
def test_bench_writes_its_files_before_a_failing_stdout(kdd_tiny, tmp_path, kind):
    """`lirs bench DATA --json --plot --auto | true` exited 0 with no JSON, no plot and no saved
    recommendation (PYTHONUNBUFFERED=1; 120 with "Exception ignored ... BrokenPipeError" otherwise):
    the table was printed first, outside the guard the other commands print in. `> /dev/full` said
    "No space left on device (... use --workdir ...)", naming no file. The files come first now, and
    a failing stdout is said to be standard output. The benchmark is a saved result: nothing is measured."""
    import shutil

    import lirs

    pytest.importorskip("matplotlib")
    if kind == "full" and not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    data = str(tmp_path / "k.svm")
    shutil.copy(kdd_tiny, data)
    lirs.build_index(data, progress=False)
    saved = tmp_path / "res.json"
    saved.write_text(json.dumps(_shown_result()))
    js, png = str(tmp_path / "b.json"), str(tmp_path / "b.png")
    drv = ("import json, sys\nimport lirs.eval.bench as B\n"
           f"res = json.load(open({str(saved)!r}))\nB.run_bench = lambda *a, **k: res\n"
           "from lirs.cli import main\n"
           f"sys.exit(main(['bench', {data!r}, '--no-fio', '--json', {js!r}, '--plot', {png!r}, '--auto']))\n")
    if kind == "gone":
        r_end, stdout = os.pipe()
        os.close(r_end)
        stdout = os.fdopen(stdout, "w")
    else:
        stdout = open("/dev/full", "w")
    for unbuffered in ("1", None):
        for f in (js, png):
            if os.path.exists(f):
                os.unlink(f)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        if unbuffered:
            env["PYTHONUNBUFFERED"] = unbuffered
        r = subprocess.run([sys.executable, "-c", drv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                           timeout=300, env=env)
        assert json.load(open(js))["rows"][0]["name"] == "lirs-window-64Kx16", r.stderr
        assert open(png, "rb").read(4) == b"\x89PNG"
        assert json.load(open(data + ".lirs" + B.RECOMMENDATION_SUFFIX))["config"] == "lirs-window-64Kx16"
        os.unlink(data + ".lirs" + B.RECOMMENDATION_SUFFIX)
        assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr
        if kind == "gone":  # a reader that left: quiet, as Unix tools are
            assert r.returncode == 0 and "Broken pipe" not in r.stderr, r.stderr
        else:
            assert r.returncode == 1 and r.stderr.endswith(
                "lirs bench: error: standard output: No space left on device (no space left on the device)\n"), r.stderr
    stdout.close()


@pytest.mark.parametrize("args, said", [
    (["--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
    (["--epochs", "0"], "--epochs: must be >= 1, got 0"),
    (["--group-bytes", "1000"], "--group-bytes: group size 1000 must be a power of two >= 4096"),
    (["--group-bytes", "64K,12x"], "--group-bytes: cannot read size '12x'"),
    (["--window", "0"], "--window: must be a group count >= 1")])
def test_bench_usage_errors_name_the_option(kdd_tiny, capsys, args, said):
    """--batch-size 0 said "batch_size must be >= 1", --group-bytes 1000 "group size 1000 must be a
    power of two": the Python API's parameter, not the option typed. Said before any work."""
    from lirs.cli import main

    assert main(["bench", kdd_tiny, "--no-fio", "--smoke", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"lirs bench: error: {said}" in err, err
