"""benchmarks/bench_joins.py on a small file: window batches' pieces joined in the main process of
DataLoader workers are timed both ways on the same pieces, per epoch, and written to its JSON."""
from __future__ import annotations

import json
import os

from conftest import benchmark_module


def test_every_join_is_timed_both_ways(tmp_path, shm_dir):
    import lirs.workers

    bm = benchmark_module("bench_joins")
    join = lirs.workers.join_outputs
    out = tmp_path / "joins.json"
    assert bm.main(["--size", "2MB", "--dir", os.path.join(shm_dir, "j"), "--window", "64K", "--epochs", "2",
                    "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["workers"] == 2 and len(d["epochs"]) == 2
    for e in d["epochs"]:
        assert e["joins"] > 0 and e["lirs_ms"] > 0 and e["torch_cat_ms"] > 0
        assert 0 < e["lirs_slowest_ms"] <= e["lirs_ms"] and 0 < e["torch_cat_slowest_ms"] <= e["torch_cat_ms"]
    assert set(d["lirs_vs_torch_cat"]) == {"join_ms_per_epoch", "slowest_join"}
    assert lirs.workers.join_outputs is join  # the timing wrapper is gone with the run
