"""`lirs demo` end to end on a tiny sample: table, JSON, plot, next steps; argument errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

LIRS = [sys.executable, "-m", "lirs.cli"]


def _lirs(*args, cwd=None):
    return subprocess.run([*LIRS, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.slow
def test_demo_end_to_end(tmp_path):
    d = tmp_path / "demo"
    r = _lirs("demo", "--size", "2MB", "--epochs", "2", "--dir", str(d), "--reference-epochs", "50")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    for m in ("lirs-group", "lirs-window", "bmf", "shuffle_buffer", "sequential"):
        assert m in out
    assert "lirs bench" in out and "lirs quality" in out
    res = json.loads((d / "demo.json").read_text())
    assert set(res["methods"]) == {"lirs-group", "lirs-window", "bmf", "shuffle_buffer", "sequential"}
    n = res["n"]
    for m, rec in res["methods"].items():
        assert len(rec["per_epoch"]) == 2
        assert all(p["objective"] > 0 for p in rec["per_epoch"])
        # every method trains on the whole data set: the objective is at or above the optimum
        assert all(p["objective"] >= res["f_star"] * (1 - 1e-9) for p in rec["per_epoch"]), m
    for m in ("lirs-group", "lirs-window"):
        amp = res["methods"][m]["per_epoch"][-1]["amplification"]
        assert amp is not None and amp >= 1.0
    assert n > 1000
    try:
        import matplotlib  # noqa: F401
        assert (d / "demo.png").stat().st_size > 0
    except ImportError:
        assert "matplotlib is not installed" in out
    # a second run reuses the sample
    r2 = _lirs("demo", "--size", "2MB", "--epochs", "1", "--dir", str(d), "--methods", "lirs-group,sequential")
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "reusing" in r2.stdout


def test_demo_user_data_and_errors(tmp_path):
    from lirs.eval.gen import generate

    p = tmp_path / "mine.svm"
    generate("kdd", str(p), records=1500, seed=2, progress=False)
    r = _lirs("demo", "--data", str(p), "--epochs", "1", "--dir", str(tmp_path / "d"),
              "--methods", "bmf,sequential", "--reference-epochs", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "bmf" in r.stdout and "sequential" in r.stdout
    assert not list((tmp_path / "d").glob("kdd-sorted*")), "no sample generated when --data is given"
    assert not list((tmp_path / "d").glob("*.bmf-blocks")), "BMF's block file is removed"
    bad = _lirs("demo", "--data", str(tmp_path / "nope.svm"), "--dir", str(tmp_path / "d"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    bad = _lirs("demo", "--methods", "lirs-group,magic", "--dir", str(tmp_path / "d"))
    assert bad.returncode == 2 and "magic" in bad.stderr
    h = tmp_path / "h.npy"
    generate("higgs", str(h), records=100, seed=1, progress=False)
    bad = _lirs("demo", "--data", str(h), "--dir", str(tmp_path / "d"))
    assert bad.returncode == 2 and "LIBSVM" in bad.stderr
