"""benchmarks/bench_extents.py: one tree, and two trees in turns, on a tiny kdd-like file."""
from __future__ import annotations

import json

import pytest

from conftest import benchmark_module


@pytest.fixture(scope="module")
def be():
    return benchmark_module("bench_extents")


def test_two_trees_in_turns_give_each_ones_medians_and_their_ratio(be, tmp_path, capsys):
    out = tmp_path / "e.json"
    assert be.main(["--size", "2MB", "--dir", str(tmp_path / "d"), "--epochs", "2", "--rounds", "2",
                    "--granularities", "instance", "--trees", be.TREE, be.TREE, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    (tree,) = res["trees"]  # the same checkout twice: one entry, measured in both turns
    runs = res["runs"][tree]["instance"]
    assert len(runs) == 8 and all(r["ms"] > 0 and r["steps"] > 0 and r["faults"] >= 0 for r in runs)
    assert res["summary"][tree]["instance"]["steps"] == runs[0]["steps"]
    assert "round 1" in capsys.readouterr().out


def test_an_unknown_granularity_is_refused_before_any_data_is_made(be, tmp_path, capsys):
    with pytest.raises(SystemExit):
        be.main(["--granularities", "instances", "--dir", str(tmp_path / "d")])
    assert "unknown granularities instances" in capsys.readouterr().err and not (tmp_path / "d").exists()
