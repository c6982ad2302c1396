"""benchmarks/bench_cores.py: the GIL share from py-spy's raw output (canned), py-spy missing or
refused, and one whole run on a tiny file on one core."""
from __future__ import annotations

import json
import os
import stat

import pytest

from conftest import benchmark_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `py-spy record --gil --format raw` of a loader epoch (shortened): one trace per tick at which a
# thread held the GIL; 40 + 25 + 10 + 5 = 80 samples
GIL_RAW = """\
<module> (<string>:40);run (<string>:14);Loader.epoch (lirs/loader.py:397);EpochRun.wait (lirs/pipeline.py:297);Condition.notify (threading.py:369) 40
Thread._bootstrap (threading.py:1002);_WorkItem.run (concurrent/futures/thread.py:58);Pipeline._read_decode (lirs/pipeline.py:140) 25
<module> (<string>:40);run (<string>:14);Loader._deliver (lirs/loader.py:420);csr_batch (lirs/decode.py:106) 6
<module> (<string>:40);run (<string>:14);Loader._deliver (lirs/loader.py:420);csr_batch (lirs/decode.py:103) 4
<module> (<string>:40);run (<string>:13) 5
"""
# `py-spy record --idle --threads --format raw` of the same process: the main thread at each of
# 190 ticks (two stacks), two pool threads that lived part of the time, a line that is no stack
IDLE_RAW = """\
thread (0x7f01): MainThread;<module> (<string>:40);run (<string>:14) 150
thread (0x7f01): MainThread;<module> (<string>:40);run (<string>:13) 40
thread (0x7f02): lirs-loader_0;Thread._bootstrap (threading.py:1002) 120
thread (0x7f03): lirs-loader_1;Thread._bootstrap (threading.py:1002) 185
py-spy> Wrote raw flamegraph data
"""


@pytest.fixture(scope="module")
def bc():
    return benchmark_module("bench_cores")


def test_parse_raw_and_ticks(bc):
    stacks = bc.parse_raw(IDLE_RAW)
    assert len(stacks) == 4 and stacks[0][1] == 150
    assert stacks[0][0][0] == "thread (0x7f01): MainThread" and stacks[0][0][-1] == "run (<string>:14)"
    assert bc.ticks_of(stacks) == 190  # the thread seen most often, all its stacks together
    assert bc.ticks_of([]) == 0


def test_gil_share_from_both_records(bc):
    g = bc.gil_share(GIL_RAW, IDLE_RAW, duration=1, rate=200)
    assert g["gil_samples"] == 80 and g["ticks"] == 190 and g["ticks_source"] == "idle record"
    assert g["expected_ticks"] == 200
    assert g["share"] == pytest.approx(80 / 190)
    fr = g["holders"]["frames"]
    assert fr[0] == {"frame": "Condition.notify (threading.py:369)", "samples": 40,
                     "share_of_wall": pytest.approx(40 / 190), "share_of_gil": pytest.approx(0.5)}
    # the two lines of csr_batch are one function
    fn = {h["frame"]: h["samples"] for h in g["holders"]["functions"]}
    assert fn["csr_batch (lirs/decode.py)"] == 10 and fn["Pipeline._read_decode (lirs/pipeline.py)"] == 25
    assert sum(fn.values()) == 80
    # the lirs line under threading's notify; a sample without lirs frames stays under its leaf
    lirs = {h["frame"]: h["samples"] for h in g["holders"]["lirs"]}
    assert lirs == {"EpochRun.wait (lirs/pipeline.py:297)": 40, "Pipeline._read_decode (lirs/pipeline.py:140)": 25,
                    "csr_batch (lirs/decode.py:106)": 6, "csr_batch (lirs/decode.py:103)": 4, "run (<string>:13)": 5}


def test_gil_holders_by_the_role_of_their_thread(bc):
    # the --gil record is taken with --threads: each stack rooted in its thread, named by lirs
    named = "".join(f"thread (0x7f0{i}): {name};{line}\n" for i, (name, line) in enumerate([
        ("MainThread", "<module> (<string>:40);Loader._deliver (lirs/loader.py:420) 30"),
        ("lirs-plan", "walk (lirs/walker.py:50) 12"),
        ("lirs-loader_3", "Pipeline._read_decode (lirs/pipeline.py:140) 20"),
        ("lirs-loader_12", "Pipeline._read_decode (lirs/pipeline.py:140) 5"),
        ("lirs-decode_0", "_spans_run (lirs/svmdecode.py:100) 8"),
        ("Thread-7", "run (<string>:3) 5")]))
    g = bc.gil_share(named, IDLE_RAW, duration=1, rate=200)
    th = g["holders"]["threads"]
    assert {r: v["samples"] for r, v in th.items()} == {"consumer": 30, "pool": 25, "planning": 12, "decode": 8,
                                                         "other": 5}
    assert th["pool"]["share_of_wall"] == pytest.approx(25 / 190) and th["pool"]["share_of_gil"] == pytest.approx(25 / 80)
    # the thread frame is no holder: the leaves are the frames under it
    fn = {h["frame"]: h["samples"] for h in g["holders"]["functions"]}
    assert fn["Pipeline._read_decode (lirs/pipeline.py)"] == 25 and not any(f.startswith("thread") for f in fn)
    assert bc.gil_share(GIL_RAW, IDLE_RAW, duration=1, rate=200)["holders"]["threads"] == {}


