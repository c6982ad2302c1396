"""benchmarks/bench_memfs.py on a small file: every setting named with the engine it opened, the
ratios against ``buffered`` of the same round, and the default's reads on tmpfs."""
from __future__ import annotations

import json
import os

from lirs.mounts import in_memory

from conftest import benchmark_module


def _module():
    return benchmark_module("bench_memfs")


def test_settings_rounds_and_the_default_on_tmpfs(tmp_path, shm_dir):
    bm = _module()
    out = tmp_path / "memfs.json"
    assert bm.main(["--size", "2MB", "--dir", str(tmp_path / "data"), "--shm", os.path.join(shm_dir, "c"),
                    "--granularities", "instance", "--settings", "buffered,auto", "--rounds", "2", "--epochs", "1",
                    "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    runs, summary = d["runs"]["instance"], d["summary"]["instance"]
    assert [r["round"] for r in runs["buffered"]] == [1, 2] and len(runs["auto"]) == 2
    assert summary["buffered"]["engine"] == "buffered" and not summary["buffered"]["direct"]
    assert summary["buffered"]["vs_buffered"] == 1.0
    want = sorted(a["records_per_s"] / b["records_per_s"] for a, b in zip(runs["auto"], runs["buffered"]))
    assert summary["auto"]["vs_buffered"] == sum(want) / 2
    assert d["data"]["path"].startswith(shm_dir)
    if in_memory(shm_dir):
        assert summary["auto"]["engine"] == "buffered" and not summary["auto"]["direct"]
        assert all("held in memory" in r["reason"] for r in runs["auto"])
