"""Shuffle-quality metrics against brute force and exact enumeration; the uniformity tests pass
exact strategies and fail non-uniform ones; evaluate(), the table, the plot and `lirs quality`."""
from __future__ import annotations

import itertools
import json
import os
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fill_fs

from lirs.eval import quality as Q
from lirs.errors import UsageError
from lirs.eval.strategies import STRATEGIES, run_strategy, synthetic_index


def _perm(n, seed):
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


# --------------------------------------------------------------------------- metrics vs brute force


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 400), k=st.integers(1, 12), seed=st.integers(0, 10**6), b=st.integers(1, 50))
def test_metrics_match_brute_force(n, k, seed, b):
    rng = np.random.default_rng(seed)
    order = _perm(n, seed)
    codes = rng.integers(0, k, n).astype(np.int32)
    # (a)
    cps = np.unique(rng.integers(0, n + 1, 7)).astype(np.int64)
    want = [len(set(codes[order[:t]].tolist())) for t in cps]
    assert Q.distinct_seen(order, codes, k, cps).tolist() == want
    # (b)
    b = min(b, n)
    got = Q.batch_label_entropy(order, codes, k, b)
    assert len(got) == n // b
    for j, h in enumerate(got):
        c = np.bincount(codes[order[j * b:(j + 1) * b]], minlength=k)
        p = c[c > 0] / b
        assert h == pytest.approx(float(-(p * np.log2(p)).sum()), abs=1e-9)
    # (c)
    d, rho = Q.displacement(order)
    assert d == pytest.approx(np.abs(np.arange(n) - order).mean() / n)
    if n > 2:
        from scipy.stats import spearmanr

        assert rho == pytest.approx(spearmanr(np.arange(n), order).statistic, abs=1e-9)
    # (d)
    other = _perm(n, seed + 1)
    pos = np.argsort(other)
    again = total = 0
    for lo in range(0, n, b):
        ids = order[lo:lo + b]
        for x, y in itertools.combinations(ids.tolist(), 2):
            total += 1
            again += pos[x] // b == pos[y] // b
    assert Q.repeat_pair_rate(order, other, b) == pytest.approx(again / total if total else 0.0)
    # (e) Streaming's definition: entropy of |diff| frequencies over n-1 steps, for IDs and shard IDs
    shard = int(rng.integers(1, 30))

    def ent(v):
        f = np.bincount(np.abs(np.diff(v)))
        p = f[f > 0] / (len(v) - 1)
        return float(-(p * np.log2(p)).sum())

    assert Q.streaming_entropy(order, shard) == pytest.approx(ent(order) + ent(order // shard), abs=1e-9)
    # (f)
    groups = rng.integers(0, max(1, n // 5), n).astype(np.int64)
    same = tot = 0
    for t in range(1, n):
        if t % b:
            tot += 1
            same += groups[order[t]] == groups[order[t - 1]]
    assert Q.same_group_rate(order, groups, b) == pytest.approx(same / tot if tot else 0.0)


def test_ideals_are_exact_on_tiny_cases():
    # (a) distinct classes among t of n drawn without replacement, by enumerating subsets
    counts = np.array([1, 2, 3])
    n = int(counts.sum())
    cls = np.repeat(np.arange(3), counts)
    for t in range(n + 1):
        subsets = list(itertools.combinations(range(n), t))
        want = np.mean([len(set(cls[list(s)].tolist())) for s in subsets])
        assert Q.expected_distinct_seen(counts, n, [t])[0] == pytest.approx(want)
    # (b) expected plug-in entropy of a batch of 3 out of 6
    ents = []
    for s in itertools.combinations(range(n), 3):
        c = np.bincount(cls[list(s)])
        p = c[c > 0] / 3
        ents.append(-(p * np.log2(p)).sum())
    assert Q.expected_batch_entropy(counts, n, 3) == pytest.approx(np.mean(ents))
    # (c) mean |position - ID| / n over all permutations of 5
    perms = [np.array(p) for p in itertools.permutations(range(5))]
    assert np.mean([Q.displacement(p)[0] for p in perms]) == pytest.approx(Q.ideal_displacement(5))
    # (d) two records sharing a batch (size 2, last batch 1) over all permutations of 5
    share = np.mean([np.flatnonzero(p == 0)[0] // 2 == np.flatnonzero(p == 1)[0] // 2 for p in perms])
    assert Q.ideal_repeat_rate(5, 2) == pytest.approx(share)
    # (f) two random distinct records in the same group
    g = np.array([0, 0, 0, 1, 1, 2])
    pairs = list(itertools.permutations(range(6), 2))
    assert Q.ideal_same_group_rate(g) == pytest.approx(np.mean([g[a] == g[b] for a, b in pairs]))


# --------------------------------------------------------------------------- uniformity (g)


def _uniformity(name, n, epochs, seed, batch, **params):
    idx = synthetic_index(n, 360)
    t = Q.UniformityTest(n, epochs, batch_size=batch)
    for e in range(epochs):
        t.add(run_strategy(name, idx, seed=seed, epoch=e, batch_size=batch, **params).order)
    return t.result()


N, E, B = 3000, 60, 100
EXACT = ("streaming_naive", "two_pass", "terashuf", "instance")


@pytest.mark.parametrize("name", EXACT)
def test_exact_strategies_pass_the_uniformity_tests(name):
    r = _uniformity(name, N, E, 11, B, memory_bytes=360 * 500)
    assert r["position_p"] > Q.PASS_P and r["pair_p"] > Q.PASS_P and r["batch_p"] > Q.PASS_P, r
    assert r["uniform"] is True
    assert r["position_bins"] == 12 and r["position_records"] == N


# Non-uniform ones, on sizes where the effect is large: buffers of 1/30 of the data, chunks of 1/12
# (the round-robin merge: two records of a chunk never share a round), one with a short last chunk
# (its records all come first), and BMF's blocks kept for the run.
NON_UNIFORM = [
    ("shuffle_buffer", dict(buffer_records=100)),
    ("deeplake", dict(buffer_bytes=360 * 100, chunk_bytes=360 * 10)),
    ("chunk_roundrobin", dict(chunk_records=250)),
    ("chunk_roundrobin", dict(chunk_records=400)),
    ("bmf", dict(blocks=6)),
    ("sequential", {}),
]


@pytest.mark.parametrize("name,params", NON_UNIFORM, ids=[f"{n}-{i}" for i, (n, _) in enumerate(NON_UNIFORM)])
def test_non_uniform_strategies_fail(name, params):
    r = _uniformity(name, N, E, 11, B, **params)
    assert min(r["position_p"], r["pair_p"], r["batch_p"]) < Q.FAIL_P, r
    assert r["uniform"] is False


def test_which_test_catches_what():
    # the round-robin merge keeps every record's position uniform: only the pair gaps show it
    rr = _uniformity("chunk_roundrobin", N, E, 11, B, chunk_records=250)
    assert rr["position_p"] > Q.PASS_P and rr["pair_p"] < Q.FAIL_P
    # ... unless its last chunk is short: those records come first
    short = _uniformity("chunk_roundrobin", N, E, 11, B, chunk_records=400)
    assert short["position_p"] < Q.FAIL_P
    # BMF's layout is kept for the run: batch mates meet again
    assert _uniformity("bmf", N, E, 11, B, blocks=6)["batch_p"] < Q.FAIL_P


def test_uniformity_test_arguments():
    t = Q.UniformityTest(10, 3)
    with pytest.raises(UsageError):
        t.result()
    with pytest.raises(UsageError):
        Q.UniformityTest(1, 3)
    t.add(np.arange(10))
    r = t.result()
    assert r["batch_p"] is None and r["position_bins"] == 2  # no batch size: no batch test


# --------------------------------------------------------------------------- evaluate, table, plot


def test_evaluate_on_synthetic_records():
    names = ["sequential", "shuffle_buffer", "two_pass", "instance", "group"]
    res = Q.evaluate(4000, names, epochs=10, batch_size=100, seed=1, classes=40, segments=100,
                     group_bytes=8192, params={"memory_bytes": 360 * 200}, progress=False)
    json.dumps(res)  # JSON-ready
    assert list(res["strategies"]) == names and res["config"]["synthetic"]
    ideal = res["ideal"]
    assert ideal["displacement"] == pytest.approx(1 / 3, abs=1e-4)
    seq = res["strategies"]["sequential"]
    assert seq["displacement"] == 0 and seq["spearman"] == pytest.approx(1.0)
    assert seq["repeat_pairs"] == pytest.approx(1.0)  # same batches every epoch
    assert seq["segments_seen_1pct"] == pytest.approx(0.01)  # 1% of a sorted file: 1% of its segments
    assert seq["all_labels_seen_at"] == pytest.approx((4000 - 100 + 1) / 4000)  # the last class starts at 3900
    assert seq["batch_entropy"] < 0.1  # one class per batch (two at class boundaries)
    for name in ("two_pass", "instance"):
        r = res["strategies"][name]
        assert r["uniformity"]["uniform"] is True and r["exact"]
        assert r["batch_entropy_vs_ideal"] == pytest.approx(1.0, abs=0.02)
        assert r["segments_seen_1pct"] == pytest.approx(ideal["segments_seen_1pct"], abs=0.05)
    assert res["strategies"]["group"]["same_group"] > 10 * ideal["same_group"]
    assert res["strategies"]["shuffle_buffer"]["cost"]["memory_bytes"] == 360 * 200
    for r in res["strategies"].values():
        curve = np.asarray(r["curve_segments"])
        assert (np.diff(curve) >= 0).all() and curve[-1] == pytest.approx(1.0)
    text = Q.format_table(res)
    assert all(name in text for name in names) and "ideal (uniform)" in text
    md = Q.format_markdown(res)
    assert md.count("\n") == len(names) + 2 and md.startswith("| strategy |")


def test_evaluate_on_a_label_sorted_file_uses_its_labels(tmp_path):
    from lirs.eval.gen import generate
    from lirs.build import build_index

    p = str(tmp_path / "k.svm")
    generate("kdd", p, records=3000, seed=4, order="sorted", progress=False)
    idx = build_index(p, progress=False)
    neg = int((idx.labels < 0).sum())
    res = Q.evaluate(idx, ["sequential", "terashuf", "page"], epochs=10, batch_size=64, progress=False)
    assert res["config"]["label_values"] == 2 and not res["config"]["synthetic"]
    seq = res["strategies"]["sequential"]
    assert seq["all_labels_seen_at"] == pytest.approx((neg + 1) / idx.n)  # the first +1 follows every -1
    assert res["strategies"]["terashuf"]["all_labels_seen_at"] < 0.05
    assert res["strategies"]["page"]["cost"]["rand_reads"] > 0
    assert res["config"]["payload_bytes"] == idx.payload_bytes
    png = str(tmp_path / "q.png")
    assert Q.plot(res, png)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_evaluate_errors():
    with pytest.raises(UsageError):
        Q.evaluate(100, ["nope"])
    with pytest.raises(UsageError):
        Q.evaluate(1, ["sequential"])
    with pytest.raises(UsageError):
        Q.evaluate(100, ["sequential"], batch_size=101)
    with pytest.raises(UsageError):
        Q.evaluate(100, ["sequential"], epochs=0)


# --------------------------------------------------------------------------- the command


def test_quality_command(tmp_path, capsys):
    from lirs.cli import main

    out, png = str(tmp_path / "q.json"), str(tmp_path / "q.png")
    assert main(["quality", "--records", "3000", "--epochs", "10", "--batch-size", "100",
                 "--strategies", "sequential,bmf,streaming_py1e,window", "--memory", "10%",
                 "--param", "shard_records=50", "--group-bytes", "8K", "--json", out, "--plot", png]) == 0
    text = capsys.readouterr().out
    assert "streaming_py1e" in text and "pairs again" in text and "p mates" not in text  # the summary
    res = json.load(open(out))
    assert set(res["strategies"]) == {"sequential", "bmf", "streaming_py1e", "window"}
    assert res["strategies"]["streaming_py1e"]["params"]["shard_records"] == 50
    assert res["config"]["params"]["memory_bytes"] == 300 * 360  # 10% of 3000 records of 360 B
    assert res["config"]["group_bytes"] == 8192
    # the groups the budget spans, rounded up as the frontier does (it was rounded down: one budget
    # gave another window alone than among others, and 100% was not one window)
    assert res["config"]["params"]["window"] == -(-300 * 360 // 8192) == 14
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    # the user's own OUT.tmp and OUT.png.tmp.png were the temporaries, replaced and removed
    for mine in (out + ".tmp", png + ".tmp.png"):
        with open(mine, "w") as f:
            f.write("mine")
    assert main(["quality", "--records", "300", "--epochs", "1", "--batch-size", "50", "--strategies", "window",
                 "--json", out, "--plot", png]) == 0
    capsys.readouterr()
    assert open(out + ".tmp").read() == "mine" == open(png + ".tmp.png").read()
    assert not [x for x in os.listdir(tmp_path) if "lirs-tmp" in x]
    assert main(["quality", "--records", "500", "--epochs", "3", "--batch-size", "50", "--strategies",
                 "terashuf", "--markdown", "--wide", "--param", "reshuffle_every_epoch=false"]) == 0
    cap = capsys.readouterr()
    assert "| terashuf |" in cap.out and "too few" in cap.err and "p mates" in cap.out
    assert main(["quality", "--records", "500", "--strategies", "nope"]) == 2
    assert main(["quality", "--records", "500", "--param", "colour=2"]) == 2
    assert main(["quality", "--records", "500", "--memory", "150%"]) == 2
    assert main(["quality", "--records", "500", "--record-bytes", "0"]) == 2  # not "records of 0 B"
    for flag, name in (("--json", "q.json"), ("--plot", "q.png")):  # before the epochs, not after them
        assert main(["quality", "--records", "500", flag, str(tmp_path / "no" / name)]) == 2
    assert main(["quality", "--records", "500", "--plot", "q.jpg"]) == 2
    assert main(["quality", str(tmp_path / "missing.svm")]) == 1
    with pytest.raises(SystemExit):  # a path or --records, not both
        main(["quality", str(tmp_path / "x.svm"), "--records", "5"])


def test_quality_params_are_checked_before_any_work_and_outputs_name_what_ran(tmp_path, capsys, monkeypatch):
    """A bad --param value was found only once earlier strategies had run (or truncated: a buffer
    of 1.5 records was 1, file order); --param group_bytes sized the window otherwise than
    --group-bytes; --param record_bytes was taken and did nothing (every source is an index, whose
    records keep their sizes); --json and --plot of one path lost the results; the header printed
    the window spec ("64M groups") and the columns' help a 64 KiB group whatever --group-bytes."""
    from lirs.cli import main
    from lirs.eval import strategies as S

    ran = []
    real = S.run_strategy
    monkeypatch.setattr(S, "run_strategy", lambda *a, **k: ran.append(a[0]) or real(*a, **k))
    base = ["quality", "--records", "500", "--epochs", "2", "--batch-size", "50", "--strategies", "instance,bmf"]
    for bad, said in ((["--param", "inner=bogus"], "--param inner=bogus: inner must be one of 'shuffle', 'file'"),
                      (["--param", "buffer_records=1.5"], "--param buffer_records=1.5: expected a whole number"),
                      (["--param", "reshuffle_every_epoch=2"], "reshuffle_every_epoch must be one of True, False"),
                      (["--param", "group_bytes=8K"], "--param group_bytes: set it with --group-bytes"),
                      (["--param", "record_bytes=100000"], "--param record_bytes: set it with --record-bytes"),
                      (["--param", "piles=0"], "--param piles=0: expected a positive number"),
                      (["--json", str(tmp_path / "r"), "--plot", str(tmp_path / "r")], "plot would replace"),
                      # these were found by the group strategy or a check of every strategy, after the others ran,
                      # or not at all ("" ran every strategy)
                      (["--group-bytes", "100", "--strategies", "group"], "--group-bytes: must be a multiple of 4096 bytes"),
                      (["--seed", "-1"], "--seed: must be >= 0, got -1"),
                      (["--classes", "0"], "--classes: must be >= 1, got 0"),
                      (["--batch-size", "501"], "--batch-size 501 exceeds --records 500"),
                      (["--strategies", ""], "unknown strategies []")):
        if bad[0] == "--json":
            bad[-1] += ".png"
            bad[1] = bad[-1]
        assert main(base + bad) == 2, bad
        assert said in capsys.readouterr().err, bad
    # a file's records keep their sizes: refused before the file is even opened
    assert main(["quality", str(tmp_path / "x.svm"), "--param", "record_bytes=100"]) == 2
    assert f"the records of {tmp_path / 'x.svm'} have the sizes its index holds" in capsys.readouterr().err
    assert ran == []
    assert main(base + ["--group-bytes", "100", "--strategies", "window"]) == 2 and ran == []
    capsys.readouterr()
    # no lirs group strategy: any size of group for the same-group metric, as before
    assert main(base + ["--group-bytes", "1000", "--strategies", "shuffle_buffer"]) == 0
    capsys.readouterr()
    assert main(base + ["--window", "16K", "--group-bytes", "4K", "--strategies", "window"]) == 0
    out = capsys.readouterr().out
    assert "(lirs window: 4 groups)" in out and "from one 4 KiB group" in out


def test_every_registered_strategy_is_evaluated():
    res = Q.evaluate(600, None, epochs=2, batch_size=20, progress=False)
    assert list(res["strategies"]) == list(STRATEGIES)
    # two epochs: no strategy is called uniform (sequential was, on 3 records); a clear failure still is one
    assert [r["uniformity"]["uniform"] for r in res["strategies"].values()].count(True) == 0
    assert res["strategies"]["sequential"]["uniformity"]["uniform"] is False
    for name, r in res["strategies"].items():
        assert r["cost"]["payload_bytes"] == 600 * 360, name
        assert r["repeat_pairs"] is not None and r["uniformity"]["epochs"] == 2
    assert math.isclose(res["ideal"]["repeat_pairs"], 19 / 599)


# --------------------------------------------------------------------------- the frontier and the summary


def test_frontier_on_synthetic_records():
    n, rb = 6000, 360
    P = n * rb
    budgets = [("16K", 16384), ("5%", P // 20), ("100%", P)]
    names = ["window", "shuffle_buffer", "corgipile", "corgi2"]
    res = Q.frontier(n, budgets, names, epochs=3, batch_size=100, seed=2, group_bytes=8192, classes=20,
                     segments=50, progress=False)
    json.dumps(res)  # JSON-ready
    assert [b["memory"] for b in res["budgets"]] == ["16K", "5%", "100%"]
    # groups the budget spans, rounded up: the whole data is one window
    assert [b["window"] for b in res["config"]["budgets"]] == [2, -(-(P // 20) // 8192), -(-P // 8192)]
    assert set(res["config"]["memory_meaning"]) == set(names)
    rows = res["rows"]
    assert len(rows) == len(names) * len(budgets)
    by = {(r["strategy"], r["memory"]): r for r in rows}
    assert by[("window", "5%")]["params"]["window"] == -(-(P // 20) // 8192)
    assert by[("shuffle_buffer", "5%")]["params"]["buffer_records"] == n // 20
    assert by[("corgipile", "100%")]["params"]["buffer_blocks"] == P // 8192
    assert by[("shuffle_buffer", "16K")]["large_read_share"] == 1.0  # one sequential stream
    for r in rows:
        assert r["pairs_again_x"] > 0 and r["same_group_x"] >= 0 and r["read_x"] >= 1.0
    # more memory, more random: the shuffle buffer and lirs window at 16K against 100%
    for s in ("shuffle_buffer", "window"):
        assert by[(s, "16K")]["pairs_again_x"] > 1.5 * by[(s, "100%")]["pairs_again_x"]
        assert by[(s, "16K")]["same_group_x"] > 3 * by[(s, "100%")]["same_group_x"]
    # Corgi²'s rewrite mixes blocks: far fewer same-group neighbours than CorgiPile at the same buffer
    assert by[("corgi2", "5%")]["same_group_x"] < 0.5 * by[("corgipile", "5%")]["same_group_x"]
    assert by[("corgi2", "5%")]["oneoff_x"] > 1.0 and by[("corgipile", "5%")]["oneoff_x"] == 0
    text = Q.format_summary(res, rows)
    assert text.splitlines()[0].split() == ["strategy", "memory", "RAM", "read", "x", "in", ">=64K", "pairs",
                                            "again", "same", "grp", "label", "H"]
    assert Q.format_summary(res, rows, markdown=True).startswith("| strategy | memory | RAM |")
    wide = Q.format_frontier_wide(res)
    assert wide.count("memory ") >= 3 and "p mates" in wide
    with pytest.raises(UsageError):
        Q.frontier(n, budgets, ["nope"], epochs=1)
    with pytest.raises(UsageError):
        Q.frontier(n, budgets, names, epochs=1, params={"window": 3})
    with pytest.raises(UsageError):
        Q.frontier(n, [("0", 0)], names, epochs=1)


def test_frontier_ideal_streaming_entropy_is_per_budget():
    """Streaming's shards are a tenth of M's records, so the ideal Streaming entropy follows M: a
    frontier kept the first budget's ideal for every budget, in its JSON and in every --wide table."""
    n = 4000
    budgets = [("16K", 16384), ("100%", n * 360)]
    fr = Q.frontier(n, budgets, ["instance"], epochs=2, batch_size=50, progress=False)
    wide = [line.split() for line in Q.format_frontier_wide(fr).splitlines() if line.startswith("ideal (uniform)")]
    alone = [Q.evaluate(n, ["instance"], epochs=1, batch_size=50, params={"memory_bytes": m}, progress=False)
             for _, m in budgets]
    # the stream H column of each budget's ideal row
    assert [row[8] for row in wide] == [f"{a['ideal']['streaming_entropy']:.2f}" for a in alone]
    for b, a in zip(fr["budgets"], alone):
        ideal = a["ideal"]["streaming_entropy"]
        assert b["ideal"]["streaming_entropy"] == pytest.approx(ideal)
        assert b["shard_records"] == a["config"]["shard_records"]
        r = b["strategies"]["instance"]
        assert r["streaming_entropy_vs_ideal"] == pytest.approx(r["streaming_entropy"] / ideal)
    assert abs(fr["budgets"][0]["ideal"]["streaming_entropy"] - fr["budgets"][1]["ideal"]["streaming_entropy"]) > 0.1
    # no one budget's value stands for all of them
    assert fr["ideal"]["streaming_entropy"] is None and fr["config"]["shard_records"] is None
    assert fr["ideal"]["batch_entropy"] == fr["budgets"][1]["ideal"]["batch_entropy"]


def test_default_budgets():
    assert Q.default_budgets(500_000_000) == [("1M", 1 << 20), ("4M", 4 << 20), ("16M", 16 << 20),
                                              ("5%", 25_000_000), ("64M", 64 << 20), ("256M", 256 << 20),
                                              ("100%", 500_000_000)]
    assert Q.default_budgets(100_000) == [("5%", 5000), ("100%", 100_000)]


def test_memory_budgets_parsing():
    from lirs.commands.quality import memory_budgets

    assert memory_budgets("1M,5%", 1_000_000) == [("1M", 1 << 20), ("5%", 50_000)]
    assert memory_budgets("64K,64K", 10**6) == [("64K", 65536)]  # repeats dropped
    assert memory_budgets("sweep", 10**6) == Q.default_budgets(10**6)
    for bad, what in (("1M,,5%", "empty budget"), ("4X", "expected a size like 64M"), ("150%", r"\(0%, 100%\]"),
                      ("", "empty budget"), ("x%", "share like 5%"), ("0", "positive")):
        with pytest.raises(UsageError, match=what) as e:
            memory_budgets(bad, 10**6)
        assert "--memory" in str(e.value)


def test_quality_command_summary_wide_and_frontier(tmp_path, capsys):
    from lirs.cli import main

    base = ["quality", "--records", "3000", "--epochs", "2", "--batch-size", "100", "--group-bytes", "8K"]
    assert main(base + ["--strategies", "shuffle_buffer,window"]) == 0
    cap = capsys.readouterr()
    head = cap.out.splitlines()[1]
    assert all(c in head for c in Q.SUMMARY_COLUMNS) and "p mates" not in cap.out
    assert "lirs window: 7 groups" in cap.out  # 5% of 1.08 MB (54,000 B) over 8 KiB groups, rounded up
    assert "[1/2] shuffle_buffer" in cap.err and "[2/2] window" in cap.err  # a line per step off a terminal
    assert main(base + ["--strategies", "shuffle_buffer,window", "--wide", "--window", "4"]) == 0
    cap = capsys.readouterr()
    assert "p mates" in cap.out and "seg@1%" in cap.out and "lirs window: 4 groups" in cap.out
    out, png = str(tmp_path / "f.json"), str(tmp_path / "f.png")
    assert main(base + ["--memory", "16K,10%,100%", "--strategies", "window,corgipile", "--json", out,
                        "--plot", png]) == 0
    cap = capsys.readouterr()
    body = [line.split()[:2] for line in cap.out.splitlines() if line.startswith(("window ", "corgipile "))]
    assert body == [[s, m] for s in ("window", "corgipile") for m in ("16K", "10%", "100%")]
    assert "[6/6]" in cap.err
    res = json.load(open(out))
    assert [b["memory"] for b in res["config"]["budgets"]] == ["16K", "10%", "100%"] and len(res["rows"]) == 6
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert main(base + ["--memory", "16K,10%", "--wide", "--strategies", "window"]) == 0
    assert capsys.readouterr().out.count("p mates") >= 2  # every budget's full table
    assert main(base + ["--memory", "1M,4Q"]) == 2
    assert "--memory '4Q'" in capsys.readouterr().err
    assert main(base + ["--memory", "16K,10%", "--window", "4"]) == 2
    assert "--window" in capsys.readouterr().err
    assert main(base + ["--param", "window=3"]) == 2
    assert main(base + ["--window", "0"]) == 2


def test_every_plot_letters_its_panels(monkeypatch, tmp_path):
    from matplotlib.figure import Figure

    titles = []
    save = Figure.savefig

    def spy(fig, *a, **k):
        titles.append([ax.get_title() for ax in fig.axes if ax.get_title()])
        return save(fig, *a, **k)

    monkeypatch.setattr(Figure, "savefig", spy)
    res = Q.evaluate(1000, ["sequential", "window"], epochs=2, batch_size=50, progress=False)
    assert Q.plot(res, str(tmp_path / "a.png"))
    fr = Q.frontier(1000, [("8K", 8192), ("100%", 360_000)], ["window", "shuffle_buffer"], epochs=2, batch_size=50,
                    group_bytes=8192, progress=False)
    assert Q.plot_frontier(fr, str(tmp_path / "b.png"))
    assert len(titles) == 2 and [len(t) for t in titles] == [4, 2]
    for t in titles:
        assert [x[:3] for x in t] == [f"({c})" for c in "abcd"[:len(t)]], t


def test_progress_modes(capsys):
    assert Q.progress_mode(False) == "off" and Q.progress_mode(True) == "bar"
    assert Q.progress_mode("auto") in ("bar", "lines") and Q.progress_mode("lines") == "lines"
    with pytest.raises(UsageError):
        Q.progress_mode("loud")
    p = Q.Progress(2, 1, "lines")
    p.start("window at 5%")
    p.epoch()
    p.epoch()
    p.done("ok")
    p.close()
    assert "lirs quality: [1/1] window at 5% in" in capsys.readouterr().err


def test_the_position_test_holds_for_records_that_move_together():
    """lirs group places every record uniformly, its group's records together: the position test
    widens its law by the dependence it estimates from the epochs (scale ~ records per group, here
    about 180), where summing records as if independent gave p-values from 1 down to 1e-51."""
    for seed in range(6):
        r = _uniformity("group", N, 20, seed, B)
        assert r["position_p"] > Q.PASS_P, (seed, r)
        assert 50 < r["position_scale"] < 400, (seed, r)
    r = _uniformity("instance", N, 20, 3, B)
    assert r["position_p"] > Q.PASS_P and r["position_scale"] < 2


def test_trace_estimate_is_the_unbiased_one_over_distinct_epochs():
    """trace_of_square against its definition, sums over distinct epochs (Chen and Qin)."""
    from math import perm

    from lirs.eval.quality.metrics import trace_of_square

    rng = np.random.default_rng(0)
    e = 6
    V = rng.normal(size=(e, 5)) + 3.0
    G = V @ V.T
    dist = lambda k: itertools.permutations(range(e), k)  # noqa: E731
    a2 = sum(G[i, j] ** 2 for i, j in dist(2))
    a3 = sum(G[i, j] * G[j, k] for i, j, k in dist(3))
    a4 = sum(G[i, j] * G[k, l] for i, j, k, l in dist(4))
    want = a2 / perm(e, 2) - 2 * a3 / perm(e, 3) + a4 / perm(e, 4)
    assert trace_of_square(G) == pytest.approx(want, rel=1e-9)


def test_the_batch_test_folds_a_short_last_run_into_the_one_before():
    """995 records, batches of 8: runs of 71 positions left a last run of 1 record whose cells
    expected ~0.001 each; an exact uniform order then failed (p ~ 1e-33)."""
    from lirs.eval.kernels import quality as K

    t = Q.UniformityTest(995, 20, batch_size=8)
    assert (t.unit, t.batches) == (71, 14)  # 13 runs of 71, the last of 72
    r = _uniformity("instance", 995, 20, 14, 8)
    assert r["batch_p"] > Q.PASS_P and r["batch_df"] == 19 * 13 ** 2, r
    # the statistic by its definition, runs as the test cuts them
    rng = np.random.default_rng(1)
    a, b = rng.permutation(995), rng.permutation(995)
    pos_b = np.argsort(b)
    run_a = np.minimum(np.arange(995) // 71, 13)
    table = np.zeros((14, 14))
    np.add.at(table, (run_a, np.minimum(pos_b[a] // 71, 13)), 1)
    s = table.sum(axis=1)
    want = (table ** 2 * 995 / np.outer(s, s)).sum() - 995
    assert K.batch_table_stat(a, pos_b, 71) == pytest.approx(want)


def test_quality_names_the_file_and_the_argument_it_refuses(tmp_path, capsys):
    """A dataset of one record said "need at least 2 records, got 1" (which file?), and --segments 0
    "epochs, batch_size and segments must be >= 1, got 1, 64, 0"."""
    from lirs.cli import main

    p = tmp_path / "one.svm"
    p.write_text("1 3:1\n")
    assert main(["index", str(p), "--quiet"]) == 0
    assert main(["quality", str(p), "--epochs", "1", "--batch-size", "1"]) == 2
    assert f"need at least 2 records, got 1 of {p}" in capsys.readouterr().err
    assert main(["quality", "--records", "100", "--epochs", "1", "--segments", "0"]) == 2
    assert "error: --segments: must be >= 1, got 0" in capsys.readouterr().err


def _tiny(tmp_path, n=2):
    """An indexed libsvm file of ``n`` records (a few bytes each), both labels."""
    from lirs.cli import main

    p = tmp_path / "tiny.svm"
    p.write_text("".join(f"{1 if i % 2 else -1} {i % 7 + 1}:1\n" for i in range(n)))
    assert main(["index", str(p), "--quiet"]) == 0
    return p


def _rows(text, name):
    return [line.split() for line in text.splitlines() if line.startswith(name + " ")]


def test_a_budget_given_twice_is_one_budget_and_labelled_so(tmp_path, capsys):
    """--memory 5%,5% ran once (repeats were dropped) but its row and the JSON called it "5%,5%"."""
    from lirs.cli import main

    out = str(tmp_path / "q.json")
    assert main(["quality", "--records", "3000", "--epochs", "1", "--batch-size", "100", "--strategies", "window",
                 "--memory", "5%,5%", "--json", out]) == 0
    text = capsys.readouterr().out
    assert [r[:2] for r in _rows(text, "window")] == [["window", "5%"]] and "5%,5%" not in text
    res = json.load(open(out))
    assert res["config"]["memory"] == "5%" and res["config"]["params"]["memory_bytes"] == 54_000


def test_a_share_the_floor_raised_is_labelled_by_the_bytes_it_gives(tmp_path, capsys):
    """A share's budget is at least 4096 B: on 2 records (13 B) "5%" gave 4 kB, 315 times the data,
    and the table called it 5%. It is now at most the data, and labelled with the bytes used."""
    from lirs.cli import main
    from lirs.commands.quality import memory_budgets

    assert memory_budgets("5%", 50_000) == [("4,096 B (5% raised)", 4096)]
    assert memory_budgets("5%,100%", 13) == [("13 B (5% raised)", 13)]  # the floor is the data, at most
    assert memory_budgets("5%", 100_000) == [("5%", 5000)]  # not raised: the share asked
    assert Q.default_budgets(13) == [("100%", 13)] and Q.default_budgets(50_000)[0] == ("4,096 B (5% raised)", 4096)
    p = _tiny(tmp_path)
    out = str(tmp_path / "q.json")
    assert main(["quality", str(p), "--epochs", "1", "--batch-size", "1", "--strategies", "shuffle_buffer",
                 "--json", out]) == 0
    cap = capsys.readouterr()
    assert "note: --memory 5% of the 13 B of data is under the floor of 4,096 B" in cap.err
    assert "memory budget 13 B " in cap.out and _rows(cap.out, "shuffle_buffer")[0][1:5] == ["13", "B", "(5%",
                                                                                              "raised)"]
    assert json.load(open(out))["config"]["memory"] == "13 B (5% raised)"


def test_batches_of_one_record_have_no_same_group_ratio(tmp_path, capsys):
    """With --batch-size 1 no batch has neighbours, and "same grp" printed 0x (0 of 0 against an
    ideal of 1x): a ratio that means nothing, now "-" as "pairs again" is."""
    from lirs.cli import main

    out = str(tmp_path / "q.json")
    assert main(["quality", "--records", "300", "--epochs", "1", "--batch-size", "1", "--strategies", "window",
                 "--json", out]) == 0
    text = capsys.readouterr().out
    assert _rows(text, "window")[0][-3:-1] == ["-", "-"] and "0x" not in text  # pairs again, same grp
    assert _rows(text, "ideal")[0][-3:-1] == ["-", "-"]  # no ideal pairs or neighbours either
    res = json.load(open(out))
    assert res["ideal"]["same_group"] is None and res["strategies"]["window"]["same_group"] is None
    assert res["strategies"]["window"]["same_group_vs_ideal"] is None


def test_synthetic_only_options_are_refused_with_a_path(tmp_path, capsys):
    """--classes and --record-bytes size synthetic records; with a PATH they were silently ignored
    (the file's labels and sizes were used). Refused, naming the option, before the file is opened."""
    from lirs.cli import main

    missing = tmp_path / "missing.svm"
    for flag, v in (("--classes", "7"), ("--record-bytes", "99")):
        assert main(["quality", str(missing), flag, v]) == 2
        err = capsys.readouterr().err
        assert f"{flag} applies only to synthetic records (--records N, without a PATH)" in err and str(missing) in err
    p = _tiny(tmp_path, 3)
    assert main(["quality", str(p), "--epochs", "1", "--batch-size", "1", "--strategies", "sequential"]) == 0
    capsys.readouterr()


def test_the_window_reported_is_at_most_the_groups_of_the_data(tmp_path, capsys):
    """--window auto (16 MiB at least) was reported as "256 groups" on 7.2 MB of data, 110 groups
    of 64 KiB; a 16M budget of a frontier too. The window holds every group, in the same order."""
    from lirs.cli import main

    out = str(tmp_path / "q.json")
    base = ["quality", "--records", "20000", "--epochs", "1", "--batch-size", "64", "--strategies", "window"]
    assert main(base + ["--window", "auto", "--json", out]) == 0
    assert "(lirs window: 110 groups)" in capsys.readouterr().out
    res = json.load(open(out))
    assert res["config"]["groups"] == 110 and res["config"]["params"]["window"] == 110
    assert res["strategies"]["window"]["params"]["window"] == 110
    assert main(base + ["--memory", "16M,1M", "--json", out]) == 0
    capsys.readouterr()
    res = json.load(open(out))
    assert [b["window"] for b in res["config"]["budgets"]] == [16, 110] == [b["window"] for b in res["budgets"]]


def _stdout(kind):
    """A stdout whose reader has gone (`| true`: writes fail with EPIPE) or that is full (`> /dev/full`)."""
    if kind == "gone":
        r, w = os.pipe()
        os.close(r)
        return os.fdopen(w, "w")
    return open("/dev/full", "w")


@pytest.mark.parametrize("kind", ["gone", "full"])
def test_quality_writes_its_files_before_a_failing_stdout(tmp_path, kind):
    """`lirs quality ... --json q.json --plot q.png | true` exited 0 silently and wrote neither file:
    the table was printed first, and the broken pipe ended the command before the files were written
    (`> /dev/full` lost them too). The files come first now; the stdout failure after them."""
    import subprocess
    import sys

    pytest.importorskip("matplotlib")
    if kind == "full" and not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    out, png = str(tmp_path / "q.json"), str(tmp_path / "q.png")
    with _stdout(kind) as stdout:
        r = subprocess.run([sys.executable, "-m", "lirs", "quality", "--records", "500", "--epochs", "2",
                            "--batch-size", "50", "--strategies", "sequential", "--json", out, "--plot", png],
                           stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    assert json.load(open(out))["strategies"].keys() == {"sequential"}, r.stderr
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    if kind == "gone":  # a reader that left: quiet, as Unix tools are
        assert r.returncode == 0 and "Broken pipe" not in r.stderr, r.stderr
    else:
        assert r.returncode == 1 and "error: standard output: No space left on device" in r.stderr, r.stderr


def test_quality_plot_says_a_matplotlib_that_cannot_be_imported_is_installed(tmp_path, capsys, matplotlib_broken):
    """`lirs quality --plot` with a matplotlib that fails to import (3.7.0-3.7.2 under NumPy 2) said
    "matplotlib is not installed (pip install matplotlib)", which pip answers with "already satisfied"."""
    from lirs.cli import main

    png = tmp_path / "q.png"
    assert main(["quality", "--records", "300", "--epochs", "1", "--batch-size", "50", "--strategies", "sequential",
                 "--plot", str(png)]) == 0
    err = capsys.readouterr().err
    assert "no plot: matplotlib is installed but cannot be imported: numpy.core.multiarray failed to import" in err
    assert "pip install --upgrade matplotlib" in err and "not installed" not in err, err
    assert not png.exists()


@pytest.mark.parametrize("args, said", [
    (["--segments", "0"], "--segments: must be >= 1, got 0"),
    (["--window", "0"], "--window: must be a group count >= 1"),
    (["--group-bytes", "12x"], "--group-bytes: cannot read size '12x'"),
    (["--group-bytes", "0"], "--group-bytes: must be positive, got '0'")])
def test_quality_usage_errors_name_the_option(capsys, args, said):
    """--segments 0 said "segments must be >= 1", --window 0 "window must be ...", --group-bytes 12x
    "cannot read size '12x'": the library's parameter or nothing, not the option the user typed."""
    from lirs.cli import main

    assert main(["quality", "--records", "100", "--epochs", "1", *args]) == 2
    assert f"lirs quality: error: {said}" in capsys.readouterr().err


@pytest.mark.parametrize("flag,name", [("--json", "q.json"), ("--plot", "q.png")])
def test_a_full_disk_under_json_or_plot_names_the_file(full_fs, capsys, flag, name):
    """ENOSPC writing the results or the plot (the same writers as `lirs bench --json` and demo.json)
    said "No space left on device" and named no file: it names the output, and leaves no temporary."""
    from lirs.cli import main

    if flag == "--plot":
        pytest.importorskip("matplotlib")
    fill_fs(full_fs)
    out = full_fs / name
    assert main(["quality", "--records", "300", "--epochs", "1", "--batch-size", "50", "--strategies", "sequential",
                 flag, str(out)]) == 1
    err = capsys.readouterr().err
    assert f"error: {out}: No space left on device" in err, err
    assert sorted(os.listdir(full_fs)) == ["fill"]