def test_gil_share_without_idle_record_uses_duration_times_rate(bc):
    g = bc.gil_share(GIL_RAW, None, duration=2, rate=100)
    assert g["ticks"] == 200 and g["ticks_source"] == "duration x rate"
    assert g["share"] == pytest.approx(0.4)
    nothing = bc.gil_share("", IDLE_RAW, duration=1, rate=200)
    assert nothing["share"] == 0 and nothing["holders"]["frames"] == []


def test_py_spy_missing_or_refused_gives_a_reason(bc, tmp_path):
    res, why = bc.measure_gil(None, os.getpid(), 1, 100)
    assert res is None and "py-spy not found" in why
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Permission Denied: try running again with elevated permissions' >&2\n"
                    "exit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert bc.find_py_spy(str(fake)) == str(fake)
    res, why = bc.measure_gil(str(fake), os.getpid(), 1, 100)
    assert res is None and "exited with 1" in why and "Permission Denied" in why


def test_gil_records_sample_without_stopping_the_process(bc, tmp_path):
    # a py-spy that logs its arguments and writes a raw record: --nonblocking on both records
    # unless blocking is asked for
    log = tmp_path / "args.log"
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\n"
                    f"echo \"$*\" >> {log}\n"
                    "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then out=$2; fi; shift; done\n"
                    "echo 'MainThread;run (<string>:1) 3' > $out\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    res, why = bc.measure_gil(str(fake), os.getpid(), 1, 10)
    assert why is None and res["blocking"] is False and res["gil_samples"] == 3
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("--nonblocking" in c for c in calls)
    assert "--gil --threads" in calls[0] and "--idle --threads" in calls[1]
    log.unlink()
    res, why = bc.measure_gil(str(fake), os.getpid(), 1, 10, blocking=True)
    assert res["blocking"] is True and not any("--nonblocking" in c for c in log.read_text().splitlines())


def test_calibration_reads_each_canned_process_both_ways(bc, tmp_path, monkeypatch):
    # the canned processes run for real; py-spy is a fake whose records say the GIL was always held
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\n"
                    "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then out=$2; fi; shift; done\n"
                    "echo 'MainThread;run (<string>:1) 4' > $out\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(bc.time, "sleep", lambda s: None)
    out = tmp_path / "cal.json"
    assert bc.main(["--calibrate", "--py-spy", str(fake), "--gil-seconds", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["process"], r["blocking"]) for r in rows] == [(p, b) for p in ("spin", "half", "nogil")
                                                               for b in (False, True)]
    assert all(r["share"] == 1.0 and r["reason"] is None for r in rows)
    assert {r["process"]: r["expected"] for r in rows} == {"spin": 1.0, "half": 0.5, "nogil": 0.0}


def test_the_median_of_several_gil_records_is_kept(bc, monkeypatch):
    shares = iter([0.30, 0.10, 0.20])
    monkeypatch.setattr(bc, "measure_gil", lambda *a: ({"share": next(shares), "ticks": 5}, None))
    res, why = bc.median_gil("py-spy", 1, 1, 100, records=3)
    assert why is None and res["share"] == 0.20 and res["shares"] == [0.30, 0.10, 0.20]
    monkeypatch.setattr(bc, "measure_gil", lambda *a: (None, "refused"))
    assert bc.median_gil("py-spy", 1, 1, 100, records=3) == (None, "refused")


