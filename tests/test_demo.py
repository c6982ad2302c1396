"""`lirs demo`: the default run (the README's first command) end to end, its reuse of the sample
and the index, where it writes, the computed verdict, the two-panel plot, argument errors, and the
paper's headline it quotes from the packaged summary of benchmarks/bench_paper.py."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from lirs.eval.demo import AXES, default_out, one_time_costs, outcome, steady_state, verdict
from lirs.eval.demo_report import figure, headline_lines, verdict_lines

LIRS = [sys.executable, "-m", "lirs.cli"]
FIVE = {"lirs-instance", "lirs-window", "bmf", "shuffle_buffer", "sequential"}


def _lirs(*args, cwd=None, env=None):
    return subprocess.run([*LIRS, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


@pytest.mark.slow
def test_default_demo_then_a_second_run_reuses_sample_and_index(tmp_path):
    cwd, cache = tmp_path / "cwd", tmp_path / "cache"
    cwd.mkdir()
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    env.pop("LIRS_CACHE_DIR", None)  # else the demo goes there
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
    assert f"lirs bench {res['data']}" in out and "lirs quality" in out
    # the paper's headline at full size, quoted from the packaged summary (terminal and demo.json)
    assert res["paper_headline"] == _packaged_summary()
    assert "\n".join(headline_lines(res["paper_headline"])) in out

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
    assert not [n for n in os.listdir(tmp_path / "d") if "bmf-blocks" in n], "BMF's block file is removed"
    bad = _lirs("demo", "--data", str(tmp_path / "nope.svm"), "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "no such file" in bad.stderr
    bad = _lirs("demo", "--methods", "lirs-window,magic", "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "magic" in bad.stderr
    bad = _lirs("demo", "--out", str(p))
    assert bad.returncode == 2 and "is a file" in bad.stderr
    for flag, value in (("--C", "0"), ("--C", "nan"), ("--reference-epochs", "0")):  # not a ZeroDivisionError
        bad = _lirs("demo", "--data", str(p), flag, value, "--out", str(tmp_path / "d"))
        assert bad.returncode == 2 and f"{flag} must be" in bad.stderr, bad.stderr[-2000:]
    assert oct(os.stat(tmp_path / "d" / "demo.json").st_mode & 0o077) != "0o0", "readable as open() makes files"
    h = tmp_path / "h.npy"
    generate("higgs", str(h), records=100, seed=1, progress=False)
    bad = _lirs("demo", "--data", str(h), "--out", str(tmp_path / "d"))
    assert bad.returncode == 2 and "LIBSVM" in bad.stderr


def test_bad_arguments_are_refused_before_any_work(tmp_path):
    """An unknown engine, a negative seed, a zero size, a directory or a non-LIBSVM file as --data,
    no methods: refused before the sample is generated or the kernels warmed (they were refused
    after a 30 MB sample was written, or after the warm-up)."""
    from lirs.errors import UsageError
    from lirs.eval.demo import run_demo

    (tmp_path / "l.jsonl").write_text('{"a": 1}\n')
    out = tmp_path / "out"
    for kw, msg in ((dict(engine="bogus"), "unknown engine 'bogus'"), (dict(seed=-1), "--seed must be"),
                    (dict(size="0"), "--size must be a positive size"),
                    (dict(data=str(tmp_path)), "is a directory"),
                    (dict(data=str(tmp_path / "l.jsonl")), "is lines data"),
                    (dict(methods=[]), "no method given"), (dict(methods=["x", "bmf"]), "unknown method.s. 'x'")):
        said = []
        with pytest.raises(UsageError, match=msg):
            run_demo(out=str(out), say=said.append, **kw)
        assert said == [] and not out.exists(), kw


def test_binary_data_is_refused_as_not_libsvm_without_options_the_demo_has_not(tmp_path):
    """`--data BINARY` said "use --format fixed --record-size N", options `lirs demo` does not take;
    the demo's own check names the file and says it trains on LIBSVM text."""
    from lirs.errors import UsageError
    from lirs.eval.demo import run_demo

    b = tmp_path / "x.bin"
    b.write_bytes(bytes(range(256)) * 4)
    said = []
    with pytest.raises(UsageError) as e:
        run_demo(data=str(b), out=str(tmp_path / "out"), say=said.append)
    assert str(e.value) == (f"--data {b} is not LIBSVM text (byte 0: NUL byte in what should be text); the demo "
                            "trains an SVM on LIBSVM text")
    assert said == [] and not (tmp_path / "out").exists()


