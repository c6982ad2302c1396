"""Shuffle-quality metrics against brute force and exact enumeration; the uniformity tests pass
exact strategies and fail non-uniform ones; evaluate(), the table, the plot and `lirs quality`."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert "streaming_py1e" in text and "p mates" in text
    res = json.load(open(out))
    assert set(res["strategies"]) == {"sequential", "bmf", "streaming_py1e", "window"}
    assert res["strategies"]["streaming_py1e"]["params"]["shard_records"] == 50
    assert res["config"]["params"]["memory_bytes"] == 300 * 360  # 10% of 3000 records of 360 B
    assert res["config"]["group_bytes"] == 8192
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert main(["quality", "--records", "500", "--epochs", "3", "--batch-size", "50", "--strategies",
                 "terashuf", "--markdown", "--param", "reshuffle_every_epoch=false"]) == 0
    cap = capsys.readouterr()
    assert "| terashuf |" in cap.out and "too few" in cap.err
    assert main(["quality", "--records", "500", "--strategies", "nope"]) == 2
    assert main(["quality", "--records", "500", "--param", "colour=2"]) == 2
    assert main(["quality", "--records", "500", "--memory", "150%"]) == 2
    assert main(["quality", "--records", "500", "--plot", "q.jpg"]) == 2
    assert main(["quality", str(tmp_path / "missing.svm")]) == 1
    with pytest.raises(SystemExit):  # a path or --records, not both
        main(["quality", str(tmp_path / "x.svm"), "--records", "5"])


def test_every_registered_strategy_is_evaluated():
    res = Q.evaluate(600, None, epochs=2, batch_size=20, progress=False)
    assert list(res["strategies"]) == list(STRATEGIES)
    for name, r in res["strategies"].items():
        assert r["cost"]["payload_bytes"] == 600 * 360, name
        assert r["repeat_pairs"] is not None and r["uniformity"]["epochs"] == 2
    assert math.isclose(res["ideal"]["repeat_pairs"], 19 / 599)