def test_one_core_run_on_a_tiny_file(bc, tmp_path):
    """The whole benchmark on ~2 MB, one core, page cache: one row with records/s, CPU per record,
    and a GIL share (or a reason where py-spy is missing or refused)."""
    out = tmp_path / "cores_gil.json"
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    shm = os.path.join(shm, f"lirs-test-cores-{os.getpid()}")
    try:
        assert bc.main(["--size", "2MB", "--dir", str(tmp_path / "d"), "--shm", shm, "--modes", "page-cache",
                        "--granularities", "group", "--cores", "1", "--repeat", "1", "--gil-seconds", "1",
                        "--gil-rate", "100", "--gil-records", "2", "--out", str(out)]) == 0
    finally:
        import shutil
        shutil.rmtree(shm, ignore_errors=True)
    res = json.loads(out.read_text())
    (r,) = res["rows"]
    assert r["mode"] == "page-cache" and r["engine"] == "buffered" and r["cores"] == 1
    assert r["records"] == res["data"]["records"] and r["complete"]
    assert r["records_per_s"] > 0 and r["cpu_us_per_record"] > 0 and r["speedup_vs_1_core"] == 1
    # the consumer's thread: some of the wall time on a core, and a CPU cost per batch
    assert 0 < r["consumer_cpu_share"] <= 1.05 and r["consumer_cpu_us_per_batch"] > 0
    run0 = r["runs"][0]
    assert r["consumer_cpu_us_per_batch"] == pytest.approx(1e6 * run0["consumer_cpu_s"] / run0["batches"])
    # the child's peak resident memory is recorded (its size is the benchmark's, not asserted here)
    assert isinstance(r["peak_rss_bytes"], int) and r["peak_rss_bytes"] == run0["peak_rss_bytes"] > 0
    if r["gil_share"] is None:
        assert r["gil_reason"] and r["ceiling_records_per_s"] is None
    else:
        assert 0 <= r["gil_share"] <= 1 and r["gil_reason"] is None
        assert r["gil"]["ticks"] > 0 and r["profiled"]["records"] > 0 and len(r["gil"]["shares"]) == 2
        if r["gil_share"]:
            assert r["ceiling_records_per_s"] == pytest.approx(r["records_per_s"] / r["gil_share"])


def test_a_record_without_the_consumers_cpu_reads_none(bc):
    """Runs recorded before the consumer's thread time (or the pool's decode and read time) was kept
    (or with no batch) give None, not an error; runs that have it give the median shares and CPU per batch."""
    old = {"records": 1000, "epoch_s": 0.5, "cpu_s": 0.8, "wait_s": 0.1, "plan_s": 0.0, "workers": 3,
           "engine": "buffered", "complete": True}
    row = bc.summarize([old], None, "not measured", None, 2)
    assert row["consumer_cpu_share"] is None and row["consumer_cpu_us_per_batch"] is None
    assert row["peak_rss_bytes"] is None
    assert row["decode_share"] is None and row["io_share"] is None and bc._work(row) == ""
    new = [dict(old, consumer_cpu_s=c, batches=10, peak_rss_bytes=m, decode_s=d, io_s=0.1)
           for c, m, d in ((0.2, 5, 0.45), (0.3, 9, 0.5), (0.4, 7, 0.6))]
    row = bc.summarize(new, None, "not measured", None, 2)
    assert row["consumer_cpu_share"] == pytest.approx(0.6) and row["peak_rss_bytes"] == 9
    assert row["decode_share"] == pytest.approx(1.0) and row["io_share"] == pytest.approx(0.2)
    assert bc._work(row) == ", decode 100%, reads 20%"
    assert row["consumer_cpu_us_per_batch"] == pytest.approx(30000.0)


def test_a_measured_process_imports_the_lirs_beside_the_script_from_any_directory(bc, tmp_path):
    """The measured process (``python -c``) imports the lirs of the script's own tree, even run from
    a directory that holds another lirs: ``-c`` puts the working directory ahead of PYTHONPATH, so an
    A/B of two checkouts run from one of them would measure that one twice."""
    import subprocess
    import sys

    (tmp_path / "lirs").mkdir()
    (tmp_path / "lirs" / "__init__.py").write_text("")
    code = "import lirs; print(lirs.__file__)"
    plain = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONPATH=REPO))
    assert plain.stdout.strip() == str(tmp_path / "lirs" / "__init__.py")  # the hazard is real
    ours = subprocess.run(bc.tree_python(code), cwd=tmp_path, capture_output=True, text=True, check=True)
    assert ours.stdout.strip() == os.path.join(REPO, "lirs", "__init__.py")


def test_an_unknown_mode_or_granularity_is_refused_before_any_data_is_made(bc, tmp_path, capsys):
    for flag, bad in (("--modes", "pagecache"), ("--granularities", "window,groups")):
        with pytest.raises(SystemExit) as ei:
            bc.main([flag, bad, "--dir", str(tmp_path / "d"), "--out", str(tmp_path / "o.json")])
        assert ei.value.code == 2 and f"unknown {flag[2:]} {bad.split(',')[-1]}" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
