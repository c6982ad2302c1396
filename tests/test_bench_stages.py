"""benchmarks/bench_stages.py: the planning walk both ways on a small file, and the hand-off count
left null with its reason where perf is missing."""
from __future__ import annotations

import lirs
from lirs.eval.gen import generate

from conftest import benchmark_module


def _module():
    return benchmark_module("bench_stages")


def test_planning_both_ways_and_no_perf(tmp_path, monkeypatch):
    bs = _module()
    p = str(tmp_path / "k.svm")
    generate("kdd", p, records=6000, seed=2, progress=False)
    lirs.build_index(p)
    got = bs.planning(p, 1)
    assert set(got) == set(bs.GRANS)
    for row in got.values():
        assert row["records_per_s"]["deferred"] > 0 and row["records_per_s"]["at_once"] > 0
        assert row["deferred_vs_at_once"] == row["records_per_s"]["deferred"] / row["records_per_s"]["at_once"]
    monkeypatch.setattr(bs.shutil, "which", lambda name: None)
    assert bs.handoffs(p, 1) == {"reason": "perf not found"}
