"""benchmarks/bench_scale.py and its helpers (lirs.eval.rss, lirs.eval.isolated) on tiny data: the
size and space checks, the prefix file, the memory sampler, the child runs and the JSON shape."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lirs.errors import UsageError
from lirs.eval.isolated import run_child
from lirs.eval.rss import TreeSampler, process_memory, tree_memory

from conftest import benchmark_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "bench_scale.py")


@pytest.fixture(scope="module")
def bs():
    return benchmark_module("bench_scale")


def _lines(path, n, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            feats = " ".join(f"{j}:{rng.random():.3f}" for j in sorted(rng.choice(50, 3, replace=False) + 1))
            f.write(f"{1 if i % 2 else -1} {feats}\n")


def test_target_bytes(bs):
    assert bs.target_bytes("1.5xRAM", 1000) == 1500
    assert bs.target_bytes("2 x ram", 7) == 14
    assert bs.target_bytes("2GB", 1) == 2_000_000_000
    with pytest.raises(UsageError, match="cannot read size"):
        bs.target_bytes("lots", 1000)


def test_small_file_is_whole_windows(bs):
    # 2 GB is 7.45 windows of 256 MiB: 7 whole ones, so every window of both files holds 4,096 groups
    assert bs.small_bytes("2GB", "256M") == 7 * (256 << 20)
    assert bs.small_bytes("3MB", "1M") == 3 << 20
    assert bs.small_bytes("100MB", "256M") == 256 << 20  # at least one window
    assert bs.small_bytes("2GB", "5%") == 2_000_000_000  # a share: windows scale with the file


def test_mem_total_is_the_meminfo_figure(bs):
    with open("/proc/meminfo") as f:
        kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    assert bs.mem_total() == kib * 1024


def test_check_space_refuses_with_the_figures(bs, tmp_path, monkeypatch):
    monkeypatch.setattr(bs, "free_bytes", lambda d: 5 << 30)
    big = str(tmp_path / "big.svm")
    with pytest.raises(UsageError, match=r"5\.4 GB free.*big\.svm 10\.0 GB.*--size"):
        bs.check_space(str(tmp_path), {big: 10_000_000_000})
    got = bs.check_space(str(tmp_path), {big: 1_000_000_000})
    assert got["free_bytes"] == 5 << 30 and got["need_bytes"] > 1_000_000_000


def test_check_space_counts_a_reusable_file_as_free(bs, tmp_path, monkeypatch):
    big = tmp_path / "big.svm"
    big.write_bytes(b"x" * 4096)
    monkeypatch.setattr(bs, "SPACE_MARGIN", 0)
    monkeypatch.setattr(bs, "free_bytes", lambda d: 100)
    bs.check_space(str(tmp_path), {str(big): 4000})
    with pytest.raises(UsageError):
        bs.check_space(str(tmp_path), {str(big): 8000})


def test_reusable(bs, tmp_path):
    p = tmp_path / "f"
    assert not bs.reusable(str(p), 100, True)
    p.write_bytes(b"x" * 100)
    assert bs.reusable(str(p), 104, True)
    assert not bs.reusable(str(p), 100, False)
    assert not bs.reusable(str(p), 200, True)


def test_make_prefix_cuts_at_a_line_end(bs, tmp_path):
    src, dst = tmp_path / "a.svm", tmp_path / "b.svm"
    _lines(src, 500)
    data = src.read_bytes()
    for want in (1000, 4321, len(data) + 10):
        n = bs.make_prefix(str(src), str(dst), want, chunk=777)  # chunks that split lines
        got = dst.read_bytes()
        assert n == len(got) <= want
        assert data.startswith(got) and got.endswith(b"\n")
        assert want >= len(data) or len(got) > want - 200  # at most one line short
    (tmp_path / "c").write_bytes(b"1 1:2 " * 100)
    with pytest.raises(UsageError, match="no line end"):
        bs.make_prefix(str(tmp_path / "c"), str(dst), 300)


def test_tree_sampler_sees_a_child_and_its_worker():
    code = ("import os, time\nx = b'\\x01' * (48 << 20)\npid = os.fork()\n"
            "if pid == 0:\n    y = b'\\x02' * (32 << 20); time.sleep(1.5); os._exit(0)\n"
            "time.sleep(1.5); os.waitpid(pid, 0)\n")
    p = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    s = TreeSampler(p.pid, 0.05).start()
    p.wait()
    peaks = s.stop()
    assert peaks["samples"] > 3 and peaks["processes"] == 2
    assert peaks["anon"] >= 70 << 20  # 48 MiB once (shared after the fork, counted by share) + 32 MiB
    assert peaks["rss"] >= peaks["pss"] > 0
    assert tree_memory(p.pid)["processes"] == 0
    assert process_memory(os.getpid())["rss"] > 0


def test_run_child_plan_and_error(tmp_path):
    task = {"records": 200_000, "record_bytes": 512, "batch_size": 256, "batches": 5, "granularities": ["instance",
            "group"], "world": 4, "window": "4M"}
    res = run_child("plan", task, str(tmp_path), timeout_s=300)
    assert res["status"] == "ok", res
    assert set(res["rows"]) == {"instance", "group"}
    for row in res["rows"].values():
        assert set(row) == {"rank0_of_1", "rank3_of_4"}
        assert row["rank0_of_1"]["batches"] == -(-200_000 // 256)
        assert row["rank3_of_4"]["batches"] == -(-200_000 // (4 * 256))
        assert all(v > 0 for v in row["rank0_of_1"]["per_batch_s"].values())
    assert res["vm_hwm_bytes"] > 0 and res["sampled"]["samples"] >= 1 and res["wall_s"] > 0
    bad = run_child("index", {"path": str(tmp_path / "missing.svm")}, str(tmp_path), timeout_s=300)
    assert bad["status"] == "error" and "missing.svm" in bad["note"]
    with pytest.raises(ValueError, match="unknown kind"):
        run_child("nope", {}, str(tmp_path), timeout_s=1)


def test_summary_flags_goals_and_growth(bs):
    def row(name, ratio, reads, pss, anon, kind="lirs"):
        return {"kind": kind, "status": "ok", "reads_only": reads, "ratio": ratio, "amplification": 1.0,
                "bound": {"fio_bw_bytes": 1e9}, "payload_per_s": ratio * 1e9, "cpu_util": 1.9,
                "records_per_s": 10.0, "loader_stats": {"io_s": 1.0, "decode_s": 3.0, "wait_s": 2.0},
                "sampled": {"pss": pss // 2, "anon": anon, "file": 1, "rss": pss}, "vm_hwm_bytes": pss}
    small = {"g": row("g", 0.7, False, 100, 80), "g/reads": row("g/reads", 0.95, True, 100, 80)}
    big = {"g": row("g", 0.4, False, 104, 82), "g/reads": row("g/reads", 0.95, True, 300, 250),
           "torch": {**row("torch", 0.1, False, 500, 400, kind="peer")}}
    res = {"epochs": {"small": small, "big": big}, "index": {"big": {"vs_fio_seq": 0.95}}}
    s = bs.summarize(res)
    assert s["ratios"]["g"]["met"] is False and s["ratios"]["g/reads"]["met"] is True
    assert s["ratios"]["index"]["met"] is True
    assert s["rss"]["g"]["independent_of_size"] is True
    assert s["rss"]["g/reads"]["independent_of_size"] is False
    assert s["rss"]["g/reads"]["rss"]["big_over_small"] == 3.0
    w = s["where_time_goes"]["g"]
    assert w["needed_payload_MBps"] == pytest.approx(500.0) and w["delivered_payload_MBps"] == pytest.approx(400.0)
    assert "g/reads" not in s["where_time_goes"] and "torch" in s["peers"]


@pytest.mark.slow
def test_bench_scale_end_to_end_tiny(tmp_path):
    out = tmp_path / "scale.json"
    d = tmp_path / "data"
    r = subprocess.run([sys.executable, SCRIPT, "--size", "12MB", "--small", "3MB", "--dir", str(d), "--no-drop",
                        "--fio-runtime", "0.3", "--epoch-budget", "2", "--small-budget", "2", "--peer-budget", "1",
                        "--peers", "shuffle_buffer,inmemory", "--plan-records", "100000", "--plan-batches", "3",
                        "--window", "1M", "--out", str(out)], check=False, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["caches_dropped"] is False and res["files"]["kept"] is False
    assert not [p for p in os.listdir(d) if not p.startswith(".")]  # data files and sidecars deleted
    assert 0.95 * 12e6 < res["files"]["big_bytes"] < 1.05 * 12e6 and res["files"]["small_bytes"] <= 3 << 20
    assert res["index"]["big"]["records"] == res["files"]["big_records"] > res["files"]["small_records"]
    names = {"lirs-group-64K", "lirs-window-64Kx16", "lirs-group-64K/reads", "lirs-window-64Kx16/reads"}
    assert set(res["epochs"]["small"]) == names
    assert set(res["epochs"]["big"]) == names | {"shuffle_buffer", "inmemory"}
    for name in names:
        assert res["epochs"]["big"][name]["status"] == "ok", res["epochs"]["big"][name]
        assert res["epochs"]["big"][name]["records"] > 0
    assert set(res["summary"]["rss"]) == names
    assert set(res["plan"]["rows"]) == {"instance", "group", "window"}
    assert "stderr" not in r.stdout and "lirs-group-64K" in r.stdout


def test_memory_growth_beyond_the_plan_tables(bs):
    # the plan's per-unit tables are the only state that should grow with the data: growth made of
    # them counts as independent of the size, growth beyond them does not
    def row(anon):
        return {"status": "ok", "sampled": {"pss": anon + 10, "anon": anon, "file": 10, "rss": anon + 10},
                "vm_hwm_bytes": anon + 10}
    small, big = {"g": row(100), "w": row(100)}, {"g": row(130), "w": row(145)}
    tables = {"g": {"small": 2, "big": 32}, "w": {"small": 2, "big": 32}}
    r = bs.rss_growth(small, big, tables)
    assert r["g"]["plan_tables"]["growth"] == 30
    assert r["g"]["anon"]["big_over_small_beyond_plan"] == pytest.approx(1.0)
    assert r["g"]["independent_of_size"] is True
    assert r["w"]["anon"]["big_over_small_beyond_plan"] == pytest.approx(1.15)
    assert r["w"]["independent_of_size"] is False
    assert bs.rss_growth(small, big)["g"]["independent_of_size"] is False  # without the tables: 1.3x
    # RSS, not PSS, with the private memory: shared file pages split among more processes on one
    # file than on the other move PSS, not what the process holds
    big["g"]["sampled"]["pss"] = 500
    assert bs.rss_growth(small, big, tables)["g"]["independent_of_size"] is True
    big["g"]["sampled"]["rss"] = 200  # 70 more file-backed pages on the big file
    assert bs.rss_growth(small, big, tables)["g"]["independent_of_size"] is False


def test_work_dir_removes_what_a_killed_run_left(bs, tmp_path):
    dead = tmp_path / ".scale-999999999-abcd"  # no such process
    dead.mkdir()
    (dead / "x").write_text("left")
    mine = bs.work_dir(str(tmp_path))
    assert not dead.exists() and os.path.isdir(mine)
    assert os.path.basename(mine).startswith(f".scale-{os.getpid()}-")
    assert bs.work_dir(str(tmp_path)) != mine and os.path.isdir(mine)  # a live run's is left alone
