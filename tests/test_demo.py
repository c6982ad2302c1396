"""`lirs demo`: the default run (the README's first command) end to end, its reuse of the sample
and the index, where it writes, the computed verdict, the two-panel plot, argument errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from lirs.eval.demo import AXES, default_out, verdict
from lirs.eval.demo_report import figure, verdict_lines

LIRS = [sys.executable, "-m", "lirs.cli"]
FIVE = {"lirs-instance", "lirs-window", "bmf", "shuffle_buffer", "sequential"}


def _lirs(*args, cwd=None, env=None):
    return subprocess.run([*LIRS, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


@pytest.mark.slow
def test_default_demo_then_a_second_run_reuses_sample_and_index(tmp_path):
    cwd, cache = tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    r = _lirs("demo", cwd=cwd, env=env)  # exactly the README's quickstart command
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert os.listdir(cwd) == [], "the demo writes nothing into the current directory"
    d = cache / "lirs" / "demo"
    res = json.loads((d / "demo.json").read_text())
    assert (d / "demo.png").stat().st_size > 0
    assert set(res["methods"]) == FIVE and res["index_reused"] is False and res["index_s"] > 0
    n, f_star = res["n"], res["f_star"]
    assert n > 50_000
    for m, rec in res["methods"].items():
        eps = rec["per_epoch"]
        assert len(eps) == res["epochs"] == 5
        # every method trains on the whole data set: at or above the optimum, below the untrained model
        assert all(f_star * (1 - 1e-9) <= p["objective"] < res["f0"] * 10 for p in eps), m
        el = rec["elapsed_s"]
        assert el[0] >= (rec["pre_s"] or 0) and all(b > a for a, b in zip(el, el[1:]))
        assert el[-1] == pytest.approx((rec["pre_s"] or 0) + sum(p["epoch_s"] for p in eps))
        # the printed table (b) shows the same seconds as the JSON
        assert re.search(rf"^{m}\s+{rec['pre_s'] or 0:.2f}\s.*\s{el[-1]:.2f}$", out, re.M), m
    assert res["methods"]["lirs-window"]["loader"]["granularity"] == "window"
    assert res["methods"]["shuffle_buffer"]["buffer_records"] == 10_000
    # one line each explains BMF and the shuffle buffer
    assert re.search(r"^  bmf\s+block minimization.*40 random blocks", out, re.M)
    assert re.search(r"^  shuffle_buffer\s+the file read in order through a buffer of 10,000 records", out, re.M)
    assert "(a) training objective per epoch" in out and "(b) seconds since the method began" in out
    # the verdict printed is the one in the JSON, and it names every axis lirs does not win
    v = res["verdict"]
    assert {x["axis"] for x in v} == {a[0] for a in AXES}
    for x in v:
        assert re.search(rf"lirs {x['outcome']}\s+{re.escape(x['what'])}\s+{x['lirs']} .* vs {x['other']} ", out)
    lost = [x["what"] for x in v if x["outcome"] != "wins"]
    assert (("lirs does not win on: " + "; ".join(lost)) if lost else "lirs wins on every axis") in out
    assert "lirs bench" in out and "lirs quality" in out

    r2 = _lirs("demo", "--epochs", "1", "--methods", "lirs-window,sequential", cwd=cwd, env=env)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "data: reusing" in r2.stdout and "0 s to index" in r2.stdout
    res2 = json.loads((d / "demo.json").read_text())
    assert res2["index_reused"] is True and res2["index_s"] == 0.0
    assert res2["methods"]["lirs-window"]["pre_s"] == 0.0
    assert res2["n"] == n and os.listdir(cwd) == []


def test_user_data_and_errors(tmp_path):
    from lirs.eval.gen import generate

    p = tmp_path / "mine.svm"
    generate("kdd", str(p), records=1500, seed=2, progress=False)
    r = _lirs("demo", "--data", str(p), "--epochs", "1", "--out", str(tmp_path / "d"),
              "--methods", "bmf,sequential", "--reference-epochs", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "bmf" in r.stdout and "sequential" in r.stdout
    assert "verdict" not in r.stdout, "no lirs method ran: nothing to compare"
    assert not list((tmp_path / "d").glob("kdd-sorted*")), "no sample generated when --data is given"
    assert not list((tmp_path / "d").glob("*.bmf-blocks")), "BMF's block file is removed"
    bad = _lirs("demo", "--data", str(tmp_path / "nope.svm"), "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    bad = _lirs("demo", "--methods", "lirs-window,magic", "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "magic" in bad.stderr
    bad = _lirs("demo", "--out", str(p))
    assert bad.returncode == 2 and "is a file" in bad.stderr
    h = tmp_path / "h.npy"
    generate("higgs", str(h), records=100, seed=1, progress=False)
    bad = _lirs("demo", "--data", str(h), "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "LIBSVM" in bad.stderr


def test_default_out_is_a_cache_directory_never_the_current_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_out() == str(tmp_path / "xdg" / "lirs" / "demo")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_out() == str(tmp_path / "home" / ".cache" / "lirs" / "demo")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not a usable cache: the temporary directory
    monkeypatch.setenv("HOME", "relative")
    assert not default_out().startswith(str(tmp_path)) and os.path.isabs(default_out())


def _method(rel, hit, reached, epoch_s, pre_s, memory, read):
    return {"per_epoch": [{"rel_diff": 5.0, "epoch_s": epoch_s}, {"rel_diff": rel, "epoch_s": epoch_s}],
            "epochs_to_target": hit, "reached_s": reached, "mean_epoch_s": epoch_s, "pre_s": pre_s,
            "memory_bytes": memory, "mean_bytes_read": read, "elapsed_s": [pre_s + epoch_s, pre_s + 2 * epoch_s]}


def _res(methods, target="bmf"):
    return {"methods": methods, "target_method": target, "epochs": 2, "f0_rel_diff": 100.0, "n": 1000,
            "data": "/x/d.svm"}


def test_verdict_says_where_lirs_does_not_win():
    res = _res({"lirs-window": _method(0.01, 1, 1.5, 0.5, 0.2, 6e6, 3.2e7),
                "bmf": _method(0.2, 2, 2.0, 0.8, 0.3, 8e5, 3.0e7),
                "sequential": _method(400.0, None, None, 0.3, 0.0, 2e6, 3.0e7)})
    v = {x["axis"]: x for x in verdict(res)}
    assert [v[a]["outcome"] for a in ("objective", "epochs_to_target", "seconds_to_target")] == ["wins"] * 3
    assert v["epoch_s"]["outcome"] == "loses" and v["epoch_s"]["other"] == "sequential"
    assert v["pre_s"]["other"] == "sequential" and v["memory"]["other"] == "bmf"
    assert v["bytes_read"]["other_value"] == 3.0e7
    res["verdict"] = list(v.values())
    lines = verdict_lines(res)
    assert "sequential never reaches the target" in "\n".join(lines)
    assert lines[-1] == ("lirs does not win on: seconds per epoch; pre-processing seconds; memory held while "
                         "training; bytes read per epoch.")


def test_verdict_when_lirs_wins_everywhere_ties_or_nothing_compares():
    res = _res({"lirs-window": _method(0.01, 1, 1.0, 0.2, 0.3, 1e5, 1e6),
                "bmf": _method(0.2, 2, 2.0, 0.8, 0.3, 8e5, 3.0e7)})
    res["verdict"] = verdict(res)
    assert [x["axis"] for x in res["verdict"] if x["outcome"] == "ties"] == ["pre_s"]
    assert verdict_lines(res)[-1] == "lirs does not win on: pre-processing seconds."
    res["methods"]["lirs-window"]["pre_s"] = 0.0  # an index reused from an earlier run
    res["verdict"] = verdict(res)
    assert verdict_lines(res)[-1] == "lirs wins on every axis above."
    # no baseline that sets a target: the target axes are left out; one side only: no verdict at all
    assert {x["axis"] for x in verdict(_res(res["methods"], target=None))} == {
        "objective", "epoch_s", "pre_s", "memory", "bytes_read"}
    assert verdict(_res({"bmf": res["methods"]["bmf"]})) == []


def test_plot_has_two_lettered_panels():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    res = _res({"lirs-window": _method(0.01, 1, 1.0, 0.2, 0.1, 1e5, 1e6),
                "bmf": _method(0.2, 2, 2.0, 0.8, 0.3, 8e5, 3.0e7)})
    fig = figure(res)
    a, b = fig.axes
    assert a.get_title(loc="left").startswith("(a) objective per epoch")
    assert b.get_title(loc="left").startswith("(b) objective vs seconds")
    # panel (b) starts every method at 0 s and shifts its first epoch by its pre-processing
    x = b.get_lines()[1].get_xdata()
    assert list(x) == pytest.approx([0.0, 0.3, 1.1, 1.9])
