"""benchmarks/bench_aepoch.py on a small file: aepoch against epoch in one process, this tree
against a checkout of itself, and the loop's largest gap recorded."""
from __future__ import annotations

import json
import os

from conftest import benchmark_module


def test_aepoch_against_epoch_this_tree_against_itself(tmp_path, shm_dir):
    bm = benchmark_module("bench_aepoch")
    out = tmp_path / "aepoch.json"
    assert bm.main(["--size", "2MB", "--dir", os.path.join(shm_dir, "a"), "--granularities", "window",
                    "--repeat", "2", "--against", bm.TREE, "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    for name in ("this", "against"):
        m = d["trees"][name]["window"]
        assert len(m["epoch_s"]) == len(m["aepoch_s"]) == len(m["ratios"]) == 2
        assert m["aepoch_over_epoch"] > 0 and all(g >= 0 for g in m["loop_gap_max_s"])
