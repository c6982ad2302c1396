"""The README's Python examples run as written on kdd-like data (29.9M features, as `lirs gen
--profile kdd` makes them) and learn something, each naming its granularity and passing what follows
`batch_size` by keyword; its quickstart is what the fresh-venv check runs; its figures are the
JSONs' own; it stays short and its links lead somewhere."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from conftest import benchmark_module

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
README = os.path.join(ROOT, "README.md")


def _blocks(lang="python", text=None):
    return re.findall(rf"```{lang}\n(.*?)```", text if text is not None else open(README).read(), re.S)


def test_readme_has_usage_examples():
    text = open(README).read()
    usage = text.split("<!-- usage:start -->", 1)[1].split("<!-- usage:end -->", 1)[0]
    blocks = _blocks(text=usage)
    assert len(blocks) >= 3 and any("partial_fit" in b for b in blocks)


def test_quickstart_is_what_the_fresh_venv_check_runs():
    text = open(README).read()
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [ln for ln in _blocks("bash", quick)[0].splitlines() if ln.strip()]
    assert commands[0] == "pip install -e . && lirs demo"
    script = open(os.path.join(ROOT, "tools", "fresh_venv_check.sh")).read()
    for c in commands:
        assert re.search(rf"^{re.escape(c)}$", script, re.M), f"tools/fresh_venv_check.sh does not run {c!r}"


def test_readme_is_short_and_its_links_lead_somewhere():
    text = open(README).read()
    assert len(text.splitlines()) <= 250, "the rest belongs in docs/"
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [x for x in links if not re.match(r"https?://", x)]
    assert any(x.startswith("docs/") for x in local)
    for x in local:
        assert os.path.exists(os.path.join(ROOT, x)), f"README links to {x}, which does not exist"


def _calls(code: str, names=("Loader", "make_dataloader")):
    import ast

    return [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
            and getattr(n.func, "attr", getattr(n.func, "id", None)) in names]


@pytest.mark.parametrize("i", range(len(_blocks())))
def test_readme_example_names_its_granularity_and_passes_keywords(i):
    calls = _calls(_blocks()[i])
    for c in calls:
        assert len(c.args) <= 2, f"README block {i}: everything after batch_size is a keyword"
        kw = {k.arg: k.value for k in c.keywords}
        assert "granularity" in kw, f"README block {i}: the example states its granularity"


def test_readme_summary_is_what_report_writes():
    report = benchmark_module("report")
    text = open(README).read()
    assert report.readme_with_summary(text) == text, "README's results summary is stale: python benchmarks/report.py"
    assert report.readme_summary() in text


def test_quickstart_figures_are_those_of_the_demo_json():
    import json

    quick = open(README).read().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    res = json.load(open(os.path.join(ROOT, "benchmarks", "results", "demo.json")))
    m = re.search(r"showcase: (\d+) s on 2 cores the first\s+time, (\d+) s of it numba", quick)
    assert m, "the quickstart states the demo's time as the JSON has it"
    assert (int(m[1]), int(m[2])) == (round(res["total_s"]), round(res["warmup_s"]))
    assert f"({res['n']:,} records)" in quick and f"for {res['epochs']} epochs" in quick
    assert set(res["methods"]) == {"lirs-instance", "lirs-window", "bmf", "shuffle_buffer", "sequential"}
    # the verdict the README describes is the steady-state one, with one-time costs set apart
    assert res["one_time"] and all("steady_epoch_s" in r for r in res["methods"].values())
    assert {x["axis"] for x in res["verdict"]} >= {"seconds_to_target", "epoch_s"}


@pytest.fixture(scope="module")
def kdd(tmp_path_factory):
    """A small kdd-like file, indexed: 4,000 records over kdd's 29.9M features, half of each label."""
    import lirs
    from lirs.eval.gen import generate

    d = tmp_path_factory.mktemp("readme")
    generate("kdd", str(d / "train.svm"), records=4000, seed=1, progress=False)
    lirs.build_index(str(d / "train.svm"), progress=False)
    with lirs.Loader(str(d / "train.svm"), 1024) as ld:
        assert ld.n_features > 29_000_000  # the size that made dense per-batch updates slow
    return d


def _accuracy(ns: dict, path: str) -> float | None:
    """Training accuracy of the model an example left in its namespace (None: no model)."""
    import lirs

    with lirs.Loader(path, 4000, granularity="instance") as ld:
        b = next(iter(ld.epoch(0)))
    y = b.y > 0
    if "clf" in ns:
        D = ns["D"]
        import scipy.sparse as sp

        X = sp.csr_matrix((b.X.data, b.X.indices % D, b.X.indptr), shape=(len(b.y), D))
        return float(np.mean((ns["clf"].decision_function(X) > 0) == y))
    w = ns.get("w")
    if isinstance(w, np.ndarray):
        return float(np.mean(((b.X @ w) > 0) == y))
    if hasattr(w, "weight"):  # the torch EmbeddingBag
        m = b.X @ w.weight.detach().numpy()[:, 0].astype(np.float64)
        return float(np.mean((m > 0) == y))
    return None


@pytest.mark.parametrize("i", range(len(_blocks())))
def test_readme_example_runs(kdd, monkeypatch, i):
    code = _blocks()[i]
    if "lirs.torch" in code:
        pytest.importorskip("torch", reason="the torch example needs the torch extra")
    monkeypatch.chdir(kdd)
    code = code.replace("range(10)", "range(2)").replace("range(5)", "range(2)").replace("data.svm", "train.svm")
    ns: dict = {}
    exec(compile(code, f"README block {i}", "exec"), ns)
    acc = _accuracy(ns, str(kdd / "train.svm"))
    if acc is not None:  # a training example: its model beats a constant guess (0.5 here)
        assert acc > 0.6, f"README block {i}: training accuracy {acc:.3f}"


def test_pitch_figures_are_those_of_the_frontier_json():
    # the opening paragraph quotes lirs window at 5% of the data from the measured frontier
    import json

    head = open(README).read().split("## Quickstart", 1)[0]
    res = json.load(open(os.path.join(ROOT, "benchmarks", "results", "quality_frontier.json")))
    row = next(r for r in res["rows"] if r["strategy"] == "window" and r["memory"] == "5%")
    text = " ".join(head.split())
    m = re.search(r"batch pairs meet again ([\d.]+)× as often.*share a group (\d+)× as often.*reads ([\d.]+)× "
                  r"the data", text)
    assert m, "the pitch states the frontier's figures at 5%"
    assert float(m[1]) == round(row["pairs_again_x"], 2)
    assert int(m[2]) == round(row["same_group_x"])
    assert float(m[3]) == round(row["read_x"], 2)