def test_data_in_a_read_only_directory_is_indexed_elsewhere_and_given_as_data(tmp_path, monkeypatch):
    """Its sidecar cannot be written beside it (a read-only mount): the error advised --out, which does
    not move the index. It names `lirs index DATA -o DIR/NAME.lirs`, and --data takes that sidecar."""
    import errno

    import lirs
    from lirs.errors import UsageError
    from lirs.eval.demo import ensure_index, run_demo

    p = tmp_path / "t.svm"
    p.write_text("+1 1:1 2:2\n-1 3:1\n+1 4:0.5\n")
    real = lirs.build_index

    def refuse(path, **k):
        raise OSError(errno.EROFS, "Read-only file system", f"{path}.lirs")
    monkeypatch.setattr(lirs, "build_index", refuse)
    with pytest.raises(UsageError, match=rf"{p}.lirs cannot be written \(Read-only file system\); build it where you "
                                         rf"can write: `lirs index {p} -o DIR/NAME.lirs`, then pass that .lirs file "
                                         "as --data"):
        ensure_index(str(p), print)
    side = real(str(p), out=str(tmp_path / "elsewhere.lirs"), progress=False).sidecar
    said = []
    index, seconds, reused = ensure_index(side, said.append)
    assert list(index.paths) == [str(p)] and index.n == 3 and seconds == 0.0 and reused and not os.path.exists(f"{p}.lirs")
    # --data takes a sidecar: its data's format is what is checked
    h = tmp_path / "h.npy"
    np.save(h, np.zeros((4, 2), np.float32))
    other = real(str(h), out=str(tmp_path / "h-elsewhere.lirs"), progress=False).sidecar
    with pytest.raises(UsageError, match="h-elsewhere.lirs is npy data; the demo trains an SVM on LIBSVM text"):
        run_demo(data=other, out=str(tmp_path / "out"), say=said.append)


