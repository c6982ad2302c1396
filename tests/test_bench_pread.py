"""benchmarks/bench_pread.py: a short run on a tiny kdd-like file, shared and own descriptors."""
from __future__ import annotations

import json

from conftest import benchmark_module


def test_shared_and_own_descriptors_read_every_extent(tmp_path):
    bp = benchmark_module("bench_pread")
    out = tmp_path / "p.json"
    assert bp.main(["--size", "2MB", "--dir", str(tmp_path / "d"), "--threads", "1,2", "--seconds", "0.2",
                    "--repeat", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [r["threads"] for r in res["rows"]] == [1, 2] and res["data"]["steps"] > 0
    n = res["data"]["reads"]
    for r in res["rows"]:
        assert len(r["runs"]["shared"]) == len(r["runs"]["own"]) == 2
        assert r["shared_reads_per_s"] > 0 and r["own_reads_per_s"] > 0
        assert r["own_vs_shared"] == r["own_reads_per_s"] / r["shared_reads_per_s"]
    assert n > 1000  # an instance epoch of a 2 MB file: a read a record