def test_memory_estimates_never_exceed_what_the_data_can_fill(tmp_path):
    """On a 1,500-record file with batches larger than it, the estimates counted 23 read steps of
    a whole batch's bytes, and the default window's 256 groups (16 MiB) where the file has a few
    (1.6 GB said for a 3 MB file): no step holds more than the data, no more steps than an epoch
    has are in flight, a window holds at most the data's groups."""
    import lirs
    from lirs.eval.compare import compare_svm
    from lirs.eval.gen import generate

    p = tmp_path / "small.svm"
    generate("kdd", str(p), records=1500, seed=2, progress=False)
    index = lirs.build_index(str(p), progress=False)
    res = compare_svm(index, ("lirs-window", "lirs-instance", "sequential", "shuffle_buffer"), epochs=1,
                      batch_size=100_000, reference_epochs=2, workdir=str(tmp_path), window=None, group_bytes=None)
    data = index.payload_bytes
    groups = -(-data // (64 << 10))
    assert res["methods"]["lirs-window"]["loader"]["window"] == groups
    for m, r in res["methods"].items():
        extra = index.index_bytes() + 64 * index.n if m.startswith("lirs-") else 0  # index and plan
        amp = r["per_epoch"][-1].get("amplification") or 1.0  # direct reads of whole blocks hold more
        assert r["memory_bytes"] <= 1.5 * data * amp + extra, (m, r["memory_bytes"], data, amp)


def test_default_out_is_a_cache_directory_never_the_current_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIRS_CACHE_DIR", "mine")  # lirs's own cache first (the verified checks' too), made absolute
    assert default_out() == str(tmp_path / "mine" / "demo")
    monkeypatch.delenv("LIRS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_out() == str(tmp_path / "xdg" / "lirs" / "demo")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_out() == str(tmp_path / "home" / ".cache" / "lirs" / "demo")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not a usable cache: the temporary directory
    monkeypatch.setenv("HOME", "relative")
    assert not default_out().startswith(str(tmp_path)) and os.path.isabs(default_out())
    # one per user: a shared temporary directory holds other users' demos
    assert default_out().split(os.sep)[-2:] == [f"lirs-{os.getuid()}", "demo"]


def _method(rel, hit, reached, epoch_s, pre_s, memory, read, epochs=None, pre_what=None):
    times = epochs or [epoch_s, epoch_s]
    r = {"per_epoch": [{"rel_diff": 5.0, "epoch_s": t} for t in times[:-1]] + [{"rel_diff": rel, "epoch_s": times[-1]}],
         "epochs_to_target": hit, "reached_s": reached, "mean_epoch_s": sum(times) / len(times), "pre_s": pre_s,
         "memory_bytes": memory, "mean_bytes_read": read,
         "elapsed_s": [pre_s + sum(times[:k + 1]) for k in range(len(times))]}
    if pre_what:
        r["pre_what"] = pre_what
    r.update(steady_state(times))
    return r


def _res(methods, target="bmf"):
    return {"methods": methods, "target_method": target, "epochs": 2, "f0_rel_diff": 100.0, "n": 1000,
            "data": "/x/d.svm"}


def test_verdict_says_where_lirs_does_not_win():
    res = _res({"lirs-window": _method(0.01, 1, 1.5, 0.5, 0.2, 6e6, 3.2e7),
                "bmf": _method(0.2, 2, 2.0, 0.8, 0.3, 8e5, 3.0e7),
                "sequential": _method(400.0, None, None, 0.3, 0.0, 2e6, 3.0e7)})
    v = {x["axis"]: x for x in verdict(res)}
    assert [v[a]["outcome"] for a in ("objective", "epochs_to_target", "seconds_to_target")] == ["wins"] * 3
    assert v["seconds_to_target"]["lirs_value"] == pytest.approx(0.5) and v["seconds_to_target"]["other_value"] == 1.6
    assert v["epoch_s"]["outcome"] == "loses" and v["epoch_s"]["other"] == "sequential"
    assert "pre_s" not in v, "pre-processing is a one-time cost, named apart from the verdict"
    assert v["memory"]["other"] == "bmf" and v["bytes_read"]["other_value"] == 3.0e7
    res["verdict"] = list(v.values())
    lines = verdict_lines(res)
    assert "sequential never reaches the target" in "\n".join(lines)
    assert lines[-1] == ("lirs does not win on: seconds per epoch, steady state; memory held while training; "
                         "bytes read per epoch.")


def test_a_verdict_never_reads_as_one_between_equal_numbers():
    """2,997,984 against 3,030,752 bytes read both printed "3.0 MB" beside "lirs wins", and epochs
    of 0.001 s against 0.002 s "0.00 s (0.00-0.00)" beside "lirs loses": the values of a verdict's
    line are printed with as many digits as tell them apart. The header states the margin rule."""
    res = _res({"lirs-window": _method(0.01, 1, 1.0, 0.002, 0.3, 1e5, 2_997_984),
                "bmf": _method(0.2, 2, 2.0, 0.001, 0.3, 8e5, 3_030_752)})
    res["verdict"] = verdict(res)
    lines = verdict_lines(res)
    assert "widened by 25%" in lines[0]
    read = next(ln for ln in lines if "bytes read" in ln)
    assert "lirs wins" in read and "2,997,984 B" in read and "3,030,752 B" in read
    epoch = next(ln for ln in lines if "seconds per epoch" in ln)
    assert "lirs loses" in epoch and "0.002 s (0.002-0.002)" in epoch and "0.001 s (0.001-0.001)" in epoch


def test_verdict_when_lirs_wins_everywhere_ties_or_nothing_compares():
    res = _res({"lirs-window": _method(0.01, 1, 1.0, 0.8, 0.3, 1e5, 1e6),
                "bmf": _method(0.2, 2, 2.0, 0.8, 0.3, 8e5, 3.0e7)})
    res["verdict"] = verdict(res)
    assert [x["axis"] for x in res["verdict"] if x["outcome"] == "ties"] == ["epoch_s"]
    assert verdict_lines(res)[-1] == "lirs does not win on: seconds per epoch, steady state."
    res["methods"]["lirs-window"] = _method(0.01, 1, 1.0, 0.2, 0.3, 1e5, 1e6)
    res["verdict"] = verdict(res)
    assert verdict_lines(res)[-1] == "lirs wins on every axis above."
    # no baseline that sets a target: the target axes are left out; one side only: no verdict at all
    assert {x["axis"] for x in verdict(_res(res["methods"], target=None))} == {
        "objective", "epoch_s", "memory", "bytes_read"}
    assert verdict(_res({"bmf": res["methods"]["bmf"]})) == []


def test_steady_state_sets_the_first_epoch_apart():
    st = steady_state([2.21, 0.20, 0.25, 0.19, 0.22])
    assert st["steady_epoch_s"] == pytest.approx(0.21) and (st["steady_lo_s"], st["steady_hi_s"]) == (0.19, 0.25)
    assert st["first_epoch_extra_s"] == pytest.approx(2.0)
    # a first epoch faster than the steady state owes nothing; one epoch alone is its own steady state
    assert steady_state([0.1, 0.2, 0.3])["first_epoch_extra_s"] == 0.0
    assert steady_state([0.4]) == {"steady_epoch_s": 0.4, "steady_lo_s": 0.4, "steady_hi_s": 0.4,
                                   "first_epoch_extra_s": 0.0}
    with pytest.raises(ValueError):
        steady_state([])


def _run(first_window_epoch, index_s, reused, warmup_s):
    """A demo run on synthetic timings: only what happens once differs between runs."""
    res = _res({"lirs-window": _method(0.003, 3, None, None, index_s, 6e6, 3.1e7,
                                       epochs=[first_window_epoch, 0.205, 0.212, 0.208, 0.188],
                                       pre_what="lirs index (scan once)"),
                "bmf": _method(0.17, 5, None, None, 0.09, 8e5, 3.0e7, epochs=[0.207, 0.278, 0.269, 0.273, 0.237],
                               pre_what="rewrite into 40 blocks"),
                "sequential": _method(300.0, None, None, None, 0.0, 2e6, 3.0e7,
                                      epochs=[0.206, 0.192, 0.165, 0.179, 0.164])})
    res.update(warmup_s=warmup_s, index_reused=reused)
    res["verdict"], res["one_time"] = verdict(res), one_time_costs(res)
    return res


def test_a_first_run_and_a_second_give_the_same_verdict():
    # first run: empty numba cache, the window's first epoch carries 1.4 s of warm-up, the index is built;
    # second run: kernels cached, the index reused (0 s)
    first, second = _run(1.6, 0.126, False, 13.9), _run(0.23, 0.0, True, 0.6)
    key = lambda res: [(x["axis"], x["outcome"], x["lirs"], x["other"]) for x in res["verdict"]]  # noqa: E731
    assert key(first) == key(second)
    v = {x["axis"]: x for x in first["verdict"]}
    # warm-up is excluded: the steady epochs alone give the window's time, in both runs
    assert v["epoch_s"]["lirs_value"] == pytest.approx(0.2065) == {x["axis"]: x for x in second["verdict"]}[
        "epoch_s"]["lirs_value"]
    # 0.19-0.21 s against the file order's 0.16-0.19 s: a margin within the spread is a tie, not a loss
    assert v["epoch_s"]["outcome"] == "ties" and v["seconds_to_target"]["outcome"] == "wins"
    text = "\n".join(verdict_lines(first))
    assert "lirs-window: first epoch beyond the steady state: 1.39 s" in text
    assert "kernels ready" in text and "13.90 s" in text
    assert "lirs-window: lirs index (scan once): 0.13 s" in text
    assert "lirs-window: lirs index (scan once): 0.00 s (reused from an earlier run)" in "\n".join(verdict_lines(second))


def test_a_win_needs_a_margin_beyond_the_spread():
    assert outcome(0.2, 0.3, [0.19, 0.21], [0.27, 0.31]) == "wins"
    assert outcome(0.2, 0.3, [0.19, 0.27], [0.26, 0.31]) == "ties"  # ranges overlap
    # beyond the spread of one run but within what two runs differ by: a tie, not a win (a 0.10 s
    # vs 0.12 s epoch was called a win in one fresh run and a tie in the next)
    assert outcome(0.10, 0.12, [0.09, 0.11], [0.115, 0.12]) == "ties"
    assert outcome(0.3, 0.2, [0.28, 0.31], [0.19, 0.21]) == "loses"
    assert outcome(0.2, None, [0.19, 0.21], None) == "wins"  # the other never reaches the target
    assert outcome(None, None) == "ties" and outcome(3, 5) == "wins" and outcome(5, 5) == "ties"


def test_next_steps_are_commands_that_run():
    import shlex

    from lirs.cli import build_parser
    from lirs.eval.demo_report import next_steps

    parser = build_parser()
    cmds = [c for c, _ in next_steps({"data": "/tmp/my demo/kdd.svm"})]
    assert any(c.startswith("lirs bench ") for c in cmds)
    for c in cmds:
        argv = shlex.split(c)
        if argv[0] == "lirs":
            args = parser.parse_args(argv[1:])  # argparse exits (SystemExit) on a missing PATH
            assert getattr(args, "path", None) in (None, "/tmp/my demo/kdd.svm"), c
        else:
            assert argv[:2] == ["python", "-c"]
            r = subprocess.run([sys.executable, "-c", argv[2]], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0 and "Loader" in r.stdout, r.stderr[-2000:]


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


def test_a_save_stopped_midway_leaves_the_previous_plot_whole(tmp_path, plot_stopped_midway):
    """demo.png was saved straight under its name: a save stopped midway (Ctrl-C, a full disk) left a
    truncated PNG in place of the last good one. It is saved as `lirs quality` saves its plots."""
    from lirs.eval.demo_report import plot

    png = plot_stopped_midway("demo.png")
    res = _res({"lirs-window": _method(0.01, 1, 1.0, 0.2, 0.1, 1e5, 1e6)})
    with pytest.raises(KeyboardInterrupt):
        plot(res, str(png))
    assert png.read_bytes() == b"the previous plot" and os.listdir(tmp_path) == ["demo.png"]


def _demo_without_a_plot(tmp_path, monkeypatch, capsys) -> str:
    """What `lirs demo` prints of its plot where pyplot finds no matplotlib (the run itself stubbed)."""
    import lirs.eval.demo as demo
    import lirs.eval.demo_report as report
    from lirs.cli import main

    monkeypatch.setattr(demo, "run_demo", lambda **kw: {"out": str(tmp_path), "total_s": 1.0})
    monkeypatch.setattr(report, "report_lines", lambda res: [])
    monkeypatch.setattr(report, "next_steps", lambda res: [])
    assert main(["demo", "--out", str(tmp_path)]) == 0
    return next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("plot:"))


def test_a_matplotlib_that_cannot_be_imported_is_said_installed_not_missing(tmp_path, monkeypatch, capsys,
                                                                            matplotlib_broken):
    """matplotlib 3.7.0-3.7.2 under NumPy 2 fail to import: the demo said "matplotlib is missing: pip install
    matplotlib", which pip answers with "already satisfied". It says it is installed and how to upgrade it."""
    line = _demo_without_a_plot(tmp_path, monkeypatch, capsys)
    assert line == (f"plot: not drawn, matplotlib is installed but cannot be imported: numpy.core.multiarray "
                    f"failed to import (reinstall or upgrade it: {sys.executable} -m pip install --upgrade "
                    "matplotlib); then run lirs demo again (it reuses the sample)"), line


def test_a_missing_matplotlib_is_said_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails, and find_spec finds none
    line = _demo_without_a_plot(tmp_path, monkeypatch, capsys)
    assert f"matplotlib is not installed ({sys.executable} -m pip install matplotlib)" in line, line


# ------------------------------------------------------------ the paper's headline, packaged

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _packaged_summary() -> dict:
    from lirs.eval.demo import PAPER_SUMMARY, paper_headline

    h = paper_headline()
    assert h is not None, f"{PAPER_SUMMARY} is missing: benchmarks/bench_paper.py writes it"
    return h


def test_packaged_summary_holds_paper_json_figures():
    """lirs/eval/data/paper_summary.json is what benchmarks/paper_summary.headline makes of the
    committed benchmarks/results/paper.json, and its figures are paper.json's own."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        from paper_summary import headline
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))
    with open(os.path.join(REPO, "benchmarks", "results", "paper.json")) as f:
        paper = json.load(f)
    h = _packaged_summary()
    assert json.loads(json.dumps(headline(paper), default=float)) == h
    red = paper["reductions"]
    assert h["svm"]["file_bytes"] == paper["svm"]["dataset"]["file"]["bytes"]
    assert h["svm"]["records"] == paper["svm"]["dataset"]["n"]
    assert h["dnn"]["file_bytes"] == paper["dnn"]["dataset"]["train_bytes"]
    for part, base in (("svm", "bmf"), ("dnn", "tfip")):
        assert h[part]["target"] == paper[part]["target"]
        assert set(h[part]["total_reduction_pct"]) == {m for m in red[part] if m.startswith("lirs-")}
        for m, per in h[part]["total_reduction_pct"].items():
            for env in paper[part]["devices"]:
                assert per[env] == red[part][m][f"{env}_vs_{base}_{env}_pct"], (part, m, env)
            assert per["paper_form"] == red[part][m][f"nvme_vs_{base}_hdd_pct (paper's form)"]
        for m, r in paper[part]["devices"]["nvme"].items():
            assert h[part]["epochs_to_target"][m] == r["epochs_to_target"]
    assert h["dnn"]["test_acc_gain_points"] == {m: v for m, v in red["dnn"]["test_acc_gain_pct"].items()
                                               if m.startswith("lirs-")}
    assert h["paper"] == {"svm_total_reduction_pct": 49.9, "dnn_total_reduction_pct": 43.5,
                          "dnn_test_acc_gain_pct": 1.01}
    assert paper["svm"]["dataset"]["file"]["bytes"] >= 2e9, "the issue asks for SVM files of at least 2 GB"


def _block_rows(lines, header_start):
    """{method: [cells]} of the table that follows the line starting with ``header_start``."""
    i = next(k for k, x in enumerate(lines) if x.startswith(header_start))
    assert lines[i + 1].split()[0] == "method"
    rows = {}
    for x in lines[i + 2:]:
        if not x.startswith("    lirs-"):
            break
        cells = x.split()
        rows[cells[0]] = cells[1:]
    return rows


def test_demo_report_quotes_the_packaged_headline(monkeypatch):
    """The block's every figure is the packaged summary's, rounded; every loss is named."""
    from lirs.eval import demo_report
    from lirs.eval.demo_report import change, report_lines

    h = _packaged_summary()
    lines = headline_lines(h)
    text = "\n".join(lines)
    assert lines[0].startswith("the paper's headline on lirs's reference machine")
    assert "Paper: LIRS on Optane vs BMF on HDD -49.9%" in text and "vs TFIP on HDD -43.5%" in text
    assert "Paper: +1.01%" in text
    for part, head in (("svm", "  SVM: "), ("dnn", "  DNN: ")):
        p = h[part]
        assert f"{p['file_bytes'] / 1e9:.2f} GB ({p['records']:,} records)" in text
        rows = _block_rows(lines, head)
        assert rows == {m: [change(v) for v in per.values()] for m, per in p["total_reduction_pct"].items()}
    assert _block_rows(lines, "  DNN, target: ") == {
        m: [change(v) for v in per.values()] for m, per in h["dnn"]["total_reduction_relaxed_pct"].items()}
    for m, v in h["dnn"]["test_acc_gain_points"].items():
        assert f"{m} {v:+.2f} points" in text
    # every loss is named on the last line, and only losses
    last = lines[-1]
    for part in ("svm", "dnn"):
        for m, per in h[part]["total_reduction_pct"].items():
            lost = any(v is None or v < 0 for v in per.values())
            assert (f"{part.upper()} {m} (" in last) == lost, (part, m)
    # report_lines ends with the block, after the verdict
    res = {"methods": {}, "verdict": [], "paper_headline": h}
    for fn in ("objective_table", "time_table", "summary_table", "explanations"):
        monkeypatch.setattr(demo_report, fn, lambda r: [])
    assert report_lines(res)[-len(lines):] == lines


def test_headline_block_when_lirs_wins_or_nothing_is_packaged(tmp_path):
    from lirs.errors import LirsError
    from lirs.eval.demo import paper_headline
    from lirs.eval.demo_report import change

    assert [change(v) for v in (81.4, -30.9, 0.0, None)] == ["-81%", "+31%", "-0%", "never"]
    h = _packaged_summary()
    win = json.loads(json.dumps(h))
    for part in ("svm", "dnn"):
        for key in ("total_reduction_pct", "total_reduction_relaxed_pct"):
            for per in win[part].get(key, {}).values():
                for e in per:
                    per[e] = 12.0
    win["dnn"]["test_acc_gain_points"] = {m: 0.5 for m in win["dnn"]["test_acc_gain_points"]}
    assert headline_lines(win)[-1] == "  lirs loses on none of these."
    win["svm"]["total_reduction_pct"]["lirs-window"]["hdd"] = None
    assert headline_lines(win)[-1] == "  lirs loses on: SVM lirs-window (hdd)."
    assert paper_headline(str(tmp_path / "none.json")) is None
    assert "not packaged" in headline_lines(None)[0]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(LirsError, match="bad.json"):
        paper_headline(str(bad))


def test_pyproject_ships_the_summary_as_package_data():
    import glob

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        pats = tomllib.load(f)["tool"]["setuptools"]["package-data"]["lirs.eval"]
    shipped = {p for pat in pats for p in glob.glob(os.path.join(REPO, "lirs", "eval", pat))}
    assert os.path.join(REPO, "lirs", "eval", "data", "paper_summary.json") in shipped
